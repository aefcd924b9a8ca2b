"""Compare a replay's outputs with a golden bag: decisions exactly, motor commands within tolerance.

Decisions are compared in order (intent and arguments must match exactly; greedy decoding on the
same chunk stream is deterministic). Motor commands are compared per joint on a common sim-time
grid against per-joint tolerances. A mismatch report names the first divergence, its sim time, the
state version and the last chunk the decision saw; timing figures are shown side by side.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, cast

import numpy as np
from rosbags.highlevel import AnyReader

from csr_llm_common.ros.stamps import stamp_to_sec

from .bags import typestore

DECISION_TOPIC = "/decision"
MOTOR_TOPIC = "/motor_command"
CHUNK_TOPIC = "/state_chunks"


@dataclass
class DecisionRecord:
    t: float
    intent: str
    arguments: Tuple
    state_version: int
    last_chunk_seq: int
    ttft_ms: float


@dataclass
class RunOutputs:
    decisions: List[DecisionRecord] = field(default_factory=list)
    motor_t: List[float] = field(default_factory=list)
    motor_names: List[str] = field(default_factory=list)
    motor_effort: List[np.ndarray] = field(default_factory=list)
    chunks: Dict[int, str] = field(default_factory=dict)


def _stamp(header) -> float:
    return stamp_to_sec(header.stamp)


def _argument_value(arg):
    return (arg.name, [arg.float_value, arg.int_value, arg.string_value, arg.bool_value][arg.type])


def read_outputs(bag: Path) -> RunOutputs:
    out = RunOutputs()
    with AnyReader([Path(bag)], default_typestore=typestore()) as reader:
        conns = [c for c in reader.connections if c.topic in (DECISION_TOPIC, MOTOR_TOPIC, CHUNK_TOPIC)]
        for conn, _t, raw in reader.messages(connections=conns):
            # rosbags types the message as `object`; its fields depend on conn.msgtype
            msg = cast(Any, reader.deserialize(raw, conn.msgtype))
            if conn.topic == DECISION_TOPIC:
                out.decisions.append(DecisionRecord(_stamp(msg.header), msg.intent,
                                                    tuple(_argument_value(a) for a in msg.arguments),
                                                    msg.state_version, msg.last_chunk_seq, msg.ttft_ms))
            elif conn.topic == MOTOR_TOPIC:
                out.motor_names = list(msg.joint_names)
                out.motor_t.append(_stamp(msg.header))
                out.motor_effort.append(np.asarray(msg.effort, dtype=np.float64))
            elif msg.kind != 2:   # watermarks carry no text
                out.chunks[msg.seq] = msg.text
    return out


@dataclass
class Comparison:
    ok: bool
    lines: List[str]

    def report(self) -> str:
        return "\n".join(self.lines)


def _fmt_decision(d: Optional[DecisionRecord]) -> str:
    if d is None:
        return "(none)"
    args = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in d.arguments)
    return f"{d.intent}({args})"


def compare(golden: RunOutputs, replay: RunOutputs, tolerances: Mapping[str, float],
            default_tolerance: float = 1.0, grid_s: float = 0.01, skew_s: float = 0.1,
            check_motor: bool = True) -> Comparison:
    """`skew_s`: motor commands may lag or lead by up to this much sim time (the replayed router
    runs open loop on recorded joint states and its ticks need not land where the original's did)."""
    decisions_ok, lines = _compare_decisions(golden, replay)
    motor_ok, motor_lines = _compare_motor(golden, replay, tolerances, default_tolerance, grid_s, skew_s,
                                           check_motor)
    ok = decisions_ok and motor_ok
    lines = ["MATCH" if ok else "MISMATCH"] + lines + motor_lines + _timing_lines(golden, replay)
    return Comparison(ok, lines)


def _compare_decisions(golden: RunOutputs, replay: RunOutputs) -> Tuple[bool, List[str]]:
    """Decisions exactly, in order: (all match, report lines)."""
    # decisions one run made after the other stopped recording are not a divergence
    # (both runs only had inputs up to the earlier of their last motor commands)
    ends = [run.motor_t[-1] for run in (golden, replay) if run.motor_t]
    end = min(ends) if ends else math.inf
    # strictly before: a decision due at the very end may have been cut off by the shutdown
    golden_d = [d for d in golden.decisions if d.t < end - 1e-9]
    replay_d = [d for d in replay.decisions if d.t < end - 1e-9]
    beyond = len(golden.decisions) - len(golden_d) + len(replay.decisions) - len(replay_d)
    for i in range(max(len(golden_d), len(replay_d))):
        g = golden_d[i] if i < len(golden_d) else None
        r = replay_d[i] if i < len(replay_d) else None
        if g is None or r is None or (g.intent, g.arguments) != (r.intent, r.arguments):
            return False, _divergence_lines(golden, replay, i, g, r)
    return True, [f"decisions: {len(golden_d)} match exactly"
                  + (f" ({beyond} made after the other run's recording ended, not compared)" if beyond else "")]


def _divergence_lines(golden: RunOutputs, replay: RunOutputs, i: int, g: Optional[DecisionRecord],
                      r: Optional[DecisionRecord]) -> List[str]:
    """The report of the first divergence, decision #i (g or r: None where that run has none)."""
    ref = g or r
    assert ref is not None   # at least one run has decision #i
    chunk = golden.chunks.get(ref.last_chunk_seq, replay.chunks.get(ref.last_chunk_seq, "(not recorded)"))
    return [f"decisions: FIRST DIVERGENCE at decision #{i}, sim time {ref.t:.3f} s, "
            f"state version {ref.state_version}",
            f"  golden: {_fmt_decision(g)}",
            f"  replay: {_fmt_decision(r)}",
            f"  last chunk before it (seq {ref.last_chunk_seq}): {chunk}",
            f"  counts: golden {len(golden.decisions)}, replay {len(replay.decisions)}"]


def _compare_motor(golden: RunOutputs, replay: RunOutputs, tolerances: Mapping[str, float],
                   default_tolerance: float, grid_s: float, skew_s: float, check_motor: bool
                   ) -> Tuple[bool, List[str]]:
    """Motor commands per joint within tolerance on a common grid: (within, or not judged; report lines)."""
    if not (golden.motor_t and replay.motor_t):
        if (golden.motor_t or replay.motor_t) and check_motor:
            return False, [f"motor commands: golden has {len(golden.motor_t)}, replay has {len(replay.motor_t)}"]
        return True, []
    gt, rt = np.asarray(golden.motor_t), np.asarray(replay.motor_t)
    start, end = max(gt[0], rt[0]), min(gt[-1], rt[-1])
    grid = np.arange(start, end, grid_s) if end > start else np.array([start])
    diff = _motor_differences(golden, replay, grid, int(round(skew_s / grid_s)))
    ok = True
    rows = []
    for j, name in enumerate(golden.motor_names):
        tol = float(tolerances.get(name, default_tolerance))
        over = np.nonzero(diff[:, j] > tol)[0]
        worst = float(diff[:, j].max()) if len(diff) else 0.0
        status = ("ok" if not len(over)
                  else f"EXCEEDED first at {grid[over[0]]:.3f} s ({len(over)} of {len(grid)} samples)")
        if check_motor:
            ok &= not len(over)
        rows.append(f"  {name:>18}: max |diff| {worst:8.3f} (tolerance {tol:g}) {status}")
    return ok, [f"motor commands: {len(grid)} samples over {end - start:.2f} s of sim time "
                f"(timing skew allowed: +-{skew_s * 1e3:.0f} ms)"
                + ("" if check_motor else " - reported, not judged (--no-motor-check)")] + rows


def _motor_differences(golden: RunOutputs, replay: RunOutputs, grid: np.ndarray, shift: int) -> np.ndarray:
    """|golden - replay| per grid sample and joint (zero-order hold), the best within +-shift samples."""
    gt, rt = np.asarray(golden.motor_t), np.asarray(replay.motor_t)
    ge, re_ = np.vstack(golden.motor_effort), np.vstack(replay.motor_effort)
    gi = np.clip(np.searchsorted(gt, grid, side="right") - 1, 0, len(gt) - 1)
    ri = np.clip(np.searchsorted(rt, grid, side="right") - 1, 0, len(rt) - 1)
    g_grid, r_grid = ge[gi], re_[ri]
    diff = np.full_like(g_grid, np.inf)
    for k in range(-shift, shift + 1):
        lo, hi = max(0, -k), min(len(grid), len(grid) - k)
        if hi > lo:
            np.minimum(diff[lo:hi], np.abs(g_grid[lo:hi] - r_grid[lo + k:hi + k]), out=diff[lo:hi])
    return diff


def _timing_lines(golden: RunOutputs, replay: RunOutputs) -> List[str]:
    """Decision counts and TTFT percentiles side by side (reported, not judged)."""
    def stats(run: RunOutputs):
        ttft = [d.ttft_ms for d in run.decisions] or [math.nan]
        return len(run.decisions), float(np.percentile(ttft, 50)), float(np.percentile(ttft, 99))
    (gn, g50, g99), (rn, r50, r99) = stats(golden), stats(replay)
    return ["timing (reported, not compared):   golden   replay",
            f"  decisions                     {gn:8d} {rn:8d}",
            f"  ttft p50 [ms]                 {g50:8.1f} {r50:8.1f}",
            f"  ttft p99 [ms]                 {g99:8.1f} {r99:8.1f}"]
