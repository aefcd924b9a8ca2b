"""What the router hands out: one ``Command`` per tick and a ``RouterStatusSnapshot`` (plain module).

Both are frozen; their arrays are copies marked read-only, so a caller may keep them across ticks.
The router node maps each onto its message in one function (``router_messages.motor_command_message``,
``router_messages.router_status_message``); the status field names are RouterStatus's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

import numpy as np
from csr_llm_common.catalogue import PausedTask

from .interrupts import SOURCE_TASK


def frozen_copy(values: np.ndarray) -> np.ndarray:
    out = np.array(values, copy=True)
    out.flags.writeable = False
    return out


@dataclass(frozen=True)
class Command:
    effort: np.ndarray                  # per joint, in the order of ``joints``
    effort_limit: np.ndarray            # limit applied this tick
    clamped: np.ndarray                 # bool: PID output clamped to the limit
    reference_position: np.ndarray      # level 2's reference (meaningful when ``tracking``)
    reference_velocity: np.ndarray
    tracking: bool                      # a trajectory reference is tracked this tick
    base_vx: float                      # cmd_vel linear x [m/s]
    base_wz: float                      # cmd_vel angular z [rad/s]
    execution_state: int                # MotorCommand.EXEC_*
    source: int                         # MotorCommand.SOURCE_*, the same for every actuator group
    intent: str                         # the running task's intent ("" when idle or not a task)
    sub_task: str                       # the running sub-task ("" when none)
    l1_hit: bool                        # last level-1 match hit
    l2_hit: bool                        # level 2 served the cached segment this tick
    l3_clamped: bool                    # level 3 clamped at least one joint this tick
    l1_us: float                        # compute time of this tick's stages [us]
    l2_us: float
    l3_us: float
    state_stamp: Tuple[int, int]        # header stamp (sec, nanosec) of the joint state used
    requests: Tuple[str, ...]           # decision requests raised this tick
    sounds: Tuple[str, ...]             # sounds to play, raised this tick


@dataclass(frozen=True)
class RouterStatusSnapshot:
    active_intent: str
    active_sub_task: str
    zone: str
    match_similarity: float
    match_threshold: float
    l1_hit: bool
    l2_hit: bool
    l3_clamped: bool
    l1_us: float
    l2_us: float
    l3_us: float
    task_hit_rate: float
    behaviour_hit_rate: float
    execution_hit_rate: float
    interrupt_depth: int
    execution_state: int
    unknown_scene_count: int
    grip_done_count: int
    derate_count: int
    confidence_flips: int
    failsafe_count: int
    input_faults: int
    slip_detected: bool
    slip_events: int
    odom_weight: float
    paused: Optional[PausedTask] = None   # the task a pausing decision displaced (catalogue pauses_task)
    active_reflexes: Tuple[str, ...] = ()  # interrupt frames active now, bottom to top (reflexes.py)


def status_snapshot(router: Any) -> RouterStatusSnapshot:
    """The router's status now (``Router.status``)."""
    c = router.command
    weight = float(getattr(router.encoder, "last_slip_weight", 1.0))
    return RouterStatusSnapshot(
        active_intent=c.intent, active_sub_task=c.sub_task, zone=router.zone,
        match_similarity=float(router.level1.similarity), match_threshold=float(router.threshold),
        l1_hit=bool(router.level1.hit), l2_hit=c.l2_hit, l3_clamped=c.l3_clamped,
        l1_us=c.l1_us, l2_us=c.l2_us, l3_us=c.l3_us,
        task_hit_rate=router.level1.task_layer.hit_rate, behaviour_hit_rate=router.level2.behaviour.hit_rate,
        execution_hit_rate=router.execution.hit_rate, interrupt_depth=router.stack.depth,
        execution_state=c.execution_state, unknown_scene_count=router.level1.unknown_scene_count,
        grip_done_count=router.grip_done_count, derate_count=router.derate_count,
        confidence_flips=router.confidence.flips, failsafe_count=router.failsafe_count,
        input_faults=router.faults.total, slip_detected=weight < 1.0, slip_events=router.key_step.slip_events,
        odom_weight=weight, paused=router.stack.paused, active_reflexes=tuple(router.stack.active_interrupts()))


def task_state(router: Any) -> Tuple[str, int, Optional[PausedTask]]:
    """What a decision reads of the router's status (active_intent, interrupt_depth, paused): the
    node reports a change of it on the tick it happens."""
    return router.command.intent, router.stack.depth, router.stack.paused


def build_command(router: Any, flags: Tuple[bool, bool, bool, bool], timings: Tuple[float, float, float],
                  stamp: Tuple[int, int]) -> Command:
    """The tick's frozen command (``Router.tick``); flags: level-1 hit, level-2 hit, clamped, tracking."""
    l1_hit, l2_hit, l3_clamped, tracking = flags
    l3 = router.level3
    top = router.stack.top
    sub_task = intent = ""
    if top is not None and not top.done:
        sub_task = router.subtasks[top.current].name
        base = router.stack.base()
        intent = base.name if base is not None and base.source == SOURCE_TASK else ""
    return Command(
        effort=frozen_copy(l3.effort), effort_limit=frozen_copy(l3.effort_limit), clamped=frozen_copy(l3.clamped),
        reference_position=frozen_copy(router.level2.p_ref), reference_velocity=frozen_copy(router.level2.v_ref),
        tracking=tracking, base_vx=float(l3.base_vx), base_wz=float(l3.base_wz),
        execution_state=int(l3.execution_state), source=int(router.arbiter.sources["arm"]), intent=intent,
        sub_task=sub_task, l1_hit=bool(l1_hit), l2_hit=bool(l2_hit), l3_clamped=bool(l3_clamped),
        l1_us=timings[0], l2_us=timings[1], l3_us=timings[2], state_stamp=stamp,
        requests=tuple(router._requests), sounds=tuple(router._sounds))
