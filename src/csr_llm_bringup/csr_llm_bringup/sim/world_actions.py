"""World actions of the simulator (plain module): what scenario events do to the world.

The scenario engine (scenario.py) calls these on the ``Simulator`` (which inherits ``WorldActions``):
  * person: walk towards the base until a clearance (``person_approach``), back home
    (``person_leave``) or to a point (``person_to``); the walk advances in the 100 Hz update
    (``_update_person``) and moves the person's mocap body.
  * object: place it on the shelf board (at a position, or "in reach" of a named arm pose, the board
    moved under it) or park it out of the world (``remove_object``).
  * crate: put the (visual) crate on the floor at (x, y, yaw) or park it out of the world.
  * heat: extra heat on a joint motor (thermal.py).
  * drive: a scripted operator takeover of the base that overrides cmd_vel until done; steered in
    the 100 Hz update (``_update_drive``); ``driving`` says whether one is active.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple, Union, cast

import mujoco
import numpy as np

from .robot_model import JOINTS, OBJECT_HALF, OBJECT_OFFSET, PARKED_CRATE, PARKED_OBJECT, SHELF_HALF, SHELF_OFFSET
from .thermal import ThermalModel


class WorldActions:
    """Scenario-driven changes to the world, mixed into ``Simulator``.

    Relies on these Simulator attributes (set in ``Simulator.__init__``): the MuJoCo ``model`` and
    ``data``; the person's ``person_pos``, ``person_home`` and mocap index ``_person_mocap``; the
    object's qpos/qvel addresses ``_obj_q``/``_obj_v``, ``_obj_body``, ``_obj_geom`` and the shelf's
    mocap index ``_shelf_mocap``; ``thermal``; and ``time``, ``base_pose()``, ``person_distance()``,
    ``grip_point()``. It owns ``_person_goal``, ``_drive``, ``object_present`` and ``object_name``
    (initialised by the Simulator).
    """

    model: mujoco.MjModel
    data: mujoco.MjData
    person_pos: List[float]
    person_home: Tuple[float, float]
    _person_mocap: int
    # (mode, value, speed); value: the distance ("approach"), unused ("leave") or the (x, y) target ("to")
    _person_goal: Optional[Tuple[str, Union[float, Tuple[float, float]], float]]
    _obj_q: int
    _obj_v: int
    _obj_body: int
    _obj_geom: int
    _shelf_mocap: int
    _crate_mocap: int
    object_present: bool
    object_name: str
    thermal: ThermalModel
    _drive: Optional[dict]     # scripted base drive (scenario), overrides cmd_vel

    if TYPE_CHECKING:
        @property
        def time(self) -> float: ...

        def base_pose(self) -> Tuple[float, float, float]: ...

        def person_distance(self) -> float: ...

        def grip_point(self, pose) -> Tuple[Tuple[float, ...], np.ndarray]: ...

    def person_approach(self, distance: float, speed: float = 1.0) -> None:
        self._person_goal = ("approach", float(distance), float(speed))

    def person_leave(self, speed: float = 1.0) -> None:
        self._person_goal = ("leave", 0.0, float(speed))

    def person_to(self, x: float, y: float, speed: float = 1.0) -> None:
        self._person_goal = ("to", (float(x), float(y)), float(speed))

    def _write_person(self) -> None:
        self.data.mocap_pos[self._person_mocap, 0] = self.person_pos[0]
        self.data.mocap_pos[self._person_mocap, 1] = self.person_pos[1]

    def _update_person(self, dt: float) -> None:
        goal = self._person_goal
        if goal is None:
            return
        mode, value, speed = goal
        px, py = self.person_pos
        if mode == "approach":
            bx, by, _ = self.base_pose()
            dx, dy = bx - px, by - py
            dist = math.hypot(dx, dy)
            remaining = self.person_distance() - cast(float, value)
            if remaining <= 0.0:
                self._person_goal = None
                return
            stepd = min(speed * dt, remaining)
        else:
            tx, ty = self.person_home if mode == "leave" else cast(Tuple[float, float], value)
            dx, dy = tx - px, ty - py
            dist = math.hypot(dx, dy)
            if dist < 1e-6:
                self._person_goal = None
                return
            stepd = min(speed * dt, dist)
        if dist > 1e-9:
            self.person_pos[0] = px + dx / dist * stepd
            self.person_pos[1] = py + dy / dist * stepd
        self._write_person()

    def place_object(self, name: str = "box", position: Optional[Sequence[float]] = None, yaw: float = 0.0,
                     in_reach: Optional[object] = None) -> Tuple[float, float, float]:
        """Put the object on the shelf board: at `position` (object centre, level, the board under
        it), or "in reach": oriented like the hand in pose `in_reach` (relative to where the base is
        now) with its front overhanging the board edge between the open jaws. Returns the centre."""
        if in_reach is not None:
            grip, rot = self.grip_point(in_reach)
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
        m, d = self.model, self.data
        qa, va = self._obj_q, self._obj_v
        d.qpos[qa:qa + 3] = pos
        d.qpos[qa + 3:qa + 7] = quat
        d.qvel[va:va + 6] = 0.0
        self._set_object_collisions(1, 3)
        m.body_gravcomp[self._obj_body] = 0.0
        d.mocap_pos[self._shelf_mocap] = board
        d.mocap_quat[self._shelf_mocap] = quat
        self.object_present, self.object_name = True, str(name)
        return cast(Tuple[float, float, float], pos)   # in_reach: 3 values; position: (x, y[, z]), z filled in

    def _set_object_collisions(self, contype: int, conaffinity: int) -> None:
        m = self.model
        m.geom_contype[self._obj_geom], m.geom_conaffinity[self._obj_geom] = contype, conaffinity
        # the broadphase filters on the per-body union as well (MuJoCo >= 3.1)
        if hasattr(m, "body_contype"):
            m.body_contype[self._obj_body], m.body_conaffinity[self._obj_body] = contype, conaffinity

    def remove_object(self) -> None:
        m, d = self.model, self.data
        qa, va = self._obj_q, self._obj_v
        d.qpos[qa:qa + 3] = PARKED_OBJECT
        d.qpos[qa + 3:qa + 7] = (1.0, 0.0, 0.0, 0.0)
        d.qvel[va:va + 6] = 0.0
        self._set_object_collisions(0, 0)
        m.body_gravcomp[self._obj_body] = 1.0
        self.object_present = False

    def place_crate(self, x: float, y: float, yaw: float = 0.0) -> None:
        self.data.mocap_pos[self._crate_mocap] = (float(x), float(y), PARKED_CRATE[2])
        self.data.mocap_quat[self._crate_mocap] = (math.cos(0.5 * yaw), 0.0, 0.0, math.sin(0.5 * yaw))

    def remove_crate(self) -> None:
        self.data.mocap_pos[self._crate_mocap] = PARKED_CRATE

    def heat(self, joint: str, rate: float = 0.0, duration: float = 0.0, add: float = 0.0) -> None:
        if joint not in JOINTS:
            raise ValueError(f"unknown joint {joint!r}")
        j = JOINTS.index(joint)
        if add:
            self.thermal.add_heat(j, add)
        if rate and duration:
            self.thermal.add_boost(j, rate, duration, self.time)

    def drive(self, speed: float, to_x: Optional[float] = None, duration: Optional[float] = None,
              wz: float = 0.0, timeout: float = 20.0, heading: float = 0.0, brake: float = 0.0) -> None:
        """Scripted base motion (operator/teleop takeover): overrides cmd_vel until the base reaches
        x = to_x (driving forward or backward along `heading`), or for `duration` seconds. With
        `brake` > 0 the operator then holds the wheels at zero for that long before handing the base
        back, so what the base does meanwhile (e.g. sliding on) does not depend on the decisions."""
        self._drive = {"speed": abs(float(speed)), "to_x": to_x, "until": self.time + float(duration or timeout),
                       "wz": float(wz), "vx": 0.0, "heading": float(heading), "timeout": self.time + float(timeout),
                       "brake": max(0.0, float(brake))}
        self._update_drive()

    @property
    def driving(self) -> bool:
        return self._drive is not None

    def _end_drive(self, now: float) -> None:
        """The drive is done: hand the base back, or first hold the wheels still for `brake` s."""
        brake = self._drive["brake"] if self._drive is not None else 0.0
        if brake <= 0.0:
            self._drive = None
            return
        self._drive = {"speed": 0.0, "to_x": None, "until": now + brake, "timeout": now + brake,
                       "wz": 0.0, "vx": 0.0, "heading": 0.0, "brake": 0.0}

    def _update_drive(self) -> None:
        dr = self._drive
        if dr is None:
            return
        now = self.time
        if now >= dr["until"] or now >= dr["timeout"]:
            self._end_drive(now)
            return
        if dr["to_x"] is None:
            dr["vx"] = dr["speed"]
            return
        x, _, yaw = self.base_pose()
        err = float(dr["to_x"]) - x
        if abs(err) < 0.01:
            self._end_drive(now)
            return
        direction = 1.0 if err * math.cos(dr["heading"]) > 0 else -1.0
        dr["vx"] = direction * min(dr["speed"], 1.5 * abs(err) + 0.05)
        dyaw = math.atan2(math.sin(dr["heading"] - yaw), math.cos(dr["heading"] - yaw))
        wz = 2.0 * dyaw
        dr["wz"] = 0.5 if wz > 0.5 else (-0.5 if wz < -0.5 else wz)   # the core's _clip(wz, 0.5)
