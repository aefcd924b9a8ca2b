"""The ros_gz_bridge config maps Gazebo topics onto the names and types our nodes really use."""
import time

import yaml
from rclpy.node import Node

from action_router.router_node import RouterNode
from csr_llm_core.aggregator_node import AggregatorNode
from csr_llm_common.paths import config_dir
from csr_llm_common.ros.spin import spinning
import pytest

pytestmark = pytest.mark.dds   # real nodes over Fast DDS (loopback)

CLOCK = ("/clock", "rosgraph_msgs/msg/Clock")   # consumed by every node through use_sim_time


def endpoints(node: Node, names):
    """{(topic, type)} subscribed and published by the named nodes, as the ROS graph reports them."""
    subscribed, published = set(), set()
    for name in names:
        for topic, types_ in node.get_subscriber_names_and_types_by_node(name, "/"):
            subscribed |= {(topic, t) for t in types_}
        for topic, types_ in node.get_publisher_names_and_types_by_node(name, "/"):
            published |= {(topic, t) for t in types_}
    return subscribed, published


def test_bridge_topics_and_types_match_the_nodes():
    entries = yaml.safe_load((config_dir() / "gazebo" / "ros_gz_bridge.yaml").read_text())
    with spinning() as spinner:
        spinner.create(AggregatorNode)
        router = spinner.create(RouterNode, parameter_overrides=[])
        router.trigger_configure()
        probe = spinner.create(Node, "bridge_probe")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            subscribed, published = endpoints(probe, ["aggregator", "action_router"])
            if ("/cmd_vel", "geometry_msgs/msg/Twist") in published:
                break
            time.sleep(0.1)
        router.trigger_cleanup()
    assert entries, "empty bridge config"
    for entry in entries:
        topic = "/" + entry["ros_topic_name"].lstrip("/")
        pair = (topic, entry["ros_type_name"])
        assert entry["direction"] in ("GZ_TO_ROS", "ROS_TO_GZ", "BIDIRECTIONAL")
        assert entry["gz_topic_name"].startswith("/") and entry["gz_type_name"].startswith("gz.msgs.")
        if pair == CLOCK:
            continue
        if entry["direction"] == "GZ_TO_ROS":
            assert pair in subscribed, f"{pair} is bridged from Gazebo but no node subscribes it"
        else:
            assert pair in published, f"{pair} is bridged to Gazebo but no node publishes it"
    bridged = {"/" + e["ros_topic_name"].lstrip("/") for e in entries}
    for needed in ("/joint_states", "/imu", "/odom", "/gripper/wrench", "/cmd_vel", "/clock"):
        assert needed in bridged
