"""A recorded run read back as an adapter training stream (csr_llm_core/lab/live_episodes.py): the
recorder's scored decisions joined with the bag's decisions, chunks and router reports."""
import json

import pytest
from rclpy.serialization import serialize_message

from csr_llm_bringup.bags import open_writer, typestore
from csr_llm_core.lab.live_episodes import run_stream
from csr_llm_msgs.msg import CsrStatus, Decision, IntentArgument, RouterStatus, StateChunk


def _stamp(msg, seconds):
    msg.header.stamp.sec, msg.header.stamp.nanosec = int(seconds), int(round((seconds % 1) * 1e9))
    return msg


def _write_run(run, decisions_json):
    writer = open_writer(run / "bag")
    store = typestore()
    connections = {}
    chunks = [(0.5, 0, StateChunk.KIND_CONTINUOUS, "joint_states: still"),
              (1.0, 1, StateChunk.KIND_EVENT, "task: open"), (1.0, 2, StateChunk.KIND_WATERMARK, ""),
              (3.0, 2, StateChunk.KIND_EVENT, "person close")]
    messages = [("/state_chunks", _stamp(StateChunk(seq=seq, kind=kind, text=text, source_topic="/events"), t))
                for t, seq, kind, text in chunks]
    paused = IntentArgument(name="zone", type=IntentArgument.TYPE_STRING, string_value="door")
    messages += [("/router_status", _stamp(RouterStatus(active_intent="open_door"), 1.2)),
                 ("/router_status", _stamp(RouterStatus(active_intent="stop", paused_intent="open_door",
                                                        paused_arguments=[paused], interrupt_depth=1), 3.2)),
                 ("/csr_status", _stamp(CsrStatus(tau_mem=3000), 3.6))]
    # bag order is arrival order: the event-triggered decision at 3.0 arrives after the periodic one at 3.5
    for t, seq, intent, tokens in ((0.5, 0, "hold_position", 2000), (1.0, 1, "open_door", 2100),
                                   (1.5, 1, "open_door", 2100), (3.5, 2, "stop", 2900), (3.0, 1, "open_door", 2100),
                                   (4.0, 2, "open_door", 3050)):
        messages.append(("/decision", _stamp(Decision(intent=intent, last_chunk_seq=seq, prefix_tokens=tokens), t)))
    for index, (topic, msg) in enumerate(messages):
        if topic not in connections:
            name = type(msg).__module__.split(".")[0] + "/msg/" + type(msg).__name__
            connections[topic] = writer.add_connection(topic, name, typestore=store)
        writer.write(connections[topic], index, serialize_message(msg))
    writer.close()
    (run / "decisions.json").write_text(json.dumps(decisions_json))


def _detail():
    rows = [(0.5, "hold_position", "unscored", ""), (1.0, "open_door", "unscored", "task"),
            (1.5, "open_door", "match", "task"), (3.0, "open_door", "mismatch", "close"),
            (3.5, "stop", "match", "close"), (4.0, "open_door", "mismatch", "close")]
    detail = {"decisions": [{"time": t, "intent": i, "args": {}, "verdict": v, "event": e} for t, i, v, e in rows],
              "reactions": [{"event": "task", "start": 1.0, "expect": {"intents": ["open_door"], "args": {}}},
                            {"event": "close", "start": 3.0,
                             "expect": {"intents": ["back_off", "stop"], "args": {}}}]}
    return detail


def test_scored_decisions_become_probes_on_the_prefix_they_were_made_on(tmp_path):
    _write_run(tmp_path, _detail())
    recorded = run_stream(tmp_path)
    stream = recorded.stream
    # the decision at 3.0 was made on a prefix that ends before "person close": no label
    assert recorded.counts == {"decisions": 6, "probes": 3, "skipped": 2, "unseen": 1}
    assert [c.text for c in stream.chunks] == ["joint_states: still", "task: open", "person close"]   # no watermark
    assert [position for position, _ in stream.probes] == [2, 3, 3]
    assert recorded.decided == ["open_door", "stop", "open_door"]
    assert recorded.after_eviction == [False, False, True]           # 3050 tokens > tau_mem: evicted, not swapped
    first, close, later = (probe for _, probe in stream.probes)
    assert first.accept == {"open_door"} and first.running == "open_door" and first.paused is None
    assert close.accept == {"back_off", "stop"} and close.running == "stop"
    assert close.paused.intent == "open_door" and close.paused.arguments == {"zone": "door"}
    assert later.running == "stop"


def test_a_decision_missing_from_the_bag_is_an_error(tmp_path):
    detail = {"decisions": [{"time": 2.0, "intent": "move_to", "args": {}, "verdict": "match", "event": "task"}],
              "reactions": [{"event": "task", "start": 1.0, "expect": {"intents": ["move_to"], "args": {}}}]}
    _write_run(tmp_path, detail)
    with pytest.raises(ValueError, match="move_to at 2.0 s is not in the bag"):
        run_stream(tmp_path)


def test_a_round_as_a_probe_file_gives_back_the_same_streams(tmp_path):
    """live_probe_files: what the adapter fit reads from a run, kept as a small committed file."""
    from csr_llm_core.lab import live_probe_files
    run = tmp_path / "seed9" / "door_task" / "latest"
    run.mkdir(parents=True)
    _write_run(run, _detail())
    (tmp_path / "seed9" / "no_bag" / "latest").mkdir(parents=True)          # a run that left nothing: skipped
    out = tmp_path / "seed9.json.gz"
    assert live_probe_files.main([str(tmp_path / "seed9"), "--out", str(out)]) == 0
    recorded = run_stream(run).stream
    ((run_id, stream),) = live_probe_files.streams(out)
    assert run_id.startswith("seed9/door_task@")
    assert stream.chunks == recorded.chunks[:3] and stream.probes == recorded.probes
    assert live_probe_files.summary(out) | {"file": ""} == {
        "file": "", "decided_with": {}, "runs": 1, "probes": 3, "chunks": 3, "live_accuracy": round(2 / 3, 3)}
    first = out.read_bytes()
    live_probe_files.write(out, live_probe_files.read(out))
    assert out.read_bytes() == first                                   # same content, same bytes
    (tmp_path / "bad.json.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="bad.json.gz: not a probe file"):
        live_probe_files.read(tmp_path / "bad.json.gz")
    live_probe_files.write(tmp_path / "old.json.gz", {"format": "csr-llm-live-probes/0", "runs": []})
    with pytest.raises(ValueError, match="format 'csr-llm-live-probes/0'"):
        live_probe_files.streams(tmp_path / "old.json.gz")
