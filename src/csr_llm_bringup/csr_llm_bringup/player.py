"""Bag player (rclpy): publishes a bag's input topics in timestamp order with /clock, at a rate factor.

Lockstep (optional): the player is the driver of lockstep.py's protocol, as the simulator is:
* decisions: at every multiple of `lockstep_period` of bag time the player publishes that time on
  /clock and waits until a csr_llm_msgs/Decision stamped at or after it arrives, so decisions
  that take real compute time land at the same sim time in every run;
* control: after each joint_states message (and the clock at its stamp) it waits, up to
  `control_lockstep_timeout` wall seconds, for the router's MotorCommand of that tick (from the
  first state on: the first waits for the router's latched RouterStatus, sent on activation), so the
  replayed controller runs every tick on the same state as the recorded one; and before each
  joint_states message, until the router reports holding every decision seen (RouterStatus), so
  each decision starts at the same tick as in the recording;
* at the end (of the bag or of `duration`) it waits for the decision due at the last boundary the
  clock reached, which no boundary waited for, so the recording holds every decision due.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from rclpy.node import Node

from builtin_interfaces.msg import Time
from rosgraph_msgs.msg import Clock
from csr_llm_msgs.msg import CsrStatus, Decision, MotorCommand, RouterStatus
from csr_llm_common.ros import qos
from csr_llm_common.ros.stamps import sec_to_stamp, stamp_to_sec

from .bag_io import BagReport, read_messages, to_ros_message
from .bags import import_message_class, typestore
from .lockstep import CommandWait, DecisionHandover, DecisionStamps, EventDecisions, LockstepSettings

RELIABLE = qos.PLAYBACK


@dataclass
class PlayResult:
    published: Dict[str, int] = field(default_factory=dict)
    skipped: Dict[str, str] = field(default_factory=dict)
    lockstep_waits: int = 0
    lockstep_timeouts: int = 0
    control_timeouts: int = 0
    handover_timeouts: int = 0
    sim_seconds: float = 0.0


def _time(t: float) -> Time:
    return sec_to_stamp(t)


class BagPlayer:
    def __init__(self, node: Node, bag: Path, report: BagReport, topics: Optional[Sequence[str]] = None,
                 rate: float = 1.0, lockstep: Optional[LockstepSettings] = None,
                 log: Callable[[str], None] = print, duration: Optional[float] = None):
        self.node, self.bag, self.report = node, Path(bag), report
        lockstep = lockstep or LockstepSettings()     # default: off
        self.duration = duration          # bag seconds from the first message to play (None: all)
        self.rate = rate
        self.lockstep_period = lockstep.period
        self.lockstep_timeout = lockstep.timeout
        self.lockstep_lag = lockstep.lag
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
                self.result.skipped[topic] = (f"type {report.topics[topic].msgtype} "
                                              "is not available in this ROS environment")
                continue
            self.classes[topic] = cls
            self.publishers[topic] = node.create_publisher(cls, topic, RELIABLE, event_callbacks=qos.quiet_publisher())
        self.clock_pub = node.create_publisher(Clock, "/clock", 10, event_callbacks=qos.quiet_publisher())
        self.decisions = DecisionStamps(margin=1e-6)
        self.events = EventDecisions()
        self._has_header: Dict[str, bool] = {}
        control_lockstep_timeout = lockstep.control_timeout
        self.handover = DecisionHandover(control_lockstep_timeout)
        self.commands = CommandWait(control_lockstep_timeout, poll=0.002)
        if lockstep.enabled:
            node.create_subscription(Decision, "decision", self._on_decision, RELIABLE,
                                     event_callbacks=qos.quiet_subscription())
            node.create_subscription(CsrStatus, "csr_status", self._on_csr_status, 10,
                                     event_callbacks=qos.quiet_subscription())
        self.control_lockstep_timeout = control_lockstep_timeout
        self._joint_topic = node.resolve_topic_name("joint_states")
        self._events_topic = node.resolve_topic_name("events")
        if control_lockstep_timeout > 0:
            node.create_subscription(MotorCommand, "motor_command",
                                     lambda m: self.commands.on_command(stamp_to_sec(m.header.stamp)), RELIABLE,
                                     event_callbacks=qos.quiet_subscription())
            node.create_subscription(RouterStatus, "router_status", self._on_router_status, qos.ROUTER_STATUS,
                                     event_callbacks=qos.quiet_subscription())

    def _on_decision(self, msg: Decision) -> None:
        self.handover.on_decision(msg.decision_id)
        if msg.trigger == Decision.TRIGGER_EVENT:
            self.events.on_decided()
        self.decisions.on_decision(stamp_to_sec(msg.header.stamp))

    def _on_csr_status(self, msg: CsrStatus) -> None:
        """No periodic decision comes before the decision loop's next due time: no wait before it."""
        self.handover.on_decision(msg.last_decision_id)   # the status may overtake the decision itself
        self.decisions.on_schedule(msg.next_decision_due)

    def _on_router_status(self, msg: RouterStatus) -> None:
        self.handover.on_router_status(msg.last_decision_id)

    def _wait_command(self, t: float) -> float:
        if not self.handover.router_reports:      # no active router in the graph
            return 0.0
        start = time.monotonic()
        if not self.commands.wait(t):
            self.result.control_timeouts += 1
            if self.result.control_timeouts <= 3:
                self.log(f"[player] no motor_command for the state at t={t:.3f} s within "
                         f"{self.control_lockstep_timeout:g} s (newest {self.commands.newest:.3f} s); continuing")
        return time.monotonic() - start

    def _wait_for_router(self) -> float:
        start = time.monotonic()
        if not self.handover.wait_for_router(self.lockstep_timeout):
            self.log(f"[player] no router_status within {self.lockstep_timeout:g} s: playing without "
                     f"control lockstep until a router reports")
        return time.monotonic() - start

    def wait_for_subscribers(self, timeout: float, settle_s: float = 2.0) -> List[str]:
        """Topics still without a subscriber after `timeout` (the graph may not subscribe all).

        Once every topic has one, wait until the counts stop changing for `settle_s`: a topic
        several nodes read (joint_states: aggregator and router) must not start before all of
        them match, or the first samples reach some nodes only and the replay's chunk stream differs."""
        deadline = time.monotonic() + timeout
        counts: Dict[str, int] = {}
        stable_since = time.monotonic()
        while time.monotonic() < deadline:
            now_counts = {t: p.get_subscription_count() for t, p in self.publishers.items()}
            if now_counts != counts:
                counts, stable_since = now_counts, time.monotonic()
            missing = [t for t, n in counts.items() if n == 0]
            if not missing and time.monotonic() - stable_since >= settle_s:
                return []
            time.sleep(0.1)
        return [t for t, n in counts.items() if n == 0]

    def _publish_clock(self, t: float) -> None:
        self.clock_pub.publish(Clock(clock=_time(t)))

    def _wait_decision(self, boundary: float) -> float:
        start = time.monotonic()
        self.result.lockstep_waits += 1
        # once decisions have stopped coming, do not wait the full timeout at every boundary
        timeout = self.lockstep_timeout if self.result.lockstep_timeouts < 2 else 1.0
        if not self.decisions.wait_for(boundary, timeout):
            self.result.lockstep_timeouts += 1
            self.log(f"no decision for t={boundary:.3f} s within {timeout:g} s; continuing")
        return time.monotonic() - start

    def _message_time(self, msgtype: str, raw: bytes, decoded, stamp_ns: int) -> float:
        """The message's own header stamp (the time the nodes under test act on), else the bag time."""
        if msgtype not in self._has_header:
            cls = import_message_class(msgtype)
            self._has_header[msgtype] = cls is not None and "header" in cls.get_fields_and_field_types()
        if self._has_header[msgtype]:
            msg = decoded if decoded is not None else typestore().deserialize_cdr(raw, msgtype)
            t = stamp_to_sec(msg.header.stamp)
            if t > 0:
                return t
        return stamp_ns * 1e-9

    def play(self) -> PlayResult:
        topics = list(self.publishers)
        t0 = None
        wall0 = time.monotonic()
        paused = 0.0
        next_boundary = None
        last_clock = -math.inf
        router_checked = False
        # Order by the messages' own stamps, a joint state before the other sensors of its time
        # (the simulator's order: a control tick at t sees the other sensors' previous samples).
        timeline = []
        for index, (topic, msgtype, stamp_ns, raw, decoded) in enumerate(
                read_messages(self.bag, self.report, topics)):
            t = self._message_time(msgtype, raw, decoded, stamp_ns)
            timeline.append((round(t, 9), 0 if topic == self._joint_topic else 1, index, topic, raw, decoded))
        timeline.sort(key=lambda item: item[:3])
        for t, _priority, _index, topic, raw, decoded in timeline:
            if t0 is None:
                t0 = t
                if self.lockstep_period > 0:
                    next_boundary = (math.floor(t / self.lockstep_period) + 1) * self.lockstep_period
            end = self.duration is not None and t - t0 > self.duration + 1e-9
            # like the simulator: the state stamped at the boundary goes out, then the clock waits
            # (at the end of a `duration`, for every boundary it covers)
            horizon = t0 + self.duration + 2e-9 if end else t
            while next_boundary is not None and next_boundary < horizon - 1e-9:
                self._publish_clock(next_boundary)
                last_clock = next_boundary
                paused += self._wait_decision(next_boundary - self.lockstep_lag)
                next_boundary += self.lockstep_period
            if end:
                break
            if self.rate > 0:
                delay = wall0 + paused + (t - t0) / self.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            if self.control_lockstep_timeout > 0 and topic == self._joint_topic:
                if not router_checked:
                    router_checked = True
                    paused += self._wait_for_router()
                paused += self.handover.wait()
            if decoded is not None:
                self.publishers[topic].publish(to_ros_message(decoded, self.classes[topic]))
            else:
                self.publishers[topic].publish(raw)
            self.result.published[topic] = self.result.published.get(topic, 0) + 1
            if t > last_clock:                        # after the message: a tick at t sees it
                self._publish_clock(t)
                last_clock = t
            if self.lockstep_period > 0 and topic == self._events_topic:
                self.events.on_announced()
                paused += self.events.wait(self.lockstep_timeout, time.sleep, poll=0.002)
            if self.control_lockstep_timeout > 0 and topic == self._joint_topic:
                paused += self._wait_command(t)
        if next_boundary is not None and last_clock > -math.inf:
            # the decision due at the last boundary the clock reached (its own wait lay past the
            # end) must be out before the recording stops, however long it takes on a loaded machine
            paused += self._wait_decision(math.floor(last_clock / self.lockstep_period + 1e-9) * self.lockstep_period)
        self.result.handover_timeouts = self.handover.timeouts
        self.result.sim_seconds = 0.0 if t0 is None else max(0.0, last_clock - t0)
        return self.result
