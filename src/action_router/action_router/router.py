"""The router's tick: sensor snapshots in, one ``Command`` per tick out (plain module, no rclpy).

Per tick (``Router.tick(now)``):
  0. drain decisions and the zone request; snapshot the inputs (``inputs.py``);
  1. physical invalidations (``monitors.py``): temperature -> derated set, effort feedback ->
     confidence bit, stale joint states -> failure;
  2. interrupts: proximity pushes / pops frames of the priority stack (``interrupts.py``);
  3. level 1 (``level1.py``, ``variants.py``): at a task's start the camera's scene picks the
     intent's variant (its sub-task sequence); a new key (``task_key.py``) of the running task
     frame is matched in the task layer; a miss runs the unknown-scene protocol and asks for a
     new decision;
  4. level 2 (``level2.py``): the behaviour layer serves or re-plans the reference; a (re)started
     sub-task's torque limits go into the execution layer;
  5. level 3 (``level3.py``): PID, clamp, fail-safe ramp, the base twist (the go-to-pose controller,
     ``go_to_pose.py``, for a ``zone_reached`` sub-task); then sub-task progress (``subtask.py``).

A decision's arguments are resolved when it starts (``decision_args.py``): a zone becomes the
go-to-pose goal, an object the reach target where the scene has it (``scene.py``); a decision
naming an object that is missing or out of reach is refused with one log line and a decision
request, and what runs stays unchanged.

Each level takes its inputs explicitly and returns a small frozen result; this module wires them
and owns the stack, the execution layer and the counters. The key step gets last cycle's effort
mean through an ``EffortAccumulator`` the tick fills from level 3's command.
"""
from __future__ import annotations

import math
import time
from typing import Callable, Dict, List, Optional, Tuple, cast

import numpy as np

from .cache import ExecutionLayer, ExecutionSet
from .decision_args import bound_fields, resolve_arguments
from .encoder import KEY_DIM, EncoderConfig, KeyEncoder, ProjectionKeyEncoder
from .go_to_pose import STOP, BaseTwist, GoToPoseConfig, go_to_pose
from .identity import robot_identity
from .inputs import QueuedDecision, RouterInputs, make_fault_log
from .interrupts import (SOURCE_INTERRUPT, SOURCE_TASK, SOURCE_UNKNOWN_SCENE, Arbiter, Frame,
                         InterruptSpec, InterruptStack, ProximityInterrupts)
from .level1 import NO_MATCH, Level1, Level1Result, UnknownScene
from .level2 import Level2
from .level3 import EXEC_DERATED, EXEC_FAILSAFE, EXEC_NOMINAL, EXEC_STOPPED, Level3  # noqa: F401 - re-exported
from .monitors import BaseTravel, ConfidenceMonitor, DecisionWatchdog, GripMonitor, TemperatureMonitor
from .outputs import Command, RouterStatusSnapshot, build_command, status_snapshot
from .params import RouterConfig, make_config
from .scene import SceneFrames
from .subtask import SubTask, check_progress
from .task_key import EffortAccumulator, KeyUpdate, TaskKeyStep
from .task_store import open_store
from .variants import SceneLookup, scene_frames

COMMANDING = (SOURCE_TASK, SOURCE_INTERRUPT, SOURCE_UNKNOWN_SCENE)


def pose_tuple(pose: np.ndarray) -> Tuple[float, float, float]:
    return float(pose[0]), float(pose[1]), float(pose[2])


