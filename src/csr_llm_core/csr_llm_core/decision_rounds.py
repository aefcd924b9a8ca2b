"""The decision thread's rounds: chunks applied, decisions taken and pending tokens appended in the
order the schedule (decision_scheduler.py) gives (plain module, no rclpy).

A round is what the thread takes at once (``DecisionScheduler.wait_for_work``): the chunks queued
since the last one and maybe a request. ``DecisionRounds.run`` carries it out:

- each chunk in stream order (``plan_chunk``): dropped, a new sequence, in ``chunks`` mode the
  periodic decision due before it, then its text into the state;
- event decisions (``RoundEvents``): in ``chunks`` mode one right after each event chunk, so a
  lockstepped run decides on every boundary in order, however the stream was split into rounds; in
  ``clock`` mode one right after the round's last event chunk, on the newest state, which decides
  the events before it too (their text is in the state and in the suffix's newest events): a
  backlog drains at append speed, and an event waits at most for the decision that was running
  when it arrived, then its own;
- then a request, then the periodic decision if ``take_clock_due`` still wants it (``clock``);
- in ``clock`` mode, while a round has a decision due, the ASR rebuild yields (``hold_rebuild``)
  as it does while a decision runs;
- then the pending tokens are appended now, or in a round of their own (``plan_append``).
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable, ContextManager, Generic, List, Optional, Protocol, Sequence, Tuple, TypeVar

from .decision_scheduler import AppendPlan, ChunkHeader, ChunkKind, DecisionScheduler, Round, Trigger

FAILED_ROUND_PAUSE_S = 0.1   # after a failed decision, before the next round retries

Item = TypeVar("Item")
Item_contra = TypeVar("Item_contra", contravariant=True)


class RoundActions(Protocol[Item_contra]):
    """What the node does for a round: its reasoner's state and its topics."""

    def chunk_header(self, item: Item_contra) -> ChunkHeader: ...

    def state_sequence(self) -> Tuple[int, Optional[int]]:
        """(sequence epoch, newest seq) of the state."""

    def start_sequence(self, epoch: int, seq: int) -> None: ...

    def chunk_dropped(self, fault: str, detail: str) -> None: ...

    def publish_status(self) -> None: ...

    def add_chunk(self, item: Item_contra, stamp: float) -> bool:
        """Its text into the state; False when refused (logged)."""

    def decide(self, trigger: Trigger, stamp: Optional[float]) -> None:
        """Decide and publish (``stamp`` None: the node clock's now)."""

    def pump(self, preempt: Callable[[], bool]) -> bool:
        """Append pending tokens; False when ``preempt()`` stopped it."""

    def uncached_tokens(self) -> int: ...

    def round_failed(self, kind: str, detail: str) -> None: ...

    def hold_rebuild(self) -> ContextManager[None]:
        """The ASR rebuild yields while inside (a decision is due)."""


@dataclass(frozen=True)
class EventDecision:
    """One event decision: how many event chunks it decides (> 1: coalesced), and its stamp."""
    events: int
    stamp: Optional[float]


class RoundEvents:
    """The event decisions of one round: one after each event chunk (``coalesce_at`` None), or one
    after the chunk at index ``coalesce_at`` (or any later one) for every event added up to it."""

    def __init__(self, coalesce_at: Optional[int] = None):
        self._coalesce_at = coalesce_at
        self._events = 0
        self._stamp: Optional[float] = None

    def added(self, stamp: Optional[float]) -> None:
        """An event chunk went into the state (its decision stamped ``stamp``; None = the clock's now)."""
        self._events += 1
        self._stamp = stamp

    def take(self, index: int) -> Optional[EventDecision]:
        """After the chunk at ``index`` was handled (applied, dropped or failed): the decision due now."""
        if not self._events or (self._coalesce_at is not None and index < self._coalesce_at):
            return None
        decision = EventDecision(self._events, self._stamp)
        self._events, self._stamp = 0, None
        return decision


