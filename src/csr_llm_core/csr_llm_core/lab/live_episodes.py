"""Recorded runs as training streams: what the live graph put in the state, probed where it decided.

A scenario run (`csr-llm run --profile sim`, as bench-decisions runs one) leaves a bag with the
aggregator's `state_chunks`, the reasoning node's `decision`s and the router's `router_status`, and
the recorder's `decisions.json` with each decision's expectation window. Here every scored decision
becomes a probe on exactly the chunks its prefix held (`Decision.last_chunk_seq`), with the task
the router reported before its stamp as the running one, and the intents of the expectation in
force as the accepted set. Unscored decisions (before the first expectation, at an event's own
instant, after `none`) are left out, and so is a decision whose prefix ends before the event
that set its expectation (the model could not have known). Plain module (rosbags reads the bag; no rclpy).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..aggregator import ChunkOut
from csr_llm_common.catalogue import PausedTask
from .decision_situations import Probe, Stream

KIND_WATERMARK = 2
_MESSAGES = ("IntentArgument", "StateChunk", "Decision", "RouterStatus", "CsrStatus")


@dataclass
class RecordedRun:
    stream: Stream                 # the run's chunks, a probe per labelled decision
    counts: Dict[str, int]         # decisions, probes, skipped (unscored), unseen (label set after its prefix)
    decided: List[str]             # the intent the live graph decided at each probe
    # the live state had evicted chunks before the decision: the live suffix's recent events and
    # the prefix may then differ from a replay on the whole stream (the label still holds)
    after_eviction: List[bool]


def stamp_s(header: Any) -> float:
    return header.stamp.sec + header.stamp.nanosec * 1e-9


def _typestore():
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore
    from csr_llm_common.paths import msg_dir
    store = get_typestore(Stores.ROS2_KILTED if hasattr(Stores, "ROS2_KILTED") else Stores.LATEST)
    types: Dict[str, Any] = {}
    for name in _MESSAGES:
        types.update(get_types_from_msg((msg_dir() / f"{name}.msg").read_text(), f"csr_llm_msgs/msg/{name}"))
    store.register(types)
    return store


def read_topics(bag: Path, topics: Sequence[str]) -> Dict[str, List[Any]]:
    """Deserialized messages per topic name (without the leading slash), in bag order."""
    from rosbags.highlevel import AnyReader
    wanted = {t.lstrip("/") for t in topics}
    out: Dict[str, List[Any]] = {t: [] for t in wanted}
    with AnyReader([bag.parent if bag.is_file() else bag], default_typestore=_typestore()) as reader:
        connections = [c for c in reader.connections if c.topic.lstrip("/") in wanted]
        for connection, _, raw in reader.messages(connections=connections):
            out[connection.topic.lstrip("/")].append(reader.deserialize(raw, connection.msgtype))
    return out


def state_chunks(messages: Sequence[Any]) -> List[ChunkOut]:
    """The text chunks (watermarks carry none) in seq order."""
    chunks = [ChunkOut(m.seq, stamp_s(m.header), m.source_topic, m.kind, m.text)
              for m in messages if m.kind != KIND_WATERMARK]
    return sorted(chunks, key=lambda c: c.seq)


def _arguments(arguments: Sequence[Any]) -> Dict[str, Any]:
    values = {0: "float_value", 1: "int_value", 2: "string_value", 3: "bool_value"}
    return {a.name: getattr(a, values[a.type]) for a in arguments if a.type in values}


def _reported_before(statuses: Sequence[Tuple[float, Any]], stamp: float) -> Tuple[str, int, Optional[PausedTask]]:
    """The router's last report stamped before `stamp` (running intent, interrupt depth, paused task)."""
    last = None
    for at, status in statuses:
        if at >= stamp:
            break
        last = status
    if last is None:
        return "", 0, None
    paused = PausedTask(last.paused_intent, _arguments(last.paused_arguments)) if last.paused_intent else None
    return last.active_intent, int(last.interrupt_depth), paused


def run_stream(run_dir: Path) -> RecordedRun:
    """The run's stream with a probe per scored decision (see RecordedRun)."""
    detail = json.loads((run_dir / "decisions.json").read_text())
    messages = read_topics(run_dir / "bag", ("state_chunks", "decision", "router_status", "csr_status"))
    # an eviction shortens the logical state at once and the cache at the swap: until then the
    # cache holds more than the memory bound (every chunk is in it before a lockstepped decision)
    tau_mem = max((m.tau_mem for m in messages["csr_status"]), default=float("inf"))
    chunks = state_chunks(messages["state_chunks"])
    decisions = messages["decision"]
    statuses = sorted(((stamp_s(m.header), m) for m in messages["router_status"]), key=lambda p: p[0])
    scored = detail["decisions"]
    expect = {r["event"]: r["expect"] for r in detail["reactions"]}
    starts = {r["event"]: float(r["start"]) for r in detail["reactions"]}
    seqs = [c.seq for c in chunks]
    by_stamp: Dict[Tuple[int, str], List[Any]] = {}
    for message in decisions:             # the recorder lists decisions by stamp, the bag by arrival
        by_stamp.setdefault((round(stamp_s(message.header) * 1000), message.intent), []).append(message)
    rows: List[Tuple[int, Probe, str, bool]] = []
    skipped = unseen = 0
    for row in scored:
        matching = by_stamp.get((round(row["time"] * 1000), row["intent"]))
        if not matching:
            raise ValueError(f"{run_dir}: decision {row['intent']} at {row['time']} s is not in the bag")
        message = matching.pop(0)
        accept = expect.get(row["event"]) if row["verdict"] in ("match", "mismatch") else None
        if not isinstance(accept, dict) or not accept.get("intents"):
            skipped += 1
            continue
        position = sum(1 for s in seqs if s <= message.last_chunk_seq)
        if not position or chunks[position - 1].stamp < starts[row["event"]] - 1e-3:
            unseen += 1       # its prefix ends before the event that set the expectation: no label
            continue
        running, interrupts, paused = _reported_before(statuses, stamp_s(message.header))
        rows.append((position, Probe(frozenset(accept["intents"]), running, paused=paused,
                                     note=f"{row['event']} @ {row['time']:.2f}s, interrupts {interrupts}"),
                     row["intent"], message.state_version > 0 or message.prefix_tokens > tau_mem))
    rows.sort(key=lambda r: r[0])            # the recording feeds chunks forward only
    counts = {"decisions": len(decisions), "probes": len(rows), "skipped": skipped, "unseen": unseen}
    return RecordedRun(Stream(chunks, [(r[0], r[1]) for r in rows]), counts, [r[2] for r in rows], [r[3] for r in rows])


def run_streams(runs: Sequence[Path]) -> List[Tuple[str, Stream]]:
    """(name, stream) of every run folder that has a bag and decisions.json (others are skipped)."""
    out = []
    for run in runs:
        if (run / "decisions.json").exists() and (run / "bag").exists():
            recorded = run_stream(run)
            if recorded.stream.probes:
                out.append((run.parent.name if run.name == "latest" else run.name, recorded.stream))
    return out
