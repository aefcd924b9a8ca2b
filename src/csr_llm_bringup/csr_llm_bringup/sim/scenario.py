"""Scenario engine (plain module): timed and triggered events acting on the simulated world.

A scenario file (YAML)::

    name: default
    description: ...
    duration: 60.0               # s of sim time the story takes (the simulator keeps running after)
    robot: {x: 0.0, y: 0.0, yaw: 0.0}      # optional start pose of the base
    person: {x: 0.8, y: -5.0}              # optional start (and "leave" goal) of the person
    events:
      - id: start                # optional; needed to be referred to by `after`
        at: 1.0                  # fire at this sim time ...
        say: "task: open the door"
      - id: grip
        when: {grip_force_above: 15.0}     # ... or when every condition holds (checked at 100 Hz)
        after: start             # optional: only once these events have fired (id or list) ...
        delay: 0.5               # ... at least this long ago (s)
        say: "handle gripped ({grip_force:.0f} N)"   # str.format with the condition values

Every event fires at most once. Events that become due on the same tick fire in file order.
Conditions (all must hold): grip_force_above, person_distance_below, person_distance_above,
base_x_above, base_x_below, door_angle_above, object_height_above, on_slip (bool), zone (name),
driving (bool), temperature_above / temperature_below ({joint: name, value: C}), time_after.
Actions (any combination, applied in this order): say (text published on `events`), person
({approach: m, speed} | {leave: true, speed} | {to: [x, y], speed}), object ({name, in_reach: pose
name or {joint: rad}} | {name, position: [x, y, z], yaw} | {remove: true}), heat ({joint, rate: C/s,
duration: s} and/or {joint, add: C}), drive ({speed, to_x, heading, timeout} | {speed, duration}:
an operator takeover of the base that overrides cmd_vel until done; kept for tests, the suite's
task scenarios leave driving to the decisions).

Decision expectations (scored by csr_llm_bringup/decision_score.py)::

    bench: true                  # optional: part of `make bench-decisions` (default: it has expectations)
    goals:                       # optional: the task is a success when every goal is reached in time
      - id: at_warehouse
        when: {zone: warehouse}  # the event conditions above, on the simulator's ground truth
        by: 25.0                 # optional deadline (sim s), default: the scenario's duration
    events:
      - id: task
        at: 1.0
        say: "task: go to the warehouse"
        expect: {intents: [move_to], args: {move_to.zone: warehouse}}
      - id: person_close
        when: {person_distance_below: 0.6}
        expect: [back_off, stop, hold_position]     # shorthand: any of these intents
      - id: done
        at: 20.0
        expect: none                                 # scoring ends here

`expect` is what an operator would accept from that event's firing until the next event with an
`expect` fires (or the scenario ends): `none`, an intent, a list of intents, or
{intents: [...], args: {<intent>.<argument>: value | [values] | {min, max}}}. Intent and argument
names and values are checked against the intent catalogue (config/intents.yaml); an argument
constraint names one of the listed intents and only applies to it. Write it from the situation,
never from what the model answers. The simulator publishes every fired event (id, sim time,
expectation) on `scenario/expectations` and the goals' status in `sim/truth`.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

from ..decision_score import ExpectationChange, ExpectationError, Expectation, parse_expectation
from .robot_model import JOINTS

_SCALAR_CONDITIONS = {
    "grip_force_above": ("grip_force", ">"),
    "person_distance_below": ("person_distance", "<"),
    "person_distance_above": ("person_distance", ">"),
    "base_x_above": ("base_x", ">"),
    "base_x_below": ("base_x", "<"),
    "door_angle_above": ("door_angle", ">"),
    "object_height_above": ("object_height", ">"),
    "time_after": ("time", ">="),
}
_EQUAL_CONDITIONS = {"on_slip": "on_slip", "zone": "zone", "driving": "driving"}
_TEMPERATURE_CONDITIONS = ("temperature_above", "temperature_below")
_EVENT_KEYS = {"id", "at", "when", "after", "delay", "say", "person", "object", "heat", "drive", "expect"}
_TOP_KEYS = {"name", "description", "duration", "robot", "person", "events", "goals", "bench"}
_GOAL_KEYS = {"id", "when", "by"}


class ScenarioError(ValueError):
    pass


@dataclass
class Event:
    index: int
    id: str
    at: Optional[float] = None
    when: Dict[str, Any] = field(default_factory=dict)
    after: Tuple[str, ...] = ()
    delay: float = 0.0
    say: Optional[str] = None
    person: Optional[dict] = None
    object: Optional[dict] = None
    heat: Optional[dict] = None
    drive: Optional[dict] = None
    has_expect: bool = False               # the event carries `expect` (None below = `expect: none`)
    expect: Optional[Expectation] = None
    fired_at: Optional[float] = None


@dataclass
class Goal:
    id: str
    when: Dict[str, Any]
    by: float                              # sim s: reached later does not count
    reached_at: Optional[float] = None


def _number(value, where: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ScenarioError(f"{where}: expected a number, got {value!r}") from None
    if not math.isfinite(out):
        raise ScenarioError(f"{where}: expected a finite number, got {value!r}")
    return out


def _check_joint(name, where: str) -> str:
    if name not in JOINTS:
        raise ScenarioError(f"{where}: unknown joint {name!r} (joints: {', '.join(JOINTS)})")
    return str(name)


def _parse_conditions(raw, where: str) -> Dict[str, Any]:
    when = dict(raw or {}) if isinstance(raw, dict) or raw is None else None
    if when is None:
        raise ScenarioError(f"{where}: expected a mapping of conditions")
    for key, value in when.items():
        if key in _SCALAR_CONDITIONS:
            when[key] = _number(value, f"{where}.{key}")
        elif key in _EQUAL_CONDITIONS:
            if key in ("on_slip", "driving") and not isinstance(value, bool):
                raise ScenarioError(f"{where}.{key}: expected true/false")
        elif key in _TEMPERATURE_CONDITIONS:
            if not isinstance(value, dict) or set(value) != {"joint", "value"}:
                raise ScenarioError(f"{where}.{key}: expected {{joint: name, value: C}}")
            when[key] = (_check_joint(value["joint"], f"{where}.{key}"),
                         _number(value["value"], f"{where}.{key}.value"))
        else:
            known = sorted(set(_SCALAR_CONDITIONS) | set(_EQUAL_CONDITIONS) | set(_TEMPERATURE_CONDITIONS))
            raise ScenarioError(f"{where}: unknown condition {key!r} (known: {', '.join(known)})")
    return when


def _parse_goal(i: int, raw, duration: float) -> Goal:
    where = f"goal {i}"
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: expected a mapping {{id, when, by}}, got {raw!r}")
    unknown = set(raw) - _GOAL_KEYS
    if unknown:
        raise ScenarioError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(_GOAL_KEYS)})")
    goal_id = str(raw.get("id", f"goal_{i}"))
    where = f"goal {i} ({goal_id})"
    when = _parse_conditions(raw.get("when"), f"{where}.when")
    if not when:
        raise ScenarioError(f"{where}: needs `when` conditions")
    by = _number(raw.get("by", duration), f"{where}.by")
    return Goal(goal_id, when, by)


def _parse_event(i: int, raw: dict, catalogue=None) -> Event:
    where = f"event {i}"
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: expected a mapping, got {raw!r}")
    unknown = set(raw) - _EVENT_KEYS
    if unknown:
        raise ScenarioError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(_EVENT_KEYS)})")
    ev = Event(index=i, id=str(raw.get("id", f"event_{i}")))
    where = f"event {i} ({ev.id})"
    if "at" in raw:
        ev.at = _number(raw["at"], f"{where}.at")
    ev.when = _parse_conditions(raw.get("when"), f"{where}.when")
    if ev.at is None and not ev.when and "after" not in raw:
        raise ScenarioError(f"{where}: needs `at`, `when` or `after`")
    after = raw.get("after", ())
    ev.after = (str(after),) if isinstance(after, str) else tuple(str(a) for a in after)
    ev.delay = _number(raw.get("delay", 0.0), f"{where}.delay")
    if "say" in raw:
        ev.say = str(raw["say"])
    if "person" in raw:
        p = raw["person"]
        if p == "leave":
            p = {"leave": True}
        if not isinstance(p, dict) or not ({"approach", "leave", "to"} & set(p)):
            raise ScenarioError(f"{where}.person: expected {{approach: m}} | {{leave: true}} | {{to: [x, y]}}")
        if "approach" in p:
            _number(p["approach"], f"{where}.person.approach")
        if "to" in p and (not isinstance(p["to"], (list, tuple)) or len(p["to"]) != 2):
            raise ScenarioError(f"{where}.person.to: expected [x, y]")
        ev.person = dict(p)
    if "object" in raw:
        o = raw["object"]
        if not isinstance(o, dict) or not ({"in_reach", "position", "remove"} & set(o)):
            raise ScenarioError(f"{where}.object: expected in_reach, position or remove")
        ev.object = dict(o)
    if "heat" in raw:
        h = raw["heat"]
        if not isinstance(h, dict) or "joint" not in h:
            raise ScenarioError(f"{where}.heat: expected {{joint, rate, duration}} and/or {{joint, add}}")
        _check_joint(h["joint"], f"{where}.heat")
        for k in ("rate", "duration", "add"):
            if k in h:
                _number(h[k], f"{where}.heat.{k}")
        ev.heat = dict(h)
    if "drive" in raw:
        d = raw["drive"]
        if not isinstance(d, dict) or "speed" not in d or not ({"to_x", "duration"} & set(d)):
            raise ScenarioError(f"{where}.drive: expected {{speed, to_x}} or {{speed, duration}}")
        for k in ("speed", "to_x", "duration", "timeout", "heading", "wz"):
            if k in d:
                _number(d[k], f"{where}.drive.{k}")
        ev.drive = dict(d)
    if "expect" in raw:
        ev.has_expect = True
        try:
            ev.expect = parse_expectation(raw["expect"], catalogue)
        except ExpectationError as err:
            raise ScenarioError(f"{where}.expect: {err}") from None
    return ev


def _conditions_hold(when: Dict[str, Any], world) -> bool:
    for key, value in when.items():
        if key in _SCALAR_CONDITIONS:
            name, op = _SCALAR_CONDITIONS[key]
            v = float(world.condition_value(name))
            if not ((v > value) if op == ">" else (v < value) if op == "<" else (v >= value)):
                return False
        elif key in _EQUAL_CONDITIONS:
            if world.condition_value(_EQUAL_CONDITIONS[key]) != value:
                return False
        else:
            joint, limit = value
            t = float(world.temperatures()[JOINTS.index(joint)])
            if not (t > limit if key == "temperature_above" else t < limit):
                return False
    return True


def default_catalogue():
    """The intent catalogue of this workspace (config/intents.yaml): what `expect` may name."""
    from csr_llm_core.catalogue import CatalogueError, IntentCatalogue
    from ..paths import config_file
    try:
        return IntentCatalogue.from_file(config_file("intents.yaml"))
    except CatalogueError as err:
        raise ScenarioError(f"cannot check `expect` against the intent catalogue: {err}") from None


class Scenario:
    """A parsed scenario plus its run state (which events fired, when)."""

    def __init__(self, data: dict, source: str = "<dict>", catalogue=None):
        if not isinstance(data, dict):
            raise ScenarioError(f"{source}: a scenario is a mapping")
        unknown = set(data) - _TOP_KEYS
        if unknown:
            raise ScenarioError(f"{source}: unknown keys {sorted(unknown)} (known: {sorted(_TOP_KEYS)})")
        self.source = source
        self.name = str(data.get("name", Path(source).stem))
        self.description = str(data.get("description", ""))
        self.duration = _number(data.get("duration", 0.0), "duration")
        robot = data.get("robot")
        self.robot_start = None if robot is None else (
            _number(robot.get("x", 0.0), "robot.x"), _number(robot.get("y", 0.0), "robot.y"),
            _number(robot.get("yaw", 0.0), "robot.yaw"))
        person = data.get("person")
        self.person_start = None if person is None else (_number(person.get("x"), "person.x"),
                                                          _number(person.get("y"), "person.y"))
        raw_events = data.get("events") or []
        if not isinstance(raw_events, list):
            raise ScenarioError(f"{source}: events must be a list")
        if catalogue is None and any(isinstance(e, dict) and "expect" in e for e in raw_events):
            catalogue = default_catalogue()
        self.events = [_parse_event(i, e, catalogue) for i, e in enumerate(raw_events)]
        raw_goals = data.get("goals") or []
        if not isinstance(raw_goals, list):
            raise ScenarioError(f"{source}: goals must be a list")
        self.goals = [_parse_goal(i, g, self.duration) for i, g in enumerate(raw_goals)]
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
        self._by_id = {e.id: e for e in self.events}
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
        return _conditions_hold(ev.when, world)

    def goal_status(self) -> Dict[str, Optional[float]]:
        """Goal id -> sim time it was first reached (None: not yet / not in time)."""
        return {g.id: g.reached_at for g in self.goals}

    def expectation_timeline(self) -> List[ExpectationChange]:
        """The fired events that carry `expect`, in firing order."""
        fired = sorted((e for e in self.events if e.has_expect and e.fired_at is not None),
                       key=lambda e: (e.fired_at, e.index))
        return [ExpectationChange(float(e.fired_at or 0.0), e.id, e.expect) for e in fired]

    def tick(self, world) -> List[Event]:
        """Fire every event that is due now (file order); returns those fired. Then check the goals."""
        now = world.time
        fired = []
        for ev in self.events:
            if ev.fired_at is not None or not self._due(ev, world, now):
                continue
            ev.fired_at = now
            fired.append(ev)
            said = self._apply(ev, world)
            self.log.append((now, ev.id, said))
        for goal in self.goals:
            if goal.reached_at is None and now <= goal.by + 1e-9 and _conditions_hold(goal.when, world):
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
            d = ev.drive
            if d is not None:
                world.drive(float(d["speed"]), to_x=None if d.get("to_x") is None else float(d["to_x"]),
                            duration=None if d.get("duration") is None else float(d["duration"]),
                            wz=float(d.get("wz", 0.0)), timeout=float(d.get("timeout", 20.0)),
                            heading=float(d.get("heading", 0.0)))
        except (ValueError, KeyError, TypeError) as exc:  # a bad action must not stop the simulation
            self.errors.append(f"event {ev.id}: {exc}")
        return said


def resolve_scenario_path(name_or_path: str) -> Path:
    """A file path, or a name looked up as <config>/scenarios/<name>.yaml."""
    p = Path(os.path.expanduser(str(name_or_path)))
    if p.suffix in (".yaml", ".yml") or p.is_file():
        return p
    from ..paths import config_dir
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
    "none"); ``end`` (duration, goal status) once sim time reaches the duration. poll() is cheap
    enough for every physics step."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
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
            if ev.has_expect:
                record["expect"] = "none" if ev.expect is None else ev.expect.to_json()
            out.append(record)
        if not self._ended and now >= sc.duration - 1e-9:
            self._ended = True
            out.append({"kind": "end", "scenario": sc.name, "time": now, "duration": sc.duration,
                        "goals": sc.goal_status()})
        return out
