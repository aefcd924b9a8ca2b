"""The router core: sensor snapshots in, one command per tick out (plain module, no rclpy).

Per tick (``Router.tick(now)``):
  0. drain decisions and the zone mailbox; copy sensor snapshots out of the double buffers;
  1. physical invalidations: temperature -> derated set, effort feedback -> confidence bit,
     grip force dwell -> grip sub-task done, stale joint states -> failure;
  2. interrupts: proximity triggers push / pop frames of the priority stack;
  3. level 1 (task frames): on a new key (key_hz, or every tick with the cache disabled) the key is
     matched in the task layer against the zone's threshold; a miss (confirmed
     ``miss_confirmations`` times while a sub-task runs, at once when it starts) runs the
     unknown-scene protocol and asks for a new decision;
  4. level 2: the behaviour layer serves the running 50 ms segment or re-plans it (B-spline
     template + Hermite blend from the current joint state) and writes the sub-task's torque
     limits into the execution layer; with the cache disabled a fresh segment is planned every
     tick from the measured state to the template at tau + horizon (``_plan_stateless``);
  5. level 3: per-joint PID on the segment, clamped to the execution layer's limit; persistent
     clamping sets the failure flag and the command ramps to the safe-stop set.

Sensor setters (``set_joint_state``, ``set_imu`` ...) may be called from other threads: they
validate, count faults (``faults``) and write double buffers; only ``tick`` changes the
stack, the caches and the outputs.
"""
from __future__ import annotations

import collections
import math
import threading
import time
from typing import Callable, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .bspline import SegmentPlanner, Template, make_template
from .buffers import DoubleBuffer
from .cache import (BehaviourLayer, ClampMonitor, ConfidenceMonitor, ExecutionLayer, ExecutionSet,
                    GripMonitor, TaskLayer, TemperatureMonitor)
from .encoder import GRAVITY, EncoderConfig, KeyEncoder, Observation, ProjectionKeyEncoder
from .interrupts import (SOURCE_INTERRUPT, SOURCE_NONE, SOURCE_SAFE_STOP, SOURCE_TASK,
                         SOURCE_UNKNOWN_SCENE, Arbiter, Frame, InterruptStack)
from .params import RouterConfig, make_config
from .pid import VectorPid

EXEC_NOMINAL = 0
EXEC_DERATED = 1
EXEC_FAILSAFE = 2
EXEC_STOPPED = 3

MAX_ABS_INPUT = 1.0e6

DONE_MODES = ("trajectory", "grip", "base_distance", "never")

FAULT_TEXT = {
    "joint_state_length": "joint_states with mismatched array lengths rejected",
    "joint_state_nonfinite": "joint_states with NaN/inf or out-of-range values rejected",
    "joint_state_unknown_joint": "joint_states names a joint this router does not drive (ignored)",
    "joint_state_timeout": "joint_states stale: failure flag set, ramping to safe stop",
    "imu_invalid": "imu with NaN/inf or out-of-range values rejected",
    "odom_invalid": "odom with NaN/inf or out-of-range values rejected",
    "wrench_invalid": "gripper wrench with NaN/inf or out-of-range values rejected",
    "temperature_invalid": "motor_temperature with NaN/inf value rejected",
    "temperature_unknown_joint": "motor_temperature for an unknown joint (frame_id) rejected",
    "proximity_invalid": "proximity range NaN rejected",
    "vision_invalid": "vision_features with NaN/inf values rejected",
    "vision_length": "vision_features length differs from the first message: rejected",
    "zone_unknown": "zone without a configured threshold rejected",
    "decision_unknown_intent": "decision with an unknown intent rejected; what runs is unchanged",
    "decision_bad_argument": "decision with an invalid argument rejected; what runs is unchanged",
}


class FaultLog:
    """Counts input faults per kind; reports the first of each kind once (one log line per kind)."""

    def __init__(self, report: Optional[Callable[[str, str], None]] = None):
        self.counts: Dict[str, int] = {}
        self.total = 0
        self.report = report
        self._lock = threading.Lock()

    def record(self, kind: str, detail: str = "") -> None:
        with self._lock:
            first = kind not in self.counts
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.total += 1
        if first and self.report is not None:
            text = FAULT_TEXT.get(kind, kind)
            self.report(kind, f"input fault [{kind}]: {text}" + (f" ({detail})" if detail else "")
                        + "; further faults of this kind are counted in router_status.input_faults")


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


