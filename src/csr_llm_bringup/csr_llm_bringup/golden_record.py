"""Record a golden from the current code: a lockstepped sim run, compacted (plain module, no rclpy).

The sim profile runs the golden's scenario with its overrides (`csr-llm run`, a child process) and
records the inputs, the outputs and the head camera; golden_bag.compact turns that into the
golden's bag. A run with a lockstep timeout is refused: its decisions depend on the machine's load.
"""
from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List

from .golden import REPO, Golden
from .golden_bag import CAMERA_TOPIC, INPUTS, MOTOR_TOPIC, OUTPUTS, ROUTER_STATUS_TOPIC

RAW_TOPICS = [t.lstrip("/") for t in (*INPUTS, *OUTPUTS, MOTOR_TOPIC, ROUTER_STATUS_TOPIC, CAMERA_TOPIC)]
# wall s a lockstep boundary may wait for its decision while recording: the first one waits for the
# reasoning node's head prefill, minutes on a loaded machine; a timeout would make the run unreplayable
RECORD_LOCKSTEP_TIMEOUT = 900.0
TIMEOUT_MARKERS = ("lockstep: no decision", "no motor_command for the state", "within 30.0 s: continuing")


class RecordingError(RuntimeError):
    """The sim run failed or is not deterministic enough to be a golden."""


@dataclass
class Recording:
    raw_bag: Path
    run_dir: Path
    wall_s: float


def record_command(golden: Golden, runs_dir: Path) -> List[str]:
    topics = "[" + ", ".join(RAW_TOPICS) + "]"
    command = [sys.executable, "-m", "csr_llm_bringup.cli", "run", "--profile", "sim", "--runs-dir", str(runs_dir),
               "--duration", "1800", "--set", f"simulator.scenario={golden.scenario_arg}",
               "--set", "simulator.exit_at_end=true", "--set", f"lockstep.timeout={RECORD_LOCKSTEP_TIMEOUT:g}",
               "--set", f"recorder.topics={topics}", "--set", "recorder.status_period=10.0"]
    for override in golden.overrides:
        command += ["--set", override]
    return command


def record_run(golden: Golden, work_dir: Path, log: Callable[[str], None] = print) -> Recording:
    """Run the golden's scenario on the sim profile; the raw recording (not yet compacted)."""
    runs_dir = Path(work_dir) / "runs"
    command = record_command(golden, runs_dir)
    log(f"[golden] recording {golden.name}: {' '.join(command[1:])}")
    start = time.monotonic()
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    run_dir = (runs_dir / "latest").resolve()
    if result.returncode != 0 or not list((run_dir / "bag").glob("*.mcap")):
        raise RecordingError(f"golden {golden.name}: the sim run failed (exit {result.returncode}):\n"
                             + result.stdout[-3000:] + result.stderr[-2000:])
    logs = "\n".join(p.read_text(errors="replace") for p in run_dir.glob("*.log"))
    timeouts = [line for line in logs.splitlines() if any(m in line for m in TIMEOUT_MARKERS)]
    if timeouts:
        raise RecordingError(f"golden {golden.name}: the run had lockstep timeouts, it is not reproducible:\n"
                             + "\n".join(timeouts[:5]))
    log(f"[golden] recorded {golden.name} in {wall:.0f} s wall: {run_dir}")
    return Recording(run_dir / "bag", run_dir, wall)
