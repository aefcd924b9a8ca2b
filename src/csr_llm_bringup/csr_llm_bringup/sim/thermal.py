"""First-order motor thermal model (plain module).

    dT/dt = (T_ss(u) - T) / tau + boost,   T_ss(u) = T_ambient + rise * (u / u_max)^2

Heating goes with effort squared (copper losses ~ current^2 ~ torque^2), cooling is Newtonian
toward ambient. With the defaults a motor held at its full effort limit settles at 85 C (crossing
the router's 70 C limit after ~28 s); a scenario heat boost adds degrees per second for a while.
The time constant is short (20 s) so a one-minute scenario shows both heating and cooling.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt


class ThermalModel:
    def __init__(self, effort_max: npt.ArrayLike, ambient: float = 25.0, rise_at_max: float = 60.0,
                 tau: float = 20.0):
        self.effort_max = np.asarray(effort_max, dtype=float)
        self.n = self.effort_max.size
        self.ambient = float(ambient)
        self.rise = float(rise_at_max)
        self.tau = float(tau)
        self.temperature = np.full(self.n, self.ambient)
        self.boost_rate = np.zeros(self.n)      # C/s added while boost_until > t
        self.boost_until = np.zeros(self.n)

    def add_boost(self, joint: int, rate: float, duration: float, now: float) -> None:
        self.boost_rate[joint] = float(rate)
        self.boost_until[joint] = now + float(duration)

    def add_heat(self, joint: int, degrees: float) -> None:
        self.temperature[joint] += float(degrees)

    def update(self, effort: np.ndarray, dt: float, now: float) -> np.ndarray:
        """Advance by dt with the given (applied) efforts; exact for a constant input over dt."""
        ratio = effort / self.effort_max
        target = self.ambient + self.rise * ratio * ratio
        a = np.exp(-dt / self.tau)
        self.temperature = target + (self.temperature - target) * a
        active = self.boost_until > now
        if active.any():
            self.temperature = self.temperature + np.where(active, self.boost_rate, 0.0) * dt
        return self.temperature
