"""What a tick says besides its command: decision requests, sounds, log lines (plain module, no rclpy)."""
from __future__ import annotations

from typing import Callable, List


class TickOutbox:
    """The decision requests and sounds raised this tick (they go out with its command), and the
    info log. ``clear`` starts a tick."""

    def __init__(self, info: Callable[[str], None]):
        self.info = info
        self.requests: List[str] = []
        self.sounds: List[str] = []

    def clear(self) -> None:
        self.requests = []
        self.sounds = []

    def request(self, text: str) -> None:
        """Ask the reasoning node for a new decision."""
        self.requests.append(text)