class Router:
    """Three-level action router over the three-layer cache."""

    def __init__(self, config: Optional[RouterConfig] = None, *, auto_key: bool = True,
                 encoder: Optional[KeyEncoder] = None, fault_report: Optional[Callable[[str], None]] = None,
                 info_report: Optional[Callable[[str], None]] = None, namespace: str = ""):
        self.cfg = cfg = config if config is not None else make_config()
        self.joints = list(cfg.joints)
        self.n = n = len(self.joints)
        self.joint_index = {j: i for i, j in enumerate(self.joints)}
        self.period = 1.0 / float(cfg["control_hz"])
        self.key_period = 1.0 / float(cfg["key_hz"])
        self.cache_enabled = bool(cfg["cache_enabled"])
        self.auto_key = auto_key
        self.info = info_report or (lambda text: None)
        self.faults = make_fault_log(fault_report)
        self.effort_max = np.array(cfg["effort_max"], dtype=float)
        q_min, q_max = np.array(cfg["position_min"], dtype=float), np.array(cfg["position_max"], dtype=float)
        v_max = np.array(cfg["velocity_max"], dtype=float)
        self.subtasks: List[SubTask] = []
        self.subtask_index: Dict[str, int] = {}
        for name, spec in cfg.subtasks.items():
            st = SubTask(len(self.subtasks), name, dict(spec or {}), self.joints, cfg)
            self.subtask_index[name] = st.index
            self.subtasks.append(st)
        self.intent_names = list(cfg.intent_sequences)
        self.intent_index = {name: i for i, name in enumerate(self.intent_names)}
        self.sequences = [[self.subtask_index[s] for s in cfg.intent_sequences[i]] for i in self.intent_names]
        zones = {z.name: z.threshold for z in cfg.zones.values()}
        self.scene_frames = SceneFrames(str(cfg["base_frame"]), str(cfg["odom_frame"]),
                                        float(cfg["scene_timeout_s"]))
        self.inputs = RouterInputs(self.joints, cfg.catalogue, zones, float(cfg["slip_speed_tau"]), self.faults,
                                   (self.scene_frames.base, self.scene_frames.odom), float(cfg["decision_delay_s"]))
        # sensor setters and decisions are the inputs' own (any thread)
        inp = self.inputs
        self.set_joint_state, self.set_imu, self.set_odom = inp.set_joint_state, inp.set_imu, inp.set_odom
        self.set_wrench, self.set_temperature, self.set_objects = inp.set_wrench, inp.set_temperature, inp.set_objects
        self.set_vision, self.set_zone, self.submit_decision = inp.set_vision, inp.set_zone, inp.submit_decision
        self.set_proximity = inp.set_proximity
        self.go_to_pose_config = GoToPoseConfig(
            float(cfg["base_max_linear"]), float(cfg["base_max_angular"]), float(cfg["goal_tolerance"]),
            float(cfg["goal_yaw_tolerance"]), float(cfg["goal_slow_radius"]), float(cfg["goal_min_speed"]),
            float(cfg["goal_heading_gain"]), float(cfg["goal_turn_in_place"]))
        self.robot_id = robot_identity(str(cfg["robot_id"]), namespace)
        self.encoder = encoder or ProjectionKeyEncoder(EncoderConfig(
            robot_id=self.robot_id, n_joints=n, id_share=float(cfg["id_share"]),
            slip_ratio=float(cfg["slip_ratio"]), slip_min_weight=float(cfg["slip_min_weight"])))
        if cfg["encoder_weights_file"] and hasattr(self.encoder, "load_weights"):
            self.encoder.load_weights(str(cfg["encoder_weights_file"]))
        if hasattr(self.encoder, "set_scene_frames"):
            self.encoder.set_scene_frames(scene_frames(cfg.variants, cfg.scene_prototypes))
        self.key_step = TaskKeyStep(self.encoder, n, float(cfg["vision_timeout_s"]))
        self.efforts = EffortAccumulator(n)
        self.level1 = Level1(self.subtasks, [self.subtask_index[s] for s in cfg.unknown_scene["subtasks"]],
                             str(cfg.unknown_scene.get("request", "unknown scene: new decision needed")),
                             int(cfg["task_capacity"]), int(cfg["miss_confirmations"]),
                             float(cfg["confirm_window_s"]), float(cfg["learn_below"]))
        self.level1.task_layer.isolation = bool(cfg["task_isolation"])
        self.store = open_store(str(cfg["task_store"]), float(cfg["task_store_poll_s"]), self.info)
        self.scenes = SceneLookup(self.level1.task_layer, self.intent_names, cfg.variants, self.robot_id, self.store)
        self.level2 = Level2(n, max(st.template.ctrl.shape[0] for st in self.subtasks), period=self.period,
                             horizon_s=float(cfg["horizon_s"]), samples=int(cfg["samples"]),
                             blend_s=float(cfg["blend_s"]), q_min=q_min, q_max=q_max, v_max=v_max,
                             cache_enabled=self.cache_enabled, replan_error=float(cfg["replan_error"]))
        gains = [cfg.gains[j] for j in self.joints]
        self.level3 = Level3(self.joints, gains, self.effort_max, cache_enabled=self.cache_enabled,
                             failsafe_ramp_s=float(cfg["failsafe_ramp_s"]),
                             clamp_persist_s=float(cfg["failsafe_clamp_persist_s"]),
                             base_max_linear=float(cfg["base_max_linear"]),
                             base_max_angular=float(cfg["base_max_angular"]))
        self.execution = ExecutionLayer(ExecutionSet(gains, self.effort_max.copy()),
                                        float(cfg["derate_gain_scale"]), float(cfg["derate_limit_scale"]),
                                        float(cfg["low_confidence_limit_scale"]))
        self.grip = GripMonitor(float(cfg["grip_force_threshold"]), float(cfg["grip_dwell_s"]))
        self.temperature_monitor = TemperatureMonitor(n, float(cfg["temperature_limit"]),
                                                      float(cfg["temperature_hysteresis"]))
        self.confidence = ConfidenceMonitor(n, float(cfg["confidence_abs_tol"]), float(cfg["confidence_rel_tol"]),
                                            int(cfg["confidence_dwell_ticks"]))
        self.stack = InterruptStack()
        self.arbiter = Arbiter()
        specs = []
        for name, spec in cfg.interrupts.items():
            dist = spec.get("distance")
            if dist is None:
                dist = cfg[spec.get("distance_param", "person_distance")]
            specs.append(InterruptSpec(name, float(dist), tuple(self.subtask_index[s] for s in spec["subtasks"]),
                                       str(spec.get("sound", ""))))
        self.interrupts = ProximityInterrupts(specs, float(cfg["proximity_hysteresis"]))
        self.zone = str(cfg["zone"])
        if self.zone not in zones:
            raise ValueError(f"zone {self.zone!r} has no threshold (zones: {sorted(zones)})")
        self.threshold = zones[self.zone]
        self._zones = zones
        self._key_context: Tuple[str, int] = ("", 0)   # (intent, stage) the tick publishes for the key step
        self._key_snap = np.zeros(KEY_DIM)
        self._last_tick: Optional[float] = None
        self.base_travel = BaseTravel()
        self._state_ever_ok = False
        self.decision_watchdog = DecisionWatchdog(float(cfg["decision_timeout_s"]))
        self.repeated_decisions = 0
        self.subtasks_completed = 0
        self.grip_done_count = 0
        self.derate_count = 0
        self.failsafe_count = 0
        self.refused_decisions = 0
        self._last_refusal = ""
        self._requests: List[str] = []
        self._sounds: List[str] = []
        self._last_done: Optional[Tuple[str, dict, str, List[int]]] = None   # task just completed
        self.command = self._command(NO_MATCH.hit, False, False, False, (0.0, 0.0, 0.0), (0, 0))
        self.level1.seed(self.encoder, self.intent_names, self.sequences, self.key_period, n)
        self.scenes.seed(self.encoder, cfg.scene_prototypes, n, self.subtask_index)
        for intent, names in cfg.unused_arguments.items():
            for name in names:
                self.info(f"argument {intent}.{name} is accepted but not used by the router")

    # ------------------------------------------------------------------ key step (any thread)
    def update_key(self, now: float) -> KeyUpdate:
        """Encode the current observation into the key buffer (key_hz; any thread)."""
        update = self.key_step.update(now, self.inputs, self.efforts, self._key_context)
        if update.slip_started:
            self.info(f"slip: wheels and IMU disagree (ratio {update.slip_ratio:.1f}); "
                      f"odometry down-weighted in the task key")
        return update

    # ------------------------------------------------------------------ the tick
    def tick(self, now: float) -> Command:
        t0 = time.perf_counter()
        dt = self.period if self._last_tick is None else now - self._last_tick
        if not (0.0 < dt <= 0.1):
            dt = self.period if dt <= 0.0 or not math.isfinite(dt) else 0.1
        self._last_tick = now
        self._requests = []
        self._sounds = []
        # 0. mailboxes and snapshots
        zone = self.inputs.zone_request
        if zone is not None and zone != self.zone:
            self.zone = zone
            self.threshold = self._zones[zone]
        snap = self.inputs.snapshot()
        if self.store is not None:
            self.scenes.drain()
        state_ok = snap.state_version > 0 and snap.all_joints_seen \
            and (now - snap.state_time) <= float(self.cfg["state_timeout_s"])
        for decision in self.inputs.take_decisions(now):
            self.decision_watchdog.decided(now)
            self._start_decision(decision, now, snap.odom_pose)
        if self.decision_watchdog.lost(now) and self._commanding() and not self.execution.failure:
            self._fail(now, f"no decision for {self.decision_watchdog.timeout_s:g} s: reasoning node lost?")
        # 1. physical invalidations
        new_hot = self.temperature_monitor.update(snap.temperature)
        if new_hot:
            self.derate_count += new_hot
            self.info(f"motor over {self.temperature_monitor.limit:g} C: derated parameter set loaded for "
                      + ", ".join(j for j, h in zip(self.joints, self.temperature_monitor.hot) if h))
        self.execution.set_derated(self.temperature_monitor.hot)
        if state_ok and snap.have_effort.any():
            self.confidence.update(snap.joint_effort, self.level3.effort, snap.have_effort)
            self.execution.set_confidence(self.confidence.confidence)
        if state_ok:
            self._state_ever_ok = True
        elif self._state_ever_ok and not self.execution.failure and self._commanding():
            self.faults.record("joint_state_timeout")
            self._fail(now, "joint states stale")
        moved = self.base_travel.step(now, dt, snap.odom_pose, snap.odom_time, snap.odom_version, self.level3.base_vx)
        if self.stack.top is not None:
            self.stack.top.base_travel += moved
        # 2. interrupts
        fresh = snap.proximity_version and now - snap.proximity_time <= float(self.cfg["proximity_timeout_s"])
        update = self.interrupts.update(snap.proximity if fresh else math.inf, now, self.stack,
                                        self.execution.failure, self._settled)
        self._sounds.extend(update.sounds)
        for line in update.messages:
            self.info(line)
        if update.changed:
            self.level2.invalidate()
        # 3. level 1
        self._level1(now, state_ok, snap.odom_pose)
        # 4. level 2
        t2 = time.perf_counter()
        top = self.stack.top
        st = self.subtasks[top.current] if top is not None and not top.done else None
        tracking = l2_hit = False
        if top is not None and st is not None and state_ok and not self.execution.failure:
            l2 = self.level2.step(now, top, st, snap.joint_pos, snap.joint_vel)
            tracking, l2_hit = l2.tracking, l2.hit
            if l2.restarted:
                self.grip.reset()
                self.execution.set_torque_limit(st.torque_limit)
                if st.zero_effort:
                    self.level3.start_zero_ramp(now)
        # 5. level 3, then sub-task progress (completion takes effect next tick)
        t3 = time.perf_counter()
        source = self.arbiter.assign(top, self.execution.failure)["arm"]
        base = self._base_goal_twist(now, top, st, snap.odom_pose, snap.odom_time, snap.odom_version)
        l3 = self.level3.step(now, dt, self.execution, source, state_ok, top, st, self.level2.p_ref,
                              self.level2.v_ref, snap.joint_pos, snap.joint_vel, base)
        if l3.failure:
            self._after_failure(l3.failure)
        for group in self.arbiter.sources:   # one source per actuator group, whatever changed in the tick
            self.arbiter.sources[group] = l3.source
        self.efforts.add(l3.effort, l3.effort_limit)
        if top is not None and not self.execution.failure and l3.source in COMMANDING and state_ok:
            force = snap.grip_force if now - snap.wrench_time <= 0.1 else 0.0
            self._progress(top, now, snap.joint_pos, force, base is not None and base.reached)
        t4 = time.perf_counter()
        timings = ((t2 - t0) * 1e6, (t3 - t2) * 1e6, (t4 - t3) * 1e6)   # level 1 includes stages 0-2
        self.command = self._command(self.level1.hit, l2_hit, l3.clamped_any, tracking, timings, snap.state_stamp)
        if self.auto_key and now - self.key_step.last_time >= self.key_period - 1e-9:
            self.update_key(now)
        return self.command

    def _command(self, l1_hit: bool, l2_hit: bool, l3_clamped: bool, tracking: bool,
                 timings: Tuple[float, float, float], stamp: Tuple[int, int]) -> Command:
        return build_command(self, (l1_hit, l2_hit, l3_clamped, tracking), timings, stamp)

    def close(self) -> None:
        """Write what the shared task store still holds queued and stop its thread."""
        if self.store is not None:
            self.store.close()

    def zero_output(self) -> None:
        """Zero effort was sent to the actuators outside the tick (router deactivated)."""
        self.level3.zero_output()

    # ------------------------------------------------------------------ decisions
    def _start_decision(self, decision: QueuedDecision, now: float, odom_pose: np.ndarray) -> None:
        intent = decision.intent
        ii = self.intent_index[intent]
        for learned in (self.level1.decision_arrived(intent, ii, now),
                        self.scenes.confirm(intent, now, float(self.cfg["confirm_window_s"]))):
            if learned:
                self.info(learned)
        binding = self.cfg.argument_bindings.get(intent, {})
        fields = bound_fields(decision.arguments, binding)
        running = self.stack.base()
        if running is not None and running.source == SOURCE_TASK and running.name == intent and \
                running.args == fields and not self.execution.failure:
            # the reasoning node re-decides at 2 Hz: the same decision confirms the task in
            # progress (or the one just completed), it does not restart it from its first sub-task
            # (nor re-checks the scene: a lifted object has left its reach target)
            self.repeated_decisions += 1
            return
        resolved = resolve_arguments(decision.arguments, binding, zones=self.cfg.zones, scene=self.inputs.scene,
                                     now=now, targets=self.cfg.reach_targets, frames=self.scene_frames,
                                     odom_pose=pose_tuple(odom_pose))
        if resolved.refusal:
            self._refuse(intent, resolved.refusal)
            return
        self._last_refusal = ""
        sequence = [self.subtask_index[s] for s in resolved.subtasks] if resolved.subtasks else self.sequences[ii]
        frame = Frame(SOURCE_TASK, intent, list(sequence), intent_index=ii, args=fields,
                      decided=dict(decision.arguments))
        if self._last_done is not None and self._last_done[:2] != (intent, fields):
            self._last_done = None
        if self.execution.failure:
            self.execution.failure = False
            self.level3.rearm()
            self.info(f"failure flag cleared by a new decision ({intent})")
        self.stack.set_task(frame, self.cfg.catalogue)
        self.level1.reset_misses()
        self.level2.invalidate()

    def _refuse(self, intent: str, reason: str) -> None:
        """One log line and one decision request per refusal; the same refusal repeated stays quiet."""
        self.refused_decisions += 1
        if reason == self._last_refusal:
            return
        self._last_refusal = reason
        self.info(f"decision {intent} refused: {reason}; what runs is unchanged")
        self._requests.append(reason)

    def _base_goal_twist(self, now: float, frame: Optional[Frame], st: Optional[SubTask], odom_pose: np.ndarray,
                         odom_time: float, odom_version: int) -> Optional[BaseTwist]:
        """The go-to-pose twist of a running zone_reached sub-task (stopped on stale odometry)."""
        if frame is None or st is None or st.done != "zone_reached":
            return None
        zone = self.cfg.zones.get(str(frame.args.get("base_goal", "")))
        if zone is None or zone.goal is None or odom_version == 0 \
                or now - odom_time > float(self.cfg["odom_timeout_s"]):
            return STOP
        speed = float(cast(float, frame.args.get("base_speed", abs(st.base_vx))))
        return go_to_pose(pose_tuple(odom_pose), zone.goal, speed, self.go_to_pose_config)

    def _commanding(self) -> bool:
        top = self.stack.top
        return top is not None and not top.done

    def _settled(self, frame: Frame) -> bool:
        return frame.done or self.subtasks[frame.current].done == "never"

    # ------------------------------------------------------------------ failure
    def _fail(self, now: float, why: str) -> None:
        self.execution.failure = True
        self.level3.begin_failsafe(now)
        self._after_failure(why)

    def _after_failure(self, why: str) -> None:
        """The failure flag was set (level 3 ramps): no task, no interrupt, nothing cached."""
        self.failsafe_count += 1
        self.stack.set_base(None)
        self.stack.frames.clear()
        self.interrupts.reset()
        self.level2.invalidate()
        self.info(f"failure flag set ({why}): interpolating to the safe-stop set over "
                  f"{float(self.cfg['failsafe_ramp_s']):g} s")

    # ------------------------------------------------------------------ level 1
    def _level1(self, now: float, state_ok: bool, odom_pose: np.ndarray) -> Level1Result:
        top = self.stack.top
        if top is None or top.done:
            self._key_context = ("", 0)
            return NO_MATCH
        if top.source != SOURCE_TASK or top.intent_index < 0 or not state_ok:
            return NO_MATCH
        self._key_context = (top.name, top.index)
        starting = not top.started
        if starting or not self.cache_enabled:
            self.update_key(now)   # a fresh key for this (intent, stage) now
        version = self.key_step.read_latest(self._key_snap)
        if starting and not top.scene_checked and top.index == 0 and self.scenes.has_variants(top.name):
            top.scene_checked = True
            redo = self._last_done
            if redo is not None and redo[:2] == (top.name, top.args):
                top.variant, top.subtasks = redo[2], list(redo[3])   # decided again: its result is no new scene
            elif self.key_step.vision_fresh and not self._scene_lookup(now, top, odom_pose):
                return NO_MATCH
        result = self.level1.step(now, top, self._key_snap, version, starting, self.cache_enabled,
                                  self.threshold, self.zone)
        if result.unknown_scene is not None:
            self._run_unknown_scene(result.unknown_scene)
        return result

    def _scene_lookup(self, now: float, top: Frame, odom_pose: np.ndarray) -> bool:
        """The variant of a starting task from the scene; False: the unknown-scene protocol runs."""
        res = self.scenes.lookup(top.name, self._key_snap, self.threshold, now)
        self.level1.similarity, self.level1.hit = res.similarity, res.hit
        if res.variant is not None:
            top.subtasks = [self.subtask_index[s] for s in res.variant.subtasks]
            top.variant = res.variant.name
            self.info(f"scene: {top.name} -> variant {res.variant.name} (similarity {res.similarity:.3f})")
            return True
        self.scenes.record_unknown(top.name, self._key_snap, odom_pose, self.zone, now, res.entry if res.mapped else -1)
        detail = res.mapped or f"scene similarity={res.similarity:.3f} < {self.threshold:.2f}"
        self._run_unknown_scene(self.level1.unknown_scene(now, top, self._key_snap, detail, self.zone))
        return False

    def _run_unknown_scene(self, unknown: UnknownScene) -> None:
        self._requests.append(unknown.request)
        self.info(unknown.request)
        self.stack.set_base(unknown.frame)
        self.level2.invalidate()

    # ------------------------------------------------------------------ sub-task progress
    def _progress(self, frame: Frame, now: float, joint_pos: np.ndarray, grip_force: float,
                  goal_reached: bool) -> None:
        st = self.subtasks[frame.current]
        progress = check_progress(st, frame, now, joint_pos=joint_pos, final_pose=lambda: self.level2.final_pose(st),
                                  grip=self.grip, grip_force=grip_force,
                                  settle_tolerance=float(self.cfg["settle_tolerance"]), goal_reached=goal_reached)
        if progress.gripped:
            self.grip_done_count += 1
            self.info(f"grip held > {self.grip.threshold:g} N for {self.grip.dwell:g} s: {st.name} done")
        if progress.timed_out and frame.source == SOURCE_TASK:
            self.info(f"sub-task {st.name} timed out after {st.timeout:g} s")
            self._run_unknown_scene(self.level1.unknown_scene(
                now, frame, self._key_snap, f"sub-task timed out after {st.timeout:g} s", self.zone))
            return
        if not (progress.done or progress.timed_out):
            return
        self.subtasks_completed += 1
        if frame.source == SOURCE_TASK:
            self.level1.subtask_completed(frame, st.index, now)
        frame.advance()
        self.level2.invalidate()
        if frame.done and frame.source == SOURCE_TASK:
            self.info(f"task {frame.name} complete")
            self._last_done = (frame.name, dict(frame.args), frame.variant, list(frame.subtasks))
            hold = None
            if bool(self.cfg["idle_hold"]) and "hold" in self.subtask_index:
                hold = Frame(SOURCE_TASK, "", [self.subtask_index["hold"]], intent_index=-1)
            self.stack.set_base(hold)
            if hold is not None:
                hold.needs_resume = False
        elif frame.done and frame.source == SOURCE_UNKNOWN_SCENE:
            self.stack.set_base(None)

    # ------------------------------------------------------------------ status
    def status(self) -> RouterStatusSnapshot:
        return status_snapshot(self)
