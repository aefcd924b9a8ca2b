"""Run statistics and the run report (summary.json, report.md, PNG plots). Plain module.

The recorder node feeds it plain values taken from the run's messages; nothing here needs ROS.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .decision_score import (MATCH, MISMATCH, DecisionRecord, DecisionScore, changes_from_records,
                             score_decisions)
from .robot_score import RobotOutcome

LIMIT_EPS = 1e-6


MAX_REPORT_LINES = 300      # sensed lines kept for the report (a long run must not grow it without bound)


@dataclass
class RunStats:
    first_time: Optional[float] = None
    last_time: Optional[float] = None
    clock_seen: bool = False          # /clock was recorded: times are sim time, else wall time
    wall_first: Optional[float] = None    # monotonic wall time of the first and last timed message
    wall_last: Optional[float] = None
    # t, ttft, intent, resource, state version, reused (the previous decision's result: no TTFT of the model's)
    decisions: List[Tuple[float, float, str, str, int, bool]] = field(default_factory=list)
    evictions: List[float] = field(default_factory=list)
    swaps: List[float] = field(default_factory=list)
    csr_last: Dict[str, float] = field(default_factory=dict)
    router_last: Dict[str, Union[float, str]] = field(default_factory=dict)
    loop_hz: List[float] = field(default_factory=list)
    router_tick_us: List[float] = field(default_factory=list)
    limit_violations: int = 0
    motor_commands: int = 0
    interrupts: int = 0
    resumed: int = 0                 # interrupts after which the interrupted task ran again
    interrupts_cleared: int = 0      # interrupts that ended (resumed, or a new decision took over)
    slip_detected: bool = False
    slip_first_s: Optional[float] = None
    derates: int = 0
    _depth: int = 0
    _intent_before_interrupt: str = ""
    _waiting_resume: bool = False
    tracking: Dict[str, List[Tuple[float, float, float]]] = field(default_factory=dict)  # joint -> (t, q, ref)
    _joint_pos: Dict[str, float] = field(default_factory=dict)
    _last_track_t: float = -1.0
    events: List[Tuple[float, str]] = field(default_factory=list)
    sensed: List[Tuple[float, str]] = field(default_factory=list)     # the graph's own situation lines
    # decision scoring: arguments per decision (parallel to `decisions`), the simulator's
    # scenario/expectations records and the latest goal status
    decision_arguments: List[Dict[str, Any]] = field(default_factory=list)
    expectation_records: List[Dict[str, Any]] = field(default_factory=list)
    goals: Dict[str, Optional[float]] = field(default_factory=dict)
    sim_wall_s: Dict[str, float] = field(default_factory=dict)   # the simulator's wall time per phase
    decision_wall_s: float = 0.0     # the decisions' own time (Decision.total_ms), summed
    decision_longest_ms: Optional[float] = None   # and the longest one (a decision that waited, e.g. for a rebuild)

    def on_time(self, t: float, wall: Optional[float] = None) -> None:
        wall = time.monotonic() if wall is None else wall
        if self.first_time is None:
            self.first_time = t
            self.wall_first = wall
        self.wall_last = wall
        self.last_time = t if self.last_time is None else max(self.last_time, t)

    def on_decision(self, t: float, ttft_ms: float, intent: str, resource: str, state_version: int,
                    arguments: Optional[Mapping[str, Any]] = None, total_ms: float = 0.0,
                    reused: bool = False) -> None:
        self.decisions.append((t, ttft_ms, intent, resource, state_version, bool(reused)))
        if math.isfinite(total_ms):
            self.decision_wall_s += max(0.0, float(total_ms)) / 1e3
            self.decision_longest_ms = max(self.decision_longest_ms or 0.0, float(total_ms))
        self.decision_arguments.append(dict(arguments or {}))

    def on_expectation_record(self, record: Mapping[str, Any]) -> None:
        """A JSON record of the simulator's `scenario/expectations` topic (sim/scenario.py ExpectationFeed)."""
        if not isinstance(record, Mapping) or "kind" not in record:
            raise ValueError(f"not an expectation record: {record!r}")
        # transient-local topics may deliver a record twice after a reconnect
        if dict(record) not in self.expectation_records:
            self.expectation_records.append(dict(record))
        if record["kind"] == "end" and isinstance(record.get("goals"), Mapping):
            self.goals = dict(record["goals"])

    def on_goals(self, goals: Mapping[str, Optional[float]]) -> None:
        if not any(r.get("kind") == "end" for r in self.expectation_records):   # the end record is final
            self.goals = dict(goals)

    def on_sim_wall(self, phases: Mapping[str, float]) -> None:
        """The simulator's newest wall-time profile (sim/truth `wall_s`: seconds per phase)."""
        self.sim_wall_s = {str(k): float(v) for k, v in phases.items()}

    def scenario_info(self) -> Dict[str, Any]:
        for rec in self.expectation_records:
            if rec.get("kind") == "start":
                return rec
        return {}

    def decision_score(self) -> Optional[DecisionScore]:
        """Decisions scored against the scenario's expectations; None without a scored scenario."""
        changes = changes_from_records(self.expectation_records)
        if not changes and not self.goals:
            return None
        info = self.scenario_info()
        ended = any(r.get("kind") == "end" for r in self.expectation_records)
        last = max([self.last_time or 0.0] + [d[0] for d in self.decisions])
        end_time = float(info["duration"]) if ended and "duration" in info else last
        if "duration" in info:
            end_time = min(end_time, float(info["duration"]))
        records = [DecisionRecord(d[0], d[2], args) for d, args in zip(self.decisions, self.decision_arguments)]
        robot = RobotOutcome.from_records(self.expectation_records)
        return score_decisions(changes, records, end_time, self.goals, robot)

    def on_csr_status(self, t: float, evictions: int, swaps: int, prefix_tokens: int, state_version: int) -> None:
        if self.csr_last and evictions > self.csr_last["evictions"]:
            self.evictions.append(t)
        if self.csr_last and swaps > self.csr_last["swaps"]:
            self.swaps.append(t)
        self.csr_last = {"evictions": evictions, "swaps": swaps, "prefix_tokens": prefix_tokens,
                         "state_version": state_version}

    def on_router_status(self, t: float, *, active_intent: str, interrupt_depth: int, task_hit_rate: float,
                         loop_hz: float, grip_done_count: int, slip_detected: bool, tick_us: float,
                         derate_count: int = 0, slip_events: int = 0, active: bool = True) -> None:
        if interrupt_depth > self._depth:
            self.interrupts += interrupt_depth - self._depth
            if self._depth == 0:
                self._intent_before_interrupt = str(self.router_last.get("active_intent", ""))
                self._waiting_resume = bool(self._intent_before_interrupt)
        if interrupt_depth == 0 and self._depth > 0:
            self.interrupts_cleared += 1
        if interrupt_depth == 0 and self._waiting_resume and active_intent == self._intent_before_interrupt:
            self.resumed += 1
            self._waiting_resume = False
        self._depth = interrupt_depth
        slipped = bool(slip_detected) or slip_events > 0
        if slipped and not self.slip_detected:
            self.slip_first_s = t - (self.first_time or 0.0)
        self.slip_detected |= slipped
        self.derates = max(self.derates, int(derate_count))
        if active and loop_hz > 0:
            self.loop_hz.append(loop_hz)
        if tick_us > 0:
            self.router_tick_us.append(tick_us)
        self.router_last = {"active_intent": active_intent, "task_hit_rate": task_hit_rate,
                            "grip_done_count": grip_done_count}

    def on_joint_state(self, names: Sequence[str], positions: Sequence[float]) -> None:
        for name, value in zip(names, positions):
            self._joint_pos[name] = value

    def on_motor_command(self, t: float, names: Sequence[str], effort: Sequence[float], limit: Sequence[float],
                         reference: Sequence[float], track_period: float = 0.02) -> None:
        self.motor_commands += 1
        for e, lim in zip(effort, limit):
            if not math.isfinite(e) or abs(e) > lim + LIMIT_EPS:
                self.limit_violations += 1
                break
        if len(effort) != len(limit):
            self.limit_violations += 1
        if t - self._last_track_t >= track_period and len(reference) == len(names):
            self._last_track_t = t
            for name, ref in zip(names, reference):
                if name in self._joint_pos:
                    self.tracking.setdefault(name, []).append((t, self._joint_pos[name], ref))

    def on_event(self, t: float, text: str) -> None:
        self.events.append((t, text))

    def on_sensed(self, t: float, text: str) -> None:
        if len(self.sensed) < MAX_REPORT_LINES:
            self.sensed.append((t, text))

    # --- outputs ---------------------------------------------------------------------------
    def summary(self) -> dict:
        duration = (0.0 if self.first_time is None or self.last_time is None
                    else self.last_time - self.first_time)
        evaluated = [d[1] for d in self.decisions if not d[5]]      # TTFT percentiles are the model's
        ttfts = np.array(evaluated) if evaluated else np.array([0.0])
        return {
            # duration_s and decisions_per_s are on sim time with a /clock, else on wall time
            "time_base": "sim" if self.clock_seen else "wall",
            "duration_s": round(duration, 3),
            "sim_seconds": round(duration, 3) if self.clock_seen else None,
            # sim seconds per wall second over the recording (None without a sim clock)
            "real_time_factor": self.real_time_factor(duration),
            "decisions": len(self.decisions),
            "decisions_per_s": round(len(self.decisions) / duration, 3) if duration > 0 else 0.0,
            "decisions_reused": sum(1 for d in self.decisions if d[5]),
            "ttft_p50_ms": round(float(np.percentile(ttfts, 50)), 1),
            "ttft_p99_ms": round(float(np.percentile(ttfts, 99)), 1),
            "evictions": int(self.csr_last.get("evictions", 0)),
            "swaps": int(self.csr_last.get("swaps", 0)),
            "limit_violations": self.limit_violations,
            "grip_done": int(self.router_last.get("grip_done_count", 0)),
            "interrupts": self.interrupts,
            "resumed": self.resumed,
            "interrupts_cleared": self.interrupts_cleared,
            "slip_detected": self.slip_detected,
            "slip_first_s": None if self.slip_first_s is None else round(self.slip_first_s, 3),
            "derates": self.derates,
            "router_hit_rate": round(float(self.router_last.get("task_hit_rate", 0.0)), 3),
            "loop_hz": round(float(np.median(self.loop_hz)), 1) if self.loop_hz else 0.0,
            "motor_commands": self.motor_commands,
            "intents": _count([d[2] for d in self.decisions]),
            "scenario": self.scenario_info().get("scenario"),
            # where the simulator's wall time went (lockstep waits, physics, pacing, ...; None without one)
            "sim_wall_s": dict(self.sim_wall_s) or None,
            # wall seconds the reasoning node spent deciding (catch-up, suffix, decode) per second of
            # the run: with decisions lockstepped, real time needs this well below 1
            "decision_wall_s_per_s": round(self.decision_wall_s / duration, 3) if duration > 0 else None,
            "decision_longest_ms": None if self.decision_longest_ms is None else round(self.decision_longest_ms, 1),
            # CLOCK_MONOTONIC (one clock for every process) of the first and last timed message: the
            # runner takes each process's CPU time inside this span (process_cpu.py)
            "wall_span_monotonic_s": None if self.wall_first is None or self.wall_last is None
            else [round(self.wall_first, 3), round(self.wall_last, 3)],
            **_score_summary(self.decision_score()),
        }

    def real_time_factor(self, sim_duration: float) -> Optional[float]:
        if not self.clock_seen or self.wall_first is None or self.wall_last is None:
            return None
        wall = self.wall_last - self.wall_first
        return round(sim_duration / wall, 3) if wall > 0 else None

    def write(self, run_dir: Path, bag_path: Optional[Path] = None) -> dict:
        run_dir.mkdir(parents=True, exist_ok=True)
        summary = self.summary()
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        plots = self._plots(run_dir)
        score = self.decision_score()
        if score is not None:
            (run_dir / "decisions.json").write_text(json.dumps(self._decisions_json(score), indent=1) + "\n")
            plots.append(plot_decision_timeline(score, run_dir / "decisions.png", t0=0.0,
                                                title=f"Decisions versus expectations: {summary['scenario']}"))
        lines = ["# CSR-LLM run report", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in summary.items()]
        if score is not None:
            lines += ["", "## Decision scoring", ""] + _score_lines(score)
        lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
        if bag_path is not None:
            lines += ["", f"Bag: `{bag_path.name}` (rosbag2; open with `ros2 bag info` or Foxglove)."]
        if self.events:
            lines += ["", "## Scenario events", ""] + [f"- {t:7.2f} s: {text}" for t, text in self.events[:200]]
        if self.sensed:
            lines += ["", "## Sensed lines (the graph's own: situations, reflexes, task ends)", ""]
            lines += [f"- {t:7.2f} s: {text}" for t, text in self.sensed]
        (run_dir / "report.md").write_text("\n".join(lines) + "\n")
        return summary

    def _plots(self, run_dir: Path) -> List[Path]:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        paths = []
        t0 = self.first_time or 0.0
        fig, ax = plt.subplots(figsize=(9, 3.8))
        evaluated = [d for d in self.decisions if not d[5]]
        if evaluated:
            ax.plot([d[0] - t0 for d in evaluated], [d[1] for d in evaluated], ".-", lw=0.8, label="TTFT")
        reused = [d[0] - t0 for d in self.decisions if d[5]]
        if reused:
            ax.plot(reused, [0.0] * len(reused), "|", color="tab:gray", ms=6,
                    label=f"reused ({len(reused)}): inputs unchanged")
        for i, t in enumerate(self.evictions):
            ax.axvline(t - t0, color="tab:red", ls=":", lw=0.9, label="eviction" if i == 0 else None)
        for i, t in enumerate(self.swaps):
            ax.axvline(t - t0, color="tab:green", ls="--", lw=0.9, label="ASR swap" if i == 0 else None)
        ax.set_xlabel("sim time [s]")
        ax.set_ylabel("decision TTFT [ms]")
        ax.set_title("Decision TTFT over the run")
        if ax.get_legend_handles_labels()[0]:     # a run without decisions, evictions or swaps has none
            ax.legend(fontsize=8)
        paths.append(_save(fig, run_dir / "ttft.png"))
        joints = [j for j in self.tracking if not j.startswith("gripper")][:4]
        fig, axes = plt.subplots(max(1, len(joints)), 1, figsize=(9, 1.9 * max(1, len(joints))), sharex=True,
                                 squeeze=False)
        for ax, joint in zip(axes[:, 0], joints):
            data = np.array(self.tracking[joint])
            ax.plot(data[:, 0] - t0, data[:, 2], lw=1.0, label="reference")
            ax.plot(data[:, 0] - t0, data[:, 1], lw=0.8, label="measured")
            ax.set_ylabel(f"{joint} [rad]", fontsize=7)
        if joints:
            axes[0, 0].legend(fontsize=7)
        axes[0, 0].set_title("Joint tracking versus reference")
        axes[-1, 0].set_xlabel("sim time [s]")
        paths.append(_save(fig, run_dir / "tracking.png"))
        fig, ax = plt.subplots(figsize=(7, 3.5))
        if self.router_tick_us:
            ax.hist(self.router_tick_us, bins=50)
        ax.set_xlabel("router L1+L2+L3 compute per tick [us] (router_status samples)")
        ax.set_ylabel("count")
        ax.set_title("Router latency")
        paths.append(_save(fig, run_dir / "router_latency.png"))
        return paths


    def _decisions_json(self, score: DecisionScore) -> Dict[str, Any]:
        """Every decision with its verdict and TTFT, the windows and reactions (bench_decisions reads it)."""
        return {
            "scenario": self.scenario_info().get("scenario"),
            "decisions": [{"time": round(sd.time, 4), "intent": sd.intent, "args": dict(sd.arguments),
                           "verdict": sd.verdict, "event": sd.event_id, "ttft_ms": round(d[1], 2),
                           "reused": d[5]}
                          for sd, d in zip(score.decisions, sorted(self.decisions, key=lambda d: d[0]))],
            "reactions": [{"event": r.event_id, "start": round(r.start, 3), "end": round(r.end, 3),
                           "reaction_s": round(r.reaction_s, 3), "matched": r.matched,
                           "expect": r.expectation.to_json()} for r in score.reactions],
            "goals": score.goals,
        }


