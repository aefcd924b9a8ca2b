"""The simulated mobile manipulator and its world (plain module: MuJoCo + numpy, no rclpy).

One ``step()`` = one 1 ms physics step:
  * arm/gripper: the latest effort command (commands.py: validated, clipped to effort_max, reduced
    above the joint's velocity_max like a motor's torque-speed curve) drives MuJoCo motors; gravity
    is on.
  * base: planar body driven by the traction model (traction.py: wheel motors, friction-limited
    tyres, wheel odometry that is wrong where the base slips); the IMU (MuJoCo accelerometer/gyro
    on the base) sees the true motion.
  * every 10 ms: motor thermal model (thermal.py), person walking, scripted base drives
    (world_actions.py), the scenario engine (timed and triggered events) and the safety record
    (safety_probe.py: the safety counters and the motion log from the ground truth).

``Simulator`` is a facade over parts that each own their state: ``physics`` (mujoco_world.py: the
MuJoCo model and data), ``arm`` and ``cmd_vel`` (the commands), ``traction``, ``thermal``, ``person``,
``shelf_object``, ``operator`` (the scripted drive), ``safety``, ``camera`` and ``readouts`` (sensors and ground
truth, read on demand). Scenario events queue up as text for the node to publish (``pop_events()``).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .commands import ArmEfforts, CmdVel, SimClock
from .depth_camera import CameraSpec, DepthCamera, mount_pose
from .mujoco_world import MujocoWorld, Pose
from .readouts import DetectedObject, Readouts, ZoneMap
from .robot_model import JOINTS, default_limits, world_config
from .safety import SafetyLimits
from .safety_probe import SafetyRecord
from .thermal import ThermalModel
from .traction import BaseTraction
from .world_actions import Person, ScriptedDrive, ShelfObject, heat_joint

SLOW_EVERY = 10          # steps between the 100 Hz updates (thermal, person, drive, scenario)


def joint_limits(overrides: Optional[Dict[str, Sequence[float]]]) -> Dict[str, List[float]]:
    """The robot description's joint limits with `overrides` applied; one value per joint each."""
    lim = default_limits()
    for k, v in (overrides or {}).items():
        lim[k] = [float(x) for x in v]
    for k, v in lim.items():
        if len(v) != len(JOINTS):
            raise ValueError(f"{k} needs {len(JOINTS)} values (one per joint), got {len(v)}")
    return lim


