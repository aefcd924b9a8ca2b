"""Question families computed from a history's ground truth (`world.Fact`s), 4 choices where possible.

Each family suits a small model as far as the family allows: the answer is one distinct word and,
except for counting and order, rests on one salient event chunk. Distractors come from the same
history (rooms and objects that did appear), so a choice cannot be told apart by never appearing.

    recall          "events: <room>: picked up the" ___            (the one pick-up there; cloze)
    state_at_time   "[<t>s] events: entered the" ___               (the room it entered at t; cloze)
    state_updating  "events: put down the <object> in the" ___     (put down at least twice: the last; cloze)
    counting        how many times did a person come close? / did it pick up the <object>?
    order           which of these did the robot pick up first?
    presence        did the robot pick up the <object>? yes/no     (negatives: objects never in the log)
"""
from __future__ import annotations

import random
from collections import Counter, defaultdict
from typing import Callable, Dict, List, Optional, Sequence

from .episode import Question
from .world import OBJECTS, ROOMS, Fact, History

FAMILIES = ("recall", "state_at_time", "state_updating", "counting", "order", "presence")
COUNT_WORDS = ("once", "twice", "three times", "four times")


def _choices(rng: random.Random, answer: str, pool: Sequence[str], first: Sequence[str] = ()) -> Optional[List[str]]:
    """Answer + 3 distractors (those in `first` preferred, then the pool), shuffled; None if too few."""
    distractors = [d for d in dict.fromkeys(first) if d != answer][:3]
    rest = [d for d in dict.fromkeys(pool) if d != answer and d not in distractors]
    rng.shuffle(rest)
    distractors += rest[:3 - len(distractors)]
    if len(distractors) < 3:
        return None
    choices = [answer] + distractors
    rng.shuffle(choices)
    return choices


def _question(q: str, choices: Optional[List[str]], answer: str, family: str, evidence: Sequence[int],
              form: str = "chat") -> Optional[Question]:
    if choices is None:
        return None
    return Question(q, tuple(choices), choices.index(answer), family, tuple(sorted(evidence)), form)


def recall(h: History, rng: random.Random) -> List[Question]:
    picks = [f for f in h.facts if f.kind == "pick"]
    by_room: Dict[str, List[Fact]] = defaultdict(list)
    for f in picks:
        by_room[f.room].append(f)
    objects = [f.obj for f in picks]
    out = []
    for room, facts in by_room.items():
        if len(facts) == 1:
            fact = facts[0]
            out.append(_question(f"events: {room}: picked up the",
                                 _choices(rng, fact.obj, OBJECTS, objects), fact.obj, "recall", [fact.step], "cloze"))
    return [q for q in out if q is not None]


def state_at_time(h: History, rng: random.Random) -> List[Question]:
    enters = [f for f in h.facts if f.kind == "enter"]
    rooms = [f.room for f in enters]
    out = [_question(f"[{f.t:.1f}s] events: entered the", _choices(rng, f.room, ROOMS, rooms), f.room,
                     "state_at_time", [f.step], "cloze") for f in enters[1:]]
    return [q for q in out if q is not None]


def state_updating(h: History, rng: random.Random) -> List[Question]:
    places: Dict[str, List[Fact]] = defaultdict(list)
    for f in h.facts:
        if f.kind == "place":
            places[f.obj].append(f)
    out = []
    for obj, facts in places.items():
        if len(facts) >= 2:
            last = facts[-1]
            earlier = [f.room for f in reversed(facts[:-1])]        # the stale answers first
            out.append(_question(f"events: put down the {obj} in the",
                                 _choices(rng, last.room, ROOMS, earlier), last.room, "state_updating",
                                 [last.step], "cloze"))
    return [q for q in out if q is not None]


def counting(h: History, rng: random.Random) -> List[Question]:
    out = []
    visits = [f for f in h.facts if f.kind == "person"]
    if 1 <= len(visits) <= len(COUNT_WORDS):
        answer = COUNT_WORDS[len(visits) - 1]
        out.append(_question("How many times did a person come close to the robot?",
                             _choices(rng, answer, COUNT_WORDS), answer, "counting", [f.step for f in visits]))
    picks: Dict[str, List[Fact]] = defaultdict(list)
    for f in h.facts:
        if f.kind == "pick":
            picks[f.obj].append(f)
    for obj, facts in picks.items():
        if len(facts) <= len(COUNT_WORDS):
            answer = COUNT_WORDS[len(facts) - 1]
            out.append(_question(f"How many times did the robot pick up the {obj}?",
                                 _choices(rng, answer, COUNT_WORDS), answer, "counting", [f.step for f in facts]))
    return [q for q in out if q is not None]


def order(h: History, rng: random.Random) -> List[Question]:
    first_pick: Dict[str, Fact] = {}
    for f in h.facts:
        if f.kind == "pick" and f.obj not in first_pick:
            first_pick[f.obj] = f
    facts = list(first_pick.values())
    out = []
    for _ in range(len(facts) // 4):
        chosen = sorted(rng.sample(facts, 4), key=lambda f: f.t)
        choices = [f.obj for f in chosen]
        rng.shuffle(choices)
        out.append(_question("Which of these objects did the robot pick up first?", choices, chosen[0].obj,
                             "order", [f.step for f in chosen]))
    return [q for q in out if q is not None]


def presence(h: History, rng: random.Random) -> List[Question]:
    picked = list(dict.fromkeys(f.obj for f in h.facts if f.kind == "pick"))
    first_step: Dict[str, int] = {}
    for f in h.facts:
        if f.kind == "pick":
            first_step.setdefault(f.obj, f.step)
    out = []
    for obj in picked:
        out.append(Question(f"Did the robot pick up the {obj}?", ("yes", "no"), 0, "presence", (first_step[obj],)))
    for obj in h.unused_objects:
        out.append(Question(f"Did the robot pick up the {obj}?", ("yes", "no"), 1, "presence", ()))
    return out


GENERATORS: Dict[str, Callable[[History, random.Random], List[Question]]] = {
    "recall": recall, "state_at_time": state_at_time, "state_updating": state_updating,
    "counting": counting, "order": order, "presence": presence}


def make_questions(h: History, seed: int, per_family: int, families: Sequence[str] = FAMILIES) -> List[Question]:
    """Up to `per_family` questions of each family (presence: half yes, half no), drawn with `seed`."""
    rng = random.Random(seed)
    out: List[Question] = []
    for family in families:
        candidates = GENERATORS[family](h, rng)
        if family == "presence":
            yes = [q for q in candidates if q.answer == 0]
            no = [q for q in candidates if q.answer == 1]
            half = max(1, per_family)
            out += rng.sample(yes, min(half, len(yes))) + rng.sample(no, min(half, len(no)))
        else:
            out += balanced_sample(candidates, per_family, rng)
    return out


def balanced_sample(questions: Sequence[Question], n: int, rng: random.Random) -> List[Question]:
    """Up to n questions drawn round-robin over their correct answers, so no answer word dominates."""
    groups: Dict[str, List[Question]] = defaultdict(list)
    for q in questions:
        groups[q.choices[q.answer]].append(q)
    pools = [rng.sample(g, len(g)) for _, g in sorted(groups.items())]
    rng.shuffle(pools)
    out: List[Question] = []
    while len(out) < n and any(pools):
        for pool in pools:
            if pool and len(out) < n:
                out.append(pool.pop())
    return out


def family_counts(questions: Sequence[Question]) -> Dict[str, int]:
    return dict(Counter(q.family for q in questions))
