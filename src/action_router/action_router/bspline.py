"""Cubic B-spline behaviour templates and the level-2 re-plan (plain module, no rclpy).

A template is a clamped, uniform cubic B-spline per joint over ``duration`` seconds. Its first and
last control points are duplicated so it starts and ends at rest. At configure time the basis and
its derivative are tabulated on the sample grid ``ds = horizon / samples`` (0.5 ms by default), so
evaluating the template at run time is a row slice and one small matrix product.

Re-plan (level 2): a segment of ``samples`` points over ``horizon`` seconds is

    ref(t) = P(tau(t)) + c(t),        P = anchored template,
    c(t)   = h00(u) e0 + h10(u) Tb ev0,   u = (t - blend_t0) / Tb in [0, 1]   (cubic Hermite)

where (e0, ev0) is the offset between the joint state the re-plan starts from and the template at
that time. c(blend_t0) = e0 and c'(blend_t0) = ev0, so position and velocity are continuous at
the junction; c and c' reach zero after the blend time Tb, so the segment converges back onto the
template. A segment that follows the previous one in time keeps the running blend, so chained
segments join exactly (same rows, same Hermite curve). Samples are then clipped to the joint
position and velocity limits (continuity at the junction holds whenever the starting state is
itself within the limits).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

DEGREE = 3


def clamped_uniform_knots(n_ctrl: int, degree: int = DEGREE) -> np.ndarray:
    """Knot vector on [0, 1] with degree+1 repeated end knots and uniform interior knots."""
    if n_ctrl < degree + 1:
        raise ValueError(f"need at least {degree + 1} control points, got {n_ctrl}")
    n_interior = n_ctrl - degree - 1
    interior = np.linspace(0.0, 1.0, n_interior + 2)[1:-1]
    return np.concatenate([np.zeros(degree + 1), interior, np.ones(degree + 1)])


def basis_matrix(u: np.ndarray, knots: np.ndarray, n_ctrl: int, degree: int = DEGREE) -> np.ndarray:
    """Cox-de Boor basis N_{i,degree}(u) for every u (rows) and control point (columns)."""
    u = np.clip(np.asarray(u, dtype=float), 0.0, 1.0)
    n_spans = len(knots) - 1
    N = np.zeros((u.size, n_spans))
    for i in range(n_spans):
        lo, hi = knots[i], knots[i + 1]
        if hi > lo:
            N[:, i] = (u >= lo) & (u < hi)
    # u == 1 belongs to the last non-empty span
    last = max(i for i in range(n_spans) if knots[i + 1] > knots[i])
    N[u >= 1.0, :] = 0.0
    N[u >= 1.0, last] = 1.0
    for p in range(1, degree + 1):
        Nn = np.zeros((u.size, n_spans - p))
        for i in range(n_spans - p):
            d1 = knots[i + p] - knots[i]
            d2 = knots[i + p + 1] - knots[i + 1]
            term = np.zeros(u.size)
            if d1 > 0:
                term += (u - knots[i]) / d1 * N[:, i]
            if d2 > 0:
                term += (knots[i + p + 1] - u) / d2 * N[:, i + 1]
            Nn[:, i] = term
        N = Nn
    return N[:, :n_ctrl]


def basis_derivative_matrix(u: np.ndarray, knots: np.ndarray, n_ctrl: int,
                            degree: int = DEGREE) -> np.ndarray:
    """d/du of the basis: N'_{i,p} = p/(k_{i+p}-k_i) N_{i,p-1} - p/(k_{i+p+1}-k_{i+1}) N_{i+1,p-1}."""
    lower = basis_matrix(u, knots, n_ctrl + 1, degree - 1)  # N_{i,p-1}, i = 0..n_ctrl
    D = np.zeros((np.asarray(u).size, n_ctrl))
    for i in range(n_ctrl):
        d1 = knots[i + degree] - knots[i]
        d2 = knots[i + degree + 1] - knots[i + 1]
        if d1 > 0:
            D[:, i] += degree / d1 * lower[:, i]
        if d2 > 0 and i + 1 < lower.shape[1]:
            D[:, i] -= degree / d2 * lower[:, i + 1]
    return D


