"""Lockstep: one protocol makes simulated runs and their replays reproducible (plain module, no rclpy).

Who waits for whom. The side that feeds the sensor state (the simulator node, or the bag player in
a replay) is the lockstep driver; the reasoning node and the router are its peers.
* decisions: at every boundary k*period of sim time the driver holds the next state until it has
  a decision stamped >= the boundary minus `lag` (`Lockstep`, `DecisionStamps`). With `lag` =
  period the decision on the state at t is computed while the world moves on to t + period, and the
  router starts it at its first tick after t + lag (its `decision_delay_s`, which must equal the lag);
* events: an announced world event's decision arrives before the world moves on (`EventDecisions`);
* handover: before each joint state the router holds every decision the driver has seen
  (`DecisionHandover`, from RouterStatus.last_decision_id);
* control: after each joint state the driver waits for the router's command of that state
  (`CommandWait`), up to `control_timeout` wall seconds;
* pacing: outside the waits sim time follows real_time_factor x wall time (`Pacer`).

A profile turns it on with one key (`LockstepSettings`): the graph loader hands it to the
driver (the simulator's parameters) and `csr-llm replay` to its bag player.
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional

WaitIdle = Callable[[float], None]      # how a wait passes `timeout` s between checks


@dataclass(frozen=True)
class LockstepSettings:
    """The profile's `lockstep:` key. period 0 = off."""
    period: float = 0.0            # sim s between decision boundaries
    lag: float = 0.0               # sim s: a boundary needs the decision this much older
    timeout: float = 30.0          # wall s a boundary or an event waits, then counts a timeout and goes on
    control_timeout: float = 0.0   # wall s the driver waits for the router's command of each state; 0 = off

    KEYS = ("period", "lag", "timeout", "control_timeout")

    @property
    def enabled(self) -> bool:
        return self.period > 0

    @classmethod
    def from_mapping(cls, data: Optional[Mapping[str, Any]]) -> "LockstepSettings":
        """From a profile's `lockstep:` mapping; ValueError names the bad key."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ValueError(f"lockstep must be a mapping of {', '.join(cls.KEYS)}, got {data!r}")
        unknown = sorted(set(data) - set(cls.KEYS))
        if unknown:
            raise ValueError(f"lockstep: unknown key(s) {', '.join(unknown)} (known: {', '.join(cls.KEYS)})")
        values = {}
        for key in cls.KEYS:
            value = data.get(key, getattr(cls, key))
            try:
                values[key] = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"lockstep.{key} must be a number, got {value!r}") from None
            if not 0.0 <= values[key] < math.inf:
                raise ValueError(f"lockstep.{key} must be >= 0 and finite, got {value!r}")
        return cls(**values)

    def simulator_parameters(self) -> Dict[str, float]:
        """The simulator node's parameters for these settings (sim_config.SimulatorConfig)."""
        return {"lockstep_decision_period": self.period, "lockstep_decision_lag": self.lag,
                "lockstep_timeout": self.timeout, "control_lockstep_timeout": self.control_timeout}


class DecisionStamps:
    """The newest decision stamp seen (sim s), from decisions and from the decision loop's schedule.

    `on_schedule(next_due)`: the loop's next periodic decision is stamped `next_due` (CsrStatus), so
    no boundary before it will get one and none before it waits; it counts as a decision stamped
    `margin` earlier."""

    def __init__(self, margin: float):
        self.margin = float(margin)
        self.latest = -math.inf
        self._lock = threading.Lock()
        self.event = threading.Event()             # set on every decision (wakes a waiting loop)

    def on_decision(self, stamp: float) -> None:
        with self._lock:
            if stamp > self.latest:
                self.latest = stamp
        self.event.set()

    def on_schedule(self, next_due: float) -> None:
        if next_due > 0:
            self.on_decision(next_due - self.margin)

    def covers(self, t: float, tolerance: float) -> bool:
        return self.latest >= t - tolerance

    def wait_for(self, t: float, timeout: float, poll: float = 0.01) -> bool:
        """Block until a decision stamped >= t (1 ns tolerance) is in, up to `timeout` wall s."""
        start = time.monotonic()
        while not self.covers(t, 1e-9):
            if time.monotonic() - start > timeout:
                return False
            self.event.wait(poll)
            self.event.clear()
        return True


class EventDecisions:
    """An announced world event's decision arrives before the world moves on, so the router starts
    it at the same tick in every run (and in the replay, which waits alike)."""

    def __init__(self) -> None:
        self.announced = 0
        self.decided = 0
        self.event = threading.Event()

    def on_announced(self) -> None:
        self.announced += 1

    def on_decided(self) -> None:
        self.decided += 1
        self.event.set()

    def wait(self, timeout: float, idle: WaitIdle, stop: Optional[threading.Event] = None,
             poll: float = 0.005) -> float:
        """Block until every announced event has its decision (up to `timeout` wall s); wall s waited."""
        start = time.monotonic()
        while self.decided < self.announced and not (stop is not None and stop.is_set()) \
                and time.monotonic() - start < timeout:
            idle(poll)
        return time.monotonic() - start


