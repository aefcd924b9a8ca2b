"""Level 3 alone: PID clamped to the execution layer's limit, persistent clamping -> failure flag and
a linear ramp to the safe-stop set, zero-effort ramp, base speed binding, no command without a state."""
import numpy as np
import pytest

from action_router.cache import ExecutionLayer, ExecutionSet
from action_router.interrupts import SOURCE_NONE, SOURCE_SAFE_STOP, SOURCE_TASK, Frame
from action_router.level3 import EXEC_FAILSAFE, EXEC_NOMINAL, EXEC_STOPPED, Level3
from action_router.params import make_config
from action_router.subtask import SubTask

CFG = make_config()
JOINTS = list(CFG.joints)
N = len(JOINTS)
LIMIT = np.array(CFG["effort_max"], dtype=float)
ZERO = np.zeros(N)


def level3(**kw):
    args = dict(cache_enabled=True, failsafe_ramp_s=0.2, clamp_persist_s=0.25, base_max_linear=0.5,
                base_max_angular=1.0)
    args.update(kw)
    gains = [CFG.gains[j] for j in JOINTS]
    return Level3(JOINTS, gains, LIMIT, **args), ExecutionLayer(ExecutionSet(gains, LIMIT.copy()))


def subtask(name):
    return SubTask(0, name, dict(CFG.subtasks[name]), JOINTS, CFG)


def task(args=None):
    frame = Frame(SOURCE_TASK, "t", [0], args=dict(args or {}))
    frame.started = True
    return frame


def test_effort_follows_the_error_and_is_clamped_to_the_execution_limit():
    l3, ex = level3()
    st = subtask("hold")
    ref = np.array([0.01, -0.01, 0.0, 0.0, 0.0])
    out = l3.step(0.0, 0.001, ex, SOURCE_TASK, True, task(), st, ref, ZERO, ZERO, ZERO)
    assert out.effort[0] > 0 and out.effort[1] < 0 and not out.clamped_any
    assert out.execution_state == EXEC_NOMINAL and out.source == SOURCE_TASK
    far = np.array([3.0, -2.0, 0.0, 0.0, 0.0])               # errors that saturate joints 0 and 1
    out = l3.step(0.001, 0.001, ex, SOURCE_TASK, True, task(), st, far, ZERO, ZERO, ZERO)
    assert out.effort[0] == LIMIT[0] and out.effort[1] == -LIMIT[1]
    assert list(out.clamped) == [True, True, False, False, False] and out.clamped_any
    assert np.array_equal(out.effort_limit, LIMIT)


def test_persistent_clamping_raises_the_failure_flag_and_ramps_linearly_to_zero():
    l3, ex = level3()
    st = subtask("hold")
    far = np.array([3.0, 0.0, 0.0, 0.0, 0.0])
    now, out = 0.0, None
    while now < 0.3:
        out = l3.step(now, 0.001, ex, SOURCE_TASK, True, task(), st, far, ZERO, ZERO, ZERO)
        if out.failure:
            break
        now += 0.001
    assert out.failure.startswith("effort clamped for 0.25 s on arm_shoulder_pan")
    assert now == pytest.approx(0.25, abs=0.0015) and ex.failure
    assert out.source == SOURCE_SAFE_STOP and out.execution_state == EXEC_FAILSAFE
    assert np.all(l3.pid.i_term == 0.0)
    start = out.effort[0]
    assert start == LIMIT[0]                                  # no step on the failing tick
    t0 = now
    half = l3.step(t0 + 0.1, 0.001, ex, SOURCE_SAFE_STOP, True, None, None, far, ZERO, ZERO, ZERO)
    assert half.effort[0] == pytest.approx(start * 0.5) and half.execution_state == EXEC_FAILSAFE
    end = l3.step(t0 + 0.2, 0.001, ex, SOURCE_SAFE_STOP, True, None, None, far, ZERO, ZERO, ZERO)
    assert np.all(end.effort == 0.0) and end.execution_state == EXEC_STOPPED


def test_no_source_or_no_state_commands_zero_and_reports_no_source():
    l3, ex = level3()
    st = subtask("hold")
    far = np.full(N, 1.0)
    out = l3.step(0.0, 0.001, ex, SOURCE_NONE, True, None, None, far, ZERO, ZERO, ZERO)
    assert np.all(out.effort == 0.0) and out.execution_state == EXEC_STOPPED and out.source == SOURCE_NONE
    out = l3.step(0.001, 0.001, ex, SOURCE_TASK, False, task(), st, far, ZERO, ZERO, ZERO)
    assert np.all(out.effort == 0.0) and out.source == SOURCE_NONE and out.base_vx == 0.0


def test_zero_effort_sub_task_ramps_from_the_last_command():
    l3, ex = level3()
    hold, stop = subtask("hold"), subtask("stop")
    ref = np.array([0.01, 0.0, 0.0, 0.0, 0.0])
    before = l3.step(0.0, 0.001, ex, SOURCE_TASK, True, task(), hold, ref, ZERO, ZERO, ZERO).effort.copy()
    l3.start_zero_ramp(0.001)
    mid = l3.step(0.101, 0.001, ex, SOURCE_TASK, True, task(), stop, ref, ZERO, ZERO, ZERO)
    assert mid.effort[0] == pytest.approx(before[0] * 0.5) and mid.execution_state == EXEC_NOMINAL
    end = l3.step(0.201, 0.001, ex, SOURCE_TASK, True, task(), stop, ref, ZERO, ZERO, ZERO)
    assert np.all(end.effort == 0.0) and end.execution_state == EXEC_STOPPED


def test_base_speed_argument_keeps_the_template_sign_and_is_clamped():
    l3, ex = level3(base_max_linear=0.25)
    reverse = subtask("reverse")                              # template vx -0.20
    out = l3.step(0.0, 0.001, ex, SOURCE_TASK, True, task({"base_speed": 0.1}), reverse, ZERO, ZERO, ZERO, ZERO)
    assert out.base_vx == pytest.approx(-0.1)
    out = l3.step(0.001, 0.001, ex, SOURCE_TASK, True, task({"base_speed": 0.4}), reverse, ZERO, ZERO, ZERO, ZERO)
    assert out.base_vx == pytest.approx(-0.25)
    out = l3.step(0.002, 0.001, ex, SOURCE_TASK, True, task(), reverse, ZERO, ZERO, ZERO, ZERO)
    assert out.base_vx == pytest.approx(-0.2)


def test_execution_layer_limit_change_reaches_the_pid_clamp():
    l3, ex = level3()
    st = subtask("hold")
    far = np.array([3.0, 0.0, 0.0, 0.0, 0.0])
    ex.set_derated(np.array([True, False, False, False, False]))
    out = l3.step(0.0, 0.001, ex, SOURCE_TASK, True, task(), st, far, ZERO, ZERO, ZERO)
    assert out.effort[0] == pytest.approx(LIMIT[0] * float(CFG["derate_limit_scale"]))
