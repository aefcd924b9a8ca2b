"""Bag player (rclpy): publishes a bag's input topics in timestamp order with /clock, at a rate factor.

Lockstep (optional): at every multiple of `lockstep_period` of bag time the player publishes that
time on /clock and waits until a csr_llm_msgs/Decision stamped at or after it arrives, as the
simulator does, so decisions that take real compute time land at the same sim time in every run.
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

from builtin_interfaces.msg import Time
from rosgraph_msgs.msg import Clock
from csr_llm_msgs.msg import Decision

from .bag_io import BagReport, read_messages, to_ros_message
from .bags import import_message_class

RELIABLE = QoSProfile(depth=2000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)


@dataclass
class PlayResult:
    published: Dict[str, int] = field(default_factory=dict)
    skipped: Dict[str, str] = field(default_factory=dict)
    lockstep_waits: int = 0
    lockstep_timeouts: int = 0
    sim_seconds: float = 0.0


def _time(t: float) -> Time:
    sec = int(math.floor(t))
    return Time(sec=sec, nanosec=min(int(round((t - sec) * 1e9)), 999_999_999))


class BagPlayer:
    def __init__(self, node: Node, bag: Path, report: BagReport, topics: Optional[Sequence[str]] = None,
                 rate: float = 1.0, lockstep_period: float = 0.0, lockstep_timeout: float = 30.0,
                 log: Callable[[str], None] = print):
        self.node, self.bag, self.report = node, Path(bag), report
        self.rate = rate
        self.lockstep_period = lockstep_period
        self.lockstep_timeout = lockstep_timeout
        self.log = log
        wanted = [node.resolve_topic_name(t) for t in topics] if topics else list(report.topics)
        self.result = PlayResult()
        for topic, entry in report.topics.items():
            if topic not in wanted:
                continue
            if entry.status != "ok":
                self.result.skipped[topic] = f"{entry.status}: {entry.detail or 'not usable'}"
        self.publishers = {}
        self.classes = {}
        for topic in wanted:
            if topic == "/clock" or topic not in report.topics or topic in self.result.skipped:
                continue
            cls = import_message_class(report.topics[topic].msgtype)
            if cls is None:
                self.result.skipped[topic] = f"type {report.topics[topic].msgtype} is not available in this ROS environment"
                continue
            self.classes[topic] = cls
            self.publishers[topic] = node.create_publisher(cls, topic, RELIABLE)
        self.clock_pub = node.create_publisher(Clock, "/clock", 10)
        self._latest_decision = -math.inf
        self._decision_event = threading.Event()
        if lockstep_period > 0:
            node.create_subscription(Decision, "decision", self._on_decision, RELIABLE)

    def _on_decision(self, msg: Decision) -> None:
        self._latest_decision = max(self._latest_decision, msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9)
        self._decision_event.set()

    def wait_for_subscribers(self, timeout: float) -> List[str]:
        """Topics still without a subscriber after `timeout` (the graph may not subscribe all)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            missing = [t for t, p in self.publishers.items() if p.get_subscription_count() == 0]
            if not missing:
                return []
            time.sleep(0.1)
        return missing

    def _publish_clock(self, t: float) -> None:
        self.clock_pub.publish(Clock(clock=_time(t)))

    def _wait_decision(self, boundary: float) -> float:
        start = time.monotonic()
        self.result.lockstep_waits += 1
        while self._latest_decision < boundary - 1e-9:
            if time.monotonic() - start > self.lockstep_timeout:
                self.result.lockstep_timeouts += 1
                self.log(f"no decision for t={boundary:.3f} s within {self.lockstep_timeout:g} s; continuing")
                break
            self._decision_event.wait(0.01)
            self._decision_event.clear()
        return time.monotonic() - start

    def play(self) -> PlayResult:
        topics = list(self.publishers)
        t0 = None
        wall0 = time.monotonic()
        paused = 0.0
        next_boundary = None
        last_clock = -math.inf
        for topic, _msgtype, stamp_ns, raw, decoded in read_messages(self.bag, self.report, topics):
            t = stamp_ns * 1e-9
            if t0 is None:
                t0 = t
                if self.lockstep_period > 0:
                    next_boundary = (math.floor(t / self.lockstep_period) + 1) * self.lockstep_period
            while next_boundary is not None and t >= next_boundary:
                self._publish_clock(next_boundary)
                last_clock = next_boundary
                paused += self._wait_decision(next_boundary)
                next_boundary += self.lockstep_period
            if self.rate > 0:
                delay = wall0 + paused + (t - t0) / self.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            if t > last_clock:
                self._publish_clock(t)
                last_clock = t
            if decoded is not None:
                self.publishers[topic].publish(to_ros_message(decoded, self.classes[topic]))
            else:
                self.publishers[topic].publish(raw)
            self.result.published[topic] = self.result.published.get(topic, 0) + 1
        self.result.sim_seconds = 0.0 if t0 is None else max(0.0, last_clock - t0)
        return self.result
