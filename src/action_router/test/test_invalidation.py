"""Physical invalidations: grip done after the dwell, derating above temperature, confidence bit,
fail-safe interpolation to the safe-stop set (no step to zero)."""
import numpy as np
import pytest

from action_router.monitors import ClampMonitor, GripMonitor, TemperatureMonitor
from action_router.router import EXEC_DERATED, EXEC_FAILSAFE, EXEC_NOMINAL, EXEC_STOPPED
from router_rig import Rig


def test_grip_monitor_needs_the_full_dwell_above_threshold():
    g = GripMonitor(15.0, 0.2)
    assert not g.update(20.0, 0.0)
    assert not g.update(20.0, 0.199)
    assert not g.update(10.0, 0.2)      # dropped below: dwell restarts
    assert not g.update(16.0, 0.3)
    assert not g.update(float("nan"), 0.35)
    assert not g.update(16.0, 0.4)
    assert g.update(16.0, 0.6)


def test_grip_sub_task_done_only_after_15N_for_200ms():
    rig = Rig()
    rig.router.submit_decision("open_door")
    assert rig.run_until(lambda r: r.command.sub_task == "door_handle_grip", 5.0)
    rig.feed_wrench = False
    r = rig.router
    r.set_wrench([0, 0, 20.0], now=rig.now)
    t_on = rig.now
    while rig.now - t_on < 0.19:
        r.set_wrench([0, 0, 20.0], now=rig.now)
        rig.step()
    assert r.command.sub_task == "door_handle_grip" and r.grip_done_count == 0
    while r.grip_done_count == 0 and rig.now - t_on < 0.25:
        r.set_wrench([0, 0, 20.0], now=rig.now)
        rig.step()
    assert r.grip_done_count == 1
    assert rig.now - t_on >= 0.2 - 1e-6
    r.set_wrench([0, 0, 20.0], now=rig.now)
    rig.step(2)
    assert r.command.sub_task == "pull_door"


def test_grip_done_in_closed_loop_with_the_plant():
    rig = Rig()
    rig.router.submit_decision("open_door")
    assert rig.run_until(lambda r: r.command.sub_task == "pull_door", 6.0)
    assert rig.router.grip_done_count == 1
    assert any("grip held" in line for line in rig.infos)


def test_temperature_above_limit_swaps_in_the_derated_set_with_hysteresis():
    m = TemperatureMonitor(2, 70.0, 5.0)
    assert m.update(np.array([69.0, np.nan])) == 0
    assert m.update(np.array([71.0, 20.0])) == 1 and list(m.hot) == [True, False]
    assert m.update(np.array([68.0, 20.0])) == 0 and m.hot[0]       # inside the hysteresis band
    m.update(np.array([64.0, 20.0]))
    assert not m.hot[0]


def test_router_derates_a_hot_motor_and_lowers_its_limit():
    rig = Rig()
    r = rig.router
    r.submit_decision("hold_position")
    rig.step(50)
    j = r.joint_index["arm_shoulder_lift"]
    nominal = r.command.effort_limit[j]
    assert r.command.execution_state == EXEC_NOMINAL
    r.set_temperature("arm_shoulder_lift", 75.0)
    rig.step(2)
    assert r.command.execution_state == EXEC_DERATED and r.derate_count == 1
    assert r.command.effort_limit[j] == pytest.approx(nominal * float(rig.cfg["derate_limit_scale"]))
    assert r.execution.gains[j].p == pytest.approx(
        rig.cfg.gains["arm_shoulder_lift"].p * float(rig.cfg["derate_gain_scale"]))
    r.set_temperature("arm_shoulder_lift", 60.0)
    rig.step(2)
    assert r.command.execution_state == EXEC_NOMINAL and r.command.effort_limit[j] == nominal


def test_actuator_feedback_flips_the_confidence_bit():
    rig = Rig(plant=False)
    r = rig.router
    J = r.joints
    r.submit_decision("hold_position")
    for _ in range(200):
        # the drive reports 30 N m more than commanded on joint 0
        eff = r.command.effort.copy()
        eff[0] += 30.0
        r.set_joint_state(J, np.zeros(5), np.zeros(5), eff, now=rig.now)
        r.tick(rig.now)
        rig.now += 0.001
    assert r.confidence.flips >= 1 and not r.execution.confidence[0] and r.execution.confidence[1]
    for _ in range(100):
        r.set_joint_state(J, np.zeros(5), np.zeros(5), r.command.effort.copy(), now=rig.now)
        r.tick(rig.now)
        rig.now += 0.001
    assert r.execution.confidence[0] and r.confidence.flips >= 2


