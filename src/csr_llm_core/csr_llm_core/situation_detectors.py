"""One detector per sensed situation kind, each owning its hysteresis state (plain module, no rclpy).

A detector takes one plausible reading with its sensor stamp and returns the lines due. Its state
follows the readings with hysteresis (a state is left only past a band beyond its threshold) and
dwell times; ``ReportLatch`` then reports that state at most once per ``min_interval_s`` of sensor
time. A state that flips back and forth within the interval is reported as it is once the interval
has passed, from the state last reported, so the lines never lag reality by more than the
interval and a flapping reading costs at most one line per interval.

Readings stamped before the detector's newest one are ignored (out of order).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Generic, List, Optional, Tuple, TypeVar

from .situations_config import GripConfig, ProximityConfig, SlipConfig, TemperatureConfig, ZoneConfig

S = TypeVar("S")
EPS = 1e-9      # stamps differences this close to a dwell or an interval count as reaching it


@dataclass(frozen=True)
class SensedLine:
    """A line the robot knows from its own sensing, stamped with the reading's sensor time."""
    stamp: float
    kind: str        # proximity, grip, zone, temperature, slip, task, sub_task, reflex
    text: str


class ReportLatch(Generic[S]):
    """The state last reported and when: a new state is reported at most once per min_interval_s."""

    def __init__(self, initial: S, min_interval_s: float):
        self.reported: S = initial
        self.min_interval_s = float(min_interval_s)
        self._last = -math.inf

    def report(self, state: S, stamp: float) -> Optional[Tuple[S, S]]:
        """(previous, new) when ``state`` is to be reported now, else None."""
        if state == self.reported or stamp - self._last < self.min_interval_s - EPS:
            return None
        previous, self.reported, self._last = self.reported, state, stamp
        return previous, state


class Dwell(Generic[S]):
    """How long a raw reading has held its current value (plus EPS: a dwell reached up to rounding counts)."""

    def __init__(self) -> None:
        self.value: Optional[S] = None
        self.since = -math.inf

    def held(self, value: S, stamp: float) -> float:
        if value != self.value:
            self.value, self.since = value, stamp
        return stamp - self.since + EPS


class _Ordered:
    """Drops readings stamped before the newest one taken."""

    def __init__(self) -> None:
        self.newest = -math.inf

    def fresh(self, stamp: float) -> bool:
        if not math.isfinite(stamp) or stamp < self.newest:
            return False
        self.newest = stamp
        return True


def _line(kind: str, stamp: float, template: str, **fields: Any) -> SensedLine:
    return SensedLine(stamp, kind, template.format(**fields))


FAR, NEAR, CLOSE = "far", "near", "close"


class ProximityDetector:
    """Person approaching / close / moving away / gone from the proximity range."""

    def __init__(self, config: ProximityConfig):
        self.config = config
        self.state = FAR
        self.latch: ReportLatch[str] = ReportLatch(FAR, config.min_interval_s)
        self._order = _Ordered()

    def _next_state(self, distance: float) -> str:
        c, band = self.config, self.config.hysteresis_m
        if distance < c.close_m or (self.state == CLOSE and distance <= c.close_m + band):
            return CLOSE
        if distance < c.approach_m or (self.state != FAR and distance <= c.approach_m + band):
            return NEAR
        return FAR

    def update(self, distance: float, stamp: float) -> List[SensedLine]:
        """``distance`` in m (+inf: nobody in range)."""
        if not self._order.fresh(stamp):
            return []
        self.state = self._next_state(distance)
        change = self.latch.report(self.state, stamp)
        if change is None:
            return []
        previous, state = change
        key = {CLOSE: "close", FAR: "gone"}.get(state) or ("moving_away" if previous == CLOSE else "approaching")
        return [_line("proximity", stamp, self.config.wording[key], distance=distance)]


HOLDING, EMPTY = "holding", "empty"


@dataclass(frozen=True)
class GripState:
    """What the gripper holds now, as the grip detector judges it."""
    holding: bool
    force: float
    object: str


