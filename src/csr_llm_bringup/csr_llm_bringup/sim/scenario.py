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
an operator takeover of the base that overrides cmd_vel until done).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

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
_EVENT_KEYS = {"id", "at", "when", "after", "delay", "say", "person", "object", "heat", "drive"}
_TOP_KEYS = {"name", "description", "duration", "robot", "person", "events"}


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
    fired_at: Optional[float] = None


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


def _parse_event(i: int, raw: dict) -> Event:
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
    when = dict(raw.get("when") or {})
    if not isinstance(when, dict):
        raise ScenarioError(f"{where}.when: expected a mapping of conditions")
    for key, value in when.items():
        if key in _SCALAR_CONDITIONS:
            when[key] = _number(value, f"{where}.when.{key}")
        elif key in _EQUAL_CONDITIONS:
            if key in ("on_slip", "driving") and not isinstance(value, bool):
                raise ScenarioError(f"{where}.when.{key}: expected true/false")
        elif key in _TEMPERATURE_CONDITIONS:
            if not isinstance(value, dict) or set(value) != {"joint", "value"}:
                raise ScenarioError(f"{where}.when.{key}: expected {{joint: name, value: C}}")
            when[key] = (_check_joint(value["joint"], f"{where}.when.{key}"),
                         _number(value["value"], f"{where}.when.{key}.value"))
        else:
            raise ScenarioError(f"{where}.when: unknown condition {key!r}")
    ev.when = when
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
    return ev


class Scenario:
    """A parsed scenario plus its run state (which events fired, when)."""

    def __init__(self, data: dict, source: str = "<dict>"):
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
        self.events = [_parse_event(i, e) for i, e in enumerate(raw_events)]
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
        for key, value in ev.when.items():
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

    def tick(self, world) -> List[Event]:
        """Fire every event that is due now (file order); returns those fired."""
        now = world.time
        fired = []
        for ev in self.events:
            if ev.fired_at is not None or not self._due(ev, world, now):
                continue
            ev.fired_at = now
            fired.append(ev)
            said = self._apply(ev, world)
            self.log.append((now, ev.id, said))
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
    return Scenario(data, str(path))


def scenario_from_dict(data: dict) -> Scenario:
    return Scenario(data)
