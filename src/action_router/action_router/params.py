"""Router parameters: defaults, config files, validation (plain module, no rclpy).

``RouterParams`` holds every fixed-name parameter with its one default; the node declares it as
flat ROS 2 parameters (see config/action_router.yaml), and the same flat names build a
``RouterConfig`` for the plain ``Router`` (``make_config``) in the node, tests and benchmarks.
Joints, their limits, the base limits, the controller name and the PID gains default to the robot
description file (``robot_description_file``, the file the simulator reads too); parameters given
explicitly still override it.
PID gains use control_toolbox names: ``gains.<joint>.{p,i,d,i_clamp_max,i_clamp_min,u_clamp_max,
u_clamp_min,antiwindup_strategy}`` (plus ``tracking_time_constant``, ``error_deadband``,
``derivative_filter_time_constant`` and ``error_filter_time_constant``, the last two with a
router-wide default in the parameter of that name). They are the only parameters that change
while the router runs (``updated_gains`` checks a change), as with control_toolbox's PidROS.
"""
from __future__ import annotations

import math
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import yaml

from csr_llm_common.catalogue import IntentCatalogue
from csr_llm_common.paths import config_dir, expand_path
from csr_llm_common.robot_description import GAIN_DEFAULTS, RobotDescription, load_robot_description

from .pid import PARAM_NAMES, Gains, gains_from_params
from .reflexes import TRIGGER_KINDS
from .scene import ReachTarget
from .variants import VariantSpec, load_scene_keys, parse_variants
from .zones import DEFAULT_ZONES, Zone, parse_zones, without_zone_parameters, zone_parameters

# Sub-task fields a decision argument can set (argument_bindings): base_speed is read by level 3
# (|vx| of the base, the template's sign kept), base_distance by the base_distance done mode,
# base_goal (a zone name) by the go-to-pose controller of a zone_reached sub-task, reach_object (an
# object name) picks the reach target for that object in the scene (else the decision is refused).
ARGUMENT_FIELDS = ("base_speed", "base_distance", "base_goal", "reach_object")

TICK_SOURCES = ("timer", "joint_states", "state_or_timer")
GAIN_PREFIX = "gains."
# router-wide defaults of the per-joint filter time constants
GAIN_FILTERS = ("derivative_filter_time_constant", "error_filter_time_constant")

@dataclass
class NodeParams:
    """How the router node runs: start, tick, threads, timers, stamps, vision input."""
    robot_description_file: str = ""     # "" = config/robot_description.yaml of this workspace
    robot_id: str = ""                   # "" = this machine's identity + the node namespace (identity.py)
    autostart: bool = False
    # state_or_timer: a tick on each joint state, the control_hz timer only where none came for a
    # period; timer: the control_hz timer alone; joint_states: one tick per joint state and nothing
    # else (simulation, replay: lockstep)
    tick_source: str = "state_or_timer"
    # where the control loop runs (csr_llm_common/realtime.py): CPUs in taskset syntax ("" = any) for
    # every thread of the router, and SCHED_FIFO priority 1-99 for the spin thread (0 = normal)
    cpu_affinity: str = ""
    control_priority: int = 0
    executor: str = "single"             # router_node main(): single | multi (threaded) executor
    control_hz: float = 1000.0
    status_hz: float = 20.0
    key_hz: float = 30.0
    command_stamp: str = "now"           # "now" or "state" (stamp of the joint state used)
    vision_source: str = "camera"        # camera (depth image -> CNN) | features | none
    camera_topic: str = "camera/depth/image_raw"
    depth_cnn_weights_file: str = ""     # "" = action_router/data/depth_cnn_v1.npz


@dataclass
class GoToPoseParams:
    """The go-to-pose base controller of zone_reached sub-tasks (go_to_pose.py)."""
    goal_tolerance: float = 0.10         # m
    goal_yaw_tolerance: float = 0.10     # rad
    goal_slow_radius: float = 0.6        # m
    goal_min_speed: float = 0.05         # m/s
    goal_heading_gain: float = 1.5       # rad/s per rad
    goal_turn_in_place: float = 0.6      # rad
    odom_timeout_s: float = 0.5          # older odometry: the controller stops the base


