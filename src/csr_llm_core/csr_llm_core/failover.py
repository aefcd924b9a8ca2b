"""Which reasoning resources are down, and when to look at them again.

A resource that fails (refused, timed out, 5xx) is marked down with one log line per outage, not
one per failed call. A background thread probes each down resource's health endpoint with
exponential back-off (`first_retry_s`, doubling up to `max_retry_s`) and marks it up again,
logged once, when it answers. The reasoner reads the flags; it never waits on a probe. Its side
(tokenizing on the first resource that answers, taking recovered resources back, moving decisions
off a failed primary) is resource_roles.py's `ResourceRoles` (plain module, no rclpy).
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional


@dataclass
class _Outage:
    since: float
    next_probe: float
    retry_s: float
    reason: str
    probes: int = 0


class ResourceHealth:
    def __init__(self, log: logging.Logger, *, first_retry_s: float = 0.5, max_retry_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self.log = log
        self.first_retry_s = first_retry_s
        self.max_retry_s = max_retry_s
        self.clock = clock
        self._down: Dict[str, _Outage] = {}
        self._probes: Dict[str, Callable[[], bool]] = {}
        self._recovered: List[str] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.outages = 0

    def is_down(self, name: str) -> bool:
        with self._lock:
            return name in self._down

    @property
    def down(self) -> List[str]:
        with self._lock:
            return sorted(self._down)

    def mark_down(self, name: str, probe: Callable[[], bool], reason: str, then: str = "") -> bool:
        """Record a failure; True (and one log line, ending with `then`) when it starts an outage."""
        with self._lock:
            if name in self._down:
                return False
            now = self.clock()
            self._down[name] = _Outage(now, now + self.first_retry_s, self.first_retry_s, reason)
            self._probes[name] = probe
            self.outages += 1
        self.log.error("resource %s is down (%s); %sprobing it with back-off up to %g s", name, reason,
                       f"{then}; " if then else "", self.max_retry_s)
        self._ensure_thread()
        self._wake.set()
        return True

    def take_recovered(self) -> List[str]:
        """Resources that came back since the last call (each reported once)."""
        with self._lock:
            names, self._recovered = self._recovered, []
            return names

    def probe_due(self) -> None:
        """Probe every down resource whose back-off has passed (the thread's step; tests call it)."""
        with self._lock:
            now = self.clock()
            due = [(name, self._probes[name]) for name, outage in self._down.items() if outage.next_probe <= now]
        for name, probe in due:
            try:
                ok = bool(probe())
            except Exception:  # a probe that raises is a failed probe, nothing more
                ok = False
            with self._lock:
                outage = self._down.get(name)
                if outage is None:
                    continue
                outage.probes += 1
                if ok:
                    del self._down[name]
                    self._recovered.append(name)
                else:
                    outage.retry_s = min(outage.retry_s * 2, self.max_retry_s)
                    outage.next_probe = self.clock() + outage.retry_s
            if ok:
                self.log.info("resource %s is back after %.1f s (%d probes)", name, self.clock() - outage.since,
                              outage.probes)

    def _next_wait(self) -> float:
        with self._lock:
            if not self._down:
                return 1.0
            return max(0.0, min(o.next_probe for o in self._down.values()) - self.clock())

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="resource-health", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=self._next_wait())
            self._wake.clear()
            if not self._stop.is_set():
                self.probe_due()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

