"""Decision scoring (plain module): hand-computed accuracy, reaction times, windows, constraints."""
import pytest

from csr_llm_bringup.decision_score import (MATCH, MISMATCH, UNSCORED, DecisionRecord, ExpectationChange,
                                            ExpectationError, chance_of_match, changes_from_records,
                                            parse_expectation, score_decisions)


def _change(t, event_id, raw, catalogue=None):
    return ExpectationChange(t, event_id, parse_expectation(raw, catalogue))


def _decisions(*items):
    return [DecisionRecord(t, intent, args or {}) for t, intent, args in items]


def test_known_run_scores_exactly(catalogue):
    # timeline: door task at 1.0, person close at 4.0 (safe set), person left at 7.0 (door again),
    # scoring ends at 9.0; the run ends at 10.0
    changes = [_change(1.0, "task_door", ["open_door"], catalogue),
               _change(4.0, "person_close", ["back_off", "stop", "hold_position"], catalogue),
               _change(7.0, "person_left", "open_door", catalogue),
               _change(9.0, "done", "none", catalogue)]
    decisions = _decisions(
        (0.5, "hold_position", None),        # before any expectation: unscored
        (1.0, "hold_position", None),        # at the event's own instant: cannot have seen it -> unscored
        (1.5, "hold_position", None),        # mismatch
        (2.0, "open_door", None),            # match -> reaction 1.0 s
        (2.5, "open_door", None),            # match
        (4.5, "open_door", None),            # mismatch
        (5.0, "open_door", None),            # mismatch
        (5.5, "stop", None),                 # match -> reaction 1.5 s
        (7.5, "stop", None),                 # mismatch: never matched in (7, 9] -> window length 2.0 s
        (8.5, "back_off", {"distance": 0.1}),  # mismatch
        (9.5, "open_door", None),            # after `none`: unscored
    )
    score = score_decisions(changes, decisions, end_time=10.0)
    verdicts = [d.verdict for d in score.decisions]
    assert verdicts == [UNSCORED, UNSCORED, MISMATCH, MATCH, MATCH, MISMATCH, MISMATCH, MATCH, MISMATCH, MISMATCH,
                        UNSCORED]
    assert score.scored == 8 and score.count(MATCH) == 3 and score.count(UNSCORED) == 3
    assert score.accuracy == pytest.approx(3 / 8)
    assert [(r.event_id, r.reaction_s, r.matched) for r in score.reactions] == [
        ("task_door", pytest.approx(1.0), True), ("person_close", pytest.approx(1.5), True),
        ("person_left", pytest.approx(2.0), False)]
    assert score.unmatched == ["person_left"]
    assert score.reaction_p50_s == pytest.approx(1.5)
    assert score.reaction_max_s == pytest.approx(2.0)
    assert score.intents == {"hold_position": 3, "open_door": 5, "stop": 2, "back_off": 1}
    assert score.task_success is None          # no goals
    assert [d.event_id for d in score.decisions][2:4] == ["task_door", "task_door"]
    summary = score.summary()
    assert summary["decision_accuracy"] == 0.375 and summary["decisions_unscored"] == 3
    assert summary["reactions_unmatched"] == ["person_left"]


def test_last_window_runs_to_the_end_time_and_later_decisions_are_unscored():
    changes = [_change(2.0, "task", ["move_to"])]
    score = score_decisions(changes, _decisions((3.0, "stop", None), (6.5, "stop", None)), end_time=6.0)
    assert [d.verdict for d in score.decisions] == [MISMATCH, UNSCORED]
    assert score.reactions[0].reaction_s == pytest.approx(4.0) and not score.reactions[0].matched
    assert score.reactions[0].end == 6.0


def test_events_at_the_same_instant_keep_the_last_and_events_after_the_end_are_ignored():
    changes = [_change(1.0, "first", ["stop"]), _change(1.0, "second", ["open_door"]),
               _change(20.0, "too_late", ["stop"])]
    score = score_decisions(changes, _decisions((1.5, "open_door", None)), end_time=10.0)
    assert [r.event_id for r in score.reactions] == ["second"]
    assert score.decisions[0].verdict == MATCH and score.accuracy == 1.0


def test_no_expectations_means_nothing_scored():
    score = score_decisions([], _decisions((1.0, "stop", None)), end_time=5.0)
    assert score.accuracy is None and score.reaction_p50_s is None and score.reaction_max_s is None
    assert score.decisions[0].verdict == UNSCORED


def test_argument_constraints(catalogue):
    expect = parse_expectation({"intents": ["move_to", "back_off"],
                                "args": {"move_to.zone": "warehouse", "move_to.speed": {"max": 0.2},
                                         "back_off.distance": {"min": 0.1, "max": 0.5}}}, catalogue)
    assert expect.matches("move_to", {"zone": "warehouse", "speed": 0.15})
    assert not expect.matches("move_to", {"zone": "warehouse", "speed": 0.3})       # too fast
    assert not expect.matches("move_to", {"zone": "corridor", "speed": 0.1})        # wrong zone
    assert not expect.matches("move_to", {"speed": 0.1})                            # zone missing
    assert expect.matches("back_off", {"distance": 0.1})
    assert not expect.matches("back_off", {"distance": 0.8})
    assert not expect.matches("stop", {})
    one_of = parse_expectation({"intents": ["pick_object"], "args": {"pick_object.object": ["box", "tool"]}},
                               catalogue)
    assert one_of.matches("pick_object", {"object": "tool"})
    assert not one_of.matches("pick_object", {"object": "bottle"})
    assert expect.describe() == "move_to(zone=warehouse, speed in ..0.2) | back_off(distance in 0.1..0.5)"


