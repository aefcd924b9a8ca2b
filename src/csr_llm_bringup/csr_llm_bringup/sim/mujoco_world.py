"""The MuJoCo model and data of the robot in its world (plain module: MuJoCo + numpy, no rclpy).

``MujocoWorld`` builds the model (the door handle placed at the grip centre of the approach_handle
pose), owns ``model``/``data`` and the addresses of the joints, bodies and sensors in them, and is
the only part that reads or writes MuJoCo state: the arm's joints and motors, the planar base, the
sensors, the door, the object and the mocap bodies (shelf board, crate, person).
"""
from __future__ import annotations

import math
from typing import List, Mapping, Sequence, Tuple, Union

import mujoco
import numpy as np
import numpy.typing as npt

from .robot_model import (APPROACH_HANDLE_POSE, JOINTS, PARKED_CRATE, PARKED_OBJECT, REACH_SHELF_LOW_POSE,
                          REACH_SHELF_POSE, build_mjcf)

NAMED_POSES = {"approach_handle": APPROACH_HANDLE_POSE, "reach_shelf": REACH_SHELF_POSE,
               "reach_shelf_low": REACH_SHELF_LOW_POSE}
Pose = Union[str, Mapping[str, float]]


def named_pose(pose: Pose) -> Mapping[str, float]:
    """{joint: rad} of a pose given by name (NAMED_POSES) or as such a mapping."""
    if isinstance(pose, str):
        if pose not in NAMED_POSES:
            raise ValueError(f"unknown pose {pose!r} (known: {', '.join(NAMED_POSES)})")
        return NAMED_POSES[pose]
    return pose


def fk_grip(model: mujoco.MjModel, data: mujoco.MjData, base_pose: Sequence[float],
            pose: Mapping[str, float]) -> Tuple[Tuple[float, ...], np.ndarray]:
    """World position and orientation (3x3) of the grip centre, base at base_pose, arm in pose."""

    def jid(name: str) -> int:
        return mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
    for name, v in zip(("base_x", "base_y", "base_yaw"), base_pose):
        data.qpos[model.jnt_qposadr[jid(name)]] = v
    for name in JOINTS:
        if name in pose:
            data.qpos[model.jnt_qposadr[jid(name)]] = float(pose[name])
    mujoco.mj_kinematics(model, data)
    sid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, "grip_center")
    pos = tuple(float(v) for v in data.site_xpos[sid])
    return pos, data.site_xmat[sid].reshape(3, 3).copy()


def _build_model(limits: Mapping[str, Sequence[float]], world: dict, timestep: float
                 ) -> Tuple[mujoco.MjModel, Tuple[float, ...]]:
    """The model with the handle bar's centre at the grip centre of world["handle_pose"] (base at
    the origin): a first build finds that point, the second puts the handle there."""
    probe = mujoco.MjModel.from_xml_string(build_mjcf(limits, world, timestep=timestep))
    hpos, hmat = fk_grip(probe, mujoco.MjData(probe), (0.0, 0.0, 0.0), world["handle_pose"])
    hyaw = math.atan2(float(hmat[1, 0]), float(hmat[0, 0]))
    model = mujoco.MjModel.from_xml_string(
        build_mjcf(limits, world, handle_pos=hpos, handle_yaw=hyaw, timestep=timestep))
    return model, hpos


