"""The lockstep protocol's parts shared by the simulator and the bag player, and the simulator's
physics loop and control links driven by fakes (plain modules, no ROS)."""
import threading
from types import SimpleNamespace

import pytest

from csr_llm_bringup.lockstep import CommandWait, DecisionHandover, DecisionStamps, EventDecisions, Lockstep, \
    LockstepSettings, Pacer
from csr_llm_bringup.sim.control_link import HostedControl, RemoteControl
from csr_llm_bringup.sim.physics_loop import LoopOptions, PhysicsLoop, every_steps


def test_settings_from_a_profile_key_and_the_simulators_parameters():
    settings = LockstepSettings.from_mapping({"period": 0.5, "lag": 0.5, "control_timeout": 2})
    assert settings.enabled and settings.timeout == 30.0
    assert settings.simulator_parameters() == {"lockstep_decision_period": 0.5, "lockstep_decision_lag": 0.5,
                                               "lockstep_timeout": 30.0, "control_lockstep_timeout": 2.0}
    assert not LockstepSettings.from_mapping(None).enabled
    for bad, match in (({"period": "x"}, "must be a number"), ({"lag": float("inf")}, "finite"),
                       ({"when": 1}, "unknown key"), ([1], "mapping")):
        with pytest.raises(ValueError, match=match):
            LockstepSettings.from_mapping(bad)


def test_decision_stamps_count_the_schedule_as_a_decision_just_before_it():
    stamps = DecisionStamps(margin=0.001)
    stamps.on_schedule(0.0)                      # no schedule yet
    assert not stamps.covers(0.0, 1e-9)
    stamps.on_schedule(1.0)
    assert stamps.covers(0.999, 1e-9) and not stamps.covers(1.0, 1e-9)
    stamps.on_decision(0.5)                      # older: kept the newest
    assert stamps.latest == pytest.approx(0.999)
    assert stamps.wait_for(0.9, timeout=0.0) and not stamps.wait_for(2.0, timeout=0.0, poll=0.001)


def test_a_command_wait_returns_once_the_states_command_is_in_or_counts_a_timeout():
    commands = CommandWait(timeout=0.02, poll=0.001)
    commands.on_command(0.004)
    assert commands.wait(0.004) and commands.timeouts == 0
    assert not commands.wait(0.008) and commands.timeouts == 1 and commands.waits == 2
    stop = threading.Event()
    stop.set()
    assert commands.wait(1.0, stop) and commands.timeouts == 1     # stopping is no timeout


def test_event_decisions_wait_until_every_announced_event_is_decided():
    events = EventDecisions()
    events.on_announced()
    idled = []
    events.wait(1.0, lambda t: idled.append(t) or events.on_decided(), poll=0.002)
    assert idled == [0.002] and events.decided == events.announced == 1
    events.on_announced()
    assert events.wait(0.0, idled.append) < 0.5 and events.decided == 1      # timed out


class FakeSensors:
    def __init__(self, log):
        self.log = log
        self.pub_js = None

    def __getattr__(self, name):
        if name.startswith("publish_"):
            return lambda: self.log.append(name[len("publish_"):])
        raise AttributeError(name)


class FakeSim:
    dt = 0.001

    def __init__(self, duration=0.02, event_at=5):
        self.event_at = event_at
        self.steps = 0
        self.events = []
        self.effort_command = [0.0]
        self.scenario = SimpleNamespace(duration=duration, name="fake")

    @property
    def time(self):
        return self.steps * self.dt

    def step(self):
        self.steps += 1
        if self.steps == self.event_at:
            self.events.append((self.time, "door opened"))

    def truth(self):
        return {"t": self.time}

    def pop_events(self):
        out, self.events = self.events, []
        return out


class FakeOutputs:
    def __init__(self):
        self.log = []
        self.sensors = FakeSensors(self.log)
        self.ended = False

    def stamp_at(self, steps):
        pass

    def publish_clock(self):
        self.log.append("clock")

    def publish_truth(self, truth):
        self.log.append(("truth", truth["lockstep_waits"]))

    def publish_events(self, events):
        self.log.extend(("event", text) for _t, text in events)

    def publish_expectations(self):
        pass

    def end_run(self):
        self.ended = True

    def warn(self, text):
        self.log.append(("warn", text))


