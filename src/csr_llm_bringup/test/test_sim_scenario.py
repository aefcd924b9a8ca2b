"""Scenario engine and lockstep/pacing helpers (plain modules, no ROS)."""
import threading

import pytest

from csr_llm_bringup.lockstep import DecisionHandover, Lockstep, Pacer, WallProfile
from csr_llm_bringup.sim.scenario import Scenario, ScenarioError, load_scenario, resolve_scenario_path
from csr_llm_bringup.sim.simulator import Simulator


@pytest.fixture(scope="module")
def default_run():
    """The default scenario, 61 s of sim time with no controller attached (physical events only)."""
    scenario = load_scenario("default")
    sim = Simulator(scenario=scenario)
    trace = []
    events = []
    while sim.time < 61.0:
        sim.step(10)
        t = sim.truth()
        trace.append((t["time"], t["person_distance"], t["on_slip"], t["temperatures"]["arm_shoulder_lift"],
                      t["odom_vx"], t["base_vx"], t["zone"]))
        events.extend(sim.pop_events())
    return scenario, sim, trace, events


def test_default_scenario_loads():
    path = resolve_scenario_path("default")
    assert path.name == "default.yaml" and path.is_file()
    sc = load_scenario(str(path))
    assert sc.name == "default" and 50.0 <= sc.duration <= 70.0
    assert sc.robot_start == (0.0, 0.0, 0.0)
    first = sc.events[0]
    assert first.at == 1.0 and first.say == "task: open the door"
    ids = {e.id for e in sc.events}
    assert {"person_coming", "person_left", "motor_hot", "slip_enter", "object_appears", "task_fetch"} <= ids
    assert all(e.say is None or e.decides == "reasoning" for e in sc.events)   # it says only what is not sensed


def test_default_scenario_produces_the_physical_events_whatever_the_robot_does(default_run):
    scenario, sim, trace, events = default_run
    texts = [text for _, text in events]
    assert texts[0] == "task: open the door"
    assert texts == ["task: open the door", "operator drives the robot back into the corridor",
                     "operator drives the robot to the warehouse shelf", "object on the shelf in front of you: box",
                     "task: fetch the box from the warehouse shelf", "scenario complete"]
    assert {"person_close", "person_left", "slip_enter", "slip_leave", "motor_hot", "motor_cooled"} <= {
        entry[1] for entry in scenario.log}         # the world events happen whatever the robot does
    times = [t for t, _ in events]
    assert times == sorted(times)
    # every fired event fired once
    fired = [entry[1] for entry in scenario.log]
    assert len(fired) == len(set(fired))
    assert not scenario.errors
    # person: comes closer than 0.6 m, then goes away again
    dist = [(t, d) for t, d, *_ in trace]
    t_close = next(t for t, d in dist if d < 0.6)
    assert min(d for _, d in dist) < 0.45
    assert any(d > 1.0 for t, d in dist if t > t_close)
    # heat: above 70 C and back below 60 C
    temps = [(t, temp) for t, _, _, temp, *_ in trace]
    t_hot = next(t for t, temp in temps if temp > 70.0)
    assert any(temp < 60.0 for t, temp in temps if t > t_hot)
    # slip: somewhere on the patch the wheel odometry speed disagrees with the true speed
    assert max(abs(ov - tv) for _, _, slip, _, ov, tv, _ in trace if slip) > 0.1
    # the robot ends in the warehouse with the box on the shelf in reach
    assert sim.zone() == "warehouse" and sim.object_present
    assert sim.object_position()[2] > 0.3


def test_timed_and_triggered_events_fire_once_in_order():
    sc = Scenario({
        "name": "t",
        "person": {"x": 0.0, "y": -3.0},
        "events": [
            {"id": "late", "at": 0.3, "say": "late"},
            {"id": "early", "at": 0.2, "say": "early"},
            {"id": "come", "at": 0.1, "say": "come", "person": {"approach": 0.5, "speed": 5.0}},
            {"id": "close", "after": "come", "when": {"person_distance_below": 0.8},
             "say": "close {person_distance:.1f}", "decides": "reasoning"},   # a triggered notice
            {"id": "later", "after": ["close", "late"], "delay": 0.5, "say": "later"},
            {"id": "heat", "at": 0.4, "heat": {"joint": "gripper", "add": 50.0}},
            {"id": "hot", "when": {"temperature_above": {"joint": "gripper", "value": 70.0}}, "say": "hot",
             "decides": "reasoning"},
            {"id": "never", "when": {"on_slip": True}, "say": "never", "decides": "reasoning"},
        ]})
    sim = Simulator(scenario=sc)
    sim.step(2000)
    events = sim.pop_events()
    texts = [text for _, text in events]
    assert texts[:3] == ["come", "early", "late"]
    assert texts[3] == "hot"
    assert texts[4].startswith("close 0.")
    assert texts[5] == "later"
    assert len(texts) == 6 and "never" not in texts
    t = dict((text.split()[0], time) for time, text in events)
    assert abs(t["later"] - (t["close"] + 0.5)) < 0.011
    assert abs(t["early"] - 0.2) < 0.011 and abs(t["late"] - 0.3) < 0.011
    sim.step(2000)   # the conditions still hold: nothing fires again
    assert sim.pop_events() == []
    assert sc.fired("never") is None and not sc.finished


