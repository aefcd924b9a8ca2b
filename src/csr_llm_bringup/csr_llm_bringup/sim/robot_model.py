"""MJCF of the mobile manipulator and its small world (plain module: no rclpy).

Robot
  base      planar body (slide x, slide y, hinge yaw), 24 kg box 0.50 x 0.40 x 0.20 m; its two
            drive wheels (radius 0.08 m, track 0.44 m) are simulated in Python by the traction model
            of ``traction.py`` (wheel speed, motor torque, friction-limited tyre force), which is
            what lets the wheels spin on the low-friction patch while the base slides less.
  arm       mounted on the base top (0.12, 0, 0.30) m above the base origin:
              arm_shoulder_pan   hinge z     shoulder housing 0.5 kg
              arm_shoulder_lift  hinge y     upper arm 0.30 m, 0.6 kg (vertical at 0)
              arm_elbow          hinge y     forearm 0.30 m, 0.45 kg (horizontal forward at 0)
              arm_wrist          hinge y     hand 0.25 kg, grip centre 0.12 m beyond the wrist
              gripper            slide z     parallel jaw closing along the hand's z axis (vertical
                                             when the hand is level): a fixed lower jaw and a moving
                                             upper jaw (0.03 kg); the joint position is the opening
                                             between the pads, 0..0.08 m; negative effort closes
            The jaws close across the plane in which the arm sweeps toward its target, so an
            approach that comes in sideways (pan and reach together, as the router's B-splines do)
            slides the jaws around a horizontal bar instead of hitting it.
            positive lift/wrist pitch the arm forward/down (rotation about +y).
            Effort motors with ctrlrange = effort limits, joint damping and rotor armature.
  sensors   touch sites on both finger pads (grip force), accelerometer/gyro/orientation at the IMU
            site on the base; the head depth camera (depth_camera.py) casts rays from a mast on the
            base and sees every geom except the robot's own (geom group ROBOT_GEOM_GROUP).

World (x forward from the start pose)
  door      a hinged door with a spring-returned lever handle: a horizontal bar (radius 7 mm,
            0.24 m long, along the hand's y axis, pivot at its latch end, +-0.6 rad) whose middle is
            placed, at build time, at
            the grip centre of the arm in the approach_handle end pose with the base at the origin,
            so gripping it needs no base motion; pulling swings the door open (hinge z, damped).
  zones     rectangles on the floor (see DEFAULT_WORLD): door around the start, corridor behind
            it (-x, with the low-friction patch), warehouse beyond the door (+x).
  handle    ``handle``: "lever" (the bar above, on a tall backplate), "knob" (a ball knob at the
            bar's middle on a round rose, no lever joint) or "none" (a plain panel): what the
            head camera tells apart (level 1 picks the open_door variant from it).
  shelf     a mocap board that the scenario moves under the object it places.
  crate     a mocap box (visual only, like the person) a scenario can put in the robot's path.
  object    a 0.2 kg flat box (free joint, 0.14 x 0.08 x 0.022 m), parked out of the world (no
            contacts, gravity compensated) until a scenario places it: "in reach" places it with its
            front 6 cm overhanging the edge of an inclined shelf board (a carton-flow shelf,
            tilted like the hand in the reach pose), so the jaws close on the overhang.
  person    a mocap capsule moved by the scenario (no contacts).
Contacts: only the jaws and palm touch the world (handle, object, shelf board); the object also
touches the floor. The base, the arm links, the door panel and the person have no collision
geometry (a simplification: the base can drive through the door panel and the person).
"""
from __future__ import annotations

import copy
import math
from typing import Dict, List, Mapping, Optional, Sequence

from csr_llm_common.robot_description import LIMIT_KEYS

from .depth_camera import ROBOT_GEOM_GROUP

JOINTS: List[str] = ["arm_shoulder_pan", "arm_shoulder_lift", "arm_elbow", "arm_wrist", "gripper"]
WHEELS: List[str] = ["wheel_left", "wheel_right"]

def default_limits() -> Dict[str, List[float]]:
    """Joint limits (JOINTS order) from config/robot_description.yaml, the file the router reads too."""
    from csr_llm_common.robot_description import load_robot_description

    from csr_llm_common.paths import config_dir
    description = load_robot_description(config_dir() / "robot_description.yaml")
    limits = description.limits()
    names = description.joint_names
    return {key: [values[names.index(j)] for j in JOINTS] for key, values in limits.items()}


