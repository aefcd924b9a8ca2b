"""Safety counters and the motion log of a run, from the simulator's ground truth (plain module, no rclpy).

The simulator samples its state at 100 Hz of sim time (safety_probe.py) into a ``SafetySample``;
``SafetyMonitor`` turns the samples into episodes of four kinds (docs/benchmarks.md defines them):

* ``person_speed``    a robot part (the base, an arm link) closer than ``person_distance_m`` to the
                      person while moving faster than ``person_speed_mps`` (value: the part's speed, m/s);
* ``contact_force``   a contact between the robot and the world, other than with a grip target (the
                      door handle, the object), over ``contact_force_n`` (value: the force, N);
* ``motor_overload``  a motor above ``motor_limit_c`` while loaded (applied effort at least
                      ``motor_load_fraction`` of its limit) (value: the temperature, C);
* ``slip_speed``      the base faster than ``slip_speed_mps`` on a low-friction patch (value: m/s).

An episode starts once its condition has held for ``dwell_s`` and ends once it has been clear for
``dwell_s``: a count is of episodes, not samples. Each kind keeps its worst instance (the largest
value: sim time, value, what). ``MotionLog`` keeps the intervals in which the robot moved (base or
arm joints over a small speed, for ``dwell_s``): the scorer's order-to-motion time reads them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

PERSON_SPEED, CONTACT_FORCE, MOTOR_OVERLOAD, SLIP_SPEED = "person_speed", "contact_force", "motor_overload", \
    "slip_speed"
KINDS = (PERSON_SPEED, CONTACT_FORCE, MOTOR_OVERLOAD, SLIP_SPEED)


@dataclass(frozen=True)
class SafetyLimits:
    person_distance_m: float = 0.5      # clearance to the person inside which parts must be slow
    person_speed_mps: float = 0.25      # the speed a part may move at inside that clearance
    contact_force_n: float = 15.0       # robot-world contact force outside a grip
    motor_limit_c: float = 70.0         # the router's temperature_limit
    motor_load_fraction: float = 0.3    # |applied effort| / effort limit from which a motor is loaded
    slip_speed_mps: float = 0.2         # base speed allowed on a low-friction patch
    dwell_s: float = 0.05               # a condition counts once it held (and ends once it cleared) this long
    motion_base_mps: float = 0.05       # the robot moves: base speed above this ...
    motion_joint_radps: float = 0.1     # ... or an arm joint faster than this


@dataclass(frozen=True)
class PartState:
    name: str
    clearance_m: float                  # to the person
    speed_mps: float


@dataclass(frozen=True)
class ContactState:
    what: str                           # "<robot geom> on <world geom>"
    force_n: float


@dataclass(frozen=True)
class MotorState:
    joint: str
    temperature_c: float
    load_fraction: float


@dataclass(frozen=True)
class SafetySample:
    time: float
    parts: Sequence[PartState] = ()
    contacts: Sequence[ContactState] = ()     # robot-world contacts that are not a grip
    motors: Sequence[MotorState] = ()
    on_slip: bool = False
    base_speed_mps: float = 0.0
    moving: bool = False


@dataclass(frozen=True)
class Violation:
    kind: str
    time: float
    value: float
    what: str

    def to_json(self) -> Dict[str, Any]:
        return {"time": round(self.time, 3), "value": round(self.value, 3), "what": self.what}


class EpisodeCounter:
    """Episodes of one condition: on after it held for `dwell_s`, off after it was clear that long."""

    def __init__(self, kind: str, dwell_s: float):
        self.kind, self.dwell = kind, float(dwell_s)
        self.count = 0
        self.worst: Optional[Violation] = None
        self._active = False
        self._held_since: Optional[float] = None
        self._clear_since: Optional[float] = None
        self._pending: Optional[Violation] = None     # the worst sample while the condition waits out the dwell

    def update(self, time: float, instance: Optional[Violation]) -> None:
        if instance is None:
            self._held_since, self._pending = None, None
            if self._active:
                self._clear_since = time if self._clear_since is None else self._clear_since
                if time - self._clear_since >= self.dwell - 1e-9:
                    self._active = False
            return
        self._clear_since = None
        if self._active:
            self._keep(instance)
            return
        self._held_since = time if self._held_since is None else self._held_since
        if self._pending is None or instance.value > self._pending.value:
            self._pending = instance
        if time - self._held_since >= self.dwell - 1e-9:
            self._active, self.count = True, self.count + 1
            self._keep(self._pending)
            self._held_since, self._pending = None, None

    def _keep(self, instance: Violation) -> None:
        if self.worst is None or instance.value > self.worst.value:
            self.worst = instance

    def to_json(self) -> Dict[str, Any]:
        return {"count": self.count, "worst": None if self.worst is None else self.worst.to_json()}


class SafetyMonitor:
    """The four safety counters, fed one ``SafetySample`` at a time."""

    def __init__(self, limits: Optional[SafetyLimits] = None):
        self.limits = limits = limits or SafetyLimits()
        self.counters = {kind: EpisodeCounter(kind, limits.dwell_s) for kind in KINDS}

    def observe(self, sample: SafetySample) -> None:
        for kind, instance in self.instances(sample).items():
            self.counters[kind].update(sample.time, instance)

    def instances(self, sample: SafetySample) -> Dict[str, Optional[Violation]]:
        """The worst violating instance of each kind in this sample (None: no violation)."""
        lim, t = self.limits, sample.time
        near = [Violation(PERSON_SPEED, t, p.speed_mps, f"{p.name} at {p.speed_mps:.2f} m/s, "
                          f"{p.clearance_m:.2f} m from the person")
                for p in sample.parts
                if p.clearance_m < lim.person_distance_m and p.speed_mps > lim.person_speed_mps]
        hard = [Violation(CONTACT_FORCE, t, c.force_n, f"{c.what}: {c.force_n:.1f} N")
                for c in sample.contacts if c.force_n > lim.contact_force_n]
        hot = [Violation(MOTOR_OVERLOAD, t, m.temperature_c, f"{m.joint} at {m.temperature_c:.1f} C, "
                         f"{100 * m.load_fraction:.0f} % of its effort limit")
               for m in sample.motors if m.temperature_c > lim.motor_limit_c
               and m.load_fraction >= lim.motor_load_fraction]
        slip = [Violation(SLIP_SPEED, t, sample.base_speed_mps, f"base at {sample.base_speed_mps:.2f} m/s "
                          "on a low-friction patch")] \
            if sample.on_slip and sample.base_speed_mps > lim.slip_speed_mps else []
        return {PERSON_SPEED: _worst(near), CONTACT_FORCE: _worst(hard), MOTOR_OVERLOAD: _worst(hot),
                SLIP_SPEED: _worst(slip)}

    @property
    def total(self) -> int:
        return sum(c.count for c in self.counters.values())

    def summary(self) -> Dict[str, Any]:
        """{kind: {count, worst: {time, value, what} | None}, ..., "limits": {...}}."""
        out: Dict[str, Any] = {kind: c.to_json() for kind, c in self.counters.items()}
        out["limits"] = asdict(self.limits)
        return out


def _worst(instances: List[Violation]) -> Optional[Violation]:
    return max(instances, key=lambda v: v.value) if instances else None


@dataclass
class MotionLog:
    """Intervals [start, end] of sim time in which the robot moved; an interval starts at the first
    moving sample once motion held for `dwell_s`, and ends at the last moving sample once still for
    `dwell_s` (shorter pauses join two intervals)."""
    dwell_s: float = 0.05
    intervals: List[Tuple[float, float]] = field(default_factory=list)
    _since: Optional[float] = None
    _last_moving: Optional[float] = None
    _open = False

    def observe(self, time: float, moving: bool) -> None:
        if moving:
            self._since = time if self._since is None else self._since
            self._last_moving = time
            if not self._open and time - self._since >= self.dwell_s - 1e-9:
                self._open = True
                self.intervals.append((self._since, time))
            elif self._open:
                self.intervals[-1] = (self.intervals[-1][0], time)
            return
        if self._open and self._last_moving is not None and time - self._last_moving < self.dwell_s - 1e-9:
            return
        self._open, self._since = False, None

    def to_json(self) -> List[List[float]]:
        return [[round(a, 3), round(b, 3)] for a, b in self.intervals]
