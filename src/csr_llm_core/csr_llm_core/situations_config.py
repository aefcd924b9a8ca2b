"""Thresholds, hysteresis, rates and wording of the sensed situation lines (plain module, no rclpy).

One dataclass per situation kind; ``load_situations`` reads ``config/situations.yaml`` (or any file
with the same sections) over these defaults and refuses an unknown key, a bad number or a wording
template that names a field its kind does not supply, with one clear line. The meaning of each
value is documented in config/situations.yaml and docs/situations.md.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Tuple, Union

import yaml


@dataclass
class SensedParameters:
    """The aggregator node's parameters for sensed lines (declared next to AggregatorConfig's)."""
    sensed_lines: bool = False       # off: no extra subscriptions, the chunk stream as without them
    situations_file: str = ""        # "" = config/situations.yaml of this workspace


@dataclass
class ProximityConfig:
    approach_m: float = 2.0          # nearer than this: a person is approaching
    close_m: float = 0.6             # nearer than this: a person is close (the router's person_distance)
    hysteresis_m: float = 0.2        # a state is left only this far past its threshold
    min_interval_s: float = 1.0      # at most one line per this many seconds of sensor time
    wording: Dict[str, str] = field(default_factory=lambda: {
        "approaching": "person approaching ({distance:.1f} m)",
        "close": "person close to the robot ({distance:.2f} m)",
        "moving_away": "person moving away ({distance:.1f} m)",
        "gone": "person gone"})


@dataclass
class GripConfig:
    grip_n: float = 15.0             # grip force at or above this, held dwell_s: gripped (the router's threshold)
    release_n: float = 5.0           # grip force at or below this, held dwell_s: nothing held
    dwell_s: float = 0.2
    min_interval_s: float = 0.5
    default_object: str = "object"
    # what the gripper holds, by the router's sub-task at the moment of the grip
    objects: Dict[str, str] = field(default_factory=lambda: {
        "door_handle_grip": "door handle", "grip_knob": "door knob"})
    wording: Dict[str, str] = field(default_factory=lambda: {
        "gripped": "{object} gripped ({force:.0f} N)",
        "dropped": "{object} dropped (grip force {force:.0f} N)",
        "released": "{object} released"})


@dataclass
class ZoneConfig:
    dwell_s: float = 0.5             # a zone reading must hold this long before it counts
    min_interval_s: float = 2.0
    announce_initial: bool = False   # the zone the robot starts in is not an arrival
    default_place: str = "in the {zone}"
    places: Dict[str, str] = field(default_factory=lambda: {"door": "at the door"})
    wording: Dict[str, str] = field(default_factory=lambda: {"arrived": "arrived {place}"})


@dataclass
class TemperatureConfig:
    warm_c: float = 55.0             # at or above: heating up
    limit_c: float = 70.0            # at or above: over the limit (the router's temperature_limit)
    hysteresis_c: float = 5.0        # a state is left this far below its threshold
    min_interval_s: float = 2.0      # per motor
    wording: Dict[str, str] = field(default_factory=lambda: {
        "heating": "motor {motor} is heating up ({celsius:.0f} C)",
        "hot": "motor {motor} above {limit:.0f} C ({celsius:.0f} C)",
        "cooled": "motor {motor} cooled down ({celsius:.0f} C)"})


@dataclass
class SlipConfig:
    confirm_s: float = 0.2           # the router's slip flag held this long: slipping
    regain_s: float = 1.0            # the flag clear this long: back on grip
    min_interval_s: float = 2.0
    wording: Dict[str, str] = field(default_factory=lambda: {
        "slipping": "base slipping (wheels and IMU disagree)",
        "regained": "base back on grip"})


@dataclass
class TasksConfig:
    sub_tasks: bool = True           # a line per finished sub-task, not only per task
    # intents whose end means the gripper holds something: done only when it does, else failed
    needs_grip: List[str] = field(default_factory=lambda: ["pick_object"])
    wording: Dict[str, str] = field(default_factory=lambda: {
        "sub_task_done": "sub-task {sub_task} of {intent} done",
        "done": "task {intent} done",
        "failed": "task {intent} failed at sub-task {sub_task} ({reason})",
        "unknown_scene": "unknown scene",
        "failsafe": "fail-safe stop",
        "nothing_held": "nothing held, grip force {force:.0f} N"})
    # a task's own done line, by intent (the same fields as "done", plus object and force)
    done_wording: Dict[str, str] = field(default_factory=lambda: {
        "open_door": "the door is open; task open_door done",
        "pick_object": "{object} lifted ({force:.0f} N held); task pick_object done"})


@dataclass
class ReflexesConfig:
    """`router_status.active_reflexes`: the router's own reflexes (docs/reflexes.md) starting and clearing."""
    # how a line names each reflex (the router's interrupt names); another name is said as it is
    names: Dict[str, str] = field(default_factory=lambda: {
        "person_close": "a person close", "person_very_close": "a person very close",
        "temperature_high": "a motor over its limit", "slip": "wheel slip", "contact": "an unexpected contact"})
    wording: Dict[str, str] = field(default_factory=lambda: {
        "holding": "reflex: holding for {reflex}; task {intent} resumes by itself",
        "holding_idle": "reflex: holding for {reflex}",
        "cleared": "reflex cleared ({reflex}); task {intent} resumes",
        "cleared_idle": "reflex cleared ({reflex})"})


LINE_KINDS = ("proximity", "grip", "zone", "temperature", "slip", "task", "sub_task", "reflex")


