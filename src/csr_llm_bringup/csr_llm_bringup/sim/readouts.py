"""Sensor and ground-truth readouts of the simulator (plain module: MuJoCo + numpy, no rclpy).

What the robot's sensors report (``grip_force()``, ``person_distance()`` for the proximity sensor,
``zone()``, ``detected_objects()``) and the ground truth behind them (``base_velocity()``,
``truth()``, and ``condition_value()``, the cheap scalars the scenario engine tests), computed on
demand from the simulator's parts. Nothing here changes the world.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence, Tuple

import mujoco
import numpy as np

from .commands import ArmEfforts, SimClock
from .mujoco_world import MujocoWorld
from .robot_model import JOINTS
from .thermal import ThermalModel
from .traction import BaseTraction
from .world_actions import Person, ScriptedDrive, ShelfObject

DetectedObject = Tuple[str, Tuple[float, float, float], Tuple[float, float, float, float]]


class ZoneMap:
    """Named floor rectangles [xmin, xmax, ymin, ymax]: the first that contains a point, else the default."""

    def __init__(self, zones: Sequence[Dict[str, Any]], default: str):
        self._zones = [(str(z["name"]), tuple(float(v) for v in z["box"])) for z in zones]
        self.default = str(default)

    def at(self, x: float, y: float) -> str:
        for name, (x0, x1, y0, y1) in self._zones:
            if x0 <= x < x1 and y0 <= y < y1:
                return name
        return self.default


class Readouts:
    """Readouts composed from the simulator's parts (read only)."""

    def __init__(self, clock: SimClock, world: MujocoWorld, arm: ArmEfforts, traction: BaseTraction,
                 thermal: ThermalModel, person: Person, shelf_object: ShelfObject, operator: ScriptedDrive,
                 zones: ZoneMap):
        self._clock, self._world, self._arm, self._traction = clock, world, arm, traction
        self._thermal, self._person, self._object, self._operator = thermal, person, shelf_object, operator
        self._zones = zones

    def grip_force(self) -> float:
        """Grip force (N): the moving jaw's pad force (its force sensor), counted only while the fixed
        jaw also touches (> 1 N), so pushing something with one jaw is not a grip. (The fixed jaw can
        read less when the gripped thing also rests on something: a shelf, the door lever's spring.)"""
        fixed, moving = self._world.pad_forces()
        return moving if fixed > 1.0 else 0.0

    def base_velocity(self) -> Tuple[float, float, float]:
        """True base velocity in the base frame: forward, lateral, yaw rate."""
        vx, vy, wz = self._world.base_velocity_world()
        _, _, yaw = self._world.base_pose()
        c, s = math.cos(yaw), math.sin(yaw)
        return c * vx + s * vy, -s * vx + c * vy, wz

    def person_distance(self) -> float:
        """Clearance between the base's bounding circle and the person (m, >= 0)."""
        return self._person.clearance(self._world.base_pose())

    def zone(self) -> str:
        x, y, _ = self._world.base_pose()
        return self._zones.at(x, y)

    def detected_objects(self) -> List[DetectedObject]:
        """What a perception node on the base reports: each placed object's name, centre and
        orientation (w, x, y, z) in the base frame (the true pose, no sensor noise)."""
        if not self._object.present:
            return []
        bx, by, yaw = self._world.base_pose()
        x, y, z = self._world.object_position()
        c, s = math.cos(yaw), math.sin(yaw)
        base_inv = np.array([math.cos(0.5 * yaw), 0.0, 0.0, -math.sin(0.5 * yaw)])
        quat = np.zeros(4)
        mujoco.mju_mulQuat(quat, base_inv, self._world.object_orientation())
        w, qx, qy, qz = (float(v) for v in quat)
        return [(self._object.name, (c * (x - bx) + s * (y - by), -s * (x - bx) + c * (y - by), z), (w, qx, qy, qz))]

    def truth(self, goals: Dict[str, Any]) -> dict:
        """The ground truth as of now; `goals`: the scenario's goal id -> sim time first reached."""
        world, odom = self._world, self._traction.odom()
        x, y, yaw = world.base_pose()
        vf, vl, wz = self.base_velocity()
        return {
            "time": self._clock.time,
            "base_x": x, "base_y": y, "base_yaw": yaw,
            "base_vx": vf, "base_vy": vl, "base_wz": wz,
            "odom_x": odom[0], "odom_y": odom[1], "odom_yaw": odom[2],
            "odom_vx": odom[3], "odom_wz": odom[4],
            "wheel_speed": self._traction.wheel_speeds(),
            "on_slip": self._traction.on_slip,
            "zone": self.zone(),
            "person_distance": self.person_distance(),
            "person_xy": list(self._person.position),
            "grip_force": self.grip_force(),
            "pad_forces": list(world.pad_forces()),
            "door_angle": world.door_angle(),
            "object_present": self._object.present,
            "object_xyz": list(world.object_position()) if self._object.present else None,
            "temperatures": dict(zip(JOINTS, (float(t) for t in self._thermal.temperature))),
            "efforts_applied": dict(zip(JOINTS, (float(u) for u in self._arm.applied))),
            "joint_positions": dict(zip(JOINTS, (float(v) for v in world.joint_positions()))),
            "driving": self._operator.active,
            "goals": goals,      # scored by the recorder
        }

    def condition_value(self, name: str):
        """Scalar values the scenario engine can test (cheap: no dict building)."""
        if name == "grip_force":
            return self.grip_force()
        if name == "base_x":
            return self._world.base_pose()[0]
        if name == "base_y":
            return self._world.base_pose()[1]
        if name == "person_distance":
            return self.person_distance()
        if name == "door_angle":
            return self._world.door_angle()
        if name == "on_slip":
            return self._traction.on_slip
        if name == "zone":
            return self.zone()
        if name == "driving":
            return self._operator.active
        if name == "time":
            return self._clock.time
        if name == "object_height":
            return self._world.object_position()[2] if self._object.present else -1.0
        raise KeyError(name)
