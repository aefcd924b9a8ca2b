"""Aggregator: events at once, continuous topics summarised per period of sample time, watermarks."""
import math

import pytest

from csr_llm_core.aggregator import (KIND_CONTINUOUS, KIND_EVENT, KIND_WATERMARK, Aggregator, SampleError,
                                     TopicSpec)

JOINTS = ["arm_shoulder_pan", "arm_elbow"]


def joint_sample(q0, q1=0.0, v=0.0):
    return {"name": JOINTS, "position": [q0, q1], "velocity": [v, v]}


def make(**kwargs):
    return Aggregator([TopicSpec("joint_states", "joint_states", period=1.0, threshold=0.05),
                       TopicSpec("motor_temperature", "temperature", period=2.0, threshold=1.0),
                       TopicSpec("events", "event")], **kwargs)


def test_a_1khz_topic_yields_one_summary_per_period_and_only_on_change():
    agg = make()
    chunks = []
    for i in range(5000):                            # 5 s at 1 kHz, moving for 2 s then still
        t = i * 0.001
        q = 0.3 * min(t, 2.0)
        chunk = agg.on_sample("joint_states", joint_sample(q, v=0.3 if t < 2 else 0.0), t)
        if chunk:
            chunks.append(chunk)
    assert [round(c.stamp, 3) for c in chunks] == [0.0, 1.0, 2.0]   # then nothing changes
    assert all(c.kind == KIND_CONTINUOUS for c in chunks)
    assert chunks[1].text == ("[1.00s] joint_states: joints[rad] arm_shoulder_pan=0.30 arm_elbow=0.00; "
                              "max speed 0.30 rad/s")
    assert [c.seq for c in chunks] == [0, 1, 2]


def test_events_are_chunks_at_once_and_sequence_is_shared_and_gap_free():
    agg = make()
    a = agg.on_sample("joint_states", joint_sample(0.1), 0.0)
    agg.on_sample("joint_states", joint_sample(0.1), 0.248)
    [e] = agg.on_event("events", "  person   approaching,\\n distance 0.5 m ", 0.25)
    assert (a.seq, e.seq, e.kind) == (0, 1, KIND_EVENT)
    # stamped with the newest sample time, not the receive clock (reproducible under replay)
    assert e.stamp == 0.248 and e.text == "[0.2s] events: person approaching,\\n distance 0.5 m"
    [long] = agg.on_event("events", "x" * 1000, 0.3)
    assert long.text.endswith("[truncated]") and len(long.text) < 350


def test_bad_samples_raise_a_clear_error_and_leave_no_gap():
    agg = make()
    with pytest.raises(SampleError, match="non-finite joint position"):
        agg.on_sample("joint_states", joint_sample(math.nan), 0.0)
    with pytest.raises(SampleError, match="2 names but 1 positions"):
        agg.on_sample("joint_states", {"name": JOINTS, "position": [0.1]}, 0.0)
    with pytest.raises(SampleError, match="empty event"):
        agg.on_event("events", "   ", 0.0)
    assert agg.on_sample("joint_states", joint_sample(0.2), 0.1).seq == 0


def test_temperatures_of_several_motors_share_one_summary():
    agg = make()
    agg.on_sample("motor_temperature", {"temperature": 40.0, "frame_id": "arm_elbow"}, 0.0)
    chunk = agg.on_sample("motor_temperature", {"temperature": 71.5, "frame_id": "arm_wrist"}, 2.0)
    assert chunk.text == "[2.00s] motor_temperature: motor temperatures[C] arm_elbow=40.0 arm_wrist=71.5"


def test_watermarks_mark_each_period_boundary_crossed_by_sample_time():
    agg = make(watermark_period=0.5)
    marks = []
    for i in range(0, 1600, 7):                       # irregular sample times
        marks += [c for c in agg.watermark(i * 0.001) if c.kind == KIND_WATERMARK]
    assert [m.stamp for m in marks] == [0.5, 1.0, 1.5]
    assert all(m.kind == KIND_WATERMARK and m.text == "" and m.seq == agg.next_seq for m in marks)


def test_summaries_of_a_window_come_out_in_stamp_and_topic_order_whatever_the_arrival_order():
    def stream(order):
        agg = Aggregator([TopicSpec("joint_states", "joint_states", period=1.0, threshold=0.0),
                          TopicSpec("motor_temperature", "temperature", period=1.0, threshold=0.0)],
                         watermark_period=0.5)
        out = []
        for t in (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5):
            out += agg.watermark(t)
            samples = [("joint_states", joint_sample(t)), ("motor_temperature", {"temperature": 30 + t,
                                                                                  "frame_id": "arm_elbow"})]
            for topic, sample in (samples if order else samples[::-1]):
                chunk = agg.on_sample(topic, sample, t)
                assert chunk is None                  # held until the window closes
        return [(c.seq, c.kind, c.text) for c in out]
    assert stream(True) == stream(False)
    texts = [text for _, kind, text in stream(True) if kind != KIND_WATERMARK]
    assert texts[0].startswith("[0.00s] joint_states") and texts[1].startswith("[0.00s] motor_temperature")