# End pose of the router's approach_handle sub-task (config/router_subtasks.yaml): the door handle
# is placed at the grip centre in this pose.
APPROACH_HANDLE_POSE = {"arm_shoulder_pan": 0.30, "arm_shoulder_lift": 0.70, "arm_elbow": -1.00,
                        "arm_wrist": 0.30, "gripper": 0.04}
# End pose of reach_shelf: where a scenario can place an object "in reach".
REACH_SHELF_POSE = {"arm_shoulder_pan": -0.40, "arm_shoulder_lift": 0.80, "arm_elbow": -0.80,
                    "arm_wrist": 0.40, "gripper": 0.04}
# End pose of reach_shelf_low (the low-shelf variant of pick_object): the grip centre 22 cm lower,
# the hand pitched as in REACH_SHELF_POSE.
REACH_SHELF_LOW_POSE = {"arm_shoulder_pan": -0.40, "arm_shoulder_lift": 1.05, "arm_elbow": -0.50,
                        "arm_wrist": -0.10, "gripper": 0.04}
HANDLE_TYPES = ("lever", "knob", "none")

DEFAULT_WORLD = {
    # base geometry and traction
    "wheel_radius": 0.08,
    "wheel_track": 0.44,
    "base_mass": 24.0,
    "floor_friction": 0.9,
    # rectangles [xmin, xmax, ymin, ymax]; first match wins, else default_zone
    "zones": [
        {"name": "door", "box": [-0.7, 1.2, -3.0, 3.0]},
        {"name": "warehouse", "box": [1.2, 8.0, -3.0, 3.0]},
        {"name": "corridor", "box": [-8.0, -0.7, -3.0, 3.0]},
    ],
    "default_zone": "corridor",
    "slip_patches": [{"box": [-1.8, -0.9, -1.5, 1.5], "friction": 0.06}],
    "handle_pose": dict(APPROACH_HANDLE_POSE),
    "handle": "lever",             # lever | knob | none (HANDLE_TYPES)
    "door_hinge_offset": 0.70,     # hinge this far to the right (-y) of the handle
    "door_damping": 3.0,
    "door_stiffness": 1.0,
    "shelf_default": [3.0, -0.3, 0.45],
    "person_start": [0.8, -5.0],
    "person_radius": 0.15,
    "base_radius": 0.32,          # bounding circle of the base footprint (proximity is measured from it)
}

SHOULDER = (0.12, 0.0, 0.30)
UPPER_ARM = 0.30
FOREARM = 0.30
GRIP_OFFSET = 0.12
FINGER_INNER = -0.02       # pad face of the fixed (lower) jaw, hand frame z
FINGER_HALF = (0.015, 0.006, 0.006)   # jaws: capsules along the hand x axis, radius 6 mm
HANDLE_RADIUS = 0.007
HANDLE_HALF_LENGTH = 0.12
LEVER_STIFFNESS = 0.5      # N m/rad: return spring of the door lever (pivot at the latch end)
OBJECT_HALF = (0.07, 0.04, 0.011)
OBJECT_OFFSET = 0.04       # object centre beyond the grip centre along the hand x axis
SHELF_HALF = (0.12, 0.12, 0.01)
SHELF_OFFSET = 0.03 + 0.12  # shelf board centre beyond the grip centre (its edge 3 cm out)
OBJECT_MASS = 0.2
PARKED_OBJECT = (0.0, 30.0, 1.0)
CRATE_HALF = (0.25, 0.25, 0.25)
PARKED_CRATE = (0.0, 40.0, 0.25)
KNOB_RADIUS = 0.022


def world_config(overrides: Optional[dict] = None) -> dict:
    cfg = copy.deepcopy(DEFAULT_WORLD)
    for k, v in (overrides or {}).items():
        if k not in cfg:
            raise ValueError(f"unknown world setting {k!r} (known: {', '.join(sorted(cfg))})")
        cfg[k] = v
    return cfg


def _f(v: Sequence[float]) -> str:
    return " ".join(f"{float(x):.6g}" for x in v)


