"""The load bench's bookkeeping (plain module, no rclpy): which decision decided which event, and the
figures of each phase.

An event the bench publishes carries a token of its own ("(ref 7)"); its chunk is recognised on
``state_chunks`` by that token. A decision decides every event chunk it holds in its prefix
(``last_chunk_seq`` >= the chunk's seq); an event-triggered decision decides at least the oldest
event chunk still waiting (the reasoning node takes chunks in stream order, and with
``decide_on_cached`` an event may reach a decision through its suffix before its chunk is in the
cached prefix). Event chunks are kept in seq order, so a decision never decides an event published
after the one it was made for: a measured latency is never too short, at worst one decision too long.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from csr_llm_common.stats import percentile, round_or_none

KIND_EVENT = 0          # StateChunk.KIND_EVENT
TRIGGER_EVENT = 1       # Decision.TRIGGER_EVENT
COALESCED = re.compile(r"(\d+) more events in .*?\(burst coalesced\)")
DIGITS = 3


def probe_token(number: int) -> str:
    return f"(ref {number})"


def coalesced_count(text: str) -> int:
    """Events a coalesced burst chunk stands for beyond itself (0 for any other chunk)."""
    match = COALESCED.search(text)
    return int(match.group(1)) if match else 0


def skipped_periodic_of(status: Any) -> Optional[int]:
    """CsrStatus.skipped_periodic (None from a reasoning node whose status has no such field)."""
    value = getattr(status, "skipped_periodic", None)
    return None if value is None else int(value)


@dataclass
class Probe:
    """One event the bench published and waits to see decided."""
    label: str
    token: str
    published_at: float
    chunk_seq: Optional[int] = None
    chunk_at: Optional[float] = None
    decided_at: Optional[float] = None
    decision_id: Optional[int] = None

    @property
    def latency_s(self) -> Optional[float]:
        return None if self.decided_at is None else self.decided_at - self.published_at


@dataclass
class _WaitingChunk:
    seq: int
    probe: Optional[Probe]


class DecisionMatcher:
    """Event chunks waiting for a decision, in seq order; probes resolved as decisions arrive."""

    def __init__(self) -> None:
        self.probes: List[Probe] = []
        self._by_token: Dict[str, Probe] = {}
        self._waiting: List[_WaitingChunk] = []
        self._newest_decided_seq = -1

    def add_probe(self, label: str, token: str, published_at: float) -> Probe:
        probe = Probe(label, token, published_at)
        self.probes.append(probe)
        self._by_token[token] = probe
        return probe

    def on_chunk(self, seq: int, kind: int, text: str, now: float) -> None:
        if kind != KIND_EVENT:
            return
        probe = next((p for token, p in self._by_token.items() if token in text), None)
        if probe is not None:
            del self._by_token[probe.token]
            probe.chunk_seq, probe.chunk_at = seq, now
        if seq <= self._newest_decided_seq:      # its decision came first (another topic, another path)
            if probe is not None:
                probe.decided_at = now
            return
        self._waiting.append(_WaitingChunk(seq, probe))
        self._waiting.sort(key=lambda w: w.seq)

    def on_decision(self, decision_id: int, trigger: int, last_chunk_seq: int, now: float) -> List[Probe]:
        """The probes this decision decides."""
        covered = last_chunk_seq
        if trigger == TRIGGER_EVENT and self._waiting:
            covered = max(covered, self._waiting[0].seq)
        self._newest_decided_seq = max(self._newest_decided_seq, last_chunk_seq)
        decided = [w for w in self._waiting if w.seq <= covered]
        self._waiting = [w for w in self._waiting if w.seq > covered]
        probes = [w.probe for w in decided if w.probe is not None]
        for probe in probes:
            probe.decided_at, probe.decision_id = now, decision_id
        return probes

    @property
    def waiting_events(self) -> int:
        """Event chunks seen and not decided yet (the reasoning node's event queue, seen from outside)."""
        return len(self._waiting)

    def of_label(self, label: str) -> List[Probe]:
        return [p for p in self.probes if p.label == label]


def latency_summary(latencies: Sequence[float]) -> Dict[str, Optional[float]]:
    return {"p50": percentile(latencies, 50, DIGITS), "p99": percentile(latencies, 99, DIGITS),
            "max": round(max(latencies), DIGITS) if latencies else None}


def count_between(times: Sequence[float], start: float, end: float) -> int:
    return sum(1 for t in times if start <= t < end)


def rate_between(times: Sequence[float], start: float, end: float) -> Optional[float]:
    return round(count_between(times, start, end) / (end - start), DIGITS) if end > start else None


def values_between(samples: Sequence[Tuple[float, Optional[float]]], start: float, end: float) -> List[float]:
    return [v for t, v in samples if start <= t < end and v is not None]


def minimum_between(samples: Sequence[Tuple[float, Optional[float]]], start: float, end: float) -> Optional[float]:
    values = values_between(samples, start, end)
    return round(min(values), 1) if values else None


def increase_between(samples: Sequence[Tuple[float, Optional[float]]], start: float, end: float) -> Optional[int]:
    """How much a counter grew inside the window (None where it was never reported)."""
    values = values_between(samples, start, end)
    return int(values[-1] - values[0]) if values else None


@dataclass
class Window:
    start: float
    end: float


@dataclass
class PlainFigures:
    """What one plain phase measured (the inputs of `plain_result`)."""
    window: Window
    probes: List[Probe]
    decision_times: List[float]
    loop_hz: List[Tuple[float, Optional[float]]]
    skipped_periodic: List[Tuple[float, Optional[float]]]
    backlog: List[Tuple[float, Optional[float]]]
    cpu: Dict[str, float] = field(default_factory=dict)


def plain_result(figures: PlainFigures) -> Dict[str, Any]:
    w = figures.window
    latencies = [p.latency_s for p in figures.probes if p.latency_s is not None]
    backlog = values_between(figures.backlog, w.start, w.end)
    return {"event_to_decision_s": latency_summary(latencies),
            "decisions_per_s": rate_between(figures.decision_times, w.start, w.end),
            "skipped_periodic": increase_between(figures.skipped_periodic, w.start, w.end),
            "loop_hz_min": minimum_between(figures.loop_hz, w.start, w.end),
            "cpu": figures.cpu,
            "events": len(figures.probes), "undecided": len(figures.probes) - len(latencies),
            "backlog_max": int(max(backlog)) if backlog else None}


def next_event_result(probe: Optional[Probe]) -> Dict[str, Any]:
    """The recovery figure of a burst or a hostile input: the time to the next event's decision
    (None, `decided` false, when it was not decided within the bench's timeout)."""
    latency = None if probe is None else probe.latency_s
    return {"next_event_s": round_or_none(latency, DIGITS), "decided": latency is not None}


def cpu_shares(used_s: Mapping[str, float], seconds: float) -> Dict[str, float]:
    """CPU seconds per process over a window -> share of one core, largest first."""
    if seconds <= 0:
        return {}
    return {name: round(v / seconds, DIGITS) for name, v in sorted(used_s.items(), key=lambda x: -x[1])}


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:g}{unit}" if isinstance(value, (int, float)) else str(value)


