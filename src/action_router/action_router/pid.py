"""Vectorised per-joint PID with ros2_control control_toolbox semantics (plain module, no rclpy).

Mirrors ``control_toolbox::Pid::compute_command(error, error_dot, dt)`` (control_toolbox >= 5,
the version with ``antiwindup_strategy``), one joint per array element:

    e_f      += b*(e - e_f),         b = dt/(T_e + dt)  (first-order low-pass on the error the
                                                          P and I parts see, T_e =
                                                          error_filter_time_constant; 0 = off)
    cmd_unsat = p*e_f + i_term + d*e_dot_f          (i_term from the previous steps)
    e_dot_f  += a*(e_dot - e_dot_f), a = dt/(T_f + dt)  (first-order low-pass on the D input,
                                                          T_f = derivative_filter_time_constant;
                                                          0 = unfiltered, control_toolbox's own)
    cmd       = clamp(cmd_unsat, u_clamp_min, u_clamp_max)
    i_term   += dt*i*e_f                                 "none"
    i_term   += dt*(i*e_f + (cmd - cmd_unsat)/T_t)       "back_calculation" (only if i != 0;
                                                          T_t = tracking_time_constant, default
                                                          sqrt(d/i) if d != 0 else p/i)
    i_term   += dt*i*e_f unless (cmd != cmd_unsat and e_f*cmd_unsat > 0)   "conditional_integration"
    (no integration when |e_f| <= error_deadband)
    i_term    = clamp(i_term, i_clamp_min, i_clamp_max)

dt == 0 leaves everything unchanged and returns the previous command. Where control_toolbox
returns NaN for a non-finite error, this class returns 0 for that joint and leaves its state
untouched (the router never commands NaN); ``nonfinite`` reports which joints were affected.
The router narrows u_clamp to the execution layer's effort limit every tick (``set_output_limits``).

The derivative filter is not in control_toolbox (its caller chooses ``error_dot``): drives filter
the D part this way because a measured velocity is the noisiest input of the loop, and the D term
multiplies it by ``d`` every tick. The error filter is not in control_toolbox either: a drive's
position-loop feedback filter. White encoder noise reaches the command as ``p`` times its
tick-to-tick change; a time constant of two control periods cuts that change about fourfold for a
lag of a few milliseconds. Both filters are cleared with the integrator (``reset``) and restart
from their next input, so a reset never kicks the command.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, cast

import numpy as np

STRATEGIES = ("none", "back_calculation", "conditional_integration")
PARAM_NAMES = ("p", "i", "d", "i_clamp_max", "i_clamp_min", "u_clamp_max", "u_clamp_min",
               "antiwindup_strategy", "tracking_time_constant", "error_deadband",
               "derivative_filter_time_constant", "error_filter_time_constant")
_EPS = float(np.finfo(float).eps)


@dataclass
class Gains:
    """Gains of one joint, with control_toolbox parameter names and defaults."""
    p: float = 0.0
    i: float = 0.0
    d: float = 0.0
    i_clamp_max: float = float("inf")
    i_clamp_min: float = float("-inf")
    u_clamp_max: float = float("inf")
    u_clamp_min: float = float("-inf")
    antiwindup_strategy: str = "none"
    tracking_time_constant: float = 0.0
    error_deadband: float = _EPS
    derivative_filter_time_constant: float = 0.0     # s; 0 = the D term sees error_dot unfiltered
    error_filter_time_constant: float = 0.0          # s; 0 = the P and I terms see the error unfiltered

    def validate(self) -> None:
        for name in ("p", "i", "d", "tracking_time_constant", "error_deadband", "derivative_filter_time_constant",
                     "error_filter_time_constant"):
            if not np.isfinite(getattr(self, name)):
                raise ValueError(f"gain {name} must be finite")
        for name in ("derivative_filter_time_constant", "error_filter_time_constant"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        for name in ("i_clamp_max", "i_clamp_min", "u_clamp_max", "u_clamp_min"):
            if np.isnan(getattr(self, name)):
                raise ValueError(f"{name} must not be NaN")
        if self.i_clamp_min > self.i_clamp_max:
            raise ValueError("i_clamp_min > i_clamp_max")
        if self.u_clamp_min > self.u_clamp_max:
            raise ValueError("u_clamp_min > u_clamp_max")
        if self.antiwindup_strategy not in STRATEGIES:
            raise ValueError(f"antiwindup_strategy must be one of {STRATEGIES}, not {self.antiwindup_strategy!r}")
        if self.antiwindup_strategy == "back_calculation" and self.i != 0.0 and self.tracking_time_constant < 0:
            raise ValueError("tracking_time_constant must be >= 0")

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> "Gains":
        kwargs: Dict[str, Any] = {}     # float fields, and the antiwindup_strategy string
        for name in PARAM_NAMES:
            if name in values and values[name] is not None:
                kwargs[name] = str(values[name]) if name == "antiwindup_strategy" else float(cast(float, values[name]))
        g = cls(**kwargs)
        g.validate()
        return g

    def scaled(self, gain_scale: float) -> "Gains":
        """The same controller with p, i, d scaled (the derated set)."""
        return Gains(self.p * gain_scale, self.i * gain_scale, self.d * gain_scale, self.i_clamp_max,
                     self.i_clamp_min, self.u_clamp_max, self.u_clamp_min, self.antiwindup_strategy,
                     self.tracking_time_constant, self.error_deadband, self.derivative_filter_time_constant,
                     self.error_filter_time_constant)


class VectorPid:
    """n independent PID controllers evaluated with numpy."""

    def __init__(self, gains: Sequence[Gains]):
        self.n = len(gains)
        self.i_term = np.zeros(self.n)
        self.cmd = np.zeros(self.n)
        self.cmd_unsat = np.zeros(self.n)
        self.nonfinite = np.zeros(self.n, dtype=bool)
        self.clamped = np.zeros(self.n, dtype=bool)
        self.error_dot_filtered = np.zeros(self.n)
        self._filter_primed = np.zeros(self.n, dtype=bool)   # cleared joints start from their next error_dot
        self.error_filtered = np.zeros(self.n)
        self._error_primed = np.zeros(self.n, dtype=bool)    # ... and from their next error
        self._freeze_i = np.zeros(self.n, dtype=bool)
        self.set_gains(gains)

    def set_gains(self, gains: Sequence[Gains]) -> None:
        if len(gains) != self.n:
            raise ValueError("one Gains per joint")
        for g in gains:
            g.validate()
        f = lambda name: np.array([getattr(g, name) for g in gains], dtype=float)  # noqa: E731
        self.p, self.i, self.d = f("p"), f("i"), f("d")
        self.i_max, self.i_min = f("i_clamp_max"), f("i_clamp_min")
        self.u_max_cfg, self.u_min_cfg = f("u_clamp_max"), f("u_clamp_min")
        self.u_max, self.u_min = self.u_max_cfg.copy(), self.u_min_cfg.copy()
        self.deadband = f("error_deadband")
        self.d_filter_tc = f("derivative_filter_time_constant")
        self.e_filter_tc = f("error_filter_time_constant")
        strat = [g.antiwindup_strategy for g in gains]
        self.is_none = np.array([s == "none" for s in strat])
        self.is_back = np.array([s == "back_calculation" for s in strat])
        self.is_cond = np.array([s == "conditional_integration" for s in strat])
        trk = f("tracking_time_constant")
        with np.errstate(divide="ignore", invalid="ignore"):
            default = np.where(self.d != 0.0, np.sqrt(np.abs(self.d / self.i)), self.p / self.i)
        trk = np.where((trk == 0.0) & self.is_back & (self.i != 0.0), default, trk)
        self.trk_inv = np.where(self.is_back & (self.i != 0.0) & (trk != 0.0), 1.0 / np.where(trk == 0, 1, trk), 0.0)
        self.back_active = self.is_back & (self.i != 0.0)
        # per joint, as compute reads them: gains, filter constants, clamps, anti-windup
        self._per_joint = list(zip(
            self.p.tolist(), self.i.tolist(), self.d.tolist(), self.e_filter_tc.tolist(), self.d_filter_tc.tolist(),
            self.deadband.tolist(), self.i_min.tolist(), self.i_max.tolist(), self.trk_inv.tolist(),
            self.back_active.tolist(), (self.is_none | self.back_active).tolist(), self.is_cond.tolist()))

    def set_output_limits(self, limit: np.ndarray) -> None:
        """u_clamp narrowed to +-limit (the execution layer's effort limit for this tick)."""
        np.minimum(self.u_max_cfg, limit, out=self.u_max)
        np.maximum(self.u_min_cfg, -limit, out=self.u_min)
        # a configured u range that does not contain zero is kept inside +-limit
        np.minimum(self.u_min, self.u_max, out=self.u_min)

    def freeze_integrator(self, mask: np.ndarray) -> None:
        self._freeze_i[:] = mask

    def reset(self, mask: Optional[np.ndarray] = None) -> None:
        """Clear integrators and the last command (all joints, or where mask is true)."""
        if mask is None:
            self.i_term[:] = 0.0
            self.cmd[:] = 0.0
            self.cmd_unsat[:] = 0.0
            self._filter_primed[:] = False
            self._error_primed[:] = False
        else:
            self.i_term[mask] = 0.0
            self.cmd[mask] = 0.0
            self.cmd_unsat[mask] = 0.0
            self._filter_primed[mask] = False
            self._error_primed[mask] = False

    def compute(self, error: np.ndarray, error_dot: np.ndarray, dt: float) -> np.ndarray:
        """One step for all joints; returns self.cmd (clamped, finite).

        A loop over the joints in Python floats: at a handful of joints every numpy call costs more
        than its arithmetic. The operations
        and their order are the formulas above, so results are those of the vectorised form."""
        if dt == 0.0 or not math.isfinite(dt):
            return self.cmd
        if dt < 0.0:
            raise ValueError("negative dt")
        e_state, d_state = self.error_filtered.tolist(), self.error_dot_filtered.tolist()
        e_primed, d_primed = self._error_primed.tolist(), self._filter_primed.tolist()
        i_term, freeze = self.i_term.tolist(), self._freeze_i.tolist()
        u_min, u_max = self.u_min.tolist(), self.u_max.tolist()
        n = self.n
        cmd, cmd_unsat, clamped, nonfinite = [0.0] * n, [0.0] * n, [False] * n, [False] * n
        for j, x, xd, k in zip(range(n), np.asarray(error, dtype=float).tolist(),
                               np.asarray(error_dot, dtype=float).tolist(), self._per_joint):
            p, i, d, e_tc, d_tc, deadband, i_min, i_max, trk_inv, back_active, none_or_back, is_cond = k
            if not (math.isfinite(x) and math.isfinite(xd)):
                nonfinite[j] = True          # commanded 0; filters and integrator untouched
                i_term[j] = min(max(i_term[j], i_min), i_max)
                continue
            if e_primed[j]:                  # first-order low-pass, restarted at its input after a reset
                s = e_state[j]
                x = s + dt / (e_tc + dt) * (x - s)
            if d_primed[j]:
                s = d_state[j]
                xd = s + dt / (d_tc + dt) * (xd - s)
            e_state[j], d_state[j] = x, xd
            e_primed[j] = d_primed[j] = True
            unsat = p * x + i_term[j] + d * xd
            c = min(max(unsat, u_min[j]), u_max[j])
            sat = c != unsat
            i_new = i_term[j]
            if abs(x) > deadband and not freeze[j] and (none_or_back or (is_cond and not (sat and x * unsat > 0))):
                di = dt * i * x
                i_new = i_new + (di + dt * trk_inv * (c - unsat) if back_active else di)
            i_term[j] = min(max(i_new, i_min), i_max)
            cmd[j], cmd_unsat[j], clamped[j] = c, unsat, sat
        self.error_filtered[:], self.error_dot_filtered[:] = e_state, d_state
        self._error_primed[:], self._filter_primed[:] = e_primed, d_primed
        self.i_term[:] = i_term
        self.cmd[:], self.cmd_unsat[:], self.clamped[:], self.nonfinite[:] = cmd, cmd_unsat, clamped, nonfinite
        return self.cmd


def gains_from_params(joints: Sequence[str], params: Mapping[str, object],
                      defaults: Optional[Mapping[str, object]] = None) -> Dict[str, Gains]:
    """Gains per joint from flat parameters named gains.<joint>.<name> (control_toolbox names)."""
    out = {}
    for joint in joints:
        values = dict(defaults or {})
        prefix = f"gains.{joint}."
        for key, value in params.items():
            if key.startswith(prefix):
                values[key[len(prefix):]] = value
        try:
            out[joint] = Gains.from_mapping(values)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"gains.{joint}: {exc}") from exc
    return out
