"""What the router reported running, by the time it reported it (plain module, no rclpy).

Under ``running_source: router_status_at_stamp`` a decision stamped T reads the router's task as
of just before T: the newest report stamped earlier than T. The router stamps its reports with the
joint state it ticked (``command_stamp: state``) and reports each change on the tick it happens, so
in a lockstepped graph every report before T was sent before any message stamped T; the task a
decision reads then depends on the sim's time alone, not on when a report happened to arrive.
"""
from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass
from typing import List, Optional

from csr_llm_common.catalogue import PausedTask


@dataclass(frozen=True)
class RunningTask:
    """The router's task state as the decision suffix shows it."""
    intent: str = ""
    interrupt_depth: int = 0
    paused: Optional[PausedTask] = None


class RunningTaskHistory:
    """Router reports by stamp (thread-safe: reports arrive on the executor, reads on the decision thread).

    Reports older than `keep_s` behind the newest are dropped; a report older than that (the
    graph's time went back: a new sim run, a replay restarted) starts the history afresh."""

    def __init__(self, keep_s: float = 30.0):
        self.keep_s = float(keep_s)
        self._stamps: List[float] = []
        self._tasks: List[RunningTask] = []
        self._lock = threading.Lock()

    def report(self, stamp: float, task: RunningTask) -> None:
        with self._lock:
            if self._stamps and stamp < self._stamps[-1] - self.keep_s:
                self._stamps, self._tasks = [], []
            at = bisect.bisect_right(self._stamps, stamp)   # equal stamps: the later report wins
            self._stamps.insert(at, stamp)
            self._tasks.insert(at, task)
            drop = bisect.bisect_left(self._stamps, self._stamps[-1] - self.keep_s)
            if drop:
                del self._stamps[:drop], self._tasks[:drop]

    def before(self, stamp: float) -> RunningTask:
        """The newest report stamped earlier than `stamp` (idle when there is none)."""
        with self._lock:
            at = bisect.bisect_left(self._stamps, stamp - 1e-9)
            return self._tasks[at - 1] if at else RunningTask()

    def latest(self) -> RunningTask:
        with self._lock:
            return self._tasks[-1] if self._tasks else RunningTask()
