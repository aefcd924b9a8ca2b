"""What scenario events do to the world (plain module: MuJoCo + numpy, no rclpy).

Parts of the ``Simulator``, each owning its state:
  * ``Person``: walks towards the base until a clearance (``approach``), back home (``leave``) or
    to a point (``walk_to``); the walk advances in the 100 Hz update and moves the person's mocap
    body.
  * ``ShelfObject``: the object placed on the shelf board (at a position, or "in reach" of a named
    arm pose, the board moved under it) or parked out of the world.
  * ``ScriptedDrive``: an operator takeover of the base that overrides cmd_vel until done; steered
    in the 100 Hz update.
  * ``heat_joint``: extra heat on a joint motor (thermal.py).
The crate is a mocap body without state of its own (``MujocoWorld.place_crate``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union, cast

import mujoco
import numpy as np

from .mujoco_world import MujocoWorld, Pose
from .robot_model import JOINTS, OBJECT_HALF, OBJECT_OFFSET, SHELF_HALF, SHELF_OFFSET
from .thermal import ThermalModel


class Person:
    """The person (a mocap capsule) and where the scenario sends them."""

    def __init__(self, world: MujocoWorld, home: Sequence[float], radius: float, base_radius: float):
        self._world = world
        self.home: Tuple[float, ...] = (float(home[0]), float(home[1]))
        self.position = list(self.home)
        self.radius = float(radius)
        self.base_radius = float(base_radius)
        # (mode, value, speed); value: the distance ("approach"), unused ("leave") or the (x, y) target ("to")
        self._goal: Optional[Tuple[str, Union[float, Tuple[float, float]], float]] = None

    def start_at(self, home: Sequence[float]) -> None:
        """A new home, where the person stands now."""
        self.home = tuple(home)
        self.position = list(self.home)
        self._write()

    def approach(self, distance: float, speed: float = 1.0) -> None:
        self._goal = ("approach", float(distance), float(speed))

    def leave(self, speed: float = 1.0) -> None:
        self._goal = ("leave", 0.0, float(speed))

    def walk_to(self, x: float, y: float, speed: float = 1.0) -> None:
        self._goal = ("to", (float(x), float(y)), float(speed))

    def clearance(self, base_pose: Sequence[float]) -> float:
        """Distance between the base's bounding circle and the person (m, >= 0)."""
        bx, by = base_pose[0], base_pose[1]
        centre = math.hypot(self.position[0] - bx, self.position[1] - by)
        return max(0.0, centre - self.base_radius - self.radius)

    def _write(self) -> None:
        self._world.move_person(self.position[0], self.position[1])

    def update(self, dt: float, base_pose: Sequence[float]) -> None:
        """Walk for dt towards the goal (dropped once reached)."""
        goal = self._goal
        if goal is None:
            return
        mode, value, speed = goal
        px, py = self.position
        if mode == "approach":
            bx, by = base_pose[0], base_pose[1]
            dx, dy = bx - px, by - py
            dist = math.hypot(dx, dy)
            remaining = self.clearance(base_pose) - cast(float, value)
            if remaining <= 0.0:
                self._goal = None
                return
            stepd = min(speed * dt, remaining)
        else:
            tx, ty = self.home if mode == "leave" else cast(Tuple[float, float], value)
            dx, dy = tx - px, ty - py
            dist = math.hypot(dx, dy)
            if dist < 1e-6:
                self._goal = None
                return
            stepd = min(speed * dt, dist)
        if dist > 1e-9:
            self.position[0] = px + dx / dist * stepd
            self.position[1] = py + dy / dist * stepd
        self._write()


