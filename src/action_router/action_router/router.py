"""The router's tick: sensor snapshots in, one ``Command`` per tick out (plain module, no rclpy).

Per tick (``Router.tick(now)``):
  0. the intake (``router_intake.py``) takes the zone request and snapshots the inputs
     (``inputs.py``); the queued decisions start, are confirmed or refused (``router_decisions.py``);
     a decision stream silent for ``decision_timeout_s`` while a task runs sets the failure flag;
  1. physical invalidations (``monitors.py``): temperature -> derated set, effort feedback ->
     confidence bit, stale joint states -> failure;
  2. reflexes (``reflexes.py``): a person close, a motor over temperature, a slip, an unexpected
     contact push / pop interrupt frames of the priority stack (``interrupts.py``), no decision;
  3. level 1 (``task_matching.py``, ``level1.py``, ``variants.py``): at a task's start the camera's
     scene picks the intent's variant; a new key (``task_key.py``) of the running task frame is
     matched in the task layer; a miss runs the unknown-scene protocol and asks for a new decision;
  4. level 2 (``level2.py``): the behaviour layer serves or re-plans the reference;
  5. level 3 (``level3.py``): PID, clamp, fail-safe ramp, the base twist; then sub-task progress.
Stages 2 to 5 are the ``LevelPipeline``'s (``router_levels.py``).

``Router`` builds the parts from its configuration (``router_setup.py``), wires them tick by tick,
keeps the last command and reports its status (``outputs.py``). The key step may run in another
thread (``update_key``); with ``auto_key`` the tick runs it at key_hz itself.
"""
from __future__ import annotations

import time
from typing import Callable, List, Optional, Tuple

import numpy as np