def build_mjcf(limits: Optional[Mapping[str, Sequence[float]]] = None, world: Optional[dict] = None,
               handle_pos: Sequence[float] = (0.72, 0.18, 0.67), handle_yaw: float = 0.0,
               timestep: float = 0.001) -> str:
    """The MJCF text. ``handle_pos``/``handle_yaw``: world pose of the handle bar's centre."""
    lim = default_limits() if not limits or set(limits) != set(LIMIT_KEYS) else {}
    for k, v in (limits or {}).items():
        lim[k] = list(v)
    w = world_config(world)
    if w["handle"] not in HANDLE_TYPES:
        raise ValueError(f"handle must be one of {HANDLE_TYPES}, got {w['handle']!r}")
    return f"""<mujoco model="csr_llm_mobile_manipulator">
{_header_mjcf(timestep)}
  <worldbody>
    <light pos="0 0 4" dir="0 0 -1"/>
    <geom name="floor" class="world" type="plane" size="12 12 0.1" rgba="0.8 0.8 0.8 1"/>
{_slip_patches_mjcf(w)}
{_robot_mjcf(lim, w)}
{_door_mjcf(w, handle_pos, handle_yaw)}
{_props_mjcf(w)}
  </worldbody>
{_actuators_and_sensors_mjcf(lim["effort_max"])}
</mujoco>
"""


def _header_mjcf(timestep: float) -> str:
    """Compiler, simulation options and the default classes (world, robot, grip)."""
    return f"""  <compiler angle="radian" autolimits="true"/>
  <option timestep="{timestep}" gravity="0 0 -9.81" integrator="implicitfast"/>
  <default>
    <geom contype="0" conaffinity="0" density="0"/>
    <default class="world">
      <geom contype="1" conaffinity="3" friction="1.0 0.02 0.001"/>
    </default>
    <default class="robot">
      <geom group="{ROBOT_GEOM_GROUP}"/>
      <default class="grip">
        <geom contype="2" conaffinity="0" friction="1.5 0.02 0.001" solref="0.004 1" solimp="0.95 0.99 0.001"/>
      </default>
    </default>
  </default>"""


def _slip_patches_mjcf(w: dict) -> str:
    """The low-friction floor patches (visual only: the traction model applies their friction)."""
    return "\n".join(
        f'    <geom name="slip_patch_{i}" type="box" contype="0" conaffinity="0" rgba="0.5 0.7 1 0.5" '
        f'pos="{_f([(p["box"][0] + p["box"][1]) / 2, (p["box"][2] + p["box"][3]) / 2, 0.001])}" '
        f'size="{_f([(p["box"][1] - p["box"][0]) / 2, (p["box"][3] - p["box"][2]) / 2, 0.001])}"/>'
        for i, p in enumerate(w["slip_patches"]))


