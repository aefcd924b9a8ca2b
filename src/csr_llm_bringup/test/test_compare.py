"""compare(): decisions exactly and in order, motor commands per joint within tolerance (no bags, no ROS)."""
import numpy as np

from csr_llm_bringup.compare import DecisionRecord, RunOutputs, compare


def _run(intents, effort=0.0, seconds=1.0):
    out = RunOutputs()
    for i, (t, intent) in enumerate(intents):
        out.decisions.append(DecisionRecord(t, intent, (("speed", 0.5),), i, 10 + i, 100.0 + i))
        out.chunks[10 + i] = f"chunk {i}"
    out.motor_names = ["arm_elbow", "gripper"]
    out.motor_t = list(np.arange(0.0, seconds, 0.01))
    out.motor_effort = [np.array([np.sin(t) + effort, 0.0]) for t in out.motor_t]
    return out


def test_identical_runs_match():
    result = compare(_run([(0.2, "open_door"), (0.5, "pull")]), _run([(0.2, "open_door"), (0.5, "pull")]), {})
    assert result.ok and result.lines[0] == "MATCH"
    assert result.lines[1] == "decisions: 2 match exactly"
    assert "arm_elbow: max |diff|    0.000 (tolerance 1) ok" in result.report()
    assert result.lines[-3].split()[-2:] == ["2", "2"]


def test_the_first_divergent_decision_is_reported_with_its_chunk():
    result = compare(_run([(0.2, "open_door"), (0.5, "pull")]), _run([(0.2, "open_door"), (0.5, "push")]), {})
    assert not result.ok
    text = result.report()
    assert "FIRST DIVERGENCE at decision #1, sim time 0.500 s, state version 1" in text
    assert "golden: pull(speed=0.5)" in text and "replay: push(speed=0.5)" in text
    assert "last chunk before it (seq 11): chunk 1" in text


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
    assert compare(golden, replay, {"arm_elbow": 0.2}, check_motor=False).ok
    replay.motor_t, replay.motor_effort = [], []
    assert "motor commands: golden has 100, replay has 0" in compare(golden, replay, {}).report()
