"""Impossible readings change nothing in the router: a motor below absolute zero keeps its derate,
a negative or out-of-sensor range neither raises nor clears an interrupt, an impossible wrench or
joint state reaches no monitor or cache layer; each kind is logged once, then counted."""
import math

import numpy as np

from action_router.level3 import EXEC_DERATED, EXEC_NOMINAL
from router_rig import Rig


def kinds(rig):
    return [kind for kind, _ in rig.faults]


def test_a_motor_at_minus_300_c_keeps_its_derate_and_is_logged_once():
    rig = Rig()
    r = rig.router
    r.submit_decision("hold_position")
    rig.step(50)
    r.set_temperature("arm_shoulder_lift", 75.0)
    rig.step(2)
    assert r.command.execution_state == EXEC_DERATED and r.derate_count == 1
    for _ in range(20):
        assert not r.set_temperature("arm_shoulder_lift", -300.0)
        rig.step(5)
    assert r.command.execution_state == EXEC_DERATED and r.intake.temperature.hot[r.joint_index["arm_shoulder_lift"]]
    assert kinds(rig) == ["temperature_impossible"] and "below absolute zero" in rig.faults[0][1]
    assert r.faults.counts["temperature_impossible"] == 20
    r.set_temperature("arm_shoulder_lift", 60.0)         # a real cooling still clears it
    rig.step(2)
    assert r.command.execution_state == EXEC_NOMINAL


def test_a_motor_at_1000_c_does_not_derate():
    rig = Rig()
    r = rig.router
    r.submit_decision("hold_position")
    rig.step(50)
    assert not r.set_temperature("arm_elbow", 1000.0)
    rig.step(5)
    assert r.command.execution_state == EXEC_NOMINAL and r.derate_count == 0
    assert kinds(rig) == ["temperature_impossible"]


def test_impossible_ranges_neither_raise_nor_clear_an_interrupt():
    rig = Rig()
    r = rig.router
    r.submit_decision("open_door")
    rig.step(300)
    rig.proximity = 0.5                                  # a person close: the retreat interrupt
    rig.step(1)
    assert r.stack.depth == 1 and r.command.sub_task == "retreat_10cm"
    rig.proximity = -5.0                                 # impossible: would read as "touching" (freeze)
    rig.step(200)                                        # within proximity_timeout_s
    assert r.stack.depth == 1 and r.command.sub_task == "retreat_10cm"
    for distance in (math.nan, -0.1):
        assert not r.set_proximity(distance, now=rig.now)
    assert not r.set_proximity(7.0, now=rig.now, min_range=0.0, max_range=5.0)   # REP 117 says +inf
    assert not r.set_proximity(0.01, now=rig.now, min_range=0.05, max_range=5.0)  # REP 117 says -inf
    rig.step(1)
    assert r.stack.depth == 1 and r.command.sub_task == "retreat_10cm"
    assert sorted(set(kinds(rig))) == ["proximity_impossible", "proximity_invalid"] and len(rig.faults) == 2
    assert r.faults.counts["proximity_impossible"] == 200 + 3 + 1 and r.faults.counts["proximity_invalid"] == 1
    assert r.set_proximity(math.inf, now=rig.now, min_range=0.0, max_range=5.0)  # nothing in range: valid


def test_an_impossible_wrench_never_reaches_the_grip_monitor():
    rig = Rig(plant=False)
    r = rig.router
    assert r.set_wrench([0.0, 0.0, 3.0], now=0.0)
    for force, torque in (([5e5, 0.0, 0.0], ()), ([0.0, 0.0, 20.0], (0.0, 0.0, 1e6)),
                          ([0.0, 0.0, 20.0], (math.nan, 0.0, 0.0))):
        assert not r.set_wrench(force, now=0.001, torque=torque)
    tick = r.intake.begin(0.002, np.zeros(r.n), 0.0)
    assert tick.snap.grip_force == 3.0 and tick.snap.wrench_time == 0.0
    assert kinds(rig) == ["wrench_impossible", "wrench_invalid"]


def test_joint_states_far_beyond_the_robot_description_are_refused_whole():
    rig = Rig(plant=False)
    r = rig.router
    good = [0.1, 0.2, 0.3, 0.4, 0.04]
    assert r.set_joint_state(r.joints, good, [0.0] * 5, [0.0] * 5, now=0.0)
    elbow = r.joint_index["arm_elbow"]
    overshoot = list(good)
    overshoot[elbow] = 2.7                               # 0.1 rad past its 2.6 rad limit: a real overshoot
    assert r.set_joint_state(r.joints, overshoot, now=0.001)
    for position, velocity, effort in (
            ([50.0 if j == elbow else q for j, q in enumerate(good)], [], []),     # 50 rad on a +-2.6 rad joint
            (good, [300.0 if j == elbow else 0.0 for j in range(5)], []),        # 300 rad/s at 2 rad/s max
            (good, [], [-1e4 if j == elbow else 0.0 for j in range(5)]),        # 10 kN m at 35 N m max
            (good, [], [1e300] * 5)):
        assert not r.set_joint_state(r.joints, position, velocity, effort, now=0.002)
    assert not r.set_joint_state(["arm_elbow"], [50.0], now=0.003)         # a partial message too
    snap = r.inputs.snapshot()
    assert list(snap.joint_pos) == overshoot and snap.state_version == 2 and snap.state_time == 0.001
    assert kinds(rig) == ["joint_state_impossible"] and "position 50 (outside [-7.8, 7.8])" in rig.faults[0][1]
    assert r.faults.counts == {"joint_state_impossible": 5}


def test_the_node_passes_the_range_interval_and_the_torque_to_the_router():
    from geometry_msgs.msg import WrenchStamped
    from sensor_msgs.msg import Range

    from action_router.router_sensors import RouterSensors
    rig = Rig(plant=False)
    r = rig.router
    sensors = RouterSensors(lambda: r, lambda: None, lambda header: 0.5, lambda: 0.5)
    sensors._on_proximity(Range(range=7.0, min_range=0.0, max_range=5.0))
    sensors._on_proximity(Range(range=7.0))                  # no interval set: a plausible 7 m
    wrench = WrenchStamped()
    wrench.wrench.torque.z = 1e6
    sensors._on_wrench(wrench)
    assert kinds(rig) == ["proximity_impossible", "wrench_impossible"]
    assert r.inputs.snapshot().proximity == 7.0
