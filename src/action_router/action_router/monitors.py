"""Physical monitors that invalidate the router's cache layers (plain module, no rclpy).

Signals, not timers, invalidate the layers (seed document 002):
  * ``GripMonitor``: grip force above ``threshold`` (15 N) continuously for ``dwell`` (0.2 s)
    marks a grip sub-task done;
  * ``TemperatureMonitor``: motor temperature above ``limit`` (70 C) swaps in the derated set
    for that joint (back below ``limit - hysteresis``);
  * ``ConfidenceMonitor``: measured effort disagreeing with the last command for ``dwell`` ticks
    clears the confidence bit (integration frozen, limits scaled); agreement sets it again;
  * ``ClampMonitor``: a joint clamped continuously for ``persist`` seconds sets the failure flag;
  * ``DecisionWatchdog``: no valid decision for ``timeout_s`` (the reasoning node died or hangs)
    while a task runs sets the failure flag; ``BaseTravel`` measures a sub-task's base distance.
"""
from __future__ import annotations

import math

from typing import Optional

import numpy as np


class GripMonitor:
    """Grip force above threshold for dwell seconds -> done (physical invalidation)."""

    def __init__(self, threshold: float = 15.0, dwell: float = 0.2):
        self.threshold = float(threshold)
        self.dwell = float(dwell)
        self.since: Optional[float] = None

    def reset(self) -> None:
        self.since = None

    def update(self, force: float, now: float) -> bool:
        if force > self.threshold:  # NaN compares False: no grip
            if self.since is None:
                self.since = now
            return now - self.since >= self.dwell - 1e-9
        self.since = None
        return False


class TemperatureMonitor:
    """Per-joint over-temperature with hysteresis -> derated mask."""

    def __init__(self, n: int, limit: float = 70.0, hysteresis: float = 5.0):
        self.limit = float(limit)
        self.hysteresis = float(hysteresis)
        self.hot = np.zeros(n, dtype=bool)

    def update(self, temperature: np.ndarray) -> int:
        """Update from the latest temperatures (NaN = unknown, keeps state); returns new derates."""
        # a loop over the few joints: cheaper than numpy's per-call cost, every control tick
        hot = self.hot.tolist()
        limit, cool_below = self.limit, self.limit - self.hysteresis
        new = 0
        for j, celsius in enumerate(temperature.tolist()):
            if celsius > limit:                 # NaN compares False both ways: state kept
                new += not hot[j]
                hot[j] = True
            elif celsius < cool_below:
                hot[j] = False
        self.hot[:] = hot
        return new


class ConfidenceMonitor:
    """Actuator feedback: measured effort vs the last command -> confidence bit per joint."""

    def __init__(self, n: int, abs_tol: float = 5.0, rel_tol: float = 0.5, dwell_ticks: int = 50):
        self.abs_tol = float(abs_tol)
        self.rel_tol = float(rel_tol)
        self.dwell = int(dwell_ticks)
        self.bad = np.zeros(n, dtype=np.int64)
        self.good = np.zeros(n, dtype=np.int64)
        self.confidence = np.ones(n, dtype=bool)
        self.flips = 0

    def update(self, measured: np.ndarray, commanded: np.ndarray, have: np.ndarray) -> None:
        """have: joints with effort feedback this tick."""
        disagree = have & ~(np.abs(measured - commanded) <= self.abs_tol + self.rel_tol * np.abs(commanded))
        agree = have & ~disagree
        self.bad = np.where(disagree, self.bad + 1, 0)
        self.good = np.where(agree, self.good + 1, 0)
        lose = self.confidence & (self.bad >= self.dwell)
        regain = ~self.confidence & (self.good >= self.dwell)
        if lose.any() or regain.any():
            self.flips += int(lose.sum() + regain.sum())
            self.confidence = (self.confidence & ~lose) | regain


class ClampMonitor:
    """A joint clamped continuously for persist seconds -> failure."""

    def __init__(self, n: int, persist: float = 0.25):
        self.persist = float(persist)
        self.since = np.full(n, np.nan)

    def reset(self) -> None:
        self.since[:] = np.nan

    def update(self, clamped: np.ndarray, now: float) -> bool:
        if not clamped.any():               # the usual tick: nothing clamped, nothing to time
            self.since[:] = np.nan
            return False
        self.since = np.where(clamped, np.where(np.isnan(self.since), now, self.since), np.nan)
        return bool((now - self.since >= self.persist).any())


class DecisionWatchdog:
    """When the decision stream was last alive; `lost` once it was silent for `timeout_s` (0: never)."""

    def __init__(self, timeout_s: float):
        self.timeout_s = float(timeout_s)
        self.last: Optional[float] = None      # nothing decided yet: start-up is not a loss

    def decided(self, now: float) -> None:
        self.last = now

    def lost(self, now: float) -> bool:
        return self.timeout_s > 0 and self.last is not None and now - self.last > self.timeout_s


class BaseTravel:
    """Base distance per tick: odometry when fresh (< 0.5 s old), else the commanded speed * dt."""

    def __init__(self) -> None:
        self._prev = np.zeros(3)
        self._prev_valid = False

    def step(self, now: float, dt: float, pose: np.ndarray, odom_time: float, odom_version: int,
             commanded_vx: float) -> float:
        if odom_version and now - odom_time < 0.5:
            moved = math.hypot(pose[0] - self._prev[0], pose[1] - self._prev[1]) if self._prev_valid else 0.0
            self._prev[:] = pose
            self._prev_valid = True
            return moved
        self._prev_valid = False
        return abs(commanded_vx) * dt
