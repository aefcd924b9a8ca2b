"""Compare a replay's outputs with a golden's (plain module, no rclpy).

Decisions are compared in order: intent and arguments exactly, their sim-time stamps within
`decision_time_s` (greedy decoding on the same chunk stream, at the same lockstep boundary).
Router status transitions (task, sub-task, paused task, execution state, interrupt depth and the
monitor counters) in order, each within `transition_time_s`. Motor commands per joint at the
golden's samples (the golden keeps them at a reduced rate) within the joint's tolerance, the
replay's allowed to lag or lead by `motor_skew_s`. Timing: the replay's TTFT p50 within a bound of
the golden's. Tolerances come from the golden's tolerances.yaml (golden.Tolerances).

A mismatch report opens with the FIRST DIVERGENCE in sim time across those streams, with its
context (divergence.py): the chunk stream before it, the two decisions, the router state of both.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union, cast

import numpy as np
from rosbags.highlevel import AnyReader

from csr_llm_common.ros.stamps import stamp_to_sec

from .bags import typestore
from .divergence import Divergence, decision_context, format_decision, transition_context
from .golden import Tolerances

DECISION_TOPIC = "/decision"
MOTOR_TOPIC = "/motor_command"
CHUNK_TOPIC = "/state_chunks"
ROUTER_STATUS_TOPIC = "/router_status"
EXEC_STATES = {0: "nominal", 1: "derated", 2: "failsafe", 3: "stopped"}


@dataclass
class DecisionRecord:
    t: float
    intent: str
    arguments: Tuple
    state_version: int
    last_chunk_seq: int
    ttft_ms: float
    decision_id: int = -1


@dataclass(frozen=True)
class StatusRecord:
    """One router status transition: what the router runs and its monitors' counts."""
    t: float
    active_intent: str
    active_sub_task: str
    paused_intent: str = ""
    execution_state: int = 0
    interrupt_depth: int = 0
    counters: Tuple[int, ...] = ()     # unknown scenes, grips done, derates, failsafes

    @property
    def key(self) -> Tuple:
        return (self.active_intent, self.active_sub_task, self.paused_intent, self.execution_state,
                self.interrupt_depth, self.counters)

    def describe(self) -> str:
        task = f"{self.active_intent or 'idle'}/{self.active_sub_task or '-'}"
        paused = f", paused {self.paused_intent}" if self.paused_intent else ""
        counts = "/".join(str(c) for c in self.counters)
        return (f"{task}{paused}, {EXEC_STATES.get(self.execution_state, self.execution_state)}, "
                f"interrupt depth {self.interrupt_depth}, unknown/grips/derates/failsafes {counts or '-'}")


@dataclass
class RunOutputs:
    decisions: List[DecisionRecord] = field(default_factory=list)
    motor_t: List[float] = field(default_factory=list)
    motor_names: List[str] = field(default_factory=list)
    motor_effort: List[np.ndarray] = field(default_factory=list)
    chunks: Dict[int, str] = field(default_factory=dict)
    chunk_t: Dict[int, float] = field(default_factory=dict)
    statuses: List[StatusRecord] = field(default_factory=list)   # transitions only

    def add_status(self, status: StatusRecord) -> None:
        """Keep transitions; the idle reports before the first task are left out (their stamps
        depend on when the router activated, not on what it did)."""
        if not self.statuses and not status.active_intent:
            return
        if status.t > 0 and (not self.statuses or self.statuses[-1].key != status.key):
            self.statuses.append(status)

    def status_at(self, t: float) -> Optional[StatusRecord]:
        """The router's state in force at sim time t (its newest transition at or before t)."""
        before = [s for s in self.statuses if s.t <= t + 1e-9]
        return before[-1] if before else None


def _argument_value(arg):
    return (arg.name, [arg.float_value, arg.int_value, arg.string_value, arg.bool_value][arg.type])


def read_outputs(bag: Path) -> RunOutputs:
    out = RunOutputs()
    topics = (DECISION_TOPIC, MOTOR_TOPIC, CHUNK_TOPIC, ROUTER_STATUS_TOPIC)
    with AnyReader([Path(bag)], default_typestore=typestore()) as reader:
        conns = [c for c in reader.connections if c.topic in topics]
        for conn, _t, raw in reader.messages(connections=conns):
            # rosbags types the message as `object`; its fields depend on conn.msgtype
            msg = cast(Any, reader.deserialize(raw, conn.msgtype))
            t = stamp_to_sec(msg.header.stamp)
            if conn.topic == DECISION_TOPIC:
                out.decisions.append(DecisionRecord(t, msg.intent, tuple(_argument_value(a) for a in msg.arguments),
                                                    msg.state_version, msg.last_chunk_seq, msg.ttft_ms,
                                                    msg.decision_id))
            elif conn.topic == MOTOR_TOPIC:
                out.motor_names = list(msg.joint_names)
                out.motor_t.append(t)
                out.motor_effort.append(np.asarray(msg.effort, dtype=np.float64))
            elif conn.topic == ROUTER_STATUS_TOPIC:
                out.add_status(StatusRecord(t, msg.active_intent, msg.active_sub_task, msg.paused_intent,
                                            msg.execution_state, msg.interrupt_depth,
                                            (msg.unknown_scene_count, msg.grip_done_count, msg.derate_count,
                                             msg.failsafe_count)))
            elif msg.kind != 2:   # watermarks carry no text
                out.chunks[msg.seq] = msg.text
                out.chunk_t[msg.seq] = t
    return out


