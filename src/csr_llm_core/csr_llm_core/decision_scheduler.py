"""When the reasoning node decides, appends and checkpoints (plain module, no rclpy).

The node hands every input here and does what the answers say:

- chunks (``submit_chunk``) and decision requests (``request``) arrive on the executor and are
  queued; the decision thread takes them in rounds (``wait_for_work``), in arrival order, so a
  decision's prefix is exactly the chunks up to the one that triggered it;
- ``plan_chunk`` says what one chunk does: dropped (stale epoch, duplicate), a new sequence (a
  restarted aggregator), in ``chunks`` mode the periodic decision due before it, its text added,
  an event decision after it;
- in ``clock`` mode ``take_clock_due`` says when the periodic decision is due on the node clock:
  on a grid of 1/decision_hz, after the chunks queued meanwhile (once), and skipped (counted) when
  the thread was busy past a due time or an event or request decision started after it (that one
  was on a newer state);
- ``plan_append`` says whether the thread appends pending tokens now or leaves them for after
  the decision that is due (``decision_waiting`` stops an append at a batch boundary);
- ``take_checkpoint_due`` says when the logical state is saved.

Every decision the node makes goes through one of these answers, so the order in which they are
taken (events in stream order, then requests, then periodic decisions) lives here; decision_rounds.py
carries a round out in that order.
"""
from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from enum import Enum, IntEnum
from typing import Callable, Deque, Dict, Generic, List, Optional, Tuple, TypeVar

from csr_llm_common.catalogue import PausedTask

from .running_task import RunningTask, RunningTaskHistory

DECISION_TRIGGERS = ("clock", "chunks")
RUNNING_SOURCES = ("router_status", "router_status_at_stamp", "decisions")
POLL_S = 0.01            # the decision thread re-reads the clock this often while idle
REPORT_PERIOD_S = 30.0   # the skipped and coalesced counts are logged at most this often, when they grew
STAMP_EPS = 1e-9         # stamps within this of a due time count as at it

Item = TypeVar("Item")


class Trigger(IntEnum):
    """Why a decision is made (the values of Decision.TRIGGER_*)."""
    PERIODIC = 0
    EVENT = 1
    REQUEST = 2


class ChunkKind(IntEnum):
    """StateChunk.KIND_*."""
    EVENT = 0
    CONTINUOUS = 1
    WATERMARK = 2


@dataclass(frozen=True)
class SchedulePolicy:
    decision_hz: float = 2.0          # periodic decisions; 0 = none (events and requests only)
    trigger: str = "clock"            # clock: on the node clock; chunks: on the chunks' own stamps
    decide_on_request: bool = True
    checkpoint_period_s: float = 0.0  # 0 = no checkpoints while running

    def __post_init__(self) -> None:
        if self.trigger not in DECISION_TRIGGERS:
            raise ValueError(f"decision_trigger must be one of {DECISION_TRIGGERS}, got {self.trigger!r}")

    @property
    def period(self) -> Optional[float]:
        return 1.0 / self.decision_hz if self.decision_hz > 0 else None


@dataclass(frozen=True)
class ChunkHeader:
    """What the schedule reads of a StateChunk."""
    seq: int
    kind: int
    stamp: float
    epoch: int = 0


@dataclass(frozen=True)
class ChunkPlan:
    """What to do with one chunk, in this order."""
    new_sequence: bool = False     # a restarted aggregator: the state's sequence continues at this chunk
    dropped: bool = False          # nothing more to do with it
    fault: str = ""                # the kind of drop to count ("" = a silent drop: an old watermark)
    fault_detail: str = ""
    publish_status: bool = False   # the first due time just became known
    periodic_at: Optional[float] = None   # first the periodic decision stamped at this due time
    add: bool = False              # then its text into the state
    decide_event: bool = False     # then an event decision (once its text is in)
    event_stamp: Optional[float] = None   # that decision's stamp (None = the node clock's now)


@dataclass(frozen=True)
class Round(Generic[Item]):
    """What the decision thread takes at once: the chunks queued since the last round, in order."""
    chunks: List[Item]
    request: bool


@dataclass(frozen=True)
class ScheduleCounts:
    skipped_periodic: int = 0      # periodic due times that made no decision (overtaken or missed)
    coalesced_events: int = 0      # event chunks decided by a later event's decision in their round

    def line(self, since: "ScheduleCounts", seconds: float) -> str:
        return (f"decision schedule: {self.skipped_periodic - since.skipped_periodic} periodic decisions "
                f"skipped, {self.coalesced_events - since.coalesced_events} events decided together with a "
                f"later one in the last {seconds:.0f} s (totals {self.skipped_periodic}, {self.coalesced_events})")


