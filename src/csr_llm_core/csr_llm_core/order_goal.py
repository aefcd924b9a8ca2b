"""One operator order, from its words to its outcome (plain module, no rclpy).

The instruct node (instruct_node.py) serves csr_llm_msgs/action/Instruct; each goal is one
``OrderGoal``. The order goes out on ``events`` as the operator's words, so the reasoning node
decides on it as on any event. The goal then follows:

* the order's chunk: the aggregator's event chunk holding the line (its seq);
* the order's decision: the first decision that saw the order: one whose prefix holds the chunk
  (``last_chunk_seq`` >= its seq), or the first event-triggered decision taken after the chunk
  (it reads the chunk among the suffix's newest events); without a chunk (no aggregator on
  ``state_chunks``), the first event-triggered decision after the order went out;
* a decision that is no task (an intent the catalogue marks ``pauses_task``, or none it knows):
  REFUSED;
* a task: started once the router reports it accepted the decision and runs that intent; then
  consecutive router reports read as the task situations read them (task_situations.task_ending):
  done -> DONE; unknown scene or fail-safe -> FAILED; replaced by another task -> FAILED;
  paused by a pausing decision -> it waits for the task to run again;
* no result within ``timeout_s`` of the goal (or no start within ``start_timeout_s`` of the
  decision): FAILED; cancelled: CANCELLED (the node holds the robot); a newer order: FAILED,
  "superseded".
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Optional

from csr_llm_common.catalogue import IntentCatalogue

from .task_situations import RouterSample, task_ending


class Outcome(enum.IntEnum):
    """Instruct.Result.OUTCOME_*."""
    DONE = 1
    FAILED = 2
    REFUSED = 3
    CANCELLED = 4


class Phase(enum.Enum):
    DECIDING = "waiting for a decision"
    STARTING = "waiting for the router to start"
    RUNNING = "running"
    ENDED = "ended"


@dataclass(frozen=True)
class OrderConfig:
    """The instruct node's parameters."""
    timeout_s: float = 60.0          # a goal without a result by then fails
    start_timeout_s: float = 5.0     # a decided task the router has not started by then fails
    speaker: str = "operator"        # the order goes out as "<speaker>: <order>"
    intents_file: str = ""           # the intent catalogue ("": config/intents.yaml)
    tick_period_s: float = 0.1       # how often timeouts and cancel requests are checked


@dataclass(frozen=True)
class OrderResult:
    outcome: Outcome
    reason: str
    intent: str = ""


@dataclass(frozen=True)
class OrderFeedback:
    state: str
    decision_id: int = 0
    decision_intent: str = ""
    running_task: str = ""


@dataclass(frozen=True)
class DecisionSample:
    """The fields of a csr_llm_msgs/Decision an order reads."""
    decision_id: int
    intent: str
    last_chunk_seq: int = 0
    event_triggered: bool = False


@dataclass(frozen=True)
class RouterReport:
    """One csr_llm_msgs/RouterStatus: the task fields and the newest decision the router accepted."""
    sample: RouterSample
    last_decision_id: int = -1


def task_intents(catalogue: IntentCatalogue) -> Callable[[str], bool]:
    """Whether a decided intent is a task: a catalogue intent that does not pause the running task
    (stop, hold_position and back_off pause it: deciding one answers an order with no task)."""
    return lambda intent: intent in catalogue and not catalogue[intent].pauses_task


def order_line(speaker: str, order: str) -> str:
    """The event line an order goes out as."""
    return f"{speaker}: {order}" if speaker else order


def cancel_line(speaker: str, order: str) -> str:
    """The event line a cancelled order leaves for the reasoning node."""
    return order_line(speaker, f"cancel the order '{order}', stay where you are")


FAILURE_WORDS = {"unknown_scene": "the router met an unknown scene", "failsafe": "the router went to its fail-safe"}


