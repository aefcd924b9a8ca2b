"""Load bench (`make bench-load`): the robot profile's real graph on the wall clock under a robot's load.

`csr-llm run --profile robot` starts the graph (router activated, the real model), with the recorder
and then without it (a copy of the profile without the node). This process plays the robot
(load_stream.RobotStream: 200 Hz joint states following the router's reference, IMU, odometry,
temperatures, wrench, proximity, zone) and the operator, in phases:

- plain: the stream, an operator or person event every `event_period_s`;
- burst: 500 events/s for `burst_s`, then one event (`next_event_s`: the time to its decision;
  `coalesced`: the events the aggregator folded into burst chunks);
- hostile: NaN joint states, arrays of the wrong length, a 1 MB event, a prompt-injection line,
  temperatures of -300 C; after each, one event and the time to its decision. Before each input the
  bench waits (at most `drain_timeout_s`) until the events queued so far are decided, so each
  figure is that input's; `events_queued_before` says how many were still waiting.

It prints a table and writes (`--out`)::

    {"recorder_on": {"plain": {"event_to_decision_s": {"p50", "p99", "max"}, "decisions_per_s",
                               "skipped_periodic", "loop_hz_min", "cpu": {process: share of a core},
                               "events", "undecided", "backlog_max"},
                     "burst": {"next_event_s", "decided", "coalesced"},
                     "hostile": {kind: {"next_event_s", "decided", "events_queued_before"}}},
     "recorder_off": {...}, "settings": {...}}

and a plot (`--plot`) of each event's time to decision and the reasoning node's backlog over time.
An event not decided within `decide_timeout_s` counts as not decided (`undecided`, `decided`
false, `next_event_s` null); the bench never waits longer. `skipped_periodic` is the increase of
CsrStatus.skipped_periodic over the phase (periodic decisions skipped, never queued, while the
decision thread was busy).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from rclpy.node import Node

from action_router.params import make_config
from csr_llm_common.ros.dds_env import localhost_dds_env
from csr_llm_common.ros.spin import spinning
from csr_llm_common.ros.testing import ChildOutput, wait_for

from ..process_cpu import CpuSeries, process_cpu_s
from .load_metrics import (DecisionMatcher, PlainFigures, Probe, Window, cpu_shares, format_table,
                           next_event_result, plain_result, probe_token)
from .load_robot import (EVENT_HOSTILE, PHASES, STREAMED_HOSTILE, LoadPlan, StreamMode, burst_line,
                         hostile_event_text, operator_line, profile_without, quick_plan)
from .load_stream import GraphObserver, RobotStream

RECORDER_MODES = {"on": ("recorder_on",), "off": ("recorder_off",), "both": ("recorder_on", "recorder_off")}
PROFILE = "robot"
STARTED = re.compile(r"(?:started|restarted) /(\S+) .*?pid (\d+)\)")
CPU_SAMPLE_S = 0.5
STOP_TIMEOUT_S = 90.0


class CpuSampler:
    """CPU time of the graph's processes (pids from the runner's output) and of this process."""

    def __init__(self, runner: ChildOutput):
        self.runner = runner
        self.series: Dict[str, CpuSeries] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def _pids(self) -> Dict[str, int]:
        pids = {name: int(pid) for name, pid in STARTED.findall(self.runner.text())}
        pids["bench_driver"] = os.getpid()
        return pids

    def _run(self) -> None:
        while not self._stop.wait(CPU_SAMPLE_S):
            now = time.monotonic()
            for name, pid in self._pids().items():
                self.series.setdefault(name, CpuSeries()).add(pid, now, process_cpu_s(pid))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def shares(self, window: Window) -> Dict[str, float]:
        used = {name: max(0.0, s.at(window.end) - s.at(window.start)) for name, s in self.series.items()}
        return cpu_shares(used, window.end - window.start)


@dataclass
class Bench:
    """One graph run's parts, handed to each phase."""
    plan: LoadPlan
    runner: ChildOutput
    stream: RobotStream
    observer: GraphObserver
    cpu: CpuSampler
    matcher: DecisionMatcher
    phases: List[Tuple[str, float, float]] = field(default_factory=list)
    started_at: float = field(default_factory=time.monotonic)
    _count: int = 0

    def alive(self) -> bool:
        return self.runner.process.poll() is None

    def publish_probe(self, label: str, text: Optional[str] = None) -> Probe:
        """One event the bench waits to see decided."""
        self._count += 1
        token = probe_token(self._count)
        probe = self.matcher.add_probe(label, token, time.monotonic())
        self.stream.publish_event(f"{text} {token}" if text else operator_line(self._count, token))
        return probe

    def wait_decided(self, probes: Sequence[Probe], timeout: float) -> bool:
        return wait_for(lambda: all(p.decided_at is not None for p in probes) or not self.alive(), timeout,
                        step=0.02)

    def sleep(self, seconds: float) -> None:
        wait_for(lambda: not self.alive(), seconds, step=0.05)


