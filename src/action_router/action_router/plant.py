"""A tiny simulated plant for tests and the benchmark (plain module, no rclpy).

Per joint a rotational inertia with viscous friction (semi-implicit Euler at the tick period);
the gripper closes on an object at ``object_width`` and then reports a contact force. Measurement
noise (seeded) can be added to positions and velocities. It is not a robot model: it exists so
the router's closed loop can be exercised without the simulator.
"""
from __future__ import annotations

from typing import Optional

import numpy as np


class JointPlant:
    def __init__(self, n: int, inertia=0.5, damping=2.0, dt: float = 0.001, noise_pos: float = 0.0,
                 noise_vel: float = 0.0, seed: int = 0, gripper_index: Optional[int] = None,
                 object_width: float = 0.02, contact_stiffness: float = 2000.0):
        self.n = n
        self.inertia = np.broadcast_to(np.asarray(inertia, dtype=float), (n,)).copy()
        self.damping = np.broadcast_to(np.asarray(damping, dtype=float), (n,)).copy()
        self.dt = dt
        self.q = np.zeros(n)
        self.qd = np.zeros(n)
        self.noise_pos = noise_pos
        self.noise_vel = noise_vel
        self.rng = np.random.default_rng(seed)
        self.gripper = gripper_index
        self.object_width = object_width
        self.k_contact = contact_stiffness
        self.grip_force = 0.0
        self.object_present = True
        self._np = np.zeros(n)
        self._nv = np.zeros(n)

    def step(self, effort: np.ndarray) -> None:
        tau = np.array(effort, dtype=float)
        self.grip_force = 0.0
        g = self.gripper
        if g is not None and self.object_present and self.q[g] < self.object_width:
            pen = self.object_width - self.q[g]
            contact = self.k_contact * pen
            tau[g] += contact
            self.grip_force = contact
        acc = (tau - self.damping * self.qd) / self.inertia
        self.qd += acc * self.dt
        self.q += self.qd * self.dt
        if g is not None and self.q[g] < 0.0:
            self.q[g] = 0.0
            self.qd[g] = max(self.qd[g], 0.0)

    def measure(self):
        if self.noise_pos:
            self._np[:] = self.rng.standard_normal(self.n) * self.noise_pos
        if self.noise_vel:
            self._nv[:] = self.rng.standard_normal(self.n) * self.noise_vel
        return self.q + self._np, self.qd + self._nv
