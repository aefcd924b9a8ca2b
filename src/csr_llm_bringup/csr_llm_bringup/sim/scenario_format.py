"""Scenario file format (plain module): the tables of conditions and keys, and the validation
that turns a scenario file's events and goals into ``Event``/``Goal`` records (scenario.py runs them).

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
      - id: cleaner
        when: {zone: door}       # ... or when every condition holds (checked at 100 Hz)
        after: start             # optional: only once these events have fired (id or list) ...
        delay: 0.5               # ... at least this long ago (s)
        say: "the cleaner waits at the {zone}"   # str.format with the condition values
        decides: reasoning       # a notice the robot cannot sense (see below)

A scenario says only what the robot cannot sense (orders, notices, distractors): a `say:` on an
event whose window is ``sensed`` (below) narrates what the graph senses itself, and the file is
refused with one line naming the converter (``check_no_narration``; scenario_convert.py).
Every event fires at most once. Events that become due on the same tick fire in file order.
Conditions (all must hold): grip_force_above, person_distance_below, person_distance_above,
base_x_above, base_x_below, door_angle_above, object_height_above, on_slip (bool), zone (name),
driving (bool), temperature_above / temperature_below ({joint: name, value: C}), time_after.
Actions (any combination, applied in this order): say (text published on `events`), person
({approach: m, speed} | {leave: true, speed} | {to: [x, y], speed}), object ({name, in_reach: pose
name or {joint: rad}} | {name, position: [x, y, z], yaw} | {remove: true}), heat ({joint, rate: C/s,
duration: s} and/or {joint, add: C}), drive ({speed, to_x, heading, timeout} | {speed, duration},
optional brake: s of wheels held at zero afterwards): an operator takeover of the base that
overrides cmd_vel until done; kept for tests, the suite's
task scenarios leave driving to the decisions), crate ({position: [x, y], yaw} | {remove: true}: the
visual crate on the floor, what the head camera sees in the path).
``world`` (top level, optional): world settings of robot_model.DEFAULT_WORLD for this scenario,
e.g. ``world: {handle: knob}`` (lever | knob | none).

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
never from what the model answers. ``decides: reasoning | sensed`` says what decides the event's
window: ``reasoning`` when only understanding the text can (an order, a cancel, conflicting or
deferred orders, hostile text, a question of memory), ``sensed`` when the sensed state alone does
(a person close, a hot motor, a slip, a task done); default: ``sensed`` for an event fired by
`when:` conditions or one that says nothing, else ``reasoning`` (set it where a timed line only
reports the sensed state, e.g. "person approaching"). `decision_accuracy` counts the reasoning
windows; a reasoning window that only tasks answer (no pausing intent) is an *order*, timed by
`order_to_motion_s` (docs/benchmarks.md). ``unless_goal: <goal id> | [ids]`` voids an event's `expect`
when one of those goals was reached before the event fired (the event still fires, says its line
and acts; the expectation in force stays): "the motor cooled down: resume the pick" asks nothing
once the object is already lifted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from ..decision_score import ExpectationError, Expectation, parse_expectation
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
_EVENT_KEYS = {"id", "at", "when", "after", "delay", "say", "person", "object", "heat", "drive", "crate", "expect",
               "unless_goal", "decides"}
REASONING, SENSED = "reasoning", "sensed"
DECIDES = (REASONING, SENSED)
TOP_KEYS = {"name", "description", "duration", "robot", "person", "events", "goals", "bench", "world"}
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
    crate: Optional[dict] = None
    has_expect: bool = False               # the event carries `expect` (None below = `expect: none`)
    expect: Optional[Expectation] = None
    unless_goal: Tuple[str, ...] = ()      # goals that, reached before the event fires, void its `expect`
    expect_void: Optional[str] = None      # the goal that voided it (set when the event fired)
    decides: str = REASONING               # what decides its window: the text (reasoning) or the sensed state
    order: bool = False                    # a reasoning window that only a task (no pausing intent) answers
    fired_at: Optional[float] = None

    @property
    def expect_applies(self) -> bool:
        """The event's `expect` changes the expectation (it has one, and no `unless_goal` voided it)."""
        return self.has_expect and self.expect_void is None


@dataclass
class Goal:
    id: str
    when: Dict[str, Any]
    by: float                              # sim s: reached later does not count
    reached_at: Optional[float] = None


def finite_number(value, where: str) -> float:
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
            when[key] = finite_number(value, f"{where}.{key}")
        elif key in _EQUAL_CONDITIONS:
            if key in ("on_slip", "driving") and not isinstance(value, bool):
                raise ScenarioError(f"{where}.{key}: expected true/false")
        elif key in _TEMPERATURE_CONDITIONS:
            if not isinstance(value, dict) or set(value) != {"joint", "value"}:
                raise ScenarioError(f"{where}.{key}: expected {{joint: name, value: C}}")
            when[key] = (_check_joint(value["joint"], f"{where}.{key}"),
                         finite_number(value["value"], f"{where}.{key}.value"))
        else:
            known = sorted(set(_SCALAR_CONDITIONS) | set(_EQUAL_CONDITIONS) | set(_TEMPERATURE_CONDITIONS))
            raise ScenarioError(f"{where}: unknown condition {key!r} (known: {', '.join(known)})")
    return when


