"""What the router makes of each decision it starts: confirm, refuse or start (plain module, no rclpy).

``DecisionGate`` owns the decision watchdog and the bookkeeping of decisions: the same decision as
the task running confirms it (the reasoning node re-decides at 2 Hz); a decision's arguments are
resolved when it starts (``decision_args.py``: a zone becomes the go-to-pose goal, an object the
reach target where the scene has it), and a decision naming an object that is missing or out of
reach is refused with one log line and a decision request, the same refusal repeated staying
quiet. What runs stays unchanged unless the outcome carries a frame to start.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .decision_args import bound_fields, resolve_arguments
from .go_to_pose import pose_tuple
from .inputs import QueuedDecision
from .interrupts import SOURCE_TASK, Frame
from .monitors import DecisionWatchdog
from .params import RouterConfig
from .router_setup import SubTaskTable
from .scene import Scene, SceneFrames


@dataclass(frozen=True)
class DecisionOutcome:
    start: Optional[Frame] = None       # the task frame to run
    refusal: str = ""                   # refused: why (what runs is unchanged)
    announce: bool = False              # a refusal that differs from the last: log it and request a decision


CONFIRMED = DecisionOutcome()


class DecisionGate:
    def __init__(self, cfg: RouterConfig, table: SubTaskTable, frames: SceneFrames):
        self._cfg = cfg
        self._table = table
        self._frames = frames
        self.watchdog = DecisionWatchdog(float(cfg["decision_timeout_s"]))
        self.repeated = 0              # decisions that confirmed the task running
        self.refused = 0
        self._last_refusal = ""

    def silence(self, now: float) -> str:
        """Why the decision stream counts as lost now ("" while it is alive)."""
        if not self.watchdog.lost(now):
            return ""
        return f"no decision for {self.watchdog.timeout_s:g} s: reasoning node lost?"

    def evaluate(self, decision: QueuedDecision, now: float, running: Optional[Frame], failure: bool,
                 scene: Scene, odom_pose: np.ndarray) -> DecisionOutcome:
        """``running``: the base frame of the stack; ``failure``: the execution layer's flag."""
        self.watchdog.decided(now)
        intent = decision.intent
        binding = self._cfg.argument_bindings.get(intent, {})
        fields = bound_fields(decision.arguments, binding)
        if running is not None and running.source == SOURCE_TASK and running.name == intent and \
                running.args == fields and not failure:
            # the same decision confirms the task in progress (or the one just completed); it does
            # not restart it from its first sub-task nor re-check the scene (a lifted object has left
            # its reach target)
            self.repeated += 1
            return CONFIRMED
        resolved = resolve_arguments(decision.arguments, binding, zones=self._cfg.zones, scene=scene,
                                     now=now, targets=self._cfg.reach_targets, frames=self._frames,
                                     odom_pose=pose_tuple(odom_pose))
        if resolved.refusal:
            self.refused += 1
            announce = resolved.refusal != self._last_refusal
            self._last_refusal = resolved.refusal
            return DecisionOutcome(refusal=resolved.refusal, announce=announce)
        self._last_refusal = ""
        ii = self._table.intent_index[intent]
        sequence = self._table.ids(resolved.subtasks) if resolved.subtasks else self._table.sequences[ii]
        return DecisionOutcome(start=Frame(SOURCE_TASK, intent, list(sequence), intent_index=ii, args=fields,
                                           decided=dict(decision.arguments)))