class Router:
    """Three-level action router over the three-layer cache."""

    def __init__(self, config: Optional[RouterConfig] = None, *, auto_key: bool = True,
                 encoder: Optional[KeyEncoder] = None,
                 fault_report: Optional[Callable[[str, str], None]] = None,
                 info_report: Optional[Callable[[str], None]] = None):
        self.cfg = cfg = config if config is not None else make_config()
        self.joints = list(cfg.joints)
        self.n = n = len(self.joints)
        self.joint_index = {j: i for i, j in enumerate(self.joints)}
        self.period = 1.0 / float(cfg["control_hz"])
        self.key_period = 1.0 / float(cfg["key_hz"])
        self.cache_enabled = bool(cfg["cache_enabled"])
        self.auto_key = auto_key
        self.faults = FaultLog(fault_report)
        self.info = info_report or (lambda text: None)
        # limits
        self.q_min = np.array(cfg["position_min"], dtype=float)
        self.q_max = np.array(cfg["position_max"], dtype=float)
        self.v_max = np.array(cfg["velocity_max"], dtype=float)
        self.effort_max = np.array(cfg["effort_max"], dtype=float)
        # sub-tasks, intents
        self.subtasks: List[SubTask] = []
        self.subtask_index: Dict[str, int] = {}
        for name, spec in cfg.subtasks.items():
            st = SubTask(len(self.subtasks), name, dict(spec or {}), self.joints, cfg)
            self.subtask_index[name] = st.index
            self.subtasks.append(st)
        self.intent_names = [i for i in cfg.intent_sequences]
        self.intent_index = {name: i for i, name in enumerate(self.intent_names)}
        self.sequences = [[self.subtask_index[s] for s in cfg.intent_sequences[i]] for i in self.intent_names]
        max_ctrl = max(st.template.ctrl.shape[0] for st in self.subtasks)
        # caches and levels
        self.encoder = encoder or ProjectionKeyEncoder(EncoderConfig(
            robot_id=str(cfg["robot_id"]), n_joints=n, id_share=float(cfg["id_share"]),
            slip_ratio=float(cfg["slip_ratio"]), slip_min_weight=float(cfg["slip_min_weight"])))
        if cfg["encoder_weights_file"] and hasattr(self.encoder, "load_weights"):
            self.encoder.load_weights(str(cfg["encoder_weights_file"]))
        self.task_layer = TaskLayer(int(cfg["task_capacity"]))
        self.behaviour = BehaviourLayer(n, max_ctrl)
        gains = [cfg.gains[j] for j in self.joints]
        self.execution = ExecutionLayer(ExecutionSet(gains, self.effort_max.copy()),
                                        float(cfg["derate_gain_scale"]), float(cfg["derate_limit_scale"]),
                                        float(cfg["low_confidence_limit_scale"]))
        self.pid = VectorPid(gains)
        self.planner = SegmentPlanner(n, float(cfg["horizon_s"]), int(cfg["samples"]), float(cfg["blend_s"]),
                                      self.q_min, self.q_max, self.v_max)
        # cache_enabled: false only: the stateless planner, whose blend spans exactly one segment
        self.fresh_planner = SegmentPlanner(n, float(cfg["horizon_s"]), int(cfg["samples"]), float(cfg["horizon_s"]),
                                            self.q_min, self.q_max, self.v_max)
        self.grip = GripMonitor(float(cfg["grip_force_threshold"]), float(cfg["grip_dwell_s"]))
        self.temperature_monitor = TemperatureMonitor(n, float(cfg["temperature_limit"]),
                                                      float(cfg["temperature_hysteresis"]))
        self.confidence = ConfidenceMonitor(n, float(cfg["confidence_abs_tol"]), float(cfg["confidence_rel_tol"]),
                                            int(cfg["confidence_dwell_ticks"]))
        self.clamp_monitor = ClampMonitor(n, float(cfg["failsafe_clamp_persist_s"]))
        self.stack = InterruptStack()
        self.arbiter = Arbiter()
        self.interrupt_specs = []
        for name, spec in cfg.interrupts.items():
            dist = spec.get("distance")
            if dist is None:
                dist = cfg[spec.get("distance_param", "person_distance")]
            self.interrupt_specs.append((name, float(dist), [self.subtask_index[s] for s in spec["subtasks"]],
                                         str(spec.get("sound", ""))))
        self._int_latched = [False] * len(self.interrupt_specs)
        self.unknown_subtasks = [self.subtask_index[s] for s in cfg.unknown_scene["subtasks"]]
        self.unknown_request = str(cfg.unknown_scene.get("request", "unknown scene: new decision needed"))
        # double buffers (sensor threads -> tick)
        self._js_buf = DoubleBuffer({"pos": (n,), "vel": (n,), "eff": (n,), "have_eff": (n,), "hdr": (2,)})
        self._imu_buf = DoubleBuffer({"acc": (3,), "gyro": (3,), "speeds": (2,)})
        self._imu_speed = 0.0               # IMU-derived longitudinal speed (slip test) [m/s]
        self._wheel_speed = 0.0             # last odometry twist speed [m/s]
        self._imu_last_t: Optional[float] = None
        self._odom_buf = DoubleBuffer({"pose": (3,), "twist": (2,)})
        self._wrench_buf = DoubleBuffer({"force": (1,)})
        self._prox_buf = DoubleBuffer({"range": (1,)})
        self._key_buf = DoubleBuffer({"key": (64,)})
        self._vision_buf: Optional[DoubleBuffer] = None
        self._vision_len = 0
        # writer-side working copies (sensor threads only)
        self._js_work = {"pos": np.zeros(n), "vel": np.zeros(n), "eff": np.zeros(n), "have_eff": np.zeros(n),
                         "hdr": np.zeros(2)}
        self._js_seen = np.zeros(n, dtype=bool)
        self._temperature = np.full(n, np.nan)
        self._decisions: Deque[Tuple[str, dict, int, float]] = collections.deque(maxlen=16)
        self.repeated_decisions = 0
        self.slip_events = 0
        self._slipping = False
        self._zone_mailbox: Optional[str] = None
        # tick-side snapshots (tick thread only)
        self._js = {"pos": np.zeros(n), "vel": np.zeros(n), "eff": np.zeros(n), "have_eff": np.zeros(n),
                    "hdr": np.zeros(2)}
        self._imu = {"acc": np.array([0.0, 0.0, GRAVITY]), "gyro": np.zeros(3)}
        self._odom = {"pose": np.zeros(3), "twist": np.zeros(2)}
        self._wrench = {"force": np.zeros(1)}
        self._prox = {"range": np.full(1, np.inf)}
        self._key_snap = {"key": np.zeros(64)}
        self._vision_snap: Optional[Dict[str, np.ndarray]] = None
        self._obs = Observation(joint_pos=np.zeros(n), joint_vel=np.zeros(n), effort_mean=np.zeros(n))
        self._key = np.zeros(64)
        # shared with the key encoder when it runs in its own thread (published by the tick)
        self._key_context = ("", 0)
        self._eff_acc = np.zeros(n)
        self._eff_count = 0
        self._key_odom_pose = np.zeros(3)
        self._key_odom_init = False
        self._last_key_time = -math.inf
        self._key_version_seen = 0
        self._key_lock = threading.Lock()
        # state
        self.zone = str(cfg["zone"])
        if cfg.threshold(self.zone) is None:
            raise ValueError(f"zone {self.zone!r} has no threshold (zones: {cfg['zones']})")
        self.threshold = float(cfg.threshold(self.zone))
        self._last_tick: Optional[float] = None
        self._prev_odom_pose = np.zeros(3)
        self._prev_odom_valid = False
        self._consecutive_misses = 0
        self._pending_confirm: Optional[Tuple[np.ndarray, str, int, int, float]] = None
        self._ramp_from = np.zeros(n)
        self._ramp_base_from = np.zeros(2)
        self._ramp_t0 = 0.0
        self._zero_from = np.zeros(n)
        self._zero_t0 = 0.0
        self._zero_sub = -1
        self._gains_epoch = -1
        self._state_ever_ok = False
        self.tick_count = 0
        # counters
        self.unknown_scene_count = 0
        self.grip_done_count = 0
        self.derate_count = 0
        self.failsafe_count = 0
        self.subtasks_completed = 0
        # outputs (valid after tick)
        self.effort = np.zeros(n)
        self.effort_limit = self.effort_max.copy()
        self.clamped = np.zeros(n, dtype=bool)
        self.cmd_vx = 0.0
        self.cmd_wz = 0.0
        self.source = SOURCE_NONE
        self.execution_state = EXEC_STOPPED
        self.active_intent = ""
        self.active_sub_task = ""
        self.match_similarity = 0.0
        self.l1_hit = False
        self.l2_hit = False
        self.l3_clamped = False
        self.l1_us = self.l2_us = self.l3_us = 0.0
        self.state_stamp = (0, 0)
        self.requests: List[str] = []
        self.sounds: List[str] = []
        self.p_ref = np.zeros(n)
        self.tracking = False
        self.v_ref = np.zeros(n)
        self._seed_task_layer()

    # ------------------------------------------------------------------ task layer seeding
    def _seed_task_layer(self) -> None:
        obs = Observation(joint_pos=np.zeros(self.n), joint_vel=np.zeros(self.n), effort_mean=np.zeros(self.n))
        for ii, intent in enumerate(self.intent_names):
            for stage, si in enumerate(self.sequences[ii]):
                st = self.subtasks[si]
                obs.intent, obs.stage = intent, stage
                obs.joint_pos[:] = st.prototype_pose
                obs.odom_delta = np.array([st.base_vx * self.key_period, 0.0, st.base_wz * self.key_period])
                obs.wheel_speed = obs.imu_speed = st.base_vx     # a nominal sub-task does not slip
                obs.imu_acc = np.array([0.0, 0.0, GRAVITY])
                key = self.encoder.encode(obs, np.empty(64))
                self.task_layer.insert(key, si, ii, stage, seeded=True)

    # ------------------------------------------------------------------ sensor inputs (any thread)
    def set_joint_state(self, names: Sequence[str], position: Sequence[float], velocity: Sequence[float] = (),
                        effort: Sequence[float] = (), now: float = 0.0, stamp: Tuple[int, int] = (0, 0)) -> bool:
        n_names = len(names)
        if len(position) != n_names or len(velocity) not in (0, n_names) or len(effort) not in (0, n_names):
            self.faults.record("joint_state_length", f"{n_names} names, {len(position)} positions, "
                               f"{len(velocity)} velocities, {len(effort)} efforts")
            return False
        idx = []
        unknown = None
        for k, name in enumerate(names):
            j = self.joint_index.get(name)
            if j is None:
                unknown = name
            else:
                idx.append((k, j))
        if unknown is not None:
            self.faults.record("joint_state_unknown_joint", repr(unknown))
        if not idx:
            return False
        ks = [k for k, _ in idx]
        js = [j for _, j in idx]
        try:
            pos = np.asarray(position, dtype=float)[ks]
            vel = np.asarray(velocity, dtype=float)[ks] if len(velocity) else None
            eff = np.asarray(effort, dtype=float)[ks] if len(effort) else None
        except (TypeError, ValueError):
            self.faults.record("joint_state_nonfinite", "non-numeric values")
            return False
        for arr in (pos, vel, eff):
            if arr is not None and not np.all(np.abs(arr) < MAX_ABS_INPUT):  # NaN fails too
                self.faults.record("joint_state_nonfinite")
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
        self._js_buf.write(now, **w)
        return True

    def set_imu(self, acc: Sequence[float], gyro: Sequence[float], now: float = 0.0) -> bool:
        a = np.asarray(acc, dtype=float).reshape(-1)
        g = np.asarray(gyro, dtype=float).reshape(-1)
        if a.size != 3 or g.size != 3 or not (np.all(np.abs(a) < MAX_ABS_INPUT) and np.all(np.abs(g) < MAX_ABS_INPUT)):
            self.faults.record("imu_invalid")
            return False
        # integrate the longitudinal acceleration, pulled toward the wheel speed (complementary
        # filter): it follows the wheels unless the base really moves differently from them
        last = self._imu_last_t
        dt = 0.0 if last is None else min(max(now - last, 0.0), 0.1)
        tau = max(float(self.cfg["slip_speed_tau"]), 1e-3)
        self._imu_speed += a[0] * dt + (self._wheel_speed - self._imu_speed) * min(1.0, dt / tau)
        self._imu_last_t = now
        self._imu_buf.write(now, acc=a, gyro=g, speeds=(self._imu_speed, self._wheel_speed))
        return True

    def set_odom(self, x: float, y: float, yaw: float, vx: float, wz: float, now: float = 0.0) -> bool:
        vals = np.array([x, y, yaw, vx, wz], dtype=float)
        if not np.all(np.abs(vals) < MAX_ABS_INPUT):
            self.faults.record("odom_invalid")
            return False
        self._odom_buf.write(now, pose=vals[:3], twist=vals[3:])
        self._wheel_speed = float(vals[3])
        return True

    def set_wrench(self, force: Sequence[float], now: float = 0.0) -> bool:
        f = np.asarray(force, dtype=float).reshape(-1)
        if f.size != 3 or not np.all(np.abs(f) < MAX_ABS_INPUT):
            self.faults.record("wrench_invalid")
            return False
        self._wrench_buf.write(now, force=float(np.sqrt(f @ f)))
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
        if not abs(value) < MAX_ABS_INPUT:
            self.faults.record("temperature_invalid")
            return False
        self._temperature[j] = value  # single float store: atomic for the reader
        return True

    def set_proximity(self, distance: float, now: float = 0.0) -> bool:
        try:
            d = float(distance)
        except (TypeError, ValueError):
            d = math.nan
        if math.isnan(d):
            self.faults.record("proximity_invalid")
            return False
        # REP 117: +inf = nothing in range, -inf = object closer than min_range
        d = 0.0 if d == -math.inf else max(d, 0.0)
        self._prox_buf.write(now, range=d)
        return True

    def set_vision(self, features: Sequence[float], now: float = 0.0) -> bool:
        v = np.asarray(features, dtype=float).reshape(-1)
        if v.size == 0 or not np.all(np.abs(v) < MAX_ABS_INPUT):
            self.faults.record("vision_invalid")
            return False
        if self._vision_buf is None:
            self._vision_len = v.size
            self._vision_buf = DoubleBuffer({"v": (v.size,)})
        elif v.size != self._vision_len:
            self.faults.record("vision_length", f"{v.size} != {self._vision_len}")
            return False
        self._vision_buf.write(now, v=v)
        return True

    def set_zone(self, zone: str) -> bool:
        if self.cfg.threshold(str(zone)) is None:
            self.faults.record("zone_unknown", repr(zone))
            return False
        self._zone_mailbox = str(zone)
        return True

    def submit_decision(self, intent: str, args: Optional[Mapping[str, object]] = None, trigger: int = 0,
                        now: float = 0.0) -> bool:
        """Validate a decision against both catalogues; queue it for the next tick."""
        intent = str(intent)
        if intent not in self.intent_index or intent not in self.cfg.intents:
            self.faults.record("decision_unknown_intent", repr(intent))
            return False
        spec = self.cfg.intents[intent].get("arguments") or {}
        clean: Dict[str, object] = {}
        for name, value in dict(args or {}).items():
            a = spec.get(name)
            if a is None:
                self.faults.record("decision_bad_argument", f"{intent}: unknown argument {name!r}")
                return False
            kind = a.get("type")
            ok = True
            if kind == "float":
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value)) \
                    and float(a.get("min", -math.inf)) <= float(value) <= float(a.get("max", math.inf))
                value = float(value) if ok else value
            elif kind == "int":
                ok = isinstance(value, int) and not isinstance(value, bool)
            elif kind == "string":
                ok = isinstance(value, str) and (not a.get("enum") or value in a["enum"])
            elif kind == "bool":
                ok = isinstance(value, bool)
            if not ok:
                self.faults.record("decision_bad_argument", f"{intent}.{name}={value!r}")
                return False
            clean[name] = value
        self._decisions.append((intent, clean, int(trigger), now))
        return True

    # ------------------------------------------------------------------ key encoding
    def update_key(self, now: float) -> None:
        """Encode the current observation into the key double buffer (key_hz; any thread)."""
        with self._key_lock:
            self._update_key(now)

    def _update_key(self, now: float) -> None:
        obs = self._obs
        intent, stage = self._key_context
        obs.intent, obs.stage = intent, stage
        # joint, IMU, odometry snapshots (own copies: may run outside the tick thread)
        js = {"pos": obs.joint_pos, "vel": obs.joint_vel}
        self._js_buf.read_into(js)
        imu = {"acc": np.empty(3), "gyro": np.empty(3), "speeds": np.empty(2)}
        _, imu_ver = self._imu_buf.read_into(imu)
        if imu_ver == 0:
            imu["acc"][:] = (0.0, 0.0, GRAVITY)
            imu["gyro"][:] = 0.0
            imu["speeds"][:] = 0.0
        obs.imu_acc, obs.imu_gyro = imu["acc"], imu["gyro"]
        obs.imu_speed = float(imu["speeds"][0])
        odom = {"pose": np.empty(3), "twist": np.empty(2)}
        _, odom_ver = self._odom_buf.read_into(odom)
        if odom_ver and self._key_odom_init:
            d = odom["pose"] - self._key_odom_pose
            d[2] = (d[2] + math.pi) % (2 * math.pi) - math.pi
            obs.odom_delta = d
        else:
            obs.odom_delta = np.zeros(3)
        if odom_ver:
            self._key_odom_pose[:] = odom["pose"]
            self._key_odom_init = True
        obs.wheel_speed = float(odom["twist"][0]) if odom_ver else 0.0
        count = self._eff_count
        if count:
            np.divide(self._eff_acc, count, out=obs.effort_mean)
        self._eff_acc[:] = 0.0
        self._eff_count = 0
        if self._vision_buf is not None:
            if self._vision_snap is None or self._vision_snap["v"].size != self._vision_len:
                self._vision_snap = {"v": np.zeros(self._vision_len)}
            self._vision_buf.read_into(self._vision_snap)
            obs.vision = self._vision_snap["v"]
        else:
            obs.vision = None
        key = self.encoder.encode(obs, self._key)
        slipping = getattr(self.encoder, "last_slip_weight", 1.0) < 1.0
        if slipping and not self._slipping:
            self.slip_events += 1
            self.info(f"slip: wheels and IMU disagree (ratio {getattr(self.encoder, 'last_slip_ratio', 0.0):.1f}); "
                      f"odometry down-weighted in the task key")
        self._slipping = slipping
        self._key_buf.write(now, key=key)
        self._last_key_time = now

    # ------------------------------------------------------------------ the tick
    def tick(self, now: float) -> None:
        t0 = time.perf_counter()
        dt = self.period if self._last_tick is None else now - self._last_tick
        if not (0.0 < dt <= 0.1):
            dt = self.period if dt <= 0.0 or not math.isfinite(dt) else 0.1
        self._last_tick = now
        self.tick_count += 1
        self.requests.clear()
        self.sounds.clear()
        cfg = self.cfg
        # 0. mailboxes and snapshots
        zone = self._zone_mailbox
        if zone is not None and zone != self.zone:
            self.zone = zone
            self.threshold = float(cfg.threshold(zone))
        js_time, js_ver = self._js_buf.read_into(self._js)
        self._imu_buf.read_into(self._imu)
        odom_time, odom_ver = self._odom_buf.read_into(self._odom)
        wrench_time, _ = self._wrench_buf.read_into(self._wrench)
        prox_time, prox_ver = self._prox_buf.read_into(self._prox)
        q, qd = self._js["pos"], self._js["vel"]
        self.state_stamp = (int(self._js["hdr"][0]), int(self._js["hdr"][1]))
        state_ok = js_ver > 0 and bool(self._js_seen.all()) and (now - js_time) <= float(cfg["state_timeout_s"])
        while self._decisions:
            self._start_decision(*self._decisions.popleft(), now=now)
        # 1. physical invalidations
        new_hot = self.temperature_monitor.update(self._temperature)
        if new_hot:
            self.derate_count += new_hot
            self.info(f"motor over {self.temperature_monitor.limit:g} C: derated parameter set loaded for "
                      + ", ".join(j for j, h in zip(self.joints, self.temperature_monitor.hot) if h))
        self.execution.set_derated(self.temperature_monitor.hot)
        have_eff = self._js["have_eff"] > 0.5
        if state_ok and have_eff.any():
            self.confidence.update(self._js["eff"], self.effort, have_eff)
            self.execution.set_confidence(self.confidence.confidence)
        if state_ok:
            self._state_ever_ok = True
        elif self._state_ever_ok and not self.execution.failure and self._commanding():
            self.faults.record("joint_state_timeout")
            self._fail(now, "joint states stale")
        # base travel for base_distance sub-tasks
        top = self.stack.top
        if odom_ver and now - odom_time < 0.5:
            pose = self._odom["pose"]
            if self._prev_odom_valid and top is not None:
                top.base_travel += math.hypot(pose[0] - self._prev_odom_pose[0], pose[1] - self._prev_odom_pose[1])
            self._prev_odom_pose[:] = pose
            self._prev_odom_valid = True
        else:
            self._prev_odom_valid = False
            if top is not None:
                top.base_travel += abs(self.cmd_vx) * dt
        # 2. interrupts
        prox = float(self._prox["range"][0]) if prox_ver and now - prox_time <= float(cfg["proximity_timeout_s"]) \
            else math.inf
        self._interrupts(prox, now)
        # 3-5. levels
        t1 = time.perf_counter()
        self._level1(now, state_ok)
        t2 = time.perf_counter()
        tracking = self._level2(now, state_ok)
        self.tracking = tracking
        t3 = time.perf_counter()
        self._level3(now, dt, state_ok, tracking, wrench_time)
        t4 = time.perf_counter()
        self.l1_us = (t2 - t1 + (t1 - t0)) * 1e6
        self.l2_us = (t3 - t2) * 1e6
        self.l3_us = (t4 - t3) * 1e6
        if self.auto_key and now - self._last_key_time >= self.key_period - 1e-9:
            self.update_key(now)

    # ------------------------------------------------------------------ decisions
    def _start_decision(self, intent: str, args: dict, trigger: int, received: float, now: float) -> None:
        ii = self.intent_index[intent]
        pend = self._pending_confirm
        if pend is not None and pend[1] == intent and now - pend[4] <= float(self.cfg["confirm_window_s"]):
            key, _, stage, sub, _ = pend
            self.task_layer.insert(key, sub, ii, stage, seeded=False, now=now)
            self.info(f"task layer: learned the missed scene of {intent}/{self.subtasks[sub].name} "
                      f"(confirmed by a new decision)")
        self._pending_confirm = None
        binding = self.cfg.argument_bindings.get(intent, {})
        fargs = {field: args[name] for name, field in binding.items() if name in args}
        running = self.stack.base()
        if running is not None and running.source == SOURCE_TASK and running.name == intent and \
                running.args == fargs and not self.execution.failure:
            # the reasoning node re-decides at 2 Hz: the same decision confirms the task in
            # progress (or the one just completed), it does not restart it from its first sub-task
            self.repeated_decisions += 1
            return
        frame = Frame(SOURCE_TASK, intent, list(self.sequences[ii]), intent_index=ii, args=fargs)
        if self.execution.failure:
            self.execution.failure = False
            self.pid.reset()
            self.clamp_monitor.reset()
            self.info(f"failure flag cleared by a new decision ({intent})")
        self.stack.set_base(frame)
        self._consecutive_misses = 0
        self.behaviour.invalidate()

    def _commanding(self) -> bool:
        top = self.stack.top
        return top is not None and not top.done

    # ------------------------------------------------------------------ interrupts
    def _interrupts(self, prox: float, now: float) -> None:
        hyst = float(self.cfg["proximity_hysteresis"])
        for i, (name, dist, subs, sound) in enumerate(self.interrupt_specs):
            close = prox < dist
            clear = prox > dist + hyst
            if close and not self._int_latched[i] and not self.execution.failure:
                self._int_latched[i] = True
                prev = self.stack.top
                if prev is not None and prev.started and not prev.needs_resume:
                    prev.phase += now - prev.run_since
                self.stack.push(Frame(SOURCE_INTERRUPT, name, list(subs)))
                self.behaviour.invalidate()
                if sound:
                    self.sounds.append(sound)
                self.info(f"interrupt {name}: person at {prox:.2f} m < {dist:.2f} m")
            elif clear and self._int_latched[i]:
                self._int_latched[i] = False
            for f in self.stack.frames:
                if f.source == SOURCE_INTERRUPT and f.name == name:
                    f.trigger_active = self._int_latched[i]
        # pop settled interrupts from the top whose trigger has cleared
        while True:
            top = self.stack.top
            if top is None or top.source != SOURCE_INTERRUPT or top.trigger_active or not self._settled(top):
                break
            self.stack.pop(top)
            self.behaviour.invalidate()

    def _settled(self, frame: Frame) -> bool:
        return frame.done or self.subtasks[frame.current].done == "never"

    # ------------------------------------------------------------------ level 1
    def _level1(self, now: float, state_ok: bool) -> None:
        top = self.stack.top
        if top is None or top.done or top.source != SOURCE_TASK or top.intent_index < 0 or not state_ok:
            if top is None or top.done:
                self._key_context = ("", 0)
            return
        self._key_context = (top.name, top.index)
        starting = not top.started
        if starting or not self.cache_enabled:
            # a fresh key for this (intent, stage) now
            self.update_key(now)
        _, kver = self._key_buf.read_into(self._key_snap)
        if not starting and self.cache_enabled and kver == self._key_version_seen:
            return  # no new key: the task-layer result of the last match stands
        self._key_version_seen = kver
        key = self._key_snap["key"]
        hit, best, sim = self.task_layer.match(key, self.threshold, now)
        self.match_similarity = sim
        self.l1_hit = hit
        ptr = int(self.task_layer.pointer[best]) if best >= 0 else -1
        if hit and self.task_layer.intent[best] == top.intent_index:
            self._consecutive_misses = 0
            if starting:
                stage = int(self.task_layer.stage[best])
                if stage != top.index and 0 <= stage < len(top.subtasks) and top.subtasks[stage] == ptr:
                    top.index = stage  # the cache points at another stage of this task
                top.matched_sim = sim
                top.start_key = key.copy()
            return
        self._consecutive_misses += 1
        if starting or self._consecutive_misses >= int(self.cfg["miss_confirmations"]):
            self._unknown_scene(now, top, key, sim)

    def _unknown_scene(self, now: float, frame: Frame, key: np.ndarray, sim: float, why: str = "") -> None:
        sub = frame.current
        self.unknown_scene_count += 1
        self._pending_confirm = (key.copy(), frame.name, frame.index, sub, now)
        detail = why or f"similarity={sim:.3f} < {self.threshold:.2f}"
        reason = (f"{self.unknown_request} (intent={frame.name}, sub_task={self.subtasks[sub].name}, "
                  f"{detail}, zone={self.zone})")
        self.requests.append(reason)
        self.info(reason)
        self.stack.set_base(Frame(SOURCE_UNKNOWN_SCENE, "unknown_scene", list(self.unknown_subtasks)))
        self._consecutive_misses = 0
        self.behaviour.invalidate()

    # ------------------------------------------------------------------ level 2
    def _level2(self, now: float, state_ok: bool) -> bool:
        """Reference for this tick into p_ref/v_ref; False when nothing is tracked."""
        self.l2_hit = False
        top = self.stack.top
        if top is None or top.done or not state_ok or self.execution.failure:
            return False
        st = self.subtasks[top.current]
        if not top.started:
            top.started = True
            top.needs_resume = False
            top.phase = 0.0
            top.run_since = now
            top.start_time = now
            top.base_travel = 0.0
            self.grip.reset()
            tpl = st.template
            st.template.anchor(self._js["pos"], self.behaviour.anchored[:tpl.ctrl.shape[0]])
            self.behaviour.n_ctrl = tpl.ctrl.shape[0]
            self.behaviour.subtask = st.index
            self.execution.set_torque_limit(st.torque_limit)
            if st.zero_effort:
                self._zero_from[:] = self.effort
                self._zero_t0 = now
            self.behaviour.invalidate()
        elif top.needs_resume:
            top.needs_resume = False
            top.run_since = now
            self.grip.reset()
            self.execution.set_torque_limit(st.torque_limit)
            if st.zero_effort:
                self._zero_from[:] = self.effort
                self._zero_t0 = now
            if self.behaviour.subtask != st.index:
                # the behaviour layer held another sub-task meanwhile: re-anchor at the current pose
                tpl = st.template
                tpl.anchor(self._js["pos"], self.behaviour.anchored[:tpl.ctrl.shape[0]])
                self.behaviour.n_ctrl = tpl.ctrl.shape[0]
                self.behaviour.subtask = st.index
            self.behaviour.invalidate()
        if st.zero_effort:
            return False
        tau = top.phase + (now - top.run_since)
        bl = self.behaviour
        pl = self.planner
        tpl = st.template
        anchored = bl.anchored[:bl.n_ctrl]
        look = now + self.period
        bl.lookups += 1
        if not self.cache_enabled:
            self._plan_stateless(tau, tpl, anchored)
            return True
        if self.cache_enabled and bl.valid and look < bl.seg_t0 + pl.horizon:
            bl.hits += 1
            self.l2_hit = True
        elif self.cache_enabled and bl.valid and look < bl.seg_t0 + 2 * pl.horizon:
            # chain the next segment: exact junction with the previous one
            bl.seg_t0 += pl.horizon
            bl.seg_k0 += pl.samples
            pl.plan(tpl, anchored, bl.seg_k0, bl.seg_t0 - bl.blend_t0, bl.e0, bl.ev0)
        else:
            self._replan_from_state(now, tau, tpl, anchored)
        k = int((look - bl.seg_t0) / pl.ds)
        k = 0 if k < 0 else (pl.samples if k > pl.samples else k)
        self.p_ref[:] = pl.pos[k]
        self.v_ref[:] = pl.vel[k]
        err = np.abs(self.p_ref - self._js["pos"])
        if st.hold_mask.any():
            err[st.hold_mask] = 0.0  # effort-held joints (gripper closed on an object) do not track
        if self.cache_enabled and float(err.max()) > float(self.cfg["replan_error"]):
            self._replan_from_state(now, tau, tpl, anchored)
            self.l2_hit = False
            k = min(int(self.period / pl.ds), pl.samples)
            self.p_ref[:] = pl.pos[k]
            self.v_ref[:] = pl.vel[k]
        return True

    def _replan_from_state(self, now: float, tau: float, tpl: Template, anchored: np.ndarray) -> None:
        bl = self.behaviour
        pl = self.planner
        k0 = int(round(tau / pl.ds))
        p0, v0 = pl.template_state(tpl, anchored, k0)
        q = np.clip(self._js["pos"], self.q_min, self.q_max)
        qd = np.clip(self._js["vel"], -self.v_max, self.v_max)
        np.subtract(q, p0, out=bl.e0)
        np.subtract(qd, v0, out=bl.ev0)
        bl.blend_t0 = now
        bl.seg_t0 = now
        bl.seg_k0 = k0
        pl.plan(tpl, anchored, k0, 0.0, bl.e0, bl.ev0)
        bl.valid = True

    def _plan_stateless(self, tau: float, tpl: Template, anchored: np.ndarray) -> None:
        """Level 2 with the cache disabled: this tick's reference from scratch, nothing reused.

        A fresh segment of ``samples`` points over ``horizon`` seconds from the measured (q, qd) to
        the template's state at tau + horizon (template + Hermite blend whose blend time is the
        horizon itself), sampled one control period ahead. No previous segment, junction or blend
        enters: the reference is a function of this tick's measurement, the sub-task clock tau and
        the sub-task's anchored template only. The behaviour layer's segment/blend fields are not
        read or written (its hit count stays 0).
        """
        pl = self.fresh_planner
        k0 = int(round(tau / pl.ds))
        p0, v0 = pl.template_state(tpl, anchored, k0)
        q = np.clip(self._js["pos"], self.q_min, self.q_max)
        qd = np.clip(self._js["vel"], -self.v_max, self.v_max)
        pl.plan(tpl, anchored, k0, 0.0, q - p0, qd - v0)
        k = min(int(round(self.period / pl.ds)), pl.samples)
        self.p_ref[:] = pl.pos[k]
        self.v_ref[:] = pl.vel[k]

    # ------------------------------------------------------------------ level 3
    def _fail(self, now: float, why: str) -> None:
        ex = self.execution
        ex.failure = True
        self.failsafe_count += 1
        self._ramp_from[:] = self.effort
        self._ramp_base_from[:] = (self.cmd_vx, self.cmd_wz)
        self._ramp_t0 = now
        self.pid.reset()
        self.clamp_monitor.reset()
        self.stack.set_base(None)
        self.stack.frames.clear()
        self._int_latched = [False] * len(self.interrupt_specs)
        self.behaviour.invalidate()
        self.info(f"failure flag set ({why}): interpolating to the safe-stop set over "
                  f"{float(self.cfg['failsafe_ramp_s']):g} s")

    def _level3(self, now: float, dt: float, state_ok: bool, tracking: bool, wrench_time: float) -> None:
        ex = self.execution
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
        top = self.stack.top
        sources = self.arbiter.assign(top, ex.failure)
        src = sources["arm"]
        eff = self.effort
        ramp_s = max(float(self.cfg["failsafe_ramp_s"]), 1e-9)
        self.l3_clamped = False
        if ex.failure:
            a = min(1.0, (now - self._ramp_t0) / ramp_s)
            np.multiply(self._ramp_from, 1.0 - a, out=eff)  # safe-stop set: effort 0
            self.cmd_vx = self._ramp_base_from[0] * (1.0 - a)
            self.cmd_wz = self._ramp_base_from[1] * (1.0 - a)
            self.clamped[:] = False
            self.execution_state = EXEC_FAILSAFE if a < 1.0 else EXEC_STOPPED
        elif src == SOURCE_NONE or not state_ok:
            eff[:] = 0.0
            self.cmd_vx = self.cmd_wz = 0.0
            self.clamped[:] = False
            self.execution_state = EXEC_STOPPED
            if not state_ok:
                src = SOURCE_NONE
                for g in sources:
                    sources[g] = SOURCE_NONE
        else:
            st = self.subtasks[top.current]
            speed = top.args.get("base_speed")
            vx = math.copysign(float(speed), st.base_vx) if speed is not None and st.base_vx else st.base_vx
            self.cmd_vx = min(max(vx, -float(self.cfg["base_max_linear"])), float(self.cfg["base_max_linear"]))
            self.cmd_wz = min(max(st.base_wz, -float(self.cfg["base_max_angular"])), float(self.cfg["base_max_angular"]))
            if st.zero_effort:
                a = min(1.0, (now - self._zero_t0) / ramp_s)
                np.multiply(self._zero_from, 1.0 - a, out=eff)
                self.clamped[:] = False
                self.cmd_vx = self.cmd_wz = 0.0
            else:
                e = self.p_ref - self._js["pos"]
                ed = self.v_ref - self._js["vel"]
                u = self.pid.compute(e, ed, dt)
                eff[:] = u
                if st.hold_mask.any():
                    eff[st.hold_mask] = st.hold_effort[st.hold_mask]
                    self.clamped[:] = self.pid.clamped & ~st.hold_mask
                else:
                    self.clamped[:] = self.pid.clamped
                self.l3_clamped = bool(self.clamped.any())
                if self.clamp_monitor.update(self.clamped, now):
                    self._fail(now, "effort clamped for " + f"{self.clamp_monitor.persist:g} s on "
                               + ", ".join(j for j, c in zip(self.joints, self.clamped) if c))
                    src = SOURCE_SAFE_STOP
                    np.multiply(self._ramp_from, 1.0, out=eff)
            if not ex.failure:
                self.execution_state = EXEC_DERATED if ex.derated_mask.any() else EXEC_NOMINAL
                if st.zero_effort and (now - self._zero_t0) >= ramp_s:
                    self.execution_state = EXEC_STOPPED
            else:
                self.execution_state = EXEC_FAILSAFE
        # the last line of defence: finite and within the limit, whatever happened above
        np.clip(eff, -limit, limit, out=eff)
        if not np.all(np.isfinite(eff)):
            np.nan_to_num(eff, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
        if not (math.isfinite(self.cmd_vx) and math.isfinite(self.cmd_wz)):
            self.cmd_vx = self.cmd_wz = 0.0
        self.effort_limit[:] = limit
        self.source = src
        for g in sources:   # one source per actuator group, whatever changed during the tick
            sources[g] = src
        with self._key_lock:
            self._eff_acc += np.abs(eff) / np.maximum(limit, 1e-9)
            self._eff_count += 1
        # sub-task progress (after the command: completion takes effect next tick)
        if not ex.failure and src in (SOURCE_TASK, SOURCE_INTERRUPT, SOURCE_UNKNOWN_SCENE) and state_ok:
            self._progress(top, now, wrench_time)
        top = self.stack.top
        if top is not None and not top.done:
            self.active_sub_task = self.subtasks[top.current].name
            base = self.stack.base()
            self.active_intent = base.name if base is not None and base.source == SOURCE_TASK else ""
        else:
            self.active_sub_task = ""
            base = self.stack.base()
            self.active_intent = ""

    def _progress(self, frame: Frame, now: float, wrench_time: float) -> None:
        st = self.subtasks[frame.current]
        tau = frame.phase + (now - frame.run_since)
        done = False
        if st.done == "trajectory":
            if tau >= st.template.duration:
                final = self.planner.template_state(st.template, self.behaviour.anchored[:self.behaviour.n_ctrl],
                                                    st.final_rows)[0]
                err = np.abs(final - self._js["pos"])[st.template.defined & ~st.hold_mask]
                done = err.size == 0 or float(err.max()) <= float(self.cfg["settle_tolerance"])
        elif st.done == "grip":
            force = float(self._wrench["force"][0]) if now - wrench_time <= 0.1 else 0.0
            if self.grip.update(force, now):
                done = True
                self.grip_done_count += 1
                self.info(f"grip held > {self.grip.threshold:g} N for {self.grip.dwell:g} s: {st.name} done")
        elif st.done == "base_distance":
            dist = frame.args.get("base_distance", st.base_distance)
            done = frame.base_travel >= float(dist)
        if not done and now - frame.start_time > st.timeout:
            if frame.source == SOURCE_TASK:
                self.info(f"sub-task {st.name} timed out after {st.timeout:g} s")
                self._unknown_scene(now, frame, self._key_snap["key"], self.match_similarity,
                                    why=f"sub-task timed out after {st.timeout:g} s")
                return
            done = True
        if done:
            self.subtasks_completed += 1
            if frame.source == SOURCE_TASK and frame.start_key is not None \
                    and frame.matched_sim < float(self.cfg["learn_below"]):
                self.task_layer.insert(frame.start_key, st.index, frame.intent_index, frame.index, now=now)
            frame.advance()
            self.behaviour.invalidate()
            if frame.done and frame.source == SOURCE_TASK:
                self.info(f"task {frame.name} complete")
                if bool(self.cfg["idle_hold"]):
                    hold = Frame(SOURCE_TASK, "", [self.subtask_index["hold"]]) if "hold" in self.subtask_index \
                        else None
                    if hold is not None:
                        hold.intent_index = -1
                    self.stack.set_base(hold)
                    if hold is not None:
                        hold.needs_resume = False
                else:
                    self.stack.set_base(None)
            elif frame.done and frame.source == SOURCE_UNKNOWN_SCENE:
                self.stack.set_base(None)

    # ------------------------------------------------------------------ status
    def status(self) -> dict:
        return {
            "active_intent": self.active_intent, "active_sub_task": self.active_sub_task, "zone": self.zone,
            "match_similarity": float(self.match_similarity), "match_threshold": float(self.threshold),
            "l1_hit": bool(self.l1_hit), "l2_hit": bool(self.l2_hit), "l3_clamped": bool(self.l3_clamped),
            "l1_us": float(self.l1_us), "l2_us": float(self.l2_us), "l3_us": float(self.l3_us),
            "task_hit_rate": self.task_layer.hit_rate, "behaviour_hit_rate": self.behaviour.hit_rate,
            "execution_hit_rate": self.execution.hit_rate, "interrupt_depth": self.stack.depth,
            "execution_state": int(self.execution_state), "unknown_scene_count": self.unknown_scene_count,
            "grip_done_count": self.grip_done_count, "derate_count": self.derate_count,
            "confidence_flips": self.confidence.flips, "failsafe_count": self.failsafe_count,
            "input_faults": self.faults.total,
            "slip_detected": bool(getattr(self.encoder, "last_slip_weight", 1.0) < 1.0),
            "slip_events": self.slip_events,
            "odom_weight": float(getattr(self.encoder, "last_slip_weight", 1.0)),
        }
