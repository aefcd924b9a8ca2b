"""Aggregator node: standard sensor topics -> csr_llm_msgs/StateChunk with a gap-free sequence.

With ``sensed_lines: true`` it also writes the situations the robot senses (situations.py: person
close, object gripped, arrived in a zone, motor hot, slipping, task done ...) as event chunks on the
``sensed`` source: it then subscribes ``proximity`` (sensor_msgs/Range), ``zone`` (std_msgs/String)
and ``router_status`` (csr_llm_msgs/RouterStatus), and reads the wrench and temperature sources it
already summarises. Off by default (and in the sim and replay profiles); docs/situations.md.
"""
from __future__ import annotations

import csr_llm_common.stop_signal  # noqa: F401 - first: a Ctrl-C during the slow imports below is caught

import sys
import threading
import time
from typing import List, Optional, Tuple

from rclpy.node import Node

from geometry_msgs.msg import WrenchStamped
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Imu, JointState, Range, Temperature
from std_msgs.msg import String

from csr_llm_msgs.msg import RouterStatus, StateChunk

from .aggregator import (Aggregator, AggregatorConfig, SampleError, TopicSpec, source_parameters,
                         topic_specs)
from .situations import (RangeSample, RouterReport, Sample, SituationMonitor, TemperatureSample, WrenchSample,
                         ZoneSample)
from .task_situations import router_sample
from .situations_config import SensedParameters, load_situations
from csr_llm_common.faults import FaultLog
from csr_llm_common.paths import config_file, expand_path
from csr_llm_common.realtime import pin_threads
from csr_llm_common.ros import qos
from csr_llm_common.ros.geometry import yaw_from_quaternion
from csr_llm_common.ros.node import run_node, stamp_or_now
from csr_llm_common.ros.params import declare_all, declare_dataclass
from csr_llm_common.ros.stamps import set_stamp

MESSAGE_TYPES = {"joint_states": JointState, "imu": Imu, "odometry": Odometry, "temperature": Temperature,
                 "wrench": WrenchStamped, "event": String}


def to_sample(kind: str, msg):
    """ROS message -> the plain sample the Aggregator summarises."""
    if kind == "joint_states":
        return {"name": list(msg.name), "position": list(msg.position), "velocity": list(msg.velocity),
                "effort": list(msg.effort)}
    if kind == "imu":
        a, w = msg.linear_acceleration, msg.angular_velocity
        return {"linear_acceleration": (a.x, a.y, a.z), "angular_velocity": (w.x, w.y, w.z)}
    if kind == "odometry":
        p, t = msg.pose.pose, msg.twist.twist
        return {"x": p.position.x, "y": p.position.y, "yaw": yaw_from_quaternion(p.orientation),
                "v": t.linear.x, "w": t.angular.z}
    if kind == "temperature":
        return {"temperature": msg.temperature, "frame_id": msg.header.frame_id}
    if kind == "wrench":
        f, t = msg.wrench.force, msg.wrench.torque
        return {"force": (f.x, f.y, f.z), "torque": (t.x, t.y, t.z)}
    raise ValueError(kind)


SENSED_TOPICS = (("proximity", Range), ("zone", String), ("router_status", RouterStatus))


def sensed_sample(kind: str, msg, stamp: float) -> Sample:
    """ROS message -> the plain sample the SituationMonitor takes (``kind``: a SENSED_TOPICS name or
    a source type it reads, wrench or temperature)."""
    if kind == "proximity":
        return RangeSample(stamp, msg.range, msg.min_range, msg.max_range)
    if kind == "zone":
        return ZoneSample(stamp, msg.data)
    if kind == "wrench":
        f, t = msg.wrench.force, msg.wrench.torque
        return WrenchSample(stamp, (f.x, f.y, f.z), (t.x, t.y, t.z))
    if kind == "temperature":
        return TemperatureSample(stamp, msg.temperature, msg.header.frame_id)
    if kind == "router_status":
        return RouterReport(stamp, router_sample(msg))
    raise ValueError(kind)


def declare_config(node: Node) -> Tuple[AggregatorConfig, List[TopicSpec]]:
    """The node's parameters (all read-only), and the topics they name."""
    config = declare_dataclass(node, AggregatorConfig())
    sources = source_parameters(config.sources)
    declare_all(node, sources)
    return config, topic_specs(config.sources, {name: node.get_parameter(name).value for name in sources})


