"""Router latency over DDS for bench-router: a DDS echo floor and the router node, one layout.

Each target runs in its own process with the router's executor (single-threaded rclpy); this
process publishes stamped ``joint_states`` at ~1 kHz from a thread and subscribes ``motor_command``
(reliable, depth 100, as the router publishes it). Latency of a stamp = the DDS reception time of
the first command carrying it (``MessageInfo.received_timestamp``, taken by the middleware's own
thread, so this process's executor and GIL do not count) minus the stamp (the wall clock just
before the publish). Targets:

* ``echo``: ``python -m action_router.lab.bench_dds --echo``: a node that only re-publishes each joint
  state's stamp as a MotorCommand, with the router's QoS (joint_states best effort depth 1,
  motor_command reliable depth 10): two DDS hops plus one rclpy dispatch, the floor of any node.
* the router node (``command_stamp: state``) as configured (``tick_source: state_or_timer``: a tick
  on each joint state, the timer only filling gaps in the state stream), and with ``tick_source:
  timer`` (the 1 kHz timer alone: a state waits for the next tick, up to one period). The state
  stamp only labels the commands: the lockstep's draining of other readers before a tick runs
  under ``tick_source: joint_states`` alone. What still differs from the robot profile
  (``command_stamp: now``): the task key is updated after a tick's command on a 30 Hz grid of state
  time instead of by the key timer.

The loop period is measured from the commands' source timestamps (the router's publish time of
each tick): period p50, its standard deviation (the jitter), p99/p99.9/max and the ticks late by
more than half a period.
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from csr_llm_common.stats import Z95


def quantile_ci(sorted_values: np.ndarray, q: float) -> List[float]:
    """95 % confidence interval of the q-quantile from order statistics (distribution-free)."""
    n = sorted_values.size
    half = Z95 * math.sqrt(n * q * (1.0 - q))
    lo = max(int(math.floor(n * q - half)), 0)
    hi = min(int(math.ceil(n * q + half)), n - 1)
    return [float(sorted_values[lo]), float(sorted_values[hi])]


def summarise(values_us: np.ndarray) -> dict:
    v = np.sort(values_us)
    if v.size == 0:
        return {"p50": math.nan, "p99": math.nan, "p999": math.nan, "max": math.nan, "mean": math.nan}
    return {"p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)),
            "p999": float(np.percentile(v, 99.9)), "max": float(v[-1]), "mean": float(v.mean()),
            "p99_ci95": quantile_ci(v, 0.99)}


def period_stats(d: np.ndarray, nominal_s: float) -> dict:
    """Statistics of the intervals between successive command publish times (microseconds)."""
    if d.size == 0:
        return {}
    nominal_us = nominal_s * 1e6
    return {"p50": float(np.percentile(d, 50)), "std": float(d.std()), "p99": float(np.percentile(d, 99)),
            "p999": float(np.percentile(d, 99.9)), "max": float(d.max()),
            "late_ticks": int((d > 1.5 * nominal_us).sum()), "intervals": int(d.size)}


def router_command(extra: Optional[List[str]] = None) -> List[str]:
    # no parameter file: the node's defaults and this workspace's config/ files are what is measured
    cmd = [sys.executable, "-m", "action_router.router_node", "--ros-args",
           "-p", "autostart:=true", "-p", "command_stamp:=state", "-r", "__node:=router_bench"]
    for item in extra or []:
        cmd += ["-p", item]
    return cmd


def echo_command() -> List[str]:
    return [sys.executable, "-m", "action_router.lab.bench_dds", "--echo", "--ros-args", "-r", "__node:=stamp_echo"]


class CommandRecorder:
    """Stamp, reception and source time of each motor command (called on the middleware's thread):
    the first 100 as proof of life, then all of them while ``recording`` is set."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.stamps = np.zeros(capacity, dtype=np.int64)
        self.received = np.zeros(capacity, dtype=np.int64)
        self.sources = np.zeros(capacity, dtype=np.int64)
        self.count = 0
        self.recording = threading.Event()

    def on_command(self, msg, info) -> None:
        i = self.count
        if i < self.capacity and (self.recording.is_set() or i < 100):
            self.stamps[i] = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
            self.received[i] = info["received_timestamp"]
            self.sources[i] = info["source_timestamp"]
            self.count = i + 1

    def figures(self, n: int) -> Dict[str, np.ndarray]:
        """Of the first ``n`` commands: latency and publish delay per stamp, command intervals (us)."""
        st, rc, src = self.stamps[:n], self.received[:n], self.sources[:n]
        _, first = np.unique(st, return_index=True)          # the first command carrying each stamp
        lat = (rc[first] - st[first]) / 1000.0
        keep = st[first] > 0                                 # a command stamped zero carries no state
        return {
            "latency": lat[keep],
            "publish": ((src[first] - st[first]) / 1000.0)[keep],    # stamp -> the target's publish
            "intervals": np.diff(np.sort(src)) / 1000.0,
        }


class StatePublisher:
    """Publishes ``msg`` stamped with the wall clock at ``rate_hz`` from its own thread (the robot's
    sensor driver), pinned to ``cpus`` when given."""

    def __init__(self, publisher, msg, rate_hz: float, cpus: str = ""):
        self._publisher = publisher
        self._msg = msg
        self._period = 1.0 / rate_hz
        self._cpus = cpus
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="joint-state-publisher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        from csr_llm_common.realtime import pin_threads
        if self._cpus:
            pin_threads(self._cpus)        # this thread only (it starts none)
        msg = self._msg
        nxt = time.monotonic()
        while not self._stop.is_set():
            ns = time.time_ns()
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(ns, 1_000_000_000)
            self._publisher.publish(msg)
            self.sent += 1
            nxt += self._period
            d = nxt - time.monotonic()
            if d > 0:
                time.sleep(d)
            else:
                nxt = time.monotonic()


def record_window(proc: subprocess.Popen, log, target: List[str], recorder: CommandRecorder,
                  publisher: StatePublisher, loop_hz: List[float], send_decision: Optional[Callable[[float], None]],
                  seconds: float, discovery_timeout: float) -> Tuple[int, int, float]:
    """Wait for the target's first commands, send its decision, settle, then record for ``seconds``:
    (commands recorded, joint states sent, the window's length in s)."""
    end = time.monotonic() + discovery_timeout
    while time.monotonic() < end and recorder.count < 50 and proc.poll() is None:
        time.sleep(0.1)
    if recorder.count < 50:
        log.seek(0)
        raise RuntimeError(f"{target[2]} produced no stamped commands (discovery failed?): {log.read()[-800:]}")
    if send_decision is not None:
        send_decision(end)
    time.sleep(1.5)   # settle: decision applied, loop_hz window filled
    gc.collect()
    gc.freeze()       # this process is the instrument: no full collection while measuring
    loop_hz.clear()
    recorder.count = 0
    s0, t0 = publisher.sent, time.monotonic()
    recorder.recording.set()
    time.sleep(seconds)
    recorder.recording.clear()
    return recorder.count, publisher.sent - s0, time.monotonic() - t0


def stop_target(proc: subprocess.Popen, log) -> str:
    """Interrupt the target (kill it if it does not exit in 10 s); its log."""
    if proc.poll() is None:
        proc.send_signal(2)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    log.seek(0)
    text = log.read()
    log.close()
    return text


def measure(target: List[str], seconds: float, *, decide: bool, discovery_timeout: float = 30.0,
            rate_hz: float = 1000.0, publisher_cpus: str = "") -> dict:
    """Start ``target``, publish stamped joint states at rate_hz, measure for ``seconds``: raw
    per-stamp latencies, publish delays and command intervals (us), and the rates. ``publisher_cpus``
    pins the publishing thread (the robot's sensor driver) to those CPUs."""
    from csr_llm_common.ros.dds_env import localhost_dds_env
    localhost_dds_env()
    from rclpy.node import Node
    from sensor_msgs.msg import JointState
    from csr_llm_common.ros import qos
    from csr_llm_common.ros.spin import spinning
    from csr_llm_msgs.msg import Decision, MotorCommand, RouterStatus
    from ..params import make_config

    log = tempfile.TemporaryFile(mode="w+")     # a pipe nobody reads could fill and stall the target
    proc = subprocess.Popen(target, stdout=subprocess.DEVNULL, stderr=log, text=True)
    recorder = CommandRecorder(int(rate_hz * (seconds + 5) * 2) + 10_000)
    loop_hz: List[float] = []
    joints = make_config().joints
    try:
        with spinning() as sp:
            node = sp.create(Node, "router_bench_peer")
            node.create_subscription(MotorCommand, "motor_command", recorder.on_command, qos.reliable(100))
            node.create_subscription(RouterStatus, "router_status", lambda m: loop_hz.append(m.loop_hz),
                                     qos.COMMANDS)
            js_pub = node.create_publisher(JointState, "joint_states", qos.COMMANDS)
            dec_pub = node.create_publisher(Decision, "decision", qos.DECISIONS)

            def send_decision(deadline: float) -> None:
                while dec_pub.get_subscription_count() == 0 and time.monotonic() < deadline:
                    time.sleep(0.05)
                dec_pub.publish(Decision(intent="hold_position"))

            msg = JointState(name=list(joints), position=[0.0] * len(joints), velocity=[0.0] * len(joints))
            publisher = StatePublisher(js_pub, msg, rate_hz, publisher_cpus)
            publisher.start()
            try:
                n, sent, window_s = record_window(proc, log, target, recorder, publisher, loop_hz,
                                                  send_decision if decide else None, seconds, discovery_timeout)
            finally:
                publisher.stop()
                gc.unfreeze()
    finally:
        target_log = stop_target(proc, log)
    return dict(recorder.figures(n), command_rate_hz=float(n / window_s), joint_state_rate_hz=float(sent / window_s),
                loop_hz=float(np.median(loop_hz)) if loop_hz else None, target_log=target_log[-4000:])


def summarise_runs(runs: List[dict], nominal_period_s: float = 0.001) -> dict:
    """One target's rounds pooled: latency and publish-delay statistics, loop period, rates."""
    lat = np.concatenate([r["latency"] for r in runs])
    hz = [r["loop_hz"] for r in runs if r["loop_hz"] is not None]
    return {
        "latency_us": summarise(lat),
        "publish_us": summarise(np.concatenate([r["publish"] for r in runs])),
        "period_us": period_stats(np.concatenate([r["intervals"] for r in runs]), nominal_period_s),
        "samples": int(lat.size),
        "rounds": len(runs),
        "command_rate_hz": float(np.mean([r["command_rate_hz"] for r in runs])),
        "joint_state_rate_hz": float(np.mean([r["joint_state_rate_hz"] for r in runs])),
        "loop_hz": float(np.median(hz)) if hz else None,
    }


# name -> (process, send a decision): the floor, the router as configured, the router ticking on states
TARGETS: Dict[str, Tuple[List[str], bool]] = {
    "echo": (echo_command(), False),
    "router": (router_command(), True),                              # as configured: state_or_timer
    "router_timer": (router_command(["tick_source:=timer"]), True),
}


def run_side_by_side(seconds: float, rounds: int, log=print) -> Dict[str, dict]:
    """Each target for ``seconds`` in all, in ``rounds`` interleaved rounds, so that whatever else
    runs on the machine meanwhile weighs on the floor and the router alike."""
    raw: Dict[str, List[dict]] = {name: [] for name in TARGETS}
    for k in range(rounds):
        for name, (cmd, decide) in TARGETS.items():
            log(f"[bench-router] DDS round {k + 1}/{rounds}: {name} for {seconds / rounds:g} s ...")
            raw[name].append(measure(cmd, seconds / rounds, decide=decide))
    return {name: summarise_runs(runs) for name, runs in raw.items()}


# placement -> (load and control on separate CPUs, the router's control_priority)
PLACEMENTS: Dict[str, Tuple[bool, int]] = {"unpinned": (False, 0), "pinned": (True, 0), "pinned_fifo": (True, 50)}


def run_under_load(seconds: float, placement: str, extra: Optional[List[str]] = None) -> dict:
    """The router as configured, measured while csr_llm_core.lab.decision_load runs (a context deciding
    back to back and a second one rebuilding the prefix: both ASR resources busy). ``unpinned``: the
    scheduler places everything; ``pinned``: the load on the first CPU, the router (``cpu_affinity``)
    and the joint-state publisher (the sensor driver) on the last; ``pinned_fifo``: as pinned, the
    router's control thread at SCHED_FIFO (``control_priority``; ``control_priority_applied`` says
    whether the router's log confirmed it: where the OS refuses, the loop ran at normal priority)."""
    pinned, priority = PLACEMENTS[placement]
    cpus = sorted(os.sched_getaffinity(0))
    load_cpu, router_cpu = (str(cpus[0]), str(cpus[-1])) if pinned and len(cpus) > 1 else ("", "")
    load = subprocess.Popen([sys.executable, "-m", "csr_llm_core.lab.decision_load", "--seconds", str(seconds + 120),
                             "--cpu", load_cpu, "--rebuild"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        for line in load.stdout or []:        # the model loaded and deciding before we measure
            if "ready" in line:
                break
        items = list(extra or []) + ([f"cpu_affinity:={router_cpu}"] if router_cpu else [])
        items += [f"control_priority:={priority}"] if priority else []
        run = measure(router_command(items), seconds, decide=True, publisher_cpus=router_cpu)
        result = summarise_runs([run])
    finally:
        load.send_signal(2)
        out = load.communicate(timeout=60)[0]

    def rate(word: str) -> float:
        lines = [ln for ln in out.splitlines() if ln.startswith(word + " ")]
        return float(lines[-1].split("(")[1].split("/s")[0]) if lines else 0.0

    return dict(result, load_decisions_per_s=rate("decisions"), load_rebuilds_per_s=rate("rebuilds"),
                router_cpus=router_cpu or "any", load_cpus=load_cpu or "any", control_priority=priority,
                control_priority_applied=bool(priority) and f"at SCHED_FIFO priority {priority}" in run["target_log"])


# ---------------------------------------------------------------------------------------- the echo
def echo_main(args: Optional[List[str]] = None) -> int:
    """A node that re-publishes each joint state's stamp as a MotorCommand (the router's QoS)."""
    from rclpy.node import Node
    from sensor_msgs.msg import JointState
    from csr_llm_common.ros import qos
    from csr_llm_common.ros.node import run_node
    from csr_llm_msgs.msg import MotorCommand

    class StampEcho(Node):
        def __init__(self) -> None:
            super().__init__("stamp_echo")
            self._out = MotorCommand()
            self._pub = self.create_publisher(MotorCommand, "motor_command", qos.COMMANDS)
            self.create_subscription(JointState, "joint_states", self._on_state, qos.LATEST)
            gc.collect()
            gc.freeze()          # as the router does after start-up

        def _on_state(self, msg: JointState) -> None:
            self._out.header.stamp = msg.header.stamp
            self._pub.publish(self._out)

    return run_node(StampEcho, args)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--echo", action="store_true", help="run the stamp echo node")
    known, rest = ap.parse_known_args()
    if known.echo:
        sys.exit(echo_main([sys.argv[0]] + rest))
    ap.error("use --echo (the measurement runs from action_router.lab.bench)")
