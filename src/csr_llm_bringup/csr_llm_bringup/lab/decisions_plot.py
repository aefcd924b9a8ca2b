"""decisions.png of the decision bench (plain module, no rclpy): four panels, one bar per scenario
and OVERALL: decision accuracy (reasoning windows, every window as a dot) with its 95 % interval
and the chance level; task success rate (goals by their deadlines) with its Wilson interval; the
safety violations per kind (stacked); order to motion p50 with the max as a tick."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .decisions_robot import KINDS

KIND_COLOURS = {"person_speed": "tab:red", "contact_force": "tab:orange", "motor_overload": "tab:brown",
                "slip_speed": "tab:cyan"}


def _items(bench: Dict[str, Any]) -> List[Tuple[str, Dict[str, Any]]]:
    return [(n, r) for n, r in bench["scenarios"].items() if "error" not in r] + [("OVERALL", bench["overall"])]


def _interval_bars(ax: Any, xs: List[int], values: List[float], intervals: List[Optional[List[float]]],
                   colours: List[str], label: str) -> None:
    ax.bar(xs, values, color=colours, alpha=0.8)
    lows = [v - (c[0] if c else v) for v, c in zip(values, intervals)]
    highs = [(c[1] if c else v) - v for v, c in zip(values, intervals)]
    ax.errorbar(xs, values, yerr=[lows, highs], fmt="none", ecolor="k", capsize=3, lw=1, label=label)


def _accuracy_panel(ax: Any, bench: Dict[str, Any], n_intents: Optional[int]) -> None:
    items = _items(bench)
    xs = list(range(len(items)))
    acc = [r.get("decision_accuracy") or 0.0 for _, r in items]
    ci: List[Optional[List[float]]] = [r.get("accuracy_ci95") or [0.0, 1.0] for _, r in items]
    overall_ci = bench["overall"].get("accuracy_ci95_scenarios")   # its decisions are not independent
    if overall_ci:
        ci[-1] = overall_ci
    colours = ["tab:blue"] * (len(items) - 1) + ["tab:purple"]
    _interval_bars(ax, xs, acc, ci, colours,
                   "95 % Wilson interval" + ("; OVERALL: bootstrap over scenarios" if overall_ci else ""))
    every = [(x, r.get("decision_accuracy_all")) for x, (_, r) in zip(xs, items)
             if r.get("decision_accuracy_all") is not None]
    if every:
        ax.scatter([e[0] for e in every], [e[1] for e in every], marker="o", s=14, color="tab:gray", zorder=3,
                   label="every window (decision_accuracy_all)")
    chance = [(x, r.get("chance_accuracy")) for x, (_, r) in zip(xs, items) if r.get("chance_accuracy") is not None]
    if chance:
        ax.scatter([c[0] for c in chance], [c[1] for c in chance], marker="_", s=300, color="k", zorder=3,
                   label="chance (uniformly random decision)")
    if n_intents:
        ax.axhline(1.0 / n_intents, color="tab:red", ls="--", lw=1, label=f"1/{n_intents} intents")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("decision accuracy\n(reasoning windows)")
    ax.legend(fontsize=6)


def _task_panel(ax: Any, bench: Dict[str, Any]) -> None:
    items = _items(bench)
    xs = list(range(len(items)))
    rates = [r.get("task_success_rate") or 0.0 for _, r in items]
    colours = ["tab:green" if r.get("task_success_rate") is not None else "white" for _, r in items]
    _interval_bars(ax, xs, rates, [r.get("task_success_ci95") for _, r in items], colours,
                   "95 % Wilson interval over the goals")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("task success rate\n(goals by deadline)")
    ax.legend(fontsize=6)


def _safety_panel(ax: Any, bench: Dict[str, Any]) -> None:
    items = _items(bench)
    xs = list(range(len(items)))
    bottom = [0.0] * len(items)
    for kind in KINDS:
        counts = [float((r.get("safety_by_kind") or {}).get(kind, 0)) for _, r in items]
        ax.bar(xs, counts, bottom=bottom, color=KIND_COLOURS[kind], label=kind)
        bottom = [b + c for b, c in zip(bottom, counts)]
    ax.set_ylabel("safety violations\n(episodes)")
    ax.legend(fontsize=6, ncol=4)


def _motion_panel(ax: Any, bench: Dict[str, Any]) -> None:
    items = _items(bench)
    xs = list(range(len(items)))
    p50 = [r.get("order_to_motion_p50_s") or 0.0 for _, r in items]
    ax.bar(xs, p50, color="tab:olive", alpha=0.8, label="p50")
    top = [(x, r.get("order_to_motion_max_s")) for x, (_, r) in zip(xs, items)
           if r.get("order_to_motion_max_s") is not None]
    if top:
        ax.scatter([t[0] for t in top], [t[1] for t in top], marker="_", s=300, color="k", zorder=3, label="max")
    ax.set_ylabel("order to motion [s]")
    ax.legend(fontsize=6)


def plot(bench: Dict[str, Any], path: Path, n_intents: Optional[int] = None) -> Path:
    """decisions.png (module docstring)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    items = _items(bench)
    fig, axes = plt.subplots(4, 1, figsize=(max(7.0, 0.6 * len(items) + 2), 11.0), sharex=True)
    _accuracy_panel(axes[0], bench, n_intents)
    _task_panel(axes[1], bench)
    _safety_panel(axes[2], bench)
    _motion_panel(axes[3], bench)
    axes[0].set_title("Decisions and what the robot did, per scenario", fontsize=10)
    axes[-1].set_xticks(list(range(len(items))))
    axes[-1].set_xticklabels([n for n, _ in items], rotation=60, ha="right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
