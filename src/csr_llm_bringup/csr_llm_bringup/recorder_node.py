"""Recorder node: records a run to a rosbag2, prints a live status line, writes the run report on exit."""
from __future__ import annotations

import csr_llm_common.stop_signal  # noqa: F401 - first: a Ctrl-C during the slow imports below is caught

import json
import sys
import threading

import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from std_msgs.msg import String

from csr_llm_common.faults import FaultLog
from csr_llm_common.realtime import pin_threads
from csr_llm_common.ros import qos as suite_qos
from csr_llm_common.ros.node import run_node
from csr_llm_common.ros.params import declare_dataclass
from csr_llm_common.ros.qos import RECORDING_DEPTH
from csr_llm_common.ros.stamps import stamp_to_sec

from .bags import import_message_class, open_writer, ros_type_name, typestore
from .recorder_config import RateLimiter, RecorderConfig
from .run_report import RunStats

STATS_TOPICS = {"decision", "csr_status", "router_status", "motor_command", "joint_states", "events", "clock",
               "state_chunks"}   # state_chunks: the sensed lines for the report


class RecorderNode(Node):
    def __init__(self, **kwargs):
        super().__init__("recorder", **kwargs)
        config = declare_dataclass(self, RecorderConfig())
        placed = pin_threads(config.cpu_affinity)     # before the status printer's thread: it inherits them
        if placed:
            self.get_logger().info(placed)
        self.run_dir = config.run_directory()
        self.storage = config.storage
        self.wanted = list(config.topics)
        self.status_period = config.status_period
        self.make_report = config.report
        self.limiter = RateLimiter([self.resolve_topic_name(t) for t in config.rate_limited_topics],
                                   config.rate_limit_hz)
        self.faults = FaultLog(self.get_logger().warning)
        self.stats = RunStats()
        self._lock = threading.Lock()
        self._closed = True         # until the bag is open: a failed start has nothing to close
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.bag_path = self.run_dir / "bag"
        self.writer = open_writer(self.bag_path, self.storage)
        self.store = typestore()
        self.connections = {}
        self._subs = {}
        self._types = {}
        self._discover()
        # on the steady clock: under sim time a /clock-driven timer would not fire before the
        # simulator starts, and the simulator waits for this node's subscriptions to start
        self.create_timer(0.5, self._discover, clock=Clock(clock_type=ClockType.STEADY_TIME))
        # decision scoring: the simulator's expectation timeline and goal status (decision_score.py)
        self.create_subscription(String, "scenario/expectations", self._on_expectation, suite_qos.SCENARIO_EVENTS)
        self.create_subscription(String, "sim/truth", self._on_truth, suite_qos.COMMANDS)
        self._closed = False
        # stopped and joined in close(): no thread of ours is left printing while the interpreter exits
        self._printer_stop = threading.Event()
        self._printer = threading.Thread(target=self._status_loop, name="recorder-status", daemon=True)
        if self.status_period > 0:
            self._printer.start()
        self.get_logger().info(f"recording {len(self.wanted)} topics to {self.bag_path} ({self.storage})")

    # --- subscriptions ---------------------------------------------------------------------
    def _discover(self) -> None:
        known = dict(self.get_topic_names_and_types())
        for topic in self.wanted:
            name = self.resolve_topic_name(topic)
            if name in self._subs or name not in known:
                continue
            type_string = ros_type_name(known[name][0])
            cls = import_message_class(type_string)
            if cls is None:
                self.faults.record(f"type:{type_string}", f"cannot record {name}: type {type_string} not importable")
                continue
            reliable = all(info.qos_profile.reliability == ReliabilityPolicy.RELIABLE
                           for info in self.get_publishers_info_by_topic(name)) and \
                bool(self.get_publishers_info_by_topic(name))
            qos = QoSProfile(depth=RECORDING_DEPTH, history=HistoryPolicy.KEEP_LAST,
                             reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT)
            with self._lock:
                self.connections[name] = self.writer.add_connection(name, type_string, typestore=self.store)
                self._types[name] = cls
            # QoS matched to the publishers above, so no incompatibility to warn about: no event handlers
            # (suite_qos.quiet_subscription: they cost executor CPU on every message)
            self._subs[name] = self.create_subscription(cls, name, lambda data, n=name: self._on_raw(n, data),
                                                        qos, raw=True, event_callbacks=suite_qos.quiet_subscription())

    def _on_raw(self, topic: str, data: bytes) -> None:
        now = self.get_clock().now().nanoseconds
        with self._lock:
            if self._closed or not self.limiter.keep(topic, now):
                return
            self.writer.write(self.connections[topic], now, data)
        short = topic.rsplit("/", 1)[-1]
        if short in STATS_TOPICS:
            try:
                self._stats(short, deserialize_message(data, self._types[topic]), now * 1e-9)
            except Exception as err:  # a stats bug must not stop the recording
                self.faults.record(f"stats:{short}", f"run statistics skipped a {short} message: {err}")

    def _stats(self, topic: str, msg, now: float) -> None:
        s = self.stats
        if topic == "clock":
            s.on_time(stamp_to_sec(msg.clock))
        elif topic == "decision":
            s.on_decision(_t(msg.header), msg.ttft_ms, msg.intent, msg.resource, msg.state_version,
                          arguments=_arguments(msg), total_ms=msg.total_ms, reused=msg.reused)
        elif topic == "csr_status":
            s.on_csr_status(_t(msg.header), msg.evictions, msg.swaps, msg.prefix_tokens, msg.state_version)
        elif topic == "router_status":
            s.on_router_status(_t(msg.header), active_intent=msg.active_intent, interrupt_depth=msg.interrupt_depth,
                               task_hit_rate=msg.task_hit_rate, loop_hz=msg.loop_hz,
                               grip_done_count=msg.grip_done_count, slip_detected=msg.slip_detected,
                               tick_us=msg.l1_us + msg.l2_us + msg.l3_us, derate_count=msg.derate_count,
                               slip_events=msg.slip_events)
        elif topic == "motor_command":
            s.on_motor_command(_t(msg.header), list(msg.joint_names), list(msg.effort), list(msg.effort_limit),
                               list(msg.reference_position))
        elif topic == "joint_states":
            s.on_joint_state(list(msg.name), list(msg.position))
        elif topic == "events":
            s.on_event(now, msg.data)
        elif topic == "state_chunks" and msg.source_topic.rsplit("/", 1)[-1] == "sensed":
            s.on_sensed(_t(msg.header), msg.text.split(" sensed: ", 1)[-1])
        if topic == "clock":
            s.clock_seen = True
        elif now > 0:   # the node clock: sim time under use_sim_time (0 before the first /clock), else wall
            s.on_time(now)

    def _on_expectation(self, msg: String) -> None:
        try:
            self.stats.on_expectation_record(json.loads(msg.data))
        except (ValueError, TypeError, KeyError) as err:
            self.faults.record("expectations", f"unreadable scenario/expectations record: {err}")

    def _on_truth(self, msg: String) -> None:
        try:
            truth = json.loads(msg.data)
            if "goals" in truth:
                self.stats.on_goals(truth.get("goals") or {})
            if "wall_s" in truth:
                self.stats.on_sim_wall(truth["wall_s"])
        except (ValueError, TypeError, AttributeError) as err:
            self.faults.record("truth", f"unreadable sim/truth: {err}")

    # --- status line and report ------------------------------------------------------------
    def status_line(self) -> str:
        s = self.stats.summary()
        ttfts = [d[1] for d in self.stats.decisions[-20:]]
        ttft = f"{np.median(ttfts):.0f}" if ttfts else "-"
        csr = self.stats.csr_last
        return (f"{s['time_base']} {s['duration_s']:7.1f} s "
                f"| decisions {s['decisions']} ({s['decisions_per_s']:.2f}/s) "
                f"TTFT {ttft} ms | prefix {int(csr.get('prefix_tokens', 0))} tok k={int(csr.get('state_version', 0))} "
                f"| router hit {100 * s['router_hit_rate']:.0f}% "
                f"loop {self.stats.loop_hz[-1] if self.stats.loop_hz else 0:.0f} Hz "
                f"| limit violations {s['limit_violations']}"
                + (f" | decisions ok {100 * s['decision_accuracy']:.0f}%" if s["decision_accuracy"] is not None
                   else ""))

    def _status_loop(self) -> None:
        while not self._printer_stop.wait(self.status_period):
            print(f"[status] {self.status_line()}", flush=True)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.writer.close()
        dropped = {topic: n for topic, n in self.limiter.dropped.items() if n}
        if dropped:
            self.get_logger().info(f"rate-limited topics, messages not recorded: {dropped}")
        self._printer_stop.set()
        if self._printer.is_alive():
            self._printer.join(timeout=2.0)
        if self.make_report:
            summary = self.stats.write(self.run_dir, self.bag_path)
            self.get_logger().info(f"run report: {self.run_dir / 'report.md'} ({summary})")

    def destroy_node(self):
        self.close()
        return super().destroy_node()


def _t(header) -> float:
    return stamp_to_sec(header.stamp)


def _arguments(decision) -> dict:
    """A Decision's IntentArgument list as {name: typed value}."""
    out = {}
    for arg in decision.arguments:
        values = (arg.float_value, arg.int_value, arg.string_value, arg.bool_value)
        if arg.type < len(values):
            out[arg.name] = values[arg.type]
    return out


def main(args=None) -> int:
    return run_node(RecorderNode, args)   # single-threaded: the writer and the stats need no locking


if __name__ == "__main__":
    sys.exit(main())
