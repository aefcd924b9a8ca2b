"""The simulator node's sensor topics: publishers and their preallocated messages (ROS module).

Publishes (relative names) ``joint_states`` (the ``joints`` order, then the wheels if
``publish_wheels``), ``imu``, ``odom``, ``gripper/wrench``, ``motor_temperature`` (one message per
joint, header.frame_id = joint), ``proximity`` (sensor_msgs/Range), ``zone`` and
``detected_objects`` (csr_llm_msgs/DetectedObjects: the placed objects in the base frame, as a
perception node would report them), and the head depth camera as an RGB-D driver publishes it:
``camera/depth/image_raw`` (sensor_msgs/Image, 32FC1 metres, +inf = no return, REP 118) and
``camera/depth/camera_info`` (sensor_msgs/CameraInfo, pinhole, no distortion).

The physics thread publishes these at up to 1 kHz, so every message except detected_objects is
built once and refilled in place: the joint state's arrays are written through numpy views on the
message's own buffers, and every header holds the node's one ``stamp`` object, so setting the
stamp once (``SimulatorNode._set_stamp``) stamps them all.
"""
from __future__ import annotations

import array
import math
from typing import List, Sequence

import numpy as np

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Pose, WrenchStamped
from nav_msgs.msg import Odometry
from sensor_msgs.msg import CameraInfo, Image, Imu, JointState, Range, Temperature
from std_msgs.msg import String

from csr_llm_msgs.msg import DetectedObjects
from csr_llm_common.ros import qos

from .robot_model import JOINTS
from .simulator import Simulator

RELIABLE = qos.COMMANDS