class AppendPlan(Enum):
    RUN = "run"        # append now; a decision that falls due stops it at a batch boundary
    DEFER = "defer"    # append in a round of its own, once no decision waits
    IDLE = "idle"      # nothing to append


class CheckpointSchedule:
    """Every period_s (monotonic), the logical state when it changed since the last checkpoint."""

    def __init__(self, period_s: float, now: float):
        self.period_s = float(period_s)
        self._next = now + self.period_s
        self._saved_seq: Optional[int] = None

    def due(self, now: float, last_seq: Optional[int]) -> bool:
        return self.period_s > 0 and now >= self._next and last_seq != self._saved_seq

    def take_due(self, now: float, last_seq: Optional[int]) -> bool:
        """Whether it is due; if so the next one is a period from now (whether this one succeeds or not)."""
        if not self.due(now, last_seq):
            return False
        self._next = now + self.period_s
        return True

    def saved(self, seq: Optional[int]) -> None:
        self._saved_seq = seq


class DecisionScheduler(Generic[Item]):
    """The decision thread's schedule. Thread-safe: inputs arrive on the executor, the decision
    thread takes rounds and plans, the status timer reads the backlog and the next due time.

    ``clock`` is the node clock (sim time under use_sim_time) for ``clock`` mode; ``append_stops``
    (seconds to the due time -> bool) says whether an append batch started now would delay it."""

    def __init__(self, policy: SchedulePolicy, clock: Callable[[], float],
                 append_stops: Callable[[float], bool] = lambda seconds: seconds <= 0,
                 monotonic: Callable[[], float] = time.monotonic):
        self.policy = policy
        self._period = policy.period
        self._clock = clock
        self._append_stops = append_stops
        self._monotonic = monotonic
        self._checkpoints = CheckpointSchedule(policy.checkpoint_period_s, monotonic())
        self._wake = threading.Condition(threading.RLock())
        self._queue: Deque[Item] = deque()
        self._request = False
        self._stopping = False
        self._preempted = False     # the last append stopped for a due decision: resume it
        self._next_due: Optional[float] = None
        self._deferred = False      # clock mode: the due periodic decision waits for the queued chunks
        self._last_start: Optional[float] = None   # clock mode: when the newest event or request decision began
        self._counts = ScheduleCounts()
        self._reported = (ScheduleCounts(), monotonic())

    # --- inputs (executor) -----------------------------------------------------------------
    def submit_chunk(self, item: Item) -> None:
        with self._wake:
            self._queue.append(item)
            self._wake.notify()

    @property
    def accepts_requests(self) -> bool:
        return self.policy.decide_on_request

    def request(self) -> bool:
        """A decision request (decided in the next round); False when requests are off."""
        if not self.accepts_requests:
            return False
        with self._wake:
            self._request = True
            self._wake.notify()
        return True

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()

    def drain(self) -> List[Item]:
        """The chunks no round took (at stop: they are applied, without deciding, and saved)."""
        with self._wake:
            left, self._queue = list(self._queue), deque()
        return left

    # --- status (timer) --------------------------------------------------------------------
    def backlog(self) -> int:
        with self._wake:
            return len(self._queue)

    def counts(self) -> ScheduleCounts:
        with self._wake:
            return self._counts

    def status(self) -> Dict[str, int]:
        counts = self.counts()
        return {"backlog_chunks": self.backlog(), "skipped_periodic": counts.skipped_periodic,
                "coalesced_events": counts.coalesced_events}

    def counts_report(self) -> str:
        """A log line when the counts grew and REPORT_PERIOD_S passed since the last one, else ""."""
        now = self._monotonic()
        with self._wake:
            since, at = self._reported
            if now - at < REPORT_PERIOD_S or self._counts == since:
                return ""
            self._reported = (self._counts, now)
            return self._counts.line(since, now - at)

    def next_decision_due(self) -> float:
        """The stamp of the next periodic decision in ``chunks`` mode: none before it will come
        (0 = not known yet, or ``clock`` mode)."""
        with self._wake:
            return float(self._next_due or 0.0) if self.policy.trigger == "chunks" else 0.0

    # --- the decision thread ---------------------------------------------------------------
    def wait_for_work(self, last_seq: Optional[int]) -> Optional[Round[Item]]:
        """Block until there is something to do; the round's chunks and request, or None at stop.

        Wakes for queued chunks, a request, the clock's due time, an append to resume (once
        nothing is waiting for it), a checkpoint due (``last_seq``: the state's newest seq)."""
        with self._wake:
            while not (self._stopping or self._queue or self._request or self._clock_due()
                       or (self._preempted and not self.decision_waiting())
                       or self._checkpoints.due(self._monotonic(), last_seq)):
                self._wake.wait(timeout=POLL_S)
            if self._stopping:
                return None
            chunks, self._queue = list(self._queue), deque()
            request, self._request = self._request, False
        return Round(chunks, request)

    def _clock_due(self) -> bool:
        if self.policy.trigger != "clock" or self._period is None:
            return False
        now = self._clock()
        with self._wake:
            if self._next_due is None:
                self._next_due = now + self._period
            return now >= self._next_due

    def periodic_due(self) -> bool:
        """In ``clock`` mode: whether the periodic decision's due time has come."""
        with self._wake:
            return self._clock_due()

    def take_clock_due(self) -> bool:
        """In ``clock`` mode: whether to take the periodic decision now. Due times stay on a grid
        of 1/decision_hz; late decisions do not pile up, they are skipped (counted):

        - chunks queued when it is due go first (once: the next round takes it whatever is queued
          then), so it decides on the newest state;
        - due times that passed while the thread was busy make one decision, not one each;
        - an event or request decision that began at or after the newest of them was on a newer
          state: none then.
        """
        with self._wake:
            if not self._clock_due():
                return False
            if self._queue and not self._deferred:
                self._deferred = True
                return False
            assert self._next_due is not None and self._period is not None
            due, now = self._next_due, self._clock()
            missed = max(0, math.floor((now - due) / self._period + STAMP_EPS))
            newest = due + missed * self._period
            overtaken = self._last_start is not None and self._last_start >= newest - STAMP_EPS
            self._next_due = due + (missed + 1) * self._period
            self._deferred = False
            self._counts = replace(self._counts,
                                   skipped_periodic=self._counts.skipped_periodic + missed + int(overtaken))
            return not overtaken

    def decision_started(self, trigger: Trigger, events: int = 0) -> None:
        """The node starts a decision (``events``: the event chunks it decides)."""
        with self._wake:
            if trigger != Trigger.PERIODIC:
                self._last_start = self._clock()
            if events > 1:
                self._counts = replace(self._counts,
                                       coalesced_events=self._counts.coalesced_events + events - 1)

    def decision_waiting(self) -> bool:
        """Something the decision thread must handle before appending more: a queued chunk (it may
        trigger a decision), a request, the clock's due time within the next batch, or shutdown."""
        with self._wake:
            if self._stopping or self._queue or self._request:
                return True
            if self.policy.trigger != "clock" or self._period is None or self._next_due is None:
                return False
            return self._append_stops(self._next_due - self._clock())

    def plan_chunk(self, chunk: ChunkHeader, epoch: int, last_seq: Optional[int], decide: bool = True) -> ChunkPlan:
        """What one chunk does, given the state's sequence (``epoch``, ``last_seq``).

        In ``chunks`` mode a chunk or watermark stamped at or after the next due time (a multiple
        of 1/decision_hz) first triggers the periodic decision on the chunks before it, stamped
        with that due time; an event chunk then triggers one on the chunks up to and including it.
        Call ``periodic_done`` after that periodic decision (even a failed one). ``decide`` False
        (at stop): no decision, the due time moves past the chunk at once.
        """
        new_sequence = bool(chunk.epoch) and chunk.epoch > epoch
        if chunk.epoch and chunk.epoch < epoch:
            return ChunkPlan(dropped=True, fault="stale_epoch",
                             fault_detail=f"seq {chunk.seq} of epoch {chunk.epoch}, now {epoch}")
        # a new sequence continues at this chunk's seq, so it is never a duplicate there
        if not new_sequence and last_seq is not None and chunk.seq <= last_seq:
            # already in the state: the aggregator's history after a (warm) restart, or a duplicate;
            # a watermark carries the next chunk's seq, so old ones are dropped here too
            if chunk.kind == ChunkKind.WATERMARK:
                return ChunkPlan(dropped=True)
            return ChunkPlan(dropped=True, fault="duplicate_chunk",
                             fault_detail=f"seq {chunk.seq} (newest in the state: {last_seq})")
        publish_status, periodic_at = self._chunk_due(chunk.stamp, decide)
        is_event = chunk.kind == ChunkKind.EVENT
        return ChunkPlan(new_sequence=new_sequence, publish_status=publish_status, periodic_at=periodic_at,
                         add=chunk.kind != ChunkKind.WATERMARK, decide_event=is_event and decide,
                         event_stamp=chunk.stamp if self.policy.trigger == "chunks" else None)

    def _chunk_due(self, stamp: float, decide: bool) -> Tuple[bool, Optional[float]]:
        """(publish_status, periodic_at) for a chunk stamped ``stamp`` in ``chunks`` mode."""
        if self.policy.trigger != "chunks" or self._period is None:
            return False, None
        with self._wake:
            if self._next_due is None:
                # a lockstepped sim need not wait for a decision to learn the first due time
                self._next_due = (math.floor(stamp / self._period + STAMP_EPS) + 1) * self._period
                return True, None
            if stamp < self._next_due - STAMP_EPS:
                return False, None
            if not decide:
                self.periodic_done(stamp)
                return False, None
            return False, self._next_due

    def periodic_done(self, stamp: float) -> None:
        """The periodic decision planned for the chunk stamped ``stamp`` is out (or failed): the due
        times up to that stamp are past. Advanced only now: CsrStatus.next_decision_due tells a
        lockstepped peer that no decision before it will come, so it must not run ahead of one."""
        with self._wake:
            assert self._next_due is not None and self._period is not None
            while self._next_due <= stamp + STAMP_EPS:
                self._next_due += self._period

    def plan_append(self, chunks_applied: bool, decided: bool, uncached_tokens: int) -> AppendPlan:
        """After a round: append the pending tokens now, in a later round, or not at all.

        Chunks that made no decision, an append stopped earlier, or tokens not yet in the cache are
        appended now unless a decision is waiting; otherwise (and after chunks that made a decision)
        the append waits for a round of its own, once nothing waits for the thread."""
        with self._wake:
            if ((chunks_applied and not decided) or self._preempted or uncached_tokens) \
                    and not self.decision_waiting():
                return AppendPlan.RUN
            if chunks_applied or uncached_tokens:
                self._preempted = True
            return AppendPlan.DEFER if self._preempted else AppendPlan.IDLE

    def append_ended(self, completed: bool) -> None:
        """An append ran: resumed in a later round unless it completed."""
        with self._wake:
            self._preempted = not completed

    def take_checkpoint_due(self, last_seq: Optional[int]) -> bool:
        return self._checkpoints.take_due(self._monotonic(), last_seq)

    def checkpointed(self, seq: Optional[int]) -> None:
        self._checkpoints.saved(seq)


