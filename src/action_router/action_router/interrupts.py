"""Priority stack of what commands the robot (plain module, no rclpy).

The bottom frame is the decided task (or the unknown-scene protocol after a level-1 miss);
interrupts (the reflexes, ``reflexes.py``) push frames on top and can nest. Only the top frame
commands, and it commands every actuator group (arm and base), unless the execution layer's
failure flag hands both groups to the safe-stop ramp. ``Arbiter.assign`` therefore yields exactly
one source per group per tick: the robot can never be told "forward" and "stop" at once.

A frame runs its sub-tasks in order. When an interrupt frame pops, the frame below resumes: its
running sub-task is re-planned from the current joint state (the template phase where it was
interrupted is kept; the blend joins the current state back onto the template).

A decision of a pausing intent (catalogue `pauses_task`: stop, hold_position, back_off) that
displaces an unfinished task keeps that task as paused (`InterruptStack.set_task`, by
`IntentCatalogue.paused_after`); the status reports it, so the next decision can resume it. A
decision that runs a task clears it.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, List, Optional

import numpy as np

from csr_llm_common.catalogue import IntentCatalogue, PausedTask

# MotorCommand.SOURCE_* values (kept here so this module stays free of ROS imports)
SOURCE_NONE = 0
SOURCE_TASK = 1
SOURCE_INTERRUPT = 2
SOURCE_UNKNOWN_SCENE = 3
SOURCE_SAFE_STOP = 4

GROUPS = ("arm", "base")
LOG_LENGTH = 256     # push/pop/resume events kept (a long run must not grow the log without bound)


@dataclass
class Frame:
    """One entry of the stack: a sequence of sub-tasks (global sub-task indices)."""
    source: int
    name: str                         # intent name, interrupt name, or "unknown_scene"
    subtasks: List[int]
    intent_index: int = -1            # task frames: index of the intent (for level 1)
    args: Dict[str, object] = field(default_factory=dict)
    decided: Dict[str, Any] = field(default_factory=dict)   # task frames: the decision's own arguments
    index: int = 0                    # running sub-task position in `subtasks`
    started: bool = False             # the running sub-task has been (re)started
    needs_resume: bool = False        # re-plan from the current state before continuing
    phase: float = 0.0                # template time elapsed in the running sub-task [s]
    run_since: float = 0.0            # time the running sub-task last (re)started
    base_travel: float = 0.0          # base distance covered in the running sub-task [m]
    start_time: float = 0.0           # time the running sub-task first started, moved on by the time held (timeouts)
    last_step: float = 0.0            # the last tick the running sub-task ran (the hold before a resume)
    matched_sim: float = 1.0          # level-1 similarity the running sub-task started with
    start_key: Optional[np.ndarray] = None     # the level-1 key the running sub-task started from
    trigger_active: bool = True       # interrupts: the trigger condition still holds
    variant: str = ""                 # task frames: the scene variant level 1 chose ("" = none/default)
    scene_checked: bool = False       # the scene lookup ran for this task

    @property
    def done(self) -> bool:
        return self.index >= len(self.subtasks)

    @property
    def current(self) -> int:
        return self.subtasks[self.index] if not self.done else -1

    def advance(self) -> None:
        self.index += 1
        self.started = False
        self.phase = 0.0
        self.base_travel = 0.0


class InterruptStack:
    """Frames, bottom = task, top = what commands now."""

    def __init__(self) -> None:
        self.frames: List[Frame] = []
        self.log: Deque[str] = collections.deque(maxlen=LOG_LENGTH)  # last push/pop/resume events, in order
        self.paused: Optional[PausedTask] = None     # the task a pausing decision displaced

    @property
    def top(self) -> Optional[Frame]:
        return self.frames[-1] if self.frames else None

    @property
    def depth(self) -> int:
        """Interrupt frames active now."""
        return sum(1 for f in self.frames if f.source == SOURCE_INTERRUPT)

    def active_interrupts(self) -> List[str]:
        return [f.name for f in self.frames if f.source == SOURCE_INTERRUPT]

    def set_base(self, frame: Optional[Frame]) -> None:
        """Replace the bottom (task / unknown-scene) frame, keeping interrupts above it."""
        interrupts = [f for f in self.frames if f.source == SOURCE_INTERRUPT]
        self.frames = ([frame] if frame is not None else []) + interrupts
        if frame is not None:
            self.log.append(f"base:{frame.name}")
            if interrupts:
                frame.needs_resume = True

    def set_task(self, frame: Frame, catalogue: IntentCatalogue) -> None:
        """A decided task replaces the base frame; what it displaces may become the paused task."""
        self.paused = catalogue.paused_after(unfinished_task(self.base()), self.paused, frame.name)
        self.set_base(frame)

    def base(self) -> Optional[Frame]:
        return self.frames[0] if self.frames and self.frames[0].source != SOURCE_INTERRUPT else None

    def push(self, frame: Frame) -> None:
        if self.top is not None:
            self.top.needs_resume = True
        self.frames.append(frame)
        self.log.append(f"push:{frame.name}")

    def pop(self, frame: Frame) -> None:
        self.frames.remove(frame)
        self.log.append(f"pop:{frame.name}")
        if self.top is not None:
            self.top.needs_resume = True
            self.log.append(f"resume:{self.top.name}")


def unfinished_task(frame: Optional[Frame]) -> Optional[PausedTask]:
    """The decided task a base frame runs, while it is not done (what a pausing decision pauses)."""
    if frame is None or frame.source != SOURCE_TASK or frame.intent_index < 0 or frame.done:
        return None
    return PausedTask(frame.name, dict(frame.decided))


class Arbiter:
    """One source per actuator group per tick."""

    def __init__(self) -> None:
        self.sources: Dict[str, int] = {g: SOURCE_NONE for g in GROUPS}

    def assign(self, top: Optional[Frame], failsafe: bool) -> Dict[str, int]:
        if failsafe:
            src = SOURCE_SAFE_STOP
        elif top is None or top.done:
            src = SOURCE_NONE
        else:
            src = top.source
        for g in GROUPS:
            self.sources[g] = src
        return self.sources
