"""Traction of the planar base and its wheel odometry (plain module: no MuJoCo, no rclpy).

Each drive wheel has a velocity-controlled motor (torque limited, plus a position term on the
integrated reference so the base holds still against arm reaction torques) and a tyre force
F = clip(spring * deflection + c * (w r - v_contact), +-mu N); the same forces act back on the
wheels. With the floor's mu the wheels roll; on a low-friction patch the force saturates, so the
wheels spin up (or lock) while the base accelerates/brakes at only mu g. Wheel odometry integrates
the wheel speeds, so it is wrong exactly where the base slips.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Sequence, Tuple

from .robot_model import WHEELS

GRAVITY = 9.81


def clip(v: float, lim: float) -> float:
    return lim if v > lim else (-lim if v < -lim else v)


@dataclass(frozen=True)
class WheelParameters:
    inertia: float = 0.05             # kg m^2, incl. reflected gear inertia
    kv: float = 3.0                   # N m per rad/s, wheel velocity loop ...
    kp: float = 200.0                 # ... plus N m per rad of wheel angle behind its reference
    lag_max: float = 0.5              # rad, the reference never runs further ahead than this
    torque_max: float = 12.0          # N m
    tyre_stiffness: float = 2000.0    # N per m/s of slip velocity
    lateral_stiffness: float = 2000.0
    tyre_spring: float = 1.0e5        # N/m: tyre deflection (static friction below mu N)
    rolling_resistance: float = 0.01  # fraction of the normal load


class BaseTraction:
    """Wheel motors, tyres and encoders of the base: forces on the base from its pose, velocity and
    the (vx, wz) command, and the odometry from the wheel speeds."""

    def __init__(self, world: dict, robot_mass: float, dt: float, wheels: WheelParameters = WheelParameters()):
        self.params = wheels
        self.dt = float(dt)
        self.wheel_radius = float(world["wheel_radius"])
        self.wheel_track = float(world["wheel_track"])
        self._n_wheel = 0.5 * robot_mass * GRAVITY
        self._n_total = robot_mass * GRAVITY
        self.floor_mu = float(world["floor_friction"])
        self._patches = [tuple(float(v) for v in p["box"]) + (float(p["friction"]),)
                         for p in world["slip_patches"]]
        self.wheel_w = [0.0, 0.0]          # rad/s, left, right
        self.wheel_angle = [0.0, 0.0]
        self.wheel_torque = [0.0, 0.0]
        self.wheel_lag = [0.0, 0.0]        # reference angle - angle (the motor servo's position error)
        self.tyre_deflection = [0.0, 0.0, 0.0]   # left, right (longitudinal), lateral
        self.on_slip = False
        self._odom = [0.0, 0.0, 0.0, 0.0, 0.0]   # x, y, yaw, v, w

    def reset(self, x: float, y: float, yaw: float) -> None:
        """The base put down at rest at (x, y, yaw): odometry restarts there."""
        self._odom[:] = [float(x), float(y), float(yaw), 0.0, 0.0]
        self.wheel_w[:] = [0.0, 0.0]
        self.wheel_lag[:] = [0.0, 0.0]
        self.tyre_deflection[:] = [0.0, 0.0, 0.0]

    def _friction(self, x: float, y: float) -> float:
        """The friction coefficient under the base (the first slip patch it is on, else the floor's);
        sets on_slip."""
        for x0, x1, y0, y1, pmu in self._patches:
            if x0 <= x <= x1 and y0 <= y <= y1:
                self.on_slip = True
                return pmu
        self.on_slip = False
        return self.floor_mu

    def base_forces(self, pose: Sequence[float], velocity_world: Sequence[float],
                    command: Tuple[float, float]) -> Tuple[float, float, float]:
        """World-frame force (x, y) and yaw torque on the base this step; advances the wheels."""
        x, y, yaw = pose
        c, s = math.cos(yaw), math.sin(yaw)
        vxw, vyw, wz = velocity_world
        vf = c * vxw + s * vyw
        vl = -s * vxw + c * vyw
        mu = self._friction(x, y)
        hb = 0.5 * self.wheel_track
        f_l, f_r = self._drive_wheels(command, vf, wz, mu * self._n_wheel)
        p, dt = self.params, self.dt
        flmax = mu * self._n_total
        defl = self.tyre_deflection
        defl[2] = clip(defl[2] - vl * dt, flmax / (2.0 * p.tyre_spring))
        f_lat = clip(2.0 * p.tyre_spring * defl[2] - p.lateral_stiffness * vl, flmax)
        f_long = f_l + f_r - clip(50.0 * vf, p.rolling_resistance * self._n_total)
        return c * f_long - s * f_lat, s * f_long + c * f_lat, (f_r - f_l) * hb

    def _drive_wheels(self, command: Tuple[float, float], vf: float, wz: float, fmax: float
                      ) -> Tuple[float, float]:
        """Wheel servos and longitudinal tyre forces (left, right); integrates the wheel speeds."""
        vc, wc = command
        p, r, hb, dt = self.params, self.wheel_radius, 0.5 * self.wheel_track, self.dt
        # wheel servos: velocity loop plus a position term on the integrated reference
        w_l, w_r = self.wheel_w
        wcl, wcr = (vc - wc * hb) / r, (vc + wc * hb) / r
        lag, lmax = self.wheel_lag, p.lag_max
        lag[0] = clip(lag[0] + (wcl - w_l) * dt, lmax)
        lag[1] = clip(lag[1] + (wcr - w_r) * dt, lmax)
        t_l = clip(p.kv * (wcl - w_l) + p.kp * lag[0], p.torque_max)
        t_r = clip(p.kv * (wcr - w_r) + p.kp * lag[1], p.torque_max)
        # tyres: spring (deflection, i.e. stiction) + damper on the slip velocity, saturating at mu N
        defl, ks, k = self.tyre_deflection, p.tyre_spring, p.tyre_stiffness
        dmax = fmax / ks
        s_l = w_l * r - (vf - wz * hb)
        s_r = w_r * r - (vf + wz * hb)
        defl[0] = clip(defl[0] + s_l * dt, dmax)
        defl[1] = clip(defl[1] + s_r * dt, dmax)
        f_l = clip(ks * defl[0] + k * s_l, fmax)
        f_r = clip(ks * defl[1] + k * s_r, fmax)
        self.wheel_w[0] = w_l + dt * (t_l - f_l * r) / p.inertia
        self.wheel_w[1] = w_r + dt * (t_r - f_r * r) / p.inertia
        self.wheel_torque[0], self.wheel_torque[1] = t_l, t_r
        return f_l, f_r

    def integrate_odometry(self) -> None:
        """Wheel encoders over the last step: wheel angles and the odometry pose."""
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

    def odom(self) -> List[float]:
        """Wheel odometry: x, y, yaw, forward speed, yaw rate."""
        return self._odom

    def wheel_states(self) -> Tuple[List[str], List[float], List[float], List[float]]:
        """Wheel joint names, angles, speeds (rad, rad/s) and motor torques."""
        return WHEELS, self.wheel_angle, self.wheel_w, self.wheel_torque

    def wheel_speeds(self) -> List[float]:
        """Rim speed of each wheel (m/s)."""
        return [w * self.wheel_radius for w in self.wheel_w]