class Simulator:
    """The physics, sensors and scenario hooks of the robot in its world."""

    def __init__(self, limits: Optional[Dict[str, Sequence[float]]] = None, world: Optional[dict] = None,
                 scenario=None, timestep: float = 0.001, base_max_linear: float = 0.5,
                 base_max_angular: float = 1.0, cmd_vel_timeout: float = 0.5, thermal: Optional[dict] = None,
                 velocity_limit: bool = True, camera: Optional[CameraSpec] = None,
                 safety: Optional[SafetyLimits] = None):
        if world is None and scenario is not None:
            world = scenario.world      # the scenario's world settings (handle type, ...)
        self.limits = joint_limits(limits)
        self.world = w = world_config(world)
        self.dt = float(timestep)
        self.clock = SimClock(self.dt)
        self.arm = ArmEfforts(self.limits, velocity_limit)
        self.cmd_vel = CmdVel(base_max_linear, base_max_angular, cmd_vel_timeout)
        self.physics = MujocoWorld(self.limits, w, self.dt)
        self.camera = DepthCamera(self.physics.model, camera)
        self.traction = BaseTraction(w, self.physics.robot_mass, self.dt)
        self.thermal = ThermalModel(self.arm.effort_max, **(thermal or {}))
        self.person = Person(self.physics, w["person_start"], w["person_radius"], w["base_radius"])
        self.shelf_object = ShelfObject(self.physics)
        self.operator = ScriptedDrive()
        self.safety = SafetyRecord(self.physics, self.arm, self.traction, self.thermal, self.person,
                                   safety or SafetyLimits())
        self.readouts = Readouts(self.clock, self.physics, self.arm, self.traction, self.thermal, self.person,
                                 self.shelf_object, self.operator, ZoneMap(w["zones"], w["default_zone"]))
        self.events: List[Tuple[float, str]] = []
        self.scenario: Any = None
        if scenario is not None:
            self.attach_scenario(scenario)

    # ------------------------------------------------------------------ state of the parts
    @property
    def model(self):
        return self.physics.model

    @property
    def data(self):
        return self.physics.data

    @property
    def handle_pos(self) -> Tuple[float, ...]:
        return self.physics.handle_pos

    @property
    def steps(self) -> int:
        return self.clock.steps

    @property
    def time(self) -> float:
        return self.clock.time

    @property
    def effort_command(self) -> np.ndarray:
        return self.arm.command

    @property
    def on_slip(self) -> bool:
        return self.traction.on_slip

    @property
    def object_present(self) -> bool:
        return self.shelf_object.present

    @property
    def driving(self) -> bool:
        return self.operator.active

    # ------------------------------------------------------------------ commands
    def check_efforts(self, values) -> Tuple[Optional[np.ndarray], Optional[str]]:
        return self.arm.check(values)

    def set_efforts(self, values) -> Optional[str]:
        return self.arm.set(values)

    def set_cmd_vel(self, vx: float, wz: float) -> Optional[str]:
        return self.cmd_vel.set(vx, wz, self.time)

    def base_command(self) -> Tuple[float, float]:
        """(vx, wz) the wheels follow now: the scripted drive's, else cmd_vel's."""
        if self.operator.active:
            return self.operator.command()
        return self.cmd_vel.current(self.time)

    # ------------------------------------------------------------------ stepping
    def step(self, n: int = 1) -> None:
        for _ in range(n):
            self._step_once()

    def _step_once(self) -> None:
        physics = self.physics
        physics.set_motor_efforts(self.arm.apply(physics.joint_velocities()))
        physics.apply_base_forces(*self.traction.base_forces(
            physics.base_pose(), physics.base_velocity_world(), self.base_command()))
        physics.step()
        self.clock.tick()
        self.traction.integrate_odometry()
        if self.clock.steps % SLOW_EVERY == 0:
            self._slow_update(SLOW_EVERY * self.dt)

    def _slow_update(self, dt: float) -> None:
        now = self.time
        self.thermal.update(self.arm.applied, dt, now)
        self.person.update(dt, self.physics.base_pose())
        self.operator.update(self.time, self.physics.base_pose())
        if self.scenario is not None:
            self.scenario.tick(self)
        self.safety.update(now)

    # ------------------------------------------------------------------ scenario hooks
    def attach_scenario(self, scenario) -> None:
        self.scenario = scenario
        if scenario.robot_start is not None:
            self.set_base_pose(*scenario.robot_start)
        if scenario.person_start is not None:
            self.person.start_at(scenario.person_start)

    def set_base_pose(self, x: float, y: float, yaw: float) -> None:
        self.traction.reset(x, y, yaw)
        self.physics.place_base(x, y, yaw)

    def set_door_angle(self, angle: float) -> None:
        self.physics.set_door_angle(angle)

    def say(self, text: str) -> None:
        self.events.append((self.time, str(text)))

    def pop_events(self) -> List[Tuple[float, str]]:
        out, self.events = self.events, []
        return out

    def person_approach(self, distance: float, speed: float = 1.0) -> None:
        self.person.approach(distance, speed)

    def person_leave(self, speed: float = 1.0) -> None:
        self.person.leave(speed)

    def person_to(self, x: float, y: float, speed: float = 1.0) -> None:
        self.person.walk_to(x, y, speed)

    def place_object(self, name: str = "box", position: Optional[Sequence[float]] = None, yaw: float = 0.0,
                     in_reach: Optional[Pose] = None) -> Tuple[float, float, float]:
        return self.shelf_object.place(name, position, yaw, in_reach)

    def remove_object(self) -> None:
        self.shelf_object.remove()

    def place_crate(self, x: float, y: float, yaw: float = 0.0) -> None:
        self.physics.place_crate(x, y, yaw)

    def remove_crate(self) -> None:
        self.physics.park_crate()

    def heat(self, joint: str, rate: float = 0.0, duration: float = 0.0, add: float = 0.0) -> None:
        heat_joint(self.thermal, joint, self.time, rate, duration, add)

    def drive(self, speed: float, to_x: Optional[float] = None, duration: Optional[float] = None,
              wz: float = 0.0, timeout: float = 20.0, heading: float = 0.0, brake: float = 0.0) -> None:
        """Scripted base motion (world_actions.ScriptedDrive.start) from now."""
        self.operator.start(self.time, self.physics.base_pose(), speed, to_x, duration, wz, timeout, heading, brake)

    # ------------------------------------------------------------------ readouts
    def joint_positions(self) -> np.ndarray:
        return self.physics.joint_positions()

    def joint_velocities(self) -> np.ndarray:
        return self.physics.joint_velocities()

    def joint_efforts(self) -> np.ndarray:
        return self.arm.applied

    def imu(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.physics.imu()

    def odom(self) -> List[float]:
        return self.traction.odom()

    def wheel_states(self) -> Tuple[List[str], List[float], List[float], List[float]]:
        return self.traction.wheel_states()

    def grip_force(self) -> float:
        return self.readouts.grip_force()

    def pad_forces(self) -> Tuple[float, float]:
        return self.physics.pad_forces()

    def base_pose(self) -> Tuple[float, float, float]:
        return self.physics.base_pose()

    def base_velocity(self) -> Tuple[float, float, float]:
        return self.readouts.base_velocity()

    def person_distance(self) -> float:
        return self.readouts.person_distance()

    def zone(self) -> str:
        return self.readouts.zone()

    def door_angle(self) -> float:
        return self.physics.door_angle()

    def temperatures(self) -> np.ndarray:
        return self.thermal.temperature

    def object_position(self) -> Tuple[float, float, float]:
        return self.physics.object_position()

    def detected_objects(self) -> List[DetectedObject]:
        return self.readouts.detected_objects()

    def truth(self) -> dict:
        # scenario goals: id -> sim time first reached (None: not yet)
        return self.readouts.truth(self.scenario.goal_status() if self.scenario is not None else {})

    def robot_outcome(self) -> dict:
        """The safety counters and the motion intervals so far (safety_probe.SafetyRecord.outcome)."""
        return self.safety.outcome()

    def condition_value(self, name: str):
        return self.readouts.condition_value(name)

    def grip_point(self, pose: Pose) -> Tuple[Tuple[float, ...], np.ndarray]:
        """Grip centre (world) and hand orientation (3x3) if the arm were in `pose` (name or
        {joint: rad}) with the base where it is now."""
        return self.physics.grip_point(pose, self.base_pose())

    def depth_image(self) -> Tuple[np.ndarray, np.ndarray]:
        """The head camera's depth image (float32 m, +inf = no return) and geom ids, as of now."""
        position, rotation = mount_pose(self.camera.spec, self.base_pose())
        return self.camera.capture(self.data, position, rotation)
