"""Level 3: per-joint PID on the reference, clamp, fail-safe ramp (plain module, no rclpy).

The execution layer's effective value (gains, effort limit, confidence) is rebuilt only when it was
invalidated (a miss); the PID output is clamped to its limit. A joint clamped continuously for
``failsafe_clamp_persist_s`` sets the execution layer's failure flag, and from then on the command
interpolates linearly over ``failsafe_ramp_s`` to the stored safe-stop set (effort 0, base
stopped, integrators cleared) instead of jumping to zero. A ``zero_effort`` sub-task (``stop``)
ramps the efforts to zero the same way. The base follows the sub-task's template twist, or the
go-to-pose twist of a ``zone_reached`` sub-task when one is given. Whatever happened, the command
leaving level 3 is finite and within the limits.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, cast

import numpy as np

from .cache import ExecutionLayer
from .go_to_pose import BaseTwist
from .interrupts import SOURCE_NONE, SOURCE_SAFE_STOP, Frame
from .monitors import ClampMonitor
from .pid import Gains, VectorPid
from .subtask import SubTask

# MotorCommand.EXEC_* values (kept here so this module stays free of ROS imports)
EXEC_NOMINAL = 0
EXEC_DERATED = 1
EXEC_FAILSAFE = 2
EXEC_STOPPED = 3


@dataclass(frozen=True)
class Level3Result:
    effort: np.ndarray        # the level's own arrays: valid until its next step
    effort_limit: np.ndarray
    clamped: np.ndarray
    base_vx: float
    base_wz: float
    execution_state: int
    source: int
    clamped_any: bool
    failure: str = ""         # set when persistent clamping raised the failure flag this tick: why


class Level3:
    def __init__(self, joints: Sequence[str], gains: Sequence[Gains], effort_max: np.ndarray, *,
                 cache_enabled: bool, failsafe_ramp_s: float, clamp_persist_s: float,
                 base_max_linear: float, base_max_angular: float):
        n = len(joints)
        self.joints = list(joints)
        self.cache_enabled = bool(cache_enabled)
        self.ramp_s = max(float(failsafe_ramp_s), 1e-9)
        self.base_max_linear = float(base_max_linear)
        self.base_max_angular = float(base_max_angular)
        self.pid = VectorPid(gains)
        self.clamp_monitor = ClampMonitor(n, clamp_persist_s)
        # outputs, kept between ticks: the fail-safe and zero ramps start from the last command
        self.effort = np.zeros(n)
        self.effort_limit = np.array(effort_max, dtype=float)
        self.clamped = np.zeros(n, dtype=bool)
        self.base_vx = 0.0
        self.base_wz = 0.0
        self.execution_state = EXEC_STOPPED
        self._ramp_from = np.zeros(n)
        self._ramp_base_from = np.zeros(2)
        self._ramp_t0 = 0.0
        self._zero_from = np.zeros(n)
        self._zero_t0 = 0.0

    def zero_output(self) -> None:
        """The actuators were sent zero effort outside the loop (router deactivated)."""
        self.effort[:] = 0.0

    def start_zero_ramp(self, now: float) -> None:
        self._zero_from[:] = self.effort
        self._zero_t0 = now

    def begin_failsafe(self, now: float) -> None:
        """Ramp from the last command to the safe-stop set; integrators and clamp timers cleared."""
        self._ramp_from[:] = self.effort
        self._ramp_base_from[:] = (self.base_vx, self.base_wz)
        self._ramp_t0 = now
        self.pid.reset()
        self.clamp_monitor.reset()

    def rearm(self) -> None:
        """The failure flag was cleared (a new decision)."""
        self.pid.reset()
        self.clamp_monitor.reset()

    def step(self, now: float, dt: float, execution: ExecutionLayer, source: int, state_ok: bool,
             frame: Optional[Frame], st: Optional[SubTask], p_ref: np.ndarray, v_ref: np.ndarray,
             q: np.ndarray, qd: np.ndarray, base_twist: Optional[BaseTwist] = None) -> Level3Result:
        """The command of this tick for ``source`` (the arbiter's), running sub-task ``st`` of ``frame``;
        ``base_twist`` (go-to-pose) replaces the template's base twist."""
        ex = execution
        exec_hit = ex.refresh()
        if not self.cache_enabled or not exec_hit:
            if not self.cache_enabled:
                ex.dirty = True
            if ex.gains_changed:
                self.pid.set_gains(ex.gains)
                ex.gains_changed = False
            self.pid.set_output_limits(ex.limit)
            self.pid.freeze_integrator(~ex.confidence)
        limit = ex.limit
        src = source
        eff = self.effort
        ramp_s = self.ramp_s
        clamped_any = False
        failure = ""
        if ex.failure:
            a = min(1.0, (now - self._ramp_t0) / ramp_s)
            np.multiply(self._ramp_from, 1.0 - a, out=eff)  # safe-stop set: effort 0
            self.base_vx = self._ramp_base_from[0] * (1.0 - a)
            self.base_wz = self._ramp_base_from[1] * (1.0 - a)
            self.clamped[:] = False
            self.execution_state = EXEC_FAILSAFE if a < 1.0 else EXEC_STOPPED
        elif src == SOURCE_NONE or not state_ok or st is None or frame is None:
            eff[:] = 0.0
            self.base_vx = self.base_wz = 0.0
            self.clamped[:] = False
            self.execution_state = EXEC_STOPPED
            if not state_ok:
                src = SOURCE_NONE
        else:
            if base_twist is not None:
                vx, wz = base_twist.vx, base_twist.wz
            else:
                speed = cast(Optional[float], frame.args.get("base_speed"))
                vx = math.copysign(float(speed), st.base_vx) if speed is not None and st.base_vx else st.base_vx
                wz = st.base_wz
            self.base_vx = min(max(vx, -self.base_max_linear), self.base_max_linear)
            self.base_wz = min(max(wz, -self.base_max_angular), self.base_max_angular)
            if st.zero_effort:
                a = min(1.0, (now - self._zero_t0) / ramp_s)
                np.multiply(self._zero_from, 1.0 - a, out=eff)
                self.clamped[:] = False
                self.base_vx = self.base_wz = 0.0
            else:
                u = self.pid.compute(p_ref - q, v_ref - qd, dt)
                eff[:] = u
                if st.hold_mask.any():
                    eff[st.hold_mask] = st.hold_effort[st.hold_mask]
                    self.clamped[:] = self.pid.clamped & ~st.hold_mask
                else:
                    self.clamped[:] = self.pid.clamped
                clamped_any = bool(self.clamped.any())
                if self.clamp_monitor.update(self.clamped, now):
                    failure = (f"effort clamped for {self.clamp_monitor.persist:g} s on "
                               + ", ".join(j for j, c in zip(self.joints, self.clamped) if c))
                    ex.failure = True
                    self.begin_failsafe(now)
                    src = SOURCE_SAFE_STOP
            if not ex.failure:
                self.execution_state = EXEC_DERATED if ex.derated_mask.any() else EXEC_NOMINAL
                if st.zero_effort and (now - self._zero_t0) >= ramp_s:
                    self.execution_state = EXEC_STOPPED
            else:
                self.execution_state = EXEC_FAILSAFE
        # the last line of defence: finite and within the limit, whatever happened above
        np.maximum(eff, -limit, out=eff)        # np.clip, without its Python-level dispatch
        np.minimum(eff, limit, out=eff)
        if not math.isfinite(float(eff.sum())):  # a NaN or inf anywhere (clipped values cannot overflow)
            np.nan_to_num(eff, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
        if not (math.isfinite(self.base_vx) and math.isfinite(self.base_wz)):
            self.base_vx = self.base_wz = 0.0
        self.effort_limit[:] = limit
        return Level3Result(eff, self.effort_limit, self.clamped, self.base_vx, self.base_wz,
                            self.execution_state, src, clamped_any, failure)
