"""bench_decisions aggregation (plain): per-scenario keys from a run folder, pooled overall, table, plot.
The runs here are written by RunStats from hand-made decisions; the real graph runs in `make bench-decisions`."""
import json

import pytest

from csr_llm_bringup.lab.bench_decisions import (bench_json, compare, plot, scenario_bootstrap_ci, scenario_result,
                                             suite_scenarios, table)
from csr_llm_common.stats import wilson_interval
from csr_llm_bringup.run_report import RunStats

KEYS = {"decision_accuracy", "reaction_p50_s", "reaction_max_s", "task_success_rate", "intents", "ttft_p50_ms",
        "ttft_p99_ms"}


def _run(tmp_path, name, decisions, goals, expect=None):
    """A run folder as the recorder leaves it: expectation at 1.0 (move_to warehouse), `none` at 4.0."""
    expect = expect or {"intents": ["move_to"], "args": {"move_to.zone": ["warehouse"]}}
    stats = RunStats()
    stats.on_time(0.0)
    for record in [{"kind": "start", "scenario": name, "duration": 5.0, "goals": list(goals), "time": 0.0},
                   {"kind": "event", "event": "task", "time": 1.0, "say": "go", "expect": expect},
                   {"kind": "event", "event": "done", "time": 4.0, "say": "", "expect": "none"},
                   {"kind": "end", "scenario": name, "time": 5.0, "duration": 5.0, "goals": goals}]:
        stats.on_expectation_record(record)
    for t, intent, args, ttft in decisions:
        stats.on_decision(t, ttft, intent, "R1", 0, arguments=args)
    stats.on_time(5.0)
    stats.write(tmp_path / name)
    return tmp_path / name


def test_pooled_results(tmp_path, catalogue):
    go = {"zone": "warehouse", "speed": 0.3}
    a = _run(tmp_path, "a", [(1.5, "stop", {}, 100.0), (2.0, "move_to", go, 200.0), (2.5, "move_to", go, 300.0)],
             {"in_warehouse": 3.1})
    b = _run(tmp_path, "b", [(1.5, "stop", {}, 400.0), (2.0, "stop", {}, 500.0)], {"in_warehouse": None})
    results = {"a": scenario_result(a, catalogue), "b": scenario_result(b, catalogue),
               "c": {"error": "run exited 1"}}
    assert results["a"]["decision_accuracy"] == pytest.approx(2 / 3, abs=1e-4)
    assert results["a"]["reaction_p50_s"] == pytest.approx(1.0) and results["a"]["task_success_rate"] == 1.0
    assert results["b"]["decision_accuracy"] == 0.0 and results["b"]["reaction_max_s"] == pytest.approx(3.0)
    assert results["a"]["chance_accuracy"] == pytest.approx(1 / 6 / 3, abs=1e-4)   # move_to with 1 of 3 zones
    bench = bench_json(results, wall_s=12.0)
    overall = bench["overall"]
    assert KEYS <= set(overall) and KEYS <= set(bench["scenarios"]["a"])
    assert overall["decision_accuracy"] == pytest.approx(2 / 5, abs=1e-4)         # pooled over decisions
    assert overall["reaction_p50_s"] == pytest.approx(2.0) and overall["reaction_max_s"] == pytest.approx(3.0)
    assert overall["task_success_rate"] == 0.5
    assert overall["intents"] == {"stop": 3, "move_to": 2}
    assert overall["ttft_p50_ms"] == pytest.approx(300.0)
    assert overall["scenarios_failed"] == ["c"]
    low, high = overall["accuracy_ci95_scenarios"]          # two scenarios, 2/3 and 0/2
    assert 0.0 <= low <= overall["decision_accuracy"] <= high <= round(2 / 3, 4)
    json.dumps(bench)
    text = table(bench)
    assert "OVERALL" in text and "FAILED: run exited 1" in text
    assert plot(bench, tmp_path / "decisions.png", n_intents=6).stat().st_size > 1000


def test_the_suite_is_every_scored_scenario_but_the_test_and_bag_ones():
    names = suite_scenarios()
    assert len(names) >= 10
    assert not {"default", "closed_loop", "golden"} & set(names)


