"""The start of each tick: the step, the zone, the sensor snapshot and what it says about the
robot (plain module, no rclpy).

``SensorIntake`` owns the router's inputs (``inputs.py``: the setters any thread may call), the
zone the tick matches against (a valid zone request switches it at the next tick), the time of the
last tick and the physical monitors (``monitors.py``): motor temperature -> the derated joints,
effort feedback against the last command -> the confidence bits, odometry -> the base distance
travelled. ``begin`` turns them into one ``TickInput``: what every later stage of the tick reads,
each sensor's freshness already decided; the router applies it stage by stage.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np

from csr_llm_common.faults import FaultLog
from csr_llm_common.plausibility import JointLimits

from .inputs import RouterInputs, SensorSnapshot
from .monitors import BaseTravel, ConfidenceMonitor, TemperatureMonitor
from .params import RouterConfig
from .scene import SceneFrames

MAX_STEP_S = 0.1            # a longer gap between ticks is integrated as this step
WRENCH_TIMEOUT_S = 0.1      # an older wrench reads as no grip force


@dataclass(frozen=True)
class TickInput:
    now: float
    dt: float                       # the step since the last tick (the period on the first)
    snap: SensorSnapshot
    state_ok: bool                  # every joint reported, the joint state fresh
    state_lost: bool                # not state_ok, after joint states had been fresh
    proximity: float                # the nearest person [m]; inf when the range is stale
    grip_force: float               # 0 when the wrench is stale
    odom_fresh: bool
    derated: np.ndarray             # bool per joint: over temperature
    derate_note: str                # joints newly over temperature: the log line ("" when none)
    confidence: Optional[np.ndarray]    # the confidence bits, when effort feedback updated them
    base_moved: float               # base distance since the last tick [m]


class SensorIntake:
    """The inputs, the zone, the tick clock and the physical monitors; ``begin`` is the tick's alone."""

    def __init__(self, cfg: RouterConfig, joints: Sequence[str], zones: Mapping[str, float], faults: FaultLog):
        self.joints = list(joints)
        self.scene_frames = SceneFrames(str(cfg["base_frame"]), str(cfg["odom_frame"]), float(cfg["scene_timeout_s"]))
        self.inputs = RouterInputs(joints, cfg.catalogue, zones, float(cfg["slip_speed_tau"]), faults,
                                   (self.scene_frames.base, self.scene_frames.odom), float(cfg["decision_delay_s"]),
                                   JointLimits.from_description(cfg["position_min"], cfg["position_max"],
                                                                cfg["velocity_max"], cfg["effort_max"]))
        self._zones = dict(zones)
        self._zone = str(cfg["zone"])
        if self._zone not in self._zones:
            raise ValueError(f"zone {self._zone!r} has no threshold (zones: {sorted(self._zones)})")
        self._period = 1.0 / float(cfg["control_hz"])
        self._state_timeout = float(cfg["state_timeout_s"])
        self._proximity_timeout = float(cfg["proximity_timeout_s"])
        self._odom_timeout = float(cfg["odom_timeout_s"])
        self._last_tick: Optional[float] = None
        self._state_ever_ok = False
        n = len(self.joints)
        self.temperature = TemperatureMonitor(n, float(cfg["temperature_limit"]), float(cfg["temperature_hysteresis"]))
        self.confidence = ConfidenceMonitor(n, float(cfg["confidence_abs_tol"]), float(cfg["confidence_rel_tol"]),
                                            int(cfg["confidence_dwell_ticks"]))
        self.base_travel = BaseTravel()
        self.derate_count = 0           # joints that went over temperature

    @property
    def zone(self) -> str:
        return self._zone

    @property
    def threshold(self) -> float:
        """The task-layer match threshold of the zone."""
        return self._zones[self._zone]

    def begin(self, now: float, commanded_effort: np.ndarray, commanded_vx: float) -> TickInput:
        """The tick at ``now``; ``commanded_*``: the last command (level 3's)."""
        dt = self._period if self._last_tick is None else now - self._last_tick
        if not (0.0 < dt <= MAX_STEP_S):
            dt = self._period if dt <= 0.0 or not math.isfinite(dt) else MAX_STEP_S
        self._last_tick = now
        zone = self.inputs.zone_request
        if zone is not None:
            self._zone = zone
        snap = self.inputs.snapshot()
        state_ok = snap.state_version > 0 and snap.all_joints_seen and (now - snap.state_time) <= self._state_timeout
        state_lost = not state_ok and self._state_ever_ok
        self._state_ever_ok = self._state_ever_ok or state_ok
        fresh_range = snap.proximity_version and now - snap.proximity_time <= self._proximity_timeout
        derate_note = self._derate(snap.temperature)
        confidence = None
        if state_ok and snap.have_effort.any():
            self.confidence.update(snap.joint_effort, commanded_effort, snap.have_effort)
            confidence = self.confidence.confidence
        return TickInput(
            now=now, dt=dt, snap=snap, state_ok=state_ok, state_lost=state_lost,
            proximity=snap.proximity if fresh_range else math.inf,
            grip_force=snap.grip_force if now - snap.wrench_time <= WRENCH_TIMEOUT_S else 0.0,
            odom_fresh=not (snap.odom_version == 0 or now - snap.odom_time > self._odom_timeout),
            derated=self.temperature.hot, derate_note=derate_note, confidence=confidence,
            base_moved=self.base_travel.step(now, dt, snap.odom_pose, snap.odom_time, snap.odom_version,
                                             commanded_vx))

    def _derate(self, temperature: np.ndarray) -> str:
        new_hot = self.temperature.update(temperature)
        if not new_hot:
            return ""
        self.derate_count += new_hot
        return (f"motor over {self.temperature.limit:g} C: derated parameter set loaded for "
                + ", ".join(j for j, h in zip(self.joints, self.temperature.hot) if h))
