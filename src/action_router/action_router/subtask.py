"""Sub-tasks: a compiled B-spline template plus its execution data, and when it is done
(plain module, no rclpy).

A sub-task is done in one of ``DONE_MODES``: ``trajectory`` (template end reached and the defined,
position-tracked joints settled within ``settle_tolerance``), ``grip`` (grip force above the
threshold for the dwell time, ``GripMonitor``), ``base_distance`` (the base travelled the distance,
or the decision's ``base_distance`` argument), ``zone_reached`` (the go-to-pose controller reached
the goal of the decision's zone, ``base_goal``) or ``never``. Past its ``timeout`` a sub-task that is
not done has timed out; what that means (unknown scene for a task, done for an interrupt) is the
router's call.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence, cast

import numpy as np

from .bspline import Template, make_template
from .interrupts import Frame
from .monitors import GripMonitor
from .params import RouterConfig

DONE_MODES = ("trajectory", "grip", "base_distance", "zone_reached", "never")


class SubTask:
    """A sub-task's compiled template and execution data."""

    def __init__(self, index: int, name: str, spec: dict, joints: Sequence[str], cfg: RouterConfig):
        self.index = index
        self.name = name
        self.spec = spec
        n = len(joints)
        horizon, samples = float(cfg["horizon_s"]), int(cfg["samples"])
        self.zero_effort = bool(spec.get("zero_effort", False))
        self.template: Template = make_template(name, spec, joints, horizon, samples)
        # the template itself must respect the joint limits
        if self.template.mode == "absolute":
            lo, hi = np.array(cfg["position_min"]), np.array(cfg["position_max"])
            pts = self.template.ctrl[:, self.template.defined]
            if np.any(pts < lo[self.template.defined]) or np.any(pts > hi[self.template.defined]):
                raise ValueError(f"sub-task {name}: control points outside the joint position limits")
        self.done = str(spec.get("done", "trajectory" if self.template.duration else "never"))
        if self.done not in DONE_MODES:
            raise ValueError(f"sub-task {name}: done must be one of {DONE_MODES}")
        if self.done == "trajectory" and self.template.duration is None:
            raise ValueError(f"sub-task {name}: done: trajectory needs a timed template (duration and control_points)")
        timeout = spec.get("timeout")
        self.timeout = float(timeout) if timeout is not None else math.inf
        self.torque_limit = np.full(n, np.inf)
        for joint, value in (spec.get("effort_limit") or {}).items():
            if joint not in joints:
                raise ValueError(f"sub-task {name}: effort_limit for unknown joint {joint}")
            self.torque_limit[list(joints).index(joint)] = abs(float(value))
        self.hold_mask = np.zeros(n, dtype=bool)
        self.hold_effort = np.zeros(n)
        for joint, value in (spec.get("hold_effort") or {}).items():
            if joint not in joints:
                raise ValueError(f"sub-task {name}: hold_effort for unknown joint {joint}")
            j = list(joints).index(joint)
            self.hold_mask[j] = True
            self.hold_effort[j] = float(value)
        base = spec.get("base") or {}
        self.base_vx = float(base.get("vx", 0.0))
        self.base_wz = float(base.get("wz", 0.0))
        self.base_distance = float(base["distance"]) if base.get("distance") is not None else math.inf
        if self.done == "base_distance" and not math.isfinite(self.base_distance):
            raise ValueError(f"sub-task {name}: done: base_distance needs base.distance")
        proto = (spec.get("prototype") or {}).get("joints") or {}
        self.prototype_pose = np.zeros(n)
        for joint, value in proto.items():
            if joint in joints:
                self.prototype_pose[list(joints).index(joint)] = float(value)
        self.final_rows = self.template.n_grid - 1


@dataclass(frozen=True)
class Progress:
    """Outcome of one progress check of the running sub-task."""
    done: bool = False
    timed_out: bool = False      # not done and past the sub-task's timeout
    gripped: bool = False        # done by the grip force dwell


def check_progress(st: SubTask, frame: Frame, now: float, *, joint_pos: np.ndarray,
                   final_pose: Callable[[], np.ndarray], grip: GripMonitor, grip_force: float,
                   settle_tolerance: float, goal_reached: bool = False) -> Progress:
    """Is the frame's running sub-task done? ``final_pose`` is asked only once the template ended."""
    tau = frame.phase + (now - frame.run_since)
    done = gripped = False
    if st.done == "trajectory":
        assert st.template.duration is not None      # "trajectory" is the default only for timed templates
        if tau >= st.template.duration:
            err = np.abs(final_pose() - joint_pos)[st.template.defined & ~st.hold_mask]
            done = err.size == 0 or float(err.max()) <= settle_tolerance
    elif st.done == "grip":
        done = gripped = grip.update(grip_force, now)
    elif st.done == "base_distance":
        dist = frame.args.get("base_distance", st.base_distance)
        done = frame.base_travel >= float(cast(float, dist))
    elif st.done == "zone_reached":
        done = goal_reached
    if not done and now - frame.start_time > st.timeout:
        return Progress(timed_out=True)
    return Progress(done=done, gripped=gripped)
