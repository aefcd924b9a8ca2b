"""Generated scenarios for the intent adapter's live episodes (plain module, no rclpy).

The adapter's generated episodes (csr_llm_core/lab/decision_training.py) are written text: they differ
from what the live graph puts in the state (sensor summaries at the aggregator's rates, the router's
own reports of what runs, the timing of event-triggered decisions) and they never show the states
the robot's own decisions lead to (stopped for a person who has left, a task repeated after it
finished). These scenarios run through the real lockstepped graph like the bench suite
(`csr_llm_core.lab.intent_adapter_build --live-runs`), and every decision it makes there becomes a
training probe, labelled by the scenario's `expect` in force at its stamp.

Each scenario is a random composition in the bench format (sim/scenario_format.py): one task (open
the door, go to a zone, pick an object at the shelf, fetch one from the warehouse: drive there, then
pick it at the shelf), at most one interruption (a person coming
close and leaving, a motor overheating and cooling, a cancel, a repeated order, injected text, a
change of plan, conflicting operators, a slippery floor, an order deferred until a condition with many
notices before it holds), unrelated notices, and the task's end.
Expectations follow the situation as an operator would state them. Like the suite, a generated
scenario says only what the robot cannot sense (orders, notices, distractors, the object put on the
shelf): the person, the heat, the slip, the arrival, the grip and the task's end are world events
and conditions the graph senses and writes itself (the sim profile's sensed lines). Where the
router's reflex holds the robot by itself (a person close, a hot motor), going on with the running
task is as sensible as pausing. The wording comes from the generator's phrase lists
(decision_training.py), not from config/scenarios, and no bench scenario is ever run for training:
the suite stays held out.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from csr_llm_core.lab.decision_training import (CANCEL, CHANGE, DOOR_ORDERS, FETCH_ORDERS, GOTO_ORDERS, HOSTILE,
                                            NOTICE_SUBJECTS, NOTICE_TEXTS, OBJECT_SEEN, OBJECTS, PICK_ORDERS,
                                            REPEAT)

SAFE = ["hold_position", "stop"]
PAUSE = ["back_off", "stop", "hold_position"]
BACK_OFF_MAX = {"back_off.distance": {"max": 0.5}}
HOT_JOINTS = ("arm_shoulder_lift", "arm_elbow", "arm_shoulder_pan")
# start poses (the simulator's world: door zone -0.7..1.2 m, warehouse beyond, corridor behind)
START = {"warehouse": (-0.5, 0.3), "corridor": (0.0, 0.4), "door_zone": (2.5, 2.6)}
INTERRUPTIONS = ("none", "person", "motor", "cancel", "repeat", "hostile", "notices", "deferred")
# deferred orders ("as soon as X, do Y; until then stay here"): conditions of their own, so the
# suite's memory scenarios stay unseen
DEFERRED = (("the charging station is free", "charging station 2 is free now"),
            ("the forklift has left the aisle", "the forklift has left the aisle"),
            ("the visitor has signed in", "reception: the visitor has signed in"),
            ("the inspection is finished", "inspector: inspection finished, you may continue"))
GOTO_ONLY = ("change", "conflict", "slip")


class _Builder:
    """One scenario under construction: events in time order, goals, the task's expectation."""

    def __init__(self, rng: random.Random, name: str):
        self.rng = rng
        self.events: List[Dict[str, Any]] = []
        self.goals: List[Dict[str, Any]] = []
        self.data: Dict[str, Any] = {"name": name, "bench": False}

    def pick(self, options, **fill) -> str:
        text = self.rng.choice(options)
        return text.format(**fill) if fill else text

    def event(self, event_id: str, say: Optional[str] = None, **fields) -> Dict[str, Any]:
        event: Dict[str, Any] = {"id": event_id, **fields}
        if say is not None:
            event["say"] = say
        self.events.append(event)
        return event

    def notices(self, start: float, end: float, count: int) -> None:
        for i in range(count):
            at = round(self.rng.uniform(start, end), 1)
            self.event(f"notice_{len(self.events)}_{i}",
                       f"{self.rng.choice(NOTICE_SUBJECTS)}: {self.rng.choice(NOTICE_TEXTS)}", at=at)


