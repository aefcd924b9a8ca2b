"""The load bench's robot and observer on DDS (ROS module).

`RobotStream` publishes what a robot's drivers would, from a thread of its own on the wall clock:
``joint_states`` at 200 Hz (joints following the router's reference, load_robot.FirstOrderFollower),
``imu`` and ``gripper/wrench`` at 100 Hz, ``odom`` at 50 Hz, ``proximity`` at 10 Hz, one
``motor_temperature`` per joint and ``zone`` at 1 Hz; in a hostile `StreamMode` it publishes NaN
joint states, arrays of the wrong length or temperatures of -300 C instead. Events go out on
``events`` from the caller's thread. `GraphObserver` records what the graph publishes: decisions and
event chunks (into a DecisionMatcher; the events waiting for a decision over time), ``csr_status``
(backlog, skipped periodic decisions), ``router_status`` (loop rate), all on time.monotonic().
"""
from __future__ import annotations

import math
import threading
import time
from typing import Callable, List, Optional, Sequence, Tuple

from geometry_msgs.msg import WrenchStamped
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Imu, JointState, Range, Temperature
from std_msgs.msg import String

from csr_llm_msgs.msg import CsrStatus, Decision, MotorCommand, RouterStatus, StateChunk
from csr_llm_common.ros import qos

from .load_metrics import DecisionMatcher, coalesced_count, skipped_periodic_of
from .load_robot import IMPOSSIBLE_TEMPERATURE_C, FirstOrderFollower, StreamMode

STREAM_HZ = 200.0
# publish every Nth stream tick: 200 Hz joint states, then the other sensors' rates
EVERY = {"imu": 2, "wrench": 2, "odom": 4, "proximity": 20, "slow": 200}
Samples = List[Tuple[float, Optional[float]]]


class RobotStream:
    """The robot's sensor topics from a background thread; `mode` switches to a hostile input."""

    def __init__(self, node, joints: Sequence[str], hz: float = STREAM_HZ):
        reliable = qos.COMMANDS        # a reliable writer reaches best-effort and reliable readers
        quiet = qos.quiet_publisher()
        self.node, self.joints, self.period = node, list(joints), 1.0 / hz
        self.follower = FirstOrderFollower(len(self.joints))
        self.mode = StreamMode.NORMAL
        topics = (("joints", JointState, "joint_states"), ("imu", Imu, "imu"), ("odom", Odometry, "odom"),
                  ("wrench", WrenchStamped, "gripper/wrench"), ("temperature", Temperature, "motor_temperature"),
                  ("proximity", Range, "proximity"), ("zone", String, "zone"))
        self.pubs = {name: node.create_publisher(kind, topic, reliable, event_callbacks=quiet)
                     for name, kind, topic in topics}
        self.events = node.create_publisher(String, "events", qos.EVENTS, event_callbacks=quiet)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="robot-stream", daemon=True)
        self.ticks = 0

    def follow(self, msg: MotorCommand) -> None:
        with self._lock:
            self.follower.set_reference(list(msg.reference_position))

    def publish_event(self, text: str) -> None:
        self.events.publish(String(data=text))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self._tick()
            next_at += self.period
            delay = next_at - time.monotonic()
            if delay < -0.1:                 # fell far behind (a loaded machine): no catch-up burst
                next_at, delay = time.monotonic(), 0.0
            if delay > 0:
                time.sleep(delay)

    def _tick(self) -> None:
        stamp = self.node.get_clock().now().to_msg()
        with self._lock:
            positions, velocities = self.follower.step(self.period)
            positions, velocities = list(positions), list(velocities)
        self.pubs["joints"].publish(self._joint_state(stamp, positions, velocities))
        n = self.ticks
        self.ticks += 1
        if n % EVERY["imu"] == 0:
            self.pubs["imu"].publish(self._imu(stamp))
        if n % EVERY["wrench"] == 0:
            msg = WrenchStamped()
            msg.header.stamp, msg.header.frame_id = stamp, "gripper"
            msg.wrench.force.z = 2.0 + 0.2 * math.sin(0.5 * n * self.period)
            self.pubs["wrench"].publish(msg)
        if n % EVERY["odom"] == 0:
            self.pubs["odom"].publish(self._odom(stamp, n * self.period))
        if n % EVERY["proximity"] == 0:
            self.pubs["proximity"].publish(self._proximity(stamp, n * self.period))
        if n % EVERY["slow"] == 0:
            self._publish_slow(stamp)

    def _joint_state(self, stamp, positions: List[float], velocities: List[float]) -> JointState:
        names = list(self.joints)
        if self.mode is StreamMode.NAN_JOINT_STATES:
            positions, velocities = [math.nan] * len(names), [math.nan] * len(names)
        elif self.mode is StreamMode.WRONG_LENGTH_ARRAYS:
            positions, velocities = positions[:-2], velocities + [0.0, 0.0, 0.0]
        msg = JointState(name=names, position=positions, velocity=velocities)
        msg.header.stamp = stamp
        return msg

    def _imu(self, stamp) -> Imu:
        msg = Imu()
        msg.header.stamp, msg.header.frame_id = stamp, "base_link"
        msg.linear_acceleration.z = 9.81
        msg.orientation.w = 1.0
        return msg

    def _odom(self, stamp, t: float) -> Odometry:
        msg = Odometry()
        msg.header.stamp, msg.header.frame_id, msg.child_frame_id = stamp, "odom", "base_link"
        msg.pose.pose.position.x = 0.05 * math.sin(0.1 * t)        # the base creeps back and forth
        msg.pose.pose.orientation.w = 1.0
        msg.twist.twist.linear.x = 0.005 * math.cos(0.1 * t)
        return msg

    def _proximity(self, stamp, t: float) -> Range:
        msg = Range(radiation_type=Range.INFRARED, field_of_view=2.0 * math.pi, min_range=0.0, max_range=5.0)
        msg.header.stamp, msg.header.frame_id = stamp, "base_link"
        msg.range = 3.0 + 1.5 * math.sin(0.05 * t)                 # a person walking by, far
        return msg

    def _publish_slow(self, stamp) -> None:
        hot = self.mode is StreamMode.IMPOSSIBLE_TEMPERATURES
        for i, joint in enumerate(self.joints):
            msg = Temperature(temperature=IMPOSSIBLE_TEMPERATURE_C if hot else 38.0 + i, variance=0.0)
            msg.header.stamp, msg.header.frame_id = stamp, joint
            self.pubs["temperature"].publish(msg)
        self.pubs["zone"].publish(String(data="warehouse"))


