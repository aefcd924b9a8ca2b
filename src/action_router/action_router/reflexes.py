"""Reflexes: typed triggers that push interrupt frames within the tick (plain module, no rclpy).

A reflex reacts in the tick its cause is detected and resumes by itself when the cause clears; no
decision is waited for either way (docs/reflexes.md lists which situations are reflexes and why).
Each configured interrupt (config/router_subtasks.yaml ``interrupts:``) has one trigger:

  * ``proximity_below``: a person nearer than a distance (cleared above it + ``proximity_hysteresis``);
  * ``temperature_above``: a motor over the router's ``temperature_limit`` (the temperature
    monitor's own hysteresis: cleared below ``temperature_limit - temperature_hysteresis``);
  * ``slip``: the router's slip detection (wheels and IMU disagree, confirmed over keys) while the
    router drives the base;
  * ``contact_above``: gripper wrench force above a threshold while no grip sub-task runs (cleared
    below it - ``contact_hysteresis``). A force already present when a grip ends (an object held)
    is no contact: the trigger arms only once the force was below the clear level without a grip.

A rising edge of the trigger (not while the failure flag is set) pushes the interrupt's sub-tasks
as a frame; the frame pops from the top once its sub-tasks settle and the trigger has stayed
cleared for ``clear_dwell_s``; the frame below resumes re-planned from the current state.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, List, Sequence, Tuple, Union

from .interrupts import SOURCE_INTERRUPT, Frame, InterruptStack

TRIGGER_KINDS = ("proximity_below", "temperature_above", "slip", "contact_above")


@dataclass(frozen=True)
class ReflexSignals:
    """What the triggers read in one tick."""
    now: float
    proximity: float = math.inf     # the nearest person [m]; inf when the range is stale
    hot: bool = False               # a motor is over temperature (the router's temperature monitor)
    slipping: bool = False          # the slip detection holds a slip now
    base_driven: bool = False       # the last command moved the base (a slip matters only then)
    force: float = 0.0              # gripper wrench |F| [N]; 0 when stale
    gripping: bool = False          # a grip sub-task (grip done or gripper held closed) runs in the stack


class ProximityTrigger:
    def __init__(self, distance: float, hysteresis: float):
        self.distance = float(distance)
        self.hysteresis = float(hysteresis)

    def fires(self, s: ReflexSignals) -> bool:
        return s.proximity < self.distance

    def cleared(self, s: ReflexSignals) -> bool:
        return s.proximity > self.distance + self.hysteresis

    def describe(self, s: ReflexSignals) -> str:
        return f"person at {s.proximity:.2f} m < {self.distance:.2f} m"


class TemperatureTrigger:
    """Any motor over the limit (the router's temperature monitor decides, with its hysteresis)."""

    def __init__(self, limit: float, cool_below: float):
        self.limit = float(limit)
        self.cool_below = float(cool_below)

    def fires(self, s: ReflexSignals) -> bool:
        return s.hot

    def cleared(self, s: ReflexSignals) -> bool:
        return not s.hot

    def describe(self, s: ReflexSignals) -> str:
        return f"motor over {self.limit:g} C: hold until it cools below {self.cool_below:g} C"


class SlipTrigger:
    """A slip while the router drives the base (pushed by hand, the base slipping is no reflex's)."""

    def fires(self, s: ReflexSignals) -> bool:
        return s.slipping and s.base_driven

    def cleared(self, s: ReflexSignals) -> bool:
        return not s.slipping

    def describe(self, s: ReflexSignals) -> str:
        return "base slipping (wheels and IMU disagree): hold until grip is regained"


class ContactTrigger:
    """Force above ``force`` while no grip sub-task runs; armed only after a clear reading without a grip."""

    def __init__(self, force: float, hysteresis: float):
        self.force = float(force)
        self.clear_below = float(force) - float(hysteresis)
        self.armed = False

    def fires(self, s: ReflexSignals) -> bool:
        if s.gripping:
            self.armed = False
        elif s.force < self.clear_below:
            self.armed = True
        return self.armed and s.force > self.force

    def cleared(self, s: ReflexSignals) -> bool:
        return s.force < self.clear_below

    def describe(self, s: ReflexSignals) -> str:
        return f"unexpected contact: {s.force:.1f} N > {self.force:g} N with no grip running"


Trigger = Union[ProximityTrigger, TemperatureTrigger, SlipTrigger, ContactTrigger]


@dataclass(frozen=True)
class ReflexSpec:
    """One interrupt: its trigger pushes ``subtasks`` (global indices) and emits ``sound``."""
    name: str
    trigger: Trigger
    subtasks: Tuple[int, ...]
    sound: str = ""
    clear_dwell_s: float = 0.0      # the trigger stays cleared this long before the frame may pop


@dataclass(frozen=True)
class InterruptUpdate:
    changed: bool = False             # frames were pushed or popped (the behaviour layer is stale)
    sounds: Tuple[str, ...] = ()
    messages: Tuple[str, ...] = ()    # one line per reflex that fired or cleared


class Reflexes:
    """Rising edges of the triggers push frames; cleared (with hysteresis and dwell) and settled
    interrupt frames pop from the top, and what they interrupted resumes."""

    def __init__(self, specs: Sequence[ReflexSpec]):
        self.specs = list(specs)
        self.latched = [False] * len(self.specs)
        self.clear_since = [math.nan] * len(self.specs)

    def reset(self) -> None:
        self.latched = [False] * len(self.specs)
        self.clear_since = [math.nan] * len(self.specs)

    def update(self, signals: ReflexSignals, stack: InterruptStack, failure: bool,
               settled: Callable[[Frame], bool]) -> InterruptUpdate:
        now = signals.now
        changed = False
        sounds: List[str] = []
        messages: List[str] = []
        for i, spec in enumerate(self.specs):
            fires = spec.trigger.fires(signals)
            if fires and not self.latched[i] and not failure:
                self.latched[i] = True
                self.clear_since[i] = math.nan
                prev = stack.top
                if prev is not None and prev.started and not prev.needs_resume:
                    prev.phase += now - prev.run_since
                stack.push(Frame(SOURCE_INTERRUPT, spec.name, list(spec.subtasks)))
                changed = True
                if spec.sound:
                    sounds.append(spec.sound)
                messages.append(f"interrupt {spec.name}: {spec.trigger.describe(signals)}")
            elif self.latched[i]:
                self._update_clear(i, spec, spec.trigger.cleared(signals), now)
            for f in stack.frames:
                if f.source == SOURCE_INTERRUPT and f.name == spec.name:
                    f.trigger_active = self.latched[i]
        # pop settled interrupts from the top whose trigger has cleared
        while True:
            top = stack.top
            if top is None or top.source != SOURCE_INTERRUPT or top.trigger_active or not settled(top):
                break
            stack.pop(top)
            changed = True
            below = stack.top
            messages.append(f"interrupt {top.name} cleared: "
                            + (f"{below.name or 'hold'} resumes" if below is not None else "nothing to resume"))
        return InterruptUpdate(changed, tuple(sounds), tuple(messages))

    def _update_clear(self, i: int, spec: ReflexSpec, cleared: bool, now: float) -> None:
        if not cleared:
            self.clear_since[i] = math.nan
            return
        if math.isnan(self.clear_since[i]):
            self.clear_since[i] = now
        if now - self.clear_since[i] >= spec.clear_dwell_s - 1e-9:
            self.latched[i] = False
            self.clear_since[i] = math.nan
