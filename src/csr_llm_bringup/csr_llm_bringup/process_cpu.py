"""CPU time of the graph's processes over a run (plain module, Linux /proc).

The runner samples each child's user + system time (all its threads) while the run goes on; the
run report's wall span (CLOCK_MONOTONIC, the same clock in every process) then selects the part of
each series inside the simulated run, so start-up (model load, head evaluation) is left out. Per
sim second, the figures say what a real-time factor of 1 would ask of the machine's cores.
"""
from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_s(pid: int) -> Optional[float]:
    """User + system seconds of process `pid` so far (None when it is gone or /proc is missing)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS      # utime, stime (fields 14 and 15)


@dataclass
class CpuSeries:
    """(monotonic time, cumulative CPU s) samples of one node, across restarts."""
    samples: List[Tuple[float, float]] = field(default_factory=list)
    _pid: Optional[int] = None
    _offset: float = 0.0            # CPU of earlier processes of this node (restarts)
    _last: float = 0.0

    def add(self, pid: int, now: float, cpu_s: Optional[float]) -> None:
        if cpu_s is None:
            return
        if pid != self._pid:
            if self._pid is not None:
                self._offset = self._last
            self._pid = pid
        self._last = self._offset + cpu_s
        self.samples.append((now, self._last))

    def at(self, t: float) -> float:
        """Cumulative CPU at time t, linear between samples, clamped at the ends."""
        if not self.samples:
            return 0.0
        times = [s[0] for s in self.samples]
        i = bisect.bisect_left(times, t)
        if i == 0:
            return self.samples[0][1]
        if i == len(self.samples):
            return self.samples[-1][1]
        (t0, c0), (t1, c1) = self.samples[i - 1], self.samples[i]
        return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1


def cpu_profile(series: Dict[str, CpuSeries], wall_start: float, wall_end: float,
                sim_seconds: Optional[float]) -> Dict[str, object]:
    """CPU seconds per node between two monotonic times, per sim second and in all; the cores the
    graph kept busy on average."""
    used = {name: max(0.0, s.at(wall_end) - s.at(wall_start)) for name, s in series.items()}
    ranked = sorted(used.items(), key=lambda x: -x[1])
    total = sum(used.values())
    wall = wall_end - wall_start
    out: Dict[str, object] = {"cpu_s": {name: round(v, 2) for name, v in ranked},
                              "cpu_s_total": round(total, 2),
                              "cores_busy": round(total / wall, 2) if wall > 0 else None}
    if sim_seconds:
        out["cpu_s_per_sim_s"] = {name: round(v / sim_seconds, 3) for name, v in ranked}
        out["cpu_s_per_sim_s_total"] = round(total / sim_seconds, 3)
    return out
