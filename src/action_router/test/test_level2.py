"""Level 2 alone: anchoring at the current pose, cached segment hits, re-planning from a measured
state far from the reference, zero-effort sub-tasks, the stateless (cache disabled) planner."""
import numpy as np
import pytest

from action_router.interrupts import SOURCE_TASK, Frame
from action_router.level2 import Level2
from action_router.params import make_config
from action_router.subtask import SubTask

CFG = make_config()
JOINTS = list(CFG.joints)
N = len(JOINTS)
PERIOD = 0.001


def level2(cache=True):
    return Level2(N, 16, period=PERIOD, horizon_s=0.05, samples=100, blend_s=0.3,
                  q_min=np.array(CFG["position_min"]), q_max=np.array(CFG["position_max"]),
                  v_max=np.array(CFG["velocity_max"]), cache_enabled=cache, replan_error=0.5)


def subtask(name, index=0):
    return SubTask(index, name, dict(CFG.subtasks[name]), JOINTS, CFG)


Q0 = np.array([0.1, -0.2, 0.3, 0.0, 0.04])
ZERO = np.zeros(N)


def test_a_new_sub_task_anchors_at_the_current_pose_then_serves_the_cached_segment():
    l2, st, frame = level2(), subtask("approach_handle"), Frame(SOURCE_TASK, "open_door", [0])
    first = l2.step(0.0, frame, st, Q0, ZERO)
    assert first.restarted and first.tracking and not first.hit and frame.started and frame.run_since == 0.0
    assert np.max(np.abs(first.reference_position - Q0)) < 1e-3      # the reference starts where the arm is
    hits = [l2.step(k * PERIOD, frame, st, Q0, ZERO) for k in range(1, 40)]
    assert all(h.hit and not h.restarted for h in hits)               # inside the 50 ms segment
    assert l2.behaviour.hits == 39 and l2.behaviour.lookups == 40


def test_a_measurement_far_from_the_reference_replans_from_the_measured_state():
    l2, st, frame = level2(), subtask("approach_handle"), Frame(SOURCE_TASK, "open_door", [0])
    l2.step(0.0, frame, st, Q0, ZERO)
    pushed = Q0 + np.array([0.8, 0.0, 0.0, 0.0, 0.0])                  # beyond replan_error (0.5 rad)
    out = l2.step(PERIOD, frame, st, pushed, ZERO)
    assert not out.hit
    assert abs(out.reference_position[0] - pushed[0]) < 0.01          # blended from where the arm is now


def test_zero_effort_sub_task_tracks_nothing():
    l2, frame = level2(), Frame(SOURCE_TASK, "stop", [0])
    out = l2.step(0.0, frame, subtask("stop"), Q0, ZERO)
    assert out.restarted and not out.tracking


def test_resume_after_another_sub_task_reanchors_at_the_current_pose():
    l2 = level2()
    task, other = subtask("approach_handle", 0), subtask("reach_shelf", 1)
    frame = Frame(SOURCE_TASK, "open_door", [0])
    l2.step(0.0, frame, task, Q0, ZERO)
    l2.step(0.1, Frame(SOURCE_TASK, "pick_object", [1]), other, Q0, ZERO)   # an interrupt ran meanwhile
    frame.needs_resume = True
    moved = Q0 + np.array([0.2, 0.2, 0.2, 0.2, 0.0])               # arm joints moved meanwhile
    out = l2.step(0.5, frame, task, moved, ZERO)
    assert out.restarted and l2.behaviour.subtask == task.index
    assert np.max(np.abs(out.reference_position - moved)) < 1e-2


def test_cache_disabled_never_serves_a_segment_and_follows_each_frames_measurement():
    l2, st, frame = level2(cache=False), subtask("approach_handle"), Frame(SOURCE_TASK, "open_door", [0])
    a = l2.step(0.0, frame, st, Q0, ZERO).reference_position.copy()
    b = l2.step(PERIOD, frame, st, Q0 + 0.01, ZERO).reference_position.copy()
    assert l2.behaviour.hits == 0
    assert abs(b[0] - a[0]) < 0.002                                  # mid-frame: the frame's plan, not this tick's
    c = l2.step(0.05, frame, st, Q0 + 0.01, ZERO).reference_position.copy()
    d, twin = level2(cache=False), Frame(SOURCE_TASK, "open_door", [0])
    d.step(0.0, twin, st, Q0, ZERO)                                  # a twin that measures Q0 at the next frame
    e = d.step(0.05, twin, st, Q0, ZERO).reference_position.copy()
    assert c[0] - e[0] == pytest.approx(0.01, rel=0.01)              # the next frame starts from its measurement


def test_final_pose_is_the_anchored_templates_end():
    l2, st, frame = level2(), subtask("approach_handle"), Frame(SOURCE_TASK, "open_door", [0])
    l2.step(0.0, frame, st, Q0, ZERO)
    final = l2.final_pose(st)
    assert final[:4] == pytest.approx([0.30, 0.70, -1.00, 0.30])      # absolute template end
