"""`csr-llm`: run a profile's node graph, replay bags, give the running graph an order (`instruct`),
convert a narrated scenario file (`scenario convert`)."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
from pathlib import Path

from csr_llm_common.ros.dds_env import localhost_dds_env

from .graph import ProfileError, add_override, load_profile
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


def add_cpu_profile(summary_path: Path, series) -> None:
    """The processes' CPU time inside the recorded span, into the run's summary.json (`cpu`)."""
    from .process_cpu import cpu_profile
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError):
        return                      # no recorder in the profile, or it wrote nothing
    span = summary.get("wall_span_monotonic_s")
    if not span or not series:
        return
    summary["cpu"] = cpu_profile(series, span[0], span[1], summary.get("sim_seconds"))
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    cpu = summary["cpu"]
    per = cpu.get("cpu_s_per_sim_s") or cpu["cpu_s"]
    unit = "CPU s per sim s" if "cpu_s_per_sim_s" in cpu else "CPU s"
    print(f"[runner] {unit}: " + ", ".join(f"{k} {v}" for k, v in per.items())
          + f"; cores busy {cpu['cores_busy']}", flush=True)


def cmd_run(args) -> int:
    overrides = {}
    for text in args.set or []:
        add_override(overrides, text)
    profile_nodes = load_profile(args.profile).nodes
    run_dir = new_run_dir(Path(args.runs_dir))
    if any(spec.name == "recorder" for spec in profile_nodes):
        overrides.setdefault("recorder", {}).setdefault("run_dir", str(run_dir.resolve()))
    profile = load_profile(args.profile, overrides, separate_processes=args.separate_processes)
    for name in args.restart or []:
        if name not in {spec.name for spec in profile.nodes}:
            print(f"[runner] --restart {name}: no such node in profile {profile.name}", file=sys.stderr)
            return 2
        if profile.node(name).container:
            print(f"[runner] --restart {name}: it runs in {profile.node(name).container}'s process "
                  f"(add --separate-processes)", file=sys.stderr)
            return 2
        profile.node(name).restart = True
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
    add_cpu_profile(run_dir / "summary.json", runner.cpu)
    report = run_dir / "report.md"
    if report.exists():
        print(f"[runner] report: {report}", flush=True)
    return runner.exit_code


def cmd_replay(args) -> int:
    from .bag_io import BagError
    from .replay import DEFAULT_TOLERANCES, replay
    tolerances = dict(DEFAULT_TOLERANCES)
    for text in args.tolerance or []:
        joint, _, value = text.partition("=")
        tolerances[joint] = float(value)
    overrides = {}
    for text in args.set or []:
        add_override(overrides, text)
    if args.duration is not None and not args.duration > 0:
        print(f"csr-llm: error: --duration {args.duration:g}: give a positive number of bag seconds", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else new_run_dir(Path(args.runs_dir))
    if (out / "bag").exists():      # refused before any node starts (the bag writer never overwrites)
        print(f"csr-llm: error: {out / 'bag'} exists already: give --out a new folder", file=sys.stderr)
        return 2
    try:
        outcome = replay(Path(args.bag), out, profile=args.profile, rate=args.rate, lockstep=args.lockstep,
                         golden=Path(args.golden) if args.golden else None, tolerances=tolerances,
                         start_graph=not args.no_graph, overrides=overrides, check_motor=args.motor_check,
                         duration=args.duration)
    except BagError as err:
        print(f"csr-llm: error: {err}", file=sys.stderr)
        return 2
    print(outcome.report, flush=True)
    print(f"[replay] outputs recorded in {outcome.out_bag}", flush=True)
    return outcome.exit_code


def cmd_param(args) -> int:
    """Print NODE.PARAM=VALUE for each asked parameter of the profile (as `--set` takes it)."""
    import yaml
    profile = load_profile(args.profile)
    for name in args.names:
        node, _, param = name.partition(".")
        try:
            value = profile.node(node).parameters[param]
        except KeyError:
            print(f"csr-llm: error: profile {profile.name} has no {name}", file=sys.stderr)
            return 2
        text = yaml.safe_dump(value, default_flow_style=True).strip()
        print(f"{name}={text[:-4].strip() if text.endswith('...') else text}")
    return 0


def cmd_instruct(args) -> int:
    """Send an order to the graph's instruct action, print its feedback and result (docs/orders.md)."""
    from .instruct_client import send_order
    return send_order(args.order, action=args.action, timeout=args.timeout, wait=args.wait)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="csr-llm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start a profile's node graph (sim, robot, replay)")
    run.add_argument("--profile", default="sim", help="profile name in config/ or a path to a profile YAML")
    run.add_argument("--duration", type=float, default=None, help="wall-clock seconds to run (default: until Ctrl-C)")
    run.add_argument("--set", action="append", metavar="NODE.PARAM=VALUE", help="override a node parameter")
    run.add_argument("--runs-dir", default=os.environ.get("CSR_LLM_RUNS_DIR", "build/runs"))
    run.add_argument("--grace", type=float, default=30.0, help="seconds nodes get to stop before SIGTERM")
    run.add_argument("--restart", action="append", metavar="NODE",
                     help="restart this node when it crashes (with back-off; repeatable)")
    run.add_argument("--separate-processes", action="store_true",
                     help="every node in a process of its own (ignore the profile's `container:` entries)")
    run.set_defaults(func=cmd_run)
    rep = sub.add_parser("replay", help="replay a bag into the nodes under test, record and compare outputs")
    rep.add_argument("bag", help="rosbag2 folder, .db3 or .mcap")
    rep.add_argument("--golden", help="bag whose outputs the replay must match (exit 1 on mismatch)")
    rep.add_argument("--profile", default="replay", help="graph to start (default: replay)")
    rep.add_argument("--rate", type=float, default=1.0, help="playback rate factor (0 = as fast as possible)")
    rep.add_argument("--lockstep", type=float, default=None,
                     help="wait for a decision at every multiple of this many bag seconds (0 = off; "
                          "default: the profile's lockstep.period)")
    rep.add_argument("--tolerance", action="append", metavar="JOINT=EFFORT",
                     help="per-joint motor command tolerance (N m or N)")
    rep.add_argument("--out", help="output folder (default: a new build/runs/<stamp>)")
    rep.add_argument("--runs-dir", default=os.environ.get("CSR_LLM_RUNS_DIR", "build/runs"))
    rep.add_argument("--no-graph", action="store_true", help="only play the bag (the graph runs elsewhere)")
    rep.add_argument("--set", action="append", metavar="NODE.PARAM=VALUE", help="override a node parameter")
    rep.add_argument("--duration", type=float, metavar="SECONDS",
                     help="play only the bag's first SECONDS of bag time (compared where both runs recorded)")
    rep.add_argument("--no-motor-check", dest="motor_check", action="store_false",
                     help="report motor command differences without failing on them")
    rep.set_defaults(func=cmd_replay)
    par = sub.add_parser("param", help="print a profile's node parameters as NODE.PARAM=VALUE")
    par.add_argument("profile", help="profile name in config/ or a path to a profile YAML")
    par.add_argument("names", nargs="+", metavar="NODE.PARAM")
    par.set_defaults(func=cmd_param)
    ins = sub.add_parser("instruct", help="give the running graph an order (the instruct action) and follow it")
    ins.add_argument("order", help='the operator\'s words, e.g. "go to the warehouse"')
    ins.add_argument("--timeout", type=float, default=None, metavar="S",
                     help="cancel the order (the robot holds) when it has no result after S seconds")
    ins.add_argument("--action", default="instruct", help="action name (default: instruct, in the root namespace)")
    ins.add_argument("--wait", type=float, default=10.0, metavar="S", help="seconds to wait for the action server")
    ins.set_defaults(func=cmd_instruct)
    from .sim import scenario_convert
    scen = sub.add_parser("scenario", help="scenario files (docs/scenarios.md)")
    scen_sub = scen.add_subparsers(dest="scenario_command", required=True)
    conv = scen_sub.add_parser("convert", help="drop the lines said on sensed events")
    scenario_convert.add_arguments(conv)
    conv.set_defaults(func=scenario_convert.run)
    args = parser.parse_args(argv)
    # loopback only, one domain for this process and every node it starts, UDP only (no SHM files)
    localhost_dds_env()
    os.environ.setdefault("FASTDDS_BUILTIN_TRANSPORTS", "UDPv4")
    try:
        return args.func(args)
    except (ProfileError, LaunchError) as err:
        print(f"csr-llm: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
