"""The router node's sensor subscriptions: each message -> one typed setter of the plain ``Router``.

Every callback reads the router at call time (it is replaced at configure and dropped at cleanup)
and stamps the sample with the node's sensor time base (the message stamp in a lockstepped run,
else the node clock). The ``decision`` callback and ``joint_states`` stay in the node: they drive
the lockstep handover and the control tick.
"""
from __future__ import annotations

import math
from typing import Any, Callable, List, Optional

from geometry_msgs.msg import WrenchStamped
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Image, Imu, Range, Temperature
from std_msgs.msg import Float32MultiArray, Header, String

from csr_llm_common.ros import qos
from csr_llm_common.ros.geometry import yaw_from_quaternion
from csr_llm_msgs.msg import Decision, DetectedObjects

from .camera_features import CameraFeatures, depth_from_image
from .router import Router


class RouterSensors:
    """Creates the input subscriptions of a configured router node and feeds its sensors to the router."""

    def __init__(self, router: Callable[[], Optional[Router]], camera: Callable[[], Optional[CameraFeatures]],
                 sensor_time: Callable[[Header], float], now: Callable[[], float]):
        self._router, self._camera = router, camera
        self._sensor_time, self._now = sensor_time, now

    def subscribe(self, node, group, vision_source: str, camera_topic: str,
                  on_decision: Callable[[Decision], None]) -> List[Any]:
        """The subscriptions, ``decision`` among them, in the order the executor serves them
        (latest value only for fast sensors: a controller never works through a backlog of old
        states); ``vision_source`` picks features, the depth camera or neither."""
        reliable = qos.COMMANDS
        subs = [
            node.create_subscription(Imu, "imu", self._on_imu, qos.SENSORS, callback_group=group),
            node.create_subscription(Odometry, "odom", self._on_odom, reliable, callback_group=group),
            node.create_subscription(WrenchStamped, "gripper/wrench", self._on_wrench, qos.SENSORS,
                                     callback_group=group),
            node.create_subscription(Temperature, "motor_temperature", self._on_temperature, reliable,
                                     callback_group=group),
            node.create_subscription(Range, "proximity", self._on_proximity, qos.SENSORS, callback_group=group),
            node.create_subscription(String, "zone", self._on_zone, reliable, callback_group=group),
            node.create_subscription(Decision, "decision", on_decision, reliable, callback_group=group),
            node.create_subscription(DetectedObjects, "detected_objects", self._on_objects, reliable,
                                     callback_group=group),
        ]
        if vision_source == "features":
            subs.append(node.create_subscription(Float32MultiArray, "vision_features", self._on_vision,
                                                 qos.best_effort(5), callback_group=group))
        elif vision_source == "camera":
            subs.append(node.create_subscription(Image, camera_topic, self._on_depth, qos.SENSORS,
                                                 callback_group=group))
        return subs

    def _on_imu(self, msg: Imu) -> None:
        r = self._router()
        if r is not None:
            a, w = msg.linear_acceleration, msg.angular_velocity
            r.set_imu((a.x, a.y, a.z), (w.x, w.y, w.z), self._sensor_time(msg.header))

    def _on_odom(self, msg: Odometry) -> None:
        r = self._router()
        if r is not None:
            p = msg.pose.pose
            try:
                yaw = yaw_from_quaternion(p.orientation)
            except (ValueError, OverflowError):
                yaw = math.nan
            r.set_odom(p.position.x, p.position.y, yaw, msg.twist.twist.linear.x, msg.twist.twist.angular.z,
                       self._sensor_time(msg.header))

    def _on_wrench(self, msg: WrenchStamped) -> None:
        r = self._router()
        if r is not None:
            f, t = msg.wrench.force, msg.wrench.torque
            r.set_wrench((f.x, f.y, f.z), self._sensor_time(msg.header), torque=(t.x, t.y, t.z))

    def _on_temperature(self, msg: Temperature) -> None:
        r = self._router()
        if r is not None:
            r.set_temperature(msg.header.frame_id, msg.temperature, self._sensor_time(msg.header))

    def _on_proximity(self, msg: Range) -> None:
        r = self._router()
        if r is not None:
            r.set_proximity(msg.range, self._sensor_time(msg.header), msg.min_range, msg.max_range)

    def _on_zone(self, msg: String) -> None:
        r = self._router()
        if r is not None:
            r.set_zone(msg.data)

    def _on_vision(self, msg: Float32MultiArray) -> None:
        r = self._router()
        if r is not None:
            r.set_vision(msg.data, self._now())

    def _on_depth(self, msg: Image) -> None:
        r, camera = self._router(), self._camera()
        if r is None or camera is None:
            return
        depth, why = depth_from_image(msg.encoding, msg.height, msg.width, msg.step, bool(msg.is_bigendian),
                                      msg.data)
        if depth is None:
            r.faults.record("depth_image", why)
            return
        camera.submit(depth, self._sensor_time(msg.header))

    def _on_objects(self, msg: DetectedObjects) -> None:
        r = self._router()
        if r is not None:
            positions = [(p.position.x, p.position.y, p.position.z) for p in msg.poses]
            r.set_objects(list(msg.names), positions, msg.header.frame_id, self._sensor_time(msg.header))
