"""The recorder node's parameters (plain module, no rclpy): one default each, read-only."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional


@dataclass
class RecorderConfig:
    run_dir: str = ""               # "" = build/runs/<timestamp> (the runner sets it)
    storage: str = "mcap"           # rosbag2 storage plugin: mcap | sqlite3
    # topics to record (relative names resolve in the node's namespace); each is subscribed once a
    # publisher of it appears, with the publishers' reliability
    topics: List[str] = field(default_factory=lambda: ["/clock", "joint_states", "decision"])
    status_period: float = 1.0      # s (wall) between live status lines; 0 = quiet
    report: bool = True             # write report.md, plots and summary.json on exit
    # topics kept at most rate_limit_hz (the rest of their messages are counted, neither written nor
    # analysed): on a robot the 1 kHz command streams would otherwise cost the recorder a large share
    # of a core that the reasoning node needs
    rate_limited_topics: List[str] = field(default_factory=list)
    rate_limit_hz: float = 100.0
    cpu_affinity: str = ""          # CPUs for this node's threads, taskset syntax; "" = any

    def run_directory(self) -> Path:
        return Path(self.run_dir or f"build/runs/{time.strftime('%Y%m%d-%H%M%S')}").expanduser()


class RateLimiter:
    """Keeps a message of a topic when at least 1/hz has passed since the last one kept (by the
    receive time in ns); counts what it drops per topic."""

    def __init__(self, topics: List[str], hz: float):
        if hz <= 0:
            raise ValueError(f"rate_limit_hz must be > 0, got {hz}")
        self.period_ns = int(1e9 / hz)
        self._last_kept: Dict[str, Optional[int]] = {topic: None for topic in topics}
        self.dropped = {topic: 0 for topic in topics}

    def keep(self, topic: str, now_ns: int) -> bool:
        if topic not in self._last_kept:
            return True
        last = self._last_kept[topic]
        if last is not None and 0 <= now_ns - last < self.period_ns:
            self.dropped[topic] += 1
            return False
        self._last_kept[topic] = now_ns
        return True