def _task(b: _Builder) -> Dict[str, Any]:
    """Start pose, order, goal and the task's expectation; returns the task description."""
    kind = b.rng.choice(("door", "goto", "goto", "pick", "fetch", "fetch"))
    if kind == "door":
        expect: Dict[str, Any] = {"intents": ["open_door"]}
        order = b.pick(DOOR_ORDERS)
        goal = {"id": "done", "when": {"door_angle_above": 0.15}}
        done = {"when": {"door_angle_above": 0.15}}
        b.data["robot"] = {"x": 0.0, "y": 0.0, "yaw": 0.0}
        return {"kind": kind, "expect": expect, "order": order, "goal": goal, "done": done, "x": 0.0}
    if kind == "fetch":
        # two stages: drive to the warehouse (move_to), then, at the shelf, pick the object
        thing = b.rng.choice(OBJECTS)
        x = round(b.rng.uniform(*START["warehouse"]), 2)
        b.data["robot"] = {"x": x, "y": 0.0, "yaw": 0.0}
        pick = {"intents": ["pick_object"], "args": {"pick_object.object": thing}}
        return {"kind": kind, "x": x, "target": thing,
                "expect": {"intents": ["move_to"], "args": {"move_to.zone": "warehouse"}}, "pick": pick,
                "order": b.pick(FETCH_ORDERS, x=thing), "seen": b.pick(OBJECT_SEEN, x=thing),
                "goal": {"id": "done", "when": {"object_height_above": 0.54}},
                "done": {"after": "in_reach", "when": {"object_height_above": 0.54}}}
    if kind == "pick":
        thing = b.rng.choice(OBJECTS)
        b.data["robot"] = {"x": 2.4, "y": 0.0, "yaw": 0.0}
        b.event("object_appears", b.pick(OBJECT_SEEN, x=thing), at=0.5,
                object={"name": thing, "in_reach": "reach_shelf"})
        return {"kind": kind, "expect": {"intents": ["pick_object"], "args": {"pick_object.object": thing}},
                "order": b.pick(PICK_ORDERS, x=thing), "x": 2.4, "target": thing,
                "goal": {"id": "done", "when": {"object_height_above": 0.54}},
                "done": {"when": {"object_height_above": 0.54}}}
    zone = b.rng.choice(("warehouse", "corridor", "door"))
    low, high = START["door_zone" if zone == "door" else zone]
    x = round(b.rng.uniform(low, high), 2)
    b.data["robot"] = {"x": x, "y": 0.0, "yaw": 0.0}
    return {"kind": kind, "zone": zone, "x": x,
            "expect": {"intents": ["move_to"], "args": {"move_to.zone": zone}},
            "order": b.pick(GOTO_ORDERS, z=zone), "goal": {"id": "done", "when": {"zone": zone}},
            "done": {"when": {"zone": zone}}}


def _with_pause(task_expect: Dict[str, Any], *pauses: str) -> Dict[str, Any]:
    """The task's expectation widened by pausing intents (the task may go on, or pause)."""
    args = dict(task_expect.get("args", {}))
    if "back_off" in pauses:
        args.update(BACK_OFF_MAX)
    return {"intents": list(task_expect["intents"]) + list(pauses), "args": args}


