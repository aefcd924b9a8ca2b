"""Sensed lines held until their window closes (plain module, no rclpy).

A sensed line comes from whichever topic's message arrives first (a motor's temperature, the
router's report of the reflex it caused): two lines of one window would otherwise be chunked in
arrival order, which a replay does not reproduce. Held until the window's watermark and released
sorted by (stamp, text), the chunk stream is the same in every run, at the cost of at most one
window of latency for a sensed line (orders and notices are not held).
"""
from __future__ import annotations

from typing import List, Tuple


class SensedHold:
    def __init__(self) -> None:
        self._held: List[Tuple[float, str]] = []

    def add(self, stamp: float, text: str) -> None:
        self._held.append((stamp, text))

    def due(self, boundary: float) -> List[Tuple[float, str]]:
        """The held lines stamped before ``boundary``, sorted; the rest stay held."""
        ready = sorted(line for line in self._held if line[0] < boundary - 1e-9)
        self._held = [line for line in self._held if line[0] >= boundary - 1e-9]
        return ready

    def __len__(self) -> int:
        return len(self._held)