def parse_goal(i: int, raw, duration: float) -> Goal:
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
    by = finite_number(raw.get("by", duration), f"{where}.by")
    return Goal(goal_id, when, by)


def parse_event(i: int, raw: dict, catalogue=None) -> Event:
    where = f"event {i}"
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: expected a mapping, got {raw!r}")
    unknown = set(raw) - _EVENT_KEYS
    if unknown:
        raise ScenarioError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(_EVENT_KEYS)})")
    ev = Event(index=i, id=str(raw.get("id", f"event_{i}")))
    where = f"event {i} ({ev.id})"
    if "at" in raw:
        ev.at = finite_number(raw["at"], f"{where}.at")
    ev.when = _parse_conditions(raw.get("when"), f"{where}.when")
    if ev.at is None and not ev.when and "after" not in raw:
        raise ScenarioError(f"{where}: needs `at`, `when` or `after`")
    after = raw.get("after", ())
    ev.after = (str(after),) if isinstance(after, str) else tuple(str(a) for a in after)
    ev.delay = finite_number(raw.get("delay", 0.0), f"{where}.delay")
    if "say" in raw:
        ev.say = str(raw["say"])
    if "person" in raw:
        p = raw["person"]
        if p == "leave":
            p = {"leave": True}
        if not isinstance(p, dict) or not ({"approach", "leave", "to"} & set(p)):
            raise ScenarioError(f"{where}.person: expected {{approach: m}} | {{leave: true}} | {{to: [x, y]}}")
        if "approach" in p:
            finite_number(p["approach"], f"{where}.person.approach")
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
                finite_number(h[k], f"{where}.heat.{k}")
        ev.heat = dict(h)
    if "drive" in raw:
        d = raw["drive"]
        if not isinstance(d, dict) or "speed" not in d or not ({"to_x", "duration"} & set(d)):
            raise ScenarioError(f"{where}.drive: expected {{speed, to_x}} or {{speed, duration}}")
        for k in ("speed", "to_x", "duration", "timeout", "heading", "wz", "brake"):
            if k in d:
                finite_number(d[k], f"{where}.drive.{k}")
        ev.drive = dict(d)
    if "crate" in raw:
        c = raw["crate"]
        if not isinstance(c, dict) or not ({"position", "remove"} & set(c)):
            raise ScenarioError(f"{where}.crate: expected {{position: [x, y]}} or {{remove: true}}")
        if "position" in c and (not isinstance(c["position"], (list, tuple)) or len(c["position"]) != 2):
            raise ScenarioError(f"{where}.crate.position: expected [x, y]")
        for v in c.get("position", []) + ([c["yaw"]] if "yaw" in c else []):
            finite_number(v, f"{where}.crate")
        ev.crate = dict(c)
    if "expect" in raw:
        ev.has_expect = True
        try:
            ev.expect = parse_expectation(raw["expect"], catalogue)
        except ExpectationError as err:
            raise ScenarioError(f"{where}.expect: {err}") from None
    if "unless_goal" in raw:
        goals = raw["unless_goal"]
        ev.unless_goal = (str(goals),) if isinstance(goals, str) else tuple(str(g) for g in goals or ())
        if not ev.has_expect or not ev.unless_goal:
            raise ScenarioError(f"{where}.unless_goal: names goal ids, and needs an `expect` to void")
    ev.decides = window_class(raw, where)
    ev.order = (ev.decides == REASONING and ev.expect is not None and catalogue is not None
                and not any(catalogue[name].pauses_task for name in ev.expect.intents))
    return ev


def window_class(raw: dict, where: str = "event") -> str:
    """`decides:` as written, else from the event's structure: fired by a sensed condition
    (`when:`) or saying nothing -> sensed; a line said at a time or after other events -> reasoning."""
    if "decides" in raw:
        value = raw["decides"]
        if value not in DECIDES:
            raise ScenarioError(f"{where}.decides: expected one of {', '.join(DECIDES)}, got {value!r}")
        return str(value)
    return SENSED if raw.get("when") or "say" not in raw else REASONING


def check_no_narration(events, source: str) -> None:
    """A scenario says only what the robot cannot sense: a `say:` on a sensed event narrates what
    the graph writes itself (its sensed lines), and is refused with one line naming the fix."""
    for ev in events:
        if ev.say is not None and ev.decides == SENSED:
            raise ScenarioError(
                f"{source}: event {ev.index} ({ev.id}) narrates a sensed situation (`say:` on a sensed event; "
                f"the graph writes these lines itself): convert the file with `csr-llm scenario convert {source}` "
                f"(or set `decides: reasoning` if the robot cannot sense it)")


def conditions_hold(when: Dict[str, Any], world) -> bool:
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
    from csr_llm_common.catalogue import CatalogueError, IntentCatalogue
    from csr_llm_common.paths import config_file
    try:
        return IntentCatalogue.from_file(config_file("intents.yaml"))
    except CatalogueError as err:
        raise ScenarioError(f"cannot check `expect` against the intent catalogue: {err}") from None
