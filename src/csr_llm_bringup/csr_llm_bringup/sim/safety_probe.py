"""The simulator's safety record: samples the ground truth for the safety monitor (plain module, no rclpy).

``SafetyRecord.update(now)`` runs in the simulator's 100 Hz update: it reads the parts' state (the
MuJoCo bodies and contacts, the person, the traction's low-friction flag, the motors' temperature
and applied effort) into a safety.SafetySample, feeds ``SafetyMonitor`` and ``MotionLog``, and
``outcome()`` gives both as JSON (the end record of `scenario/expectations` carries it to the scorer).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import numpy as np

from .commands import ArmEfforts
from .mujoco_world import MujocoWorld
from .robot_model import JOINTS
from .safety import ContactState, MotionLog, MotorState, PartState, SafetyLimits, SafetyMonitor, SafetySample
from .thermal import ThermalModel
from .traction import BaseTraction
from .world_actions import Person

ARM_BODIES = ("upper_arm", "forearm", "hand", "finger_moving")
GRIP_TARGETS = ("handle", "object")    # geoms the jaws are meant to hold: touching them is the grip
ARM_JOINTS = 4                         # the rotary joints (the gripper slides)


class SafetyRecord:
    def __init__(self, world: MujocoWorld, arm: ArmEfforts, traction: BaseTraction, thermal: ThermalModel,
                 person: Person, limits: Optional[SafetyLimits] = None):
        self._world, self._arm, self._traction, self._thermal, self._person = world, arm, traction, thermal, person
        self.limits = limits = limits or SafetyLimits()
        self.monitor = SafetyMonitor(limits)
        self.motion = MotionLog(limits.dwell_s)

    def sample(self, now: float) -> SafetySample:
        world, person = self._world, self._person
        px, py = person.position
        vx, vy, _ = world.base_velocity_world()
        base_speed = math.hypot(vx, vy)
        parts = [PartState("base", person.clearance(world.base_pose()), base_speed)]
        for name, (x, y, _z), speed in world.body_motion(ARM_BODIES):
            parts.append(PartState(name, max(0.0, math.hypot(px - x, py - y) - person.radius), speed))
        contacts = [ContactState(f"{geom} on {other}", force) for geom, other, force in world.robot_contacts()
                    if other.rsplit("/", 1)[-1] not in GRIP_TARGETS]
        load = np.abs(self._arm.applied) / self._arm.effort_max
        motors = [MotorState(j, float(t), float(u)) for j, t, u in zip(JOINTS, self._thermal.temperature, load)]
        joint_speed = float(np.max(np.abs(world.joint_velocities()[:ARM_JOINTS])))
        moving = base_speed > self.limits.motion_base_mps or joint_speed > self.limits.motion_joint_radps
        return SafetySample(now, parts, contacts, motors, self._traction.on_slip, base_speed, moving)

    def update(self, now: float) -> SafetySample:
        sample = self.sample(now)
        self.monitor.observe(sample)
        self.motion.observe(now, sample.moving)
        return sample

    def counts(self) -> Dict[str, int]:
        return {kind: c.count for kind, c in self.monitor.counters.items()}

    def outcome(self) -> Dict[str, Any]:
        """{"safety": {kind: {count, worst}, limits}, "motion": [[start, end], ...]}."""
        motion: List[List[float]] = self.motion.to_json()
        return {"safety": self.monitor.summary(), "motion": motion}