class AggregatorNode(Node):
    def __init__(self, **kwargs):
        super().__init__("aggregator", **kwargs)
        config, specs = declare_config(self)
        placed = pin_threads(config.cpu_affinity)
        if placed:
            self.get_logger().info(placed)
        self.faults = FaultLog(self.get_logger().warning, counted_in="the aggregator (not logged)")
        self.aggregator = Aggregator(specs, max_event_chars=config.max_event_chars,
                                     watermark_period=config.watermark_period,
                                     future_tolerance_s=config.future_tolerance_s, max_lag_s=config.max_lag_s,
                                     warmup_windows=config.warmup_windows,
                                     max_events_per_window=config.max_events_per_window,
                                     event_window=config.event_window,
                                     burst_chunk_period=config.burst_chunk_period, faults=self.faults)
        self._lock = threading.Lock()   # one sequence, whatever thread a callback runs on
        self.epoch = time.time_ns()      # names this sequence: a restart starts a newer one at seq 0
        self.publisher = self.create_publisher(StateChunk, "state_chunks", qos.CHUNK_STREAM,
                                               event_callbacks=qos.quiet_publisher())
        self._sensor_subscriptions = []
        sensor_qos = qos.RELIABLE_SENSORS if config.reliable_sensors else qos.SENSORS
        for spec in specs:
            profile = qos.EVENTS if spec.type == "event" else sensor_qos
            callback = (lambda msg, s=spec: self._on_event(s, msg)) if spec.type == "event" else \
                (lambda msg, s=spec: self._on_sample(s, msg))
            self._sensor_subscriptions.append(
                self.create_subscription(MESSAGE_TYPES[spec.type], spec.topic, callback, profile))
        self.get_logger().info(f"aggregating {', '.join(f'{s.topic} ({s.type})' for s in specs)} -> state_chunks")
        self.situations = self._start_sensing(declare_dataclass(self, SensedParameters()), sensor_qos)

    def _start_sensing(self, params: SensedParameters, sensor_qos) -> Optional[SituationMonitor]:
        """The situation monitor and its subscriptions (None, and no subscription, when off)."""
        if not params.sensed_lines:
            return None
        path = expand_path(params.situations_file) or str(config_file("situations.yaml"))
        monitor = SituationMonitor(load_situations(path), faults=self.faults)
        for kind, msg_type in SENSED_TOPICS:
            profile = qos.ROUTER_STATUS if kind == "router_status" else sensor_qos
            self._sensor_subscriptions.append(self.create_subscription(
                msg_type, kind, lambda msg, k=kind: self._on_sensed(k, msg), profile))
        if self.aggregator.watermark_period > 0:    # held lines go out without samples too
            self.create_timer(self.aggregator.watermark_period, self._release_stale_sensed)
        self.get_logger().info(f"sensed lines ({path}) from {', '.join(k for k, _ in SENSED_TOPICS)} and the "
                               "wrench and temperature sources -> state_chunks (source 'sensed')")
        return monitor

    def _publish(self, chunk) -> None:
        if chunk.coalesced:
            self.faults.record("event_burst", f"{chunk.coalesced} events on {chunk.source_topic} coalesced into "
                               f"one chunk (more than {self.aggregator.max_events_per_window} in a window; "
                               f"one such chunk per {self.aggregator.bursts.period_windows} window(s) while it lasts)")
        source = self.resolve_topic_name(chunk.source_topic) if chunk.source_topic else ""
        msg = StateChunk(seq=chunk.seq, epoch=self.epoch, source_topic=source, kind=chunk.kind, text=chunk.text,
                         token_count=-1)
        set_stamp(msg.header.stamp, chunk.stamp)
        self.publisher.publish(msg)

    def _on_event(self, spec: TopicSpec, msg: String) -> None:
        try:
            with self._lock:
                for chunk in self.aggregator.on_event(spec.topic, msg.data, stamp_or_now(self)):
                    self._publish(chunk)
        except SampleError as err:
            self.faults.record(f"{spec.topic}:rejected", f"dropped event on {spec.topic}: {err}")

    def _on_sample(self, spec: TopicSpec, msg) -> None:
        try:
            sample = to_sample(spec.type, msg)
        except (KeyError, TypeError, ValueError, OverflowError) as err:
            self.faults.record(f"{spec.topic}:{type(err).__name__}", f"ignored a sample on {spec.topic}: {err}")
            return
        stamp = stamp_or_now(self, msg.header)
        with self._lock:
            for chunk in self.aggregator.take_sample(spec.topic, sample, stamp,
                                                     self.get_clock().now().nanoseconds * 1e-9):
                self._publish(chunk)
        if self.situations is not None and spec.type in ("wrench", "temperature"):
            self._on_sensed(spec.type, msg)

    def _release_stale_sensed(self) -> None:
        with self._lock:
            for chunk in self.aggregator.release_stale_sensed(self.get_clock().now().nanoseconds * 1e-9):
                self._publish(chunk)

    def _on_sensed(self, kind: str, msg) -> None:
        """A message the situations read: the sensed lines it makes due, as event chunks."""
        header = getattr(msg, "header", None)   # zone (std_msgs/String) has none: the node clock
        sample = sensed_sample(kind, msg, stamp_or_now(self, header))
        now = self.get_clock().now().nanoseconds * 1e-9
        with self._lock:
            for line in self.situations.take(sample) if self.situations is not None else []:
                try:
                    chunks = self.aggregator.on_sensed(line.text, line.stamp, now,
                                                       event=line.kind in self.situations.config.events.kinds)
                except SampleError as err:
                    self.faults.record(f"sensed:{err.kind}", f"dropped a sensed line ({line.text}): {err}")
                    continue
                for chunk in chunks:
                    self._publish(chunk)


def main(args=None) -> int:
    return run_node(AggregatorNode, args)


if __name__ == "__main__":
    sys.exit(main())