class OrderGoal:
    """One goal's state machine; every method returns the result once the goal ended (else None)."""

    def __init__(self, order: str, is_task: Callable[[str], bool], started: float, config: OrderConfig,
                 expects_chunk: bool = True):
        """``expects_chunk``: an aggregator publishes state chunks, so only decisions taken after the
        order's chunk count (else the first event-triggered decision after the order went out)."""
        self.order = order
        self._expects_chunk = expects_chunk
        self.line = order_line(config.speaker, order)
        self._is_task = is_task
        self._config = config
        self._started = started
        self._phase = Phase.DECIDING
        self._chunk_seq: Optional[int] = None
        self._decision: Optional[DecisionSample] = None
        self._newest: Optional[DecisionSample] = None
        self._decided_at = started
        self._report: Optional[RouterReport] = None
        self.result: Optional[OrderResult] = None

    @property
    def intent(self) -> str:
        return self._decision.intent if self._decision is not None else ""

    def on_chunk(self, seq: int, text: str, is_event: bool) -> None:
        """A state chunk: the first event chunk holding the order's line is the order's."""
        if self._chunk_seq is None and is_event and self.line in text:
            self._chunk_seq = int(seq)

    def on_decision(self, decision: DecisionSample, now: float) -> Optional[OrderResult]:
        if self.result is not None:
            return self.result
        self._newest = decision
        if self._phase is not Phase.DECIDING or not self._saw_order(decision):
            return None
        self._decision, self._decided_at = decision, now
        if not self._is_task(decision.intent):
            return self._end(Outcome.REFUSED, f"the decision was {decision.intent or 'none'}, not a task")
        self._phase = Phase.STARTING
        return self._start_if_running()

    def _saw_order(self, decision: DecisionSample) -> bool:
        if self._chunk_seq is not None and decision.last_chunk_seq >= self._chunk_seq:
            return True
        return decision.event_triggered and (self._chunk_seq is not None or not self._expects_chunk)

    def on_router(self, report: RouterReport) -> Optional[OrderResult]:
        if self.result is not None:
            return self.result
        before, self._report = self._report, report
        if self._phase is Phase.STARTING:
            return self._start_if_running()
        if self._phase is Phase.RUNNING and before is not None:
            return self._follow(before.sample, report.sample)
        return None

    def _start_if_running(self) -> Optional[OrderResult]:
        report, decision = self._report, self._decision
        if report is None or decision is None or report.last_decision_id < decision.decision_id:
            return None
        if report.sample.active_intent == decision.intent:
            self._phase = Phase.RUNNING
        return None

    def _follow(self, before: RouterSample, now: RouterSample) -> Optional[OrderResult]:
        intent = self.intent
        if before.active_intent == intent:
            ending = task_ending(before, now)
            if ending == "done":
                return self._end(Outcome.DONE, f"{intent} finished")
            if ending is not None:
                return self._end(Outcome.FAILED, f"{intent} failed: {FAILURE_WORDS[ending]}")
        elif before.paused_intent == intent:
            if now.unknown_scene_count > before.unknown_scene_count or now.failsafe_count > before.failsafe_count:
                return self._end(Outcome.FAILED, f"{intent} failed while paused by {before.active_intent}")
        if now.active_intent not in ("", intent) and now.paused_intent != intent:
            return self._end(Outcome.FAILED, f"{intent} was replaced by {now.active_intent}")
        return None

    def tick(self, now: float) -> Optional[OrderResult]:
        """Timeouts, on the node's clock."""
        if self.result is not None:
            return self.result
        if now - self._started >= self._config.timeout_s:
            return self._end(Outcome.FAILED, f"no result within {self._config.timeout_s:g} s ({self._phase.value})")
        if self._phase is Phase.STARTING and now - self._decided_at >= self._config.start_timeout_s:
            return self._end(Outcome.FAILED, f"the router did not start {self.intent} within "
                                             f"{self._config.start_timeout_s:g} s of the decision")
        return None

    def cancel(self) -> OrderResult:
        return self.result or self._end(Outcome.CANCELLED, "cancelled: the robot holds its position")

    def supersede(self) -> OrderResult:
        return self.result or self._end(Outcome.FAILED, "superseded by a newer order")

    def feedback(self) -> OrderFeedback:
        newest = self._newest if self._decision is not None else None   # earlier ones are not the order's
        report = self._report
        running = report.sample.active_intent if report is not None else ""
        state = self._phase.value
        if self._phase in (Phase.STARTING, Phase.RUNNING):
            state = f"{self._phase.value} {self.intent}"
            if self._phase is Phase.RUNNING and report is not None:
                if report.sample.paused_intent == self.intent and running != self.intent:
                    state = f"{self.intent} paused by {running}"
                elif report.sample.active_sub_task:
                    state += f" (sub-task {report.sample.active_sub_task})"
        elif self.result is not None:
            state = f"{self.result.outcome.name.lower()}: {self.result.reason}"
        return OrderFeedback(state=state, decision_id=newest.decision_id if newest is not None else 0,
                             decision_intent=newest.intent if newest is not None else "", running_task=running)

    def _end(self, outcome: Outcome, reason: str) -> OrderResult:
        self._phase = Phase.ENDED
        self.result = OrderResult(outcome, reason, self.intent)
        return self.result
