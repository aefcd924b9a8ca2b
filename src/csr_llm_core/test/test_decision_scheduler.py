"""The reasoning node's decision schedule, without rclpy: what is due when, in which order, and that
no chunk or request is lost between the executor and the decision thread."""
import contextlib
import logging
import threading

import pytest

from csr_llm_common.catalogue import PausedTask
from csr_llm_core.asr_rebuilder import AsrRebuilder
from csr_llm_core.decision_rounds import DecisionRounds
from csr_llm_core.decision_scheduler import AppendPlan, ChunkHeader, ChunkKind, DecisionScheduler, \
    RunningTaskSource, ScheduleCounts, SchedulePolicy, Trigger
from csr_llm_core.running_task import RunningTask


class FakeClock:
    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def scheduler(clock=None, monotonic=None, **policy):
    return DecisionScheduler(SchedulePolicy(**policy), clock=clock or FakeClock(),
                             monotonic=monotonic or FakeClock(0.0))


def event(seq, stamp, epoch=0):
    return ChunkHeader(seq, ChunkKind.EVENT, stamp, epoch)


def continuous(seq, stamp, epoch=0):
    return ChunkHeader(seq, ChunkKind.CONTINUOUS, stamp, epoch)


def watermark(seq, stamp):
    return ChunkHeader(seq, ChunkKind.WATERMARK, stamp)


class FakeNode:
    """The node's side of a round (decision_rounds.RoundActions) over ChunkHeader items: the state is
    the list of seqs added; each decision is logged with the newest seq it saw and whether the
    rebuild was held; a decision advances ``clock`` by ``decision_s`` and may run ``during_decision``."""

    def __init__(self, clock=None, decision_s=0.0):
        self.clock = clock
        self.decision_s = decision_s
        self.during_decision = None
        self.state = []
        self.log = []
        self.held = 0

    def decisions(self, trigger=None):
        return [entry for entry in self.log if entry[0] == "decide" and trigger in (None, entry[1])]

    def chunk_header(self, item):
        return item

    def state_sequence(self):
        return 0, (self.state[-1] if self.state else None)

    def start_sequence(self, epoch, seq):
        self.log.append(("sequence", epoch, seq))

    def chunk_dropped(self, fault, detail):
        self.log.append(("dropped", fault))

    def publish_status(self):
        self.log.append(("status",))

    def add_chunk(self, item, stamp):
        self.state.append(item.seq)
        self.log.append(("add", item.seq, self.held))
        return True

    def decide(self, trigger, stamp):
        self.log.append(("decide", Trigger(trigger).name, stamp, self.state[-1] if self.state else None, self.held))
        if self.clock is not None:
            self.clock.now += self.decision_s
        if self.during_decision is not None:
            self.during_decision()

    def pump(self, preempt):
        self.log.append(("pump",))
        return True

    def uncached_tokens(self):
        return 0

    def round_failed(self, kind, detail):
        self.log.append(("failed", kind, detail))

    @contextlib.contextmanager
    def hold_rebuild(self):
        self.held += 1
        try:
            yield
        finally:
            self.held -= 1


def run_rounds(s, node, batches):
    """Each batch queued, then the rounds that take it (a round takes whatever is queued)."""
    rounds = DecisionRounds(s, node, sleep=lambda seconds: None)
    for batch in batches:
        for chunk in batch:
            s.submit_chunk(chunk)
        while s.backlog():
            rounds.run(s.wait_for_work(last_seq=None))
    return rounds


def test_trigger_values_are_the_decision_messages():
    assert (Trigger.PERIODIC, Trigger.EVENT, Trigger.REQUEST) == (0, 1, 2)
    assert (ChunkKind.EVENT, ChunkKind.CONTINUOUS, ChunkKind.WATERMARK) == (0, 1, 2)


