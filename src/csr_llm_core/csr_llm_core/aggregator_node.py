"""Aggregator node: standard sensor topics -> csr_llm_msgs/StateChunk with a gap-free sequence."""
from __future__ import annotations

import math
import sys
import threading

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data

from geometry_msgs.msg import WrenchStamped
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Imu, JointState, Temperature
from std_msgs.msg import String

from csr_llm_msgs.msg import StateChunk

from .aggregator import Aggregator, SampleError, TopicSpec
from .node_util import FaultLog, run_node, stamp_seconds

DEFAULT_TOPICS = ["joint_states", "imu", "odom", "motor_temperature", "gripper/wrench", "events"]
DEFAULT_TYPES = ["joint_states", "imu", "odometry", "temperature", "wrench", "event"]
DEFAULT_PERIODS = [1.0, 1.0, 1.0, 2.0, 0.5, 0.0]
DEFAULT_THRESHOLDS = [0.05, 0.5, 0.05, 1.0, 2.0, 0.0]

MESSAGE_TYPES = {"joint_states": JointState, "imu": Imu, "odometry": Odometry, "temperature": Temperature,
                 "wrench": WrenchStamped, "event": String}
# Chunks must not be lost: reliable, deep queue, and kept for late joiners (a reasoning node that
# starts or restarts after the aggregator still gets the chunks published before it).
CHUNK_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                       durability=DurabilityPolicy.TRANSIENT_LOCAL)
EVENT_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)


def _yaw(q) -> float:
    return math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))


def to_sample(kind: str, msg):
    """ROS message -> the plain sample the Aggregator summarises."""
    if kind == "joint_states":
        return {"name": list(msg.name), "position": list(msg.position), "velocity": list(msg.velocity)}
    if kind == "imu":
        a, w = msg.linear_acceleration, msg.angular_velocity
        return {"linear_acceleration": (a.x, a.y, a.z), "angular_velocity": (w.x, w.y, w.z)}
    if kind == "odometry":
        p, t = msg.pose.pose, msg.twist.twist
        return {"x": p.position.x, "y": p.position.y, "yaw": _yaw(p.orientation), "v": t.linear.x, "w": t.angular.z}
    if kind == "temperature":
        return {"temperature": msg.temperature, "frame_id": msg.header.frame_id}
    if kind == "wrench":
        f = msg.wrench.force
        return {"force": (f.x, f.y, f.z)}
    raise ValueError(kind)


class AggregatorNode(Node):
    def __init__(self, **kwargs):
        super().__init__("aggregator", **kwargs)
        topics = self.declare_parameter("topics", DEFAULT_TOPICS).value
        types = self.declare_parameter("types", DEFAULT_TYPES).value
        periods = self.declare_parameter("periods", DEFAULT_PERIODS).value
        thresholds = self.declare_parameter("thresholds", DEFAULT_THRESHOLDS).value
        max_event_chars = self.declare_parameter("max_event_chars", 300).value
        watermark_period = self.declare_parameter("watermark_period", 0.5).value
        if not (len(topics) == len(types) == len(periods) == len(thresholds)):
            raise ValueError("parameters topics, types, periods and thresholds must have the same length")
        specs = [TopicSpec(t, k, float(p) if k != "event" else 1.0, float(th))
                 for t, k, p, th in zip(topics, types, periods, thresholds)]
        self.aggregator = Aggregator(specs, max_event_chars=int(max_event_chars),
                                     watermark_period=float(watermark_period))
        self.faults = FaultLog(self)
        self._lock = threading.Lock()   # one sequence, whatever thread a callback runs on
        self.publisher = self.create_publisher(StateChunk, "state_chunks", CHUNK_QOS)
        self._sensor_subscriptions = []
        for spec in specs:
            qos = EVENT_QOS if spec.type == "event" else qos_profile_sensor_data
            callback = (lambda msg, s=spec: self._on_event(s, msg)) if spec.type == "event" else \
                (lambda msg, s=spec: self._on_sample(s, msg))
            self._sensor_subscriptions.append(self.create_subscription(MESSAGE_TYPES[spec.type], spec.topic, callback, qos))
        self.get_logger().info(f"aggregating {', '.join(f'{s.topic} ({s.type})' for s in specs)} -> state_chunks")

    def _publish(self, chunk) -> None:
        source = self.resolve_topic_name(chunk.source_topic) if chunk.source_topic else ""
        msg = StateChunk(seq=chunk.seq, source_topic=source, kind=chunk.kind, text=chunk.text, token_count=-1)
        msg.header.stamp.sec = int(chunk.stamp)
        msg.header.stamp.nanosec = int(round((chunk.stamp - int(chunk.stamp)) * 1e9)) % 1_000_000_000
        self.publisher.publish(msg)

    def _on_event(self, spec: TopicSpec, msg: String) -> None:
        try:
            with self._lock:
                chunk = self.aggregator.on_event(spec.topic, msg.data, stamp_seconds(self))
                self._publish(chunk)
        except SampleError as err:
            self.faults.report(f"{spec.topic}:{err}", f"dropped event on {spec.topic}: {err}")

    def _on_sample(self, spec: TopicSpec, msg) -> None:
        try:
            sample = to_sample(spec.type, msg)
            stamp = stamp_seconds(self, msg.header)
            with self._lock:
                for chunk in self.aggregator.watermark(stamp):   # the closed window, then its watermark
                    self._publish(chunk)
                chunk = self.aggregator.on_sample(spec.topic, sample, stamp)
                if chunk is not None:
                    self._publish(chunk)
        except (SampleError, KeyError, TypeError, ValueError) as err:
            self.faults.report(f"{spec.topic}:{type(err).__name__}",
                               f"ignored a sample on {spec.topic}: {err}")


def main(args=None) -> int:
    return run_node(AggregatorNode, args)


if __name__ == "__main__":
    sys.exit(main())
