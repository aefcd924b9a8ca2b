"""The robot's commands in the simulator and the sim clock they are timed by (plain module, no rclpy).

  * ``ArmEfforts``: the latest effort command (validated, clipped to effort_max) and what the motors
    apply, reduced above the joint's velocity_max like a motor's torque-speed curve.
  * ``CmdVel``: the base's velocity command (clipped), which times out when not renewed.
  * ``SimClock``: physics steps taken and the sim time.
"""
from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence, Tuple

import numpy as np

from .robot_model import JOINTS
from .traction import clip


class SimClock:
    """Physics steps taken; sim time = steps * dt."""

    def __init__(self, dt: float):
        self.dt = float(dt)
        self.steps = 0

    def tick(self) -> None:
        self.steps += 1

    @property
    def time(self) -> float:
        return self.steps * self.dt


class ArmEfforts:
    """The arm's effort command and the efforts its motors apply (JOINTS order)."""

    def __init__(self, limits: Mapping[str, Sequence[float]], velocity_limit: bool = True):
        self.effort_max = np.asarray(limits["effort_max"], dtype=float)
        if not np.all(self.effort_max > 0):
            raise ValueError("effort_max must be positive")
        self.velocity_max = np.asarray(limits["velocity_max"], dtype=float)
        self.velocity_limit = bool(velocity_limit)
        self.command = np.zeros(len(JOINTS))
        self.applied = np.zeros(len(JOINTS))

    def check(self, values) -> Tuple[Optional[np.ndarray], Optional[str]]:
        """(clipped command, None), or (None, fault kind) for a command to ignore: 'effort_length'
        (not one value per joint), 'effort_nonfinite' (NaN/inf), 'effort_type'. Thread-safe (pure)."""
        try:
            arr = np.array(values, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            return None, "effort_type"
        if arr.size != len(JOINTS):
            return None, "effort_length"
        if not np.all(np.isfinite(arr)):
            return None, "effort_nonfinite"
        return np.clip(arr, -self.effort_max, self.effort_max), None

    def set(self, values) -> Optional[str]:
        """Validate and store a command. Returns None, or the fault kind when it is ignored; the
        previous command is then kept."""
        arr, fault = self.check(values)
        if arr is not None:
            self.command[:] = arr
        return fault

    def apply(self, joint_velocities: np.ndarray) -> np.ndarray:
        """The efforts the motors apply now: the command, reduced on joints faster than velocity_max
        that it pushes further (zero at 1.25 velocity_max)."""
        u = self.command
        if self.velocity_limit:
            qv = joint_velocities
            over = np.abs(qv) - self.velocity_max
            if (over > 0.0).any():
                u = u.copy()
                pushing = (over > 0.0) & (u * qv > 0.0)
                u[pushing] *= np.maximum(0.0, 1.0 - over[pushing] / (0.25 * self.velocity_max[pushing]))
        self.applied[:] = u
        return self.applied


class CmdVel:
    """The base's (vx, wz) command: clipped to the base's limits, zero once older than the timeout."""

    def __init__(self, max_linear: float, max_angular: float, timeout: float):
        self.max_linear = float(max_linear)
        self.max_angular = float(max_angular)
        self.timeout = float(timeout)
        self._command = (0.0, 0.0)
        self._time = -math.inf

    def set(self, vx: float, wz: float, now: float) -> Optional[str]:
        """Store a command received at `now`; None, or 'cmd_vel_nonfinite' when it is ignored."""
        vx, wz = float(vx), float(wz)
        if not (math.isfinite(vx) and math.isfinite(wz)):
            return "cmd_vel_nonfinite"
        self._command = (clip(vx, self.max_linear), clip(wz, self.max_angular))
        self._time = now
        return None

    def current(self, now: float) -> Tuple[float, float]:
        if now - self._time > self.timeout:
            return 0.0, 0.0
        return self._command