class RunningTaskSource:
    """What a decision's suffix calls the running task, from ``running_source``:

    - router_status: the router's newest report, whenever it arrived;
    - router_status_at_stamp: the router's newest report stamped before the decision's stamp;
    - decisions: this node's own decisions, with the router's pause rule (``paused_after``).
    """

    def __init__(self, source: str,
                 paused_after: Callable[[Optional[PausedTask], Optional[PausedTask], str], Optional[PausedTask]]):
        if source not in RUNNING_SOURCES:
            raise ValueError(f"running_source must be one of {RUNNING_SOURCES}, got {source!r}")
        self.source = source
        self._paused_after = paused_after
        self._history = RunningTaskHistory()
        self._lock = threading.Lock()
        self._task = RunningTask()
        self._arguments: dict = {}

    @property
    def reads_reports_by_stamp(self) -> bool:
        return self.source == "router_status_at_stamp"

    def router_reported(self, stamp: float, task: RunningTask) -> None:
        if self.source == "decisions":
            return
        if self.reads_reports_by_stamp:
            self._history.report(stamp, task)
        else:
            with self._lock:
                self._task = task

    def for_decision(self, stamp: Optional[float]) -> RunningTask:
        """The running task a decision stamped ``stamp`` (None: the node clock's now) is made on."""
        if not self.reads_reports_by_stamp:
            with self._lock:
                return self._task
        task = self._history.before(stamp) if stamp is not None else self._history.latest()
        with self._lock:
            self._task = task
        return task

    def decided(self, intent: str, arguments: dict) -> None:
        """This node decided ``intent``: under ``decisions`` it is the running task now."""
        if self.source != "decisions":
            return
        with self._lock:
            ran = PausedTask(self._task.intent, self._arguments) if self._task.intent else None
            paused = self._paused_after(ran, self._task.paused, intent)
            self._task = RunningTask(intent, self._task.interrupt_depth, paused)
            self._arguments = dict(arguments)
