"""`csr-llm`: run a profile's node graph (and, later, replay bags) without `ros2 launch`."""
from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
from pathlib import Path

from .graph import ProfileError, load_profile, parse_override
from .runner import GraphRunner, LaunchError


def new_run_dir(runs_dir: Path) -> Path:
    """build/runs/<UTC timestamp>/, with build/runs/latest pointing at it."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_dir = runs_dir / stamp
    suffix = 1
    while run_dir.exists():
        run_dir = runs_dir / f"{stamp}-{suffix}"
        suffix += 1
    run_dir.mkdir(parents=True)
    latest = runs_dir / "latest"
    if latest.is_symlink() or latest.exists():
        latest.unlink()
    latest.symlink_to(run_dir.name)
    return run_dir


def cmd_run(args) -> int:
    overrides = {}
    for text in args.set or []:
        node, param, value = parse_override(text)
        overrides.setdefault(node, {})[param] = value
    profile_nodes = load_profile(args.profile).nodes
    run_dir = new_run_dir(Path(args.runs_dir))
    if any(spec.name == "recorder" for spec in profile_nodes):
        overrides.setdefault("recorder", {}).setdefault("run_dir", str(run_dir.resolve()))
    profile = load_profile(args.profile, overrides)
    runner = GraphRunner(profile, run_dir / "params", log_dir=run_dir, grace_s=args.grace)
    signal.signal(signal.SIGINT, runner.request_stop)
    signal.signal(signal.SIGTERM, runner.request_stop)
    print(f"[runner] profile {profile.name} ({profile.path}); run folder {run_dir}", flush=True)
    try:
        runner.start()
        runner.wait(args.duration)
    finally:
        codes = runner.shutdown()
    print(f"[runner] exit codes: {codes}", flush=True)
    report = run_dir / "report.md"
    if report.exists():
        print(f"[runner] report: {report}", flush=True)
    return runner.exit_code


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="csr-llm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start a profile's node graph (sim, robot, replay)")
    run.add_argument("--profile", default="sim", help="profile name in config/ or a path to a profile YAML")
    run.add_argument("--duration", type=float, default=None, help="wall-clock seconds to run (default: until Ctrl-C)")
    run.add_argument("--set", action="append", metavar="NODE.PARAM=VALUE", help="override a node parameter")
    run.add_argument("--runs-dir", default=os.environ.get("CSR_LLM_RUNS_DIR", "build/runs"))
    run.add_argument("--grace", type=float, default=30.0, help="seconds nodes get to stop before SIGTERM")
    run.set_defaults(func=cmd_run)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ProfileError, LaunchError) as err:
        print(f"csr-llm: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