def _robot_mjcf(lim: Mapping[str, Sequence[float]], w: dict) -> str:
    """The base with its wheels and IMU, and the arm with the gripper and its pad sensors."""
    lo, hi = lim["position_min"], lim["position_max"]
    r = float(w["wheel_radius"])
    track = float(w["wheel_track"])
    # the fixed finger's capsule: x ends and height in the hand frame
    finger_x0, finger_x1 = f"{GRIP_OFFSET - FINGER_HALF[0]:.6g}", f"{GRIP_OFFSET + FINGER_HALF[0]:.6g}"
    finger_z = f"{FINGER_INNER - FINGER_HALF[2]:.6g}"
    return f"""    <body name="base" pos="0 0 0" childclass="robot">
      <joint name="base_x" type="slide" axis="1 0 0"/>
      <joint name="base_y" type="slide" axis="0 1 0"/>
      <joint name="base_yaw" type="hinge" axis="0 0 1"/>
      <geom name="chassis" type="box" pos="0 0 0.15" size="0.25 0.20 0.10" mass="{float(w['base_mass']):.6g}"
            rgba="0.3 0.3 0.35 1"/>
      <geom name="wheel_left_geom" type="cylinder" pos="0 {track / 2:.6g} {r:.6g}" zaxis="0 1 0" size="{r:.6g} 0.02"
            rgba="0.1 0.1 0.1 1"/>
      <geom name="wheel_right_geom" type="cylinder" pos="0 {-track / 2:.6g} {r:.6g}" zaxis="0 1 0" size="{r:.6g} 0.02"
            rgba="0.1 0.1 0.1 1"/>
      <site name="imu" pos="0 0 0.15" size="0.01"/>
      <body name="shoulder" pos="{_f(SHOULDER)}">
        <joint name="arm_shoulder_pan" type="hinge" axis="0 0 1" range="{lo[0]} {hi[0]}" damping="0.8" armature="0.08"/>
        <geom type="cylinder" size="0.05 0.03" mass="0.5" rgba="0.2 0.4 0.8 1"/>
        <body name="upper_arm" pos="0 0 0.04">
          <joint name="arm_shoulder_lift" type="hinge" axis="0 1 0" range="{lo[1]} {hi[1]}" damping="1.0"
                 armature="0.08"/>
          <geom type="capsule" fromto="0 0 0 0 0 {UPPER_ARM}" size="0.03" mass="0.6" rgba="0.2 0.4 0.8 1"/>
          <body name="forearm" pos="0 0 {UPPER_ARM}">
            <joint name="arm_elbow" type="hinge" axis="0 1 0" range="{lo[2]} {hi[2]}" damping="0.6" armature="0.05"/>
            <geom type="capsule" fromto="0 0 0 {FOREARM} 0 0" size="0.025" mass="0.45" rgba="0.2 0.4 0.8 1"/>
            <body name="hand" pos="{FOREARM} 0 0">
              <joint name="arm_wrist" type="hinge" axis="0 1 0" range="{lo[3]} {hi[3]}" damping="0.2" armature="0.02"/>
              <geom name="palm" class="grip" type="box" pos="0.055 0 0" size="0.015 0.03 0.035" mass="0.25"
                    rgba="0.3 0.3 0.3 1"/>
              <geom type="box" pos="0.0875 0 {FINGER_INNER - 2 * FINGER_HALF[2] + 0.003:.6g}" size="0.0175 0.01 0.003"
                    mass="0.01" rgba="0.9 0.5 0.1 1"/>
              <geom name="finger_fixed" class="grip" type="capsule"
                    fromto="{finger_x0} 0 {finger_z} {finger_x1} 0 {finger_z}"
                    size="{FINGER_HALF[2]}" mass="0.02" rgba="0.9 0.5 0.1 1"/>
              <site name="pad_fixed" type="box" pos="{GRIP_OFFSET} 0 {FINGER_INNER - FINGER_HALF[2]:.6g}"
                    size="{_f([FINGER_HALF[0] + 0.002, FINGER_HALF[1] + 0.002, FINGER_HALF[2] + 0.004])}"/>
              <site name="grip_center" pos="{GRIP_OFFSET} 0 0" size="0.005"/>
              <body name="finger_moving" pos="{GRIP_OFFSET} 0 {FINGER_INNER}">
                <joint name="gripper" type="slide" axis="0 0 1" range="{lo[4]} {hi[4]}" damping="2.0" armature="0.2"/>
                <geom name="finger_moving" class="grip" type="capsule"
                      fromto="{-FINGER_HALF[0]} 0 {FINGER_HALF[2]} {FINGER_HALF[0]} 0 {FINGER_HALF[2]}"
                      size="{FINGER_HALF[2]}" mass="0.03" rgba="0.9 0.5 0.1 1"/>
                <geom type="box" pos="-0.0325 0 {2 * FINGER_HALF[2] - 0.003:.6g}" size="0.0175 0.01 0.003" mass="0.005"
                      rgba="0.9 0.5 0.1 1"/>
                <site name="pad_moving" type="box" pos="0 0 {FINGER_HALF[2]}"
                      size="{_f([FINGER_HALF[0] + 0.002, FINGER_HALF[1] + 0.002, FINGER_HALF[2] + 0.004])}"/>
              </body>
            </body>
          </body>
        </body>
      </body>
    </body>"""


def _door_mjcf(w: dict, handle_pos: Sequence[float], handle_yaw: float) -> str:
    """The hinged door with its handle, the handle bar's centre at handle_pos."""
    hx, hy, hz = (float(v) for v in handle_pos)
    # door: hinge `door_hinge_offset` to the right of the handle (in the handle's yaw frame), panel
    # 4 cm behind the handle axis; opening (+angle) swings the handle toward the robot.
    c, s = math.cos(handle_yaw), math.sin(handle_yaw)
    off = float(w["door_hinge_offset"])
    panel_dx = 0.04
    hinge = (hx + c * panel_dx + s * off, hy + s * panel_dx - c * off, 0.0)
    handle = _handle_mjcf(str(w["handle"]), off, panel_dx, hz)
    return f"""    <body name="door" pos="{_f(hinge)}" euler="0 0 {handle_yaw:.9g}">
      <joint name="door_hinge" type="hinge" axis="0 0 1" range="0 1.6" damping="{float(w['door_damping']):.6g}"
             stiffness="{float(w['door_stiffness']):.6g}"/>
      <geom name="door_panel" type="box" pos="0 {off / 2 + 0.05:.6g} 1.0" size="0.02 {off / 2 + 0.15:.6g} 1.0" mass="8"
            rgba="0.6 0.4 0.2 1"/>
{handle}
    </body>"""


