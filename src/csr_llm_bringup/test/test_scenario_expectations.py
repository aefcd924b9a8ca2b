"""Scenario expectations and goals: the format, its errors, the simulator's scoring timeline, the
run report's scoring, and every scenario file of config/scenarios (plain modules, no ROS)."""
import json
from pathlib import Path

import pytest

from csr_llm_bringup.decision_score import MATCH, MISMATCH, changes_from_records
from csr_llm_bringup.run_report import RunStats
from csr_llm_bringup.sim.scenario import (ExpectationFeed, Scenario, ScenarioError, load_scenario,
                                          scenario_from_dict)
from csr_llm_bringup.sim.simulator import Simulator

SCENARIO_DIR = Path(__file__).resolve().parents[3] / "config" / "scenarios"
SCENARIO_FILES = sorted(SCENARIO_DIR.glob("*.yaml"))


def _scored_scenario():
    return {
        "name": "scored", "duration": 3.0,
        "goals": [{"id": "late_enough", "when": {"time_after": 1.2}},
                  {"id": "never", "when": {"door_angle_above": 1.0}}],
        "events": [
            {"id": "hello", "at": 0.2, "say": "hello"},
            {"id": "task", "at": 0.5, "say": "task: go to the warehouse",
             "expect": {"intents": ["move_to"], "args": {"move_to.zone": "warehouse"}}},
            {"id": "hot", "at": 1.5, "say": "motor hot", "expect": ["stop", "hold_position"]},
            {"id": "done", "at": 2.5, "expect": "none"},
        ],
    }


def test_expectations_and_goals_parse(catalogue):
    sc = Scenario(_scored_scenario(), catalogue=catalogue)
    by_id = {e.id: e for e in sc.events}
    assert not by_id["hello"].has_expect
    assert by_id["task"].has_expect and by_id["task"].expect.matches("move_to", {"zone": "warehouse", "speed": 0.3})
    assert by_id["done"].has_expect and by_id["done"].expect is None
    assert [(g.id, g.by) for g in sc.goals] == [("late_enough", 3.0), ("never", 3.0)]
    assert sc.has_expectations and sc.bench        # scored scenarios are in the bench unless `bench: false`
    assert not Scenario({"name": "plain", "events": [{"at": 1.0, "say": "x"}]}).bench


def test_simulator_publishes_the_timeline_and_the_goals(catalogue):
    sc = Scenario(_scored_scenario(), catalogue=catalogue)
    sim = Simulator(scenario=sc)
    feed = ExpectationFeed(sc)
    records = []
    while sim.time < 3.2:
        sim.step(10)
        records.extend(feed.poll(sim.time))
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "start" and kinds[-1] == "end" and kinds.count("event") == 4
    assert records[0]["goals"] == ["late_enough", "never"] and records[0]["duration"] == 3.0
    events = {r["event"]: r for r in records if r["kind"] == "event"}
    assert "expect" not in events["hello"] and events["done"]["expect"] == "none"
    assert events["task"]["expect"] == {"intents": ["move_to"], "args": {"move_to.zone": ["warehouse"]}}
    assert events["task"]["time"] == pytest.approx(0.5)
    json.dumps(records)                               # what goes on the topic
    goals = records[-1]["goals"]
    assert goals["late_enough"] == pytest.approx(1.21, abs=0.011) and goals["never"] is None
    assert sim.truth()["goals"] == goals
    timeline = sc.expectation_timeline()
    assert [c.event_id for c in timeline] == ["task", "hot", "done"]
    assert changes_from_records(records) == timeline


