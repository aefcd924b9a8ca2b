"""Router parameters: defaults, config files, validation (plain module, no rclpy).

Every parameter is a flat ROS 2 parameter of the router node (see config/action_router.yaml);
the same names build a ``RouterConfig`` for the plain ``Router`` in tests and the benchmark.
Joints, their limits, the base limits, the controller name and the PID gains default to the robot
description file (``robot_description_file``, the file the simulator reads too); parameters given
explicitly still override it.
PID gains use control_toolbox names: ``gains.<joint>.{p,i,d,i_clamp_max,i_clamp_min,u_clamp_max,
u_clamp_min,antiwindup_strategy}`` (plus ``tracking_time_constant``, ``error_deadband``,
``derivative_filter_time_constant`` and ``error_filter_time_constant``, the last two with a
router-wide default in the parameter of that name).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import yaml

from csr_llm_common.catalogue import IntentCatalogue
from csr_llm_common.paths import config_dir, expand_path
from csr_llm_common.robot_description import GAIN_DEFAULTS, RobotDescription, load_robot_description

from .pid import Gains, gains_from_params
from .scene import ReachTarget
from .variants import VariantSpec, load_scene_keys, parse_variants
from .zones import DEFAULT_ZONES, Zone, parse_zones, without_zone_parameters, zone_parameters

# Sub-task fields a decision argument can set (argument_bindings): base_speed is read by level 3
# (|vx| of the base, the template's sign kept), base_distance by the base_distance done mode,
# base_goal (a zone name) by the go-to-pose controller of a zone_reached sub-task, reach_object (an
# object name) picks the reach target for that object in the scene (else the decision is refused).
ARGUMENT_FIELDS = ("base_speed", "base_distance", "base_goal", "reach_object")

TICK_SOURCES = ("timer", "joint_states", "state_or_timer")

# name -> default (type follows the default; lists of float are double arrays)
DEFAULTS: Dict[str, Any] = {
    "robot_description_file": "",        # "" = config/robot_description.yaml of this workspace
    "robot_id": "",                      # "" = this machine's identity + the node namespace (identity.py)
    "autostart": False,
    # state_or_timer: a tick on each joint state (no wait for a timer phase: bench-router), the
    # control_hz timer only where none came for a period; timer: the control_hz timer alone;
    # joint_states: one tick per joint state and nothing else (simulation, replay: lockstep)
    "tick_source": "state_or_timer",
    # where the control loop runs (csr_llm_common/realtime.py): CPUs in taskset syntax ("" = any) for
    # every thread of the router, and SCHED_FIFO priority 1-99 for the spin thread (0 = normal)
    "cpu_affinity": "",
    "control_priority": 0,
    "executor": "single",                # router_node main(): single | multi (threaded) executor
    "control_hz": 1000.0,
    "status_hz": 20.0,
    "key_hz": 30.0,
    "command_stamp": "now",              # "now" or "state" (stamp of the joint state used)
    "zone": "corridor",
    **zone_parameters(DEFAULT_ZONES),    # zones.<zone>.threshold / .goal (zones.py)
    # go-to-pose base controller of zone_reached sub-tasks (go_to_pose.py)
    "goal_tolerance": 0.10,              # m
    "goal_yaw_tolerance": 0.10,          # rad
    "goal_slow_radius": 0.6,             # m
    "goal_min_speed": 0.05,              # m/s
    "goal_heading_gain": 1.5,            # rad/s per rad
    "goal_turn_in_place": 0.6,           # rad
    "odom_timeout_s": 0.5,               # older odometry: the go-to-pose controller stops the base
    # scene (detected_objects): frames it may come in and how long a detection stays valid
    "base_frame": "base_link",
    "odom_frame": "odom",
    "scene_timeout_s": 1.0,
    "cache_enabled": True,
    # first-order low-pass on every joint's D input (s; 0 = off), as drives filter the D part of
    # their velocity loop; gains.<joint>.derivative_filter_time_constant overrides it per joint
    "derivative_filter_time_constant": 0.005,
    # first-order low-pass on the error every joint's P and I terms see (s; 0 = off), a drive's
    # position-loop feedback filter; gains.<joint>.error_filter_time_constant overrides it per joint
    "error_filter_time_constant": 0.002,
    "horizon_s": 0.05,
    "samples": 100,
    # s: a re-plan's Hermite blend from the measured state back onto the template, stretched where the
    # blend alone would pass a joint's velocity_max; 0.15 (was 0.3): bench-router tracks as closely as
    # the per-frame baseline at gains x1.5 with half its jitter (docs/architecture.md)
    "blend_s": 0.15,
    "replan_error": 0.5,                 # rad: re-plan from the measured state above this error
    "settle_tolerance": 0.03,            # rad: a trajectory sub-task is done when settled this close
    "idle_hold": True,                   # after a task completes, hold the pose (else zero effort)
    "grip_force_threshold": 15.0,
    "grip_dwell_s": 0.2,
    "temperature_limit": 70.0,
    "temperature_hysteresis": 5.0,
    "derate_gain_scale": 0.6,
    "derate_limit_scale": 0.5,
    "confidence_abs_tol": 5.0,
    "confidence_rel_tol": 0.5,
    "confidence_dwell_ticks": 50,
    "low_confidence_limit_scale": 0.7,
    "failsafe_clamp_persist_s": 0.25,
    "failsafe_ramp_s": 0.2,
    "state_timeout_s": 0.1,
    # no valid decision for this long while a task runs (reasoning node lost): fail-safe hold until
    # the next decision; 0 disables (scripted use without a reasoning node)
    "decision_timeout_s": 0.0,
    # a decision stamped s starts at the first tick after s + this (sim s; 0: the next tick). A
    # lockstepped sim that simulates while the next decision is computed sets it to the lag it allows
    "decision_delay_s": 0.0,
    "person_distance": 0.6,
    "person_stop_distance": 0.3,
    "proximity_hysteresis": 0.1,
    "proximity_timeout_s": 1.0,
    "slip_ratio": 1.8,
    "slip_min_weight": 0.1,
    "slip_speed_tau": 1.0,
    "id_share": 0.1,
    "encoder_weights_file": "",
    "task_capacity": 512,
    # level 1 as a scene lookup (variants.py): prototypes, camera freshness, the shared task layer
    "scene_keys_file": "",               # "" = config/scene_keys.yaml of this workspace
    "vision_timeout_s": 0.5,             # an older camera frame is no frame: the first variant runs
    "task_store": "",                    # SQLite file shared by routers ("" = this router only)
    "task_store_poll_s": 0.5,
    "task_isolation": True,              # false: robots sharing the store use each other's entries
    "vision_source": "camera",           # router node: camera (depth image -> CNN) | features | none
    "camera_topic": "camera/depth/image_raw",
    "depth_cnn_weights_file": "",        # "" = action_router/data/depth_cnn_v1.npz
    "learn_below": 0.95,
    "miss_confirmations": 3,
    "confirm_window_s": 30.0,
    "subtasks_file": "",
    "intents_file": "",
}

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
    params = dict(DEFAULTS)
    if isinstance(overrides.get("zones"), Mapping):    # a nested zone map replaces the default zones
        params = without_zone_parameters(params)
        params.update(zone_parameters(overrides.pop("zones")))
    params.update({k: v for k, v in described.items() if not k.startswith("gains.")})
    params.update({k: v for k, v in overrides.items() if not k.startswith("gains.")})
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
    zones = parse_zones(params)
    if not float(params["control_hz"]) > 0 or not float(params["key_hz"]) > 0:
        raise ValueError("control_hz and key_hz must be > 0")
    if str(params["tick_source"]) not in TICK_SOURCES:
        raise ValueError(f"tick_source must be one of {TICK_SOURCES}, got {params['tick_source']!r}")
    if not 0.0 <= float(params["decision_delay_s"]) < math.inf:
        raise ValueError(f"decision_delay_s must be >= 0 and finite, got {params['decision_delay_s']!r}")
    if int(params["samples"]) < 2 or not float(params["horizon_s"]) > 0:
        raise ValueError("samples >= 2 and horizon_s > 0")
    gain_params = {f"gains.{j}.{k}": v for j in joints for k, v in GAIN_DEFAULTS.items()}   # undescribed joints
    gain_params.update({f"gains.{j}.{name}": float(params[name]) for j in joints
                        for name in ("derivative_filter_time_constant", "error_filter_time_constant")})
    gain_params.update({k: v for k, v in described.items() if k.startswith("gains.") and k.split(".")[1] in joints})
    gain_params.update({k: v for k, v in overrides.items() if k.startswith("gains.")})
    gains = gains_from_params(joints, gain_params)
    params.update(gain_params)
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
        if spec.get("trigger", "proximity_below") != "proximity_below":
            raise ValueError(f"{sub_path}: interrupt {name}: only proximity_below triggers exist")
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