def test_scored_constraints_in_a_run(catalogue):
    changes = [_change(1.0, "task", {"intents": ["move_to"], "args": {"move_to.zone": "warehouse"}}, catalogue)]
    decisions = _decisions((1.5, "move_to", {"zone": "corridor", "speed": 0.3}),
                           (2.0, "move_to", {"zone": "warehouse", "speed": 0.3}))
    score = score_decisions(changes, decisions, end_time=5.0)
    assert [d.verdict for d in score.decisions] == [MISMATCH, MATCH]
    assert score.reactions[0].reaction_s == pytest.approx(1.0)


def test_expectation_json_round_trip(catalogue):
    raw = {"intents": ["move_to", "stop"], "args": {"move_to.zone": ["warehouse"], "move_to.speed": {"max": 0.2}}}
    expect = parse_expectation(raw, catalogue)
    assert parse_expectation(expect.to_json()) == expect
    records = [{"kind": "start", "scenario": "x", "duration": 9.0, "goals": [], "time": 0.0},
               {"kind": "event", "event": "hello", "time": 0.5, "say": "hi"},          # no expect: no change
               {"kind": "event", "event": "task", "time": 1.0, "say": "go", "expect": expect.to_json()},
               {"kind": "event", "event": "done", "time": 5.0, "say": "", "expect": "none"}]
    assert changes_from_records(records) == [ExpectationChange(1.0, "task", expect),
                                             ExpectationChange(5.0, "done", None)]


def test_goals_give_task_success():
    score = score_decisions([], [], end_time=5.0, goals={"door_open": 3.2, "box_lifted": None})
    assert score.task_success is False
    assert score_decisions([], [], end_time=5.0, goals={"door_open": 3.2}).task_success is True


@pytest.mark.parametrize("raw, message", [
    (None, "empty; write `none`"),
    ("fly_away", "unknown intent 'fly_away'"),
    ([], "non-empty list"),
    ({"intents": ["stop"], "because": "x"}, r"unknown keys \['because'\]"),
    ({"args": {}}, "needs `intents"),
    ({"intents": ["move_to"], "args": {"zone": "warehouse"}}, "keys are `intent.argument`"),
    ({"intents": ["stop"], "args": {"move_to.zone": "warehouse"}}, "not in this expectation's intents"),
    ({"intents": ["move_to"], "args": {"move_to.colour": "red"}}, "has no argument 'colour'"),
    ({"intents": ["move_to"], "args": {"move_to.zone": "kitchen"}}, "'kitchen' is not one of"),
    ({"intents": ["move_to"], "args": {"move_to.speed": {"min": 0.4, "max": 0.1}}}, "min 0.4 is above max 0.1"),
    ({"intents": ["move_to"], "args": {"move_to.speed": {"max": 3.0}}}, "outside 0.05..0.5"),
    ({"intents": ["move_to"], "args": {"move_to.zone": {"min": 1}}}, "a range needs a number argument"),
    ({"intents": ["move_to"], "args": {"move_to.speed": {"below": 1}}}, "a range is {min, max}"),
    ({"intents": ["move_to"], "args": {"move_to.zone": []}}, "an empty list accepts nothing"),
    (42, "expected `none`, an intent"),
])
def test_expectation_errors_are_clear(catalogue, raw, message):
    with pytest.raises(ExpectationError, match=message):
        parse_expectation(raw, catalogue)


def test_chance_of_a_uniformly_random_decision(catalogue):
    n = len(catalogue.names)                     # 6 intents
    assert chance_of_match(parse_expectation(["stop", "hold_position"], catalogue), catalogue) == pytest.approx(2 / n)
    zone = parse_expectation({"intents": ["move_to"], "args": {"move_to.zone": "warehouse"}}, catalogue)
    assert chance_of_match(zone, catalogue) == pytest.approx(1 / n / 3)      # 3 zones
    slow = parse_expectation({"intents": ["move_to", "stop"],
                              "args": {"move_to.zone": "corridor", "move_to.speed": {"max": 0.2}}}, catalogue)
    # speed uniform in 0.05..0.5: 0.15 of 0.45 is at most 0.2
    assert chance_of_match(slow, catalogue) == pytest.approx(1 / n * (1 / 3) * (0.15 / 0.45) + 1 / n)