def run_plain(bench: Bench) -> Dict[str, Any]:
    plan, start = bench.plan, time.monotonic()
    end = start + plan.plain_s
    probes = []
    next_event = start + min(1.0, plan.event_period_s)
    while time.monotonic() < end and bench.alive():
        if time.monotonic() >= next_event:
            probes.append(bench.publish_probe("plain"))
            next_event += plan.event_period_s
        time.sleep(0.02)
    bench.phases.append(("plain", start, end))
    bench.wait_decided(probes, plan.decide_timeout_s)      # the last events, bounded
    window = Window(start, end)
    obs = bench.observer
    with obs.locked():
        figures = PlainFigures(window, probes, list(obs.decision_times), list(obs.loop_hz),
                               list(obs.skipped_periodic), list(obs.backlog), bench.cpu.shares(window))
    return plain_result(figures)


def run_burst(bench: Bench) -> Dict[str, Any]:
    plan, start = bench.plan, time.monotonic()
    period, sent = 1.0 / plan.burst_hz, 0
    while time.monotonic() < start + plan.burst_s and bench.alive():
        due = int((time.monotonic() - start) / period) + 1
        while sent < due:
            bench.stream.publish_event(burst_line(sent))
            sent += 1
        time.sleep(period)
    bench.sleep(plan.after_burst_s)                 # its coalescing window closes first
    probe = bench.publish_probe("burst")
    bench.wait_decided([probe], plan.decide_timeout_s)
    end = time.monotonic()
    bench.phases.append(("burst", start, end))
    with bench.observer.locked():
        coalesced = sum(n for t, n in bench.observer.coalesced if start <= t <= end)
    result = next_event_result(probe)
    result.update(coalesced=coalesced, events_sent=sent)
    bench.sleep(plan.settle_s)
    return result


def hostile_input(bench: Bench, kind: str) -> None:
    """Publish one hostile input: a sensor stream for `hostile_s`, or one event."""
    if kind in STREAMED_HOSTILE:
        bench.stream.mode = STREAMED_HOSTILE[kind]
        bench.sleep(bench.plan.hostile_s)
        bench.stream.mode = StreamMode.NORMAL
    elif kind in EVENT_HOSTILE:
        bench.stream.publish_event(hostile_event_text(kind))
        bench.sleep(0.2)
    else:
        raise ValueError(f"unknown hostile input {kind!r}")


def wait_drained(bench: Bench) -> int:
    """Until every event seen so far is decided (at most `drain_timeout_s`): a hostile input's
    figure then measures that input, not what an earlier phase left queued. Returns the events
    still waiting."""
    matcher = bench.matcher
    wait_for(lambda: matcher.waiting_events == 0 or not bench.alive(), bench.plan.drain_timeout_s, step=0.1)
    return matcher.waiting_events


def run_hostile(bench: Bench) -> Dict[str, Any]:
    results = {}
    for kind in bench.plan.hostile_kinds:
        if not bench.alive():
            break
        queued = wait_drained(bench)
        start = time.monotonic()
        hostile_input(bench, kind)
        probe = bench.publish_probe(f"hostile:{kind}")
        bench.wait_decided([probe], bench.plan.decide_timeout_s)
        bench.phases.append((f"hostile:{kind}", start, time.monotonic()))
        results[kind] = {**next_event_result(probe), "events_queued_before": queued}
        bench.sleep(bench.plan.settle_s)
    return results


