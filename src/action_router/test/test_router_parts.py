"""The router's parts alone: the sub-task table, the intake's tick input, the decision gate, the
task matcher's bookkeeping of completed tasks, the tick outbox."""
import math

import numpy as np
import pytest

from action_router.inputs import QueuedDecision, make_fault_log
from action_router.interrupts import SOURCE_TASK, Frame
from action_router.params import make_config
from action_router.router_decisions import DecisionGate
from action_router.router_intake import MAX_STEP_S, SensorIntake
from action_router.router_outbox import TickOutbox
from action_router.router_setup import subtask_table
from action_router.scene import EMPTY_SCENE

CFG = make_config()
ZONES = {z.name: z.threshold for z in CFG.zones.values()}
TABLE = subtask_table(CFG, CFG.joints)
ZERO = np.zeros(len(CFG.joints))


def intake() -> SensorIntake:
    return SensorIntake(CFG, CFG.joints, ZONES, make_fault_log())


def test_the_table_holds_every_sub_task_and_each_intents_sequence():
    assert [st.index for st in TABLE.subtasks] == list(range(len(CFG.subtasks)))
    for intent, names in CFG.intent_sequences.items():
        assert TABLE.sequences[TABLE.intent_index[intent]] == TABLE.ids(names)


def test_the_step_is_the_period_first_then_the_gap_clamped():
    part = intake()
    period = 1.0 / float(CFG["control_hz"])
    assert part.begin(1.0, ZERO, 0.0).dt == pytest.approx(period)
    assert part.begin(1.002, ZERO, 0.0).dt == pytest.approx(0.002)
    assert part.begin(5.0, ZERO, 0.0).dt == MAX_STEP_S
    assert part.begin(4.0, ZERO, 0.0).dt == pytest.approx(period)      # time went back


def test_state_is_lost_only_after_it_had_been_fresh():
    part = intake()
    assert not part.begin(0.0, ZERO, 0.0).state_lost                   # start-up: never fresh yet
    part.inputs.set_joint_state(CFG.joints, [0.0] * len(CFG.joints), now=0.0)
    assert part.begin(0.001, ZERO, 0.0).state_ok
    late = part.begin(0.001 + float(CFG["state_timeout_s"]) + 0.01, ZERO, 0.0)
    assert not late.state_ok and late.state_lost


def test_a_valid_zone_request_switches_the_zone_and_its_threshold():
    part = intake()
    other = next(z for z in ZONES if z != part.zone)
    assert part.inputs.set_zone(other)
    part.begin(0.0, ZERO, 0.0)
    assert (part.zone, part.threshold) == (other, ZONES[other])


def test_a_stale_range_reads_as_nobody_near():
    part = intake()
    part.inputs.set_proximity(0.4, now=0.0)
    assert part.begin(0.0, ZERO, 0.0).proximity == pytest.approx(0.4)
    assert part.begin(float(CFG["proximity_timeout_s"]) + 0.1, ZERO, 0.0).proximity == math.inf


def test_a_hot_motor_is_derated_once_with_one_log_line():
    part = intake()
    part.inputs.set_temperature("arm_shoulder_lift", float(CFG["temperature_limit"]) + 5.0, now=0.0)
    first = part.begin(0.0, ZERO, 0.0)
    assert "arm_shoulder_lift" in first.derate_note and first.derated.any()
    assert part.begin(0.001, ZERO, 0.0).derate_note == ""
    assert part.derate_count == 1


def decision(intent, args=None):
    return QueuedDecision(intent, dict(args or {}), 0, 0.0)


def test_the_gate_starts_a_decision_then_confirms_the_same_one():
    gate = DecisionGate(CFG, TABLE, intake().scene_frames)
    out = gate.evaluate(decision("open_door"), 0.0, None, False, EMPTY_SCENE, ZERO[:3])
    assert out.start is not None and out.start.source == SOURCE_TASK
    assert out.start.subtasks == TABLE.sequences[TABLE.intent_index["open_door"]]
    again = gate.evaluate(decision("open_door"), 0.5, out.start, False, EMPTY_SCENE, ZERO[:3])
    assert again.start is None and not again.refusal and gate.repeated == 1
    # after a failure the same decision restarts the task
    assert gate.evaluate(decision("open_door"), 1.0, out.start, True, EMPTY_SCENE, ZERO[:3]).start is not None


def test_the_gate_announces_a_refusal_once_until_another_decision_starts():
    gate = DecisionGate(CFG, TABLE, intake().scene_frames)
    pick = decision("pick_object", {"object": "box"})
    first = gate.evaluate(pick, 0.0, None, False, EMPTY_SCENE, ZERO[:3])
    second = gate.evaluate(pick, 0.1, None, False, EMPTY_SCENE, ZERO[:3])
    assert first.refusal and first.announce and first.start is None
    assert second.refusal == first.refusal and not second.announce
    assert gate.evaluate(decision("open_door"), 0.2, None, False, EMPTY_SCENE, ZERO[:3]).start is not None
    assert gate.evaluate(pick, 0.3, None, False, EMPTY_SCENE, ZERO[:3]).announce
    assert gate.refused == 3


def test_the_watchdog_counts_from_the_first_decision():
    gate = DecisionGate(make_config({"decision_timeout_s": 1.0}), TABLE, intake().scene_frames)
    assert gate.silence(100.0) == ""                                    # nothing decided yet
    gate.evaluate(decision("open_door"), 0.0, None, False, EMPTY_SCENE, ZERO[:3])
    assert gate.silence(0.5) == "" and "no decision for 1 s" in gate.silence(1.5)


def test_the_outbox_starts_each_tick_empty():
    lines = []
    box = TickOutbox(lines.append)
    box.request("new decision please")
    box.sounds.append("beep")
    box.info("hello")
    assert (box.requests, box.sounds, lines) == (["new decision please"], ["beep"], ["hello"])
    box.clear()
    assert box.requests == [] and box.sounds == []


def test_a_frame_of_a_started_decision_keeps_the_decided_arguments():
    gate = DecisionGate(CFG, TABLE, intake().scene_frames)
    out = gate.evaluate(decision("back_off", {"distance": 0.3}), 0.0, None, False, EMPTY_SCENE, ZERO[:3])
    assert isinstance(out.start, Frame) and out.start.decided == {"distance": 0.3}
