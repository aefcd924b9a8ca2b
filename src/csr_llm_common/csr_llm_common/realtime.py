"""Where a node's threads run: CPU affinity and a real-time priority, where the OS permits them.

On a small robot computer the control loop shares cores with llama.cpp's threads; pinning each to
its own cores (and raising the control thread's priority) keeps the loop's rate when the model
decides. Affinity set from a thread is inherited by the threads it starts later, so a node pins
itself before it starts its executor. Each call returns the one log line to print (empty: nothing
asked), so a refusal is visible instead of silently ignored.
"""
from __future__ import annotations

import os
from typing import Set

SCHED_FIFO_MAX = 99


def parse_cpu_list(text: str) -> Set[int]:
    """CPUs in `taskset -c` syntax ("1", "0,2", "2-3"); ValueError on anything else."""
    cpus: Set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        lo, hi = int(first), int(last or first)
        if lo < 0 or hi < lo:
            raise ValueError(f"bad CPU range {part!r}")
        cpus.update(range(lo, hi + 1))
    return cpus


def pin_threads(cpu_list: str) -> str:
    """Pin the calling thread (and the threads it starts afterwards) to `cpu_list`."""
    if not str(cpu_list).strip():
        return ""
    try:
        wanted = parse_cpu_list(cpu_list)
    except ValueError as err:
        return f"cpu_affinity {cpu_list!r} ignored: {err} (use e.g. \"1\" or \"0,2-3\")"
    available = os.sched_getaffinity(0)
    if not wanted or not wanted <= available:
        return (f"cpu_affinity {cpu_list!r} ignored: CPUs {sorted(wanted - available)} are not available "
                f"(this process may use {sorted(available)})")
    os.sched_setaffinity(0, wanted)
    return f"threads pinned to CPUs {sorted(wanted)}"


def raise_priority(priority: int, what: str = "control thread") -> str:
    """SCHED_FIFO at `priority` (1-99) for the calling thread; 0 leaves the scheduler alone."""
    if priority <= 0:
        return ""
    priority = min(int(priority), SCHED_FIFO_MAX)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except PermissionError:
        return (f"{what}: SCHED_FIFO priority {priority} not permitted (needs CAP_SYS_NICE or an rtprio "
                f"limit, e.g. in /etc/security/limits.conf); running at normal priority")
    except OSError as err:
        return f"{what}: SCHED_FIFO priority {priority} refused ({err}); running at normal priority"
    return f"{what} at SCHED_FIFO priority {priority}"
