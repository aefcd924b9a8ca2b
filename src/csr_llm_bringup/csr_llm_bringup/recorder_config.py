"""The recorder node's parameters (plain module, no rclpy): one default each, read-only."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List


@dataclass
class RecorderConfig:
    run_dir: str = ""               # "" = build/runs/<timestamp> (the runner sets it)
    storage: str = "mcap"           # rosbag2 storage plugin: mcap | sqlite3
    # topics to record (relative names resolve in the node's namespace); each is subscribed once a
    # publisher of it appears, with the publishers' reliability
    topics: List[str] = field(default_factory=lambda: ["/clock", "joint_states", "decision"])
    status_period: float = 1.0      # s (wall) between live status lines; 0 = quiet
    report: bool = True             # write report.md, plots and summary.json on exit

    def run_directory(self) -> Path:
        return Path(self.run_dir or f"build/runs/{time.strftime('%Y%m%d-%H%M%S')}").expanduser()
