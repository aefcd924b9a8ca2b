"""The first divergence between a golden and a replay, with its context (plain module, no rclpy).

Context: the chunk stream the decision saw (its last chunks, stamped), the two decisions, the
router's state in both runs at that time and the decision in force there.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, List, Optional

if TYPE_CHECKING:
    from .compare import DecisionRecord, RunOutputs, StatusRecord

CHUNKS_SHOWN = 6


@dataclass
class Divergence:
    stream: str              # decision | router status | motor command
    t: float                 # sim time of the first difference
    rank: int                # order among divergences at the same time (decisions first)
    what: str
    context: List[str] = field(default_factory=list)

    def lines(self) -> List[str]:
        return [f"FIRST DIVERGENCE at sim time {self.t:.3f} s in the {self.stream} stream: {self.what}"] + \
            [f"  {line}" for line in self.context]


def format_decision(d: Optional["DecisionRecord"]) -> str:
    if d is None:
        return "(none)"
    args = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in d.arguments)
    return f"{d.intent}({args})"


def _decision_line(label: str, d: Optional["DecisionRecord"]) -> str:
    if d is None:
        return f"{label}: (none)"
    return (f"{label}: {format_decision(d)} at {d.t:.3f} s (state version {d.state_version}, "
            f"last chunk seq {d.last_chunk_seq}, ttft {d.ttft_ms:.0f} ms)")


def _chunk_stream(golden: "RunOutputs", replay: "RunOutputs", last_seq: int) -> List[str]:
    """The last chunks up to seq `last_seq` (the golden's text, the replay's where the golden lacks it)."""
    seqs = sorted(s for s in set(golden.chunks) | set(replay.chunks) if s <= last_seq)[-CHUNKS_SHOWN:]
    lines = []
    for seq in seqs:
        run = golden if seq in golden.chunks else replay
        text = run.chunks[seq].replace("\n", " ")
        same = "" if golden.chunks.get(seq) == replay.chunks.get(seq) else "  [differs in the replay: " \
            + str(replay.chunks.get(seq, "(missing)"))[:120] + "]"
        lines.append(f"    seq {seq} @ {run.chunk_t.get(seq, float('nan')):.3f} s: {text[:160]}{same}")
    return lines or ["    (no chunk recorded)"]


def _router_state(golden: "RunOutputs", replay: "RunOutputs", t: float) -> List[str]:
    def state(run: "RunOutputs") -> str:
        status: Optional[Any] = run.status_at(t)
        return "(no router status yet)" if status is None else f"{status.describe()} (since {status.t:.3f} s)"
    return [f"router state golden: {state(golden)}", f"router state replay: {state(replay)}"]


def _decision_in_force(run: "RunOutputs", t: float) -> Optional["DecisionRecord"]:
    before = [d for d in run.decisions if d.t <= t + 1e-9]
    return before[-1] if before else None


def decision_context(golden: "RunOutputs", replay: "RunOutputs", i: int, g: Optional["DecisionRecord"],
                     r: Optional["DecisionRecord"]) -> List[str]:
    ref = g or r
    assert ref is not None     # at least one run has decision #i
    return [_decision_line("golden", g), _decision_line("replay", r),
            f"chunk stream before it (up to seq {ref.last_chunk_seq}):",
            *_chunk_stream(golden, replay, ref.last_chunk_seq),
            *_router_state(golden, replay, ref.t),
            f"counts: golden {len(golden.decisions)} decisions, replay {len(replay.decisions)}"]


def transition_context(golden: "RunOutputs", replay: "RunOutputs", t: float, g: Optional["StatusRecord"],
                       r: Optional["StatusRecord"]) -> List[str]:
    """A router transition or a motor command differs: both states, the decisions in force, the chunks."""
    lines = []
    if g is not None or r is not None:
        lines += [f"golden transition: {g.describe() + f' at {g.t:.3f} s' if g else '(none)'}",
                  f"replay transition: {r.describe() + f' at {r.t:.3f} s' if r else '(none)'}"]
    lines += _router_state(golden, replay, t)
    dg, dr = _decision_in_force(golden, t), _decision_in_force(replay, t)
    lines += [_decision_line("decision in force, golden", dg), _decision_line("decision in force, replay", dr)]
    if dg is not None:
        lines += [f"chunk stream before it (up to seq {dg.last_chunk_seq}):",
                  *_chunk_stream(golden, replay, dg.last_chunk_seq)[-3:]]
    return lines