def test_clock_mode_decides_every_period_and_late_decisions_are_skipped_not_piled_up():
    clock = FakeClock(100.0)
    s = scheduler(clock, decision_hz=2.0)
    assert not s.take_clock_due()              # the first due time is a period after the first look
    clock.now = 100.49
    assert not s.take_clock_due()
    clock.now = 100.5
    assert s.take_clock_due() and not s.take_clock_due()
    assert s.counts().skipped_periodic == 0
    clock.now = 103.2            # after a slow decision: one decision (for 103.0), the four due times before it skipped
    assert [s.take_clock_due() for _ in range(3)] == [True, False, False]
    assert s.counts().skipped_periodic == 4
    clock.now = 103.49           # the due times stay on the grid
    assert not s.take_clock_due()
    clock.now = 103.5
    assert s.take_clock_due()
    assert s.next_decision_due() == 0.0        # only chunks mode announces its due time
    assert s.status() == {"backlog_chunks": 0, "skipped_periodic": 4, "coalesced_events": 0}
    from csr_llm_core.status_message import SAME_NAME, csr_status_message
    reasoner_status = {name: 0 for name in SAME_NAME} | {"primary_resource": "R1", "reconciling": False,
                                                         "cached_tokens": -1, "last_chunk_seq": -1,
                                                         "down_resources": ("R2",)}
    msg = csr_status_message(reasoner_status, s, dropped_chunks=2, last_decision_id=7)
    assert (msg.skipped_periodic, msg.coalesced_events, msg.backlog_chunks) == (4, 0, 0)    # published as counted
    assert (msg.last_chunk_seq, msg.down_resources, msg.dropped_chunks, msg.last_decision_id) == (0, ["R2"], 2, 7)


def test_no_periodic_decisions_at_zero_hz_or_on_the_clock_in_chunks_mode():
    clock = FakeClock(0.0)
    for s in (scheduler(clock, decision_hz=0.0), scheduler(clock, trigger="chunks")):
        clock.now += 100.0
        assert not s.take_clock_due()


def test_a_round_takes_every_queued_chunk_in_order_and_the_request():
    s = scheduler()
    for seq in range(5):
        s.submit_chunk(seq)
    assert s.request() and s.backlog() == 5
    work = s.wait_for_work(last_seq=None)
    assert work.chunks == [0, 1, 2, 3, 4] and work.request
    assert s.backlog() == 0
    s.submit_chunk(5)
    work = s.wait_for_work(last_seq=None)
    assert work.chunks == [5] and not work.request


def test_requests_are_ignored_when_off():
    s = scheduler(decide_on_request=False)
    assert not s.accepts_requests and not s.request()
    assert not s.decision_waiting()


def test_stop_ends_the_rounds_and_keeps_the_queued_chunks_for_the_node_to_save():
    s = scheduler(decision_hz=0.0)
    s.submit_chunk("a")
    s.submit_chunk("b")
    s.stop()
    assert s.wait_for_work(last_seq=None) is None
    assert s.drain() == ["a", "b"] and s.drain() == []


def test_nothing_is_lost_between_a_producer_and_the_decision_thread():
    s = scheduler(decision_hz=0.0)
    taken = []

    def decision_thread():
        while (work := s.wait_for_work(last_seq=None)) is not None:
            taken.extend(work.chunks)

    thread = threading.Thread(target=decision_thread)
    thread.start()
    for seq in range(2000):
        s.submit_chunk(seq)
    s.stop()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert taken + s.drain() == list(range(2000))


def test_the_decision_thread_wakes_for_a_chunk_submitted_while_it_waits():
    s = scheduler(decision_hz=0.0)
    rounds = []
    thread = threading.Thread(target=lambda: rounds.append(s.wait_for_work(last_seq=None)))
    thread.start()
    s.submit_chunk(7)
    thread.join(timeout=5)
    assert rounds[0].chunks == [7]