class MujocoWorld:
    """MuJoCo ``model`` and ``data``, and every read and write of their state."""

    def __init__(self, limits: Mapping[str, Sequence[float]], world: dict, timestep: float):
        self.model, self.handle_pos = _build_model(limits, world, timestep)
        self.data = mujoco.MjData(self.model)
        self._scratch = mujoco.MjData(self.model)      # for forward kinematics of other poses
        m = self.model

        def joint(name: str) -> int:
            return mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, name)

        def body(name: str) -> int:
            return mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, name)

        def sensor(name: str) -> int:
            return int(m.sensor_adr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, name)])
        qadr = [int(m.jnt_qposadr[joint(j)]) for j in JOINTS]
        vadr = [int(m.jnt_dofadr[joint(j)]) for j in JOINTS]
        self._qslice = slice(qadr[0], qadr[-1] + 1)      # contiguous in the MJCF
        self._vslice = slice(vadr[0], vadr[-1] + 1)
        assert qadr == list(range(self._qslice.start, self._qslice.stop))
        self._bx, self._by, self._byaw = (int(m.jnt_dofadr[joint(n)]) for n in ("base_x", "base_y", "base_yaw"))
        self._bqx, self._bqy, self._bqyaw = (int(m.jnt_qposadr[joint(n)]) for n in ("base_x", "base_y", "base_yaw"))
        self._door_q = int(m.jnt_qposadr[joint("door_hinge")])
        self._obj_q = int(m.jnt_qposadr[joint("object_free")])
        self._obj_v = int(m.jnt_dofadr[joint("object_free")])
        self._obj_body = body("object")
        self._obj_geom = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "object")
        self._person_mocap = int(m.body_mocapid[body("person")])
        self._shelf_mocap = int(m.body_mocapid[body("shelf")])
        self._crate_mocap = int(m.body_mocapid[body("crate")])
        self._s_pad_fixed, self._s_pad_moving = sensor("pad_fixed"), sensor("pad_moving")
        self._s_acc, self._s_gyro, self._s_quat = sensor("imu_acc"), sensor("imu_gyro"), sensor("imu_quat")
        self.robot_mass = float(np.sum(m.body_mass[body("base"):body("door")]))
        self._base_body = body("base")
        self._geom_names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, g) or f"geom{g}" for g in range(m.ngeom)]
        self._body_names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b) or f"body{b}" for b in range(m.nbody)]
        self._body_index = {name: b for b, name in enumerate(self._body_names)}
        self._robot_geom = [int(m.body_rootid[m.geom_bodyid[g]]) == self._base_body for g in range(m.ngeom)]
        self._velocity = np.zeros(6)
        self._wrench = np.zeros(6)
        mujoco.mj_forward(m, self.data)

    def step(self) -> None:
        mujoco.mj_step(self.model, self.data)

    def forward(self) -> None:
        mujoco.mj_forward(self.model, self.data)

    # ------------------------------------------------------------------ arm
    def joint_positions(self) -> np.ndarray:
        return self.data.qpos[self._qslice]

    def joint_velocities(self) -> np.ndarray:
        return self.data.qvel[self._vslice]

    def set_joint_positions(self, q: Sequence[float]) -> None:
        self.data.qpos[self._qslice] = q

    def set_motor_efforts(self, efforts: np.ndarray) -> None:
        self.data.ctrl[:len(JOINTS)] = efforts

    def grip_point(self, pose: Pose, base_pose: Sequence[float]) -> Tuple[Tuple[float, ...], np.ndarray]:
        """Grip centre (world) and hand orientation (3x3) with the arm in `pose` (name or
        {joint: rad}), the base at base_pose and everything else as it is now."""
        s = self._scratch
        s.qpos[:] = self.data.qpos
        return fk_grip(self.model, s, base_pose, named_pose(pose))

    # ------------------------------------------------------------------ base
    def base_pose(self) -> Tuple[float, float, float]:
        q = self.data.qpos
        return float(q[self._bqx]), float(q[self._bqy]), float(q[self._bqyaw])

    def base_velocity_world(self) -> Tuple[float, float, float]:
        """World-frame x and y velocity and yaw rate of the base."""
        qv = self.data.qvel
        return float(qv[self._bx]), float(qv[self._by]), float(qv[self._byaw])

    def apply_base_forces(self, fx: float, fy: float, torque_z: float) -> None:
        fa = self.data.qfrc_applied
        fa[self._bx], fa[self._by], fa[self._byaw] = fx, fy, torque_z

    def place_base(self, x: float, y: float, yaw: float) -> None:
        """Put the base at (x, y, yaw) at rest and recompute the derived quantities."""
        d = self.data
        d.qpos[self._bqx], d.qpos[self._bqy], d.qpos[self._bqyaw] = x, y, yaw
        d.qvel[self._bx] = d.qvel[self._by] = d.qvel[self._byaw] = 0.0
        mujoco.mj_forward(self.model, d)

    # ------------------------------------------------------------------ ground truth for the safety monitor
    def body_motion(self, names: Sequence[str]) -> List[Tuple[str, Tuple[float, float, float], float]]:
        """(name, world position, linear speed m/s) of each named body."""
        out = []
        for name in names:
            b = self._body_index[name]
            mujoco.mj_objectVelocity(self.model, self.data, mujoco.mjtObj.mjOBJ_BODY, b, self._velocity, 0)
            x, y, z = (float(v) for v in self.data.xpos[b])
            out.append((name, (x, y, z), float(np.linalg.norm(self._velocity[3:]))))
        return out

    def robot_contacts(self) -> List[Tuple[str, str, float]]:
        """(robot geom, body of the other geom, contact force N) of every contact between a robot
        geom and a geom outside the robot (the names of the body and geom, e.g. "object/object")."""
        out = []
        d = self.data
        for i in range(d.ncon):
            g1, g2 = int(d.contact[i].geom1), int(d.contact[i].geom2)
            if self._robot_geom[g1] == self._robot_geom[g2]:
                continue
            robot, other = (g1, g2) if self._robot_geom[g1] else (g2, g1)
            mujoco.mj_contactForce(self.model, d, i, self._wrench)
            body = self._body_names[int(self.model.geom_bodyid[other])]
            out.append((self._geom_names[robot], f"{body}/{self._geom_names[other]}",
                        float(np.linalg.norm(self._wrench[:3]))))
        return out

    # ------------------------------------------------------------------ sensors
    def pad_forces(self) -> Tuple[float, float]:
        """Touch sensor forces of the fixed and the moving jaw's pads (N)."""
        sd = self.data.sensordata
        return float(sd[self._s_pad_fixed]), float(sd[self._s_pad_moving])

    def imu(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(linear acceleration incl. gravity, angular velocity) in the base frame, orientation (w, x, y, z)."""
        sd = self.data.sensordata
        return sd[self._s_acc:self._s_acc + 3], sd[self._s_gyro:self._s_gyro + 3], sd[self._s_quat:self._s_quat + 4]

    # ------------------------------------------------------------------ door, object, mocap bodies
    def door_angle(self) -> float:
        return float(self.data.qpos[self._door_q])

    def set_door_angle(self, angle: float) -> None:
        self.data.qpos[self._door_q] = angle

    def object_position(self) -> Tuple[float, float, float]:
        x, y, z = (float(v) for v in self.data.qpos[self._obj_q:self._obj_q + 3])
        return x, y, z

    def object_orientation(self) -> np.ndarray:
        """The object's orientation quaternion (w, x, y, z), world frame."""
        return np.asarray(self.data.qpos[self._obj_q + 3:self._obj_q + 7])

    def put_object(self, position: npt.ArrayLike, quat: npt.ArrayLike) -> None:
        """The object at rest at this pose, colliding and under gravity."""
        self._set_object_pose(position, quat)
        self._set_object_collisions(1, 3)
        self.model.body_gravcomp[self._obj_body] = 0.0

    def park_object(self) -> None:
        """The object out of the world: no contacts, gravity compensated."""
        self._set_object_pose(PARKED_OBJECT, (1.0, 0.0, 0.0, 0.0))
        self._set_object_collisions(0, 0)
        self.model.body_gravcomp[self._obj_body] = 1.0

    def _set_object_pose(self, position: npt.ArrayLike, quat: npt.ArrayLike) -> None:
        d, qa, va = self.data, self._obj_q, self._obj_v
        d.qpos[qa:qa + 3] = position
        d.qpos[qa + 3:qa + 7] = quat
        d.qvel[va:va + 6] = 0.0

    def _set_object_collisions(self, contype: int, conaffinity: int) -> None:
        m = self.model
        m.geom_contype[self._obj_geom], m.geom_conaffinity[self._obj_geom] = contype, conaffinity
        # the broadphase filters on the per-body union as well (MuJoCo >= 3.1)
        if hasattr(m, "body_contype"):
            m.body_contype[self._obj_body], m.body_conaffinity[self._obj_body] = contype, conaffinity

    def move_shelf(self, position: npt.ArrayLike, quat: npt.ArrayLike) -> None:
        self.data.mocap_pos[self._shelf_mocap] = position
        self.data.mocap_quat[self._shelf_mocap] = quat

    def place_crate(self, x: float, y: float, yaw: float) -> None:
        self.data.mocap_pos[self._crate_mocap] = (float(x), float(y), PARKED_CRATE[2])
        self.data.mocap_quat[self._crate_mocap] = (math.cos(0.5 * yaw), 0.0, 0.0, math.sin(0.5 * yaw))

    def park_crate(self) -> None:
        self.data.mocap_pos[self._crate_mocap] = PARKED_CRATE

    def move_person(self, x: float, y: float) -> None:
        self.data.mocap_pos[self._person_mocap, 0] = x
        self.data.mocap_pos[self._person_mocap, 1] = y