class CommandWait:
    """Control lockstep: after publishing the state at t, the driver waits for the router's command
    stamped t (MotorCommand; the router stamps each command with its state's stamp)."""

    def __init__(self, timeout: float, poll: float = 0.005):
        self.timeout = float(timeout)
        self.poll = poll
        self.newest = -math.inf
        self.waits = 0
        self.timeouts = 0
        self.event = threading.Event()

    def on_command(self, stamp: float) -> None:
        self.newest = max(self.newest, stamp)
        self.event.set()

    def wait(self, t: float, stop: Optional[threading.Event] = None) -> bool:
        """Block until the command of the state at t is in (True) or `timeout` wall s passed
        (False, counted)."""
        self.waits += 1
        deadline = time.monotonic() + self.timeout
        while self.newest < t - 1e-9 and not (stop is not None and stop.is_set()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.timeouts += 1
                return False
            self.event.wait(min(remaining, self.poll))
            self.event.clear()
        return True


class Lockstep:
    """The simulator's decision boundaries, in integer steps (sim time never drifts from the grid)."""

    def __init__(self, period: float, dt: float, timeout: float = 30.0,
                 wall: Callable[[], float] = time.monotonic, lag: float = 0.0):
        self.dt = float(dt)
        self.period_steps = int(round(float(period) / self.dt)) if period > 0 else 0
        if not 0.0 <= lag < math.inf:
            raise ValueError(f"lockstep lag must be >= 0 sim s, got {lag!r}")
        self.lag_steps = int(round(float(lag) / self.dt))
        self.timeout = float(timeout)
        self._wall = wall
        self.next_boundary = self.period_steps     # in steps
        self.decisions = DecisionStamps(margin=self.dt)
        self.waits = 0
        self.timeouts = 0
        self.waiting_since: Optional[float] = None
        self.event = self.decisions.event          # set on every decision (wakes a waiting loop)

    @property
    def enabled(self) -> bool:
        return self.period_steps > 0

    def announces(self, steps: int) -> bool:
        """Whether world events may be announced at this step: always without lockstep; with it,
        only mid-period (between two decision boundaries). An event announced near a boundary
        races the sensor stream into one window or the next, so the chunk stream (and every
        decision after it) would differ between a run and its replay."""
        return self.period_steps <= 0 or steps % self.period_steps == self.period_steps // 2

    def boundary_time(self) -> float:
        return self.next_boundary * self.dt

    def on_decision(self, stamp: float) -> None:
        self.decisions.on_decision(stamp)

    def on_schedule(self, next_due: float) -> None:
        """The loop's first decision falls one period after its first chunk: no boundary before it waits."""
        self.decisions.on_schedule(next_due)

    @property
    def latest_decision(self) -> float:
        return self.decisions.latest

    def blocked(self, steps: int) -> bool:
        """True while the simulator (at `steps`) must not step. Counts waits and timeouts."""
        if self.period_steps <= 0 or steps < self.next_boundary:
            return False
        needed_t = (self.next_boundary - self.lag_steps) * self.dt
        if self.decisions.covers(needed_t, 0.5 * self.dt):
            self._advance(steps)
            return False
        now = self._wall()
        if self.waiting_since is None:
            self.waiting_since = now
            self.waits += 1
            return True
        if now - self.waiting_since >= self.timeout:
            self.timeouts += 1
            self._advance(steps)
            return False
        return True

    def decided_before(self, steps: int) -> bool:
        """Whether every decision stamped before the last boundary at or below `steps` is in: with
        a lag the newest ones are still being computed when the world stops (a run ending there
        waits for them, so its recording has each decision its replay makes)."""
        if self.period_steps <= 0:
            return True
        last = (steps // self.period_steps - 1) * self.period_steps
        return self.decisions.covers(last * self.dt, 0.5 * self.dt)

    def _advance(self, steps: int) -> None:
        self.waiting_since = None
        while self.next_boundary <= steps:
            self.next_boundary += self.period_steps


class DecisionHandover:
    """Lockstep's last step: the router holds every decision seen before the next state goes out.

    A decision reaches the router and the lockstepping side (simulator, player) on separate
    readers; if the next joint state overtook it, the router would start it one tick later in
    some runs. The router reports the newest decision id it accepted (RouterStatus.last_decision_id,
    published at once); ``wait`` blocks until that covers the newest id seen here. It stays off
    until the router has reported once (no router in the graph: nothing to wait for)."""

    def __init__(self, timeout: float = 0.5, wall: Callable[[], float] = time.monotonic):
        self.timeout = float(timeout)
        self._wall = wall
        self.seen = -1          # newest decision_id seen on `decision`
        self.accepted = -1      # newest the router reports accepted
        self.router_reports = False
        self.timeouts = 0
        self.event = threading.Event()

    def on_decision(self, decision_id: int) -> None:
        self.seen = max(self.seen, int(decision_id))

    def on_router_status(self, last_decision_id: int) -> None:
        self.router_reports = True
        self.accepted = max(self.accepted, int(last_decision_id))
        self.event.set()

    def pending(self) -> bool:
        return self.router_reports and self.accepted < self.seen

    def wait_for_router(self, timeout: float, stop: Optional[threading.Event] = None) -> bool:
        """Block until the router has reported once (it does on activation), up to `timeout` wall s.

        Control lockstep holds from the first state only if the router ticks it: states sent before
        it was active were ticked or skipped depending on start-up timing, and the skipped ones left
        a different controller state (time steps, key phase) in every run."""
        start = self._wall()
        while not self.router_reports and self._wall() - start < timeout and not (stop is not None and stop.is_set()):
            self.event.wait(0.01)
            self.event.clear()
        return self.router_reports

    def wait(self, stop: Optional[threading.Event] = None, idle: Optional[Callable[[float], None]] = None) -> float:
        """Block until the router holds every decision seen (or `timeout`: counted); wall s waited.
        `idle(timeout)` replaces the sleep between checks (a hosted router is spun there)."""
        if not self.pending():
            return 0.0
        start = self._wall()
        while self.pending() and not (stop is not None and stop.is_set()):
            if self._wall() - start >= self.timeout:
                self.timeouts += 1
                break
            if idle is not None:
                idle(0.002)
                continue
            self.event.wait(0.002)
            self.event.clear()
        return self._wall() - start


class Pacer:
    """Keeps sim time at real_time_factor x wall time (0 = as fast as possible). Call `pace(sim_t)`
    after stepping; it sleeps when the simulation is ahead. `reset` after a pause (lockstep), so
    the simulation does not race to catch up."""

    def __init__(self, real_time_factor: float, wall: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, slack: float = 0.002):
        self.rtf = max(0.0, float(real_time_factor))
        self._wall, self._sleep, self.slack = wall, sleep, slack
        self._t0_wall: Optional[float] = None
        self._t0_sim = 0.0

    def reset(self, sim_time: float) -> None:
        self._t0_wall = self._wall()
        self._t0_sim = sim_time

    def pace(self, sim_time: float) -> float:
        """Sleep if ahead; returns how far behind real time (s of wall) the simulation is."""
        if self.rtf <= 0.0:
            return 0.0
        if self._t0_wall is None:
            self.reset(sim_time)
            return 0.0
        target_wall = self._t0_wall + (sim_time - self._t0_sim) / self.rtf
        ahead = target_wall - self._wall()
        if ahead > self.slack:
            self._sleep(ahead)
            return 0.0
        if ahead < -1.0:   # far behind (machine overloaded): re-anchor rather than sprint
            self.reset(sim_time)
        return max(0.0, -ahead)


class WallProfile:
    """Where the physics thread's wall time goes, per phase (each timed, not sampled); "other" is
    the rest of the loop: publishing the sensors and the clock."""

    PHASES = ("decision lockstep", "event decisions", "decision handover", "control round trip", "physics",
              "pacing")

    def __init__(self, wall: Callable[[], float] = time.perf_counter):
        self._wall = wall
        self.seconds = dict.fromkeys(self.PHASES, 0.0)
        self._started: Optional[float] = None

    def now(self) -> float:
        if self._started is None:
            self._started = self._wall()
        return self._wall()

    def add(self, phase: str, since: float) -> float:
        """Charge the wall time since `since` (a `now()`) to `phase`; returns the time now."""
        now = self._wall()
        self.seconds[phase] += now - since
        return now

    def report(self) -> dict:
        """{phase: wall seconds} with "total" and "other", rounded to the millisecond."""
        total = 0.0 if self._started is None else self._wall() - self._started
        out = {phase: round(s, 3) for phase, s in self.seconds.items()}
        out["other"] = round(max(0.0, total - sum(self.seconds.values())), 3)
        out["total"] = round(total, 3)
        return out

    def format(self) -> str:
        report = self.report()
        total = report.pop("total")
        parts = [f"{phase} {s:.1f} s ({100 * s / total:.0f}%)" if total > 0 else f"{phase} {s:.1f} s"
                 for phase, s in report.items()]
        return f"wall time {total:.1f} s: " + ", ".join(parts)