PHASE_RUNNERS = {"plain": run_plain, "burst": run_burst, "hostile": run_hostile}


def runner_command(profile: str, runs_dir: Path, state_dir: Path, settings: Sequence[str] = ()) -> List[str]:
    return [sys.executable, "-m", "csr_llm_bringup.cli", "run", "--profile", profile, "--runs-dir", str(runs_dir),
            "--set", "action_router.autostart=true", "--set", f"reasoning.state_dir={state_dir / 'state'}",
            "--set", f"reasoning.archive_path={state_dir / 'archive.jsonl'}",
            *[arg for setting in settings for arg in ("--set", setting)]]


def start_graph(mode: str, work_dir: Path, settings: Sequence[str] = (), recorder: bool = True) -> ChildOutput:
    profile = PROFILE if recorder else \
        str(profile_without(PROFILE, "recorder", work_dir / f"{PROFILE}_without_recorder.yaml"))
    state_dir = Path(tempfile.mkdtemp(prefix=f"{mode}-", dir=work_dir))
    argv = runner_command(profile, work_dir / "runs", state_dir, settings)
    return ChildOutput(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        errors="replace", env=dict(os.environ, PYTHONUNBUFFERED="1")))


def stop_graph(runner: ChildOutput, log_path: Path) -> int:
    if runner.process.poll() is None:
        runner.process.send_signal(signal.SIGINT)
    code, text = runner.finish(timeout=STOP_TIMEOUT_S)
    log_path.write_text(text)
    return code


def graph_ready(bench: Bench) -> bool:
    """The router ticks and the reasoning node has decided once."""
    obs = bench.observer
    return wait_for(lambda: not bench.alive() or (obs.decision_times and any(hz > 0 for _, hz in obs.loop_hz)),
                    bench.plan.ready_timeout_s, step=0.2) and bench.alive()


def run_phases(bench: Bench, phases: Sequence[str]) -> Dict[str, Any]:
    result: Dict[str, Any] = {}
    if not graph_ready(bench):
        return {"error": "the graph did not start (no decision or router loop)\n" + bench.runner.text()[-2000:]}
    bench.started_at = time.monotonic()
    for phase in phases:
        print(f"[bench-load] phase {phase}", flush=True)
        result[phase] = PHASE_RUNNERS[phase](bench)
        if not bench.alive():
            result["error"] = "the graph stopped during phase " + phase
            break
    return result


def drive_graph(runner: ChildOutput, plan: LoadPlan, phases: Sequence[str]) -> Tuple[Dict[str, Any], Dict]:
    """Play the robot to the running graph through the phases: the result and its trace."""
    with spinning() as spinner:
        node = spinner.create(Node, "load_bench_driver")
        stream = RobotStream(node, make_config().joints)
        matcher = DecisionMatcher()
        bench = Bench(plan, runner, stream, GraphObserver(node, matcher, stream.follow), CpuSampler(runner), matcher)
        stream.start()
        bench.cpu.start()
        try:
            return run_phases(bench, phases), trace_of(bench)
        finally:
            stream.stop()
            bench.cpu.stop()


def run_graph(mode: str, plan: LoadPlan, phases: Sequence[str], work_dir: Path,
              settings: Sequence[str] = ()) -> Tuple[Dict[str, Any], Dict]:
    """One graph run through the phases (`mode`: recorder_on, recorder_off or a variant's name, run
    with the recorder): its result and its trace."""
    print(f"[bench-load] {mode}: starting the {PROFILE} graph", flush=True)
    runner = start_graph(mode, work_dir, settings, recorder=mode != "recorder_off")
    try:
        result, trace = drive_graph(runner, plan, phases)
    finally:
        code = stop_graph(runner, work_dir / f"{mode}.log")
    result["exit_code"] = code
    return result, trace