@dataclass
class Template:
    """A sub-task's B-spline, tabulated on the sample grid."""
    name: str
    mode: str                      # "relative" or "absolute"
    duration: Optional[float]      # None: hold the anchor pose
    ctrl: np.ndarray               # (n_ctrl, n_joints) control points (relative offsets or absolute)
    defined: np.ndarray            # (n_joints,) bool: joint has control points in the template
    B: np.ndarray                  # (n_grid, n_ctrl) basis on the grid
    dB: np.ndarray                 # (n_grid, n_ctrl) d/dt of the basis on the grid [1/s]

    @property
    def n_grid(self) -> int:
        return self.B.shape[0]

    def anchor(self, q0: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Control points anchored at the joint positions q0 (the sub-task's start pose)."""
        out = np.empty_like(self.ctrl) if out is None else out
        if self.mode == "absolute":
            out[:] = self.ctrl
            out[:, ~self.defined] = q0[~self.defined]
            # first (duplicated) control points re-anchored at the start pose
            out[0:2, :] = q0
        else:
            out[:] = self.ctrl + q0
        return out


def make_template(name: str, spec: dict, joints: Sequence[str], horizon: float, samples: int) -> Template:
    """Build and tabulate a template from its YAML spec (see config/router_subtasks.yaml)."""
    mode = str(spec.get("mode", "relative"))
    if mode not in ("relative", "absolute"):
        raise ValueError(f"sub-task {name}: mode must be relative or absolute, not {mode!r}")
    duration = spec.get("duration", None)
    cps: Dict[str, List[float]] = dict(spec.get("control_points") or {})
    unknown = set(cps) - set(joints)
    if unknown:
        raise ValueError(f"sub-task {name}: control points for unknown joints {sorted(unknown)}")
    n_j = len(joints)
    if duration is None or not cps:
        duration = None
        n_ctrl = DEGREE + 1
        ctrl = np.zeros((n_ctrl, n_j))
        defined = np.zeros(n_j, dtype=bool)
    else:
        duration = float(duration)
        if not duration > 0:
            raise ValueError(f"sub-task {name}: duration must be > 0")
        lengths = {len(v) for v in cps.values()}
        if len(lengths) != 1 or min(lengths) < 2:
            raise ValueError(f"sub-task {name}: every joint needs the same number (>= 2) of control points")
        n_pts = lengths.pop()
        n_ctrl = max(n_pts + 2, DEGREE + 1)
        ctrl = np.zeros((n_ctrl, n_j))
        defined = np.zeros(n_j, dtype=bool)
        for j, joint in enumerate(joints):
            if joint in cps:
                pts = np.asarray(cps[joint], dtype=float)
                if not np.all(np.isfinite(pts)):
                    raise ValueError(f"sub-task {name}: non-finite control point for {joint}")
                # duplicate the end points: zero velocity at both ends
                full = np.concatenate([[pts[0]], pts, [pts[-1]]])
                if full.size < n_ctrl:
                    full = np.concatenate([full, np.repeat(full[-1], n_ctrl - full.size)])
                ctrl[:, j] = full
                defined[j] = True
        if mode == "relative":
            ctrl -= ctrl[0]  # offsets from the start pose, first point 0
    ds = horizon / samples
    knots = clamped_uniform_knots(n_ctrl)
    if duration is None:
        n_grid = samples + 1
        u: np.ndarray = np.zeros(n_grid)
        B = basis_matrix(u, knots, n_ctrl)
        dB = np.zeros_like(B)
    else:
        n_grid = int(round(duration / ds)) + 1
        u = np.arange(n_grid) * ds / duration
        B = basis_matrix(u, knots, n_ctrl)
        dB = basis_derivative_matrix(u, knots, n_ctrl) / duration
    return Template(name=name, mode=mode, duration=duration, ctrl=ctrl, defined=defined, B=B, dB=dB)


class SegmentPlanner:
    """Level-2 re-planner: one segment of ``samples`` points over ``horizon`` seconds.

    Buffers are allocated once; ``plan`` writes into them (no allocation in the control path
    beyond numpy temporaries of a few hundred floats).
    """

    def __init__(self, n_joints: int, horizon: float, samples: int, blend_time: float,
                 q_min=None, q_max=None, v_max=None):
        if samples < 2 or not horizon > 0:
            raise ValueError("need samples >= 2 and horizon > 0")
        self.n = n_joints
        self.horizon = float(horizon)
        self.samples = int(samples)
        self.ds = self.horizon / self.samples
        self.blend_time = max(float(blend_time), self.ds)
        inf = np.full(n_joints, np.inf)
        self.q_min = -inf if q_min is None else np.asarray(q_min, dtype=float)
        self.q_max = inf if q_max is None else np.asarray(q_max, dtype=float)
        self.v_max = inf if v_max is None else np.abs(np.asarray(v_max, dtype=float))
        self._s = np.arange(self.samples + 1) * self.ds  # sample offsets incl. the end point
        self.pos = np.zeros((self.samples + 1, n_joints))  # row `samples` = end state (junction)
        self.vel = np.zeros((self.samples + 1, n_joints))

    @staticmethod
    def _hermite(u: np.ndarray):
        u2 = u * u
        u3 = u2 * u
        h00 = 2 * u3 - 3 * u2 + 1
        h10 = u3 - 2 * u2 + u
        dh00 = 6 * u2 - 6 * u
        dh10 = 3 * u2 - 4 * u + 1
        return h00, h10, dh00, dh10

    def template_state(self, tpl: Template, anchored: np.ndarray, k: int):
        """Template position and velocity at grid row k (held at the end)."""
        k = min(max(k, 0), tpl.n_grid - 1)
        return tpl.B[k] @ anchored, tpl.dB[k] @ anchored

    def blend_time_for(self, e0: np.ndarray) -> float:
        """The blend time for a position offset e0: ``blend_time``, stretched where the blend's own
        peak speed (1.5 |e0| / Tb, at mid-blend) would exceed a joint's velocity limit."""
        return max(self.blend_time, 1.5 * float(np.max(np.abs(e0) / self.v_max)))

    def plan(self, tpl: Template, anchored: np.ndarray, k0: int, t_offset: float,
             e0: np.ndarray, ev0: np.ndarray, blend_time: Optional[float] = None) -> None:
        """Fill pos/vel for template rows k0..k0+samples plus the running blend.

        t_offset: time of this segment's first sample since the blend started; e0/ev0: the blend's
        initial position and velocity offsets from the template; blend_time: the running blend's
        duration (default ``self.blend_time``).
        """
        rows = np.minimum(np.arange(k0, k0 + self.samples + 1), tpl.n_grid - 1)
        pos = self.pos
        vel = self.vel
        np.matmul(tpl.B[rows], anchored, out=pos)
        np.matmul(tpl.dB[rows], anchored, out=vel)
        if k0 + self.samples >= tpl.n_grid:
            vel[rows == tpl.n_grid - 1] = 0.0  # held after the end
        Tb = self.blend_time if blend_time is None else max(float(blend_time), self.ds)
        u = np.clip((self._s + t_offset) / Tb, 0.0, 1.0)
        if u[0] < 1.0:
            h00, h10, dh00, dh10 = self._hermite(u)
            done = u >= 1.0
            dh00[done] = 0.0
            dh10[done] = 0.0
            pos += np.outer(h00, e0) + np.outer(h10 * Tb, ev0)
            vel += np.outer(dh00 / Tb, e0) + np.outer(dh10, ev0)
        np.clip(pos, self.q_min, self.q_max, out=pos)
        np.clip(vel, -self.v_max, self.v_max, out=vel)
        # a joint pinned at a position limit does not move
        pinned = (pos <= self.q_min) | (pos >= self.q_max)
        if pinned.any():
            vel[pinned & (((pos <= self.q_min) & (vel < 0)) | ((pos >= self.q_max) & (vel > 0)))] = 0.0
