"""compare(): decisions exactly and in order, router transitions, motor commands per joint within
tolerance, timing bounds, and the first divergence with its context (no bags, no ROS)."""
import numpy as np
import pytest

from csr_llm_bringup.compare import DecisionRecord, RunOutputs, StatusRecord, compare
from csr_llm_bringup.golden import Tolerances
from csr_llm_bringup.golden_summary import diff_summaries, summarize


def _run(intents, effort=0.0, seconds=1.0, statuses=(), ttft=100.0):
    out = RunOutputs()
    for i, (t, intent) in enumerate(intents):
        out.decisions.append(DecisionRecord(t, intent, (("speed", 0.5),), i, 10 + i, ttft + i))
        out.chunks[10 + i] = f"chunk {i}"
        out.chunk_t[10 + i] = t - 0.1
    for t, intent, sub_task, state in statuses:
        out.add_status(StatusRecord(t, intent, sub_task, "", state, 0, (0, 0, int(state == 1), 0)))
    out.motor_names = ["arm_elbow", "gripper"]
    out.motor_t = list(np.arange(0.0, seconds, 0.01))
    out.motor_effort = [np.array([np.sin(t) + effort, 0.0]) for t in out.motor_t]
    return out


STATUSES = [(0.2, "open_door", "approach_handle", 0), (0.6, "open_door", "door_handle_grip", 0)]


def test_identical_runs_match():
    result = compare(_run([(0.2, "open_door"), (0.5, "pull")]), _run([(0.2, "open_door"), (0.5, "pull")]), {})
    assert result.ok and result.lines[0] == "MATCH" and result.first is None
    assert result.lines[1] == "decisions: 2 match exactly"
    assert "arm_elbow: max |diff|    0.000 (tolerance 1) ok" in result.report()
    assert result.lines[-3].split()[-2:] == ["2", "2"]


def test_the_first_divergent_decision_is_reported_with_its_context():
    golden = _run([(0.2, "open_door"), (0.5, "pull")], statuses=STATUSES)
    replay = _run([(0.2, "open_door"), (0.5, "push")], statuses=STATUSES)
    result = compare(golden, replay, {})
    assert not result.ok and result.first is not None and result.first.stream == "decision"
    text = result.report()
    assert text.splitlines()[1] == "FIRST DIVERGENCE at sim time 0.500 s in the decision stream: " \
                                   "decision #1: decision differs"
    assert "golden: pull(speed=0.5) at 0.500 s (state version 1, last chunk seq 11" in text
    assert "replay: push(speed=0.5) at 0.500 s" in text
    assert "seq 10 @ 0.100 s: chunk 0" in text and "seq 11 @ 0.400 s: chunk 1" in text   # the stream before it
    assert "router state golden: open_door/approach_handle, nominal, interrupt depth 0" in text


def test_a_decision_at_another_boundary_is_a_divergence():
    result = compare(_run([(0.2, "open_door"), (0.5, "pull")]), _run([(0.2, "open_door"), (0.6, "pull")]), {})
    assert not result.ok and "decision #1: decision at another time (|dt| > 0.001 s)" in result.report()


def test_decisions_after_the_other_recording_ended_are_not_compared():
    result = compare(_run([(0.2, "open_door"), (1.5, "pull")], seconds=2.0), _run([(0.2, "open_door")]), {})
    assert result.ok
    assert "1 match exactly (1 made after the other run's recording ended, not compared)" in result.report()


def test_motor_commands_beyond_tolerance_fail_unless_not_judged():
    golden, replay = _run([]), _run([], effort=0.3)
    assert compare(golden, replay, {"arm_elbow": 0.5}).ok
    failed = compare(golden, replay, {"arm_elbow": 0.2})
    assert not failed.ok
    assert "arm_elbow: max |diff|    0.300 (tolerance 0.2) EXCEEDED first at 0.000 s" in failed.report()
    assert "FIRST DIVERGENCE at sim time 0.000 s in the motor command stream: motor command arm_elbow: " \
           "|golden - replay| 0.300 > tolerance 0.2" in failed.report()
    assert compare(golden, replay, {"arm_elbow": 0.2}, check_motor=False).ok
    replay.motor_t, replay.motor_effort = [], []
    assert "motor commands: golden has 100, replay has 0" in compare(golden, replay, {}).report()


