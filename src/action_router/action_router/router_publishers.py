"""The router node's outputs: its lifecycle publishers and the messages it refills every tick.

``<controller_name>/commands`` (Float64MultiArray, in the order of ``joints``), ``motor_command``
(MotorCommand), ``router_status`` (RouterStatus), ``cmd_vel`` (Twist, on change and at least at
50 Hz), ``decision_request`` and ``sound`` (String).
"""
from __future__ import annotations

import math
from typing import Sequence

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Twist
from std_msgs.msg import Float64MultiArray, String

from csr_llm_common.ros import qos
from csr_llm_msgs.msg import MotorCommand, RouterStatus

from .outputs import Command
from .router_messages import motor_command_message

TWIST_REPEAT_S = 0.02     # an unchanged twist is still sent this often (50 Hz)


class RouterPublishers:
    """Created at configure, destroyed at cleanup."""

    def __init__(self, node, controller: str, joints: Sequence[str]):
        reliable = qos.COMMANDS

        def publisher(msg_type, topic, profile=reliable):
            return node.create_lifecycle_publisher(msg_type, topic, profile, event_callbacks=qos.quiet_publisher())

        self._effort = publisher(Float64MultiArray, f"{controller}/commands")
        self._motor = publisher(MotorCommand, "motor_command")
        self._status = publisher(RouterStatus, "router_status", qos.ROUTER_STATUS)
        self._cmd_vel = publisher(Twist, "cmd_vel")
        self._request = publisher(String, "decision_request")
        self._sound = publisher(String, "sound")
        self._effort_msg = Float64MultiArray()
        self._motor_msg = MotorCommand(joint_names=list(joints))
        self._last_twist = (math.nan, math.nan)
        self._last_twist_time = 0.0

    @property
    def motor_stamp(self) -> Time:
        """The stamp of the last motor_command sent."""
        return self._motor_msg.header.stamp

    def effort(self, cmd: Command) -> None:
        """The tick's efforts, first: the controller gets them before anything else is sent."""
        self._effort_msg.data = cmd.effort.tolist()
        self._effort.publish(self._effort_msg)

    def rest_of_command(self, cmd: Command, stamp: Time, now: float) -> None:
        """The tick's motor_command, base twist, decision requests and sounds."""
        self._motor.publish(motor_command_message(cmd, self._motor_msg, stamp))
        twist = (cmd.base_vx, cmd.base_wz)
        if twist != self._last_twist or now - self._last_twist_time >= TWIST_REPEAT_S:
            t = Twist()
            t.linear.x, t.angular.z = twist
            self._cmd_vel.publish(t)
            self._last_twist, self._last_twist_time = twist, now
        for reason in cmd.requests:
            self._request.publish(String(data=reason))
        for sound in cmd.sounds:
            self._sound.publish(String(data=sound))

    def status(self, msg: RouterStatus) -> None:
        self._status.publish(msg)

    def zero(self, effort_limit: Sequence[float], stamp: Time) -> None:
        """Zero effort, a stopped motor_command and a zero twist (the router left the active state)."""
        n = len(self._motor_msg.joint_names)
        self._effort_msg.data = [0.0] * n
        self._effort.publish(self._effort_msg)
        m = self._motor_msg
        m.header.stamp = stamp
        m.effort = [0.0] * n
        m.effort_limit = list(effort_limit)
        m.clamped = [False] * n
        m.execution_state = MotorCommand.EXEC_STOPPED
        m.source = MotorCommand.SOURCE_NONE
        m.sub_task = ""
        self._motor.publish(m)
        self._cmd_vel.publish(Twist())
        self._last_twist = (0.0, 0.0)

    def destroy(self, node) -> None:
        for p in (self._effort, self._motor, self._status, self._cmd_vel, self._request, self._sound):
            node.destroy_lifecycle_publisher(p)
