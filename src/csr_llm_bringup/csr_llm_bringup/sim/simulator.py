"""The simulated mobile manipulator and its world (plain module: MuJoCo + numpy, no rclpy).

One ``step()`` = one 1 ms physics step:
  * arm/gripper: the latest effort command (validated, clipped to effort_max, reduced above the
    joint's velocity_max like a motor's torque-speed curve) drives MuJoCo motors; gravity is on.
  * base: planar body driven by a traction model evaluated in Python. Each drive wheel has a
    velocity-controlled motor (torque limited) and a tyre force F = clip(c * (w r - v_contact),
    +-mu N); the same forces act back on the wheels. With the floor's mu the wheels roll; on a
    low-friction patch the force saturates, so the wheels spin up (or lock) while the base
    accelerates/brakes at only mu g. Wheel odometry integrates the wheel speeds, so it is wrong
    exactly where the base slips; the IMU (MuJoCo accelerometer/gyro on the base) sees the true
    motion.
  * every 10 ms: motor thermal model (effort^2 heating), person walking, scripted base drives and
    the scenario engine (timed and triggered events).
Sensors and the ground truth are read on demand (readouts.py: ``joint_positions()``, ``imu()``,
``odom()``, ``grip_force()``, ``person_distance()``, ``zone()``, ``truth()``); what scenario events
do to the world (person, object, heat, scripted drive) is in world_actions.py; both are mixins of
``Simulator``, which keeps the physics: the model, commands, stepping and the traction model.
Scenario events queue up as text for the node to publish (``pop_events()``).
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple, Union

import mujoco
import numpy as np

from .depth_camera import CameraSpec, DepthCamera, mount_pose
from .readouts import Readouts
from .robot_model import (APPROACH_HANDLE_POSE, JOINTS, REACH_SHELF_LOW_POSE, REACH_SHELF_POSE, build_mjcf,
                          default_limits, world_config)
from .thermal import ThermalModel
from .world_actions import WorldActions

GRAVITY = 9.81
SLOW_EVERY = 10          # steps between the 100 Hz updates (thermal, person, drive, scenario)
NAMED_POSES = {"approach_handle": APPROACH_HANDLE_POSE, "reach_shelf": REACH_SHELF_POSE,
               "reach_shelf_low": REACH_SHELF_LOW_POSE}


def _clip(v: float, lim: float) -> float:
    return lim if v > lim else (-lim if v < -lim else v)


class Simulator(WorldActions, Readouts):
    """The physics, sensors (Readouts) and scenario hooks (WorldActions) of the robot in its world."""

    def __init__(self, limits: Optional[Dict[str, Sequence[float]]] = None, world: Optional[dict] = None,
                 scenario=None, timestep: float = 0.001, base_max_linear: float = 0.5,
                 base_max_angular: float = 1.0, cmd_vel_timeout: float = 0.5, thermal: Optional[dict] = None,
                 velocity_limit: bool = True, camera: Optional[CameraSpec] = None):
        if world is None and scenario is not None:
            world = scenario.world      # the scenario's world settings (handle type, ...)
        lim = default_limits()
        for k, v in (limits or {}).items():
            lim[k] = [float(x) for x in v]
        for k, v in lim.items():
            if len(v) != len(JOINTS):
                raise ValueError(f"{k} needs {len(JOINTS)} values (one per joint), got {len(v)}")
        self.limits = lim
        self.world = world_config(world)
        self.dt = float(timestep)
        self.effort_max = np.asarray(lim["effort_max"], dtype=float)
        if not np.all(self.effort_max > 0):
            raise ValueError("effort_max must be positive")
        self.velocity_max = np.asarray(lim["velocity_max"], dtype=float)
        self.velocity_limit = bool(velocity_limit)
        self.base_max_linear = float(base_max_linear)
        self.base_max_angular = float(base_max_angular)
        self.cmd_vel_timeout = float(cmd_vel_timeout)

        # pass 1: where is the grip centre in the approach_handle pose? (the handle goes there)
        pose = self.world["handle_pose"]
        probe = mujoco.MjModel.from_xml_string(build_mjcf(lim, self.world, timestep=self.dt))
        hpos, hmat = self._fk_grip(probe, mujoco.MjData(probe), (0.0, 0.0, 0.0), pose)
        hyaw = math.atan2(float(hmat[1, 0]), float(hmat[0, 0]))
        self.handle_pos = hpos
        self.model = mujoco.MjModel.from_xml_string(
            build_mjcf(lim, self.world, handle_pos=hpos, handle_yaw=hyaw, timestep=self.dt))
        self.data = mujoco.MjData(self.model)
        m = self.model

        def jid(name: str) -> int:
            return mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, name)
        self._qadr = np.array([m.jnt_qposadr[jid(j)] for j in JOINTS])
        self._vadr = np.array([m.jnt_dofadr[jid(j)] for j in JOINTS])
        self._qslice = slice(int(self._qadr[0]), int(self._qadr[-1]) + 1)   # contiguous in the MJCF
        self._vslice = slice(int(self._vadr[0]), int(self._vadr[-1]) + 1)
        assert list(self._qadr) == list(range(self._qslice.start, self._qslice.stop))
        self._bx, self._by, self._byaw = (int(m.jnt_dofadr[jid(n)]) for n in ("base_x", "base_y", "base_yaw"))
        self._bqx, self._bqy, self._bqyaw = (int(m.jnt_qposadr[jid(n)]) for n in ("base_x", "base_y", "base_yaw"))
        self._door_q = int(m.jnt_qposadr[jid("door_hinge")])
        self._obj_q = int(m.jnt_qposadr[jid("object_free")])
        self._obj_v = int(m.jnt_dofadr[jid("object_free")])
        self._obj_body = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "object")
        self._obj_geom = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "object")
        self._person_mocap = int(m.body_mocapid[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "person")])
        self._shelf_mocap = int(m.body_mocapid[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "shelf")])
        self._crate_mocap = int(m.body_mocapid[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "crate")])
        self.camera = DepthCamera(m, camera)

        def sadr(name: str) -> int:
            return int(m.sensor_adr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, name)])
        self._s_pad_fixed, self._s_pad_moving = sadr("pad_fixed"), sadr("pad_moving")
        self._s_acc, self._s_gyro, self._s_quat = sadr("imu_acc"), sadr("imu_gyro"), sadr("imu_quat")
        self._scratch = mujoco.MjData(m)

        # base / wheels
        self.wheel_radius = float(self.world["wheel_radius"])
        self.wheel_track = float(self.world["wheel_track"])
        total_mass = float(np.sum(m.body_mass[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "base"):
                                              mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "door")]))
        self.robot_mass = total_mass
        self._n_wheel = 0.5 * total_mass * GRAVITY
        self._n_total = total_mass * GRAVITY
        self.floor_mu = float(self.world["floor_friction"])
        self._patches = [tuple(float(v) for v in p["box"]) + (float(p["friction"]),)
                         for p in self.world["slip_patches"]]
        self._zones = [(str(z["name"]), tuple(float(v) for v in z["box"])) for z in self.world["zones"]]
        self.wheel_inertia = 0.05          # kg m^2, incl. reflected gear inertia
        self.wheel_kv = 3.0                # N m per rad/s, wheel velocity loop ...
        self.wheel_kp = 200.0              # ... plus N m per rad of wheel angle behind its reference
        self.wheel_lag_max = 0.5           # rad, the reference never runs further ahead than this
        self.wheel_torque_max = 12.0       # N m
        self.tyre_stiffness = 2000.0       # N per m/s of slip velocity
        self.lateral_stiffness = 2000.0
        self.tyre_spring = 1.0e5           # N/m: tyre deflection (static friction below mu N)
        self.tyre_deflection = [0.0, 0.0, 0.0]   # left, right (longitudinal), lateral
        self.rolling_resistance = 0.01     # fraction of the normal load
        self.wheel_w = [0.0, 0.0]          # rad/s
        self.wheel_angle = [0.0, 0.0]
        self.wheel_torque = [0.0, 0.0]
        self.wheel_lag = [0.0, 0.0]        # reference angle - angle (the motor servo's position error)
        self.on_slip = False

        # odometry from the wheel encoders: x, y, yaw, v, w
        self._odom = [0.0, 0.0, 0.0, 0.0, 0.0]

        # commands
        self.effort_command = np.zeros(len(JOINTS))
        self.effort_applied = np.zeros(len(JOINTS))
        self._cmd_vel = (0.0, 0.0)
        self._cmd_vel_time = -math.inf
        self._drive: Optional[dict] = None     # scripted base drive (scenario), overrides cmd_vel

        self.thermal = ThermalModel(self.effort_max, **(thermal or {}))

        # person (mocap)
        ps = self.world["person_start"]
        self.person_home = (float(ps[0]), float(ps[1]))
        self.person_pos = list(self.person_home)
        # (mode, value, speed); value: the distance ("approach"), unused ("leave") or the (x, y) target ("to")
        self._person_goal: Optional[Tuple[str, Union[float, Tuple[float, float]], float]] = None
        self.person_radius = float(self.world["person_radius"])
        self.base_radius = float(self.world["base_radius"])
        self.object_present = False
        self.object_name = ""

        self.steps = 0
        self.events: List[Tuple[float, str]] = []
        self.scenario = None
        self._acc_sum = np.zeros(3)
        mujoco.mj_forward(m, self.data)
        if scenario is not None:
            self.attach_scenario(scenario)

    # ------------------------------------------------------------------ geometry helpers
    @staticmethod
    def _fk_grip(model, data, base_pose, pose: Dict[str, float]):
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

    def grip_point(self, pose):
        """Grip centre (world) and hand orientation (3x3) if the arm were in `pose` (name or
        {joint: rad}) with the base where it is now."""
        if isinstance(pose, str):
            if pose not in NAMED_POSES:
                raise ValueError(f"unknown pose {pose!r} (known: {', '.join(NAMED_POSES)})")
            pose = NAMED_POSES[pose]
        s = self._scratch
        s.qpos[:] = self.data.qpos
        return self._fk_grip(self.model, s, self.base_pose(), pose)

    def depth_image(self):
        """The head camera's depth image (float32 m, +inf = no return) and geom ids, as of now."""
        position, rotation = mount_pose(self.camera.spec, self.base_pose())
        return self.camera.capture(self.data, position, rotation)

    # ------------------------------------------------------------------ commands
    def check_efforts(self, values) -> Tuple[Optional[np.ndarray], Optional[str]]:
        """(clipped command, None), or (None, fault kind) for a command to ignore: 'effort_length'
        (not one value per joint), 'effort_nonfinite' (NaN/inf), 'effort_type'. Thread-safe (pure)."""
        try:
            arr = np.array(values, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            return None, "effort_type"
        if arr.size != len(JOINTS):
            return None, "effort_length"
        if not np.all(np.isfinite(arr)):
            return None, "effort_nonfinite"
        return np.clip(arr, -self.effort_max, self.effort_max), None

    def set_efforts(self, values) -> Optional[str]:
        """Validate and store an effort command (joint order of JOINTS). Returns None, or the fault
        kind when it is ignored; the previous command is then kept."""
        arr, fault = self.check_efforts(values)
        if arr is not None:
            self.effort_command[:] = arr
        return fault

    def set_cmd_vel(self, vx: float, wz: float) -> Optional[str]:
        vx, wz = float(vx), float(wz)
        if not (math.isfinite(vx) and math.isfinite(wz)):
            return "cmd_vel_nonfinite"
        self._cmd_vel = (_clip(vx, self.base_max_linear), _clip(wz, self.base_max_angular))
        self._cmd_vel_time = self.time
        return None

    # ------------------------------------------------------------------ stepping
    @property
    def time(self) -> float:
        return self.steps * self.dt

    def _base_command(self) -> Tuple[float, float]:
        d = self._drive
        if d is not None:
            return d["vx"], d["wz"]
        if self.time - self._cmd_vel_time > self.cmd_vel_timeout:
            return 0.0, 0.0
        return self._cmd_vel

    def step(self, n: int = 1) -> None:
        for _ in range(n):
            self._step_once()

    def _step_once(self) -> None:
        d = self.data
        # --- arm efforts (clipped command; torque-speed limit above velocity_max)
        u = self.effort_command
        if self.velocity_limit:
            qv = d.qvel[self._vslice]
            over = np.abs(qv) - self.velocity_max
            if (over > 0.0).any():
                u = u.copy()
                pushing = (over > 0.0) & (u * qv > 0.0)
                u[pushing] *= np.maximum(0.0, 1.0 - over[pushing] / (0.25 * self.velocity_max[pushing]))
        self.effort_applied[:] = u
        d.ctrl[:len(JOINTS)] = u
        # --- base traction
        self._base_forces()
        mujoco.mj_step(self.model, d)
        self.steps += 1
        # wheel odometry (encoders)
        r, b, dt = self.wheel_radius, self.wheel_track, self.dt
        wl, wr = self.wheel_w
        self.wheel_angle[0] += wl * dt
        self.wheel_angle[1] += wr * dt
        v = 0.5 * r * (wl + wr)
        w = r * (wr - wl) / b
        o = self._odom
        yaw_mid = o[2] + 0.5 * w * dt
        o[0] += v * math.cos(yaw_mid) * dt
        o[1] += v * math.sin(yaw_mid) * dt
        o[2] += w * dt
        o[3], o[4] = v, w
        if self.steps % SLOW_EVERY == 0:
            self._slow_update(SLOW_EVERY * dt)

    def _base_forces(self) -> None:
        d = self.data
        q, qv = d.qpos, d.qvel
        x, y, yaw = float(q[self._bqx]), float(q[self._bqy]), float(q[self._bqyaw])
        c, s = math.cos(yaw), math.sin(yaw)
        vxw, vyw, wz = float(qv[self._bx]), float(qv[self._by]), float(qv[self._byaw])
        vf = c * vxw + s * vyw
        vl = -s * vxw + c * vyw
        mu = self.floor_mu
        slip = False
        for x0, x1, y0, y1, pmu in self._patches:
            if x0 <= x <= x1 and y0 <= y <= y1:
                mu, slip = pmu, True
                break
        self.on_slip = slip
        vc, wc = self._base_command()
        r, hb = self.wheel_radius, 0.5 * self.wheel_track
        fmax = mu * self._n_wheel
        k, kv, tmax, dt, iw = self.tyre_stiffness, self.wheel_kv, self.wheel_torque_max, self.dt, self.wheel_inertia
        # wheel servos: velocity loop plus a position term on the integrated reference (holds the
        # base still against arm reaction torques when the command is zero)
        w_l, w_r = self.wheel_w
        wcl, wcr = (vc - wc * hb) / r, (vc + wc * hb) / r
        lag, kp, lmax = self.wheel_lag, self.wheel_kp, self.wheel_lag_max
        lag[0] = _clip(lag[0] + (wcl - w_l) * dt, lmax)
        lag[1] = _clip(lag[1] + (wcr - w_r) * dt, lmax)
        t_l = _clip(kv * (wcl - w_l) + kp * lag[0], tmax)
        t_r = _clip(kv * (wcr - w_r) + kp * lag[1], tmax)
        # tyres: spring (deflection, i.e. stiction) + damper on the slip velocity, saturating at mu N
        defl, ks = self.tyre_deflection, self.tyre_spring
        dmax = fmax / ks
        s_l = w_l * r - (vf - wz * hb)
        s_r = w_r * r - (vf + wz * hb)
        defl[0] = _clip(defl[0] + s_l * dt, dmax)
        defl[1] = _clip(defl[1] + s_r * dt, dmax)
        f_l = _clip(ks * defl[0] + k * s_l, fmax)
        f_r = _clip(ks * defl[1] + k * s_r, fmax)
        self.wheel_w[0] = w_l + dt * (t_l - f_l * r) / iw
        self.wheel_w[1] = w_r + dt * (t_r - f_r * r) / iw
        self.wheel_torque[0], self.wheel_torque[1] = t_l, t_r
        flmax = mu * self._n_total
        defl[2] = _clip(defl[2] - vl * dt, flmax / (2.0 * ks))
        f_lat = _clip(2.0 * ks * defl[2] - self.lateral_stiffness * vl, flmax)
        f_long = f_l + f_r - _clip(50.0 * vf, self.rolling_resistance * self._n_total)
        fa = d.qfrc_applied
        fa[self._bx] = c * f_long - s * f_lat
        fa[self._by] = s * f_long + c * f_lat
        fa[self._byaw] = (f_r - f_l) * hb

    def _slow_update(self, dt: float) -> None:
        now = self.time
        self.thermal.update(self.effort_applied, dt, now)
        self._update_person(dt)
        self._update_drive()
        if self.scenario is not None:
            self.scenario.tick(self)

    # ------------------------------------------------------------------ scenario hooks
    def attach_scenario(self, scenario) -> None:
        self.scenario = scenario
        start = scenario.robot_start
        if start is not None:
            self.set_base_pose(*start)
        if scenario.person_start is not None:
            self.person_home = tuple(scenario.person_start)
            self.person_pos = list(self.person_home)
            self._write_person()

    def set_base_pose(self, x: float, y: float, yaw: float) -> None:
        d = self.data
        d.qpos[self._bqx], d.qpos[self._bqy], d.qpos[self._bqyaw] = x, y, yaw
        d.qvel[self._bx] = d.qvel[self._by] = d.qvel[self._byaw] = 0.0
        self._odom[:] = [float(x), float(y), float(yaw), 0.0, 0.0]
        self.wheel_w[:] = [0.0, 0.0]
        self.wheel_lag[:] = [0.0, 0.0]
        self.tyre_deflection[:] = [0.0, 0.0, 0.0]
        mujoco.mj_forward(self.model, d)

    def say(self, text: str) -> None:
        self.events.append((self.time, str(text)))

    def pop_events(self) -> List[Tuple[float, str]]:
        out, self.events = self.events, []
        return out