class FakeLink:
    def __init__(self, log):
        self.log = log

    def idle(self, event, timeout):
        pass

    def hold_decisions(self, stop):
        self.log.append("handover")
        return 0.0

    def round_trip(self, t, stop):
        self.log.append(("command", round(t, 3)))


def test_the_physics_loop_publishes_the_state_before_its_clock_and_waits_for_its_command():
    sim, out = FakeSim(duration=0.008), FakeOutputs()
    rates = dict.fromkeys(("imu_hz", "odom_hz", "wrench_hz", "temperature_hz", "proximity_hz", "zone_hz",
                           "camera_hz", "truth_hz"), 0.0)
    rates.update(joint_state_hz=250.0, imu_hz=500.0)
    intake = SimpleNamespace(apply_pending=lambda: None)
    loop = PhysicsLoop(sim, Lockstep(0.0, sim.dt), FakeLink(out.log), intake, out,
                       LoopOptions(rates, clock_period=0.004, control_lockstep=True, exit_at_end=True),
                       Pacer(0.0), threading.Event())
    loop.run()
    assert out.ended and sim.steps == 8
    # t=0 clock; imu at steps 2, 4, 6, 8; the joint state (no lockstep: no handover) at 4 and 8, then
    # its clock and the command round trip; the event announced when it fires (no lockstep)
    assert out.log == ["clock", "imu", "joint_states", "clock", ("command", 0.004), "imu", ("event", "door opened"),
                       "imu", "joint_states", "clock", ("command", 0.008), "imu"]
    assert every_steps(0.0, 0.001) == 0 and every_steps(250.0, 0.001) == 4


def test_the_physics_loop_holds_at_a_boundary_until_its_decision():
    sim, out = FakeSim(duration=1.0, event_at=-1), FakeOutputs()
    rates = dict.fromkeys(("joint_state_hz", "imu_hz", "odom_hz", "wrench_hz", "temperature_hz", "proximity_hz",
                           "zone_hz", "camera_hz", "truth_hz"), 0.0)
    lock = Lockstep(0.01, sim.dt, timeout=30.0)
    stop = threading.Event()
    link = FakeLink(out.log)
    held = []

    def idle(event, timeout):
        held.append(sim.steps)
        if len(held) == 3:
            lock.on_decision(0.01)      # the boundary's decision arrives
        if sim.steps >= 20:
            stop.set()
    link.idle = idle
    loop = PhysicsLoop(sim, lock, link, SimpleNamespace(apply_pending=lambda: None), out,
                       LoopOptions(rates, clock_period=0.001, control_lockstep=False, exit_at_end=False),
                       Pacer(0.0), stop)
    loop.run()
    assert held[:3] == [10, 10, 10] and lock.waits == 2 and sim.steps == 20
    assert loop.profile.report()["decision lockstep"] >= 0.0


def test_a_remote_router_is_waited_for_only_once_it_reported():
    handover, commands = DecisionHandover(timeout=0.01), CommandWait(timeout=0.01, poll=0.001)
    link = RemoteControl(handover, commands)
    link.round_trip(0.004, threading.Event())
    assert link.waits == 0
    handover.on_router_status(-1)
    link.round_trip(0.004, threading.Event())
    assert link.waits == 1 and link.timeouts == 1


def test_a_hosted_controller_is_spun_until_it_ticked_the_state_and_its_command_applied():
    node = SimpleNamespace(control_active=True, last_decision_id=3, last_tick_time=0.0,
                           last_command=SimpleNamespace(effort=[1.0], base_vx=0.1, base_wz=0.2))

    def spin(timeout):
        node.last_tick_time = 0.004
    hosted = SimpleNamespace(node=node, name="router", spin=spin)
    taken = []
    intake = SimpleNamespace(take_efforts=lambda e: taken.append(e), take_twist=lambda vx, wz: taken.append((vx, wz)))
    handover = DecisionHandover(timeout=0.01)
    link = HostedControl(hosted, handover, intake, timeout=1.0)
    link.start(1.0, threading.Event(), print)
    assert handover.router_reports and handover.accepted == 3
    link.round_trip(0.004, threading.Event())
    assert taken == [[1.0], (0.1, 0.2)] and link.waits == 1 and link.timeouts == 0
    node.control_active = False
    link.round_trip(0.008, threading.Event())
    assert link.waits == 1
