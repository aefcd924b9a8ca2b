"""The load bench's plot (plain module, no rclpy): per graph run, each event's time to decision and
the reasoning node's chunk backlog and the events waiting for a decision over the run's wall time, the phases shaded."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

PHASE_COLOURS = {"plain": "#dde8f5", "burst": "#f8dcc8", "hostile": "#f3d4dc"}


def _shade(axis, phases) -> None:
    for name, start, end in phases:
        axis.axvspan(start, end, color=PHASE_COLOURS.get(name.split(":")[0], "#eeeeee"), lw=0)


def _latency(axis, trace: Mapping[str, Any], timeout_s: float) -> None:
    decided = [(t, s) for t, s, _ in trace["latency"] if s is not None]
    missed = [t for t, s, _ in trace["latency"] if s is None]
    axis.plot([t for t, _ in decided], [s for _, s in decided], "o", ms=4, color="#1f5fa8", label="decided")
    if missed:
        axis.plot(missed, [timeout_s] * len(missed), "x", ms=7, color="#c0392b",
                  label=f"not decided within {timeout_s:g} s")
    axis.set_ylabel("event -> decision [s]")
    axis.legend(loc="upper left", fontsize=7)


def write_plot(traces: Mapping[str, Mapping[str, Any]], path: Path, timeout_s: float) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    columns = max(1, len(traces))
    fig, axes = plt.subplots(2, columns, figsize=(6.5 * columns, 6), sharex="col", squeeze=False)
    for col, (mode, trace) in enumerate(traces.items()):
        top, bottom = axes[0][col], axes[1][col]
        for axis in (top, bottom):
            _shade(axis, trace["phases"])
        _latency(top, trace, timeout_s)
        top.set_title(mode.replace("_", " "))
        bottom.plot([t for t, _ in trace["backlog"]], [v for _, v in trace["backlog"]], color="#444444", lw=1,
                    label="chunks not yet appended (csr_status)")
        waiting = trace.get("waiting_events", [])
        bottom.step([t for t, _ in waiting], [v for _, v in waiting], where="post", color="#c0392b", lw=1,
                    label="events not yet decided")
        bottom.set_ylabel("backlog")
        bottom.legend(loc="upper left", fontsize=7)
        bottom.set_xlabel("wall time since the graph decided first [s]")
    fig.suptitle("robot profile under load: plain (blue), burst (orange), hostile (red)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