class GraphObserver:
    """Subscriptions to the graph's outputs; every record on time.monotonic()."""

    def __init__(self, node, matcher: DecisionMatcher, on_command: Callable[[MotorCommand], None]):
        self.matcher = matcher
        self._lock = threading.Lock()
        self.decision_times: List[float] = []
        self.backlog: Samples = []
        self.skipped_periodic: Samples = []
        self.loop_hz: Samples = []
        self.coalesced: List[Tuple[float, int]] = []
        self.waiting_events: Samples = []
        quiet = qos.quiet_subscription()
        node.create_subscription(Decision, "decision", self._on_decision, qos.DECISIONS, event_callbacks=quiet)
        node.create_subscription(StateChunk, "state_chunks", self._on_chunk, qos.CHUNK_STREAM, event_callbacks=quiet)
        node.create_subscription(CsrStatus, "csr_status", self._on_csr_status, 10, event_callbacks=quiet)
        node.create_subscription(RouterStatus, "router_status", self._on_router_status, qos.ROUTER_STATUS,
                                 event_callbacks=quiet)
        node.create_subscription(MotorCommand, "motor_command", on_command, qos.LATEST, event_callbacks=quiet)

    def _on_decision(self, msg: Decision) -> None:
        now = time.monotonic()
        with self._lock:
            self.decision_times.append(now)
            self.matcher.on_decision(int(msg.decision_id), int(msg.trigger), int(msg.last_chunk_seq), now)
            self.waiting_events.append((now, float(self.matcher.waiting_events)))

    def _on_chunk(self, msg: StateChunk) -> None:
        now = time.monotonic()
        with self._lock:
            self.matcher.on_chunk(int(msg.seq), int(msg.kind), msg.text, now)
            if msg.kind == StateChunk.KIND_EVENT:
                self.waiting_events.append((now, float(self.matcher.waiting_events)))
            count = coalesced_count(msg.text)
            if count:
                self.coalesced.append((now, count))

    def _on_csr_status(self, msg: CsrStatus) -> None:
        now = time.monotonic()
        skipped = skipped_periodic_of(msg)
        with self._lock:
            self.backlog.append((now, float(msg.backlog_chunks)))
            self.skipped_periodic.append((now, None if skipped is None else float(skipped)))

    def _on_router_status(self, msg: RouterStatus) -> None:
        with self._lock:
            self.loop_hz.append((time.monotonic(), float(msg.loop_hz)))

    def locked(self) -> threading.Lock:
        """Held while reading the records (the callbacks append under it)."""
        return self._lock