def test_a_run_without_a_sim_clock_reports_wall_time():
    stats = RunStats()
    for t in (100.0, 101.0, 104.0):                   # the recorder's node clock: wall time on a robot
        stats.on_time(t)
        stats.on_decision(t, 150.0, "stop", "R1", 0)
    summary = stats.summary()
    assert summary["time_base"] == "wall" and summary["duration_s"] == 4.0 and summary["sim_seconds"] is None
    assert summary["decisions_per_s"] == 0.75
    assert summary["real_time_factor"] is None
    stats.clock_seen = True
    assert stats.summary()["time_base"] == "sim" and stats.summary()["sim_seconds"] == 4.0


def test_real_time_factor_is_sim_seconds_per_wall_second():
    stats = RunStats(clock_seen=True)
    for sim, wall in ((0.0, 50.0), (2.0, 52.5), (9.0, 60.0)):     # 9 s of sim in 10 s of wall time
        stats.on_time(sim, wall)
    assert stats.summary()["real_time_factor"] == 0.9



def test_decision_time_per_second_of_the_run():
    """The decisions' own wall time (Decision.total_ms) per second of the run: what lockstepped
    decisions cost the simulation's real-time factor; and the longest; a NaN total is not counted."""
    stats = RunStats(clock_seen=True)
    stats.on_time(0.0, 10.0)
    for t, total in ((0.5, 400.0), (1.0, 600.0), (1.5, float("nan"))):
        stats.on_decision(t, 150.0, "stop", "R1", 0, total_ms=total)
    stats.on_time(2.0, 14.0)
    assert stats.summary()["decision_wall_s_per_s"] == 0.5
    assert stats.summary()["decision_longest_ms"] == 600.0


def test_reused_decisions_are_counted_and_left_out_of_the_ttft_percentiles(tmp_path, catalogue):
    """A reused decision (inputs unchanged: the previous result) has no TTFT of the model's."""
    stats = RunStats(clock_seen=True)
    stats.on_time(0.0, 10.0)
    for t, ttft, reused in ((0.5, 300.0, False), (1.0, 0.05, True), (1.5, 0.04, True), (2.0, 500.0, False)):
        stats.on_decision(t, ttft, "stop", "R1", 0, total_ms=ttft, reused=reused)
    stats.on_time(2.0, 12.0)
    summary = stats.summary()
    assert summary["decisions"] == 4 and summary["decisions_reused"] == 2
    assert summary["ttft_p50_ms"] == 400.0 and summary["ttft_p99_ms"] == pytest.approx(498.0)
    run = _run(tmp_path, "r", [(1.5, "stop", {}, 100.0)], {})
    detail = json.loads((run / "decisions.json").read_text())
    assert detail["decisions"][0]["reused"] is False


def test_acting_where_only_pausing_intents_are_acceptable_is_counted(tmp_path, catalogue):
    """hold_violations: in a window accepting only stop/hold_position (pausing intents), a task
    decision counts; a pausing one that is not accepted (back_off) is a mismatch but no violation."""
    go = {"zone": "warehouse", "speed": 0.3}
    run = _run(tmp_path, "hold", [(1.5, "stop", {}, 100.0), (2.0, "move_to", go, 100.0),
                                  (2.5, "back_off", {"distance": 0.2}, 100.0)], {}, expect=["stop", "hold_position"])
    result = scenario_result(run, catalogue)
    assert (result["hold_decisions"], result["hold_violations"]) == (3, 1)
    moving = scenario_result(_run(tmp_path, "moving", [(2.0, "move_to", go, 100.0)], {}), catalogue)
    assert (moving["hold_decisions"], moving["hold_violations"]) == (0, 0)
    overall = bench_json({"hold": result, "moving": moving}, wall_s=1.0)["overall"]
    assert (overall["hold_decisions"], overall["hold_violations"]) == (3, 1)
    assert "1/3" in table(bench_json({"hold": result}, wall_s=1.0))


