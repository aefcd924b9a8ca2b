"""Generated training scenarios: valid scenario files, reproducible, covering every task and interruption."""
from pathlib import Path

import yaml

from csr_llm_bringup.sim.scenario import load_scenario
from csr_llm_bringup.lab.training_scenarios import INTERRUPTIONS, GOTO_ONLY, write_scenarios


def test_generated_scenarios_load_and_are_reproducible(tmp_path):
    paths = write_scenarios(tmp_path / "a", 100, seed=3)
    again = write_scenarios(tmp_path / "b", 100, seed=3)
    assert [p.read_text() for p in paths] == [p.read_text() for p in again]
    assert [p.read_text() for p in write_scenarios(tmp_path / "c", 3, seed=4)] != [p.read_text() for p in paths[:3]]
    kinds = set()
    for path in paths:
        data = yaml.safe_load(path.read_text())
        scenario = load_scenario(str(path))
        assert not scenario.bench                      # never part of the bench suite
        assert data["name"] == path.stem and data["duration"] >= 16.0
        assert any("expect" in e for e in data["events"]), path
        task, interruption = data["description"].rsplit(": ", 1)[1].split(", ")
        kinds.add((task.split()[0], interruption))
    assert {k for k, _ in kinds} == {"door", "goto", "pick", "fetch"}
    assert {i for _, i in kinds} == set(INTERRUPTIONS) | set(GOTO_ONLY)


def test_a_person_scenario_pauses_then_resumes_the_task(tmp_path):
    paths = write_scenarios(tmp_path, 80, seed=0)
    person = next(yaml.safe_load(p.read_text()) for p in paths
                  if p.read_text().count("person_left") > 0 and "fetch task" not in p.read_text())
    events = {e["id"]: e for e in person["events"]}
    task_intents = set(events.get("task", events.get("resolved", {})).get("expect", {}).get("intents", []))
    # the router holds by reflex and resumes by itself: going on is as sensible as pausing
    assert set(events["person_close"]["expect"]["intents"]) == task_intents | {"back_off", "stop", "hold_position"}
    assert events["person_close"]["expect"]["args"]["back_off.distance"] == {"max": 0.5}
    assert set(events["person_left"]["expect"]["intents"]) == task_intents
    assert events["person_left"]["unless_goal"] == "done"       # nothing to resume once the task is done
    # the person is sensed, not said
    assert not any("say" in events[i] for i in ("person_coming", "person_close", "person_leaving", "person_left"))


def test_generated_scenarios_say_nothing_the_robot_senses(tmp_path):
    for path in write_scenarios(tmp_path, 60, seed=5):
        scenario = load_scenario(str(path))           # the loader refuses narration
        for event in scenario.events:
            assert event.say is None or (event.decides == "reasoning" and not event.when), (path, event.id)


def test_a_deferred_order_waits_for_its_condition_behind_many_notices(tmp_path):
    paths = write_scenarios(tmp_path, 80, seed=0)
    deferred = [yaml.safe_load(p.read_text()) for p in paths if p.read_text().count("id: trigger") > 0]
    assert deferred
    suite = "".join(p.read_text() for p in (Path(__file__).parents[3] / "config" / "scenarios").glob("*.yaml"))
    assert "memory" in suite
    for data in deferred:
        events = {e["id"]: e for e in data["events"]}
        order, trigger = events["task"], events["trigger"]
        assert order["say"].startswith("task: as soon as ") and order["say"].endswith("until then stay here")
        assert set(order["expect"]) == {"hold_position", "stop"}
        assert trigger["expect"]["intents"] != order["expect"]            # the task itself, once it holds
        between = [e for e in data["events"] if order["at"] < e.get("at", -1) < trigger["at"]]
        assert len(between) >= 12 and all("expect" not in e for e in between)
        assert trigger["say"] not in suite                                 # the suite's memory scenarios stay unseen
        assert data["duration"] >= trigger["at"] + 14.0 - 1e-9