_SCORE_KEYS = ("decision_accuracy", "decisions_scored", "decisions_matched", "decisions_unscored", "reaction_p50_s",
               "reaction_max_s", "reactions_unmatched", "task_success", "goals")


def _score_summary(score: Optional[DecisionScore]) -> Dict[str, Any]:
    if score is None:
        return {key: None for key in _SCORE_KEYS}
    return score.summary()


def _score_lines(score: DecisionScore) -> List[str]:
    acc = "n/a" if score.accuracy is None else f"{100 * score.accuracy:.1f} %"
    lines = [f"Decision accuracy {acc} ({score.count(MATCH)} of {score.scored} scored decisions match; "
             f"{score.count('unscored')} unscored). Task success: {score.task_success}.", "",
             "| event | at [s] | acceptable | reaction [s] | matched |", "|---|---|---|---|---|"]
    for r in score.reactions:
        acceptable = r.expectation.describe().replace("|", "\\|")   # a bare | would split the table cell
        lines.append(f"| {r.event_id} | {r.start:.2f} | {acceptable} | {r.reaction_s:.2f} | "
                     f"{'yes' if r.matched else 'never (window length)'} |")
    if score.goals:
        lines += ["", "| goal | reached at [s] |", "|---|---|"]
        lines += [f"| {g} | {'-' if t is None else f'{t:.2f}'} |" for g, t in score.goals.items()]
    return lines