def test_chunks_mode_decides_on_the_chunk_stamps_before_the_chunk_at_the_due_time():
    s = scheduler(trigger="chunks", decision_hz=2.0)
    first = s.plan_chunk(continuous(0, 10.2), epoch=0, last_seq=None)
    assert first.publish_status and first.periodic_at is None and first.add and not first.decide_event
    assert s.next_decision_due() == pytest.approx(10.5)
    plan = s.plan_chunk(continuous(1, 10.4), epoch=0, last_seq=0)
    assert plan.periodic_at is None and not plan.publish_status
    plan = s.plan_chunk(event(2, 11.7), epoch=0, last_seq=1)
    # first the periodic decision on the chunks before it, stamped at the due time, then the event's
    assert plan.periodic_at == pytest.approx(10.5) and plan.add and plan.decide_event
    assert plan.event_stamp == 11.7
    assert s.next_decision_due() == pytest.approx(10.5)     # not before that decision is out
    s.periodic_done(11.7)
    assert s.next_decision_due() == pytest.approx(12.0)     # the due times the chunk passed are skipped


def test_a_chunk_exactly_at_the_due_time_triggers_it():
    s = scheduler(trigger="chunks", decision_hz=4.0)
    s.plan_chunk(continuous(0, 1.0), epoch=0, last_seq=None)
    assert s.next_decision_due() == pytest.approx(1.25)
    plan = s.plan_chunk(continuous(1, 1.25 - 1e-10), epoch=0, last_seq=0)
    assert plan.periodic_at == pytest.approx(1.25)
    s.periodic_done(1.25 - 1e-10)
    assert s.next_decision_due() == pytest.approx(1.5)


def test_a_watermark_triggers_the_due_decision_but_adds_nothing():
    s = scheduler(trigger="chunks", decision_hz=2.0)
    s.plan_chunk(continuous(0, 0.1), epoch=0, last_seq=None)
    plan = s.plan_chunk(ChunkHeader(1, ChunkKind.WATERMARK, 0.5), epoch=0, last_seq=0)
    assert plan.periodic_at == pytest.approx(0.5) and not plan.add and not plan.decide_event


def test_at_stop_chunks_only_go_into_the_state_and_the_due_time_moves_past_them():
    s = scheduler(trigger="chunks", decision_hz=2.0)
    s.plan_chunk(continuous(0, 0.1), epoch=0, last_seq=None)
    plan = s.plan_chunk(event(1, 1.6), epoch=0, last_seq=0, decide=False)
    assert plan.add and plan.periodic_at is None and not plan.decide_event
    assert s.next_decision_due() == pytest.approx(2.0)


def test_clock_mode_events_decide_at_once_on_the_node_clock():
    s = scheduler(decision_hz=2.0)
    plan = s.plan_chunk(event(0, 5.0), epoch=0, last_seq=None)
    assert plan.decide_event and plan.event_stamp is None and plan.periodic_at is None
    assert not s.plan_chunk(continuous(1, 5.1), epoch=0, last_seq=0).decide_event


def test_duplicates_and_stale_epochs_are_dropped_and_a_new_epoch_continues_the_state():
    s = scheduler()
    duplicate = s.plan_chunk(event(3, 1.0), epoch=0, last_seq=3)
    assert duplicate.dropped and duplicate.fault == "duplicate_chunk" and not duplicate.decide_event
    old_watermark = s.plan_chunk(ChunkHeader(2, ChunkKind.WATERMARK, 1.0), epoch=0, last_seq=3)
    assert old_watermark.dropped and not old_watermark.fault
    stale = s.plan_chunk(event(9, 1.0, epoch=5), epoch=7, last_seq=3)
    assert stale.dropped and stale.fault == "stale_epoch" and "epoch 5, now 7" in stale.fault_detail
    restarted = s.plan_chunk(event(0, 1.0, epoch=9), epoch=7, last_seq=40)   # seq 0 again: not a duplicate
    assert restarted.new_sequence and not restarted.dropped and restarted.decide_event
    same = s.plan_chunk(event(41, 1.0, epoch=7), epoch=7, last_seq=40)
    assert not same.new_sequence and not same.dropped
    unknown = s.plan_chunk(event(41, 1.0, epoch=0), epoch=7, last_seq=40)     # epoch 0: one sequence only
    assert not unknown.new_sequence and not unknown.dropped