@dataclass
class Comparison:
    ok: bool
    lines: List[str]
    first: Optional[Divergence] = None

    def report(self) -> str:
        return "\n".join(self.lines)


def _end_of(golden: RunOutputs, replay: RunOutputs) -> float:
    """Both runs only had inputs up to the earlier of their last motor commands."""
    ends = [run.motor_t[-1] for run in (golden, replay) if run.motor_t]
    return min(ends) if ends else math.inf


def compare(golden: RunOutputs, replay: RunOutputs, tolerances: Union[Tolerances, Mapping[str, float], None] = None,
            default_tolerance: float = 1.0, check_motor: bool = True) -> Comparison:
    """Tolerances: a golden's Tolerances, or a mapping joint -> effort tolerance (the rest default)."""
    tol = tolerances if isinstance(tolerances, Tolerances) else \
        Tolerances(joints={k: float(v) for k, v in (tolerances or {}).items()}, default_joint=default_tolerance)
    end = _end_of(golden, replay)
    decisions_ok, decision_lines, d_div = _compare_decisions(golden, replay, tol, end)
    transitions_ok, transition_lines, s_div = _compare_transitions(golden, replay, tol, end)
    motor_ok, motor_lines, m_div = _compare_motor(golden, replay, tol, check_motor)
    timing_ok, timing_lines = _timing(golden, replay, tol)
    ok = decisions_ok and transitions_ok and motor_ok and timing_ok
    found = [d for d in (d_div, s_div, m_div if check_motor else None) if d is not None]
    first = min(found, key=lambda d: (d.t, d.rank)) if found else None
    lines = ["MATCH" if ok else "MISMATCH"]
    if first is not None:
        lines += first.lines()
    elif not timing_ok:
        lines.append("FIRST DIVERGENCE: timing out of bounds (the outputs themselves match)")
    lines += decision_lines + transition_lines + motor_lines + timing_lines
    return Comparison(ok, lines, first)


def _compare_decisions(golden: RunOutputs, replay: RunOutputs, tol: Tolerances, end: float
                       ) -> Tuple[bool, List[str], Optional[Divergence]]:
    """Decisions exactly, in order, at the same time: (all match, report lines, the first divergence)."""
    # strictly before: a decision due at the very end may have been cut off by the shutdown
    golden_d = [d for d in golden.decisions if d.t < end - 1e-9]
    replay_d = [d for d in replay.decisions if d.t < end - 1e-9]
    beyond = len(golden.decisions) - len(golden_d) + len(replay.decisions) - len(replay_d)
    for i in range(max(len(golden_d), len(replay_d))):
        g = golden_d[i] if i < len(golden_d) else None
        r = replay_d[i] if i < len(replay_d) else None
        same = g is not None and r is not None and (g.intent, g.arguments) == (r.intent, r.arguments)
        if same and g is not None and r is not None and abs(g.t - r.t) <= tol.decision_time_s:
            continue
        ref = g or r
        assert ref is not None
        what = "decision differs" if not same else f"decision at another time (|dt| > {tol.decision_time_s:g} s)"
        div = Divergence("decision", min(d.t for d in (g, r) if d is not None), 0,
                         f"decision #{i}: {what}", decision_context(golden, replay, i, g, r))
        return False, [f"decisions: {len(golden_d)} golden, {len(replay_d)} replay; first differing #{i}: "
                       f"golden {format_decision(g)}, replay {format_decision(r)}"], div
    return True, [f"decisions: {len(golden_d)} match exactly"
                  + (f" ({beyond} made after the other run's recording ended, not compared)" if beyond else "")], None


def _compare_transitions(golden: RunOutputs, replay: RunOutputs, tol: Tolerances, end: float
                         ) -> Tuple[bool, List[str], Optional[Divergence]]:
    """Router status transitions in order, each within transition_time_s."""
    if not golden.statuses:
        return True, ["router transitions: none in the golden (not compared)"], None
    horizon = end - tol.transition_time_s
    gs = [s for s in golden.statuses if s.t < horizon]
    rs = [s for s in replay.statuses if s.t < horizon]
    for i in range(max(len(gs), len(rs))):
        g = gs[i] if i < len(gs) else None
        r = rs[i] if i < len(rs) else None
        if g is not None and r is not None and g.key == r.key and abs(g.t - r.t) <= tol.transition_time_s:
            continue
        t = min(s.t for s in (g, r) if s is not None)
        what = ("router transition at another time" if g is not None and r is not None and g.key == r.key
                else "router transition differs")
        div = Divergence("router status", t, 1, f"{what} (#{i})", transition_context(golden, replay, t, g, r))
        return False, [f"router transitions: {len(gs)} golden, {len(rs)} replay; first differing #{i}"], div
    return True, [f"router transitions: {len(gs)} match (each within {tol.transition_time_s:g} s)"], None