from .encoder import KeyEncoder
from .identity import robot_identity
from .inputs import QueuedDecision, make_fault_log
from .level3 import EXEC_DERATED, EXEC_FAILSAFE, EXEC_NOMINAL, EXEC_STOPPED  # noqa: F401 - re-exported
from .outputs import Command, RouterStatusSnapshot, build_command, status_snapshot
from .params import RouterConfig, make_config
from .router_decisions import DecisionGate
from .router_intake import SensorIntake, TickInput
from .router_levels import LevelPipeline
from .router_outbox import TickOutbox
from .router_setup import make_encoder, subtask_table
from .task_key import KeyUpdate
from .task_matching import TaskMatcher


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
        self.cache_enabled = bool(cfg["cache_enabled"])
        self.auto_key = auto_key
        self.info = info_report or (lambda text: None)
        self.faults = make_fault_log(fault_report)
        self.effort_max = np.array(cfg["effort_max"], dtype=float)
        table = subtask_table(cfg, self.joints)
        self.subtasks, self.subtask_index = table.subtasks, table.index
        self.intake = SensorIntake(cfg, self.joints, {z.name: z.threshold for z in cfg.zones.values()}, self.faults)
        self.inputs = inp = self.intake.inputs
        self.confidence = self.intake.confidence
        # sensor setters and decisions are the inputs' own (any thread)
        self.set_joint_state, self.set_imu, self.set_odom = inp.set_joint_state, inp.set_imu, inp.set_odom
        self.set_wrench, self.set_temperature, self.set_objects = inp.set_wrench, inp.set_temperature, inp.set_objects
        self.set_vision, self.set_zone, self.submit_decision = inp.set_vision, inp.set_zone, inp.submit_decision
        self.set_proximity = inp.set_proximity
        self.robot_id = robot_identity(str(cfg["robot_id"]), namespace)
        self.encoder = make_encoder(cfg, self.robot_id, n, encoder)
        self.outbox = TickOutbox(self.info)
        self.matcher = TaskMatcher(cfg, table, self.encoder, self.inputs, self.robot_id, n, self.info)
        self.key_step, self.efforts, self.level1 = self.matcher.key_step, self.matcher.efforts, self.matcher.level1
        self.store, self.scenes = self.matcher.store, self.matcher.scenes
        self.levels = LevelPipeline(cfg, table, self.joints, self.effort_max, self.matcher, self.outbox)
        self.level2, self.level3, self.execution = self.levels.level2, self.levels.level3, self.levels.execution
        self.stack, self.arbiter = self.levels.stack, self.levels.arbiter
        self.decisions = DecisionGate(cfg, table, self.intake.scene_frames)
        self.command = self._command(False, False, False, False, (0.0, 0.0, 0.0), (0, 0))
        self.matcher.seed(self.encoder, cfg, n)
        for intent, names in cfg.unused_arguments.items():
            for name in names:
                self.info(f"argument {intent}.{name} is accepted but not used by the router")

    # ------------------------------------------------------------------ status (outputs.py reads these)
    @property
    def zone(self) -> str:
        return self.intake.zone

    @property
    def threshold(self) -> float:
        return self.intake.threshold

    @property
    def key_period(self) -> float:
        return self.matcher.key_period

    @property
    def repeated_decisions(self) -> int:
        return self.decisions.repeated

    @property
    def refused_decisions(self) -> int:
        return self.decisions.refused

    @property
    def subtasks_completed(self) -> int:
        return self.levels.subtasks_completed

    @property
    def grip_done_count(self) -> int:
        return self.levels.grip_done_count

    @property
    def failsafe_count(self) -> int:
        return self.levels.failsafe_count

    @property
    def derate_count(self) -> int:
        return self.intake.derate_count

    @property
    def _requests(self) -> List[str]:
        return self.outbox.requests

    @property
    def _sounds(self) -> List[str]:
        return self.outbox.sounds

    def status(self) -> RouterStatusSnapshot:
        return status_snapshot(self)

    # ------------------------------------------------------------------ key step (any thread)
    def update_key(self, now: float) -> KeyUpdate:
        """Encode the current observation into the key buffer (key_hz; any thread)."""
        return self.matcher.update_key(now)

    # ------------------------------------------------------------------ the tick
    def tick(self, now: float) -> Command:
        t0 = time.perf_counter()
        self.outbox.clear()
        tick = self.intake.begin(now, self.level3.effort, self.level3.base_vx)
        self.matcher.drain_store()
        for decision in self.inputs.take_decisions(now):
            self._start_decision(decision, tick)
        lost = self.decisions.silence(now)
        if lost and self.levels.commanding() and not self.levels.failure:
            self.levels.fail(now, lost)
        self._physical_invalidations(tick)
        self.levels.run_interrupts(tick, self.key_step.slipping)
        self.levels.run_level1(tick, self.intake.threshold, self.intake.zone)
        t2 = time.perf_counter()
        l2 = self.levels.run_level2(tick)
        t3 = time.perf_counter()
        l3 = self.levels.run_level3(tick, l2, self.intake.zone)
        t4 = time.perf_counter()
        timings = ((t2 - t0) * 1e6, (t3 - t2) * 1e6, (t4 - t3) * 1e6)   # level 1 includes stages 0-2
        self.command = self._command(self.level1.hit, l2.hit, l3.clamped_any, l2.tracking, timings,
                                     tick.snap.state_stamp)
        if self.auto_key and self.matcher.key_due(now):
            self.update_key(now)
        return self.command

    def _command(self, l1_hit: bool, l2_hit: bool, l3_clamped: bool, tracking: bool,
                 timings: Tuple[float, float, float], stamp: Tuple[int, int]) -> Command:
        return build_command(self, (l1_hit, l2_hit, l3_clamped, tracking), timings, stamp)

    def _start_decision(self, decision: QueuedDecision, tick: TickInput) -> None:
        for learned in self.matcher.decision_arrived(decision.intent, tick.now):
            self.info(learned)
        outcome = self.decisions.evaluate(decision, tick.now, self.levels.running_task(), self.levels.failure,
                                          self.inputs.scene, tick.snap.odom_pose)
        if outcome.start is not None:
            self.levels.start_task(outcome.start)
        elif outcome.announce:   # one log line and one decision request per new refusal
            self.info(f"decision {decision.intent} refused: {outcome.refusal}; what runs is unchanged")
            self.outbox.request(outcome.refusal)

    def _physical_invalidations(self, tick: TickInput) -> None:
        if tick.derate_note:
            self.info(tick.derate_note)
        self.levels.load_execution_state(tick.derated, tick.confidence)
        if tick.state_lost and not self.levels.failure and self.levels.commanding():
            self.faults.record("joint_state_timeout")
            self.levels.fail(tick.now, "joint states stale")
        self.levels.add_base_travel(tick.base_moved)

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Write what the shared task store still holds queued and stop its thread."""
        self.matcher.close()

    def zero_output(self) -> None:
        """Zero effort was sent to the actuators outside the tick (router deactivated)."""
        self.level3.zero_output()