def build(rng: random.Random, name: str) -> Dict[str, Any]:
    """One random training scenario as a scenario-file mapping."""
    b = _Builder(rng, name)
    task = _task(b)
    task_at = round(rng.uniform(0.8, 2.5), 1)
    if rng.random() < 0.3:          # idle before the order: nothing to do yet
        b.event("idle", b.pick(("robot ready, waiting for a task", "standing by")), at=0.3, expect=SAFE)
        b.notices(0.5, task_at - 0.1, rng.randint(1, 3))
    kinds = INTERRUPTIONS + (GOTO_ONLY if task["kind"] == "goto" else ())
    interruption = rng.choice(kinds)
    duration = _order(b, task, interruption, task_at)
    t1 = round(task_at + rng.uniform(1.0, 3.0), 1)
    duration = _interruption(b, task, interruption, t1, task_at, duration)
    _finish(b, task, interruption, duration)
    return b.data


def _order(b: _Builder, task: Dict[str, Any], interruption: str, task_at: float) -> float:
    """The task's order at task_at (for "conflict": two operators and the resolution; for
    "deferred": its condition, notices, then the trigger); returns the scenario's duration so far."""
    rng, expect = b.rng, task["expect"]
    if interruption == "conflict":
        other = rng.choice([z for z in ("warehouse", "corridor", "door") if z != task["zone"]])
        b.event("order_a", f"operator Anna: {task['order'].split(': ', 1)[-1]}", at=task_at)
        b.event("order_b", f"operator Ben: no, do not go to the {task['zone']}, go to the {other}",
                at=round(task_at + rng.uniform(0.2, 0.6), 1), expect=SAFE)
        b.event("resolved", f"supervisor: Anna's order stands, go to the {task['zone']}",
                at=round(task_at + rng.uniform(4.0, 6.0), 1), expect=expect)
        return 22.0
    if interruption == "deferred":
        # the order waits for a condition, then ~1,000 tokens of notices push it back in the prefix
        condition, trigger = rng.choice(DEFERRED)
        order = task["order"].split(": ", 1)[-1]
        b.event("task", f"task: as soon as {condition}, {order}; until then stay here", at=task_at, expect=SAFE)
        trigger_at = round(task_at + rng.uniform(8.0, 11.0), 1)
        b.notices(task_at + 0.4, trigger_at - 0.4, rng.randint(12, 18))
        b.event("trigger", trigger, at=trigger_at, expect=expect)
        return round(trigger_at + (20.0 if task["kind"] == "fetch" else 14.0), 1)
    b.event("task", task["order"], at=task_at, expect=expect)
    return 16.0


def _interruption(b: _Builder, task: Dict[str, Any], interruption: str, t1: float, task_at: float,
                  duration: float) -> float:
    """The interruption's events (from t1, or once a fetch is at the shelf); returns the duration.
    Cancel and change rewrite the task's end ("done", "goal")."""
    rng, expect = b.rng, task["expect"]
    # when the interruption comes: at t1 (a fetch is then still driving), or once a fetch is at the
    # shelf; the task resumes with the stage it interrupted
    anchor: Dict[str, Any] = {"at": t1}
    resume = expect
    if task["kind"] == "fetch" and interruption in ("person", "motor") and rng.random() < 0.5:
        anchor, resume = {"after": "in_reach", "delay": round(rng.uniform(0.3, 1.2), 1)}, task["pick"]
    if interruption == "person":
        _person(b, task, anchor, resume)
        return 20.0
    if interruption == "motor":
        _motor(b, anchor, resume)
        return 20.0
    if interruption == "cancel":
        b.event("cancel", b.pick(CANCEL), at=t1, expect=SAFE)
        task["done"] = None         # a cancelled task has no end to report
    elif interruption == "repeat":
        order = task["order"].split(": ", 1)[-1]
        b.event("repeat_1", b.pick(REPEAT, order=order), at=t1, unless_goal="done", expect=expect)
        if rng.random() < 0.5:
            b.event("repeat_2", b.pick(REPEAT, order=order), at=round(t1 + rng.uniform(0.5, 2.0), 1),
                    unless_goal="done", expect=expect)
    elif interruption == "hostile":
        for i in range(rng.randint(1, 2)):
            b.event(f"injection_{i}", b.pick(HOSTILE), at=round(t1 + 3.0 * i, 1),
                    unless_goal="done", expect=_with_pause(expect, "hold_position", "stop"))
    elif interruption == "notices":
        b.notices(t1, t1 + 8.0, rng.randint(3, 6))
    elif interruption == "change":
        other = rng.choice([z for z in ("warehouse", "corridor", "door") if z != task["zone"]])
        b.event("change", b.pick(CHANGE, order=f"go to the {other}"), at=t1,
                expect={"intents": ["move_to"], "args": {"move_to.zone": other}})
        task["goal"] = {"id": "done", "when": {"zone": other}}
        task["done"] = {"after": "change", "when": {"zone": other}}
        return 22.0
    elif interruption == "slip":
        b.event("wet_floor", "facility notice: the floor near the corridor is wet and slippery",
                at=round(task_at - 0.4, 1) if task_at > 0.9 else 0.5)
        b.event("slip_on", when={"on_slip": True},
                expect={"intents": ["stop", "hold_position", "move_to"], "args": dict(expect.get("args", {}))})
        b.event("slip_off", after="slip_on", when={"on_slip": False})
    return duration


