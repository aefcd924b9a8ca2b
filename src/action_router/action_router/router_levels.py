"""The three levels on the priority stack, tick by tick (plain module, no rclpy).

``LevelPipeline`` owns the priority stack and its arbiter, the reflexes (``reflexes.py``: typed
interrupt triggers), levels 2 and 3 (``level2.py``, ``level3.py``) with the execution layer, and the
failure flag's consequences; level 1 is the ``TaskMatcher``'s (``task_matching.py``). Per tick:

  * reflexes: a person close, a motor over temperature, a slip, an unexpected contact push / pop
    interrupt frames of the stack (no decision either way);
  * level 1: a new key of the running task frame is matched; a miss runs the unknown-scene
    protocol (its frame becomes the stack's base) and asks for a new decision;
  * level 2: the behaviour layer serves or re-plans the reference; a (re)started sub-task's torque
    limits go into the execution layer;
  * level 3: PID, clamp, fail-safe ramp, the base twist (the go-to-pose controller,
    ``go_to_pose.py``, for a ``zone_reached`` sub-task); then sub-task progress (``subtask.py``:
    completion takes effect next tick).

The failure flag (a lost decision stream, stale joint states, persistent clamping) clears the
stack and the interrupts and ramps level 3 to the safe-stop set; a new decision clears it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, cast

import numpy as np

from .go_to_pose import STOP, BaseTwist, go_to_pose, pose_tuple
from .interrupts import SOURCE_INTERRUPT, SOURCE_TASK, SOURCE_UNKNOWN_SCENE, Arbiter, Frame, InterruptStack
from .level1 import UnknownScene
from .level3 import Level3Result
from .monitors import GripMonitor
from .reflexes import ReflexSignals
from .params import RouterConfig
from .router_intake import TickInput
from .router_outbox import TickOutbox
from .router_setup import (SubTaskTable, make_execution, make_go_to_pose_config, make_level2, make_level3,
                           make_reflexes)
from .subtask import SubTask, check_progress
from .task_matching import TaskMatcher

COMMANDING = (SOURCE_TASK, SOURCE_INTERRUPT, SOURCE_UNKNOWN_SCENE)


@dataclass(frozen=True)
class Level2Step:
    frame: Optional[Frame]          # the frame that commands (None: nothing runs)
    subtask: Optional[SubTask]      # its running sub-task
    tracking: bool = False
    hit: bool = False


class LevelPipeline:
    def __init__(self, cfg: RouterConfig, table: SubTaskTable, joints: Sequence[str], effort_max: np.ndarray,
                 matcher: TaskMatcher, outbox: TickOutbox):
        self._table = table
        self._matcher = matcher
        self._outbox = outbox
        self._cfg = cfg
        self.level2 = make_level2(cfg, table, len(joints), 1.0 / float(cfg["control_hz"]))
        self.level3 = make_level3(cfg, joints, effort_max)
        self.execution = make_execution(cfg, joints, effort_max)
        self.grip = GripMonitor(float(cfg["grip_force_threshold"]), float(cfg["grip_dwell_s"]))
        self.stack = InterruptStack()
        self.arbiter = Arbiter()
        self.interrupts = make_reflexes(cfg, table)
        # per sub-task: it grips (grip done, or the gripper held closed): a force then is no contact
        self._grips = [st.done == "grip" or bool(st.hold_mask.any()) for st in table.subtasks]
        self._go_to_pose = make_go_to_pose_config(cfg)
        self._settle_tolerance = float(cfg["settle_tolerance"])
        self._idle_hold = bool(cfg["idle_hold"]) and "hold" in table.index
        self._failsafe_ramp_s = float(cfg["failsafe_ramp_s"])
        self.subtasks_completed = 0
        self.grip_done_count = 0
        self.failsafe_count = 0

    @property
    def failure(self) -> bool:
        return self.execution.failure

    def commanding(self) -> bool:
        """A frame with sub-tasks left is on top of the stack."""
        top = self.stack.top
        return top is not None and not top.done

    def running_task(self) -> Optional[Frame]:
        """The stack's base frame (the decided task or the unknown-scene protocol)."""
        return self.stack.base()

    # ------------------------------------------------------------------ decisions and failure
    def start_task(self, frame: Frame) -> None:
        """A decided task replaces the base frame; a new decision clears the failure flag."""
        self._matcher.task_started(frame)
        if self.execution.failure:
            self.execution.failure = False
            self.level3.rearm()
            self._outbox.info(f"failure flag cleared by a new decision ({frame.name})")
        self.stack.set_task(frame, self._cfg.catalogue)
        self.level2.invalidate()

    def fail(self, now: float, why: str) -> None:
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
        self._outbox.info(f"failure flag set ({why}): interpolating to the safe-stop set over "
                          f"{self._failsafe_ramp_s:g} s")

    def load_execution_state(self, derated: np.ndarray, confidence: Optional[np.ndarray]) -> None:
        """Over-temperature joints and (when feedback updated them) the confidence bits."""
        self.execution.set_derated(derated)
        if confidence is not None:
            self.execution.set_confidence(confidence)

    def add_base_travel(self, moved: float) -> None:
        if self.stack.top is not None:
            self.stack.top.base_travel += moved

    # ------------------------------------------------------------------ the stages
    def run_interrupts(self, tick: TickInput, slipping: bool) -> None:
        """The reflexes: a trigger's rising edge pushes its frame, a cleared and settled frame pops."""
        driven = self.level3.base_vx != 0.0 or self.level3.base_wz != 0.0
        signals = ReflexSignals(tick.now, tick.proximity, bool(tick.derated.any()), slipping, driven,
                                tick.grip_force, self.gripping())
        update = self.interrupts.update(signals, self.stack, self.execution.failure, self._settled)
        self._outbox.sounds.extend(update.sounds)
        for line in update.messages:
            self._outbox.info(line)
        if update.changed:
            self.level2.invalidate()

    def gripping(self) -> bool:
        """A frame of the stack runs a grip sub-task now."""
        return any(not f.done and self._grips[f.current] for f in self.stack.frames)

    def run_level1(self, tick: TickInput, threshold: float, zone: str) -> None:
        unknown = self._matcher.match(tick.now, self.stack.top, tick.state_ok, tick.snap.odom_pose, threshold, zone)
        if unknown is not None:
            self._run_unknown_scene(unknown)

    def run_level2(self, tick: TickInput) -> Level2Step:
        top = self.stack.top
        st = self._table.subtasks[top.current] if top is not None and not top.done else None
        if top is None or st is None or not tick.state_ok or self.execution.failure:
            return Level2Step(top, st)
        l2 = self.level2.step(tick.now, top, st, tick.snap.joint_pos, tick.snap.joint_vel)
        if l2.restarted:
            self.grip.reset()
            self.execution.set_torque_limit(st.torque_limit)
            if st.zero_effort:
                self.level3.start_zero_ramp(tick.now)
        return Level2Step(top, st, l2.tracking, l2.hit)

    def run_level3(self, tick: TickInput, step: Level2Step, zone: str) -> Level3Result:
        """Level 3's command, then the running sub-task's progress."""
        top, st, snap = step.frame, step.subtask, tick.snap
        source = self.arbiter.assign(top, self.execution.failure)["arm"]
        base = self._base_goal_twist(top, st, tick)
        l3 = self.level3.step(tick.now, tick.dt, self.execution, source, tick.state_ok, top, st, self.level2.p_ref,
                              self.level2.v_ref, snap.joint_pos, snap.joint_vel, base)
        if l3.failure:
            self._after_failure(l3.failure)
        for group in self.arbiter.sources:   # one source per actuator group, whatever changed in the tick
            self.arbiter.sources[group] = l3.source
        self._matcher.add_effort(l3.effort, l3.effort_limit)
        if top is not None and not self.execution.failure and l3.source in COMMANDING and tick.state_ok:
            self._progress(top, tick.now, snap.joint_pos, tick.grip_force, base is not None and base.reached, zone)
        return l3

    def _base_goal_twist(self, frame: Optional[Frame], st: Optional[SubTask], tick: TickInput) -> Optional[BaseTwist]:
        """The go-to-pose twist of a running zone_reached sub-task (stopped on stale odometry)."""
        if frame is None or st is None or st.done != "zone_reached":
            return None
        zone = self._cfg.zones.get(str(frame.args.get("base_goal", "")))
        if zone is None or zone.goal is None or not tick.odom_fresh:
            return STOP
        speed = float(cast(float, frame.args.get("base_speed", abs(st.base_vx))))
        return go_to_pose(pose_tuple(tick.snap.odom_pose), zone.goal, speed, self._go_to_pose)

    def _settled(self, frame: Frame) -> bool:
        return frame.done or self._table.subtasks[frame.current].done == "never"

    def _run_unknown_scene(self, unknown: UnknownScene) -> None:
        self._outbox.request(unknown.request)
        self._outbox.info(unknown.request)
        self.stack.set_base(unknown.frame)
        self.level2.invalidate()

    def _progress(self, frame: Frame, now: float, joint_pos: np.ndarray, grip_force: float,
                  goal_reached: bool, zone: str) -> None:
        st = self._table.subtasks[frame.current]
        progress = check_progress(st, frame, now, joint_pos=joint_pos, final_pose=lambda: self.level2.final_pose(st),
                                  grip=self.grip, grip_force=grip_force,
                                  settle_tolerance=self._settle_tolerance, goal_reached=goal_reached)
        if progress.gripped:
            self.grip_done_count += 1
            self._outbox.info(f"grip held > {self.grip.threshold:g} N for {self.grip.dwell:g} s: {st.name} done")
        if progress.timed_out and frame.source == SOURCE_TASK:
            self._outbox.info(f"sub-task {st.name} timed out after {st.timeout:g} s")
            self._run_unknown_scene(self._matcher.unknown_scene(
                now, frame, f"sub-task timed out after {st.timeout:g} s", zone))
            return
        if not (progress.done or progress.timed_out):
            return
        self.subtasks_completed += 1
        self._matcher.subtask_completed(frame, st.index, now)
        frame.advance()
        self.level2.invalidate()
        if frame.done and frame.source == SOURCE_TASK:
            self._outbox.info(f"task {frame.name} complete")
            self._matcher.task_completed(frame)
            hold = self._idle_frame()
            self.stack.set_base(hold)
            if hold is not None:
                hold.needs_resume = False
        elif frame.done and frame.source == SOURCE_UNKNOWN_SCENE:
            self.stack.set_base(None)

    def _idle_frame(self) -> Optional[Frame]:
        """What runs after a task completes: the ``hold`` sub-task with ``idle_hold``, else nothing."""
        if not self._idle_hold:
            return None
        return Frame(SOURCE_TASK, "", [self._table.index["hold"]], intent_index=-1)