def test_warm_up_drops_samples_by_their_stamp_whatever_the_watermark_order():
    def first_summary(watermark_first):
        agg = make(watermark_period=0.5, warmup_windows=1)
        agg.watermark(0.0)
        agg.on_sample("motor_temperature", {"temperature": 30.0, "frame_id": "arm_elbow"}, 0.25)
        late = ("motor_temperature", {"temperature": 31.0, "frame_id": "arm_wrist"}, 0.25)
        if watermark_first:             # the window's closing sample was taken before the late one
            agg.watermark(0.5)
            agg.on_sample(*late)
        else:
            agg.on_sample(*late)
            agg.watermark(0.5)
        agg.on_sample("motor_temperature", {"temperature": 32.0, "frame_id": "arm_pan"}, 0.5)
        return [c.text for c in agg.watermark(1.0) if c.kind != KIND_WATERMARK]
    assert first_summary(True) == first_summary(False) == [
        "[0.50s] motor_temperature: motor temperatures[C] arm_pan=32.0"]


def test_a_sample_from_the_future_is_rejected_and_the_stream_keeps_flowing():
    from csr_llm_core.aggregator import Aggregator, SampleError, TopicSpec
    agg = Aggregator([TopicSpec("odom", "odometry", 0.5, 0.0)], watermark_period=0.5,
                     future_tolerance_s=1.0, max_lag_s=10.0)
    sample = {"x": 0.0, "y": 0.0, "yaw": 0.0, "v": 0.0, "w": 0.0}
    out = []
    for k in range(1, 9):
        stamp = k * 0.25
        if k == 4:   # one sample stamped an hour ahead of the clock: refused, nothing moves
            with pytest.raises(SampleError, match="ahead of the clock"):
                agg.check_stamp(3600.0, now=stamp)
        agg.check_stamp(stamp, now=stamp)
        out += agg.watermark(stamp)
        sample = dict(sample, x=stamp)
        agg.on_sample("odom", sample, stamp)
    watermarks = [c.stamp for c in out if c.kind == 2]
    assert watermarks == [0.5, 1.0, 1.5, 2.0]                       # no gap after the bad sample
    assert sum(1 for c in out if c.kind == 1) >= 3
    with pytest.raises(SampleError, match="behind the stream"):
        agg.check_stamp(-20.0, now=2.0)
    with pytest.raises(SampleError, match="non-finite"):
        agg.check_stamp(float("nan"))
    agg.check_stamp(5.0, now=0.0)                                      # clock unknown (no /clock yet): accepted


@pytest.mark.parametrize("topic, sample, why", [
    ("odom", {"x": 1e300, "y": 0.0, "yaw": 0.0, "v": 0.0, "w": 0.0}, "impossible pose"),
    ("motor_temperature", {"temperature": -300.0, "frame_id": "arm_elbow"}, "impossible motor temperature"),
    ("motor_temperature", {"temperature": float("nan"), "frame_id": "arm_elbow"}, "non-finite"),
])
def test_impossible_readings_are_rejected_not_summarised(topic, sample, why):
    from csr_llm_core.aggregator import Aggregator, SampleError, TopicSpec
    agg = Aggregator([TopicSpec("odom", "odometry", 0.5, 0.0), TopicSpec("motor_temperature", "temperature", 0.5, 0.0)])
    with pytest.raises(SampleError, match=why):
        agg.on_sample(topic, sample, 1.0)
    assert agg.next_seq == 0 and agg.topics[topic].extra == {}