def _person(b: _Builder, task: Dict[str, Any], anchor: Dict[str, Any], resume: Dict[str, Any]) -> None:
    """A person starts to the side of the robot, walks up to it and leaves again."""
    rng = b.rng
    b.data["person"] = {"x": round(task["x"] + rng.uniform(-0.4, 0.8), 2), "y": round(rng.uniform(-2.6, -1.6), 2)}
    b.event("person_coming", person={"approach": 0.4, "speed": 1.0},
            expect=_with_pause(resume, "hold_position", "stop", "back_off"), **anchor)
    b.event("person_close", after="person_coming", when={"person_distance_below": 0.6},
            expect=_with_pause(resume, *PAUSE))
    b.event("person_leaving", after="person_coming", delay=round(rng.uniform(3.5, 6.0), 1),
            person={"leave": True, "speed": 1.2})
    b.event("person_left", after="person_leaving", when={"person_distance_above": 1.5},
            unless_goal="done", expect=resume)


def _motor(b: _Builder, anchor: Dict[str, Any], resume: Dict[str, Any]) -> None:
    """A joint motor heats past 70 C, then cools below 60 C."""
    joint = b.rng.choice(HOT_JOINTS)
    b.event("motor_heating", heat={"joint": joint, "add": 50.0}, **anchor)
    b.event("motor_hot", after="motor_heating", when={"temperature_above": {"joint": joint, "value": 70.0}},
            expect=_with_pause(resume, *SAFE))
    b.event("motor_cool", after="motor_hot", when={"temperature_below": {"joint": joint, "value": 60.0}},
            unless_goal="done", expect=resume)


def _finish(b: _Builder, task: Dict[str, Any], interruption: str, duration: float) -> None:
    """A fetch's second stage, the task's end, the scenario's end and its header fields."""
    if task["kind"] == "fetch" and interruption != "cancel":
        started_by = {"conflict": "resolved", "deferred": "trigger"}.get(interruption, "task")
        b.event("arrived", after=started_by, when={"zone": "warehouse"})
        b.event("in_reach", task["seen"], after="arrived", delay=1.0,
                object={"name": task["target"], "in_reach": "reach_shelf"}, expect=task["pick"])
        duration = max(duration, 26.0)
    if task.get("done"):
        b.event("done", expect=SAFE, **task["done"])
        b.goals.append(task["goal"])
    b.event("scenario_end", "scenario complete", at=round(duration - 0.1, 1))
    b.data["duration"] = duration
    b.data.setdefault("person", {"x": 0.8, "y": -5.0})
    b.data["description"] = f"generated training scenario: {task['kind']} task, {interruption}"
    if b.goals:
        b.data["goals"] = b.goals
    # timed events in time order, triggered ones after them (file order only breaks same-tick ties)
    b.data["events"] = sorted(b.events, key=lambda e: e.get("at", 1e9))


