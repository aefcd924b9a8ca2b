"""The router's inputs: validating setters, double buffers, the slip filter (plain module, no rclpy).

Sensor setters (``set_joint_state``, ``set_imu`` ...) may be called from other threads (ROS
callbacks): they validate, count faults (one log line per kind, ``faults``) and write double
buffers, so a tick never sees a half-written message. Impossible readings (``csr_llm_common.plausibility``:
a motor below absolute zero, a negative range, a joint far past its limits ...) are refused there, so
they never reach a derate, an interrupt or a cache layer. Decisions are checked against the intent
catalogue (the suite's one decision policy) and queued; the tick drains the queue. Only the tick
reads ``snapshot()``; the key step reads the buffers it needs itself (it may run in its own thread).

Slip filter: ``set_imu`` integrates the longitudinal acceleration into an IMU-derived base speed,
pulled toward the wheel speed of the last odometry with time constant ``slip_speed_tau`` (a
complementary filter): it follows the wheels unless the base really moves differently from them.
The key encoder compares the two speeds (see encoder.py).

Scene: ``set_objects`` (detected objects: names, positions, frame) swaps in one immutable ``Scene``
(a reference store: readers see the old or the new scene whole).
"""
from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Any, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from csr_llm_common.catalogue import DecisionError, IntentCatalogue
from csr_llm_common.faults import FaultLog
from csr_llm_common.plausibility import (NONFINITE, JointLimits, range_refusal, temperature_refusal,
                                         wrench_refusal)

from .buffers import DoubleBuffer
from .scene import EMPTY_SCENE, Scene, SceneObject

MAX_ABS_INPUT = 1.0e6

FAULT_TEXT = {
    "joint_state_length": "joint_states with mismatched array lengths rejected",
    "joint_state_nonfinite": "joint_states with NaN/inf or non-numeric values rejected",
    "joint_state_impossible": "joint_states beyond the robot's limits by more than physics allows rejected",
    "joint_state_unknown_joint": "joint_states names a joint this router does not drive (ignored)",
    "joint_state_timeout": "joint_states stale: failure flag set, ramping to safe stop",
    "imu_invalid": "imu with NaN/inf or out-of-range values rejected",
    "odom_invalid": "odom with NaN/inf or out-of-range values rejected",
    "wrench_invalid": "gripper wrench with NaN/inf values or the wrong length rejected",
    "wrench_impossible": "gripper wrench beyond any force sensor's range rejected",
    "temperature_invalid": "motor_temperature with NaN/inf value rejected",
    "temperature_impossible": "motor_temperature below absolute zero or beyond any motor's rating rejected",
    "temperature_unknown_joint": "motor_temperature for an unknown joint (frame_id) rejected",
    "proximity_invalid": "proximity range NaN rejected",
    "proximity_impossible": "proximity range negative or outside the sensor's [min_range, max_range] rejected",
    "vision_invalid": "vision_features with NaN/inf values rejected",
    "vision_length": "vision_features length differs from the first message: rejected",
    "depth_image": "depth image with an unknown encoding or inconsistent size",
    "zone_unknown": "zone without a configured threshold rejected",
    "objects_invalid": "detected_objects with mismatched lengths, empty names or NaN/inf poses rejected",
    "objects_frame": "detected_objects in a frame other than the base or odometry frame rejected",
    "decision_unknown_intent": "decision with an unknown intent rejected; what runs is unchanged",
    "decision_bad_argument": "decision with an invalid argument rejected; what runs is unchanged",
    "decision_missing_argument": "decision without a required argument rejected; what runs is unchanged",
}

# catalogue.DecisionError.kind -> the router's fault kind
DECISION_FAULTS = {
    "unknown_intent": "decision_unknown_intent",
    "unknown_argument": "decision_bad_argument",
    "bad_argument": "decision_bad_argument",
    "missing_argument": "decision_missing_argument",
}


def make_fault_log(report=None) -> FaultLog:
    return FaultLog(report, FAULT_TEXT, counted_in="router_status.input_faults")


@dataclass(frozen=True)
class QueuedDecision:
    intent: str
    arguments: Dict[str, Any]
    trigger: int
    received: float
    starts_after: float = -math.inf     # state time after which a tick may start it (decision_delay_s)


@dataclass(frozen=True)
class SensorSnapshot:
    """What one tick sees. The arrays are the tick's own copies, rewritten by the next snapshot."""
    joint_pos: np.ndarray
    joint_vel: np.ndarray
    joint_effort: np.ndarray
    have_effort: np.ndarray            # bool per joint: effort feedback in the last joint state
    state_stamp: Tuple[int, int]       # header stamp of that joint state
    state_time: float
    state_version: int                 # 0: no joint state yet
    all_joints_seen: bool
    temperature: np.ndarray            # NaN: unknown
    odom_pose: np.ndarray              # x, y, yaw
    odom_time: float
    odom_version: int
    grip_force: float                  # |force| of the last wrench
    wrench_time: float
    proximity: float
    proximity_time: float
    proximity_version: int