def _props_mjcf(w: dict) -> str:
    """The mocap shelf board, the (parked) object, the mocap crate and the person."""
    ps = w["person_start"]
    sh = w["shelf_default"]
    return f"""    <body name="shelf" mocap="true" pos="{_f(sh)}">
      <geom name="shelf_board" class="world" type="box" size="{_f(SHELF_HALF)}" rgba="0.5 0.35 0.2 1"/>
    </body>
    <body name="object" pos="{_f(PARKED_OBJECT)}" gravcomp="1">
      <freejoint name="object_free"/>
      <geom name="object" type="box" size="{_f(OBJECT_HALF)}" mass="{OBJECT_MASS}" friction="1.0 0.02 0.001"
            rgba="0.2 0.7 0.3 1"/>
    </body>
    <body name="crate" mocap="true" pos="{_f(PARKED_CRATE)}">
      <geom name="crate" type="box" size="{_f(CRATE_HALF)}" rgba="0.6 0.5 0.3 1"/>
    </body>
    <body name="person" mocap="true" pos="{_f([ps[0], ps[1], 0.9])}">
      <geom name="person" type="capsule" size="{float(w['person_radius']):.6g} 0.7" rgba="0.9 0.7 0.6 1"/>
    </body>"""


def _actuators_and_sensors_mjcf(emax: Sequence[float]) -> str:
    """One effort motor per arm joint (ctrlrange = its effort limit), the pad and IMU sensors."""
    motors = "\n".join(f'    <motor name="{j}" joint="{j}" ctrlrange="{-emax[i]:.6g} {emax[i]:.6g}"/>'
                       for i, j in enumerate(JOINTS))
    return f"""  <actuator>
{motors}
  </actuator>
  <sensor>
    <touch name="pad_fixed" site="pad_fixed"/>
    <touch name="pad_moving" site="pad_moving"/>
    <accelerometer name="imu_acc" site="imu"/>
    <gyro name="imu_gyro" site="imu"/>
    <framequat name="imu_quat" objtype="site" objname="imu"/>
  </sensor>"""

def _handle_mjcf(kind: str, off: float, panel_dx: float, hz: float) -> str:
    """The door's handle bodies (door frame): the sprung lever on its backplate, a knob, or nothing.

    Collision geoms sit in child bodies: mj_multiRay skips a body whose collision geoms' bounding
    volume the ray misses, so a visual panel sharing a body with a small collision geom goes unseen."""
    face = -0.02        # the panel's front face (door frame x)
    if kind == "none":
        return ""
    if kind == "knob":
        return f"""      <geom name="knob_rose" type="cylinder" pos="{face - 0.01:.6g} {off:.6g} {hz:.6g}" zaxis="1 0 0"
            size="0.06 0.01" rgba="0.7 0.7 0.7 1"/>
      <body name="knob" pos="{-panel_dx:.6g} {off:.6g} {hz:.6g}">
        <geom name="handle" class="world" type="sphere" size="{KNOB_RADIUS}" rgba="0.8 0.8 0.1 1"/>
      </body>"""
    plate = f"{face - 0.012:.6g} {off + HANDLE_HALF_LENGTH:.6g} {hz - 0.05:.6g}"
    return f"""      <geom name="lever_plate" type="box" pos="{plate}" size="0.012 0.035 0.16" rgba="0.7 0.7 0.7 1"/>
      <body name="handle_lever" pos="{-panel_dx:.6g} {off + HANDLE_HALF_LENGTH:.6g} {hz:.6g}" gravcomp="1">
        <joint name="handle_lever" type="hinge" axis="1 0 0" range="-0.6 0.6" stiffness="{LEVER_STIFFNESS}"
               damping="0.05" armature="0.002"/>
        <geom name="handle" class="world" type="capsule" pos="0 {-HANDLE_HALF_LENGTH} 0" zaxis="0 1 0"
              size="{HANDLE_RADIUS} {HANDLE_HALF_LENGTH}" mass="0.2" rgba="0.8 0.8 0.1 1"/>
        <geom type="box" pos="{panel_dx / 2:.6g} 0 0" size="{panel_dx / 2:.6g} 0.01 0.01" mass="0.02"
              rgba="0.8 0.8 0.1 1"/>
      </body>"""