def _flood(agg, events_per_s=500, seconds=10.0, then_quiet_s=1.0, text="flood {i}"):
    """Events at `events_per_s` with joint samples at 100 Hz, then quiet samples; all chunks out."""
    chunks = agg.watermark(0.0)                       # opens the first window
    n = int(events_per_s * seconds)
    for i in range(n):
        t = i / events_per_s
        if i % max(1, events_per_s // 100) == 0:
            chunks += agg.watermark(t)
            agg.on_sample("joint_states", joint_sample(0.1), t)
        chunks += agg.on_event("events", text.format(i=i), t)
    t = seconds
    while t <= seconds + then_quiet_s + 1e-9:
        chunks += agg.watermark(t)
        t = round(t + 0.01, 6)
    return chunks


def test_an_event_flood_becomes_one_counted_chunk_per_period_and_loses_no_count():
    agg = make(watermark_period=0.5, max_events_per_window=3, burst_chunk_period=1.0)
    chunks = _flood(agg)
    events = [c for c in chunks if c.kind == KIND_EVENT]
    # window 0: 3 events of their own + the rest of the window at its close; then the burst is
    # sustained: one chunk after 1 s, then after 2, 4 s (the period doubles), the rest when it ends
    assert [c.coalesced for c in events] == [0, 0, 0, 247, 500, 1000, 2000, 1250]
    assert [c.text.split(" (burst")[0].split("events in ")[1] for c in events[3:]] == \
        ["0.5 s", "1 s", "2 s", "4 s", "2.5 s"]
    assert sum(c.coalesced for c in events) + 3 == 5000 == agg.coalesced_total + 3
    first = events[3]
    assert first.text.startswith("[0.0s] events: 247 more events in 0.5 s (burst coalesced); "
                                 "kinds: 'flood #' x247")
    assert events[4].text.startswith("[1.0s] events: 500 more events in 1 s (burst coalesced)")
    seqs = [c.seq for c in chunks if c.kind != KIND_WATERMARK]
    assert seqs == list(range(len(seqs)))             # gap-free, in order
    stamps = [c.stamp for c in chunks if c.kind != KIND_WATERMARK]
    assert stamps == sorted(stamps)
    # a coalesced chunk comes right before the watermark of the window that closed it
    marks = [i for i, c in enumerate(chunks) if c.kind == KIND_WATERMARK]
    assert chunks[marks[0] - 1].coalesced == 247


def test_after_a_burst_events_are_chunks_of_their_own_again():
    agg = make(watermark_period=0.5, max_events_per_window=3, burst_chunk_period=2.0)
    chunks = _flood(agg, events_per_s=100, seconds=3.0, then_quiet_s=0.0)
    chunks += agg.on_event("events", "flood 9999", 3.1)       # the window after the flood: held...
    chunks += agg.watermark(3.5)                              # ...and released whole when it closes
    assert sum(c.coalesced for c in chunks) + 3 == 300
    assert chunks[-2].text == "[3.0s] events: flood 9999" and chunks[-2].coalesced == 0
    stamps = [c.stamp for c in chunks]
    assert stamps == sorted(stamps)
    chunks = agg.on_event("events", "operator: stop", 3.7)   # the burst is over: a chunk at once
    assert [(c.coalesced, c.text) for c in chunks] == [(0, "[3.5s] events: operator: stop")]


def test_a_coalesced_chunk_names_the_kinds_it_stands_for_within_bounds():
    agg = make(watermark_period=0.5, max_events_per_window=1, burst_chunk_period=0.5)
    agg.watermark(0.0)
    for i in range(40):
        word = chr(ord("a") + i % 20) * 3             # 20 kinds, 2 events each
        agg.on_event("events", f"{word} sensor {i} at {i * 0.5} m " + "x" * 500, 0.01 * i)
    (chunk,) = [c for c in agg.watermark(0.5) if c.coalesced]
    assert chunk.coalesced == 38                      # 1 of its own, 1 of a kind not seen before
    assert chunk.text.count("' x") == 3 and "of other kinds" in chunk.text
    assert "sensor # at # m xxx" in chunk.text and "' x2" in chunk.text and len(chunk.text) < 800


def test_without_watermarks_a_burst_is_flushed_by_the_next_window_in_order():
    agg = make(max_events_per_window=2, event_window=1.0)
    out = []
    for i in range(6):
        out += agg.on_event("events", f"e{i}", 0.1 * i)
    assert [c.text for c in out] == ["[0.0s] events: e0", "[0.1s] events: e1"]
    out += agg.watermark(0.9)                          # still inside the window: nothing due
    assert len(out) == 2
    out += agg.on_event("events", "next", 1.2)         # a new window: the burst first, then the event
    assert [c.coalesced for c in out] == [0, 0, 4, 0] and out[2].stamp == 0.0
    assert [c.seq for c in out] == [0, 1, 2, 3] and out[3].text == "[1.2s] events: next"
    out += agg.on_event("events", "e6", 1.3)           # the flood's kind, in the window after it: held...
    out += agg.watermark(2.05)                         # ...and released as it was sent once that window closes
    assert out[4].text == "[1.0s] events: e6" and out[4].coalesced == 0 and agg.coalesced_total == 4


def test_source_parameters_default_from_the_known_sources_and_a_new_one_needs_a_type():
    from csr_llm_core.aggregator import DEFAULT_SOURCES, AggregatorConfig, source_parameters, topic_specs
    names = AggregatorConfig().sources
    values = source_parameters(names)
    assert topic_specs(names, values) == list(DEFAULT_SOURCES.values())
    values = source_parameters(["lidar_events"])
    assert values == {"lidar_events.topic": "lidar_events", "lidar_events.type": "", "lidar_events.period": 1.0,
                      "lidar_events.threshold": 0.0}
    with pytest.raises(ValueError, match="lidar_events.type"):
        topic_specs(["lidar_events"], values)
    values["lidar_events.type"], values["lidar_events.period"] = "event", 2
    assert topic_specs(["lidar_events"], values) == [TopicSpec("lidar_events", "event", 2.0, 0.0)]
