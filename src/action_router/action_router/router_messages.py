"""ROS messages of the router node from the plain router's outputs (no rclpy: message classes only)."""
from __future__ import annotations

import math

from builtin_interfaces.msg import Time
from csr_llm_common.ros.intent_args import dict_to_arguments
from csr_llm_msgs.msg import MotorCommand, RouterStatus

from .outputs import Command, RouterStatusSnapshot


def motor_command_message(cmd: Command, msg: MotorCommand, stamp: Time) -> MotorCommand:
    """Fill ``msg`` (joint_names already set) from one tick's command."""
    msg.header.stamp = stamp
    msg.effort = cmd.effort.tolist()
    msg.effort_limit = cmd.effort_limit.tolist()
    msg.clamped = cmd.clamped.tolist()
    msg.reference_position = cmd.reference_position.tolist() if cmd.tracking else [math.nan] * len(cmd.effort)
    msg.execution_state = int(cmd.execution_state)
    msg.source = int(cmd.source)
    msg.sub_task = cmd.sub_task
    return msg


def router_status_message(status: RouterStatusSnapshot, stamp: Time, loop_hz: float,
                          last_decision_id: int = -1) -> RouterStatus:
    """RouterStatus from the router's snapshot (same field names), the node's loop rate and the
    newest decision it accepted."""
    msg = RouterStatus(
        active_intent=status.active_intent, active_sub_task=status.active_sub_task, zone=status.zone,
        match_similarity=status.match_similarity, match_threshold=status.match_threshold,
        l1_hit=status.l1_hit, l2_hit=status.l2_hit, l3_clamped=status.l3_clamped,
        l1_us=status.l1_us, l2_us=status.l2_us, l3_us=status.l3_us,
        task_hit_rate=status.task_hit_rate, behaviour_hit_rate=status.behaviour_hit_rate,
        execution_hit_rate=status.execution_hit_rate, interrupt_depth=status.interrupt_depth,
        active_reflexes=list(status.active_reflexes),
        execution_state=status.execution_state, loop_hz=float(loop_hz), slip_detected=status.slip_detected,
        odom_weight=status.odom_weight, slip_events=status.slip_events,
        unknown_scene_count=status.unknown_scene_count, grip_done_count=status.grip_done_count,
        derate_count=status.derate_count, confidence_flips=status.confidence_flips,
        failsafe_count=status.failsafe_count, input_faults=status.input_faults,
        last_decision_id=int(last_decision_id))
    if status.paused is not None:
        msg.paused_intent = status.paused.intent
        msg.paused_arguments = dict_to_arguments(status.paused.arguments)
    msg.header.stamp = stamp
    return msg