class DecisionRounds(Generic[Item]):
    """Carries out the decision thread's rounds on ``actions``, in ``scheduler``'s order."""

    def __init__(self, scheduler: DecisionScheduler[Item], actions: RoundActions[Item],
                 sleep: Callable[[float], None] = time.sleep):
        self.scheduler = scheduler
        self.actions = actions
        self._sleep = sleep
        self._clock_mode = scheduler.policy.trigger == "clock"

    def run(self, work: Round[Item]) -> None:
        headers = [self.actions.chunk_header(item) for item in work.chunks]
        try:
            with self._rebuild_yields(work.request, headers):
                decided = self._apply(work.chunks, headers)
                decided = self._decide_due(work.request) or decided
            self._append(bool(work.chunks), decided)
        except Exception as err:  # noqa: BLE001 - keep the node up; the next trigger retries
            self.actions.round_failed(f"failed:{type(err).__name__}", f"a decision failed: {err}")
            self._sleep(FAILED_ROUND_PAUSE_S)

    def apply_at_stop(self, items: Sequence[Item]) -> None:
        """The chunks no round took, into the state without deciding (they are saved next)."""
        for item in items:
            self._apply_one(item, self.actions.chunk_header(item), RoundEvents(), decide=False)

    def round_events(self, headers: Sequence[ChunkHeader]) -> RoundEvents:
        """``clock``: one decision after the round's last event chunk; ``chunks``: one after each."""
        if not self._clock_mode:
            return RoundEvents()
        events = [index for index, chunk in enumerate(headers) if chunk.kind == ChunkKind.EVENT]
        return RoundEvents(events[-1] if events else None)

    def _rebuild_yields(self, request: bool, headers: Sequence[ChunkHeader]) -> ContextManager[None]:
        """``clock``: the rebuild yields from the round's start when it has a decision due."""
        if not self._clock_mode:
            return contextlib.nullcontext()
        due = request or any(chunk.kind == ChunkKind.EVENT for chunk in headers) or self.scheduler.periodic_due()
        return self.actions.hold_rebuild() if due else contextlib.nullcontext()

    def _apply(self, items: List[Item], headers: List[ChunkHeader]) -> bool:
        events = self.round_events(headers)
        decided = False
        for index, (item, chunk) in enumerate(zip(items, headers)):
            try:   # one failing chunk or decision must not drop the chunks behind it
                periodic = self._apply_one(item, chunk, events)
                decided = self._decide_events(events.take(index)) or periodic or decided
            except Exception as err:  # noqa: BLE001 - keep the node up; logged once per kind
                self.actions.round_failed(f"failed:{type(err).__name__}",
                                          f"chunk {chunk.seq} or its decision failed: {err}")
        return self._decide_events(events.take(len(items))) or decided

    def _apply_one(self, item: Item, chunk: ChunkHeader, events: RoundEvents, decide: bool = True) -> bool:
        """One chunk in stream order; returns whether it made the periodic decision due before it."""
        epoch, last_seq = self.actions.state_sequence()
        plan = self.scheduler.plan_chunk(chunk, epoch, last_seq, decide)
        if plan.new_sequence:
            self.actions.start_sequence(chunk.epoch, chunk.seq)
        if plan.dropped:
            if plan.fault:
                self.actions.chunk_dropped(plan.fault, plan.fault_detail)
            return False
        if plan.publish_status:
            self.actions.publish_status()
        decided = False
        if plan.periodic_at is not None:
            try:
                self._decide(Trigger.PERIODIC, plan.periodic_at)
                decided = True
            finally:
                self.scheduler.periodic_done(chunk.stamp)
        if plan.add and self.actions.add_chunk(item, chunk.stamp) and plan.decide_event:
            events.added(plan.event_stamp)
        return decided

    def _decide_events(self, decision: Optional[EventDecision]) -> bool:
        if decision is None:
            return False
        self._decide(Trigger.EVENT, decision.stamp, decision.events)
        return True

    def _decide_due(self, request: bool) -> bool:
        decided = False
        if request:
            self._decide(Trigger.REQUEST, None)
            decided = True
        if self.scheduler.take_clock_due():
            self._decide(Trigger.PERIODIC, None)
            decided = True
        return decided

    def _decide(self, trigger: Trigger, stamp: Optional[float], events: int = 0) -> None:
        self.scheduler.decision_started(trigger, events)
        self.actions.decide(trigger, stamp)

    def _append(self, chunks_applied: bool, decided: bool) -> None:
        plan = self.scheduler.plan_append(chunks_applied, decided, self.actions.uncached_tokens())
        if plan is AppendPlan.RUN:   # a decision due meanwhile stops it at a batch boundary
            self.scheduler.append_ended(self.actions.pump(self.scheduler.decision_waiting))