def _compare_motor(golden: RunOutputs, replay: RunOutputs, tol: Tolerances, check_motor: bool
                   ) -> Tuple[bool, List[str], Optional[Divergence]]:
    """Motor commands per joint within tolerance at the golden's samples: (within or not judged, lines, first)."""
    if not (golden.motor_t and replay.motor_t):
        if (golden.motor_t or replay.motor_t) and check_motor:
            t = (golden.motor_t or replay.motor_t)[0]
            return False, [f"motor commands: golden has {len(golden.motor_t)}, replay has {len(replay.motor_t)}"], \
                Divergence("motor command", t, 2, "motor commands missing in one run", [])
        return True, [], None
    gt, rt = np.asarray(golden.motor_t), np.asarray(replay.motor_t)
    start, end = max(gt[0], rt[0]), min(gt[-1], rt[-1])
    keep = (gt >= start - 1e-9) & (gt <= end + 1e-9)
    grid, g_values = gt[keep], np.vstack(golden.motor_effort)[keep]
    diff = _motor_differences(g_values, grid, rt, np.vstack(replay.motor_effort), tol.motor_skew_s)
    ok, rows, first = True, [], None
    for j, name in enumerate(golden.motor_names):
        limit = tol.joint(name)
        over = np.nonzero(diff[:, j] > limit)[0]
        worst = float(diff[:, j].max()) if len(diff) else 0.0
        status = ("ok" if not len(over)
                  else f"EXCEEDED first at {grid[over[0]]:.3f} s ({len(over)} of {len(grid)} samples)")
        if len(over):
            ok = ok and not check_motor
            k = int(over[0])
            if first is None or grid[k] < first.t:
                first = Divergence("motor command", float(grid[k]), 2,
                                   f"motor command {name}: |golden - replay| {diff[k, j]:.3f} > tolerance {limit:g} "
                                   f"(golden {g_values[k, j]:.3f})",
                                   transition_context(golden, replay, float(grid[k]), None, None))
        rows.append(f"  {name:>18}: max |diff| {worst:8.3f} (tolerance {limit:g}) {status}")
    return ok, [f"motor commands: {len(grid)} samples over {end - start:.2f} s of sim time "
                f"(timing skew allowed: +-{tol.motor_skew_s * 1e3:.0f} ms)"
                + ("" if check_motor else " - reported, not judged (--no-motor-check)")] + rows, first


def _motor_differences(g_values: np.ndarray, grid: np.ndarray, rt: np.ndarray, r_effort: np.ndarray,
                       skew_s: float, step_s: float = 0.002) -> np.ndarray:
    """|golden - replay| per golden sample and joint (replay zero-order hold), the best within +-skew_s."""
    diff = np.full_like(g_values, np.inf)
    for shift in np.arange(-skew_s, skew_s + step_s / 2, step_s):
        ri = np.clip(np.searchsorted(rt, grid + shift + 1e-9, side="right") - 1, 0, len(rt) - 1)
        np.minimum(diff, np.abs(g_values - r_effort[ri]), out=diff)
    return diff


def _ttft_p50(run: RunOutputs) -> float:
    return float(np.percentile([d.ttft_ms for d in run.decisions], 50)) if run.decisions else math.nan


def _timing(golden: RunOutputs, replay: RunOutputs, tol: Tolerances) -> Tuple[bool, List[str]]:
    """Decision counts and TTFT side by side; the replay's TTFT p50 within its bound."""
    def stats(run: RunOutputs):
        ttft = [d.ttft_ms for d in run.decisions] or [math.nan]
        return len(run.decisions), float(np.percentile(ttft, 50)), float(np.percentile(ttft, 99))
    (gn, g50, g99), (rn, r50, r99) = stats(golden), stats(replay)
    bound = max(g50 * tol.ttft_p50_factor, g50 + tol.ttft_slack_ms)
    ok = not (r50 > bound)       # NaN (no decisions) is not judged here
    return ok, ["timing:                            golden   replay",
                f"  decisions                     {gn:8d} {rn:8d}",
                f"  ttft p50 [ms]                 {g50:8.1f} {r50:8.1f}  (bound {bound:.0f}: "
                f"{'ok' if ok else 'EXCEEDED'})",
                f"  ttft p99 [ms]                 {g99:8.1f} {r99:8.1f}"]
