"""Impossible readings never reach a chunk, each kind is logged once and counted; every text that
reaches a chunk is bounded (names, name lists, events, summaries), the cut marked and counted."""
import math

import pytest

from csr_llm_common.faults import FaultLog
from csr_llm_common.plausibility import MAX_NAME_CHARS, MAX_NAMES, TRUNCATION_MARK
from csr_llm_core.aggregator import KIND_CONTINUOUS, KIND_WATERMARK, Aggregator, TopicSpec

SPECS = [TopicSpec("joint_states", "joint_states", 0.5, 0.0), TopicSpec("motor_temperature", "temperature", 0.5, 0.0),
         TopicSpec("gripper/wrench", "wrench", 0.5, 0.0), TopicSpec("events", "event")]
JOINTS = ["arm_shoulder_pan", "arm_elbow"]
GOOD = {
    "joint_states": {"name": JOINTS, "position": [0.1, 0.2], "velocity": [0.0, 0.0], "effort": [1.0, 2.0]},
    "motor_temperature": {"temperature": 40.0, "frame_id": "arm_elbow"},
    "gripper/wrench": {"force": (0.0, 0.0, 5.0), "torque": (0.0, 0.0, 0.0)},
}


def make(**kwargs):
    lines = []
    return Aggregator(SPECS, faults=FaultLog(lines.append), **kwargs), lines


IMPOSSIBLE_READINGS = [
    ("motor_temperature", {"temperature": -300.0, "frame_id": "arm_elbow"}, "impossible"),
    ("motor_temperature", {"temperature": 1000.0, "frame_id": "arm_elbow"}, "impossible"),
    ("motor_temperature", {"temperature": math.nan, "frame_id": "arm_elbow"}, "nonfinite"),
    ("gripper/wrench", {"force": (1e300, 0.0, 0.0), "torque": (0.0, 0.0, 0.0)}, "impossible"),
    ("gripper/wrench", {"force": (0.0, 0.0, 1.0), "torque": (math.inf, 0.0, 0.0)}, "nonfinite"),
    ("joint_states", {"name": JOINTS, "position": [1e300, 0.0], "velocity": []}, "impossible"),
    ("joint_states", {"name": JOINTS, "position": [0.0, 0.0], "velocity": [5e4, 0.0]}, "impossible"),
    ("joint_states", {"name": JOINTS, "position": [0.0, 0.0], "velocity": [], "effort": [0.0, -1e9]}, "impossible"),
    ("joint_states", {"name": JOINTS, "position": [0.0, math.nan], "velocity": []}, "nonfinite"),
    ("joint_states", {"name": JOINTS, "position": [0.0], "velocity": []}, "length"),
]


@pytest.mark.parametrize("topic, sample, kind", IMPOSSIBLE_READINGS)
def test_an_impossible_reading_makes_no_chunk_and_is_logged_once_then_counted(topic, sample, kind):
    agg, lines = make(watermark_period=0.5)
    chunks = agg.take_sample(topic, GOOD[topic], 0.1)
    for k in range(20):                               # refused again and again, crossing watermarks
        assert agg.take_sample(topic, sample, 0.2 + 0.1 * k) == []
    chunks += agg.take_sample(topic, GOOD[topic], 2.5)
    texts = [c.text for c in chunks if c.kind == KIND_CONTINUOUS]
    assert len(texts) == 1 and "-300" not in texts[0] and "1000" not in texts[0] and "e+" not in texts[0]
    assert agg.faults.counts == {f"{topic}:{kind}": 20} and len(lines) == 1 and f"[{topic}:{kind}]" in lines[0]
    # the refused samples moved no window: the only watermark is the one the good sample crossed
    assert [c.stamp for c in chunks if c.kind == KIND_WATERMARK] == [2.5]
    assert agg.topics[topic].extra == ({"arm_elbow": 40.0} if topic == "motor_temperature" else {})


def test_a_motor_at_minus_300_c_leaves_the_temperature_line_as_it_was():
    agg, _ = make()
    first = agg.take_sample("motor_temperature", {"temperature": 72.0, "frame_id": "arm_elbow"}, 0.0)
    agg.take_sample("motor_temperature", {"temperature": -300.0, "frame_id": "arm_elbow"}, 1.0)
    agg.take_sample("motor_temperature", {"temperature": -300.0, "frame_id": "arm_wrist"}, 1.0)
    later = agg.take_sample("motor_temperature", {"temperature": 72.0, "frame_id": "arm_elbow"}, 2.0)
    # the line neither lost the hot motor nor gained the impossible one
    assert [c.text.split(": ", 1)[1] for c in first + later] == ["motor temperatures[C] arm_elbow=72.0"] * 2
    assert agg.topics["motor_temperature"].extra == {"arm_elbow": 72.0}
    assert agg.faults.counts == {"motor_temperature:impossible": 2}


def test_a_10kb_joint_name_is_cut_marked_and_counted():
    agg, lines = make()
    chunk, = agg.take_sample("joint_states", {"name": ["j" * 10_000, "arm_elbow"], "position": [0.1, 0.2],
                                              "velocity": [0.0, 0.0]}, 0.0)
    cut = "j" * (MAX_NAME_CHARS - len(TRUNCATION_MARK)) + TRUNCATION_MARK
    assert f" {cut}=0.10 arm_elbow=0.20" in chunk.text and len(chunk.text) < 200
    assert agg.faults.counts == {"name_truncated": 1} and "[name_truncated]" in lines[0]


def test_a_joint_state_with_thousands_of_joints_lists_at_most_max_names():
    agg, _ = make()
    names = [f"joint_{k}" for k in range(5000)]
    chunk, = agg.take_sample("joint_states", {"name": names, "position": [0.0] * 5000, "velocity": []}, 0.0)
    assert f"joint_{MAX_NAMES - 1}=0.00 (+{5000 - MAX_NAMES} more)" in chunk.text
    assert f"joint_{MAX_NAMES}=" not in chunk.text and len(chunk.text) < 2100
    assert agg.faults.counts == {"name_truncated": 1}


def test_motor_names_are_bounded_and_their_number_too():
    agg, _ = make()
    chunk, = agg.take_sample("motor_temperature", {"temperature": 50.0, "frame_id": "m" * 10_000}, 0.0)
    assert len(chunk.text) < 120 and TRUNCATION_MARK + "=50.0" in chunk.text
    for k in range(MAX_NAMES + 10):       # every frame_id a new motor: the line stops growing
        agg.take_sample("motor_temperature", {"temperature": 50.0, "frame_id": f"motor_{k}"}, 1.0 + k)
    assert len(agg.topics["motor_temperature"].extra) == MAX_NAMES
    assert agg.faults.counts["motor_temperature:too_many_names"] == 11
    assert max(len(c.text) for c in agg.take_sample(
        "motor_temperature", {"temperature": 60.0, "frame_id": "motor_0"}, 100.0)) < 1600


def test_a_1mb_event_is_cut_marked_and_counted():
    agg, lines = make(max_event_chars=300)
    chunk, = agg.on_event("events", "x" * 1_000_000, 0.0)
    assert chunk.text.endswith("x [truncated]") and len(chunk.text) < 340
    assert agg.faults.counts == {"event_truncated": 1} and "1000000-character event" in lines[0]
    agg.on_event("events", "y" * 1_000_000, 0.1)
    assert agg.faults.counts == {"event_truncated": 2} and len(lines) == 1