def test_a_dropped_chunk_does_not_trigger_the_due_decision():
    s = scheduler(trigger="chunks", decision_hz=2.0)
    s.plan_chunk(continuous(0, 0.1), epoch=0, last_seq=None)
    assert s.plan_chunk(continuous(0, 3.0), epoch=0, last_seq=0).periodic_at is None
    assert s.next_decision_due() == pytest.approx(0.5)


def test_appending_waits_for_a_due_decision_and_resumes_after_it():
    clock = FakeClock(0.0)
    batch_s = 0.2
    s = DecisionScheduler(SchedulePolicy(decision_hz=2.0), clock=clock,
                          append_stops=lambda seconds: seconds < batch_s, monotonic=FakeClock(0.0))
    assert not s.take_clock_due()                                   # due at 0.5
    assert s.plan_append(chunks_applied=True, decided=False, uncached_tokens=0) is AppendPlan.RUN
    assert not s.decision_waiting()
    clock.now = 0.35                                                # a batch now would run into it
    assert s.decision_waiting()
    s.append_ended(completed=False)                                 # stopped at a batch boundary
    assert s.plan_append(chunks_applied=False, decided=False, uncached_tokens=40) is AppendPlan.DEFER
    assert s.plan_append(chunks_applied=False, decided=False, uncached_tokens=0) is AppendPlan.DEFER
    clock.now = 0.5
    assert s.take_clock_due()
    assert s.plan_append(chunks_applied=False, decided=True, uncached_tokens=40) is AppendPlan.RUN  # resumed
    s.append_ended(completed=True)
    assert s.plan_append(chunks_applied=False, decided=True, uncached_tokens=0) is AppendPlan.IDLE
    # chunks that made a decision: their append waits for a round of its own
    assert s.plan_append(chunks_applied=True, decided=True, uncached_tokens=0) is AppendPlan.DEFER
    assert s.plan_append(chunks_applied=False, decided=False, uncached_tokens=0) is AppendPlan.RUN


def test_a_queued_chunk_or_request_stops_an_append():
    s = scheduler(decision_hz=0.0)
    assert not s.decision_waiting()
    s.submit_chunk(1)
    assert s.decision_waiting()
    assert s.plan_append(chunks_applied=True, decided=False, uncached_tokens=5) is AppendPlan.DEFER
    s.wait_for_work(last_seq=None)
    s.request()
    assert s.decision_waiting()


def test_a_stopped_append_wakes_the_thread_once_nothing_waits_for_it():
    clock = FakeClock(0.0)
    s = DecisionScheduler(SchedulePolicy(decision_hz=0.0), clock=clock, monotonic=FakeClock(0.0))
    s.submit_chunk(1)
    s.plan_append(chunks_applied=True, decided=False, uncached_tokens=5)    # deferred: a chunk waits
    assert s.wait_for_work(last_seq=None).chunks == [1]
    assert s.wait_for_work(last_seq=None).chunks == []       # a round of its own, to append


def test_checkpoints_are_due_every_period_when_the_state_changed():
    mono = FakeClock(0.0)
    s = scheduler(monotonic=mono, checkpoint_period_s=10.0, decision_hz=0.0)
    assert not s.take_checkpoint_due(last_seq=4)
    mono.now = 10.0
    assert s.wait_for_work(last_seq=4) is not None             # wakes the thread
    assert s.take_checkpoint_due(last_seq=4) and not s.take_checkpoint_due(last_seq=4)
    s.checkpointed(4)
    mono.now = 25.0
    assert not s.take_checkpoint_due(last_seq=4)               # nothing new to save
    assert s.take_checkpoint_due(last_seq=5)
    mono.now = 30.0
    assert not s.take_checkpoint_due(last_seq=6)               # a period after the last one
    off = scheduler(monotonic=mono, checkpoint_period_s=0.0)
    mono.now = 1e6
    assert not off.take_checkpoint_due(last_seq=1)


