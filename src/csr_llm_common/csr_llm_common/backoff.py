"""Waiting for something that is not up yet (a server at start): back-off between tries and one
log line per change of state, not one per try (plain module, no rclpy)."""
from __future__ import annotations

import time
from typing import Callable, Optional


class Backoff:
    """Delays first_s, 2 first_s, 4 first_s ... up to max_s between tries; `failed` and `succeeded`
    return the line to log, or None when the state (and its reason) did not change."""

    def __init__(self, what: str, first_s: float = 1.0, max_s: float = 30.0):
        self.what, self.first_s, self.max_s = what, max(first_s, 0.01), max(max_s, first_s)
        self.delay_s = self.first_s
        self.failures = 0
        self._reason: Optional[str] = None
        self._since: Optional[float] = None

    def failed(self, reason: str, now: Optional[float] = None) -> Optional[str]:
        now = time.monotonic() if now is None else now
        if self.failures:
            self.delay_s = min(self.delay_s * 2.0, self.max_s)
        else:
            self._since = now
        self.failures += 1
        if reason == self._reason:
            return None
        self._reason = reason
        return (f"waiting for {self.what}: {reason}; trying again with back-off "
                f"({self.first_s:g} s doubling up to {self.max_s:g} s), one line per change")

    def succeeded(self, now: Optional[float] = None) -> Optional[str]:
        now = time.monotonic() if now is None else now
        if not self.failures:
            return None
        waited = now - (self._since if self._since is not None else now)
        line = f"{self.what} answered after {waited:.1f} s ({self.failures} failed tries)"
        self.failures, self.delay_s, self._reason, self._since = 0, self.first_s, None, None
        return line

    def sleep(self, stop_requested: Callable[[], bool], slice_s: float = 0.1) -> bool:
        """Wait the current delay; False as soon as stop_requested() (the wait is abandoned)."""
        deadline = time.monotonic() + self.delay_s
        while (left := deadline - time.monotonic()) > 0:
            if stop_requested():
                return False
            time.sleep(min(slice_s, left))
        return not stop_requested()
