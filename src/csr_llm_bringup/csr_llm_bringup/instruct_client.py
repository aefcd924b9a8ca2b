"""`csr-llm instruct "ORDER"`: an Instruct action client (csr_llm_core/instruct_node.py serves it).

Prints each feedback and the result; exit code 0 when the order is done, 1 when it failed, was
refused or cancelled, 2 when no server answered. Past `timeout` seconds, or on Ctrl-C, it cancels
the goal (the instruct node then holds the robot) and waits for the cancelled result.
"""
from __future__ import annotations

import time
from typing import Optional

OUTCOME_NAMES = {1: "DONE", 2: "FAILED", 3: "REFUSED", 4: "CANCELLED"}
CANCEL_WAIT_S = 10.0


def feedback_line(feedback) -> str:
    decision = f"decision {feedback.decision_id}: {feedback.decision_intent}" if feedback.decision_intent \
        else "no decision yet"
    return f"[instruct] {feedback.state} ({decision}; router runs {feedback.running_task or 'nothing'})"


def send_order(order: str, *, action: str = "instruct", timeout: Optional[float] = None, wait: float = 10.0) -> int:
    import rclpy
    from rclpy.action import ActionClient
    from csr_llm_msgs.action import Instruct

    rclpy.init()
    node = rclpy.create_node("csr_llm_instruct")
    try:
        client = ActionClient(node, Instruct, action)
        if not client.wait_for_server(timeout_sec=wait):
            print(f"[instruct] no action server on {node.resolve_topic_name(action)} within {wait:g} s "
                  f"(is the graph running, in this ROS_DOMAIN_ID?)", flush=True)
            return 2
        sent = client.send_goal_async(Instruct.Goal(order=order),
                                      feedback_callback=lambda msg: print(feedback_line(msg.feedback), flush=True))
        rclpy.spin_until_future_complete(node, sent, timeout_sec=wait)
        handle = sent.result()
        if handle is None or not handle.accepted:
            print("[instruct] the order was not accepted", flush=True)
            return 2
        print(f"[instruct] order accepted: {order!r}", flush=True)
        result = handle.get_result_async()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not result.done() and (deadline is None or time.monotonic() < deadline):
                rclpy.spin_once(node, timeout_sec=0.1)
        except KeyboardInterrupt:
            print("[instruct] interrupted", flush=True)
        if not result.done():
            print("[instruct] cancelling the order (the robot holds)", flush=True)
            rclpy.spin_until_future_complete(node, handle.cancel_goal_async(), timeout_sec=CANCEL_WAIT_S)
            rclpy.spin_until_future_complete(node, result, timeout_sec=CANCEL_WAIT_S)
        if not result.done():
            print("[instruct] no result from the server", flush=True)
            return 1
        outcome = result.result().result
        print(f"[instruct] {OUTCOME_NAMES.get(outcome.outcome, outcome.outcome)}: {outcome.reason}"
              + (f" (intent {outcome.intent})" if outcome.intent else ""), flush=True)
        return 0 if outcome.outcome == Instruct.Result.OUTCOME_DONE else 1
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