def test_a_failed_checkpoint_is_retried_a_period_later():
    mono = FakeClock(0.0)
    s = scheduler(monotonic=mono, checkpoint_period_s=10.0)
    mono.now = 10.0
    assert s.take_checkpoint_due(last_seq=1)                   # ... and it failed: no checkpointed()
    mono.now = 19.0
    assert not s.take_checkpoint_due(last_seq=1)
    mono.now = 20.0
    assert s.take_checkpoint_due(last_seq=1)


def test_unknown_modes_are_refused():
    with pytest.raises(ValueError, match="decision_trigger"):
        SchedulePolicy(trigger="sometimes")
    with pytest.raises(ValueError, match="running_source"):
        RunningTaskSource("guess", paused_after=lambda ran, paused, new: None)


def test_the_running_task_from_the_routers_newest_report():
    running = RunningTaskSource("router_status", paused_after=lambda ran, paused, new: None)
    assert running.for_decision(None) == RunningTask()
    running.router_reported(5.0, RunningTask("fetch_box", 1))
    running.router_reported(1.0, RunningTask("wave"))          # the newest report, whatever its stamp
    assert running.for_decision(3.0) == RunningTask("wave")
    running.decided("idle", {})
    assert running.for_decision(None) == RunningTask("wave")


def test_the_running_task_as_of_the_decisions_stamp():
    running = RunningTaskSource("router_status_at_stamp", paused_after=lambda ran, paused, new: None)
    assert running.reads_reports_by_stamp
    running.router_reported(1.0, RunningTask("wave"))
    running.router_reported(2.0, RunningTask("fetch_box"))
    assert running.for_decision(2.0) == RunningTask("wave")     # stamped before the decision's
    assert running.for_decision(2.5) == RunningTask("fetch_box")
    assert running.for_decision(None) == RunningTask("fetch_box")


def test_the_running_task_from_this_nodes_own_decisions():
    calls = []

    def paused_after(ran, paused, new):
        calls.append((ran, paused, new))
        return ran if new == "answer_door" else paused

    running = RunningTaskSource("decisions", paused_after=paused_after)
    running.router_reported(1.0, RunningTask("wave"))          # the router is not asked
    assert running.for_decision(None) == RunningTask()
    running.decided("fetch_box", {"zone": "a"})
    assert running.for_decision(None) == RunningTask("fetch_box")
    running.decided("answer_door", {})
    assert running.for_decision(None) == RunningTask("answer_door", 0, PausedTask("fetch_box", {"zone": "a"}))
    assert calls[0] == (None, None, "fetch_box")


# --- rounds: the order decisions are taken in ----------------------------------------------------
STREAM = [continuous(0, 0.1), event(1, 0.3), continuous(2, 0.6), event(3, 0.7), watermark(4, 1.0),
          event(4, 1.2), event(5, 1.3)]
# chunks mode, 2 Hz: every boundary in stream order, stamped with the chunks' own time
CHUNKS_MODE_LOG = [("status",), ("add", 0, 0),
                   ("add", 1, 0), ("decide", "EVENT", 0.3, 1, 0),
                   ("decide", "PERIODIC", 0.5, 1, 0), ("add", 2, 0),
                   ("add", 3, 0), ("decide", "EVENT", 0.7, 3, 0),
                   ("decide", "PERIODIC", 1.0, 3, 0),
                   ("add", 4, 0), ("decide", "EVENT", 1.2, 4, 0),
                   ("add", 5, 0), ("decide", "EVENT", 1.3, 5, 0)]