@pytest.mark.parametrize("bad, message", [
    ({"events": [{"at": 1.0, "sing": "x"}]}, "unknown keys"),
    ({"events": [{"say": "no trigger"}]}, "needs `at`"),
    ({"events": [{"at": 1.0, "heat": {"joint": "knee", "add": 1}}]}, "unknown joint"),
    ({"events": [{"at": 1.0, "after": "nobody", "say": "x"}]}, "unknown event"),
    ({"events": [{"when": {"moon_phase": 1}, "say": "x"}]}, "unknown condition"),
    ({"events": [{"id": "a", "at": 1}, {"id": "a", "at": 2}]}, "duplicate"),
    ({"events": [{"at": "soon"}]}, "expected a number"),
    ({"robots": {}}, "unknown keys"),
])
def test_invalid_scenarios_are_refused_with_a_clear_message(bad, message):
    with pytest.raises(ScenarioError, match=message):
        Scenario(bad)


def test_missing_scenario_file_is_a_scenario_error(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(str(tmp_path / "nope.yaml"))
    (tmp_path / "bad.yaml").write_text("events: [\n")
    with pytest.raises(ScenarioError, match="YAML"):
        load_scenario(str(tmp_path / "bad.yaml"))


class FakeWall:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_lockstep_blocks_at_each_boundary_until_a_decision_at_or_after_it():
    wall = FakeWall()
    lock = Lockstep(0.5, 0.001, timeout=30.0, wall=wall)
    assert not lock.blocked(0) and not lock.blocked(499)
    assert lock.blocked(500) and lock.waits == 1
    lock.on_decision(0.499)            # too old
    wall.t = 10.0
    assert lock.blocked(500) and lock.waits == 1
    lock.on_decision(0.5)
    assert not lock.blocked(500)
    assert lock.boundary_time() == pytest.approx(1.0)
    assert not lock.blocked(999) and lock.blocked(1000) and lock.waits == 2
    lock.on_decision(1.7)              # a decision far ahead also releases the next boundary ...
    assert not lock.blocked(1000) and not lock.blocked(1500)
    assert lock.blocked(2000)          # ... but not one after its stamp
    wall.t += 31.0                     # timeout: count it, continue
    assert not lock.blocked(2000) and lock.timeouts == 1
    assert lock.boundary_time() == pytest.approx(2.5)
    assert not Lockstep(0.0, 0.001).blocked(10 ** 6)


def test_lockstep_with_a_lag_waits_for_the_decision_one_lag_older_than_the_boundary():
    wall = FakeWall()
    lock = Lockstep(0.5, 0.001, timeout=30.0, wall=wall, lag=0.5)
    lock.on_schedule(0.5)              # the first periodic decision is stamped 0.5
    assert not lock.blocked(500)       # 0.5 needs the decision of 0.0: none is due before 0.5
    assert lock.blocked(1000)          # 1.0 needs the one stamped 0.5: simulating went on meanwhile
    lock.on_decision(0.5)
    assert not lock.blocked(1000) and lock.blocked(1500) and lock.waits == 2
    lock.on_decision(1.0)
    assert not lock.blocked(1500)
    assert not lock.decided_before(2000)      # a run ending at 2.0 waits for the decision of 1.5
    lock.on_decision(1.5)
    assert lock.decided_before(2000) and Lockstep(0.5, 0.001).decided_before(2000) is False
    assert Lockstep(0.0, 0.001).decided_before(2000)
    with pytest.raises(ValueError, match="lag"):
        Lockstep(0.5, 0.001, lag=-0.5)


def test_lockstep_does_not_wait_at_boundaries_before_the_decision_loops_next_due_time():
    lock = Lockstep(0.5, 0.001, timeout=30.0, wall=FakeWall())
    assert lock.blocked(500)
    lock.on_schedule(1.0)              # first chunk at 0.5: the first periodic decision is at 1.0
    assert not lock.blocked(500) and lock.timeouts == 0
    assert lock.blocked(1000)          # ... where it waits for it
    lock.on_schedule(0.0)              # nothing scheduled: changes nothing
    assert lock.blocked(1000)


def test_decision_handover_holds_the_next_state_until_the_router_has_every_decision_seen():
    wall = FakeWall()
    handover = DecisionHandover(timeout=0.5, wall=wall)
    handover.on_decision(0)
    assert not handover.pending() and handover.wait() == 0.0     # no router reporting yet: off
    handover.on_router_status(-1)
    assert handover.pending()
    handover.on_router_status(0)
    assert not handover.pending() and handover.wait() == 0.0
    handover.on_decision(3)
    handover.on_router_status(2)                                 # one behind: still held
    assert handover.pending()
    handover.on_router_status(1)                                 # an older report never lowers it
    assert handover.accepted == 2
    # the router never reports 3 (inactive, say): the wait ends at the timeout and is counted
    waited = []
    handover.event.wait = lambda _t: waited.append(setattr(wall, "t", wall.t + 0.1)) or False
    assert handover.wait() == pytest.approx(0.5) and handover.timeouts == 1 and len(waited) == 5
    handover.on_router_status(3)
    assert not handover.pending()
    # a hosted router is spun in the wait (idle), and reports the decision it then holds
    handover.on_decision(4)
    spun = []
    assert handover.wait(idle=lambda t: spun.append(t) or handover.on_router_status(4)) == 0.0
    assert spun == [0.002] and not handover.pending()


def test_the_control_lockstep_starts_only_once_the_router_reported_active():
    wall = FakeWall()
    handover = DecisionHandover(timeout=0.5, wall=wall)
    waits = []
    handover.event.wait = lambda _t: waits.append(setattr(wall, "t", wall.t + 0.25)) or False
    assert not handover.wait_for_router(1.0) and wall.t == pytest.approx(1.0) and len(waits) == 4
    # the router's activation status (latched: it arrives even if sent before the subscription)
    handover.on_router_status(-1)
    waits.clear()
    assert handover.wait_for_router(1.0) and waits == []
    # a stop request ends the wait at once
    stop = threading.Event()
    stop.set()
    assert not DecisionHandover(wall=wall).wait_for_router(10.0, stop)


def test_wall_profile_charges_each_phase_and_the_rest_to_other():
    wall = FakeWall()
    profile = WallProfile(wall=wall)
    mark = profile.now()                       # the profile starts at its first mark
    wall.t += 0.3
    mark = profile.add("decision lockstep", mark)
    wall.t += 0.1                              # untimed: publishing
    mark = profile.now()
    wall.t += 0.05
    profile.add("physics", mark)
    report = profile.report()
    assert report["decision lockstep"] == pytest.approx(0.3) and report["physics"] == pytest.approx(0.05)
    assert report["other"] == pytest.approx(0.1) and report["total"] == pytest.approx(0.45)
    assert report["pacing"] == 0.0
    assert profile.format().startswith("wall time 0.5 s: decision lockstep 0.3 s (67%)")


def test_pacer_sleeps_when_ahead_and_never_when_real_time_factor_is_zero():
    wall = FakeWall()
    slept = []

    def sleep(s):
        slept.append(s)
        wall.t += s
    pacer = Pacer(2.0, wall=wall, sleep=sleep)
    pacer.pace(0.0)
    pacer.pace(1.0)                    # 1 s of sim at rtf 2 should take 0.5 s of wall
    assert slept == [pytest.approx(0.5)]
    wall.t += 3.0
    assert pacer.pace(1.002) > 1.0     # far behind: reports it, re-anchors
    fast = Pacer(0.0, wall=wall, sleep=sleep)
    assert fast.pace(100.0) == 0.0 and len(slept) == 1


def test_an_operator_drive_with_brake_holds_the_wheels_still_whatever_cmd_vel_says():
    sim = Simulator()
    sim.drive(0.4, duration=0.5, brake=0.6)
    sim.step(100)                                   # 0.2 s of driving
    assert sim.driving and sim.base_command()[0] == pytest.approx(0.4)
    while sim.time < 0.55:
        sim.set_cmd_vel(-0.3, 0.0)                  # the robot's own command is overridden meanwhile
        sim.step(10)
    assert sim.driving and sim.base_command() == (0.0, 0.0)
    while sim.time < 1.2:
        sim.set_cmd_vel(-0.3, 0.0)
        sim.step(10)
    assert not sim.driving and sim.base_command()[0] == pytest.approx(-0.3)   # handed back
