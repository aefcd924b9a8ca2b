"""OrderGoal: one operator order from its event line to DONE / FAILED / REFUSED / CANCELLED (plain)."""
import pytest

from csr_llm_core.order_goal import (DecisionSample, OrderConfig, OrderGoal, Outcome, RouterReport, cancel_line,
                                     order_line, task_intents)
from csr_llm_core.task_situations import RouterSample

CONFIG = OrderConfig(timeout_s=60.0, start_timeout_s=5.0)


@pytest.fixture
def goal(catalogue):
    order = OrderGoal("go to the warehouse", task_intents(catalogue), started=100.0, config=CONFIG)
    order.on_chunk(7, "[t=1.0] events: operator: go to the warehouse", is_event=True)
    return order


def report(intent="", last_id=-1, **fields):
    return RouterReport(RouterSample(active_intent=intent, **fields), last_decision_id=last_id)


def decide(goal, intent, decision_id=3, seq=7, event=False, now=101.0):
    return goal.on_decision(DecisionSample(decision_id, intent, last_chunk_seq=seq, event_triggered=event), now)


def start(goal, intent="move_to"):
    assert decide(goal, intent) is None
    assert goal.on_router(report("", last_id=3)) is None            # accepted, not started yet
    assert goal.on_router(report(intent, last_id=3, active_sub_task="drive")) is None
    assert goal.feedback().state == f"running {intent} (sub-task drive)"


def test_lines():
    assert order_line("operator", "go") == "operator: go"
    assert order_line("", "go") == "go"
    assert cancel_line("operator", "go") == "operator: cancel the order 'go', stay where you are"


def test_task_intents(catalogue):
    is_task = task_intents(catalogue)
    assert [i for i in ("move_to", "pick_object", "open_door", "stop", "hold_position", "back_off", "dance")
            if is_task(i)] == ["move_to", "pick_object", "open_door"]


def test_done_when_the_started_task_finishes(goal):
    assert goal.feedback().state == "waiting for a decision"
    start(goal)
    fb = goal.feedback()
    assert (fb.decision_id, fb.decision_intent, fb.running_task) == (3, "move_to", "move_to")
    result = goal.on_router(report("", last_id=3))
    assert (result.outcome, result.intent) == (Outcome.DONE, "move_to")
    assert goal.on_router(report("move_to", last_id=4)) is result     # ended: stays ended


def test_only_decisions_after_the_order_count(catalogue):
    goal = OrderGoal("go to the warehouse", task_intents(catalogue), 100.0, CONFIG)
    assert decide(goal, "stop", decision_id=1, seq=5, event=True) is None   # before the order's chunk
    goal.on_chunk(6, "[t] events: somebody else", is_event=True)
    goal.on_chunk(7, "operator: go to the warehouse", is_event=False)        # not an event chunk
    goal.on_chunk(8, "operator: go to the warehouse", is_event=True)
    assert decide(goal, "stop", decision_id=2, seq=5) is None               # periodic, prefix without it
    assert goal.feedback().decision_intent == ""
    assert decide(goal, "move_to", decision_id=3, seq=5, event=True) is None   # the event decision: the order's
    assert goal.feedback().state == "waiting for the router to start move_to"


def test_decision_whose_prefix_holds_the_chunk(goal):
    assert decide(goal, "move_to", seq=9) is None
    assert goal.feedback().decision_intent == "move_to"


def test_without_an_aggregator_the_first_event_decision_counts(catalogue):
    goal = OrderGoal("go", task_intents(catalogue), 100.0, CONFIG, expects_chunk=False)
    assert decide(goal, "move_to", seq=0, event=False) is None
    assert goal.feedback().decision_intent == ""
    decide(goal, "move_to", seq=0, event=True)
    assert goal.feedback().decision_intent == "move_to"


@pytest.mark.parametrize("intent", ["hold_position", "stop", "back_off", "dance"])
def test_refused_when_the_decision_is_no_task(goal, intent):
    result = decide(goal, intent)
    assert result.outcome == Outcome.REFUSED and intent in result.reason and result.intent == intent


@pytest.mark.parametrize("field,words", [("unknown_scene_count", "unknown scene"), ("failsafe_count", "fail-safe")])
def test_failed_on_unknown_scene_or_failsafe(goal, field, words):
    start(goal)
    result = goal.on_router(report("move_to", last_id=3, **{field: 1}))
    assert result.outcome == Outcome.FAILED and words in result.reason


def test_paused_then_resumed_then_done(goal):
    start(goal)
    assert goal.on_router(report("stop", last_id=4, paused_intent="move_to")) is None
    assert goal.feedback().state == "move_to paused by stop"
    assert goal.on_router(report("move_to", last_id=5)) is None
    assert goal.on_router(report("", last_id=5)).outcome == Outcome.DONE


def test_failsafe_while_paused_fails(goal):
    start(goal)
    goal.on_router(report("stop", last_id=4, paused_intent="move_to"))
    assert goal.on_router(report("stop", last_id=4, paused_intent="move_to", failsafe_count=1)).outcome == \
        Outcome.FAILED


def test_replaced_by_another_task_fails(goal):
    start(goal)
    result = goal.on_router(report("open_door", last_id=4))
    assert result.outcome == Outcome.FAILED and "replaced by open_door" in result.reason


def test_router_never_starts_it(goal):
    decide(goal, "pick_object", now=101.0)
    goal.on_router(report("move_to", last_id=3))           # accepted, another task runs on (refused)
    assert goal.tick(105.9) is None
    result = goal.tick(106.0)
    assert result.outcome == Outcome.FAILED and "did not start pick_object" in result.reason


def test_goal_timeout(goal):
    assert goal.tick(159.9) is None
    result = goal.tick(160.0)
    assert result.outcome == Outcome.FAILED and "no result within 60 s (waiting for a decision)" in result.reason


def test_cancel_and_supersede(goal, catalogue):
    start(goal)
    assert goal.cancel().outcome == Outcome.CANCELLED
    assert goal.supersede().outcome == Outcome.CANCELLED      # the first end stays
    other = OrderGoal("open the door", task_intents(catalogue), 100.0, CONFIG)
    result = other.supersede()
    assert result.outcome == Outcome.FAILED and result.reason == "superseded by a newer order"
    assert other.tick(1000.0) is result and other.feedback().state.startswith("failed: superseded")
