"""Sensor and ground-truth readouts of the simulator (plain module), read on demand.

What the robot's sensors report (``joint_positions()``, ``imu()``, ``odom()``, ``grip_force()``,
``person_distance()`` for the proximity sensor, ``zone()``, ``detected_objects()``,
``wheel_states()``) and the ground truth behind them (``base_pose()``, ``base_velocity()``,
``truth()``, and ``condition_value()``, the cheap scalars the scenario engine tests). Nothing here
changes the world; the node copies these into its preallocated messages at their rates.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import mujoco
import numpy as np

from .robot_model import JOINTS, WHEELS
from .thermal import ThermalModel


class Readouts:
    """Sensor and ground-truth readouts, mixed into ``Simulator``.

    Relies on these Simulator attributes (set in ``Simulator.__init__``, updated by ``step()``): the
    MuJoCo ``data``; the joint slices ``_qslice``/``_vslice``, ``effort_applied``; the sensor
    addresses ``_s_acc``, ``_s_gyro``, ``_s_quat``, ``_s_pad_fixed``, ``_s_pad_moving``; the base
    joints' qpos/qvel addresses ``_bqx``/``_bqy``/``_bqyaw`` and ``_bx``/``_by``/``_byaw``; the wheel
    odometry ``_odom`` and wheel state (``wheel_radius``, ``wheel_w``, ``wheel_angle``,
    ``wheel_torque``, ``on_slip``); the person (``person_pos``, ``person_radius``, ``base_radius``);
    ``_zones`` and ``world``; the door's ``_door_q``; the object (``_obj_q``, ``object_present``,
    ``object_name``); ``thermal``; ``scenario``; and ``time`` and ``driving``.
    """

    data: mujoco.MjData
    _qslice: slice
    _vslice: slice
    effort_applied: np.ndarray
    _s_acc: int
    _s_gyro: int
    _s_quat: int
    _s_pad_fixed: int
    _s_pad_moving: int
    _bqx: int
    _bqy: int
    _bqyaw: int
    _bx: int
    _by: int
    _byaw: int
    _odom: List[float]
    wheel_radius: float
    wheel_w: List[float]
    wheel_angle: List[float]
    wheel_torque: List[float]
    on_slip: bool
    person_pos: List[float]
    person_radius: float
    base_radius: float
    _zones: List[Tuple[str, Sequence[float]]]
    world: Dict[str, Any]
    _door_q: int
    _obj_q: int
    object_present: bool
    object_name: str
    thermal: ThermalModel
    scenario: Optional[Any]

    if TYPE_CHECKING:
        @property
        def time(self) -> float: ...

        @property
        def driving(self) -> bool: ...

    def joint_positions(self) -> np.ndarray:
        return self.data.qpos[self._qslice]

    def joint_velocities(self) -> np.ndarray:
        return self.data.qvel[self._vslice]

    def joint_efforts(self) -> np.ndarray:
        return self.effort_applied

    def imu(self):
        """(linear acceleration incl. gravity, angular velocity) in the base frame, orientation (w, x, y, z)."""
        sd = self.data.sensordata
        return sd[self._s_acc:self._s_acc + 3], sd[self._s_gyro:self._s_gyro + 3], sd[self._s_quat:self._s_quat + 4]

    def odom(self) -> List[float]:
        """Wheel odometry: x, y, yaw, forward speed, yaw rate."""
        return self._odom

    def grip_force(self) -> float:
        """Grip force (N): the moving jaw's pad force (its force sensor), counted only while the fixed
        jaw also touches (> 1 N), so pushing something with one jaw is not a grip. (The fixed jaw can
        read less when the gripped thing also rests on something: a shelf, the door lever's spring.)"""
        sd = self.data.sensordata
        return float(sd[self._s_pad_moving]) if sd[self._s_pad_fixed] > 1.0 else 0.0

    def pad_forces(self) -> Tuple[float, float]:
        sd = self.data.sensordata
        return float(sd[self._s_pad_fixed]), float(sd[self._s_pad_moving])

    def base_pose(self) -> Tuple[float, float, float]:
        q = self.data.qpos
        return float(q[self._bqx]), float(q[self._bqy]), float(q[self._bqyaw])

    def base_velocity(self) -> Tuple[float, float, float]:
        """True base velocity in the base frame: forward, lateral, yaw rate."""
        qv = self.data.qvel
        _, _, yaw = self.base_pose()
        c, s = math.cos(yaw), math.sin(yaw)
        vx, vy = float(qv[self._bx]), float(qv[self._by])
        return c * vx + s * vy, -s * vx + c * vy, float(qv[self._byaw])

    def person_distance(self) -> float:
        """Clearance between the base's bounding circle and the person (m, >= 0)."""
        bx, by, _ = self.base_pose()
        centre = math.hypot(self.person_pos[0] - bx, self.person_pos[1] - by)
        return max(0.0, centre - self.base_radius - self.person_radius)

    def zone(self) -> str:
        x, y, _ = self.base_pose()
        for name, (x0, x1, y0, y1) in self._zones:
            if x0 <= x < x1 and y0 <= y < y1:
                return name
        return str(self.world["default_zone"])

    def door_angle(self) -> float:
        return float(self.data.qpos[self._door_q])

    def temperatures(self) -> np.ndarray:
        return self.thermal.temperature

    def object_position(self) -> Tuple[float, float, float]:
        x, y, z = (float(v) for v in self.data.qpos[self._obj_q:self._obj_q + 3])
        return x, y, z

    def detected_objects(self) -> List[Tuple[str, Tuple[float, float, float], Tuple[float, float, float, float]]]:
        """What a perception node on the base reports: each placed object's name, centre and
        orientation (w, x, y, z) in the base frame (the true pose, no sensor noise)."""
        if not self.object_present:
            return []
        bx, by, yaw = self.base_pose()
        x, y, z = self.object_position()
        c, s = math.cos(yaw), math.sin(yaw)
        base_inv = np.array([math.cos(0.5 * yaw), 0.0, 0.0, -math.sin(0.5 * yaw)])
        quat = np.zeros(4)
        mujoco.mju_mulQuat(quat, base_inv, np.asarray(self.data.qpos[self._obj_q + 3:self._obj_q + 7]))
        w, qx, qy, qz = (float(v) for v in quat)
        return [(self.object_name, (c * (x - bx) + s * (y - by), -s * (x - bx) + c * (y - by), z), (w, qx, qy, qz))]

    def truth(self) -> dict:
        x, y, yaw = self.base_pose()
        vf, vl, wz = self.base_velocity()
        return {
            "time": self.time,
            "base_x": x, "base_y": y, "base_yaw": yaw,
            "base_vx": vf, "base_vy": vl, "base_wz": wz,
            "odom_x": self._odom[0], "odom_y": self._odom[1], "odom_yaw": self._odom[2],
            "odom_vx": self._odom[3], "odom_wz": self._odom[4],
            "wheel_speed": [w * self.wheel_radius for w in self.wheel_w],
            "on_slip": self.on_slip,
            "zone": self.zone(),
            "person_distance": self.person_distance(),
            "person_xy": list(self.person_pos),
            "grip_force": self.grip_force(),
            "pad_forces": list(self.pad_forces()),
            "door_angle": self.door_angle(),
            "object_present": self.object_present,
            "object_xyz": list(self.object_position()) if self.object_present else None,
            "temperatures": dict(zip(JOINTS, (float(t) for t in self.thermal.temperature))),
            "efforts_applied": dict(zip(JOINTS, (float(u) for u in self.effort_applied))),
            "joint_positions": dict(zip(JOINTS, (float(v) for v in self.joint_positions()))),
            "driving": self.driving,
            # scenario goals: id -> sim time first reached (None: not yet); scored by the recorder
            "goals": self.scenario.goal_status() if self.scenario is not None else {},
        }

    def condition_value(self, name: str):
        """Scalar values the scenario engine can test (cheap: no dict building)."""
        if name == "grip_force":
            return self.grip_force()
        if name == "base_x":
            return self.base_pose()[0]
        if name == "base_y":
            return self.base_pose()[1]
        if name == "person_distance":
            return self.person_distance()
        if name == "door_angle":
            return self.door_angle()
        if name == "on_slip":
            return self.on_slip
        if name == "zone":
            return self.zone()
        if name == "driving":
            return self.driving
        if name == "time":
            return self.time
        if name == "object_height":
            return self.object_position()[2] if self.object_present else -1.0
        raise KeyError(name)

    def wheel_states(self):
        """Wheel joint names, angles, speeds (rad, rad/s) and motor torques."""
        return WHEELS, self.wheel_angle, self.wheel_w, self.wheel_torque