@dataclass
class SceneParams:
    """detected_objects: the frames it may come in and how long a detection stays valid."""
    base_frame: str = "base_link"
    odom_frame: str = "odom"
    scene_timeout_s: float = 1.0


@dataclass
class MotionParams:
    """Levels 2 and 3: the planned segment, the PID filters, when a sub-task is done."""
    cache_enabled: bool = True
    # first-order low-pass on every joint's D input (s; 0 = off), as drives filter the D part of
    # their velocity loop; gains.<joint>.derivative_filter_time_constant overrides it per joint
    derivative_filter_time_constant: float = 0.005
    # first-order low-pass on the error every joint's P and I terms see (s; 0 = off), a drive's
    # position-loop feedback filter; gains.<joint>.error_filter_time_constant overrides it per joint
    error_filter_time_constant: float = 0.002
    horizon_s: float = 0.05
    samples: int = 100
    # s: a re-plan's Hermite blend from the measured state back onto the template, stretched where
    # the blend alone would pass a joint's velocity_max
    blend_s: float = 0.15
    replan_error: float = 0.5            # rad: re-plan from the measured state above this error
    settle_tolerance: float = 0.03       # rad: a trajectory sub-task is done when settled this close
    idle_hold: bool = True               # after a task completes, hold the pose (else zero effort)


@dataclass
class SafetyParams:
    """Monitors, derating, fail-safe, watchdogs and the reflexes' thresholds."""
    grip_force_threshold: float = 15.0
    grip_dwell_s: float = 0.2
    temperature_limit: float = 70.0
    temperature_hysteresis: float = 5.0
    derate_gain_scale: float = 0.6
    derate_limit_scale: float = 0.5
    confidence_abs_tol: float = 5.0
    confidence_rel_tol: float = 0.5
    confidence_dwell_ticks: int = 50
    low_confidence_limit_scale: float = 0.7
    failsafe_clamp_persist_s: float = 0.25
    failsafe_ramp_s: float = 0.2
    state_timeout_s: float = 0.1
    # no valid decision for this long while a task runs (reasoning node lost): fail-safe hold until
    # the next decision; 0 disables (scripted use without a reasoning node)
    decision_timeout_s: float = 5.0
    # a decision stamped s starts at the first tick after s + this (sim s; 0: the next tick). A
    # lockstepped sim that simulates while the next decision is computed sets it to the lag it allows
    decision_delay_s: float = 0.0
    person_distance: float = 0.6
    person_stop_distance: float = 0.3
    proximity_hysteresis: float = 0.1
    proximity_timeout_s: float = 1.0
    slip_ratio: float = 1.8
    slip_min_weight: float = 0.1
    slip_speed_tau: float = 1.0
    # unexpected contact (the contact_above reflex): gripper wrench force above this with no grip
    # sub-task running [N]; cleared below it minus the hysteresis
    contact_force: float = 15.0
    contact_hysteresis: float = 5.0


@dataclass
class TaskLayerParams:
    """Level 1: the key encoder, the task layer, the scene lookup (variants.py), the shared store."""
    id_share: float = 0.1
    encoder_weights_file: str = ""
    task_capacity: int = 512
    scene_keys_file: str = ""            # "" = config/scene_keys.yaml of this workspace
    vision_timeout_s: float = 0.5        # an older camera frame is no frame: the first variant runs
    task_store: str = ""                 # SQLite file shared by routers ("" = this router only)
    task_store_poll_s: float = 0.5
    task_isolation: bool = True          # false: robots sharing the store use each other's entries
    learn_below: float = 0.95
    miss_confirmations: int = 3
    confirm_window_s: float = 30.0
    subtasks_file: str = ""              # "" = config/router_subtasks.yaml of this workspace
    intents_file: str = ""               # "" = config/intents.yaml of this workspace