def test_pausing_where_only_a_task_is_acceptable_is_counted(tmp_path, catalogue):
    """act_misses: in a window accepting only move_to, a pausing decision counts; a wrong task
    (open_door) is a mismatch but no miss; a window that accepts a pause has no act decisions."""
    go = {"zone": "warehouse", "speed": 0.3}
    run = _run(tmp_path, "act", [(1.5, "move_to", go, 100.0), (2.0, "hold_position", {}, 100.0),
                                 (2.5, "stop", {}, 100.0), (3.0, "open_door", {}, 100.0)], {})
    result = scenario_result(run, catalogue)
    assert (result["act_decisions"], result["act_misses"]) == (4, 2)
    either = scenario_result(_run(tmp_path, "either", [(2.0, "stop", {}, 100.0)], {},
                                  expect=["move_to", "stop"]), catalogue)
    assert (either["act_decisions"], either["act_misses"]) == (0, 0)
    overall = bench_json({"act": result, "either": either}, wall_s=1.0)["overall"]
    assert (overall["act_decisions"], overall["act_misses"]) == (4, 2)
    assert "2/4" in table(bench_json({"act": result}, wall_s=1.0))


def test_the_scenario_bootstrap_resamples_whole_scenarios():
    # every scenario at 0.7: resampling scenarios cannot move the pooled accuracy
    assert scenario_bootstrap_ci([(7, 10), (14, 20), (35, 50)]) == [0.7, 0.7]
    # half the scenarios all right, half all wrong, 40 decisions each: 400 decisions pooled give a
    # narrow Wilson interval, but the scenarios disagree and only 10 of them were seen
    split = [(40, 40)] * 5 + [(0, 40)] * 5
    low, high = scenario_bootstrap_ci(split)
    w_low, w_high = wilson_interval(200, 400)
    assert low < w_low - 0.1 and high > w_high + 0.1
    assert scenario_bootstrap_ci(split) == [low, high]       # seeded: the same interval every run
    assert scenario_bootstrap_ci([(3, 4)]) is None
    # paired: the same results under two configurations change by nothing, whatever the resample
    assert scenario_bootstrap_ci(split, base=split) == [0.0, 0.0]
    better = [(40, 40)] * 6 + [(0, 40)] * 4             # one scenario flipped to right: +0.1 pooled
    low, high = scenario_bootstrap_ci(better, base=split)
    assert 0.0 <= low <= 0.1 <= high
    assert scenario_bootstrap_ci(better, base=split[:3]) is None


def test_compare_lists_each_scenario_and_the_paired_change():
    def result(matched, scored, task=None):
        return {"decision_accuracy": matched / scored, "decisions_matched": matched, "decisions_scored": scored,
                "task_success_rate": task}
    base = {"scenarios": {"a": result(10, 20, 0.0), "b": result(18, 20), "c": result(5, 10), "d": {"error": "x"}}}
    new = {"scenarios": {"a": result(20, 20, 1.0), "b": result(18, 20), "c": result(5, 10), "d": result(1, 1)}}
    text = compare(base, new)
    lines = {line.split()[0]: line for line in text.splitlines()}
    assert "d" not in lines                                       # failed in the base run: not compared
    assert "+0.50" in lines["a"] and "0%/100%" in lines["a"] and "+0.00" in lines["b"]
    assert "0.66" in lines["OVERALL"] and "0.86" in lines["OVERALL"] and "+0.20" in lines["OVERALL"]
    assert "1 of 3 scenarios moved" in lines["OVERALL"]


def test_a_failed_run_is_run_again_and_its_log_kept(tmp_path):
    """A bench run whose recorder hung was SIGKILLed (exit 1) and lost its scenario; the run is
    reproducible, so it is run again, and the failed run's log stays for the diagnosis."""
    from csr_llm_bringup.lab.bench_decisions import run_with_reruns
    codes = iter([1, 0])
    calls = []

    def graph_run(name, runs_dir, overrides):      # stands in for the lockstepped graph (run elsewhere)
        calls.append((name, list(overrides)))
        log = runs_dir / "runner.log"
        code = next(codes)
        log.write_text(f"exit {code}\n")
        return {"run_dir": runs_dir / "latest", "returncode": code, "wall_s": 1.0, "log": log}

    run, reruns = run_with_reruns("door_person", tmp_path, ["reasoning.x=1"], 1, run=graph_run)
    assert (run["returncode"], reruns, len(calls)) == (0, 1, 2)
    assert calls[1] == ("door_person", ["reasoning.x=1"])
    assert (tmp_path / "runner.failed1.log").read_text() == "exit 1\n"
    assert (tmp_path / "runner.log").read_text() == "exit 0\n"
    codes = iter([1, 3])
    run, reruns = run_with_reruns("door_person", tmp_path, [], 1, run=graph_run)
    assert (run["returncode"], reruns) == (3, 1)         # still failing: reported as failed, not hidden
    results = {"door_person": {"error": "run exited 3", "reruns": 1}}
    overall = bench_json(results, 1.0)["overall"]
    assert overall["scenarios_failed"] == ["door_person"] and overall["scenarios_rerun"] == ["door_person"]


