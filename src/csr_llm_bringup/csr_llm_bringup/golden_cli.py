"""`python -m csr_llm_bringup.golden_cli`: list, replay and bless the committed goldens (plain module, no rclpy).

    replay [NAME ...]   replay each committed golden (all by default) and compare (exit 1 on a mismatch);
                        never records: a missing golden is an error naming the bless command
    bless NAME          record the golden again from the current code (lockstepped sim profile), replay
                        its inputs once for the reference outputs, check that it replays identically
                        (--replays, default 2), print what changed against the committed one, and write
                        it into the golden's folder (review, then commit)
    list                the goldens, what each covers, their size and recording

Each replay and each recording is a `csr-llm` child process (one ROS graph per process).
"""
from __future__ import annotations

import argparse
import datetime
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence


from .compare import read_outputs
from .golden import REPO, Golden, GoldenMissing, current_commit, file_sha256, golden_names, load_golden
from .golden_bag import bag_size, compact
from .golden_record import Recording, RecordingError, record_run
from .golden_summary import describe, diff_summaries, summarize

WORK_DIR = REPO / "build" / "goldens"
# wall s a replay's lockstep boundary waits for its decision: the first waits for the reasoning node's
# head prefill (a minute on a loaded machine); a timeout there would make the replay differ
REPLAY_LOCKSTEP_TIMEOUT = 300.0


@dataclass
class ReplayRun:
    name: str
    exit_code: int
    wall_s: float
    out_dir: Path
    output: str

    @property
    def matched(self) -> bool:
        return self.exit_code == 0


def replay_command(golden: Golden, out_dir: Path, extra: Sequence[str] = (), bag: Optional[Path] = None,
                   against: Optional[Path] = None, duration: Optional[float] = None,
                   compare: bool = True) -> List[str]:
    """`csr-llm replay` of the golden's bag (or `bag`) against its folder (or `against`; nothing with
    `compare` false); `extra`: more NODE.PARAM=VALUE overrides; `duration`: only the bag's first seconds."""
    command = [sys.executable, "-m", "csr_llm_bringup.cli", "replay", str(bag or golden.require_bag()),
               "--out", str(out_dir), "--set", f"lockstep.timeout={REPLAY_LOCKSTEP_TIMEOUT:g}"]
    if compare:
        command += ["--golden", str(against or golden.folder)]
    for override in [*golden.overrides, *extra]:
        command += ["--set", override]
    return command + ([] if duration is None else ["--duration", f"{duration:g}"])


def run_replay(golden: Golden, out_dir: Path, extra: Sequence[str] = (), bag: Optional[Path] = None,
               against: Optional[Path] = None, duration: Optional[float] = None, timeout: float = 900.0,
               env: Optional[dict] = None, cwd: Path = REPO, compare: bool = True) -> ReplayRun:
    command = replay_command(golden, out_dir, extra, bag, against, duration, compare)
    start = time.monotonic()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False, env=env)
    return ReplayRun(golden.name, result.returncode, time.monotonic() - start, out_dir,
                     result.stdout + result.stderr)


def _stamp() -> str:
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def cmd_replay(args, log: Callable[[str], None] = print) -> int:
    names = args.names or golden_names()
    failed = []
    for name in names:
        golden = load_golden(name)
        golden.require_bag()
        out_dir = Path(args.out) / name if args.out else WORK_DIR / name / f"replay-{_stamp()}"
        run = run_replay(golden, out_dir, args.set or [])
        report = (out_dir / "compare.txt").read_text() if (out_dir / "compare.txt").is_file() else run.output[-4000:]
        log(f"[golden] {name}: {'MATCH' if run.matched else 'MISMATCH'} in {run.wall_s:.0f} s wall ({out_dir})")
        if not run.matched or args.verbose:
            log(report)
        if not run.matched:
            failed.append(name)
    if failed:
        log(f"[golden] mismatch: {', '.join(failed)}")
    return 1 if failed else 0


def _model_identity() -> dict:
    from csr_llm_core.model import DEFAULT_MODEL_NAME, DEFAULT_MODEL_SHA256
    adapter = REPO / "src" / "csr_llm_core" / "csr_llm_core" / "data" / "intent_adapter_gemma3_270m.npz"
    return {"model": DEFAULT_MODEL_NAME, "model_sha256": DEFAULT_MODEL_SHA256,
            "intent_adapter": adapter.name, "intent_adapter_sha256": file_sha256(adapter) if adapter.is_file() else ""}


def _reference_replay(golden: Golden, recording: Recording, work: Path, log: Callable[[str], None]
                      ) -> Optional[Path]:
    """Replay the compacted inputs once: the outputs every later replay must give (None: it failed)."""
    compact(recording.raw_bag, work / "inputs")
    reference = run_replay(golden, work / "reference", bag=work / "inputs", compare=False)
    clean = re.search(r"decision lockstep waits \d+, timeouts 0;", reference.output) and \
        "control lockstep timeouts 0; decision handover timeouts 0" in reference.output
    log(f"[golden] reference replay in {reference.wall_s:.0f} s wall")
    if not reference.matched or not clean:
        log(reference.output[-6000:])
        log(f"[golden] {golden.name}: the reference replay failed or timed out in lockstep; nothing written")
        return None
    return work / "reference" / "bag"