def trace_of(bench: Bench) -> Dict[str, Any]:
    t0 = bench.started_at
    with bench.observer.locked():
        backlog = [(t - t0, v) for t, v in bench.observer.backlog]
        waiting = [(t - t0, v) for t, v in bench.observer.waiting_events]
    return {"phases": [(name, a - t0, b - t0) for name, a, b in bench.phases],
            "latency": [(p.published_at - t0, p.latency_s, p.label) for p in bench.matcher.probes],
            "backlog": backlog, "waiting_events": waiting}


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated, of {', '.join(PHASES)}")
    parser.add_argument("--plain-s", type=float, default=None, help="plain phase length (default 60; --quick 20)")
    parser.add_argument("--recorder", choices=sorted(RECORDER_MODES), default="both")
    parser.add_argument("--out", default="build/bench/load.json")
    parser.add_argument("--plot", default="build/bench/load.png", help="'' for no plot")
    parser.add_argument("--quick", action="store_true", help="a smoke test: short phases, three hostile inputs")
    parser.add_argument("--work-dir", default="build/bench/load_runs", help="graph runs, their logs and state")
    parser.add_argument("--set", action="append", default=[], metavar="NODE.PARAM=VALUE",
                        help="a parameter override for every graph run (csr-llm run --set)")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:NODE.PARAM=VALUE[;...]",
                        help="one more graph run, recorder on, with these overrides too (after the recorder "
                             "runs, in the same bench run, so they compare side by side)")
    args = parser.parse_args(argv)
    try:
        args.variant = [parse_variant(text) for text in args.variant]
    except ValueError as err:
        parser.error(f"--variant: {err}")
    args.phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = [p for p in args.phases if p not in PHASES]
    if unknown:
        parser.error(f"--phases: unknown {', '.join(unknown)} (known: {', '.join(PHASES)})")
    return args


def parse_variant(text: str) -> Tuple[str, List[str]]:
    """'pinned:action_router.cpu_affinity="1";reasoning.cpu_affinity="0"' -> (name, [overrides])."""
    name, _, overrides = text.partition(":")
    settings = [item.strip() for item in overrides.split(";") if item.strip()]
    if not name.strip() or not settings or any("=" not in item for item in settings):
        raise ValueError(f"{text!r}: expected NAME:NODE.PARAM=VALUE[;NODE.PARAM=VALUE...]")
    if name.strip() in RECORDER_MODES["both"] or name.strip() == "settings":
        raise ValueError(f"{name!r} is a reserved name")
    return name.strip(), settings


def plan_of(args: argparse.Namespace) -> LoadPlan:
    plan = quick_plan() if args.quick else LoadPlan()
    return plan if args.plain_s is None else replace(plan, plain_s=args.plain_s)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    localhost_dds_env()                     # this process and the graph on one private loopback domain
    os.environ.setdefault("FASTDDS_BUILTIN_TRANSPORTS", "UDPv4")
    plan, work_dir = plan_of(args), Path(args.work_dir).resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    results: Dict[str, Any] = {}
    traces: Dict[str, Any] = {}
    runs = [(mode, list(args.set)) for mode in RECORDER_MODES[args.recorder]]
    runs += [(name, list(args.set) + extra) for name, extra in args.variant]
    for mode, settings in runs:
        results[mode], traces[mode] = run_graph(mode, plan, args.phases, work_dir, settings)
    results["settings"] = {"profile": PROFILE, "quick": args.quick, "phases": args.phases, "plan": asdict(plan),
                           "overrides": list(args.set), "variants": dict(args.variant),
                           "cpus": os.cpu_count(), "logs": str(work_dir)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(format_table({m: r for m, r in results.items() if m in traces}), flush=True)
    print(f"[bench-load] wrote {out}", flush=True)
    if args.plot:
        from .load_plot import write_plot
        write_plot(traces, Path(args.plot), plan.decide_timeout_s)
        print(f"[bench-load] plot {args.plot}", flush=True)
    return 0 if all("error" not in results[m] for m in traces) else 1


if __name__ == "__main__":
    sys.exit(main())