class SensorPublishers:
    """Sensor publishers of `node`, filled from `sim` at the shared `stamp`."""

    def __init__(self, node, sim: Simulator, joints: Sequence[str], stamp: Time, base_frame: str, odom_frame: str,
                 max_range: float, publish_wheels: bool, camera_frame: str = "camera_depth_optical_frame"):
        self.sim = sim
        self.stamp = stamp
        self.base_frame = base_frame
        self.max_range = max_range
        self.publish_wheels = publish_wheels
        self.pub_js = node.create_publisher(JointState, "joint_states", RELIABLE, event_callbacks=qos.quiet_publisher())
        self.pub_imu = node.create_publisher(Imu, "imu", RELIABLE, event_callbacks=qos.quiet_publisher())
        self.pub_odom = node.create_publisher(Odometry, "odom", RELIABLE, event_callbacks=qos.quiet_publisher())
        self.pub_wrench = node.create_publisher(WrenchStamped, "gripper/wrench", RELIABLE,
                                                event_callbacks=qos.quiet_publisher())
        self.pub_temp = node.create_publisher(Temperature, "motor_temperature", RELIABLE,
                                              event_callbacks=qos.quiet_publisher())
        self.pub_range = node.create_publisher(Range, "proximity", RELIABLE, event_callbacks=qos.quiet_publisher())
        self.pub_zone = node.create_publisher(String, "zone", RELIABLE, event_callbacks=qos.quiet_publisher())
        self.pub_objects = node.create_publisher(DetectedObjects, "detected_objects", RELIABLE,
                                                 event_callbacks=qos.quiet_publisher())
        self.pub_depth = node.create_publisher(Image, "camera/depth/image_raw", qos.SENSORS,
                                               event_callbacks=qos.quiet_publisher())
        self.pub_info = node.create_publisher(CameraInfo, "camera/depth/camera_info", qos.SENSORS,
                                              event_callbacks=qos.quiet_publisher())
        spec = sim.camera.spec
        fx, fy, cx, cy = spec.intrinsics()
        self.msg_depth = Image(height=spec.height, width=spec.width, encoding="32FC1", is_bigendian=0,
                               step=4 * spec.width)
        self.msg_depth.header.stamp = stamp
        self.msg_depth.header.frame_id = camera_frame
        self.msg_info = CameraInfo(height=spec.height, width=spec.width, distortion_model="plumb_bob",
                                   d=[0.0] * 5, k=[fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0],
                                   r=[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
                                   p=[fx, 0.0, cx, 0.0, 0.0, fy, cy, 0.0, 0.0, 0.0, 1.0, 0.0])
        self.msg_info.header.stamp = stamp
        self.msg_info.header.frame_id = camera_frame

        names = list(joints) + (list(sim.wheel_states()[0]) if publish_wheels else [])
        n = len(names)
        self.msg_js = JointState()
        self.msg_js.header.stamp = stamp
        self.msg_js.name = names
        self.msg_js.position, self.msg_js.velocity, self.msg_js.effort = (array.array("d", [0.0] * n) for _ in range(3))
        # numpy views on the message's own buffers (the setter copies; the getter returns the buffer)
        self._js_views = [np.frombuffer(a, dtype=np.float64)
                          for a in (self.msg_js.position, self.msg_js.velocity, self.msg_js.effort)]
        self._order = np.array([JOINTS.index(j) for j in joints])   # JOINTS -> published order
        self.msg_imu = Imu()
        self.msg_imu.header.stamp = stamp
        self.msg_imu.header.frame_id = base_frame
        self.msg_odom = Odometry()
        self.msg_odom.header.stamp = stamp
        self.msg_odom.header.frame_id = odom_frame
        self.msg_odom.child_frame_id = base_frame
        self.msg_wrench = WrenchStamped()
        self.msg_wrench.header.stamp = stamp
        self.msg_wrench.header.frame_id = "gripper"
        self.msg_temps: List[Temperature] = []
        for j in joints:
            t = Temperature()
            t.header.stamp = stamp
            t.header.frame_id = j
            self.msg_temps.append(t)
        self.msg_range = Range()
        self.msg_range.header.stamp = stamp
        self.msg_range.header.frame_id = base_frame
        self.msg_range.radiation_type = Range.INFRARED
        self.msg_range.field_of_view = 2.0 * math.pi
        self.msg_range.min_range = 0.0
        self.msg_range.max_range = max_range
        self.msg_zone = String()

    # ------------------------------------------------------------------ publishing (physics thread)
    def publish_state(self) -> None:
        """Every sensor message once, at the current stamp."""
        self.publish_joint_states()
        self.publish_imu()
        self.publish_odom()
        self.publish_wrench()
        self.publish_temperatures()
        self.publish_proximity()
        self.publish_zone()
        self.publish_objects()

    def publish_depth(self) -> None:
        depth, _ = self.sim.depth_image()
        self.msg_depth.data = depth.astype("<f4").tobytes()
        self.pub_depth.publish(self.msg_depth)
        self.pub_info.publish(self.msg_info)

    def publish_wrench(self) -> None:
        self.msg_wrench.wrench.force.z = self.sim.grip_force()
        self.pub_wrench.publish(self.msg_wrench)

    def publish_temperatures(self) -> None:
        temps = self.sim.temperatures()
        for msg, j in zip(self.msg_temps, self._order):
            msg.temperature = float(temps[j])
            self.pub_temp.publish(msg)

    def publish_proximity(self) -> None:
        d = self.sim.person_distance()
        self.msg_range.range = d if d <= self.max_range else math.inf
        self.pub_range.publish(self.msg_range)

    def publish_zone(self) -> None:
        self.msg_zone.data = self.sim.zone()
        self.pub_zone.publish(self.msg_zone)

    def publish_objects(self) -> None:
        msg = DetectedObjects()
        msg.header.stamp = self.stamp
        msg.header.frame_id = self.base_frame
        for name, (x, y, z), (w, qx, qy, qz) in self.sim.detected_objects():
            pose = Pose()
            pose.position.x, pose.position.y, pose.position.z = x, y, z
            pose.orientation.w, pose.orientation.x, pose.orientation.y, pose.orientation.z = w, qx, qy, qz
            msg.names.append(name)
            msg.poses.append(pose)
        self.pub_objects.publish(msg)

    def publish_joint_states(self) -> None:
        sim = self.sim
        pos, vel, eff = self._js_views
        order = self._order
        n = len(order)
        pos[:n] = sim.joint_positions()[order]
        vel[:n] = sim.joint_velocities()[order]
        eff[:n] = sim.joint_efforts()[order]
        if self.publish_wheels:
            _, angle, speed, torque = sim.wheel_states()
            pos[n], pos[n + 1] = angle
            vel[n], vel[n + 1] = speed
            eff[n], eff[n + 1] = torque
        self.pub_js.publish(self.msg_js)

    def publish_imu(self) -> None:
        acc, gyro, quat = self.sim.imu()
        m = self.msg_imu
        m.linear_acceleration.x, m.linear_acceleration.y, m.linear_acceleration.z = (float(v) for v in acc)
        m.angular_velocity.x, m.angular_velocity.y, m.angular_velocity.z = (float(v) for v in gyro)
        o = m.orientation
        o.w, o.x, o.y, o.z = (float(v) for v in quat)
        self.pub_imu.publish(m)

    def publish_odom(self) -> None:
        x, y, yaw, v, w = self.sim.odom()
        m = self.msg_odom
        p = m.pose.pose
        p.position.x, p.position.y = float(x), float(y)
        p.orientation.z, p.orientation.w = math.sin(0.5 * yaw), math.cos(0.5 * yaw)
        m.twist.twist.linear.x, m.twist.twist.angular.z = float(v), float(w)
        self.pub_odom.publish(m)
