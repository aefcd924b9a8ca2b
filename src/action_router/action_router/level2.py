"""Level 2: segment serving and re-planning over the behaviour layer (plain module, no rclpy).

When a sub-task (re)starts its B-spline template is anchored at the current joint positions; the
behaviour layer then serves the running 50 ms segment (a hit), chains the next one at an exact
junction, or re-plans from the measured joint state (template + Hermite blend) after an
invalidation or when the reference drifts more than ``replan_error`` from the measurement. The
reference is sampled one control period ahead.

With the cache disabled the level is the seed's stateless baseline ("discard all intermediate
state each frame and re-run the network from scratch"): at the start of every frame (one plan
horizon, ``frame_s``) a fresh segment is planned from that frame's measured state to the template
at tau + horizon, and the frame's ticks read that segment (``_plan_stateless``). Nothing crosses a
frame boundary: no segment, junction, blend or tracking-error rule of the previous frame.

Level 2 does not write into other layers: its result says when the sub-task (re)started, and the
router then writes the sub-task's torque limits into the execution layer, resets the grip
monitor and starts level 3's zero-effort ramp.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from .bspline import SegmentPlanner, Template
from .cache import BehaviourLayer
from .interrupts import Frame
from .subtask import SubTask


@dataclass(frozen=True)
class Level2Result:
    tracking: bool                  # the references hold this tick's reference
    reference_position: np.ndarray  # the level's own arrays: valid until its next step
    reference_velocity: np.ndarray
    hit: bool = False               # the behaviour layer served the cached segment
    restarted: bool = False         # the sub-task started or resumed this tick


class Level2:
    def __init__(self, n: int, max_ctrl: int, *, period: float, horizon_s: float, samples: int, blend_s: float,
                 q_min: np.ndarray, q_max: np.ndarray, v_max: np.ndarray, cache_enabled: bool, replan_error: float,
                 frame_s: Optional[float] = None):
        self.period = float(period)
        # cache_enabled: false only: how long one stateless plan is followed (default: its horizon)
        self.frame_s = float(frame_s) if frame_s else float(horizon_s)
        self._ticks_per_frame = max(int(round(self.frame_s / self.period)), 1)
        self.cache_enabled = bool(cache_enabled)
        self.replan_error = float(replan_error)
        self.q_min, self.q_max, self.v_max = q_min, q_max, v_max
        self.behaviour = BehaviourLayer(n, max_ctrl)
        self.planner = SegmentPlanner(n, horizon_s, samples, blend_s, q_min, q_max, v_max)
        # cache_enabled: false only: the stateless planner, whose blend spans exactly one segment
        self.fresh_planner = SegmentPlanner(n, horizon_s, samples, horizon_s, q_min, q_max, v_max)
        self._frame: Tuple[int, int, float] = (-1, -1, 0.0)   # (frame index, sub-task, run_since) planned for
        self._frame_t0 = 0.0
        self.p_ref = np.zeros(n)
        self.v_ref = np.zeros(n)

    def invalidate(self) -> None:
        self.behaviour.invalidate()

    def final_pose(self, st: SubTask) -> np.ndarray:
        """The anchored template's last pose (trajectory sub-tasks: where they settle)."""
        bl = self.behaviour
        return self.planner.template_state(st.template, bl.anchored[:bl.n_ctrl], st.final_rows)[0]

    def _result(self, tracking: bool, hit: bool = False, restarted: bool = False) -> Level2Result:
        return Level2Result(tracking, self.p_ref, self.v_ref, hit, restarted)

    def step(self, now: float, frame: Frame, st: SubTask, q: np.ndarray, qd: np.ndarray) -> Level2Result:
        """This tick's reference for the frame's running sub-task ``st`` from the measured (q, qd)."""
        bl = self.behaviour
        restarted = False
        if not frame.started:
            frame.started = True
            frame.needs_resume = False
            frame.phase = 0.0
            frame.run_since = now
            frame.start_time = now
            frame.base_travel = 0.0
            self._anchor(st, q)
            bl.invalidate()
            restarted = True
        elif frame.needs_resume:
            frame.needs_resume = False
            frame.run_since = now
            frame.start_time += max(0.0, now - frame.last_step)    # a timeout counts the time it ran, not held
            if bl.subtask != st.index:
                # the behaviour layer held another sub-task meanwhile: re-anchor at the current pose
                self._anchor(st, q)
            bl.invalidate()
            restarted = True
        frame.last_step = now
        if st.zero_effort:
            return self._result(False, restarted=restarted)
        tau = frame.phase + (now - frame.run_since)
        pl = self.planner
        tpl = st.template
        anchored = bl.anchored[:bl.n_ctrl]
        look = now + self.period
        bl.lookups += 1
        if not self.cache_enabled:
            self._plan_stateless(now, tau, frame, st, anchored, q, qd)
            return self._result(True, restarted=restarted)
        hit = False
        if bl.valid and look < bl.seg_t0 + pl.horizon:
            bl.hits += 1
            hit = True
        elif bl.valid and look < bl.seg_t0 + 2 * pl.horizon:
            # chain the next segment: exact junction with the previous one
            bl.seg_t0 += pl.horizon
            bl.seg_k0 += pl.samples
            pl.plan(tpl, anchored, bl.seg_k0, bl.seg_t0 - bl.blend_t0, bl.e0, bl.ev0, bl.blend_time)
        else:
            self._replan_from_state(now, tau, tpl, anchored, q, qd)
        k = int((look - bl.seg_t0) / pl.ds)
        k = 0 if k < 0 else (pl.samples if k > pl.samples else k)
        self.p_ref[:] = pl.pos[k]
        self.v_ref[:] = pl.vel[k]
        err = np.abs(self.p_ref - q)
        if st.hold_mask.any():
            err[st.hold_mask] = 0.0  # effort-held joints (gripper closed on an object) do not track
        if float(err.max()) > self.replan_error:
            self._replan_from_state(now, tau, tpl, anchored, q, qd)
            hit = False
            k = min(int(self.period / pl.ds), pl.samples)
            self.p_ref[:] = pl.pos[k]
            self.v_ref[:] = pl.vel[k]
        return self._result(True, hit, restarted)

    def _anchor(self, st: SubTask, q: np.ndarray) -> None:
        bl = self.behaviour
        tpl = st.template
        tpl.anchor(q, bl.anchored[:tpl.ctrl.shape[0]])
        bl.n_ctrl = tpl.ctrl.shape[0]
        bl.subtask = st.index

    def _replan_from_state(self, now: float, tau: float, tpl: Template, anchored: np.ndarray,
                           q_measured: np.ndarray, qd_measured: np.ndarray) -> None:
        bl = self.behaviour
        pl = self.planner
        k0 = int(round(tau / pl.ds))
        p0, v0 = pl.template_state(tpl, anchored, k0)
        q = np.clip(q_measured, self.q_min, self.q_max)
        qd = np.clip(qd_measured, -self.v_max, self.v_max)
        np.subtract(q, p0, out=bl.e0)
        np.subtract(qd, v0, out=bl.ev0)
        bl.blend_t0 = now
        bl.blend_time = pl.blend_time_for(bl.e0)
        bl.seg_t0 = now
        bl.seg_k0 = k0
        pl.plan(tpl, anchored, k0, 0.0, bl.e0, bl.ev0, bl.blend_time)
        bl.valid = True

    def _plan_stateless(self, now: float, tau: float, frame: Frame, st: SubTask, anchored: np.ndarray,
                        q_measured: np.ndarray, qd_measured: np.ndarray) -> None:
        """Level 2 with the cache disabled: one plan per frame from that frame's inputs only.

        A frame is ``frame_s`` of the control clock (frame k covers [k, k+1) * frame_s). On its first
        tick (or when the sub-task (re)started within it) a fresh segment of ``samples`` points
        over ``horizon`` seconds is planned from the measured (q, qd) to the template's state at
        tau + horizon (template + Hermite blend whose blend time is the horizon), as the seed's
        network re-run from scratch emits a block of commands per frame; the frame's ticks sample it
        one control period ahead. The plan depends on this frame's measurement, the sub-task clock
        tau and the sub-task's anchored template only; the behaviour layer's segment/blend fields
        are not read or written (its hit count stays 0).
        """
        pl = self.fresh_planner
        # frame index from the tick count, immune to the float drift of an accumulated clock
        key = (int(now / self.period + 0.5) // self._ticks_per_frame, st.index, frame.run_since)
        if key != self._frame:
            self._frame = key
            self._frame_t0 = now
            k0 = int(round(tau / pl.ds))
            p0, v0 = pl.template_state(st.template, anchored, k0)
            q = np.clip(q_measured, self.q_min, self.q_max)
            qd = np.clip(qd_measured, -self.v_max, self.v_max)
            pl.plan(st.template, anchored, k0, 0.0, q - p0, qd - v0)
        k = int(round((now + self.period - self._frame_t0) / pl.ds))
        k = min(k, pl.samples)
        self.p_ref[:] = pl.pos[k]
        self.v_ref[:] = pl.vel[k]
