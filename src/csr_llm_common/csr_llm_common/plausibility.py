"""Physical bounds of sensor readings and of text, shared by the aggregator and the router
(plain module, no rclpy).

Each check returns None for a plausible reading, or a ``Refusal``: its ``kind`` (``NONFINITE``:
NaN/inf where a number is needed; ``IMPOSSIBLE``: finite but beyond physics or the robot) and a
one-line reason. Both nodes call the same checks, so they cannot disagree about what is impossible;
a refused reading must change nothing (no chunk, no derate, no interrupt, no cache layer).

Text bounds: every name that reaches a chunk goes through ``bounded_name`` (at most
``MAX_NAME_CHARS``, the cut marked), and a summary lists at most ``MAX_NAMES`` entries.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

NONFINITE = "nonfinite"
IMPOSSIBLE = "impossible"

ABSOLUTE_ZERO_C = -273.15
# colder than any air measured on Earth (-89 C): no motor reports this while it works
MOTOR_TEMPERATURE_MIN_C = -100.0
# far past any motor's insulation class (class H is rated 180 C): a hotter reading is corrupt
MOTOR_TEMPERATURE_MAX_C = 300.0
MAX_FORCE_N = 1.0e5              # per component and in norm: ten tonnes on a robot's force sensor
MAX_TORQUE_NM = 1.0e4
# without a robot description: a continuous joint winds, so positions get a wide bound
MAX_JOINT_POSITION = 1.0e5       # rad or m
MAX_JOINT_VELOCITY = 1.0e3       # rad/s or m/s
MAX_JOINT_EFFORT = 1.0e5         # N m or N
# with a robot description: a position may overshoot its limits by one range of travel, a speed or
# an effort may reach this many times its limit (an impact, a back-driven joint), never more
LIMIT_FACTOR = 10.0

MAX_NAME_CHARS = 64              # a joint or motor name in a chunk
MAX_NAMES = 64                   # names listed in one summary line (joints, motors)
TRUNCATION_MARK = "..."          # ends a cut name; the caller counts the cuts


@dataclass(frozen=True)
class Refusal:
    kind: str        # NONFINITE or IMPOSSIBLE
    reason: str

    def __str__(self) -> str:
        return self.reason


def _nonfinite(values: Sequence[float], what: str) -> Optional[Refusal]:
    if all(math.isfinite(v) for v in values):
        return None
    return Refusal(NONFINITE, f"non-finite {what}")


def temperature_refusal(celsius: float) -> Optional[Refusal]:
    """A motor temperature [C] outside [MOTOR_TEMPERATURE_MIN_C, MOTOR_TEMPERATURE_MAX_C]."""
    if not math.isfinite(celsius):
        return Refusal(NONFINITE, f"non-finite motor temperature {celsius!r}")
    if celsius < ABSOLUTE_ZERO_C:
        return Refusal(IMPOSSIBLE, f"impossible motor temperature {celsius:g} C (below absolute zero)")
    if celsius < MOTOR_TEMPERATURE_MIN_C:
        return Refusal(IMPOSSIBLE, f"impossible motor temperature {celsius:g} C "
                                   f"(below {MOTOR_TEMPERATURE_MIN_C:g} C)")
    if celsius > MOTOR_TEMPERATURE_MAX_C:
        return Refusal(IMPOSSIBLE, f"impossible motor temperature {celsius:g} C "
                                   f"(above {MOTOR_TEMPERATURE_MAX_C:g} C)")
    return None


def range_refusal(distance: float, min_range: float = math.nan, max_range: float = math.nan) -> Optional[Refusal]:
    """A sensor_msgs/Range reading: NaN, a finite negative distance, or a finite one outside
    [min_range, max_range] when the message sets a usable interval (0 <= min < max, finite).
    +inf (nothing in range) and -inf (closer than min_range) are REP 117 readings and pass."""
    if math.isnan(distance):
        return Refusal(NONFINITE, "range is NaN")
    if math.isinf(distance):
        return None
    if distance < 0.0:
        return Refusal(IMPOSSIBLE, f"negative range {distance:g} m")
    if math.isfinite(min_range) and math.isfinite(max_range) and 0.0 <= min_range < max_range \
            and not min_range <= distance <= max_range:
        return Refusal(IMPOSSIBLE, f"range {distance:g} m outside the sensor's [{min_range:g}, {max_range:g}] m")
    return None


def wrench_refusal(force: Sequence[float], torque: Sequence[float] = ()) -> Optional[Refusal]:
    """A wrench with a non-finite component, a force past MAX_FORCE_N or a torque past MAX_TORQUE_NM."""
    refusal = _nonfinite(tuple(force) + tuple(torque), "wrench")
    if refusal is not None:
        return refusal
    for values, bound, unit in ((force, MAX_FORCE_N, "N"), (torque, MAX_TORQUE_NM, "N m")):
        norm = math.sqrt(sum(v * v for v in values))
        if norm > bound:
            return Refusal(IMPOSSIBLE, f"impossible wrench: |{unit}| = {norm:g} > {bound:g}")
    return None


def joint_refusal(position: Sequence[float], velocity: Sequence[float] = (),
                  effort: Sequence[float] = ()) -> Optional[Refusal]:
    """Joint values that are non-finite or past the generic bounds (no robot description needed)."""
    for values, bound, what in ((position, MAX_JOINT_POSITION, "joint position"),
                                (velocity, MAX_JOINT_VELOCITY, "joint velocity"),
                                (effort, MAX_JOINT_EFFORT, "joint effort")):
        refusal = _nonfinite(values, what)
        if refusal is not None:
            return refusal
        worst = max((abs(v) for v in values), default=0.0)
        if worst > bound:
            return Refusal(IMPOSSIBLE, f"impossible {what} {worst:g} (|value| > {bound:g})")
    return None


class JointLimits:
    """Per joint, the bounds past which a joint state is impossible: ``generic`` ones, or
    ``from_description``: positions beyond [min - travel, max + travel], speeds and efforts beyond
    LIMIT_FACTOR x their limits (never past the generic bounds)."""

    def __init__(self, position_low: "Sequence[float] | np.ndarray", position_high: "Sequence[float] | np.ndarray",
                 velocity: "Sequence[float] | np.ndarray", effort: "Sequence[float] | np.ndarray"):
        self.position_low = np.asarray(position_low, dtype=float)
        self.position_high = np.asarray(position_high, dtype=float)
        self.velocity = np.asarray(velocity, dtype=float)
        self.effort = np.asarray(effort, dtype=float)
        self._bounds = ((self.position_low, self.position_high, "position"),
                        (-self.velocity, self.velocity, "velocity"), (-self.effort, self.effort, "effort"))

    @classmethod
    def generic(cls, n: int) -> "JointLimits":
        return cls(np.full(n, -MAX_JOINT_POSITION), np.full(n, MAX_JOINT_POSITION), np.full(n, MAX_JOINT_VELOCITY),
                   np.full(n, MAX_JOINT_EFFORT))

    @classmethod
    def from_description(cls, position_min: Sequence[float], position_max: Sequence[float],
                         velocity_max: Sequence[float], effort_max: Sequence[float]) -> "JointLimits":
        low, high = np.asarray(position_min, dtype=float), np.asarray(position_max, dtype=float)
        travel = high - low
        return cls(np.maximum(low - travel, -MAX_JOINT_POSITION), np.minimum(high + travel, MAX_JOINT_POSITION),
                   np.minimum(LIMIT_FACTOR * np.abs(np.asarray(velocity_max, dtype=float)), MAX_JOINT_VELOCITY),
                   np.minimum(LIMIT_FACTOR * np.abs(np.asarray(effort_max, dtype=float)), MAX_JOINT_EFFORT))

    def refusal(self, index, position: np.ndarray, velocity: Optional[np.ndarray] = None,
                effort: Optional[np.ndarray] = None) -> Optional[Refusal]:
        """None, or why these values are impossible; ``index``: a slice or the joint indices the
        arrays' entries belong to. NaN fails every comparison: refused too."""
        for values, (low, high, what) in zip((position, velocity, effort), self._bounds):
            if values is None:
                continue
            low, high = low[index], high[index]
            inside = (values >= low) & (values <= high)
            if not inside.all():
                k = int(np.argmin(inside))
                return Refusal(IMPOSSIBLE, f"impossible joint {what} {values[k]:g} "
                                           f"(outside [{low[k]:g}, {high[k]:g}])")
        return None


def bounded_name(name: object, limit: int = MAX_NAME_CHARS) -> Tuple[str, bool]:
    """(the name, at most ``limit`` characters with whitespace collapsed, ending in
    TRUNCATION_MARK when cut; whether it was cut)."""
    text = " ".join(str(name).split())
    if len(text) <= limit:
        return text, False
    return text[: max(limit - len(TRUNCATION_MARK), 0)] + TRUNCATION_MARK, True
