"""Committed goldens: what each one is, where its files lie, what it tolerates (plain module, no rclpy).

A golden is a folder src/csr_llm_bringup/test/goldens/<name>/:
* golden.yaml: the recipe (scenario, the parameter overrides the recording and every replay use)
  and the `recorded:` section the bless step writes (commit, model, adapter, date, what it holds);
* tolerances.yaml: how far a replay may stray (motor commands per joint, timing), read by compare.py;
* bag/: the compact rosbag2 MCAP (golden_bag.py) the replay plays and compares against;
* scenario.yaml (optional): a scenario of its own, named in golden.yaml as `scenario.yaml`.
Replays never record a golden: a missing one is a GoldenMissing error naming the bless command.
"""
from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import yaml

GOLDENS_DIR = Path(__file__).resolve().parents[1] / "test" / "goldens"
REPO = Path(__file__).resolve().parents[3]


class GoldenMissing(RuntimeError):
    """The golden (or its bag) is not in the repository: replays never record one."""


@dataclass
class Tolerances:
    """How far a replay may stray from the golden (tolerances.yaml; defaults for what it leaves out)."""
    joints: Dict[str, float] = field(default_factory=dict)   # |motor command difference| per joint
    default_joint: float = 1.0
    motor_skew_s: float = 0.1          # a command may lag or lead by this much sim time
    decision_time_s: float = 0.001     # decisions land at the same lockstep boundary
    transition_time_s: float = 0.1     # router status transitions (sub-task, execution state)
    ttft_p50_factor: float = 10.0      # replay TTFT p50 within factor x golden p50 (+ slack)
    ttft_slack_ms: float = 2000.0

    @classmethod
    def from_mapping(cls, data: Optional[Mapping[str, Any]]) -> "Tolerances":
        data = dict(data or {})
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"tolerances: unknown keys {unknown} (known: {sorted(known)})")
        joints = {str(k): float(v) for k, v in (data.pop("joints", None) or {}).items()}
        return cls(joints=joints, **{k: float(v) for k, v in data.items()})

    def joint(self, name: str) -> float:
        return self.joints.get(name, self.default_joint)


@dataclass
class Golden:
    name: str
    folder: Path
    scenario: str                                     # a scenario name, or a file in the folder
    overrides: List[str] = field(default_factory=list)     # NODE.PARAM=VALUE, recording and replay
    covers: str = ""
    recorded: Dict[str, Any] = field(default_factory=dict)

    @property
    def bag(self) -> Path:
        return self.folder / "bag"

    @property
    def scenario_arg(self) -> str:
        """What the simulator's `scenario` parameter takes: a name, or the absolute file path."""
        local = self.folder / self.scenario
        return str(local) if local.is_file() else self.scenario

    def tolerances(self) -> Tolerances:
        path = self.folder / "tolerances.yaml"
        return Tolerances.from_mapping(yaml.safe_load(path.read_text()) if path.is_file() else None)

    def require_bag(self) -> Path:
        if not list(self.bag.glob("*.mcap")) or not (self.bag / "metadata.yaml").is_file():
            raise GoldenMissing(f"golden {self.name}: no bag in {self.bag} (replays never record one; "
                                f"record it deliberately with `make golden-bless NAME={self.name}`)")
        return self.bag

    def save(self) -> None:
        data = {"name": self.name, "covers": self.covers, "scenario": self.scenario, "overrides": self.overrides,
                "recorded": self.recorded}
        (self.folder / "golden.yaml").write_text(yaml.safe_dump(data, sort_keys=False, width=110))


def load_golden(name: str, goldens_dir: Path = GOLDENS_DIR) -> Golden:
    folder = Path(goldens_dir) / name
    spec = folder / "golden.yaml"
    if not spec.is_file():
        known = ", ".join(golden_names(goldens_dir)) or "none"
        raise GoldenMissing(f"golden {name}: no {spec} (committed goldens: {known})")
    data = yaml.safe_load(spec.read_text()) or {}
    return Golden(name=name, folder=folder, scenario=str(data["scenario"]),
                  overrides=[str(o) for o in data.get("overrides") or []], covers=str(data.get("covers", "")),
                  recorded=dict(data.get("recorded") or {}))


def golden_names(goldens_dir: Path = GOLDENS_DIR) -> List[str]:
    return sorted(p.parent.name for p in Path(goldens_dir).glob("*/golden.yaml"))


def current_commit(repo: Path = REPO) -> str:
    """The commit the tree is at, '+dirty' when tracked files differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False).stdout.strip()
    commit = git("rev-parse", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "src", "config")
    return commit + ("+dirty" if dirty else "")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()