class RouterInputs:
    """Validating setters over double buffers (any thread); ``snapshot`` for the tick thread."""

    def __init__(self, joints: Sequence[str], catalogue: IntentCatalogue, zones: Mapping[str, float],
                 slip_speed_tau: float, faults: FaultLog, scene_frames: Sequence[str] = ("base_link", "odom"),
                 decision_delay_s: float = 0.0, joint_limits: Optional[JointLimits] = None):
        """``joint_limits``: the bounds past which a joint state is refused (default: generic ones)."""
        self.joints = list(joints)
        self.joint_index = {j: i for i, j in enumerate(self.joints)}
        n = len(self.joints)
        self.joint_limits = joint_limits if joint_limits is not None else JointLimits.generic(n)
        self.catalogue = catalogue
        self.zones = dict(zones)
        self.slip_speed_tau = float(slip_speed_tau)
        self.faults = faults
        self.scene_frames = tuple(scene_frames)
        self.decision_delay_s = float(decision_delay_s)
        self.scene: Scene = EMPTY_SCENE
        self.joint_buf = DoubleBuffer({"pos": (n,), "vel": (n,), "eff": (n,), "have_eff": (n,), "hdr": (2,)})
        self.imu_buf = DoubleBuffer({"acc": (3,), "gyro": (3,), "speeds": (2,)})
        self.odom_buf = DoubleBuffer({"pose": (3,), "twist": (2,)})
        self.wrench_buf = DoubleBuffer({"force": (1,)})
        self.proximity_buf = DoubleBuffer({"range": (1,)})
        self.vision_buf: Optional[DoubleBuffer] = None
        self.vision_len = 0
        self._imu_speed = 0.0               # IMU-derived longitudinal speed (slip test) [m/s]
        self._wheel_speed = 0.0             # last odometry twist speed [m/s]
        self._imu_last_t: Optional[float] = None
        # writer-side working copies (sensor threads only)
        self._js_work = {"pos": np.zeros(n), "vel": np.zeros(n), "eff": np.zeros(n), "have_eff": np.zeros(n),
                         "hdr": np.zeros(2)}
        self._js_seen = np.zeros(n, dtype=bool)
        self._js_names: List[str] = []
        self._js_map = self._map_joint_names([])
        self._temperature = np.full(n, np.nan)
        self._decisions: Deque[QueuedDecision] = collections.deque(maxlen=16)
        self._zone_request: Optional[str] = None
        # tick-side copies (tick thread only)
        self._js = {"pos": np.zeros(n), "vel": np.zeros(n), "eff": np.zeros(n), "have_eff": np.zeros(n),
                    "hdr": np.zeros(2)}
        self._odom = {"pose": np.zeros(3), "twist": np.zeros(2)}
        self._wrench = {"force": np.zeros(1)}
        self._prox = {"range": np.full(1, np.inf)}
        self._odom_read = self._wrench_read = self._prox_read = (math.nan, 0)    # (stamp, version) copied
        self._temperature_snap = np.full(n, np.nan)

    # ------------------------------------------------------------------ setters (any thread)
    def set_joint_state(self, names: Sequence[str], position: Sequence[float], velocity: Sequence[float] = (),
                        effort: Sequence[float] = (), now: float = 0.0, stamp: Tuple[int, int] = (0, 0)) -> bool:
        n_names = len(names)
        if len(position) != n_names or len(velocity) not in (0, n_names) or len(effort) not in (0, n_names):
            self.faults.record("joint_state_length", f"{n_names} names, {len(position)} positions, "
                               f"{len(velocity)} velocities, {len(effort)} efforts")
            return False
        if list(names) != self._js_names:   # a driver sends the same names every time: map them once
            self._js_names = list(names)
            self._js_map = self._map_joint_names(self._js_names)
        ks, js, unknown = self._js_map
        if unknown is not None:
            self.faults.record("joint_state_unknown_joint", repr(unknown))
        if not js:
            return False
        try:
            pos = np.asarray(position, dtype=float)
            vel = np.asarray(velocity, dtype=float) if len(velocity) else None
            eff = np.asarray(effort, dtype=float) if len(effort) else None
            if ks is not None:
                pos = pos[ks]
                vel = None if vel is None else vel[ks]
                eff = None if eff is None else eff[ks]
        except (TypeError, ValueError, IndexError):
            self.faults.record("joint_state_nonfinite", "non-numeric values")
            return False
        for arr in (pos, vel, eff):
            if arr is not None and not np.isfinite(arr).all():
                self.faults.record("joint_state_nonfinite")
                return False
        refusal = self.joint_limits.refusal(js, pos, vel, eff)
        if refusal is not None:
            self.faults.record("joint_state_impossible", refusal.reason)
            return False
        w = self._js_work
        w["pos"][js] = pos
        if vel is not None:
            w["vel"][js] = vel
        if eff is not None:
            w["eff"][js] = eff
            w["have_eff"][js] = 1.0
        else:
            w["have_eff"][js] = 0.0
        w["hdr"][0], w["hdr"][1] = float(stamp[0]), float(stamp[1])
        self._js_seen[js] = True
        self.joint_buf.write(now, **w)
        return True

    def _map_joint_names(self, names: List[str]) -> Tuple[Optional[List[int]], "List[int] | slice", Optional[str]]:
        """(message indices to take, or None for all in order; our joint indices; the last unknown name)."""
        idx = []
        unknown = None
        for k, name in enumerate(names):
            j = self.joint_index.get(name)
            if j is None:
                unknown = name
            else:
                idx.append((k, j))
        ks = [k for k, _ in idx]
        js = [j for _, j in idx]
        if len(names) == len(self.joints) and js == list(range(len(names))) and ks == js:
            return None, slice(None), unknown       # our joints in our order: plain copies, no gathers
        return ks, js, unknown

    def set_imu(self, acc: Sequence[float], gyro: Sequence[float], now: float = 0.0) -> bool:
        a = np.asarray(acc, dtype=float).reshape(-1)
        g = np.asarray(gyro, dtype=float).reshape(-1)
        if a.size != 3 or g.size != 3 or not (np.all(np.abs(a) < MAX_ABS_INPUT) and np.all(np.abs(g) < MAX_ABS_INPUT)):
            self.faults.record("imu_invalid")
            return False
        last = self._imu_last_t
        dt = 0.0 if last is None else min(max(now - last, 0.0), 0.1)
        tau = max(self.slip_speed_tau, 1e-3)
        self._imu_speed += a[0] * dt + (self._wheel_speed - self._imu_speed) * min(1.0, dt / tau)
        self._imu_last_t = now
        self.imu_buf.write(now, acc=a, gyro=g, speeds=(self._imu_speed, self._wheel_speed))
        return True

    def set_odom(self, x: float, y: float, yaw: float, vx: float, wz: float, now: float = 0.0) -> bool:
        vals = np.array([x, y, yaw, vx, wz], dtype=float)
        if not np.all(np.abs(vals) < MAX_ABS_INPUT):
            self.faults.record("odom_invalid")
            return False
        self.odom_buf.write(now, pose=vals[:3], twist=vals[3:])
        self._wheel_speed = float(vals[3])
        return True

    def set_wrench(self, force: Sequence[float], now: float = 0.0, torque: Sequence[float] = ()) -> bool:
        f = np.asarray(force, dtype=float).reshape(-1)
        refusal = wrench_refusal(f.tolist(), [float(t) for t in torque]) if f.size == 3 else None
        if f.size != 3 or (refusal is not None and refusal.kind == NONFINITE):
            self.faults.record("wrench_invalid")
            return False
        if refusal is not None:
            self.faults.record("wrench_impossible", refusal.reason)
            return False
        self.wrench_buf.write(now, force=float(np.sqrt(f @ f)))
        return True

    def set_temperature(self, joint: str, celsius: float, now: float = 0.0) -> bool:
        j = self.joint_index.get(joint)
        if j is None:
            self.faults.record("temperature_unknown_joint", repr(joint))
            return False
        try:
            value = float(celsius)
        except (TypeError, ValueError):
            value = math.nan
        refusal = temperature_refusal(value)
        if refusal is not None:
            self.faults.record("temperature_invalid" if refusal.kind == NONFINITE else "temperature_impossible",
                               f"{joint}: {refusal.reason}")
            return False
        self._temperature[j] = value  # single float store: atomic for the reader
        return True

    def set_proximity(self, distance: float, now: float = 0.0, min_range: float = math.nan,
                      max_range: float = math.nan) -> bool:
        """The nearest person's distance [m] (sensor_msgs/Range; ``min_range``/``max_range`` when the
        sensor sets them: a finite reading outside them is refused)."""
        try:
            d = float(distance)
        except (TypeError, ValueError):
            d = math.nan
        refusal = range_refusal(d, float(min_range), float(max_range))
        if refusal is not None:
            self.faults.record("proximity_invalid" if refusal.kind == NONFINITE else "proximity_impossible",
                               refusal.reason)
            return False
        # REP 117: +inf = nothing in range, -inf = object closer than min_range
        d = 0.0 if d == -math.inf else d
        self.proximity_buf.write(now, range=d)
        return True

    def set_vision(self, features: "Sequence[float] | np.ndarray", now: float = 0.0) -> bool:
        v = np.asarray(features, dtype=float).reshape(-1)
        if v.size == 0 or not np.all(np.abs(v) < MAX_ABS_INPUT):
            self.faults.record("vision_invalid")
            return False
        if self.vision_buf is None:
            self.vision_len = v.size
            self.vision_buf = DoubleBuffer({"v": (v.size,)})
        elif v.size != self.vision_len:
            self.faults.record("vision_length", f"{v.size} != {self.vision_len}")
            return False
        self.vision_buf.write(now, v=v)
        return True

    def set_zone(self, zone: str) -> bool:
        if str(zone) not in self.zones:
            self.faults.record("zone_unknown", repr(zone))
            return False
        self._zone_request = str(zone)
        return True

    def set_objects(self, names: Sequence[str], positions: Sequence[Sequence[float]], frame: str,
                    now: float = 0.0) -> bool:
        """Replace the scene with these detections (an empty list: nothing seen)."""
        if str(frame) not in self.scene_frames:
            self.faults.record("objects_frame", f"{frame!r} (expected one of {list(self.scene_frames)})")
            return False
        try:
            points = np.asarray(positions, dtype=float).reshape(-1, 3) if len(positions) else np.zeros((0, 3))
        except (TypeError, ValueError):
            points = np.full((0, 3), np.nan)
        if len(names) != len(points) or not all(str(n) for n in names) \
                or not np.all(np.abs(points) < MAX_ABS_INPUT):
            self.faults.record("objects_invalid")
            return False
        self.scene = Scene(float(now), str(frame), tuple(
            SceneObject(str(n), (float(p[0]), float(p[1]), float(p[2]))) for n, p in zip(names, points)))
        return True

    def submit_decision(self, intent: str, args: Optional[Mapping[str, object]] = None, trigger: int = 0,
                        now: float = 0.0, stamp: float = 0.0) -> bool:
        """Check a decision against the intent catalogue; queue it for the next tick, or with
        `decision_delay_s` > 0 for the first tick after its stamp (its logical time, > 0) + the delay."""
        try:
            parsed = self.catalogue.validate(intent, dict(args or {}))
        except DecisionError as err:
            self.faults.record(DECISION_FAULTS.get(err.kind, "decision_bad_argument"), str(err))
            return False
        starts_after = stamp + self.decision_delay_s if self.decision_delay_s > 0 and stamp > 0 else -math.inf
        self._decisions.append(QueuedDecision(parsed.intent, dict(parsed.arguments), int(trigger), now,
                                              starts_after))
        return True

    # ------------------------------------------------------------------ tick side
    @property
    def zone_request(self) -> Optional[str]:
        """The last valid zone received (None: none yet)."""
        return self._zone_request

    def take_decisions(self, now: float = math.inf) -> List[QueuedDecision]:
        """The queued decisions a tick at `now` starts, in arrival order (a held one holds those behind it)."""
        out = []
        while self._decisions and self._decisions[0].starts_after < now - 1e-6:
            out.append(self._decisions.popleft())
        return out

    def snapshot(self) -> SensorSnapshot:
        js_time, js_ver = self.joint_buf.read_into(self._js)
        # the slower sensors are copied only when they wrote since the last snapshot (the tick's copies
        # are written here alone, so an unchanged version means the copy is still the newest)
        if self.odom_buf.version != self._odom_read[1]:
            self._odom_read = self.odom_buf.read_into(self._odom)
        if self.wrench_buf.version != self._wrench_read[1]:
            self._wrench_read = self.wrench_buf.read_into(self._wrench)
        if self.proximity_buf.version != self._prox_read[1]:
            self._prox_read = self.proximity_buf.read_into(self._prox)
        (odom_time, odom_ver), (wrench_time, _), (prox_time, prox_ver) = \
            self._odom_read, self._wrench_read, self._prox_read
        np.copyto(self._temperature_snap, self._temperature)
        js = self._js
        return SensorSnapshot(
            joint_pos=js["pos"], joint_vel=js["vel"], joint_effort=js["eff"], have_effort=js["have_eff"] > 0.5,
            state_stamp=(int(js["hdr"][0]), int(js["hdr"][1])), state_time=js_time, state_version=js_ver,
            all_joints_seen=bool(self._js_seen.all()), temperature=self._temperature_snap,
            odom_pose=self._odom["pose"], odom_time=odom_time, odom_version=odom_ver,
            grip_force=float(self._wrench["force"][0]), wrench_time=wrench_time,
            proximity=float(self._prox["range"][0]), proximity_time=prox_time, proximity_version=prox_ver)
