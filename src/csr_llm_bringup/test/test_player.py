"""Foreign bags replay over real DDS: usable topics arrive intact, unusable ones are reported and skipped."""
import time
from pathlib import Path

import pytest
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

from geometry_msgs.msg import Twist
from sensor_msgs.msg import Range
from std_msgs.msg import String
from csr_llm_core.ros.spin import spinning
from csr_llm_bringup.bag_io import inspect_bag
from csr_llm_bringup.player import BagPlayer

FOREIGN = Path("/work/shared/data/foreign_bags")
RELIABLE = QoSProfile(depth=5000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
pytestmark = [pytest.mark.skipif(not FOREIGN.is_dir(), reason="shared foreign bags not present"),
              pytest.mark.dds]   # real nodes over Fast DDS (loopback)


def play(folder, subscriptions, rate=0.0, duration=None):
    received = {topic: [] for topic, _ in subscriptions}
    report = inspect_bag(FOREIGN / folder)
    with spinning() as spinner:
        listener = spinner.create(Node, "bag_listener")
        for topic, cls in subscriptions:
            listener.create_subscription(cls, topic, received[topic].append, RELIABLE)
        player = BagPlayer(spinner.create(Node, "bag_player"), FOREIGN / folder, report, rate=rate,
                           duration=duration)
        assert player.wait_for_subscribers(10) == []
        result = player.play()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(len(received[t]) < result.published.get(t, 0) for t in received):
            time.sleep(0.05)
    return result, received


def test_chatter_db3_without_metadata_replays_every_message_in_order():
    result, received = play("foxglove_chatter_db3", [("/chatter", String)])
    assert result.published == {"/chatter": 7} and len(received["/chatter"]) == 7
    assert all(m.data for m in received["/chatter"])


def test_foxy_range_bag_is_converted_to_the_current_message_layout():
    result, received = play("CAVEAT_ait_range_foxy_sqlite3", [("/range", Range)])
    assert len(received["/range"]) == 2
    assert [m.range for m in received["/range"]] == [10.0, 20.0]          # the recorded values
    assert [m.header.stamp.nanosec for m in received["/range"]] == [90, 190]
    assert received["/range"][0].variance == 0.0        # a field Foxy's Range did not have


def test_turtlesim_bag_plays_standard_types_and_reports_the_unknown_one():
    result, received = play("jalenlv_turtlesim_subset_mcap", [("/turtle1/cmd_vel", Twist)], rate=20.0)
    assert result.published == {"/turtle1/cmd_vel": 18} and len(received["/turtle1/cmd_vel"]) == 18
    assert "turtlesim/msg/Pose is not available" in result.skipped["/turtle1/pose"]


def test_a_duration_plays_only_the_bags_first_seconds():
    # the bag's cmd_vel messages lie 0, 1.52, 2.67, 3.92, 5.27, ... s after its first one
    full, _ = play("jalenlv_turtlesim_subset_mcap", [("/turtle1/cmd_vel", Twist)], rate=0.0)
    result, received = play("jalenlv_turtlesim_subset_mcap", [("/turtle1/cmd_vel", Twist)], rate=0.0, duration=5.0)
    assert result.published == {"/turtle1/cmd_vel": 4} and len(received["/turtle1/cmd_vel"]) == 4
    assert 3.9 < result.sim_seconds <= 5.0 < full.sim_seconds


def test_unreadable_topics_are_skipped_with_the_reason():
    result, _ = play("BAD_rosbag2_talker_sqlite3", [])
    assert result.published == {}
    assert "metadata promises 10 messages" in result.skipped["/topic"]