def _intent_order(score: DecisionScore) -> List[str]:
    """Rows of the timeline: the catalogue's intents (config/intents.yaml) first, then any other."""
    names: List[str] = []
    try:
        from csr_llm_common.catalogue import IntentCatalogue
        from csr_llm_common.paths import config_file
        names = IntentCatalogue.from_file(config_file("intents.yaml")).names
    except (OSError, ValueError):
        pass
    seen = [i for _, _, c in score.windows if c.expectation for i in c.expectation.intents]
    seen += [d.intent for d in score.decisions]
    for name in seen:
        if name not in names:
            names.append(name)
    return names


VERDICT_COLOURS = {MATCH: "tab:green", MISMATCH: "tab:red", "unscored": "0.6"}


def plot_decision_timeline(score: DecisionScore, path: Path, t0: float = 0.0, title: str = "") -> Path:
    """Decision timeline: one row per intent; the acceptable intents of each expectation window as
    shaded bands, each decision as a mark on its intent's row (green match, red mismatch, grey
    unscored), the events that change the expectation as dotted lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = _intent_order(score)
    y = {name: i for i, name in enumerate(rows)}
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.45 * len(rows)))
    labelled: Dict[str, str] = {}      # row -> constraint text already written (not repeated per window)
    for k, (start, end, change) in enumerate(score.windows):
        assert change.expectation is not None
        for intent in change.expectation.intents:
            ax.broken_barh([(start - t0, end - start)], (y[intent] - 0.4, 0.8), facecolors="tab:green", alpha=0.18,
                           label="acceptable" if k == 0 and intent == change.expectation.intents[0] else None)
            limits = [c.describe() for c in change.expectation.constraints if c.intent == intent]
            if limits and labelled.get(intent) != ", ".join(limits):
                labelled[intent] = ", ".join(limits)
                ax.text(start - t0 + 0.1, y[intent] + 0.25, ", ".join(limits), fontsize=6, va="center",
                        color="darkgreen")
        ax.axvline(start - t0, color="0.4", ls=":", lw=0.8)
        ax.text(start - t0, len(rows) - 0.45, change.event_id, rotation=90, fontsize=6, va="bottom", ha="right")
    for verdict, colour in VERDICT_COLOURS.items():
        marks = [(d.time - t0, y[d.intent]) for d in score.decisions if d.verdict == verdict]
        if marks:
            xs, ys = zip(*marks)
            ax.scatter(xs, ys, s=14, color=colour, marker="|" if verdict == "unscored" else "o",
                       label=f"{verdict} ({len(marks)})", zorder=3)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, fontsize=8)
    ax.set_ylim(-0.6, len(rows) + 0.9)
    ax.set_xlabel("sim time [s]")
    acc = "n/a" if score.accuracy is None else f"{100 * score.accuracy:.0f} %"
    ax.set_title(f"{title} (accuracy {acc}, task success {score.task_success})", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path


def _count(items: Sequence[str]) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out
