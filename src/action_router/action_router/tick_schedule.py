"""When the router node ticks and updates its key, and the loop rate it reports (plain module, no rclpy).

``tick_source`` (params.py): ``timer`` ticks on the control_hz timer alone; ``joint_states`` once
per joint state and nothing else (lockstep: a tick first takes every sample sent before its
state); ``state_or_timer`` on each joint state, the timer only where none came for a period.
"""
from __future__ import annotations

import math


class TickSchedule:
    """The tick policy of one activation, on the node's monotonic clock and the state time base."""

    def __init__(self, tick_source: str, control_hz: float, key_hz: float):
        self.source = tick_source
        self.period = 1.0 / float(control_hz)
        self.key_period = 1.0 / float(key_hz)
        self.tick_on_state = tick_source != "timer"
        self.uses_timer = tick_source != "joint_states"
        self.timer_fills_gaps = tick_source == "state_or_timer"
        # one tick per state, the same in every run (lockstep): a tick first takes every sample sent
        # before its state; where the timer may tick too, no run repeats another and the tick is not held
        self.take_before_tick = tick_source == "joint_states"
        self._last_tick = 0.0
        self._last_state_time = -math.inf
        self._next_key_time = -math.inf

    def ticked(self, monotonic: float) -> None:
        self._last_tick = monotonic

    def timer_due(self, monotonic: float) -> bool:
        """Whether the control timer ticks now (state_or_timer: only after a period without a tick)."""
        return not (self.timer_fills_gaps and monotonic - self._last_tick < self.period)

    def new_state(self, state_time: float) -> bool:
        """Whether a state at ``state_time`` opens a new period (a re-sent or older one does not)."""
        if state_time <= self._last_state_time:
            return False
        self._last_state_time = state_time
        return True

    def key_due(self, now: float) -> bool:
        """On the state time base: whether the tick at ``now`` updates the key. On a fixed grid of
        state time, not from the first tick, so the same ticks update it in every run."""
        if now < self._next_key_time:
            return False
        self._next_key_time = (math.floor(now / self.key_period + 1e-6) + 1) * self.key_period
        return True

    def describe(self) -> str:
        if not self.uses_timer:
            return "control ticks on every joint_states message"
        how = ": a tick on every joint_states message, the timer's where none came for a period" \
            if self.timer_fills_gaps else ""
        return f"control loop at {1.0 / self.period:g} Hz{how}"


class LoopRate:
    """Ticks per second over windows of at least one second (monotonic clock)."""

    def __init__(self, monotonic: float = 0.0):
        self.hz = 0.0
        self.ticks = 0                  # since the last restart
        self._window_start = monotonic
        self._window_ticks = 0

    def restart(self, monotonic: float) -> None:
        self.ticks = 0
        self._window_start = monotonic
        self._window_ticks = 0

    def tick(self, monotonic: float) -> None:
        self.ticks += 1
        self._window_ticks += 1
        if monotonic - self._window_start >= 1.0:
            self.hz = self._window_ticks / (monotonic - self._window_start)
            self._window_start = monotonic
            self._window_ticks = 0
