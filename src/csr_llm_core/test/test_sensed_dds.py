"""The aggregator node alone, sensed lines on: proximity, zone, wrench, temperature and router status
messages published by the test become sensed StateChunks (no simulator, no model)."""
import math
import time

import pytest
from rclpy.node import Node
from rclpy.parameter import Parameter

from geometry_msgs.msg import WrenchStamped
from sensor_msgs.msg import Range, Temperature
from std_msgs.msg import String

from csr_llm_msgs.msg import RouterStatus, StateChunk
from csr_llm_common.ros import qos
from csr_llm_common.ros.spin import spinning
from csr_llm_common.ros.stamps import set_stamp
from csr_llm_common.ros.testing import wait_for
from csr_llm_core.aggregator_node import AggregatorNode

pytestmark = pytest.mark.dds   # real nodes (Fast DDS on loopback)


class SensorRig:
    """The robot's topics, published by the test."""

    def __init__(self, node: Node):
        self.node = node
        self.pubs = {name: node.create_publisher(msg_type, name, profile) for name, msg_type, profile in (
            ("proximity", Range, qos.COMMANDS), ("zone", String, qos.COMMANDS),
            ("gripper/wrench", WrenchStamped, qos.COMMANDS), ("motor_temperature", Temperature, qos.COMMANDS),
            ("router_status", RouterStatus, qos.ROUTER_STATUS))}

    def matched(self) -> bool:
        return all(pub.get_subscription_count() > 0 for pub in self.pubs.values())

    def range(self, stamp: float, distance: float) -> None:
        msg = Range(range=distance, min_range=0.0, max_range=5.0)
        set_stamp(msg.header.stamp, stamp)
        self.pubs["proximity"].publish(msg)

    def wrench(self, stamp: float, fz: float) -> None:
        msg = WrenchStamped()
        msg.wrench.force.z = fz
        set_stamp(msg.header.stamp, stamp)
        self.pubs["gripper/wrench"].publish(msg)

    def temperature(self, stamp: float, motor: str, celsius: float) -> None:
        msg = Temperature(temperature=celsius)
        msg.header.frame_id = motor
        set_stamp(msg.header.stamp, stamp)
        self.pubs["motor_temperature"].publish(msg)

    def zone(self, name: str) -> None:
        self.pubs["zone"].publish(String(data=name))

    def router(self, stamp: float, intent: str, sub_task: str, slip: bool = False) -> None:
        msg = RouterStatus(active_intent=intent, active_sub_task=sub_task, slip_detected=slip)
        set_stamp(msg.header.stamp, stamp)
        self.pubs["router_status"].publish(msg)


def test_the_aggregator_writes_sensed_lines_from_the_robots_topics(tmp_path):
    situations = tmp_path / "situations.yaml"
    situations.write_text("zone: {dwell_s: 0.0, min_interval_s: 0.0}\n")
    chunks = []
    with spinning() as spinner:
        agg = spinner.create(AggregatorNode, parameter_overrides=[
            Parameter("sensed_lines", value=True), Parameter("situations_file", value=str(situations)),
            Parameter("reliable_sensors", value=True)])
        probe = spinner.create(Node, "sensed_probe")
        probe.create_subscription(StateChunk, "state_chunks", chunks.append, qos.CHUNK_STREAM)
        rig = SensorRig(probe)
        assert wait_for(rig.matched, 20.0), "the aggregator's subscriptions did not match"
        sensed = lambda: [c for c in chunks if c.source_topic == "/sensed"]   # noqa: E731

        def expect(n: int) -> None:
            assert wait_for(lambda: len(sensed()) >= n, 10.0), [c.text for c in sensed()]

        base = agg.get_clock().now().nanoseconds * 1e-9 - 8.0
        rig.router(base, "pick_object", "grip_object")
        time.sleep(0.3)
        rig.range(base + 0.5, 1.5)
        expect(1)
        rig.range(base + 1.6, 0.5)
        expect(2)
        for dt in (2.0, 2.1, 2.3):
            rig.wrench(base + dt, 20.0)
            time.sleep(0.05)
        expect(3)
        rig.temperature(base + 3.0, "arm_elbow", 75.0)
        expect(4)
        rig.zone("corridor")          # the start zone: no arrival
        time.sleep(0.3)
        rig.zone("warehouse")
        expect(5)
        rig.router(base + 4.0, "pick_object", "lift_object")
        expect(6)
        rig.router(base + 5.0, "", "hold")
        expect(7)
        rig.range(base + 6.0, math.nan)                       # impossible: no line
        rig.router(base + 6.1, "", "hold", slip=True)
        rig.router(base + 6.4, "", "hold", slip=True)
        expect(8)
        time.sleep(0.3)
    texts = [c.text.split(" sensed: ", 1)[1] for c in sensed()]
    assert texts == ["person approaching (1.5 m)", "person close to the robot (0.50 m)", "object gripped (20 N)",
                     "motor arm_elbow above 70 C (75 C)", "arrived in the warehouse",
                     "sub-task grip_object of pick_object done", "object lifted (20 N held); task pick_object done",
                     "base slipping (wheels and IMU disagree)"]
    lines = sensed()
    events = [c.text.split(" sensed: ", 1)[1] for c in lines if c.kind == StateChunk.KIND_EVENT]
    assert events == ["arrived in the warehouse", "object lifted (20 N held); task pick_object done"]
    assert all(c.kind in (StateChunk.KIND_EVENT, StateChunk.KIND_CONTINUOUS) for c in lines)
    for chunk in lines:
        stamp = chunk.header.stamp.sec + chunk.header.stamp.nanosec * 1e-9
        assert chunk.text.startswith(f"[{stamp:.1f}s] sensed: ")
    first = lines[0].header.stamp
    assert abs(first.sec + first.nanosec * 1e-9 - (base + 0.5)) < 1e-6     # the Range message's own stamp
    seqs = [c.seq for c in chunks if c.kind != StateChunk.KIND_WATERMARK]
    assert seqs == list(range(len(seqs)))                                     # one gap-free sequence
    assert agg.faults.counts.get("sensed:proximity:nonfinite") == 1


def test_sensed_lines_are_off_by_default_and_add_no_subscription():
    with spinning() as spinner:
        agg = spinner.create(AggregatorNode)
        assert agg.situations is None
        assert agg.get_parameter("sensed_lines").value is False
        topics = {sub.topic_name for sub in agg._sensor_subscriptions}
        assert not topics & {"/proximity", "/zone", "/router_status"}