class GripDetector:
    """Object gripped / dropped / released from the grip force and the router's running task."""

    def __init__(self, config: GripConfig):
        self.config = config
        self.state = EMPTY
        self.force = 0.0
        self.object = config.default_object
        self.latch: ReportLatch[str] = ReportLatch(EMPTY, config.min_interval_s)
        self._dwell: Dwell[Optional[str]] = Dwell()
        self._order = _Ordered()
        self._intent = self._sub_task = ""
        self._gripped_during = ""       # the intent that ran when the grip was taken

    def set_task(self, intent: str, sub_task: str) -> None:
        """The router's running task (names the object, tells a drop from a release)."""
        self._intent, self._sub_task = intent, sub_task

    def grip_state(self) -> GripState:
        return GripState(self.state == HOLDING, self.force, self.object)

    def update(self, force: float, stamp: float) -> List[SensedLine]:
        """``force``: the norm of the gripper's force [N]."""
        if not self._order.fresh(stamp):
            return []
        self.force = force
        c = self.config
        raw = HOLDING if force >= c.grip_n else EMPTY if force <= c.release_n else None
        held = self._dwell.held(raw, stamp)
        if raw is not None and raw != self.state and held >= c.dwell_s:
            self.state = raw
            if raw == HOLDING:
                self.object = c.objects.get(self._sub_task, c.default_object)
                self._gripped_during = self._intent
        change = self.latch.report(self.state, stamp)
        if change is None:
            return []
        if change[1] == HOLDING:
            key = "gripped"
        else:
            key = "dropped" if self._gripped_during and self._intent == self._gripped_during else "released"
        return [_line("grip", stamp, c.wording[key], object=self.object, force=force)]


class ZoneDetector:
    """Arrived in a zone, from the localisation's zone name."""

    def __init__(self, config: ZoneConfig):
        self.config = config
        self.state: Optional[str] = None
        self.latch: ReportLatch[Optional[str]] = ReportLatch(None, config.min_interval_s)
        self._dwell: Dwell[str] = Dwell()
        self._order = _Ordered()

    def update(self, zone: str, stamp: float) -> List[SensedLine]:
        """``zone``: a bounded, non-empty zone name."""
        if not self._order.fresh(stamp):
            return []
        if self._dwell.held(zone, stamp) >= self.config.dwell_s:
            self.state = zone
        change = self.latch.report(self.state, stamp)
        if change is None or (change[0] is None and not self.config.announce_initial):
            return []
        arrived = str(change[1])
        place = self.config.places.get(arrived) or self.config.default_place.format(zone=arrived)
        return [_line("zone", stamp, self.config.wording["arrived"], zone=arrived, place=place)]


NORMAL, WARM, HOT, COOLED = "normal", "warm", "hot", "cooled"   # COOLED: below the limit again, still warm


class _MotorTemperature:
    def __init__(self, config: TemperatureConfig):
        self.state = NORMAL
        self.latch: ReportLatch[str] = ReportLatch(NORMAL, config.min_interval_s)
        self.order = _Ordered()


class TemperatureDetector:
    """Per motor: heating up / above the limit / cooled down."""

    def __init__(self, config: TemperatureConfig, max_motors: int):
        self.config = config
        self.max_motors = max_motors
        self.motors: Dict[str, _MotorTemperature] = {}

    def _next_state(self, state: str, celsius: float) -> str:
        c = self.config
        if celsius >= c.limit_c:
            return HOT
        if state == HOT:
            return COOLED if celsius <= c.limit_c - c.hysteresis_c else HOT
        if celsius <= c.warm_c - c.hysteresis_c:
            return NORMAL
        if state == NORMAL and celsius >= c.warm_c:
            return WARM
        return state

    def update(self, motor: str, celsius: float, stamp: float) -> List[SensedLine]:
        """``motor``: a bounded name. Motors past ``max_motors`` are not tracked."""
        entry = self.motors.get(motor)
        if entry is None:
            if len(self.motors) >= self.max_motors:
                return []
            entry = self.motors[motor] = _MotorTemperature(self.config)
        if not entry.order.fresh(stamp):
            return []
        entry.state = self._next_state(entry.state, celsius)
        change = entry.latch.report(entry.state, stamp)
        if change is None:
            return []
        previous, state = change
        key = {HOT: "hot", WARM: "heating", COOLED: "cooled"}.get(state)
        if state == NORMAL:
            key = "cooled" if previous in (WARM, HOT) else None   # after COOLED: already said
        if key is None:
            return []
        c = self.config
        return [_line("temperature", stamp, c.wording[key], motor=motor, celsius=celsius, limit=c.limit_c,
                      warm=c.warm_c)]


SLIPPING, GRIPPING = "slipping", "gripping"


class SlipDetector:
    """Slipping / back on grip, from the router's slip flag (IMU against wheel odometry)."""

    def __init__(self, config: SlipConfig):
        self.config = config
        self.state = GRIPPING
        self.latch: ReportLatch[str] = ReportLatch(GRIPPING, config.min_interval_s)
        self._dwell: Dwell[bool] = Dwell()
        self._order = _Ordered()

    def update(self, slip_detected: bool, stamp: float) -> List[SensedLine]:
        if not self._order.fresh(stamp):
            return []
        held = self._dwell.held(slip_detected, stamp)
        if slip_detected and held >= self.config.confirm_s:
            self.state = SLIPPING
        elif not slip_detected and held >= self.config.regain_s:
            self.state = GRIPPING
        change = self.latch.report(self.state, stamp)
        if change is None:
            return []
        key = "slipping" if change[1] == SLIPPING else "regained"
        return [_line("slip", stamp, self.config.wording[key])]