def test_the_suite_gives_up_when_its_first_scenarios_all_fail(tmp_path, catalogue):
    """A cause every run shares (here: each exits 2) fails the first two scenarios and their reruns;
    the rest are listed as not run instead of each failing after its wall limit. One success first
    and the suite runs on whatever fails later."""
    from csr_llm_bringup.lab.bench_decisions import run_suite
    calls = []

    def failing(name, runs_dir, overrides):         # stands in for the lockstepped graph
        calls.append(name)
        runs_dir.mkdir(parents=True, exist_ok=True)
        (runs_dir / "runner.log").write_text("exit 2\n")
        return {"run_dir": runs_dir / "latest", "returncode": 2, "wall_s": 1.0, "log": runs_dir / "runner.log"}

    names = ["a", "b", "c", "d"]
    results = run_suite(names, tmp_path / "runs", [], catalogue, reruns=1, run=failing)
    assert calls == ["a", "a", "b", "b"]
    assert list(results) == names and all("error" in r for r in results.values())
    assert results["c"]["error"].startswith("not run") and not results["a"]["error"].startswith("not run")
    assert bench_json(results, 1.0)["overall"]["scenarios_failed"] == names
    calls.clear()
    run_suite(names, tmp_path / "all", [], catalogue, reruns=0, give_up_after=0, run=failing)
    assert calls == names

    def first_passes(name, runs_dir, overrides):
        if name == "a":
            return {"run_dir": _run(tmp_path, "a", [(1.5, "stop", {}, 100.0)], {}), "returncode": 0, "wall_s": 1.0,
                    "log": tmp_path / "a.log"}
        return failing(name, runs_dir, overrides)

    calls.clear()
    results = run_suite(names, tmp_path / "mixed", [], catalogue, reruns=0, run=first_passes)
    assert calls == ["b", "c", "d"] and "error" not in results["a"]
    # re-scoring runs nothing: every missing run is read (and reported failed), none skipped
    rescored = run_suite(names, tmp_path / "missing", [], catalogue, rescore=True)
    assert not any(r["error"].startswith("not run") for r in rescored.values())


def test_the_first_evaluated_decision_of_each_window_is_scored_apart(tmp_path, catalogue):
    """first_decision_accuracy: per window, the first decision the model evaluated (a reused one is
    the previous answer again); a wrong one there is what the reused decisions after it repeat."""
    go = {"zone": "warehouse", "speed": 0.3}
    stats = RunStats()
    stats.on_time(0.0)
    for record in [{"kind": "start", "scenario": "f", "duration": 8.0, "goals": [], "time": 0.0},
                   {"kind": "event", "event": "task", "time": 1.0, "say": "go", "expect": ["move_to"]},
                   {"kind": "event", "event": "hot", "time": 4.0, "say": "hot", "expect": ["stop"]},
                   {"kind": "end", "scenario": "f", "time": 8.0, "duration": 8.0, "goals": {}}]:
        stats.on_expectation_record(record)
    for t, intent, args, reused in ((1.5, "move_to", go, True), (2.0, "move_to", go, False),   # reused: skipped
                                    (2.5, "stop", {}, False), (4.5, "move_to", go, False),
                                    (5.0, "move_to", go, True), (5.5, "stop", {}, False)):
        stats.on_decision(t, 100.0, intent, "R1", 0, arguments=args, reused=reused)
    stats.on_time(8.0)
    stats.write(tmp_path / "f")
    result = scenario_result(tmp_path / "f", catalogue)
    assert (result["first_decisions_scored"], result["first_decisions_matched"]) == (2, 1)
    assert result["first_decision_accuracy"] == 0.5 and result["decision_accuracy"] == pytest.approx(3 / 6)
    overall = bench_json({"f": result, "g": result}, wall_s=1.0)["overall"]
    assert (overall["first_decisions_scored"], overall["first_decision_accuracy"]) == (4, 0.5)