class ShelfObject:
    """The object a scenario places on the shelf board, and whether (and as what) it is placed."""

    def __init__(self, world: MujocoWorld):
        self._world = world
        self.present = False
        self.name = ""

    def place(self, name: str = "box", position: Optional[Sequence[float]] = None, yaw: float = 0.0,
              in_reach: Optional[Pose] = None) -> Tuple[float, float, float]:
        """Put the object on the shelf board: at `position` (object centre, level, the board under
        it), or "in reach": oriented like the hand in pose `in_reach` (relative to where the base is
        now) with its front overhanging the board edge between the open jaws. Returns the centre."""
        world = self._world
        if in_reach is not None:
            grip, rot = world.grip_point(in_reach, world.base_pose())
            g = np.asarray(grip)
            pos = tuple(float(v) for v in g + rot[:, 0] * OBJECT_OFFSET)
            board = g + rot[:, 0] * SHELF_OFFSET - rot[:, 2] * (OBJECT_HALF[2] + SHELF_HALF[2])
        elif position is not None:
            pos = tuple(float(v) for v in position)
            if len(pos) == 2:
                pos = (pos[0], pos[1], 0.45 + OBJECT_HALF[2])
            c, s = math.cos(yaw), math.sin(yaw)
            rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
            board = np.asarray(pos) - rot[:, 2] * (OBJECT_HALF[2] + SHELF_HALF[2])
        else:
            raise ValueError("place_object needs position or in_reach")
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, np.ascontiguousarray(rot).reshape(-1))
        world.put_object(pos, quat)
        world.move_shelf(board, quat)
        self.present, self.name = True, str(name)
        return cast(Tuple[float, float, float], pos)   # in_reach: 3 values; position: (x, y[, z]), z filled in

    def remove(self) -> None:
        self._world.park_object()
        self.present = False


@dataclass
class _Drive:
    speed: float
    to_x: Optional[float]
    until: float
    timeout: float
    heading: float
    brake: float
    vx: float = 0.0
    wz: float = 0.0


class ScriptedDrive:
    """A scripted base motion (operator/teleop takeover) that overrides cmd_vel while active."""

    def __init__(self) -> None:
        self._drive: Optional[_Drive] = None

    @property
    def active(self) -> bool:
        return self._drive is not None

    def command(self) -> Tuple[float, float]:
        """(vx, wz) of the active drive."""
        assert self._drive is not None
        return self._drive.vx, self._drive.wz

    def start(self, now: float, base_pose: Sequence[float], speed: float, to_x: Optional[float] = None,
              duration: Optional[float] = None, wz: float = 0.0, timeout: float = 20.0, heading: float = 0.0,
              brake: float = 0.0) -> None:
        """Drive until the base reaches x = to_x (forward or backward along `heading`), or for
        `duration` seconds. With `brake` > 0 the operator then holds the wheels at zero for that
        long before handing the base back, so what the base does meanwhile (e.g. sliding on) does
        not depend on the decisions."""
        self._drive = _Drive(speed=abs(float(speed)), to_x=to_x, until=now + float(duration or timeout),
                             wz=float(wz), heading=float(heading), timeout=now + float(timeout),
                             brake=max(0.0, float(brake)))
        self.update(now, base_pose)

    def _end(self, now: float) -> None:
        """The drive is done: hand the base back, or first hold the wheels still for `brake` s."""
        brake = self._drive.brake if self._drive is not None else 0.0
        if brake <= 0.0:
            self._drive = None
            return
        self._drive = _Drive(speed=0.0, to_x=None, until=now + brake, timeout=now + brake, heading=0.0, brake=0.0)

    def update(self, now: float, base_pose: Sequence[float]) -> None:
        """Steer towards the goal; end the drive when reached or out of time."""
        dr = self._drive
        if dr is None:
            return
        if now >= dr.until or now >= dr.timeout:
            self._end(now)
            return
        if dr.to_x is None:
            dr.vx = dr.speed
            return
        x, _, yaw = base_pose
        err = float(dr.to_x) - x
        if abs(err) < 0.01:
            self._end(now)
            return
        direction = 1.0 if err * math.cos(dr.heading) > 0 else -1.0
        dr.vx = direction * min(dr.speed, 1.5 * abs(err) + 0.05)
        dyaw = math.atan2(math.sin(dr.heading - yaw), math.cos(dr.heading - yaw))
        wz = 2.0 * dyaw
        dr.wz = 0.5 if wz > 0.5 else (-0.5 if wz < -0.5 else wz)


def heat_joint(thermal: ThermalModel, joint: str, now: float, rate: float = 0.0, duration: float = 0.0,
               add: float = 0.0) -> None:
    """Extra heat on a joint's motor: `add` degrees at once, and/or `rate` C/s for `duration` s."""
    if joint not in JOINTS:
        raise ValueError(f"unknown joint {joint!r}")
    j = JOINTS.index(joint)
    if add:
        thermal.add_heat(j, add)
    if rate and duration:
        thermal.add_boost(j, rate, duration, now)
