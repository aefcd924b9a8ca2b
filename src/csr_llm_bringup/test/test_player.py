"""Foreign bags replay over real DDS: usable topics arrive intact, unusable ones are reported and skipped."""
import math
import time
from pathlib import Path

import pytest
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

from geometry_msgs.msg import Twist
from sensor_msgs.msg import Range
from rosgraph_msgs.msg import Clock
from std_msgs.msg import Header, String
from csr_llm_msgs.msg import Decision
from csr_llm_common.ros.spin import spinning
from csr_llm_common.ros.stamps import sec_to_stamp, stamp_to_sec
from csr_llm_bringup.bag_io import inspect_bag
from csr_llm_bringup.lockstep import LockstepSettings
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


def test_a_decision_due_before_the_end_is_waited_for_before_play_returns():
    """With the replay profile's decision lag, the boundary at the end waits for the decision one
    period older; the one due at the last clock is waited for too, however late it comes."""
    report = inspect_bag(FOREIGN / "jalenlv_turtlesim_subset_mcap")
    with spinning() as spinner:
        decider = spinner.create(Node, "slow_decider")
        publisher = decider.create_publisher(Decision, "decision", RELIABLE)
        clocks, due, published = [], [], []     # due: (stamp, wall time its clock came)
        last_publish = [0.0]

        def on_clock(msg):       # a decision due at each whole second the clock passed
            clocks.append(stamp_to_sec(msg.clock))
            nxt = due[-1][0] + 1.0 if due else math.ceil(clocks[0])
            while nxt <= clocks[-1] + 1e-9:
                due.append((nxt, time.monotonic()))
                nxt += 1.0

        def publish_due():       # one at a time, 0.5 s each, as one model context decides
            if len(published) < len(due):
                stamp, seen = due[len(published)]
                if time.monotonic() >= max(seen, last_publish[0]) + 0.5:
                    publisher.publish(Decision(header=Header(stamp=sec_to_stamp(stamp)), decision_id=len(published)))
                    published.append(stamp)
                    last_publish[0] = time.monotonic()

        decider.create_subscription(Clock, "/clock", on_clock, 10)
        decider.create_timer(0.01, publish_due)
        player = BagPlayer(spinner.create(Node, "bag_player"), FOREIGN / "jalenlv_turtlesim_subset_mcap", report,
                           rate=0.0, lockstep=LockstepSettings(period=1.0, lag=1.0, timeout=10.0), duration=5.0)
        deadline = time.monotonic() + 10       # discovery: each side's subscription matched
        while time.monotonic() < deadline and not (publisher.get_subscription_count()
                                                   and player.clock_pub.get_subscription_count()):
            time.sleep(0.05)
        result = player.play()
        arrived, last_clock = list(published), max(clocks)
    assert result.lockstep_timeouts == 0 and result.lockstep_waits >= 5
    assert arrived and arrived[-1] == math.floor(last_clock + 1e-9), (arrived, last_clock)