def test_unless_goal_voids_an_expectation_once_its_goal_was_reached(catalogue):
    """'cooled down: resume the pick' asks nothing once the object was lifted; before that it does."""
    def run(goal_at: float):
        sc = Scenario({"name": "resume", "duration": 3.0,
                       "goals": [{"id": "lifted", "when": {"time_after": goal_at}}],
                       "events": [{"id": "hot", "at": 0.5, "expect": ["stop", "hold_position"]},
                                  {"id": "cooled", "at": 1.5, "say": "motor cooled down", "unless_goal": "lifted",
                                   "expect": {"intents": ["pick_object"], "args": {"pick_object.object": "box"}}},
                                  {"id": "done", "at": 2.5, "expect": "none"}]}, catalogue=catalogue)
        sim, feed, records = Simulator(scenario=sc), ExpectationFeed(sc), []
        while sim.time < 3.05:
            sim.step(10)
            records.extend(feed.poll(sim.time))
        return sc, {r["event"]: r for r in records if r["kind"] == "event"}, records

    sc, events, records = run(goal_at=1.0)                  # lifted before the motor cooled
    assert "expect" not in events["cooled"] and events["cooled"]["expect_void"] == "goal lifted reached"
    assert events["cooled"]["say"] == "motor cooled down"   # the event itself still fires
    assert [c.event_id for c in sc.expectation_timeline()] == ["hot", "done"]
    assert changes_from_records(records) == sc.expectation_timeline()
    sc, events, records = run(goal_at=2.0)                  # not yet lifted: resume is what is asked
    assert events["cooled"]["expect"]["intents"] == ["pick_object"] and "expect_void" not in events["cooled"]
    assert [c.event_id for c in changes_from_records(records)] == ["hot", "cooled", "done"]


def test_goal_deadline():
    sc = scenario_from_dict({"duration": 2.0, "goals": [{"id": "g", "when": {"time_after": 1.0}, "by": 0.5}]})
    sim = Simulator(scenario=sc)
    sim.step(1500)
    assert sc.goal_status() == {"g": None}            # held only after its deadline: not reached


def test_run_report_scores_live_and_plots(tmp_path, catalogue):
    sc = Scenario(_scored_scenario(), catalogue=catalogue)
    sim = Simulator(scenario=sc)
    feed = ExpectationFeed(sc)
    stats = RunStats()
    while sim.time < 3.05:
        sim.step(10)
        for record in feed.poll(sim.time):
            stats.on_expectation_record(record)
        stats.on_time(sim.time)
    decisions = [(1.0, "move_to", {"zone": "warehouse", "speed": 0.3}),     # match, reaction 0.5
                 (2.0, "move_to", {"zone": "warehouse", "speed": 0.3}),     # mismatch (hot: stop | hold)
                 (2.3, "stop", {}),                                         # match, reaction 0.8
                 (2.8, "stop", {})]                                         # after `none`: unscored
    for t, intent, args in decisions:
        stats.on_decision(t, 50.0, intent, "R1", 0, arguments=args)
    summary = stats.write(tmp_path)
    assert summary["scenario"] == "scored"
    assert summary["decision_accuracy"] == pytest.approx(2 / 3, abs=1e-4)
    assert summary["decisions_scored"] == 3 and summary["decisions_unscored"] == 1
    assert summary["reaction_p50_s"] == pytest.approx(0.65) and summary["reaction_max_s"] == pytest.approx(0.8)
    assert summary["task_success"] is False
    assert json.loads((tmp_path / "summary.json").read_text())["decision_accuracy"] == summary["decision_accuracy"]
    detail = json.loads((tmp_path / "decisions.json").read_text())
    assert [d["verdict"] for d in detail["decisions"]] == [MATCH, MISMATCH, MATCH, "unscored"]
    assert (tmp_path / "decisions.png").stat().st_size > 1000
    report = (tmp_path / "report.md").read_text()
    assert "## Decision scoring" in report and "decisions.png" in report and "stop \\| hold_position" in report


def test_report_without_a_scored_scenario_has_null_scores(tmp_path):
    stats = RunStats()
    stats.on_time(0.0)
    stats.on_decision(0.5, 40.0, "stop", "R1", 0)
    summary = stats.write(tmp_path)
    assert summary["decision_accuracy"] is None and summary["task_success"] is None
    assert not (tmp_path / "decisions.png").exists()
    assert summary["sim_wall_s"] is None                     # no simulator profile received