def bless(golden: Golden, recording: Recording, replays: int, log: Callable[[str], None] = print,
          reference: Optional[Path] = None) -> int:
    """Compact, check the replays, show the change, install into the golden's folder. `reference`:
    a replay of this recording's inputs whose outputs to keep (default: replay them now)."""
    work = WORK_DIR / golden.name / f"bless-{_stamp()}"
    candidate = work / "candidate"
    candidate.mkdir(parents=True)
    reference = reference or _reference_replay(golden, recording, work, log)
    if reference is None:
        return 1
    kept = compact(recording.raw_bag, candidate / "bag", outputs_from=reference)
    log(f"[golden] compacted to {bag_size(candidate / 'bag') / 1e6:.2f} MB: "
        + ", ".join(f"{t} {n}" for t, n in sorted(kept.kept.items())))
    shutil.copy(golden.folder / "golden.yaml", candidate / "golden.yaml")
    if (golden.folder / "tolerances.yaml").is_file():
        shutil.copy(golden.folder / "tolerances.yaml", candidate / "tolerances.yaml")
    walls = []
    for i in range(replays):
        run = run_replay(golden, work / f"replay{i}", bag=candidate / "bag", against=candidate)
        walls.append(round(run.wall_s, 1))
        log(f"[golden] check replay {i + 1}/{replays}: {'MATCH' if run.matched else 'MISMATCH'} in {run.wall_s:.0f} s")
        if not run.matched:
            log(run.output[-6000:])
            log(f"[golden] {golden.name}: the new recording does not replay identically; nothing written")
            return 1
    new = summarize(read_outputs(candidate / "bag"))
    if list(golden.bag.glob("*.mcap")):
        log(f"[golden] {golden.name}: changes against the committed golden "
            f"(recorded at {golden.recorded.get('commit', '?')}):")
        for line in diff_summaries(summarize(read_outputs(golden.bag)), new):
            log(f"  {line}")
    else:
        log(f"[golden] {golden.name}: new golden")
        for line in describe(new):
            log(f"  {line}")
    if golden.bag.exists():
        shutil.rmtree(golden.bag)
    shutil.copytree(candidate / "bag", golden.bag)
    golden.recorded = {"commit": current_commit(), **_model_identity(),
                       "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                       "profile": "sim (lockstepped)",
                       **({"record_wall_s": round(recording.wall_s, 1)} if recording.wall_s else {}),
                       "check_replays_wall_s": walls, "bag_bytes": bag_size(golden.bag), **new.as_dict()}
    golden.save()
    log(f"[golden] wrote {golden.folder} ({bag_size(golden.bag) / 1e6:.2f} MB): review `git diff`, then commit")
    return 0


def cmd_bless(args, log: Callable[[str], None] = print) -> int:
    golden = load_golden(args.name)
    try:
        if args.raw:
            raw = Path(args.raw)
            recording = Recording(raw / "bag", raw, 0.0)
        else:
            recording = record_run(golden, WORK_DIR / golden.name, log)
    except RecordingError as err:
        log(f"[golden] {err}")
        return 1
    return bless(golden, recording, args.replays, log, Path(args.reference) if args.reference else None)


def cmd_list(args, log: Callable[[str], None] = print) -> int:
    for name in golden_names():
        golden = load_golden(name)
        size = bag_size(golden.bag) / 1e6 if golden.bag.exists() else 0.0
        rec = golden.recorded
        log(f"{name}: {golden.covers}\n  scenario {golden.scenario}, {size:.2f} MB, recorded at "
            f"{rec.get('commit', '(not recorded)')} with {rec.get('model', '?')}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="golden_cli", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("replay", help="replay committed goldens and compare")
    rep.add_argument("names", nargs="*", help="goldens to replay (default: all)")
    rep.add_argument("--set", action="append", metavar="NODE.PARAM=VALUE", help="override a node parameter")
    rep.add_argument("--out", help="output folder (one subfolder per golden)")
    rep.add_argument("--verbose", action="store_true", help="print the comparison of matching replays too")
    rep.set_defaults(func=cmd_replay)
    bl = sub.add_parser("bless", help="record a golden again from the current code and write it")
    bl.add_argument("name")
    bl.add_argument("--replays", type=int, default=2, help="replays that must match before it is written")
    bl.add_argument("--raw", help="use this sim run folder (its bag/) instead of recording")
    bl.add_argument("--reference", help="with --raw: the bag of a replay of its inputs whose outputs to keep")
    bl.set_defaults(func=cmd_bless)
    sub.add_parser("list", help="the goldens").set_defaults(func=cmd_list)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except GoldenMissing as err:
        print(f"golden: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["main", "run_replay", "replay_command", "ReplayRun", "bless"]