def write_scenarios(directory: Path, count: int, seed: int = 0) -> List[Path]:
    """`count` scenario files `train_NNN.yaml` in `directory` (validated by the scenario loader)."""
    from ..sim.scenario import load_scenario
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        name = f"train_{index:03d}"
        path = directory / f"{name}.yaml"
        path.write_text(yaml.safe_dump(build(rng, name), sort_keys=False, width=200))
        load_scenario(str(path))            # a generator bug is an error here, not a silent bad run
        paths.append(path)
    return paths


def decided_with(count: int, seed: int, overrides: List[str]) -> Dict[str, Any]:
    """What the runs decide with: the bundled adapter, or the one a `reasoning.prompt_file` override
    names (`adapter_sha256`, "" for none). An adapter trained on them is one more step of the loop
    that collected them (DAgger), and its file says which."""
    from csr_llm_core.intent_adapter import DEFAULT_ADAPTER
    from csr_llm_core.model import sha256_file
    from csr_llm_common.paths import expand_path
    adapter: Optional[Path] = DEFAULT_ADAPTER
    for override in overrides:
        name, _, value = override.partition("=")
        if name == "reasoning.prompt_file":
            setting = (yaml.safe_load(Path(value).read_text()) or {}).get("intent_adapter", "default")
            adapter = DEFAULT_ADAPTER if setting == "default" else Path(expand_path(setting)) if setting else None
    bundled = sha256_file(DEFAULT_ADAPTER)[:16] if DEFAULT_ADAPTER.exists() else ""
    used = sha256_file(adapter)[:16] if adapter is not None and adapter.exists() else ""
    return {"count": count, "seed": seed, "bundled_adapter_sha256": bundled, "adapter_sha256": used,
            "overrides": list(overrides)}


def main(argv=None) -> int:
    """Write the training scenarios and run each once through the lockstepped graph."""
    import argparse
    import time
    from csr_llm_common.catalogue import IntentCatalogue
    from .bench_decisions import bench_json, run_with_reruns, score_run, table
    from csr_llm_common.paths import config_dir
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=24)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scenario-dir", type=Path, default=Path("build/intent_adapter/scenarios"))
    parser.add_argument("--runs-dir", type=Path, default=Path("build/intent_adapter/live_runs"))
    parser.add_argument("--set", action="append", default=[], metavar="NODE.PARAM=VALUE",
                        help="parameter override for every run (e.g. the adapter the runs decide with)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    paths = write_scenarios(args.scenario_dir, args.count, args.seed)
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    provenance = decided_with(args.count, args.seed, args.set)
    (args.runs_dir / "decided_with.json").write_text(json.dumps(provenance) + "\n")
    catalogue = IntentCatalogue.from_file(config_dir() / "intents.yaml")
    results: Dict[str, Dict[str, Any]] = {}
    for index, path in enumerate(paths, 1):
        run, reruns = run_with_reruns(str(path.resolve()), args.runs_dir / path.stem, args.set, reruns=1)
        print(f"[training-scenarios] {index}/{len(paths)} {path.stem}: exit {run['returncode']}, "
              f"{run['wall_s']:.0f} s wall ({time.monotonic() - started:.0f} s in all)", flush=True)
        results[path.stem] = score_run(run, catalogue, reruns, tag="training-scenarios")
    # the round scored like the bench: two rounds of one seed compare with bench_decisions --compare
    scored = bench_json(results, time.monotonic() - started)
    (args.runs_dir / "round.json").write_text(json.dumps(scored, indent=2) + "\n")
    print(table(scored))
    failed = len(scored["overall"]["scenarios_failed"])
    return 1 if paths and failed == len(paths) else 0


if __name__ == "__main__":
    raise SystemExit(main())
