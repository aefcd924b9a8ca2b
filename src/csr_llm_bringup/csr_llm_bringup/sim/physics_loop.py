"""The simulator's physics thread: step, publish what is due, lockstep, pace (plain module, no rclpy).

Each step: apply the newest effort command, step the physics, stamp, then (at the joint state
rate) hold until the router has every decision seen (handover), publish the joint state and the
clock, and wait for the router's command of that state (control round trip); the other sensors
at their rates; scenario events only where lockstep allows them (mid-period), each waiting for
its decision; then pace to real time. At a decision boundary the loop does not step until the
boundary's decision is in (lockstep.py). `SimOutputs` is what it publishes through (the node).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Protocol, Sequence, Tuple

from ..lockstep import EventDecisions, Lockstep, Pacer, WallProfile
from .control_link import CommandIntake
from .simulator import Simulator

# rate parameter -> the sensor publications due at it, in publication order
SENSOR_RATES: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("imu_hz", ("publish_imu",)), ("odom_hz", ("publish_odom",)), ("wrench_hz", ("publish_wrench",)),
    ("temperature_hz", ("publish_temperatures",)), ("proximity_hz", ("publish_proximity",)),
    ("zone_hz", ("publish_zone", "publish_objects")), ("camera_hz", ("publish_depth",)))


def every_steps(hz: float, dt: float) -> int:
    """Steps between publications at `hz` (0 or less: never)."""
    return 0 if hz <= 0 else max(1, int(round(1.0 / (hz * dt))))


class SimOutputs(Protocol):
    sensors: object     # sensor_publishers.SensorPublishers

    def stamp_at(self, steps: int) -> None: ...
    def publish_clock(self) -> None: ...
    def publish_truth(self, truth: dict) -> None: ...
    def publish_events(self, events: Sequence[Tuple[float, str]]) -> None: ...
    def publish_expectations(self) -> None: ...
    def end_run(self) -> None: ...
    def warn(self, text: str) -> None: ...


class ControlLink(Protocol):
    def idle(self, event: threading.Event, timeout: float) -> None: ...
    def hold_decisions(self, stop: threading.Event) -> float: ...
    def round_trip(self, t: float, stop: threading.Event) -> None: ...


@dataclass
class LoopOptions:
    rates: Dict[str, float]         # SimulatorConfig.rates()
    clock_period: float
    control_lockstep: bool          # wait for the router's tick after each joint state
    exit_at_end: bool


class PhysicsLoop:
    def __init__(self, sim: Simulator, lockstep: Lockstep, link: ControlLink, intake: CommandIntake,
                 outputs: SimOutputs, options: LoopOptions, pacer: Pacer, stop: threading.Event):
        self.sim, self.lock, self.link, self.intake, self.out = sim, lockstep, link, intake, outputs
        self.pacer, self.stop = pacer, stop
        self.control_lockstep = options.control_lockstep
        self.exit_at_end = options.exit_at_end
        self.events = EventDecisions()
        self.profile = WallProfile()     # where the physics thread's wall time goes
        dt = sim.dt
        self.every_js = every_steps(options.rates["joint_state_hz"], dt)
        self.every_truth = every_steps(options.rates["truth_hz"], dt)
        self.every_clock = max(1, int(round(options.clock_period / dt))) if options.clock_period > 0 else 1
        self.sensor_schedule: List[Tuple[int, List[Callable[[], None]]]] = [
            (every_steps(options.rates[rate], dt), [getattr(outputs.sensors, name) for name in names])
            for rate, names in SENSOR_RATES if every_steps(options.rates[rate], dt)]
        self._timeout_logged = False
        self._last_clock_wall = self._last_state_wall = 0.0

    def run(self) -> None:
        """Until `stop` (or the scenario's end with exit_at_end). No sensor message at t = 0: a zero
        header stamp reads as unstamped, placed by arrival time in a replay."""
        self.out.stamp_at(self.sim.steps)
        self.out.publish_clock()
        while not self.stop.is_set():
            if self.lock.blocked(self.sim.steps):
                self._hold_at_boundary()
                continue
            self._warn_first_timeout()
            k = self._step()
            self._publish_state(k)
            self._publish_sensors(k)
            self._announce_events(k)
            self.out.publish_expectations()
            if self._at_end():
                self._finish(k)
                return
            mark = self.profile.now()
            self.pacer.pace(self.sim.time)
            self.profile.add("pacing", mark)

    def _hold_at_boundary(self) -> None:
        """Paused at a boundary: re-send its clock (best effort) and, once the pause is long, the
        sensor state once a second for late joiners (rarely: every copy lands in the bag)."""
        mark = self.profile.now()
        now = time.monotonic()
        if now - self._last_clock_wall > 0.05:
            self._last_clock_wall = now
            self.out.publish_clock()
            paused_since = self.lock.waiting_since if self.lock.waiting_since is not None else now
            if now - paused_since > 1.0 and now - self._last_state_wall > 1.0:
                self._last_state_wall = now
                self.out.sensors.publish_state()     # type: ignore[attr-defined]
        self.link.idle(self.lock.event, 0.005)
        self.pacer.reset(self.sim.time)
        self.profile.add("decision lockstep", mark)

    def _warn_first_timeout(self) -> None:
        if self.lock.timeouts and not self._timeout_logged:
            self._timeout_logged = True
            lock = self.lock
            missed = lock.boundary_time() - lock.period_steps * lock.dt
            self.out.warn(f"lockstep: no decision stamped >= {missed:.3f} s "
                          f"within {lock.timeout} s: continuing without it (further timeouts are counted)")

    def _step(self) -> int:
        self.intake.apply_pending()
        mark = self.profile.now()
        self.sim.step()
        self.profile.add("physics", mark)
        self.out.stamp_at(self.sim.steps)
        return self.sim.steps

    def _publish_state(self, k: int) -> None:
        """The joint state before the clock (a tick at t sees the state at t), the router holding
        every decision before it; then, in control lockstep, the router's command of it."""
        at_boundary = self.lock.enabled and k >= self.lock.next_boundary
        js_due = bool(self.every_js) and k % self.every_js == 0
        if js_due:
            if self.control_lockstep and self.lock.enabled:
                mark = self.profile.now()
                self.link.hold_decisions(self.stop)
                self.profile.add("decision handover", mark)
            self.out.sensors.publish_joint_states()      # type: ignore[attr-defined]
        if k % self.every_clock == 0 or at_boundary or (js_due and self.control_lockstep):
            self.out.publish_clock()
        if js_due and self.control_lockstep:
            mark = self.profile.now()
            self.link.round_trip(self.sim.time, self.stop)
            self.profile.add("control round trip", mark)

    def _publish_sensors(self, k: int) -> None:
        for every, publish in self.sensor_schedule:
            if k % every == 0:
                for call in publish:
                    call()
        if self.every_truth and k % self.every_truth == 0:
            truth = self.sim.truth()
            truth["lockstep_waits"], truth["lockstep_timeouts"] = self.lock.waits, self.lock.timeouts
            truth["wall_s"] = self.profile.report()
            self.out.publish_truth(truth)

    def _publish_events(self) -> None:
        events = self.sim.pop_events()
        for _ in events:
            self.events.on_announced()
        self.out.publish_events(events)

    def _idle(self, timeout: float) -> None:
        self.link.idle(self.lock.event, timeout)

    def _announce_events(self, k: int) -> None:
        if not (self.sim.events and self.lock.announces(k)):
            return
        self._publish_events()
        if self.lock.enabled:
            mark = self.profile.now()
            self.events.wait(self.lock.timeout, self._idle, self.stop)
            self.pacer.reset(self.sim.time)
            self.profile.add("event decisions", mark)

    def _at_end(self) -> bool:
        scenario = self.sim.scenario
        return self.exit_at_end and scenario is not None and self.sim.time >= scenario.duration

    def _finish(self, k: int) -> None:
        """Publish what is still held for the next announcement, wait (up to the lockstep timeout)
        for the decisions a lagged run is still computing, then end the run."""
        self._publish_events()
        deadline = time.monotonic() + self.lock.timeout
        while not self.lock.decided_before(k) and not self.stop.is_set() and time.monotonic() < deadline:
            self._idle(0.005)
        self.out.end_run()
