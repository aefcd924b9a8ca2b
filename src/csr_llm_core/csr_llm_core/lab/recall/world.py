"""A household robot's day as the aggregator's chunk stream, with the ground truth the questions use.

The robot drives between rooms, picks objects up and puts them down, works with its arm (motors
warm up) and backs off when a person comes close. Sensor samples go through the real `Aggregator`
(`decision_situations.Script`), so the continuous chunks are exactly what the aggregator node
emits; what happens is said on `events` in robot-log language with distinct words (one room, one
object per event), and every event is also kept as a `Fact` with its step index: the questions are
computed from the facts, never from the text.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from ...aggregator import KIND_EVENT
from ..decision_situations import Script
from .episode import Step

ROOMS = ("kitchen", "garage", "pantry", "attic", "cellar", "laundry", "study", "balcony", "nursery",
         "workshop", "library", "porch")
OBJECTS = ("hammer", "kettle", "pillow", "umbrella", "guitar", "stapler", "teapot", "blanket", "lantern",
           "trumpet", "wrench", "basket", "candle", "bucket", "ladder", "helmet", "violin", "scissors",
           "mirror", "toaster")
NEVER_TOUCHED = 4           # objects of the vocabulary kept out of every history (presence negatives)
ARM_POSES = ((0.3, 0.7, -1.0, 0.3, 0.02), (0.0, 0.9, -0.6, 0.2, 0.04), (-0.4, 0.5, -0.8, 0.1, 0.0))
HOT_JOINTS = ("arm_elbow", "arm_shoulder_lift", "arm_wrist")


@dataclass(frozen=True)
class Fact:
    """One thing that happened: kind enter|pick|place|person, at step `step` (index into the steps)."""
    kind: str
    t: float
    step: int
    room: str = ""
    obj: str = ""


@dataclass
class History:
    steps: List[Step]
    facts: List[Fact]
    unused_objects: Tuple[str, ...]    # never mentioned in this history


def estimate_tokens(text: str) -> int:
    """Rough token count (about 3 characters per token for this log text) when no tokenizer is at hand."""
    return max(1, len(text) // 3)


class _Day:
    def __init__(self, rng: random.Random, count_tokens: Callable[[str], int]):
        self.rng = rng
        self.count_tokens = count_tokens
        self.script = Script()
        self.facts: List[Fact] = []
        self.tokens = 0
        self.counted = 0
        self.room = rng.choice(ROOMS)
        objects = list(OBJECTS)
        rng.shuffle(objects)
        self.unused = tuple(objects[:NEVER_TOUCHED])
        self.pool = objects[NEVER_TOUCHED:]
        self.where: Dict[str, str] = {}       # object -> room it was last put in
        self.held: Optional[str] = None

    def _count(self) -> None:
        for chunk in self.script.chunks[self.counted:]:
            self.tokens += self.count_tokens(chunk.text + "\n")
        self.counted = len(self.script.chunks)

    def event(self, kind: str, text: str, **fact: str) -> None:
        self.script.say(text)
        chunk = self.script.chunks[-1]
        self.facts.append(Fact(kind, chunk.stamp, len(self.script.chunks) - 1, **fact))
        self._count()

    def work(self, seconds: float) -> None:
        rng = self.rng
        heat = (rng.choice(HOT_JOINTS), rng.uniform(0.2, 1.5)) if rng.random() < 0.5 else None
        self.script.run(seconds, v=0.0, arm=rng.choice(ARM_POSES), heat=heat)
        self._count()

    def move(self) -> None:
        self.room = self.rng.choice([r for r in ROOMS if r != self.room])
        self.script.run(self.rng.uniform(1.0, 2.0), v=self.rng.choice((0.3, -0.3, 0.2)))
        self.script.run(0.5, v=0.0)
        self.event("enter", f"entered the {self.room}", room=self.room)

    def pick(self) -> None:
        here = [o for o, r in self.where.items() if r == self.room]
        fresh = [o for o in self.pool if o not in self.where]
        if not here and not fresh:
            return
        obj = self.rng.choice(here) if here and (self.rng.random() < 0.7 or not fresh) else self.rng.choice(fresh)
        self.where.pop(obj, None)           # in the gripper now
        self.script.run(1.0, arm=ARM_POSES[1], grip=12.0)
        self.held = obj
        self.event("pick", f"{self.room}: picked up the {obj}", room=self.room, obj=obj)

    def place(self) -> None:
        obj, self.held = self.held, None
        assert obj is not None
        self.script.run(1.0, arm=ARM_POSES[0], grip=0.0)
        self.where[obj] = self.room
        self.event("place", f"put down the {obj} in the {self.room}", room=self.room, obj=obj)

    def person(self) -> None:
        distance = self.rng.choice((0.3, 0.4, 0.5))
        self.event("person", f"person came close ({distance:.1f} m), robot backed off", room=self.room)
        self.script.run(1.0, v=-0.1)


def generate_history(seed: int, target_tokens: int,
                     count_tokens: Callable[[str], int] = estimate_tokens) -> History:
    """A history of about `target_tokens` (chunk lines, counted with `count_tokens`), same for a seed."""
    rng = random.Random(seed)
    day = _Day(rng, count_tokens)
    # 1-4 person visits at random points of the history (so a count question has one answer in 1..4)
    visits = sorted(rng.uniform(0.05, 0.95) * target_tokens for _ in range(rng.randint(1, 4)))
    day.work(1.0)
    day.move()
    while day.tokens < target_tokens:
        if visits and day.tokens >= visits[0]:
            visits.pop(0)
            day.person()
        roll = rng.random()
        if day.held is not None and roll < 0.45:
            day.place()
        elif day.held is None and roll < 0.45:
            day.pick()
        elif roll < 0.8:
            day.move()
        day.work(rng.uniform(0.5, 2.0))
    for _ in visits:                        # the estimate ran short: the visits still happen, at the end
        day.person()
    chunks = day.script.chunks
    steps = [Step(c.stamp, c.text) for c in chunks]
    assert all(chunks[f.step].kind == KIND_EVENT for f in day.facts)
    return History(steps, day.facts, day.unused)