def test_a_golden_at_a_reduced_rate_compares_at_its_own_samples():
    golden, replay = _run([]), _run([])
    golden.motor_t, golden.motor_effort = golden.motor_t[::5], golden.motor_effort[::5]
    result = compare(golden, replay, {"arm_elbow": 1e-9})
    assert result.ok, result.report()
    assert "motor commands: 20 samples" in result.report()


def test_a_command_lagging_within_the_skew_passes_and_beyond_it_fails():
    golden, replay = _run([]), _run([])
    replay.motor_t = [t + 0.05 for t in replay.motor_t]
    assert compare(golden, replay, Tolerances(default_joint=1e-6, motor_skew_s=0.06)).ok
    assert not compare(golden, replay, Tolerances(default_joint=1e-6, motor_skew_s=0.02)).ok


def test_a_router_transition_that_differs_is_the_first_divergence_before_later_motor_differences():
    golden = _run([(0.1, "open_door")], statuses=STATUSES + [(0.7, "open_door", "door_handle_grip", 1)])
    replay = _run([(0.1, "open_door")], statuses=STATUSES)
    replay.motor_effort = [e + (0.5 if t > 0.8 else 0.0) for t, e in zip(replay.motor_t, replay.motor_effort)]
    result = compare(golden, replay, {"arm_elbow": 0.1})
    assert not result.ok and result.first is not None and result.first.stream == "router status"
    text = result.report()
    assert "FIRST DIVERGENCE at sim time 0.700 s in the router status stream: router transition differs (#2)" in text
    assert "golden transition: open_door/door_handle_grip, derated, interrupt depth 0" in text
    assert "replay transition: (none)" in text
    assert "decision in force, golden: open_door(speed=0.5) at 0.100 s" in text


def test_timing_beyond_its_bound_fails_with_the_outputs_matching():
    golden, replay = _run([(0.2, "stop")], ttft=100.0), _run([(0.2, "stop")], ttft=5000.0)
    result = compare(golden, replay, Tolerances(ttft_p50_factor=10.0, ttft_slack_ms=2000.0))
    assert not result.ok and "FIRST DIVERGENCE: timing out of bounds" in result.report()
    assert "(bound 2100: EXCEEDED)" in result.report()


def test_tolerances_from_a_mapping_and_unknown_keys_refused():
    tol = Tolerances.from_mapping({"joints": {"arm_elbow": 2}, "motor_skew_s": 0.05})
    assert tol.joint("arm_elbow") == 2.0 and tol.joint("gripper") == tol.default_joint and tol.motor_skew_s == 0.05
    with pytest.raises(ValueError, match="unknown keys \\['skew'\\]"):
        Tolerances.from_mapping({"skew": 1})


def test_the_summary_diff_names_what_changed():
    old = summarize(_run([(0.2, "open_door"), (0.5, "pull")], statuses=STATUSES))
    new = summarize(_run([(0.2, "open_door"), (0.5, "stop")], effort=0.5, statuses=STATUSES[:1]))
    lines = diff_summaries(old, new)
    text = "\n".join(lines)
    assert "decisions: CHANGED (2 -> 2), first at #1" in text and "+   0.500 stop(speed=0.5)" in text
    assert "intents: CHANGED" in text
    assert "task outcomes: CHANGED" in text and "- open_door: approach_handle > door_handle_grip" in text
    assert "arm_elbow" in text and "CHANGED" in [line for line in lines if "arm_elbow" in line][0]
    assert diff_summaries(old, old)[0] == "decisions: unchanged (2)"