@pytest.mark.parametrize("split", [[7], [1, 1, 1, 1, 1, 1, 1], [2, 3, 2], [4, 3]])
def test_chunks_mode_decides_on_every_boundary_in_order_however_the_stream_is_queued(split):
    s = scheduler(trigger="chunks", decision_hz=2.0)
    node = FakeNode()
    batches, start = [], 0
    for size in split:
        batches.append(STREAM[start:start + size])
        start += size
    run_rounds(s, node, batches)
    assert [entry for entry in node.log if entry[0] != "pump"] == CHUNKS_MODE_LOG   # never held, never coalesced
    assert s.counts().skipped_periodic == 0 and s.counts().coalesced_events == 0


def test_at_stop_the_queued_chunks_go_into_the_state_without_a_decision():
    s = scheduler(trigger="chunks", decision_hz=2.0)
    node = FakeNode()
    for chunk in STREAM:
        s.submit_chunk(chunk)
    s.stop()
    DecisionRounds(s, node).apply_at_stop(s.drain())
    assert node.state == [0, 1, 2, 3, 4, 5] and not node.decisions()


def test_clock_mode_an_event_outranks_the_pending_periodic_decision():
    clock = FakeClock(100.0)
    s = scheduler(clock, decision_hz=2.0)
    assert not s.periodic_due()                # due at 100.5
    clock.now = 100.6                          # due, and a backlog with two events behind it
    node = FakeNode(clock)
    run_rounds(s, node, [[continuous(0, 1.0), event(1, 1.1), continuous(2, 1.2), event(3, 1.3), continuous(4, 1.4)]])
    # the chunks up to the last event, one event decision on them (stamped now), then the rest;
    # the periodic decision it overtook is skipped and counted; the rebuild yields meanwhile
    assert [entry for entry in node.log if entry[0] != "pump"] == [
        ("add", 0, 1), ("add", 1, 1), ("add", 2, 1), ("add", 3, 1), ("decide", "EVENT", None, 3, 1), ("add", 4, 1)]
    assert s.counts().skipped_periodic == 1 and s.counts().coalesced_events == 1
    assert s.status()["coalesced_events"] == 1


def test_clock_mode_a_periodic_decision_due_during_a_decision_comes_after_on_the_newest_state():
    clock = FakeClock(100.0)
    s = scheduler(clock, decision_hz=2.0)
    assert not s.periodic_due()                # due at 100.5
    node = FakeNode(clock, decision_s=0.7)
    node.during_decision = lambda: s.submit_chunk(continuous(1, 2.0)) if len(node.state) == 1 else None
    run_rounds(s, node, [[event(0, 1.9)]])
    # due at 100.5 while the event decision ran: taken once the chunk that came meanwhile is in
    assert node.decisions() == [("decide", "EVENT", None, 0, 1), ("decide", "PERIODIC", None, 1, 1)]
    assert s.counts().skipped_periodic == 0


