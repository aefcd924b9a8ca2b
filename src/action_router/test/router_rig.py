"""Shared rig for router tests: a Router closed over the toy plant, stepped at 1 kHz; optionally a
kinematic base (cmd_vel integrated into odometry) and a scene of detected objects."""
from __future__ import annotations

import math
import re

from action_router.params import make_config
from action_router.plant import JointPlant
from action_router.router import Router


def fault_kind(line: str) -> str:
    """The kind a fault log line reports (``input fault [kind]: ...``)."""
    match = re.match(r"input fault \[(\w+)\]", line)
    assert match, line
    return match.group(1)


class Rig:
    def __init__(self, faults=None, infos=None, plant=True, base=False, without_reflexes=(), **overrides):
        # scripted decisions, no reasoning node: the decision watchdog is off unless a test sets it
        self.cfg = make_config({"decision_timeout_s": 0.0, **overrides})
        for name in without_reflexes:          # interrupts a test leaves out (config/router_subtasks.yaml)
            del self.cfg.interrupts[name]
        self.faults = [] if faults is None else faults
        self.infos = [] if infos is None else infos
        self.router = Router(self.cfg, fault_report=lambda line: self.faults.append((fault_kind(line), line)),
                             info_report=self.infos.append)
        r = self.router
        self.joints = r.joints
        self.plant = JointPlant(r.n, gripper_index=r.joint_index.get("gripper")) if plant else None
        if self.plant is not None and "gripper" in r.joint_index:
            self.plant.q[r.joint_index["gripper"]] = 0.04  # open
        self.now = 0.0
        self.dt = 1.0 / float(self.cfg["control_hz"])
        self.proximity = float("inf")
        self.feed_wrench = True
        self.imu_acc = [0.0, 0.0, 9.80665]
        self.imu_gyro = [0.0, 0.0, 0.0]
        self.history = []
        self.base = [0.0, 0.0, 0.0] if base else None     # x, y, yaw of the kinematic base (odometry)
        self._vx = 0.0
        self.base_acc = 0.0        # the kinematic base's last longitudinal acceleration (added to the IMU's)
        self.objects = None        # [(name, (x, y, z))] in base_link: published as detections each tick

    def step(self, n: int = 1, record: bool = False):
        r = self.router
        for _ in range(n):
            if self.plant is not None:
                q, qd = self.plant.measure()
                r.set_joint_state(self.joints, q, qd, [], now=self.now)
                if self.feed_wrench:
                    r.set_wrench([0.0, 0.0, self.plant.grip_force], now=self.now)
            acc = self.imu_acc if self.base_acc == 0.0 else [self.imu_acc[0] + self.base_acc, *self.imu_acc[1:]]
            r.set_imu(acc, self.imu_gyro, now=self.now)
            r.set_proximity(self.proximity, now=self.now)
            if self.base is not None:
                c = r.command
                r.set_odom(*self.base, c.base_vx, c.base_wz, now=self.now)
            if self.objects is not None:
                r.set_objects([n for n, _ in self.objects], [p for _, p in self.objects], "base_link", now=self.now)
            r.tick(self.now)
            if record:
                self.history.append((self.now, r.command.effort.copy(), r.command.source, r.command.sub_task,
                                     r.command.execution_state, dict(r.arbiter.sources)))
            if self.plant is not None:
                self.plant.step(r.command.effort)
            if self.base is not None:
                x, y, yaw = self.base
                vx, wz = r.command.base_vx, r.command.base_wz
                self.base_acc = (vx - self._vx) / self.dt      # the IMU feels what the wheels do
                self._vx = vx
                self.base = [x + vx * math.cos(yaw) * self.dt, y + vx * math.sin(yaw) * self.dt, yaw + wz * self.dt]
            self.now += self.dt
        return r

    def run_until(self, predicate, max_s: float = 10.0, record: bool = False):
        end = self.now + max_s
        while self.now < end:
            self.step(record=record)
            if predicate(self.router):
                return True
        return False
