"""Scenario engine (plain module): timed and triggered events acting on the simulated world.

The file format (events with their conditions and actions, goals, decision expectations) and its
validation are in scenario_format.py; this module loads a file and runs it. Every event fires at
most once; events that become due on the same tick (100 Hz, from the simulator) fire in file order,
then the goals are checked. The simulator publishes every fired event (id, sim time, expectation)
on `scenario/expectations` (``ExpectationFeed``) and the goals' status in `sim/truth`.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import yaml

from ..decision_score import ExpectationChange
from .robot_model import HANDLE_TYPES, JOINTS, world_config
from .scenario_format import (TOP_KEYS, Event, Goal, ScenarioError, check_no_narration, conditions_hold,
                              default_catalogue, finite_number, parse_event, parse_goal)

__all__ = ["Event", "ExpectationFeed", "Goal", "Scenario", "ScenarioError", "default_catalogue", "load_scenario",
           "resolve_scenario_path", "scenario_from_dict"]


class Scenario:
    """A parsed scenario plus its run state (which events fired, when)."""

    def __init__(self, data: dict, source: str = "<dict>", catalogue=None):
        if not isinstance(data, dict):
            raise ScenarioError(f"{source}: a scenario is a mapping")
        unknown = set(data) - TOP_KEYS
        if unknown:
            raise ScenarioError(f"{source}: unknown keys {sorted(unknown)} (known: {sorted(TOP_KEYS)})")
        self.source = source
        self.name = str(data.get("name", Path(source).stem))
        self.description = str(data.get("description", ""))
        self.duration = finite_number(data.get("duration", 0.0), "duration")
        robot = data.get("robot")
        self.robot_start = None if robot is None else (
            finite_number(robot.get("x", 0.0), "robot.x"), finite_number(robot.get("y", 0.0), "robot.y"),
            finite_number(robot.get("yaw", 0.0), "robot.yaw"))
        world = data.get("world") or {}
        if not isinstance(world, dict):
            raise ScenarioError(f"{source}: world must be a mapping of world settings")
        try:
            if world_config(world)["handle"] not in HANDLE_TYPES:
                raise ValueError(f"handle must be one of {list(HANDLE_TYPES)}")
        except ValueError as err:
            raise ScenarioError(f"{source}: world: {err}") from None
        self.world = dict(world)
        person = data.get("person")
        self.person_start = None if person is None else (finite_number(person.get("x"), "person.x"),
                                                                 finite_number(person.get("y"), "person.y"))
        raw_events = data.get("events") or []
        if not isinstance(raw_events, list):
            raise ScenarioError(f"{source}: events must be a list")
        if catalogue is None and any(isinstance(e, dict) and "expect" in e for e in raw_events):
            catalogue = default_catalogue()
        self.events = [parse_event(i, e, catalogue) for i, e in enumerate(raw_events)]
        check_no_narration(self.events, source)
        raw_goals = data.get("goals") or []
        if not isinstance(raw_goals, list):
            raise ScenarioError(f"{source}: goals must be a list")
        self.goals = [parse_goal(i, g, self.duration) for i, g in enumerate(raw_goals)]
        goal_ids = [g.id for g in self.goals]
        dup_goals = sorted({g for g in goal_ids if goal_ids.count(g) > 1})
        if dup_goals:
            raise ScenarioError(f"{source}: duplicate goal ids {dup_goals}")
        bench = data.get("bench", None)
        if bench is not None and not isinstance(bench, bool):
            raise ScenarioError(f"{source}: bench: expected true/false")
        self.has_expectations = any(e.has_expect for e in self.events)
        self.bench = self.has_expectations if bench is None else bench
        ids = [e.id for e in self.events]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise ScenarioError(f"{source}: duplicate event ids {sorted(dup)}")
        for e in self.events:
            for a in e.after:
                if a not in ids:
                    raise ScenarioError(f"event {e.index} ({e.id}): `after` names unknown event {a!r}")
            for g in e.unless_goal:
                if g not in goal_ids:
                    raise ScenarioError(f"event {e.index} ({e.id}): `unless_goal` names unknown goal {g!r}")
        self._by_id = {e.id: e for e in self.events}
        self._goals = {g.id: g for g in self.goals}
        self.log: List[Tuple[float, str, str]] = []   # (time, id, text said or '')
        self.errors: List[str] = []

    @property
    def finished(self) -> bool:
        return all(e.fired_at is not None for e in self.events)

    def fired(self, event_id: str) -> Optional[float]:
        return self._by_id[event_id].fired_at

    # ------------------------------------------------------------------ evaluation
    def _due(self, ev: Event, world, now: float) -> bool:
        if ev.at is not None and now + 1e-9 < ev.at:
            return False
        latest = -math.inf
        for a in ev.after:
            t = self._by_id[a].fired_at
            if t is None:
                return False
            latest = max(latest, t)
        if ev.after and now + 1e-9 < latest + ev.delay:
            return False
        return conditions_hold(ev.when, world)

    def goal_status(self) -> Dict[str, Optional[float]]:
        """Goal id -> sim time it was first reached (None: not yet / not in time)."""
        return {g.id: g.reached_at for g in self.goals}

    def expectation_timeline(self) -> List[ExpectationChange]:
        """The fired events whose `expect` applies, in firing order."""
        fired = sorted((e for e in self.events if e.expect_applies and e.fired_at is not None),
                       key=lambda e: (e.fired_at, e.index))
        return [ExpectationChange(float(e.fired_at or 0.0), e.id, e.expect, e.decides, e.order) for e in fired]

    def tick(self, world) -> List[Event]:
        """Fire every event that is due now (file order); returns those fired. Then check the goals."""
        now = world.time
        fired = []
        for ev in self.events:
            if ev.fired_at is not None or not self._due(ev, world, now):
                continue
            ev.fired_at = now
            ev.expect_void = next((g for g in ev.unless_goal if self._goals[g].reached_at is not None), None)
            fired.append(ev)
            said = self._apply(ev, world)
            self.log.append((now, ev.id, said))
        for goal in self.goals:
            if goal.reached_at is None and now <= goal.by + 1e-9 and conditions_hold(goal.when, world):
                goal.reached_at = now
        return fired

    def _format(self, text: str, world) -> str:

        if "{" not in text:
            return text
        values = {}
        for name in ("grip_force", "base_x", "base_y", "person_distance", "door_angle", "zone", "time"):
            values[name] = world.condition_value(name)
        for j, t in zip(JOINTS, world.temperatures()):
            values[f"temperature_{j}"] = float(t)
        try:
            return text.format(**values)
        except (KeyError, IndexError, ValueError):
            return text

    def _apply(self, ev: Event, world) -> str:
        said = ""
        try:
            if ev.say is not None:
                said = self._format(ev.say, world)
                world.say(said)
            p = ev.person
            if p is not None:
                speed = float(p.get("speed", 1.0))
                if "approach" in p:
                    world.person_approach(float(p["approach"]), speed)
                elif "to" in p:
                    world.person_to(float(p["to"][0]), float(p["to"][1]), speed)
                elif p.get("leave"):
                    world.person_leave(speed)
            o = ev.object
            if o is not None:
                if o.get("remove"):
                    world.remove_object()
                else:
                    world.place_object(str(o.get("name", "box")), position=o.get("position"),
                                       yaw=float(o.get("yaw", 0.0)), in_reach=o.get("in_reach"))
            h = ev.heat
            if h is not None:
                world.heat(h["joint"], rate=float(h.get("rate", 0.0)), duration=float(h.get("duration", 0.0)),
                           add=float(h.get("add", 0.0)))
            c = ev.crate
            if c is not None:
                if c.get("remove"):
                    world.remove_crate()
                else:
                    world.place_crate(float(c["position"][0]), float(c["position"][1]), float(c.get("yaw", 0.0)))
            d = ev.drive
            if d is not None:
                world.drive(float(d["speed"]), to_x=None if d.get("to_x") is None else float(d["to_x"]),
                            duration=None if d.get("duration") is None else float(d["duration"]),
                            wz=float(d.get("wz", 0.0)), timeout=float(d.get("timeout", 20.0)),
                            heading=float(d.get("heading", 0.0)), brake=float(d.get("brake", 0.0)))
        except (ValueError, KeyError, TypeError) as exc:  # a bad action must not stop the simulation
            self.errors.append(f"event {ev.id}: {exc}")
        return said


def resolve_scenario_path(name_or_path: str) -> Path:
    """A file path, or a name looked up as <config>/scenarios/<name>.yaml."""
    p = Path(os.path.expanduser(str(name_or_path)))
    if p.suffix in (".yaml", ".yml") or p.is_file():
        return p
    from csr_llm_common.paths import config_dir
    return config_dir() / "scenarios" / f"{name_or_path}.yaml"


def load_scenario(name_or_path: str) -> Scenario:
    path = resolve_scenario_path(name_or_path)
    try:
        with open(path, "r", encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario {name_or_path!r} ({path}): {exc}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from None
    try:
        return Scenario(data, str(path))
    except ScenarioError as err:   # name the file in every message (event and goal errors do not)
        raise ScenarioError(str(err) if str(err).startswith(str(path)) else f"{path}: {err}") from None


def scenario_from_dict(data: dict) -> Scenario:
    return Scenario(data)


class ExpectationFeed:
    """JSON records of the scoring timeline, for the simulator's `scenario/expectations` topic.

    ``start`` (scenario, duration, goal ids) first; then one ``event`` record per fired event (id,
    sim time, text said, and ``expect`` when the event carries one: the expectation's JSON or
    "none", with ``decides`` (the window's class) and ``order``; ``expect_void`` instead when an
    ``unless_goal`` goal voided it); ``end`` (duration, goal status, goal deadlines, and what
    `robot_outcome` returns: the simulator's safety counters and motion intervals) once sim time
    reaches the duration. poll() is cheap enough for every physics step."""

    def __init__(self, scenario: Scenario, robot_outcome: Optional[Callable[[], Dict[str, Any]]] = None):
        self.scenario = scenario
        self._robot_outcome = robot_outcome
        self._sent_log = 0
        self._started = self._ended = False

    def poll(self, now: float) -> List[dict]:
        sc = self.scenario
        out: List[dict] = []
        if not self._started:
            self._started = True
            out.append({"kind": "start", "scenario": sc.name, "duration": sc.duration,
                        "goals": [g.id for g in sc.goals], "time": now})
        while self._sent_log < len(sc.log):
            t, event_id, said = sc.log[self._sent_log]
            self._sent_log += 1
            ev = sc._by_id[event_id]
            record = {"kind": "event", "scenario": sc.name, "event": event_id, "time": t, "say": said}
            if ev.expect_applies:
                record["expect"] = "none" if ev.expect is None else ev.expect.to_json()
                record["decides"], record["order"] = ev.decides, ev.order
            elif ev.expect_void is not None:
                record["expect_void"] = f"goal {ev.expect_void} reached"
            out.append(record)
        if not self._ended and now >= sc.duration - 1e-9:
            self._ended = True
            end = {"kind": "end", "scenario": sc.name, "time": now, "duration": sc.duration,
                   "goals": sc.goal_status(), "goal_deadlines": {g.id: g.by for g in sc.goals}}
            if self._robot_outcome is not None:
                end.update(self._robot_outcome())
            out.append(end)
        return out
