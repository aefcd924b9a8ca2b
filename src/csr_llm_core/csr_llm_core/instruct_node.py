"""Instruct node: the csr_llm_msgs/action/Instruct action server (an operator's order in, its outcome out).

Wires one OrderGoal (order_goal.py) at a time to the graph: the order goes out on ``events``
(std_msgs/String), ``state_chunks``, ``decision`` and ``router_status`` feed it, its feedback and
result go to the action client. A new goal supersedes (aborts) the running one. A cancelled goal
holds the robot: a ``hold_position`` decision on ``decision`` (decision_id = the newest seen, so
lockstep's hand-over waits for nothing new) and a line on ``events`` telling the reasoning node
the order was cancelled. docs/orders.md.
"""
from __future__ import annotations

import csr_llm_common.stop_signal  # noqa: F401 - first: a Ctrl-C during the slow imports below is caught

import sys
from dataclasses import dataclass
from typing import Optional

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.action.server import ServerGoalHandle
from rclpy.node import Node
from rclpy.task import Future

from std_msgs.msg import String

from csr_llm_msgs.action import Instruct
from csr_llm_msgs.msg import Decision, RouterStatus, StateChunk

from .order_goal import (DecisionSample, OrderConfig, OrderFeedback, OrderGoal, OrderResult, Outcome, RouterReport,
                         cancel_line, task_intents)
from .task_situations import router_sample
from csr_llm_common.catalogue import IntentCatalogue
from csr_llm_common.paths import config_file, expand_path
from csr_llm_common.ros import qos
from csr_llm_common.ros.node import run_node
from csr_llm_common.ros.params import declare_dataclass

HOLD_INTENT = "hold_position"


def decision_sample(msg: Decision) -> DecisionSample:
    return DecisionSample(decision_id=int(msg.decision_id), intent=msg.intent,
                          last_chunk_seq=int(msg.last_chunk_seq), event_triggered=msg.trigger == Decision.TRIGGER_EVENT)


def router_report(msg: RouterStatus) -> RouterReport:
    return RouterReport(router_sample(msg), last_decision_id=int(msg.last_decision_id))


@dataclass
class ActiveGoal:
    """One accepted goal: its state machine, its handle, the future its execute callback awaits."""
    order: OrderGoal
    handle: ServerGoalHandle
    done: Future
    sent: Optional[OrderFeedback] = None


class InstructNode(Node):
    def __init__(self, **kwargs):
        super().__init__("instruct", **kwargs)
        self.config = declare_dataclass(self, OrderConfig())
        path = expand_path(self.config.intents_file) or str(config_file("intents.yaml"))
        catalogue = IntentCatalogue.from_file(path)
        if HOLD_INTENT not in catalogue:
            raise ValueError(f"{path} has no {HOLD_INTENT} intent: a cancelled order could not hold the robot")
        self.is_task = task_intents(catalogue)
        self.goal: Optional[ActiveGoal] = None
        self.newest_decision_id = -1
        self.events = self.create_publisher(String, "events", qos.EVENTS, event_callbacks=qos.quiet_publisher())
        self.hold = self.create_publisher(Decision, "decision", qos.DECISIONS, event_callbacks=qos.quiet_publisher())
        self.create_subscription(StateChunk, "state_chunks", self._on_chunk, qos.CHUNK_STREAM)
        self.create_subscription(Decision, "decision", self._on_decision, qos.DECISIONS)
        self.create_subscription(RouterStatus, "router_status", self._on_router, qos.ROUTER_STATUS)
        self.create_timer(self.config.tick_period_s, self._tick)
        self.server = ActionServer(self, Instruct, "instruct", execute_callback=self._execute,
                                   goal_callback=lambda _request: GoalResponse.ACCEPT,
                                   handle_accepted_callback=self._accepted,
                                   cancel_callback=lambda _handle: CancelResponse.ACCEPT)
        self.get_logger().info(f"serving {self.resolve_topic_name('instruct')} (orders go out on "
                               f"{self.resolve_topic_name('events')}; intents from {path})")

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _accepted(self, handle: ServerGoalHandle) -> None:
        if self.goal is not None:
            self._finish(self.goal.order.supersede())
        order = OrderGoal(handle.request.order, self.is_task, self._now(), self.config,
                          expects_chunk=self.count_publishers("state_chunks") > 0)
        self.goal = ActiveGoal(order, handle, Future())
        self.events.publish(String(data=order.line))
        self.get_logger().info(f"order: {order.line!r}")
        handle.execute()

    async def _execute(self, handle: ServerGoalHandle) -> Instruct.Result:
        goal = self.goal
        if goal is None or goal.handle is not handle:     # superseded before it started
            handle.abort()
            return Instruct.Result(outcome=Outcome.FAILED, reason="superseded by a newer order")
        result: OrderResult = await goal.done
        if result.outcome is Outcome.DONE:
            handle.succeed()
        elif result.outcome is Outcome.CANCELLED and handle.is_cancel_requested:
            handle.canceled()
        else:
            handle.abort()
        self.get_logger().info(f"order {goal.order.order!r}: {result.outcome.name} ({result.reason})")
        return Instruct.Result(outcome=int(result.outcome), reason=result.reason, intent=result.intent)

    def _on_chunk(self, msg: StateChunk) -> None:
        if self.goal is not None:
            self.goal.order.on_chunk(int(msg.seq), msg.text, msg.kind == StateChunk.KIND_EVENT)

    def _on_decision(self, msg: Decision) -> None:
        self.newest_decision_id = max(self.newest_decision_id, int(msg.decision_id))
        if self.goal is not None:
            self._advance(self.goal.order.on_decision(decision_sample(msg), self._now()))

    def _on_router(self, msg: RouterStatus) -> None:
        if self.goal is not None:
            self._advance(self.goal.order.on_router(router_report(msg)))

    def _tick(self) -> None:
        if self.goal is None:
            return
        if self.goal.handle.is_cancel_requested:
            self._hold(self.goal.order.order)
            self._finish(self.goal.order.cancel())
            return
        self._advance(self.goal.order.tick(self._now()))

    def _advance(self, result: Optional[OrderResult]) -> None:
        goal = self.goal
        if goal is None:
            return
        feedback = goal.order.feedback()
        if result is None and feedback != goal.sent:
            goal.sent = feedback
            goal.handle.publish_feedback(Instruct.Feedback(
                state=feedback.state, decision_id=feedback.decision_id, decision_intent=feedback.decision_intent,
                running_task=feedback.running_task))
        if result is not None:
            self._finish(result)

    def _finish(self, result: OrderResult) -> None:
        goal, self.goal = self.goal, None
        if goal is not None and not goal.done.done():
            goal.done.set_result(result)

    def _hold(self, order: str) -> None:
        """The robot holds at once (the router takes the decision), and the reasoning node reads why."""
        msg = Decision(decision_id=max(self.newest_decision_id, 0), intent=HOLD_INTENT,
                       trigger=Decision.TRIGGER_REQUEST, resource="operator",
                       raw_output=f"cancelled order: {order}")
        msg.header.stamp = self.get_clock().now().to_msg()
        self.hold.publish(msg)
        self.events.publish(String(data=cancel_line(self.config.speaker, order)))


def main(args=None) -> int:
    return run_node(InstructNode, args)


if __name__ == "__main__":
    sys.exit(main())