def test_a_fetch_drives_to_the_warehouse_then_picks_and_resumes_the_stage_it_paused(tmp_path):
    paths = write_scenarios(tmp_path, 120, seed=0)
    fetches = [yaml.safe_load(p.read_text()) for p in paths if "fetch task" in p.read_text()]
    stages = set()
    for data in fetches:
        events = {e["id"]: e for e in data["events"]}
        if "cancel" in events:
            assert "arrived" not in events and "in_reach" not in events     # a cancelled fetch goes nowhere
            continue
        start = events.get("trigger", events["task"])
        assert start["expect"] == {"intents": ["move_to"], "args": {"move_to.zone": "warehouse"}}
        assert events["arrived"]["when"] == {"zone": "warehouse"} and "expect" not in events["arrived"]
        reach = events["in_reach"]
        thing = reach["object"]["name"]
        assert reach["after"] == "arrived" and reach["object"]["in_reach"] == "reach_shelf" and thing in reach["say"]
        assert reach["expect"] == {"intents": ["pick_object"], "args": {"pick_object.object": thing}}
        assert events["done"]["after"] == "in_reach" and data["duration"] >= 26.0
        for pause, resume in (("person_coming", "person_left"), ("motor_heating", "motor_cool")):
            if pause in events:
                at_shelf = events[pause].get("after") == "in_reach"
                stages.add(at_shelf)
                wanted = reach["expect"] if at_shelf else start["expect"]
                assert events[resume]["expect"] == wanted
    assert stages == {True, False}          # interruptions while driving and at the shelf


def test_a_round_records_the_adapter_its_runs_decide_with(tmp_path):
    from csr_llm_core.intent_adapter import DEFAULT_ADAPTER
    from csr_llm_core.model import sha256_file
    from csr_llm_bringup.lab.training_scenarios import decided_with
    bundled = sha256_file(DEFAULT_ADAPTER)[:16]
    assert decided_with(24, 6, []) == {"count": 24, "seed": 6, "bundled_adapter_sha256": bundled,
                                       "adapter_sha256": bundled, "overrides": []}
    other = tmp_path / "other.npz"
    other.write_bytes(b"another adapter")
    prompt = tmp_path / "prompt.yaml"
    prompt.write_text(yaml.safe_dump({"intent_adapter": str(other)}))
    override = [f"reasoning.prompt_file={prompt}"]
    assert decided_with(24, 1, override)["adapter_sha256"] == sha256_file(other)[:16]
    prompt.write_text(yaml.safe_dump({"intent_adapter": ""}))
    assert decided_with(24, 1, override)["adapter_sha256"] == ""               # decided without an adapter
    assert decided_with(24, 1, override)["bundled_adapter_sha256"] == bundled


def test_a_round_is_scored_like_the_bench_so_two_rounds_of_one_seed_compare(tmp_path, monkeypatch):
    """The lockstepped graph is stood in for (it runs in make intent-adapter-round); the scoring, the
    rerun of a failed run and round.json are the real ones."""
    import json
    from csr_llm_bringup.lab import bench_decisions
    from csr_llm_bringup.run_report import RunStats
    from csr_llm_bringup.lab.training_scenarios import main
    codes = {"train_000": iter([0]), "train_001": iter([1, 1])}

    def graph_run(name, runs_dir, overrides):
        stem = Path(name).stem
        stats = RunStats()
        stats.on_time(0.0)
        for record in [{"kind": "start", "scenario": stem, "duration": 3.0, "goals": [], "time": 0.0},
                       {"kind": "event", "event": "task", "time": 1.0, "say": "go", "expect": ["open_door"]},
                       {"kind": "end", "scenario": stem, "time": 3.0, "duration": 3.0, "goals": {}}]:
            stats.on_expectation_record(record)
        stats.on_decision(1.5, 100.0, "open_door", "R1", 0, arguments={})
        stats.on_decision(2.0, 100.0, "stop", "R1", 0, arguments={})
        stats.on_time(3.0)
        stats.write(runs_dir / "latest")
        (runs_dir / "runner.log").write_text("log\n")
        return {"run_dir": runs_dir / "latest", "returncode": next(codes[stem]), "wall_s": 1.0,
                "log": runs_dir / "runner.log"}

    monkeypatch.setattr(bench_decisions, "run_scenario", graph_run)
    runs = tmp_path / "runs"
    assert main(["--count", "2", "--seed", "3", "--scenario-dir", str(tmp_path / "sc"), "--runs-dir", str(runs)]) == 0
    scored = json.loads((runs / "round.json").read_text())
    assert scored["scenarios"]["train_000"]["decision_accuracy"] == 0.5
    assert scored["overall"]["scenarios_failed"] == ["train_001"]
    assert scored["overall"]["scenarios_rerun"] == ["train_001"]
    assert "train_000" in bench_decisions.compare(scored, scored)