def _robot_run(tmp_path, name, slips, goals, motion):
    stats = RunStats()
    stats.on_time(0.0)
    safety = {k: {"count": 0, "worst": None} for k in ("person_speed", "contact_force", "motor_overload")}
    safety["slip_speed"] = {"count": slips, "worst": {"time": 2.5, "value": 0.3 + 0.1 * slips,
                                                      "what": "base on a low-friction patch"} if slips else None}
    safety["limits"] = {"person_speed_mps": 0.25, "contact_force_n": 15.0, "motor_limit_c": 70.0,
                        "slip_speed_mps": 0.2}
    for record in [{"kind": "start", "scenario": name, "duration": 5.0, "goals": list(goals), "time": 0.0},
                   {"kind": "event", "event": "task", "time": 1.0, "say": "go", "decides": "reasoning",
                    "order": True, "expect": {"intents": ["move_to"], "args": {"move_to.zone": ["warehouse"]}}},
                   {"kind": "event", "event": "close", "time": 3.0, "say": "person close", "decides": "sensed",
                    "expect": ["stop"]},
                   {"kind": "end", "scenario": name, "time": 5.0, "duration": 5.0, "goals": goals,
                    "safety": safety, "motion": motion}]:
        stats.on_expectation_record(record)
    go = {"zone": "warehouse", "speed": 0.3}
    for t, intent, args in [(1.5, "move_to", go), (2.0, "move_to", go), (3.5, "move_to", go)]:
        stats.on_decision(t, 100.0, intent, "R1", 0, arguments=args)
    stats.on_time(5.0)
    stats.write(tmp_path / name)
    return tmp_path / name


def test_robot_level_figures_per_scenario_and_pooled(tmp_path, catalogue):
    a = _robot_run(tmp_path, "a", 1, {"g1": 3.0, "g2": None}, [[1.8, 4.0]])
    b = _robot_run(tmp_path, "b", 2, {"g1": 2.0}, [[0.2, 0.4]])
    results = {"a": scenario_result(a, catalogue), "b": scenario_result(b, catalogue)}
    ra = results["a"]
    assert ra["decision_accuracy"] == 1.0 and ra["decision_accuracy_all"] == pytest.approx(2 / 3, abs=1e-4)
    assert ra["task_success_rate"] == 0.5 and ra["task_success_ci95"] == [round(v, 4) for v in wilson_interval(1, 2)]
    assert ra["safety_violations"] == 1 and ra["safety_by_kind"]["slip_speed"] == 1
    assert ra["order_to_motion_p50_s"] == pytest.approx(0.8)          # decision 1.5, moving from 1.8
    assert results["b"]["orders_without_motion"] == ["task"]          # no motion in (1.5, 3.0]
    bench = bench_json(results, wall_s=1.0)
    o = bench["overall"]
    assert o["task_success_rate"] == pytest.approx(2 / 3, abs=1e-4) and o["goals_total"] == 3
    assert o["scenarios_succeeded"] == 1 and o["scenarios_with_goals"] == 2
    assert o["safety_violations"] == 3 and o["safety_worst"]["scenario"] == "b"
    assert o["order_to_motion_max_s"] == pytest.approx(2.0) and o["orders"] == 2
    assert o["decision_accuracy"] == 1.0 and o["decision_accuracy_all"] == pytest.approx(4 / 6, abs=1e-4)
    assert "_orders" not in bench["scenarios"]["a"]
    text = table(bench)
    assert "worst safety instance" in text and "slip_speed at 2.5 s" in text
    assert plot(bench, tmp_path / "decisions.png").stat().st_size > 0


def test_the_report_lists_the_graphs_own_sensed_lines(tmp_path):
    stats = RunStats()
    stats.on_time(1.0)
    stats.on_event(1.0, "task: pick up the tool")
    stats.on_sensed(3.0, "motor arm_shoulder_lift above 70 C (74 C)")
    stats.on_sensed(3.0, "reflex: holding for a motor over its limit; task pick_object resumes by itself")
    stats.write(tmp_path)
    report = (tmp_path / "report.md").read_text()
    sensed = report.split("## Sensed lines", 1)[1]
    assert "3.00 s: motor arm_shoulder_lift above 70 C (74 C)" in sensed
    assert "3.00 s: reflex: holding for a motor over its limit" in sensed
    assert "task: pick up the tool" not in sensed
