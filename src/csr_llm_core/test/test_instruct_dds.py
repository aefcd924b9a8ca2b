"""The Instruct action over DDS: the instruct node and a real router node in their own processes, this
process as the action client, the reasoning node (its decisions published here: no model), the
robot (joint states, odometry) and the event listener. Goal -> the order on `events` -> a
decision -> feedback -> DONE when the router finished the task; a cancel -> CANCELLED and the hold
reaches the router; a decision that is no task -> REFUSED. No aggregator runs: the instruct node
takes the first event-triggered decision after the order (order_goal.py)."""
import time
from pathlib import Path

import pytest
from rclpy.action import ActionClient
from rclpy.node import Node

from nav_msgs.msg import Odometry
from std_msgs.msg import String
from csr_llm_msgs.action import Instruct
from csr_llm_msgs.msg import Decision, RouterStatus
from csr_llm_common.ros import qos
from csr_llm_common.ros.intent_args import dict_to_arguments
from csr_llm_common.ros.spin import spinning
from csr_llm_common.ros.testing import JointStream, start_node, stop_node, wait_for

pytestmark = [pytest.mark.dds, pytest.mark.slow]

CONFIG = Path(__file__).resolve().parents[3] / "config"
JOINTS = ["arm_shoulder_pan", "arm_shoulder_lift", "arm_elbow", "arm_wrist", "gripper"]
WAREHOUSE = (2.27, -0.04)      # config/action_router.yaml zones.warehouse.goal


class Peer:
    """The test's side: action client, decisions, odometry, and what it hears."""

    def __init__(self, node: Node):
        self.node = node
        self.client = ActionClient(node, Instruct, "instruct")
        self.decisions = node.create_publisher(Decision, "decision", qos.DECISIONS)
        self.odom = node.create_publisher(Odometry, "odom", qos.RELIABLE_SENSORS)
        self.events, self.statuses, self.decided, self.feedback = [], [], [], []
        node.create_subscription(String, "events", lambda m: self.events.append(m.data), qos.EVENTS)
        node.create_subscription(RouterStatus, "router_status", self.statuses.append, qos.ROUTER_STATUS)
        node.create_subscription(Decision, "decision", self.decided.append, qos.DECISIONS)
        self.next_id = 0

    def decide(self, intent: str, **arguments) -> int:
        msg = Decision(decision_id=self.next_id, intent=intent, arguments=dict_to_arguments(arguments),
                       trigger=Decision.TRIGGER_EVENT)
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.decisions.publish(msg)
        self.next_id += 1
        return msg.decision_id

    def at(self, x: float, y: float) -> None:
        msg = Odometry()
        msg.header.stamp = self.node.get_clock().now().to_msg()
        msg.pose.pose.position.x, msg.pose.pose.position.y = x, y
        msg.pose.pose.orientation.w = 1.0
        self.odom.publish(msg)

    def send(self, order: str):
        """The goal handle once accepted, after the order went out on `events`."""
        self.feedback.clear()
        heard = len(self.events)
        sent = self.client.send_goal_async(Instruct.Goal(order=order),
                                           feedback_callback=lambda m: self.feedback.append(m.feedback))
        assert wait_for(sent.done, 10), "no answer to the goal"
        handle = sent.result()
        assert handle.accepted
        assert wait_for(lambda: f"operator: {order}" in self.events[heard:], 10), self.events
        return handle

    def result(self, handle, timeout: float = 20.0):
        future = handle.get_result_async()
        assert wait_for(future.done, timeout), f"no result; feedback {[f.state for f in self.feedback]}"
        return future.result().result

    def running(self, intent: str, timeout: float = 10.0) -> bool:
        return wait_for(lambda: self.statuses and self.statuses[-1].active_intent == intent, timeout)


def check_done(peer: Peer) -> None:
    peer.at(0.0, 0.0)
    handle = peer.send("go to the warehouse")
    peer.decide("move_to", zone="warehouse", speed=0.3)
    assert peer.running("move_to"), peer.statuses[-1:]
    assert wait_for(lambda: any(f.state.startswith("running move_to") for f in peer.feedback), 5), \
        [f.state for f in peer.feedback]
    assert any(f.decision_intent == "move_to" and f.running_task == "move_to" for f in peer.feedback)
    for _ in range(40):                          # the robot arrives: odometry at the zone's goal
        peer.at(*WAREHOUSE)
        time.sleep(0.05)
    result = peer.result(handle)
    assert (result.outcome, result.intent) == (Instruct.Result.OUTCOME_DONE, "move_to"), result


def check_cancel(peer: Peer) -> None:
    peer.at(0.0, 0.0)
    handle = peer.send("go to the warehouse")
    peer.decide("move_to", zone="warehouse", speed=0.1)
    assert peer.running("move_to"), peer.statuses[-1:]
    assert wait_for(lambda: any(f.state.startswith("running move_to") for f in peer.feedback), 5)
    cancelled = handle.cancel_goal_async()
    assert wait_for(cancelled.done, 10)
    result = peer.result(handle)
    assert result.outcome == Instruct.Result.OUTCOME_CANCELLED, result
    assert any(d.intent == "hold_position" and d.resource == "operator" for d in peer.decided)
    assert peer.running("hold_position"), peer.statuses[-1:]          # the hold reached the router
    assert peer.statuses[-1].paused_intent == "move_to"
    assert wait_for(lambda: "operator: cancel the order 'go to the warehouse', stay where you are" in peer.events, 5)


def check_refused(peer: Peer) -> None:
    handle = peer.send("dance for me")
    peer.decide("stop")
    result = peer.result(handle)
    assert (result.outcome, result.intent) == (Instruct.Result.OUTCOME_REFUSED, "stop"), result


def check_superseded(peer: Peer) -> None:
    first = peer.send("go to the door")
    second = peer.send("stay here")
    result = peer.result(first)
    assert result.outcome == Instruct.Result.OUTCOME_FAILED and "superseded" in result.reason, result
    peer.decide("hold_position")
    assert peer.result(second).outcome == Instruct.Result.OUTCOME_REFUSED


def test_instruct_action_over_dds():
    router = start_node("action_router.router_node", "autostart:=true", "decision_timeout_s:=0.0",
                        "state_timeout_s:=2.0", *[f"{name}_file:={CONFIG / file}" for name, file in (
                            ("robot_description", "robot_description.yaml"), ("subtasks", "router_subtasks.yaml"),
                            ("intents", "intents.yaml"))])
    instruct = start_node("csr_llm_core.instruct_node", "timeout_s:=30.0")
    try:
        with spinning() as sp:
            node = sp.create(Node, "instruct_dds_peer")
            peer = Peer(node)
            with JointStream(node, JOINTS, hz=200.0):
                assert peer.client.wait_for_server(timeout_sec=30), "no instruct action server"
                assert wait_for(lambda: peer.statuses, 30), "no router status"
                check_done(peer)
                check_cancel(peer)
                check_refused(peer)
                check_superseded(peer)
    finally:
        code, out = stop_node(instruct)
        _, router_out = stop_node(router)        # its own shutdown is test_node_dds.py's business
        print(out[-3000:])
        print(router_out[-3000:])
    assert code == 0, out[-3000:]