def test_persistent_clamping_sets_the_failure_flag_and_ramps_without_a_step():
    rig = Rig(plant=False, failsafe_clamp_persist_s=0.25, failsafe_ramp_s=0.2)
    r = rig.router
    J = r.joints
    r.submit_decision("open_door")
    efforts, states = [], []
    # a blocked arm: the joint states never move, the PID saturates
    for _ in range(1500):
        r.set_joint_state(J, np.zeros(5), np.zeros(5), [], now=rig.now)
        r.tick(rig.now)
        efforts.append(r.command.effort.copy())
        states.append(r.command.execution_state)
        rig.now += 0.001
    efforts = np.array(efforts)
    assert r.failsafe_count == 1 and r.execution.failure
    first_fail = states.index(EXEC_FAILSAFE)
    assert states[-1] == EXEC_STOPPED and np.all(efforts[-1] == 0.0)
    before = np.abs(efforts[first_fail - 1])
    assert before.max() > 5.0                      # it was pushing hard when it failed
    steps = np.abs(np.diff(efforts[first_fail - 1:first_fail + 250], axis=0)).max(axis=0)
    # linear ramp over 0.2 s at 1 kHz: each step at most 1/200 of the starting effort (+ rounding)
    assert np.all(steps <= before / 200.0 * 1.01 + 1e-9)
    assert np.all(r.level3.pid.i_term == 0.0)             # integrators cleared
    # a new decision re-arms
    r.submit_decision("hold_position")
    r.set_joint_state(J, np.zeros(5), np.zeros(5), [], now=rig.now)
    r.tick(rig.now)
    assert not r.execution.failure and r.command.execution_state == EXEC_NOMINAL


def test_stale_joint_states_fail_safe():
    rig = Rig()
    r = rig.router
    r.submit_decision("hold_position")
    rig.step(100)
    rig.plant = None                               # the joint state publisher dies
    rig.step(400)
    assert r.execution.failure and r.failsafe_count == 1
    assert r.faults.counts.get("joint_state_timeout") == 1
    assert np.all(r.command.effort == 0.0) and r.command.execution_state == EXEC_STOPPED


def test_clamp_monitor_persistence():
    m = ClampMonitor(2, 0.25)
    assert not m.update(np.array([True, False]), 0.0)
    assert not m.update(np.array([True, False]), 0.2)
    assert not m.update(np.array([False, True]), 0.3)
    assert not m.update(np.array([False, True]), 0.5)
    assert m.update(np.array([False, True]), 0.55)


def test_level2_writes_the_sub_task_torque_limits_into_the_execution_layer():
    rig = Rig()
    rig.objects = [("box", rig.cfg.reach_targets[0].object_at)]   # where the shelf reach grips
    r = rig.router
    r.submit_decision("pick_object", {"object": "box"})   # every declared argument is required
    assert rig.run_until(lambda r: r.command.sub_task == "grip_object", 5.0)
    rig.step(2)
    g = r.joint_index["gripper"]
    assert r.command.effort_limit[g] == 20.0                     # grip_object: effort_limit gripper 20
    assert rig.run_until(lambda r: r.command.sub_task == "lift_object", 5.0)
    rig.step(2)
    assert r.command.effort_limit[r.joint_index["arm_shoulder_lift"]] == 40.0   # min(60, 40)
    assert r.command.effort_limit[g] == 25.0                     # back to the joint's own limit


def test_a_lost_decision_stream_fails_safe_and_the_next_decision_re_arms():
    infos = []
    rig = Rig(infos=infos, decision_timeout_s=0.5)
    r = rig.router
    r.submit_decision("hold_position")
    rig.step(400)                                   # 0.4 s: decisions still count as fresh
    assert not r.execution.failure
    rig.step(200)                                   # 0.6 s without a decision (the reasoning node died)
    assert r.execution.failure and r.failsafe_count == 1
    assert any("no decision for 0.5 s: reasoning node lost?" in line for line in infos)
    rig.step(400)
    assert np.all(r.command.effort == 0.0) and r.command.execution_state == EXEC_STOPPED
    r.submit_decision("hold_position")              # it is back
    rig.step(1)
    assert not r.execution.failure and r.command.execution_state == EXEC_NOMINAL
    assert r.failsafe_count == 1


def test_without_a_decision_timeout_a_task_runs_on():
    rig = Rig(decision_timeout_s=0.0)
    rig.router.submit_decision("hold_position")
    rig.step(3000)
    assert not rig.router.execution.failure