@dataclass
class RouterParams:
    """Every fixed-name parameter of the router node, with its one default. Parameters named at run
    time (zones.<zone>.*, the robot description's joints, limits and gains.<joint>.*) are not here."""
    node: NodeParams = dataclasses.field(default_factory=NodeParams)
    zone: str = "corridor"
    go_to_pose: GoToPoseParams = dataclasses.field(default_factory=GoToPoseParams)
    scene: SceneParams = dataclasses.field(default_factory=SceneParams)
    motion: MotionParams = dataclasses.field(default_factory=MotionParams)
    safety: SafetyParams = dataclasses.field(default_factory=SafetyParams)
    task_layer: TaskLayerParams = dataclasses.field(default_factory=TaskLayerParams)


def flat_parameters(params: Any) -> Dict[str, Any]:
    """{parameter name: value} of a params dataclass, nested groups flattened (their fields keep
    their own names: the node's parameters are one flat list)."""
    out: Dict[str, Any] = {}
    for f in dataclasses.fields(params):
        value = getattr(params, f.name)
        if dataclasses.is_dataclass(value):
            out.update(flat_parameters(value))
        else:
            out[f.name] = value
    return out


def default_parameters() -> Dict[str, Any]:
    """The flat defaults of every parameter not taken from the robot description."""
    return {**flat_parameters(RouterParams()), **zone_parameters(DEFAULT_ZONES)}


def robot_description(overrides: Optional[Mapping[str, Any]] = None) -> RobotDescription:
    path = expand_path(str((overrides or {}).get("robot_description_file") or ""))
    return load_robot_description(path or config_dir() / "robot_description.yaml")


def description_defaults(description: RobotDescription) -> Dict[str, Any]:
    """The parameters the robot description sets: joints, limits, base limits, controller, gains."""
    out: Dict[str, Any] = {"joints": description.joint_names, "controller_name": description.controller_name,
                           "base_max_linear": description.base_max_linear,
                           "base_max_angular": description.base_max_angular}
    out.update(description.limits())
    out.update(description.gain_parameters())
    return out


@dataclass
class RouterConfig:
    params: Dict[str, Any]
    joints: List[str]
    gains: Dict[str, Gains]
    subtasks: Dict[str, dict]
    intent_sequences: Dict[str, List[str]]
    argument_bindings: Dict[str, Dict[str, str]]
    interrupts: Dict[str, dict]
    unknown_scene: dict
    catalogue: IntentCatalogue                  # config/intents.yaml
    unused_arguments: Dict[str, List[str]]      # catalogue arguments accepted but not used (yet)
    zones: Dict[str, Zone]                      # zones.<zone>.threshold / .goal
    reach_targets: List[ReachTarget]            # router_subtasks.yaml reach_targets
    variants: Dict[str, List[VariantSpec]]      # router_subtasks.yaml variants (scene lookup)
    scene_prototypes: Dict[str, Any]            # scene kind -> prototype features (scene_keys.yaml)

    def __getitem__(self, name: str) -> Any:
        return self.params[name]

    def threshold(self, zone: str) -> Optional[float]:
        return self.zones[zone].threshold if zone in self.zones else None


