"""Robot-level figures of the decision bench (plain module, no rclpy): per scenario from a run's
summary.json (robot_score.py wrote them), pooled over the scenarios, and their table rows.

Per scenario and overall: ``task_success_rate`` (goals reached by their deadlines / goals, with a
95 % Wilson interval over the goals), ``safety_violations`` (episodes of the four kinds, per kind in
``safety_by_kind``, and ``safety_worst``: the instance furthest over its limit, with its scenario
overall), ``order_to_motion_p50_s`` / ``order_to_motion_max_s`` (overall: pooled over every order;
the p50 with a 95 % bootstrap interval over the orders). Definitions: docs/benchmarks.md.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from csr_llm_common.stats import percentile, round_or_none, wilson_interval

from ..robot_score import KIND_LIMITS, goal_counts, pooled_seconds

KINDS = tuple(KIND_LIMITS)


def robot_result(summary: Mapping[str, Any]) -> Dict[str, Any]:
    """The robot-level bench keys of one run's summary.json (None where the run did not report them)."""
    reached, total = int(summary.get("goals_reached") or 0), int(summary.get("goals_total") or 0)
    if not total and summary.get("goals"):        # an older summary: goals without the counts
        reached, total = goal_counts(summary["goals"])
    safety = summary.get("safety")
    return {
        "task_success_rate": round(reached / total, 4) if total else None,
        "task_success_ci95": _wilson(reached, total),
        "task_success": summary.get("task_success"),
        "goals_reached": reached,
        "goals_total": total,
        "safety_violations": summary.get("safety_violations"),
        "safety_by_kind": None if safety is None else {k: int((safety.get(k) or {}).get("count", 0)) for k in KINDS},
        "safety_worst": summary.get("safety_worst"),
        "order_to_motion_p50_s": summary.get("order_to_motion_p50_s"),
        "order_to_motion_max_s": summary.get("order_to_motion_max_s"),
        "orders_without_motion": summary.get("orders_without_motion") or [],
        "_orders": summary.get("orders") or [],
    }


def robot_overall(ok: Sequence[Mapping[str, Any]], names: Sequence[str]) -> Dict[str, Any]:
    """Pooled over the scenarios `ok` (in the order of `names`)."""
    reached = sum(r.get("goals_reached", 0) for r in ok)
    total = sum(r.get("goals_total", 0) for r in ok)
    known = [r for r in ok if r.get("safety_violations") is not None]
    by_kind = {k: sum((r.get("safety_by_kind") or {}).get(k, 0) for r in known) for k in KINDS}
    worst: Optional[Dict[str, Any]] = None
    for name, r in zip(names, ok):
        w = r.get("safety_worst")
        if w and (worst is None or w.get("over_limit", 0) > worst.get("over_limit", 0)):
            worst = dict(w, scenario=name)
    seconds = pooled_seconds([{"orders": r.get("_orders")} for r in ok])
    with_goals = [r for r in ok if r.get("task_success") is not None]
    return {
        "task_success_rate": round(reached / total, 4) if total else None,
        "task_success_ci95": _wilson(reached, total),
        "goals_reached": reached,
        "goals_total": total,
        "scenarios_succeeded": sum(1 for r in with_goals if r["task_success"]),
        "scenarios_with_goals": len(with_goals),
        "safety_violations": sum(r["safety_violations"] for r in known) if known else None,
        "safety_by_kind": by_kind if known else None,
        "safety_worst": worst,
        "order_to_motion_p50_s": round_or_none(percentile(seconds, 50.0), 3),
        "order_to_motion_p50_ci95": median_bootstrap_ci(seconds),
        "order_to_motion_max_s": round_or_none(max(seconds) if seconds else None, 3),
        "orders": len(seconds),
        "orders_without_motion": sum(len(r.get("orders_without_motion") or []) for r in ok),
    }


def _wilson(successes: int, trials: int) -> Optional[List[float]]:
    if not trials:
        return None
    low, high = wilson_interval(successes, trials)
    return [round(low, 4), round(high, 4)]


def median_bootstrap_ci(values: Sequence[float], resamples: int = 4000, seed: int = 0) -> Optional[List[float]]:
    """95 % percentile-bootstrap interval of the median; None with fewer than two values."""
    import numpy as np
    if len(values) < 2:
        return None
    data = np.asarray(values, dtype=float)
    picks = np.random.default_rng(seed).integers(0, len(data), size=(resamples, len(data)))
    low, high = np.percentile(np.median(data[picks], axis=1), [2.5, 97.5])
    return [round(float(low), 3), round(float(high), 3)]


def cell(value: Any, spec: str = ".2f") -> str:
    """A table cell: the value formatted, "-" when there is none."""
    return "-" if value is None else format(value, spec)


def robot_table(bench: Mapping[str, Any]) -> str:
    """One row per scenario and OVERALL: goals, safety per kind and the worst instance, order to motion."""
    rows = [f"{'scenario':<22} {'goals':>7} {'task':>5} {'safety':>6} {'per kind (person/contact/motor/slip)':>37} "
            f"{'o2m p50':>7} {'o2m max':>7}  worst safety instance"]
    items = list(bench["scenarios"].items()) + [("OVERALL", bench["overall"])]
    for name, r in items:
        if "error" in r:
            continue
        kinds = r.get("safety_by_kind")
        per_kind = "-" if kinds is None else "/".join(str(kinds.get(k, 0)) for k in KINDS)
        worst = r.get("safety_worst")
        worst_text = "-" if not worst else (f"{worst['kind']} at {worst['time']:.1f} s: {worst['what']}"
                                            + (f" ({worst['scenario']})" if "scenario" in worst else ""))
        rows.append(f"{name:<22} {r.get('goals_reached', 0):>3}/{r.get('goals_total', 0):<3} "
                    f"{cell(r.get('task_success_rate'), '.0%'):>5} {cell(r.get('safety_violations'), 'd'):>6} "
                    f"{per_kind:>37} {cell(r.get('order_to_motion_p50_s'), '.2f'):>7} "
                    f"{cell(r.get('order_to_motion_max_s'), '.2f'):>7}  {worst_text}")
    return "\n".join(rows)
