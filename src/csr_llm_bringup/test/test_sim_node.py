"""The simulator node in its own process over real DDS: clock, sensors, effort commands, lockstep."""
import signal
import subprocess
import sys
import threading
import time

from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from geometry_msgs.msg import WrenchStamped
from nav_msgs.msg import Odometry
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Imu, JointState, Range, Temperature
from std_msgs.msg import Float64MultiArray, String

from csr_llm_msgs.msg import Decision
from csr_llm_common.ros.spin import spinning
from csr_llm_common.ros.testing import wait_for
import pytest

pytestmark = pytest.mark.dds   # real nodes over Fast DDS (loopback)

RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
BEST_EFFORT = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)


class Probe:
    def __init__(self, node: Node):
        self.lock = threading.Lock()
        self.clock = -1.0
        self.js = None
        self.counts = {}
        self.temperature_frames = set()
        self.events = []
        self.zone = None
        subs = [(Clock, "/clock", self._on_clock, BEST_EFFORT), (JointState, "joint_states", self._on_js, BEST_EFFORT),
                (Odometry, "odom", self._count("odom"), RELIABLE), (Imu, "imu", self._count("imu"), RELIABLE),
                (WrenchStamped, "gripper/wrench", self._count("wrench"), RELIABLE),
                (Temperature, "motor_temperature", self._on_temp, RELIABLE),
                (Range, "proximity", self._count("proximity"), RELIABLE),
                (String, "zone", self._on_zone, RELIABLE), (String, "events", self._on_event, RELIABLE)]
        self.subs = [node.create_subscription(t, n, cb, q) for t, n, cb, q in subs]

    def _count(self, name):
        def cb(msg):
            with self.lock:
                self.counts[name] = self.counts.get(name, 0) + 1
        return cb

    def _on_clock(self, msg):
        with self.lock:
            self.clock = max(self.clock, msg.clock.sec + msg.clock.nanosec * 1e-9)

    def _on_js(self, msg):
        with self.lock:
            self.js = (msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9, list(msg.name), list(msg.position))

    def _on_temp(self, msg):
        with self.lock:
            self.temperature_frames.add(msg.header.frame_id)

    def _on_zone(self, msg):
        self.zone = msg.data

    def _on_event(self, msg):
        self.events.append(msg.data)


def wait_until(predicate, timeout, what):
    assert wait_for(predicate, timeout, step=0.02), f"timed out waiting for {what}"


def test_simulator_node_clock_sensors_efforts_and_lockstep():
    proc = subprocess.Popen(
        [sys.executable, "-m", "csr_llm_bringup.sim.simulator_node", "--ros-args",
         "-p", "real_time_factor:=0.0", "-p", "lockstep_decision_period:=0.5", "-p", "lockstep_timeout:=120.0",
         "-p", "temperature_hz:=20.0", "-p", "scenario:=none", "-p", "use_sim_time:=true"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with spinning() as spinner:
            node = spinner.create(Node, "sim_node_probe")
            probe = Probe(node)
            effort_pub = node.create_publisher(Float64MultiArray, "arm_controller/commands", RELIABLE)
            decision_pub = node.create_publisher(Decision, "decision", RELIABLE)

            # the clock runs to the first lockstep boundary and stops there
            wait_until(lambda: probe.clock >= 0.5, 60, "/clock to reach 0.5 s")
            time.sleep(1.0)
            assert probe.clock == 0.5
            wait_until(lambda: probe.js is not None and probe.counts.get("odom") and probe.counts.get("imu")
                     and probe.counts.get("wrench") and probe.counts.get("proximity") and probe.zone
                     and len(probe.temperature_frames) == 5, 20,
                     "joint_states, odom, imu, wrench, motor_temperature, proximity and zone")
            stamp, names, positions = probe.js
            assert names[:5] == ["arm_shoulder_pan", "arm_shoulder_lift", "arm_elbow", "arm_wrist", "gripper"]
            assert stamp <= 0.5
            pan_before = positions[0]
            assert abs(pan_before) < 0.01       # nothing drives the pan joint yet (no gravity load on it)
            assert probe.zone == "door"
            assert probe.temperature_frames == set(names[:5])

            # a bad command is ignored, a good one drives the arm once the clock runs again
            wait_until(lambda: effort_pub.get_subscription_count() > 0 and decision_pub.get_subscription_count() > 0,
                     20, "the simulator's command subscriptions")
            effort_pub.publish(Float64MultiArray(data=[1.0, 2.0, 3.0]))
            for _ in range(5):
                effort_pub.publish(Float64MultiArray(data=[6.0, 0.0, 0.0, 0.0, 0.0]))
                time.sleep(0.05)
            time.sleep(0.3)
            assert probe.clock == 0.5           # still waiting for the decision
            decision = Decision(intent="hold_position")
            decision.header.stamp.sec, decision.header.stamp.nanosec = 0, 500_000_000
            decision_pub.publish(decision)

            wait_until(lambda: probe.clock >= 1.0, 30, "/clock to move on to the next boundary")
            time.sleep(1.0)
            assert probe.clock == 1.0           # the next boundary waits again
            wait_until(lambda: probe.js[0] >= 0.99, 10, "joint_states at the next boundary")
            assert probe.js[2][0] > pan_before + 0.1   # the effort turned the arm
            proc.send_signal(signal.SIGINT)            # stop the traffic before this node goes
            proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    assert proc.returncode == 0, out
    assert "effort command with 3 values" in out
    assert "lockstep waits=2" in out or "lockstep waits=3" in out, out