def _recovery_cell(result: Mapping[str, Any]) -> str:
    cell = _fmt(result.get("next_event_s"), " s") if result.get("decided", True) else "not decided"
    queued = result.get("events_queued_before")
    return f"{cell} ({queued} earlier events still queued)" if queued else cell


def result_rows(mode: str, result: Mapping[str, Any]) -> List[Tuple[str, str]]:
    """(measure, value) rows of one graph run (recorder on or off)."""
    rows: List[Tuple[str, str]] = []
    plain = result.get("plain")
    if plain:
        lat = plain["event_to_decision_s"]
        rows += [("plain: event -> decision p50 / p99 / max",
                  f"{_fmt(lat['p50'])} / {_fmt(lat['p99'])} / {_fmt(lat['max'])} s"),
                 ("plain: events decided", f"{plain['events'] - plain['undecided']} of {plain['events']}"),
                 ("plain: decisions per s", _fmt(plain["decisions_per_s"])),
                 ("plain: skipped periodic decisions", _fmt(plain["skipped_periodic"])),
                 ("plain: router loop min", _fmt(plain["loop_hz_min"], " Hz")),
                 ("plain: backlog max", _fmt(plain["backlog_max"], " chunks")),
                 ("plain: CPU (share of a core)", ", ".join(f"{k} {v:.2f}" for k, v in plain["cpu"].items()))]
    burst = result.get("burst")
    if burst:
        rows += [("burst: next event decided after", _recovery_cell(burst)),
                 ("burst: events coalesced", _fmt(burst.get("coalesced")))]
    for kind, figures in (result.get("hostile") or {}).items():
        rows.append((f"hostile {kind}: next event decided after", _recovery_cell(figures)))
    if result.get("error"):
        rows.append(("error", str(result["error"])))
    return [(f"{mode}: {name}", value) for name, value in rows]


def format_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    rows = [row for mode, result in results.items() for row in result_rows(mode, result)]
    width = max((len(name) for name, _ in rows), default=0)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)
