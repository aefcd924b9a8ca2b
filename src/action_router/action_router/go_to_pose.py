"""Go-to-pose base controller: odometry pose + goal -> one cmd_vel twist (plain module, no rclpy).

A unicycle controller, stateless per call: turn toward the goal (in place while the heading error
is above ``turn_in_place``), drive forward at the decided speed scaled by the cosine of the heading
error, slow down linearly inside ``slow_radius`` (never below ``min_speed``, so it arrives), and
once within ``position_tolerance`` turn to the goal's yaw if it has one. Every twist is clipped to
the base limits whatever the inputs; non-finite inputs give a stop.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np


@dataclass(frozen=True)
class BaseGoal:
    """Where a zone's goal pose is (odometry frame); ``yaw`` None = any heading."""
    x: float
    y: float
    yaw: Optional[float] = None


@dataclass(frozen=True)
class GoToPoseConfig:
    max_linear: float                  # base limits [m/s], [rad/s]
    max_angular: float
    position_tolerance: float = 0.10   # m: goal reached this close
    yaw_tolerance: float = 0.10        # rad: goal yaw reached this close
    slow_radius: float = 0.6           # m: speed ramps down linearly inside it
    min_speed: float = 0.05            # m/s: floor of the ramp (above the tolerance, so it arrives)
    heading_gain: float = 1.5          # rad/s per rad of heading error
    turn_in_place: float = 0.6         # rad: above this heading error only turn


def pose_tuple(pose: Sequence[float] | np.ndarray) -> Tuple[float, float, float]:
    """An odometry pose (x, y, yaw; an array) as three floats."""
    return float(pose[0]), float(pose[1]), float(pose[2])


@dataclass(frozen=True)
class BaseTwist:
    vx: float
    wz: float
    reached: bool = False
    distance: float = math.inf         # m to the goal position


STOP = BaseTwist(0.0, 0.0)


def wrap_angle(angle: float) -> float:
    return math.atan2(math.sin(angle), math.cos(angle))


def go_to_pose(pose: Sequence[float], goal: BaseGoal, speed: float, cfg: GoToPoseConfig) -> BaseTwist:
    """The twist that takes a base at ``pose`` (x, y, yaw) toward ``goal`` at most at ``speed``."""
    x, y, yaw = (float(v) for v in pose[:3])
    if not all(math.isfinite(v) for v in (x, y, yaw, goal.x, goal.y, speed)):
        return STOP
    v_max = min(max(float(speed), 0.0), cfg.max_linear)
    w_max = cfg.max_angular
    dx, dy = goal.x - x, goal.y - y
    distance = math.hypot(dx, dy)
    if distance <= cfg.position_tolerance:
        if goal.yaw is None:
            return BaseTwist(0.0, 0.0, True, distance)
        error = wrap_angle(goal.yaw - yaw)
        if abs(error) <= cfg.yaw_tolerance:
            return BaseTwist(0.0, 0.0, True, distance)
        return BaseTwist(0.0, _clip(cfg.heading_gain * error, w_max), False, distance)
    error = wrap_angle(math.atan2(dy, dx) - yaw)
    wz = _clip(cfg.heading_gain * error, w_max)
    if abs(error) > cfg.turn_in_place:
        return BaseTwist(0.0, wz, False, distance)
    ramp = max(min(1.0, distance / max(cfg.slow_radius, 1e-6)) * v_max, min(cfg.min_speed, v_max))
    return BaseTwist(_clip(ramp * math.cos(error), v_max), wz, False, distance)


def _clip(value: float, limit: float) -> float:
    return min(max(value, -limit), limit)