@dataclass
class EventsConfig:
    """Which sensed lines are events (the reasoning node decides at once, and they are the question's
    newest events) and which are state (read in the state log, like a sensor summary): the robot's
    reflexes and its own progress need no decision; a task's end and an arrival may (a deferred
    order, the next step of an order)."""
    kinds: List[str] = field(default_factory=lambda: ["task", "zone"])


@dataclass
class SituationsConfig:
    proximity: ProximityConfig = field(default_factory=ProximityConfig)
    grip: GripConfig = field(default_factory=GripConfig)
    zone: ZoneConfig = field(default_factory=ZoneConfig)
    temperature: TemperatureConfig = field(default_factory=TemperatureConfig)
    slip: SlipConfig = field(default_factory=SlipConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    reflexes: ReflexesConfig = field(default_factory=ReflexesConfig)
    events: EventsConfig = field(default_factory=EventsConfig)


# the fields each wording template may use, with a sample value to check it formats
_SAMPLE_FIELDS: Dict[str, Dict[str, Any]] = {
    "proximity": {"distance": 1.0},
    "grip": {"object": "box", "force": 20.0},
    "zone": {"zone": "warehouse", "place": "in the warehouse"},
    "temperature": {"motor": "arm", "celsius": 60.0, "limit": 70.0, "warm": 55.0},
    "slip": {},
    "tasks": {"intent": "open_door", "sub_task": "pull_door", "reason": "unknown scene", "object": "box",
              "force": 20.0},
    "reflexes": {"reflex": "a person close", "intent": "move_to"},
}
_REQUIRED_WORDING: Dict[str, Tuple[str, ...]] = {
    "proximity": ("approaching", "close", "moving_away", "gone"), "grip": ("gripped", "dropped", "released"),
    "zone": ("arrived",), "temperature": ("heating", "hot", "cooled"), "slip": ("slipping", "regained"),
    "tasks": ("sub_task_done", "done", "failed", "unknown_scene", "failsafe", "nothing_held"),
    "reflexes": ("holding", "holding_idle", "cleared", "cleared_idle"),
}


def check_template(where: str, template: str, fields: Mapping[str, Any]) -> None:
    try:
        template.format(**fields)
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError(f"situations {where}: template {template!r} does not format "
                         f"(fields: {', '.join(sorted(fields)) or 'none'}): {err}") from err


def _merged(section: str, defaults: Any, given: Any) -> Any:
    if given is None:
        return defaults
    if not isinstance(given, Mapping):
        raise ValueError(f"situations {section}: expected a mapping, got {given!r}")
    known = {f.name: f for f in dataclasses.fields(defaults)}
    values: Dict[str, Any] = {}
    for key, value in given.items():
        if key not in known:
            raise ValueError(f"situations {section}.{key}: unknown key (known: {', '.join(known)})")
        default = getattr(defaults, key)
        if isinstance(default, dict):
            if not isinstance(value, Mapping):
                raise ValueError(f"situations {section}.{key}: expected a mapping")
            value = {**default, **{str(k): str(v) for k, v in value.items()}}
        elif isinstance(default, list):
            value = [str(v) for v in (value or [])]
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise ValueError(f"situations {section}.{key}: expected true or false, got {value!r}")
        elif isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0:
                raise ValueError(f"situations {section}.{key}: expected a number >= 0, got {value!r}")
            value = float(value)
        else:
            value = str(value)
        values[key] = value
    return dataclasses.replace(defaults, **values)


def validate(config: SituationsConfig) -> SituationsConfig:
    """ValueError for thresholds in the wrong order or a wording that does not format."""
    p, g, t = config.proximity, config.grip, config.temperature
    if not p.close_m < p.approach_m:
        raise ValueError("situations proximity: close_m must be below approach_m")
    if not g.release_n < g.grip_n:
        raise ValueError("situations grip: release_n must be below grip_n")
    if not t.warm_c < t.limit_c or t.hysteresis_c >= t.limit_c - t.warm_c:
        raise ValueError("situations temperature: need warm_c < limit_c and hysteresis_c < limit_c - warm_c")
    for section, required in _REQUIRED_WORDING.items():
        wording = getattr(config, section).wording
        for key in required:
            if key not in wording:
                raise ValueError(f"situations {section}.wording: {key} is missing")
        for key, template in wording.items():
            check_template(f"{section}.wording.{key}", template, _SAMPLE_FIELDS[section])
    for intent, template in config.tasks.done_wording.items():
        check_template(f"tasks.done_wording.{intent}", template, _SAMPLE_FIELDS["tasks"])
    check_template("zone.default_place", config.zone.default_place, {"zone": "warehouse"})
    unknown = sorted(set(config.events.kinds) - set(LINE_KINDS))
    if unknown:
        raise ValueError(f"situations events.kinds: unknown {', '.join(unknown)} (known: {', '.join(LINE_KINDS)})")
    return config


def situations_from_mapping(data: Mapping[str, Any]) -> SituationsConfig:
    defaults = SituationsConfig()
    known = [f.name for f in dataclasses.fields(defaults)]
    for key in data:
        if key not in known:
            raise ValueError(f"situations: unknown section {key!r} (known: {', '.join(known)})")
    return validate(SituationsConfig(**{name: _merged(name, getattr(defaults, name), data.get(name))
                                        for name in known}))


def load_situations(path: Union[str, Path]) -> SituationsConfig:
    """The situations file at ``path`` over the defaults (ValueError naming the bad value)."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: expected a mapping of situation sections")
    try:
        return situations_from_mapping(data)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from err