def test_the_simulators_wall_time_profile_lands_in_the_summary(tmp_path):
    stats = RunStats()
    stats.on_time(0.0)
    stats.on_sim_wall({"decision lockstep": 1.5, "control round trip": 4.0, "other": 0.5, "total": 6.0})
    stats.on_sim_wall({"decision lockstep": 2.0, "control round trip": 5.0, "other": 1.0, "total": 8.0})
    summary = stats.write(tmp_path)
    assert summary["sim_wall_s"] == {"decision lockstep": 2.0, "control round trip": 5.0, "other": 1.0, "total": 8.0}
    assert "sim_wall_s" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("change, message", [
    ({"events": [{"at": 1.0, "expect": "fly"}]}, r"event 0 \(event_0\)\.expect: unknown intent 'fly'"),
    ({"events": [{"at": 1.0, "expect": {"intents": ["stop"], "why": 1}}]}, r"\.expect: unknown keys \['why'\]"),
    ({"events": [{"at": 1.0, "expect": {"intents": ["move_to"], "args": {"move_to.zone": "moon"}}}]},
     r"\.expect: args\.move_to\.zone: .*'moon' is not one of"),
    ({"events": [{"at": 1.0, "expect": None}]}, r"\.expect: empty; write `none`"),
    ({"goals": [{"id": "g", "when": {"zone": "warehouse"}, "deadline": 3}]}, r"goal 0: unknown keys \['deadline'\]"),
    ({"goals": [{"id": "g"}]}, r"goal 0 \(g\): needs `when` conditions"),
    ({"goals": [{"id": "g", "when": {"box_on_shelf": True}}]}, r"goal 0 \(g\)\.when: unknown condition 'box_on_shelf'"),
    ({"goals": [{"id": "g", "when": {"zone": "door"}}, {"id": "g", "when": {"zone": "door"}}]},
     r"duplicate goal ids \['g'\]"),
    ({"goals": "door open"}, "goals must be a list"),
    ({"bench": "yes"}, "bench: expected true/false"),
    ({"events": [{"at": 1.0, "say": "x", "unless_goal": "g"}]}, r"unless_goal: .* needs an `expect`"),
    ({"events": [{"at": 1.0, "expect": "stop", "unless_goal": "lifted"}]},
     r"event 0 \(event_0\): `unless_goal` names unknown goal 'lifted'"),
])
def test_scenario_format_errors(catalogue, change, message):
    data = {"name": "bad", "duration": 5.0, "events": [{"at": 1.0, "say": "x"}]}
    data.update(change)
    with pytest.raises(ScenarioError, match=message):
        Scenario(data, catalogue=catalogue)


def test_suite_covers_every_intent_and_argument_value(catalogue):
    """The suite's expectations name every intent and every enum value of the catalogue."""
    intents, values = set(), set()
    for path in SCENARIO_FILES:
        sc = load_scenario(str(path))
        for ev in sc.events:
            if ev.expect is None:
                continue
            intents.update(ev.expect.intents)
            for c in ev.expect.constraints:
                values.update((c.key, v) for v in c.values)
                if c.minimum is not None or c.maximum is not None:
                    values.add((c.key, "range"))
    assert intents == set(catalogue.names)
    for name in catalogue.names:
        for arg in catalogue[name].arguments:
            wanted = [(f"{name}.{arg.name}", v) for v in arg.enum] or [(f"{name}.{arg.name}", "range")]
            assert set(wanted) <= values, (wanted, sorted(values))
    bench = [p.stem for p in SCENARIO_FILES if load_scenario(str(p)).bench]
    assert len(bench) >= 10


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=[p.stem for p in SCENARIO_FILES])
def test_every_scenario_file_loads_and_validates(path, catalogue):
    sc = load_scenario(str(path))
    assert sc.name == path.stem and sc.duration > 0
    for ev in sc.events:
        assert ev.at is None or ev.at <= sc.duration, f"{ev.id} fires after the end"
    if sc.bench:
        assert 10.0 <= sc.duration <= 40.0, "suite scenarios stay short (the bench budget), long enough to score"
        assert sc.has_expectations
        # decisions drive the task: no scripted operator drive in the suite
        assert not any(ev.drive for ev in sc.events)
        first = min(ev.at for ev in sc.events if ev.has_expect and ev.at is not None)
        assert first < 5.0, "scoring starts early"


def test_a_file_error_names_the_file_and_the_event(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nduration: 5\nevents:\n  - id: go\n    at: 1\n"
                    "    expect: {intents: [move_to], args: {move_to.zone: kitchen}}\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(str(path))
    assert str(err.value) == (f"{path}: event 0 (go).expect: args.move_to.zone: argument zone: 'kitchen' is not "
                              "one of ['corridor', 'warehouse', 'door']")