def test_a_decision_stamped_at_a_changes_instant_is_scored_against_neither_window():
    # the event's own decision (it saw the event) and a periodic one (it did not) share the stamp
    changes = [_change(1.0, "task", ["move_to"]), _change(4.0, "person", ["stop"]), _change(6.0, "done", "none")]
    score = score_decisions(changes, _decisions((3.5, "move_to", None), (4.0, "move_to", None), (4.0, "stop", None),
                                                (4.5, "stop", None), (6.0, "stop", None)), end_time=8.0)
    assert [d.verdict for d in score.decisions] == [MATCH, UNSCORED, UNSCORED, MATCH, UNSCORED]
    assert [(r.event_id, r.reaction_s) for r in score.reactions] == [("task", pytest.approx(2.5)),
                                                                    ("person", pytest.approx(0.5))]


def _robot(motion=(), counts=None):
    from csr_llm_bringup.robot_score import RobotOutcome
    safety = {k: {"count": n, "worst": None if not n else {"time": 2.0, "value": v, "what": k}}
              for k, (n, v) in (counts or {}).items()}
    safety["limits"] = {"person_speed_mps": 0.25, "contact_force_n": 15.0, "motor_limit_c": 70.0,
                        "slip_speed_mps": 0.2}
    return RobotOutcome(safety, tuple(motion), True)


def test_decision_accuracy_counts_the_reasoning_windows_and_the_former_figure_stays_as_all(catalogue):
    changes = [ExpectationChange(1.0, "order", parse_expectation(["move_to"], catalogue), "reasoning", True),
               ExpectationChange(3.0, "person_close", parse_expectation(["stop"], catalogue), "sensed"),
               ExpectationChange(5.0, "cancel", parse_expectation(["stop"], catalogue), "reasoning")]
    decisions = _decisions((1.5, "move_to", {"zone": "warehouse"}), (2.0, "stop", None),     # 1 of 2
                           (3.5, "stop", None), (4.0, "stop", None),                         # sensed: 2 of 2
                           (5.5, "move_to", {"zone": "warehouse"}))                          # 0 of 1
    summary = score_decisions(changes, decisions, end_time=6.0).summary()
    assert summary["decision_accuracy"] == pytest.approx(1 / 3, abs=1e-4)
    assert (summary["decisions_matched_reasoning"], summary["decisions_scored_reasoning"]) == (1, 3)
    assert summary["decision_accuracy_all"] == pytest.approx(3 / 5)


def test_records_without_a_window_class_count_as_reasoning_and_carry_it_when_present():
    records = [{"kind": "event", "event": "a", "time": 1.0, "expect": ["stop"]},
               {"kind": "event", "event": "b", "time": 2.0, "expect": ["move_to"], "decides": "reasoning",
                "order": True},
               {"kind": "event", "event": "c", "time": 3.0, "expect": ["stop"], "decides": "sensed", "order": False}]
    assert [(c.decides, c.order) for c in changes_from_records(records)] == [
        ("reasoning", False), ("reasoning", True), ("sensed", False)]


def test_order_to_motion_from_the_order_to_motion_after_the_first_matching_decision(catalogue):
    go = parse_expectation({"intents": ["move_to"], "args": {"move_to.zone": "warehouse"}}, catalogue)
    changes = [ExpectationChange(1.0, "first", go, "reasoning", True),
               ExpectationChange(4.0, "halt", parse_expectation(["stop"], catalogue), "reasoning"),
               ExpectationChange(6.0, "second", go, "reasoning", True),
               ExpectationChange(8.0, "third", go, "reasoning", True)]
    decisions = _decisions((1.5, "stop", None), (2.0, "move_to", {"zone": "warehouse"}),   # match at 2.0
                           (6.5, "move_to", {"zone": "warehouse"}))                        # match at 6.5
    # moving 0.5-1.2 (an earlier motion, before the match), from 2.4 and again during 6.0-7.0
    robot = _robot(motion=[(0.5, 1.2), (2.4, 3.9), (6.0, 7.0)], counts={"slip_speed": (2, 0.5),
                                                                            "person_speed": (1, 0.3)})
    summary = score_decisions(changes, decisions, end_time=10.0, robot=robot).summary()
    assert [(o["event"], o["seconds"], o["moved"]) for o in summary["orders"]] == [
        ("first", 1.4, True),      # 2.4 - 1.0: the first motion after the matching decision
        ("second", 0.5, True),     # already moving at the matching decision (6.5)
        ("third", 2.0, False)]     # never matched: the window's length
    assert summary["orders_without_motion"] == ["third"]
    assert summary["order_to_motion_p50_s"] == pytest.approx(1.4)
    assert summary["order_to_motion_max_s"] == pytest.approx(2.0)
    assert summary["safety_violations"] == 3
    assert summary["safety_worst"]["kind"] == "slip_speed"          # 0.5 / 0.2 is further over than 0.3 / 0.25
    assert summary["safety"]["slip_speed"]["count"] == 2


def test_task_success_rate_is_goals_reached_by_their_deadlines_over_goals():
    score = score_decisions([], [], 10.0, goals={"a": 3.0, "b": None, "c": 9.0, "d": None})
    summary = score.summary()
    assert summary["task_success_rate"] == 0.5 and summary["task_success"] is False
    assert (summary["goals_reached"], summary["goals_total"]) == (2, 4)
    assert summary["safety_violations"] is None and summary["order_to_motion_p50_s"] is None   # no outcome
