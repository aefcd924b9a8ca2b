"""What a golden holds, and what changed between two of them (plain module, no rclpy).

The bless step prints this for the committed golden against the new recording: the decisions, the
intents in order, the task outcomes (the sub-tasks each task reached, the monitors' counts, the
final state) and the motor command statistics per joint.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np

from .compare import RunOutputs
from .divergence import format_decision


@dataclass
class GoldenSummary:
    decisions: List[str] = field(default_factory=list)           # "t intent(args)"
    intents: List[str] = field(default_factory=list)             # in order, repeats collapsed
    tasks: List[str] = field(default_factory=list)               # "intent: sub-task > sub-task ..."
    counters: Dict[str, int] = field(default_factory=dict)
    final_state: str = ""
    commands: Dict[str, Tuple[float, float, float]] = field(default_factory=dict)   # joint -> mean, rms, max |u|
    command_count: int = 0

    def as_dict(self) -> Dict:
        """For golden.yaml's `recorded:` section."""
        return {"decisions": len(self.decisions), "intents": self.intents, "tasks": self.tasks,
                "counters": self.counters, "final_state": self.final_state,
                "motor_commands": self.command_count}


def summarize(run: RunOutputs) -> GoldenSummary:
    out = GoldenSummary()
    for d in run.decisions:
        out.decisions.append(f"{d.t:7.3f} {format_decision(d)}")
        if not out.intents or out.intents[-1] != d.intent:
            out.intents.append(d.intent)
    current: List[str] = []
    for status in run.statuses:
        if status.active_intent and (not current or current[0] != status.active_intent):
            if current:
                out.tasks.append(_task_line(current))
            current = [status.active_intent]
        if current and status.active_sub_task and status.active_sub_task not in current[1:]:
            current.append(status.active_sub_task)
    if current:
        out.tasks.append(_task_line(current))
    if run.statuses:
        last = run.statuses[-1]
        out.counters = dict(zip(("unknown_scenes", "grips_done", "derates", "failsafes"), last.counters))
        out.final_state = last.describe()
    if run.motor_effort:
        effort = np.abs(np.vstack(run.motor_effort))
        out.command_count = len(run.motor_effort)
        for j, name in enumerate(run.motor_names):
            column = effort[:, j]
            out.commands[name] = (float(column.mean()), float(np.sqrt((column ** 2).mean())), float(column.max()))
    return out


def _task_line(task: List[str]) -> str:
    return f"{task[0]}: {' > '.join(task[1:]) or '-'}"


def _list_diff(title: str, old: List[str], new: List[str], shown: int = 8) -> List[str]:
    if old == new:
        return [f"{title}: unchanged ({len(old)})"]
    first = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    lines = [f"{title}: CHANGED ({len(old)} -> {len(new)}), first at #{first}"]
    lines += [f"  - {line}" for line in old[first:first + shown]]
    lines += [f"  + {line}" for line in new[first:first + shown]]
    return lines


def diff_summaries(old: GoldenSummary, new: GoldenSummary) -> List[str]:
    """What changed from the committed golden (old) to the new recording, one section each."""
    lines = _list_diff("decisions", old.decisions, new.decisions)
    lines += _list_diff("intents", old.intents, new.intents)
    lines += _list_diff("task outcomes", old.tasks, new.tasks)
    if old.counters != new.counters or old.final_state != new.final_state:
        lines += [f"monitor counts: {old.counters} -> {new.counters}",
                  f"final router state: {old.final_state} -> {new.final_state}"]
    else:
        lines.append(f"monitor counts and final router state: unchanged ({new.counters})")
    lines.append(f"motor commands: {old.command_count} -> {new.command_count} samples; per joint mean/rms/max |effort|")
    for name in sorted(set(old.commands) | set(new.commands)):
        a, b = old.commands.get(name), new.commands.get(name)
        changed = "" if a is not None and b is not None and np.allclose(a, b, atol=1e-3) else "  CHANGED"
        lines.append(f"  {name:>18}: {_stats(a)} -> {_stats(b)}{changed}")
    return lines


def _stats(values) -> str:
    return "-" if values is None else "/".join(f"{v:.3f}" for v in values)


def describe(summary: GoldenSummary) -> List[str]:
    """A new golden (nothing committed to compare with)."""
    return [f"decisions: {len(summary.decisions)}", f"intents: {' > '.join(summary.intents)}",
            *[f"task: {t}" for t in summary.tasks], f"monitor counts: {summary.counters}",
            f"motor commands: {summary.command_count} samples"]