def test_clock_mode_periodic_decisions_that_fall_due_while_busy_are_skipped_and_counted():
    clock = FakeClock(100.0)
    s = scheduler(clock, decision_hz=2.0)
    assert not s.periodic_due()                # due at 100.5, 101.0, ...
    clock.now = 100.5
    node = FakeNode(clock, decision_s=1.2)     # each decision outlasts two periods
    rounds = DecisionRounds(s, node)
    while clock.now < 110.0:
        rounds.run(s.wait_for_work(last_seq=None))
    decisions = node.decisions("PERIODIC")
    assert len(decisions) == 8                 # one each time the thread is free, never back to back
    assert s.take_clock_due()                  # one more now: every due time up to now is decided or counted
    due_times = int((clock.now - 100.5) // 0.5) + 1
    assert len(decisions) + 1 + s.counts().skipped_periodic == due_times


@pytest.mark.parametrize("decision_hz", [0.0, 2.0])
def test_a_backlog_drains_in_coalesced_rounds_with_every_chunk_once_and_in_order(decision_hz):
    clock = FakeClock(100.0)
    s = scheduler(clock, decision_hz=decision_hz)
    node = FakeNode(clock, decision_s=0.4)
    stream = [event(seq, seq * 0.01) if seq % 5 == 0 else continuous(seq, seq * 0.01) for seq in range(1000)]
    burst = iter(range(1, 1000, 50))

    def fifty_more():                           # the burst keeps coming while the thread decides
        start = next(burst, None)
        for chunk in stream[start:start + 50] if start is not None else []:
            s.submit_chunk(chunk)

    node.during_decision = fifty_more
    run_rounds(s, node, [[stream[0]]])
    assert node.state == list(range(1000))     # gap-free: none lost, none twice
    assert not [entry for entry in node.log if entry[0] in ("dropped", "failed")]
    events = node.decisions("EVENT")
    # one event decision per round, right after its newest event; every event decided, coalesced ones counted
    assert len(events) + s.counts().coalesced_events == 200
    assert all(entry[3] % 5 == 0 for entry in events) and events[-1][3] == 995
    if not decision_hz:        # a round per decision: the fifty chunks that came during it
        assert [entry[3] for entry in events] == [0] + list(range(50, 951, 50)) + [995]
    assert len(node.decisions()) <= 22


def test_clock_mode_holds_the_rebuild_only_while_a_decision_is_due():
    clock = FakeClock(100.0)
    s = scheduler(clock, decision_hz=2.0)
    node = FakeNode(clock)
    run_rounds(s, node, [[continuous(0, 1.0)]])           # nothing due: appends beside the rebuild
    assert node.log[0] == ("add", 0, 0)
    s.request()
    run_rounds(s, node, [[continuous(1, 1.1)]])
    assert ("add", 1, 1) in node.log and node.decisions() == [("decide", "REQUEST", None, 1, 1)]


def test_a_failed_decision_loses_no_chunk_and_the_next_round_goes_on():
    s = scheduler(decision_hz=0.0)
    node = FakeNode()

    def refuse():
        if len(node.decisions()) == 1:
            raise RuntimeError("engine gone")
    node.during_decision = refuse
    run_rounds(s, node, [[event(0, 1.0), continuous(1, 1.1)], [event(2, 1.2)]])
    assert node.state == [0, 1, 2] and len(node.decisions("EVENT")) == 2
    assert [entry[1] for entry in node.log if entry[0] == "failed"] == ["failed:RuntimeError"]


def test_a_due_decision_pauses_the_rebuild_until_the_decision_inside_it_ends():
    rebuilder = AsrRebuilder(None, view=None, roles=None, health=None, log=logging.getLogger("test"))
    assert not rebuilder.paused
    with rebuilder.decision_running():               # due
        with rebuilder.decision_running():           # the decision
            assert rebuilder.paused
        assert rebuilder.paused
    assert not rebuilder.paused
    with rebuilder.decision_running(pause=False):     # rebuild_pause off: it runs beside
        assert not rebuilder.paused


def test_the_counts_are_logged_at_most_every_report_period_when_they_grew():
    clock, mono = FakeClock(100.0), FakeClock(0.0)
    s = scheduler(clock, monotonic=mono, decision_hz=2.0)
    s.periodic_due()
    clock.now = 102.0
    assert s.take_clock_due()                 # one decision for 102.0; 100.5, 101.0 and 101.5 skipped
    assert s.counts_report() == ""            # not a report period yet
    mono.now = 30.0
    assert "3 periodic decisions skipped" in s.counts_report()
    mono.now = 70.0
    assert s.counts_report() == ""            # nothing new


def test_clock_mode_an_event_decision_overtakes_only_the_due_times_it_began_after():
    clock = FakeClock(100.0)
    s = scheduler(clock, decision_hz=2.0)
    s.periodic_due()                           # due at 100.5
    clock.now = 100.6
    s.decision_started(Trigger.EVENT, events=3)
    clock.now = 102.2                          # a long event decision: 101.0 ... 102.0 fell due meanwhile
    assert s.take_clock_due()                  # one on the newest state; 100.5 overtaken, 101.0, 101.5 missed
    assert s.counts() == ScheduleCounts(skipped_periodic=3, coalesced_events=2)