def load_yaml(path: Path) -> dict:
    with open(path, "r", encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping")
    return data


def make_config(overrides: Optional[Mapping[str, Any]] = None) -> RouterConfig:
    """Defaults <- overrides (flat parameter names) <- config files; validated."""
    overrides = dict(overrides or {})
    described = description_defaults(robot_description(overrides))
    params = default_parameters()
    if isinstance(overrides.get("zones"), Mapping):    # a nested zone map replaces the default zones
        params = without_zone_parameters(params)
        params.update(zone_parameters(overrides.pop("zones")))
    params.update({k: v for k, v in described.items() if not k.startswith("gains.")})
    params.update({k: v for k, v in overrides.items() if not k.startswith("gains.")})
    joints = check_joint_parameters(params)
    zones = parse_zones(params)
    check_rates(params)
    gain_params = gain_parameters(joints, described, params)
    gain_params.update({k: v for k, v in overrides.items() if k.startswith("gains.")})
    gains = gains_from_params(joints, gain_params)
    params.update(gain_params)
    return load_task_files(params, joints, gains, zones)


def check_joint_parameters(params: Dict[str, Any]) -> List[str]:
    """The joint names; the per-joint limits checked and made float lists in ``params``."""
    joints = [str(j) for j in params["joints"]]
    if not joints or len(set(joints)) != len(joints):
        raise ValueError("joints must be a non-empty list of distinct names")
    n = len(joints)
    for name in ("position_min", "position_max", "velocity_max", "effort_max"):
        values = [float(v) for v in params[name]]
        if len(values) != n:
            raise ValueError(f"{name} needs one value per joint ({n}), got {len(values)}")
        params[name] = values
    if any(lo >= hi for lo, hi in zip(params["position_min"], params["position_max"])):
        raise ValueError("position_min must be below position_max")
    if any(v <= 0 for v in params["velocity_max"]) or any(v <= 0 for v in params["effort_max"]):
        raise ValueError("velocity_max and effort_max must be > 0")
    return joints


def check_rates(params: Mapping[str, Any]) -> None:
    if not float(params["control_hz"]) > 0 or not float(params["key_hz"]) > 0:
        raise ValueError("control_hz and key_hz must be > 0")
    if str(params["tick_source"]) not in TICK_SOURCES:
        raise ValueError(f"tick_source must be one of {TICK_SOURCES}, got {params['tick_source']!r}")
    if not 0.0 <= float(params["decision_delay_s"]) < math.inf:
        raise ValueError(f"decision_delay_s must be >= 0 and finite, got {params['decision_delay_s']!r}")
    if int(params["samples"]) < 2 or not float(params["horizon_s"]) > 0:
        raise ValueError("samples >= 2 and horizon_s > 0")


def gain_parameters(joints: Sequence[str], described: Mapping[str, Any],
                    filters: Mapping[str, Any]) -> Dict[str, Any]:
    """Every ``gains.<joint>.<name>`` of ``joints`` with its default: control_toolbox's (``Gains``),
    the robot description's defaults (``GAIN_DEFAULTS``, for joints it does not describe), the
    router-wide filter time constants in ``filters``, then the joint's own description."""
    base = {name: getattr(Gains(), name) for name in PARAM_NAMES}
    base.update(GAIN_DEFAULTS)
    base.update({name: float(filters[name]) for name in GAIN_FILTERS})
    out = {f"{GAIN_PREFIX}{j}.{k}": v for j in joints for k, v in base.items()}
    out.update({k: v for k, v in described.items() if k.startswith(GAIN_PREFIX) and k.split(".")[1] in joints})
    return out


def updated_gains(joints: Sequence[str], current: Mapping[str, Any], changes: Mapping[str, Any]) -> Dict[str, Gains]:
    """The gains of every joint once ``changes`` (``gains.<joint>.<name>``) apply to the ``current``
    gain parameters; ValueError naming the parameter where a change is refused (not a gain, not a
    number, not finite, clamps out of order, an unknown anti-windup strategy)."""
    for name, value in changes.items():
        joint, _, key = name[len(GAIN_PREFIX):].rpartition(".")
        if not name.startswith(GAIN_PREFIX) or joint not in joints or key not in PARAM_NAMES:
            raise ValueError(f"{name}: only gains.<joint>.<{'|'.join(PARAM_NAMES)}> change while the router runs")
        if key == "antiwindup_strategy":
            if not isinstance(value, str):
                raise ValueError(f"{name} must be a string, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name} must be a number, got {value!r}")
    merged = {k: v for k, v in current.items() if k.startswith(GAIN_PREFIX)}
    merged.update(changes)
    return gains_from_params(joints, merged)


def load_task_files(params: Dict[str, Any], joints: List[str], gains: Dict[str, Gains],
                    zones: Dict[str, Zone]) -> RouterConfig:
    """The sub-task, intent and scene-key files the parameters name, checked against each other."""
    cfg_dir = config_dir()
    sub_path = Path(expand_path(params["subtasks_file"]) or cfg_dir / "router_subtasks.yaml")
    int_path = Path(expand_path(params["intents_file"]) or cfg_dir / "intents.yaml")
    sub = load_yaml(sub_path)
    catalogue = IntentCatalogue.from_file(int_path)
    subtasks = dict(sub.get("subtasks") or {})
    sequences = {str(k): [str(s) for s in v] for k, v in (sub.get("intents") or {}).items()}
    for intent, seq in sequences.items():
        missing = [s for s in seq if s not in subtasks]
        if missing:
            raise ValueError(f"{sub_path}: intent {intent} uses unknown sub-tasks {missing}")
        if not seq:
            raise ValueError(f"{sub_path}: intent {intent} has no sub-tasks")
    interrupts = dict(sub.get("interrupts") or {})
    for name, spec in interrupts.items():
        missing = [s for s in spec.get("subtasks", []) if s not in subtasks]
        if missing or not spec.get("subtasks"):
            raise ValueError(f"{sub_path}: interrupt {name} has unknown or no sub-tasks {missing}")
        if spec.get("trigger", "proximity_below") not in TRIGGER_KINDS:
            raise ValueError(f"{sub_path}: interrupt {name}: trigger {spec.get('trigger')!r} is none of "
                             f"{list(TRIGGER_KINDS)}")
    unknown = dict(sub.get("unknown_scene") or {"subtasks": ["freeze"] if "freeze" in subtasks else []})
    if not unknown.get("subtasks") or any(s not in subtasks for s in unknown["subtasks"]):
        raise ValueError(f"{sub_path}: unknown_scene needs known sub-tasks")
    bindings = {str(k): {str(a): str(f) for a, f in (v or {}).items()}
                for k, v in (sub.get("argument_bindings") or {}).items()}
    unused = {str(k): [str(a) for a in (v or [])] for k, v in (sub.get("unused_arguments") or {}).items()}
    check_catalogue_coverage(catalogue, sequences, bindings, unused, sub_path)
    targets = reach_targets(sub.get("reach_targets") or {}, subtasks, sub_path)
    prototypes: Dict[str, Any] = {}
    if sub.get("variants"):
        prototypes = load_scene_keys(Path(expand_path(params["scene_keys_file"]) or cfg_dir / "scene_keys.yaml"))
    variants = parse_variants(sub.get("variants") or {}, subtasks, sequences, prototypes, sub_path)
    check_argument_targets(catalogue, sequences, bindings, subtasks, zones, targets, sub_path)
    return RouterConfig(params=params, joints=joints, gains=gains, subtasks=subtasks,
                        intent_sequences=sequences, argument_bindings=bindings,
                        interrupts=interrupts, unknown_scene=unknown, catalogue=catalogue, unused_arguments=unused,
                        zones=zones, reach_targets=targets, variants=variants, scene_prototypes=prototypes)


def reach_targets(table: Mapping[str, Any], subtasks: Mapping[str, Any], where: Path) -> List[ReachTarget]:
    out = []
    for name, spec in table.items():
        spec = spec or {}
        point = [float(v) for v in spec.get("object_at") or []]
        seq = [str(s) for s in spec.get("subtasks") or []]
        if len(point) != 3 or not float(spec.get("tolerance", 0.0)) > 0:
            raise ValueError(f"{where}: reach_targets.{name} needs object_at: [x, y, z] and tolerance > 0")
        if not seq or any(s not in subtasks for s in seq):
            raise ValueError(f"{where}: reach_targets.{name} has unknown or no sub-tasks {seq}")
        out.append(ReachTarget(str(name), (point[0], point[1], point[2]), float(spec["tolerance"]), tuple(seq)))
    return out


def check_argument_targets(catalogue: IntentCatalogue, sequences: Mapping[str, List[str]],
                           bindings: Mapping[str, Mapping[str, str]], subtasks: Mapping[str, Any],
                           zones: Mapping[str, Zone], targets: List[ReachTarget], where: Path) -> None:
    """What a bound argument points at exists: a goal per nameable zone, reach targets for objects."""
    goal_zones = {z.name for z in zones.values() if z.goal is not None}
    nameable = set()
    for intent, fields in bindings.items():
        for arg_name, field in fields.items():
            if field not in ("base_goal", "reach_object"):
                continue
            arg = catalogue[intent].argument(arg_name)
            if arg.type != "string" or not arg.enum:
                raise ValueError(f"{where}: {intent}.{arg_name} binds to {field}: it needs a string enum")
            if field == "base_goal":
                nameable |= set(arg.enum)
                missing = [z for z in arg.enum if z not in goal_zones]
                if missing:
                    raise ValueError(f"{where}: {intent}.{arg_name} can name zones without a goal: {missing} "
                                     f"(set zones.<zone>.goal: [x, y] or [x, y, yaw])")
            elif not targets:
                raise ValueError(f"{where}: {intent}.{arg_name} binds to reach_object but no reach_targets exist")
    unknown = sorted(goal_zones - nameable) if nameable else []
    if unknown:
        raise ValueError(f"zones.<zone>.goal set for zones no decision can name: {unknown} "
                         f"(known: {sorted(nameable)})")
    for intent, seq in sequences.items():
        goal_driven = [s for s in seq if (subtasks[s] or {}).get("done") == "zone_reached"]
        if goal_driven and "base_goal" not in bindings.get(intent, {}).values():
            raise ValueError(f"{where}: intent {intent} runs zone_reached sub-tasks {goal_driven} but binds no "
                             f"argument to base_goal")


def check_catalogue_coverage(catalogue: IntentCatalogue, sequences: Mapping[str, List[str]],
                             bindings: Mapping[str, Mapping[str, str]], unused: Mapping[str, List[str]],
                             where: Path) -> None:
    """Every catalogue intent has a sub-task sequence; every argument is bound or listed as unused.

    A decision the reasoning node may emit must never be accepted and then silently dropped: an
    argument the router does not use yet is listed under ``unused_arguments`` (and logged at start).
    """
    missing = [name for name in catalogue.names if name not in sequences]
    if missing:
        raise ValueError(f"{where}: catalogue intents without a sub-task sequence (intents:): {missing}")
    for section, table in (("argument_bindings", bindings), ("unused_arguments", unused)):
        for intent, names in table.items():
            if intent not in catalogue:
                raise ValueError(f"{where}: {section} names {intent!r}, which is not a catalogue intent")
            declared = {a.name for a in catalogue[intent].arguments}
            wrong = [a for a in names if a not in declared]
            if wrong:
                raise ValueError(f"{where}: {section}.{intent} names arguments the catalogue does not declare: "
                                 f"{wrong}")
    for intent, fields in bindings.items():
        bad = {a: f for a, f in fields.items() if f not in ARGUMENT_FIELDS}
        if bad:
            raise ValueError(f"{where}: argument_bindings.{intent} binds to unknown fields {bad} "
                             f"(known: {list(ARGUMENT_FIELDS)})")
    for intent in catalogue.names:
        bound = set(bindings.get(intent, {}))
        listed = set(unused.get(intent, []))
        for arg in catalogue[intent].arguments:
            if arg.name in bound and arg.name in listed:
                raise ValueError(f"{where}: argument {intent}.{arg.name} is both bound and listed as unused")
            if arg.name not in bound and arg.name not in listed:
                raise ValueError(f"{where}: argument {intent}.{arg.name} is neither bound (argument_bindings) nor "
                                 f"listed under unused_arguments: the router would accept it and ignore it")
