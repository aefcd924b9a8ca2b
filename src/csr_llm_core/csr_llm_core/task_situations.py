"""Sub-task and task done / failed, from consecutive router reports (plain module, no rclpy).

The router reports its running task (``router_status``: the base task's intent, the running
sub-task, the task a pausing decision displaced, nested interrupts, counters). Between two reports:

* failed: an intent was running and the router met an unknown scene (its unknown-scene count rose:
  a level-1 miss or a sub-task past its timeout) or went to its fail-safe (failsafe count rose);
* done: the intent that ran is no longer running, not displaced by a pause, and nothing failed;
  an intent in ``needs_grip`` is done only while the gripper holds something, else it failed;
* sub-task done: the same intent runs, no interrupt in either report, and its sub-task changed.

A decision that replaces or pauses a task says nothing here: the reasoning node made it.

Reflexes: a name new in the router's ``active_reflexes`` says the robot holds by itself (and that
the task resumes on its own), one gone says it cleared; the router's clear dwell keeps them from
flapping.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from .situation_detectors import GripState, SensedLine
from .situations_config import ReflexesConfig, TasksConfig


@dataclass(frozen=True)
class RouterSample:
    """The fields of a csr_llm_msgs/RouterStatus the task and slip situations read."""
    active_intent: str = ""
    active_sub_task: str = ""
    paused_intent: str = ""
    interrupt_depth: int = 0
    slip_detected: bool = False
    unknown_scene_count: int = 0
    failsafe_count: int = 0
    active_reflexes: Tuple[str, ...] = ()


def router_sample(status: Any) -> RouterSample:
    """The task fields of a csr_llm_msgs/RouterStatus (read by name: this module imports no message)."""
    return RouterSample(
        active_intent=status.active_intent, active_sub_task=status.active_sub_task,
        paused_intent=status.paused_intent, interrupt_depth=int(status.interrupt_depth),
        slip_detected=bool(status.slip_detected), unknown_scene_count=int(status.unknown_scene_count),
        failsafe_count=int(status.failsafe_count), active_reflexes=tuple(str(n) for n in status.active_reflexes))


def task_ending(before: RouterSample, now: RouterSample) -> Optional[str]:
    """How the task running in ``before`` ended by ``now``: "unknown_scene" or "failsafe" (failed),
    "done" (no longer running, not displaced by a pause), or None (it runs on, or was replaced)."""
    if now.unknown_scene_count > before.unknown_scene_count:
        return "unknown_scene"
    if now.failsafe_count > before.failsafe_count:
        return "failsafe"
    if not now.active_intent and now.paused_intent != before.active_intent:
        return "done"
    return None


class TaskDetector:
    def __init__(self, config: TasksConfig):
        self.config = config
        self._last: Optional[RouterSample] = None
        self._newest = float("-inf")

    def update(self, report: RouterSample, stamp: float, grip: GripState) -> List[SensedLine]:
        """The lines due between the previous report and ``report`` (stamped ``stamp``)."""
        if stamp < self._newest:
            return []
        self._newest = stamp
        before, self._last = self._last, report
        if before is None or not before.active_intent:
            return []
        text = self._text(before, report, grip)
        if text is None:
            return []
        sub_task = self.config.sub_tasks and report.active_intent == before.active_intent
        return [SensedLine(stamp, "sub_task" if sub_task else "task", text)]

    def _text(self, before: RouterSample, now: RouterSample, grip: GripState) -> Optional[str]:
        words, intent = self.config.wording, before.active_intent
        fields = {"intent": intent, "sub_task": before.active_sub_task, "object": grip.object, "force": grip.force}
        reason = None
        ending = task_ending(before, now)
        if ending == "done":
            if intent in self.config.needs_grip and not grip.holding:
                reason = words["nothing_held"].format(**fields)
            else:
                return self.config.done_wording.get(intent, words["done"]).format(**fields)
        elif ending is not None:
            reason = words[ending]
        if reason is not None:
            return words["failed"].format(**{**fields, "reason": reason})
        if self.config.sub_tasks and now.active_intent == intent and before.interrupt_depth == 0 \
                and now.interrupt_depth == 0 and before.active_sub_task \
                and now.active_sub_task != before.active_sub_task:
            return words["sub_task_done"].format(**fields)
        return None


class ReflexDetector:
    def __init__(self, config: ReflexesConfig):
        self.config = config
        self._active: Tuple[str, ...] = ()
        self._newest = float("-inf")

    def update(self, report: RouterSample, stamp: float) -> List[SensedLine]:
        """A line per reflex started or cleared since the previous report."""
        if stamp < self._newest:
            return []
        self._newest = stamp
        before, self._active = self._active, tuple(report.active_reflexes)
        task = report.active_intent or report.paused_intent
        lines = [self._line("holding", name, task, stamp) for name in self._active if name not in before]
        return lines + [self._line("cleared", name, task, stamp) for name in before if name not in self._active]

    def _line(self, edge: str, name: str, task: str, stamp: float) -> SensedLine:
        template = self.config.wording[edge if task else f"{edge}_idle"]
        return SensedLine(stamp, "reflex", template.format(reflex=self.config.names.get(name, name), intent=task))
