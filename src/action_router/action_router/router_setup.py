"""The router's parts, built from its configuration mapping (plain module, no rclpy).

``SubTaskTable`` compiles the configured sub-tasks and the intents' sequences of them; the
``make_*`` functions build each level, the encoder, the execution layer and the reflexes
(interrupt triggers) from ``cfg["..."]`` (``params.make_config``), so ``Router`` only wires them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np

from .cache import ExecutionLayer, ExecutionSet
from .encoder import EncoderConfig, KeyEncoder, ProjectionKeyEncoder
from .go_to_pose import GoToPoseConfig
from .level1 import Level1
from .level2 import Level2
from .level3 import Level3
from .params import RouterConfig
from .reflexes import (ContactTrigger, ProximityTrigger, ReflexSpec, Reflexes, SlipTrigger, TemperatureTrigger,
                       Trigger)
from .subtask import SubTask
from .variants import scene_frames


@dataclass(frozen=True)
class SubTaskTable:
    """The compiled sub-tasks (global indices) and each intent's default sequence of them."""
    subtasks: List[SubTask]
    index: Dict[str, int]               # sub-task name -> global index
    intent_names: List[str]
    intent_index: Dict[str, int]        # intent name -> position in intent_names
    sequences: List[List[int]]          # per intent (intent_names order): its sub-task indices

    def ids(self, names: Iterable[str]) -> List[int]:
        return [self.index[name] for name in names]


def subtask_table(cfg: RouterConfig, joints: Sequence[str]) -> SubTaskTable:
    subtasks: List[SubTask] = []
    index: Dict[str, int] = {}
    for name, spec in cfg.subtasks.items():
        st = SubTask(len(subtasks), name, dict(spec or {}), joints, cfg)
        index[name] = st.index
        subtasks.append(st)
    intent_names = list(cfg.intent_sequences)
    sequences = [[index[s] for s in cfg.intent_sequences[i]] for i in intent_names]
    return SubTaskTable(subtasks, index, intent_names, {name: i for i, name in enumerate(intent_names)}, sequences)


def make_encoder(cfg: RouterConfig, robot_id: str, n_joints: int, encoder: Optional[KeyEncoder]) -> KeyEncoder:
    """The given encoder or the projection encoder; configured weights and scene frames loaded."""
    encoder = encoder or ProjectionKeyEncoder(EncoderConfig(
        robot_id=robot_id, n_joints=n_joints, id_share=float(cfg["id_share"]),
        slip_ratio=float(cfg["slip_ratio"]), slip_min_weight=float(cfg["slip_min_weight"])))
    if cfg["encoder_weights_file"] and hasattr(encoder, "load_weights"):
        encoder.load_weights(str(cfg["encoder_weights_file"]))
    if hasattr(encoder, "set_scene_frames"):
        encoder.set_scene_frames(scene_frames(cfg.variants, cfg.scene_prototypes))
    return encoder


def make_level1(cfg: RouterConfig, table: SubTaskTable) -> Level1:
    level1 = Level1(table.subtasks, table.ids(cfg.unknown_scene["subtasks"]),
                    str(cfg.unknown_scene.get("request", "unknown scene: new decision needed")),
                    int(cfg["task_capacity"]), int(cfg["miss_confirmations"]),
                    float(cfg["confirm_window_s"]), float(cfg["learn_below"]))
    level1.task_layer.isolation = bool(cfg["task_isolation"])
    return level1


def make_level2(cfg: RouterConfig, table: SubTaskTable, n_joints: int, period: float) -> Level2:
    return Level2(n_joints, max(st.template.ctrl.shape[0] for st in table.subtasks), period=period,
                  horizon_s=float(cfg["horizon_s"]), samples=int(cfg["samples"]), blend_s=float(cfg["blend_s"]),
                  q_min=np.array(cfg["position_min"], dtype=float), q_max=np.array(cfg["position_max"], dtype=float),
                  v_max=np.array(cfg["velocity_max"], dtype=float), cache_enabled=bool(cfg["cache_enabled"]),
                  replan_error=float(cfg["replan_error"]))


def make_level3(cfg: RouterConfig, joints: Sequence[str], effort_max: np.ndarray) -> Level3:
    return Level3(joints, [cfg.gains[j] for j in joints], effort_max, cache_enabled=bool(cfg["cache_enabled"]),
                  failsafe_ramp_s=float(cfg["failsafe_ramp_s"]),
                  clamp_persist_s=float(cfg["failsafe_clamp_persist_s"]),
                  base_max_linear=float(cfg["base_max_linear"]),
                  base_max_angular=float(cfg["base_max_angular"]))


def make_execution(cfg: RouterConfig, joints: Sequence[str], effort_max: np.ndarray) -> ExecutionLayer:
    return ExecutionLayer(ExecutionSet([cfg.gains[j] for j in joints], effort_max.copy()),
                          float(cfg["derate_gain_scale"]), float(cfg["derate_limit_scale"]),
                          float(cfg["low_confidence_limit_scale"]))


def make_reflexes(cfg: RouterConfig, table: SubTaskTable) -> Reflexes:
    """The configured interrupts (router_subtasks.yaml ``interrupts:``), each with its typed trigger."""
    specs = []
    for name, spec in cfg.interrupts.items():
        specs.append(ReflexSpec(name, make_trigger(cfg, spec), tuple(table.ids(spec["subtasks"])),
                                str(spec.get("sound", "")), float(spec.get("clear_dwell_s", 0.0))))
    return Reflexes(specs)


def make_trigger(cfg: RouterConfig, spec: dict) -> Trigger:
    """An interrupt's trigger; a threshold is the spec's own (``distance``, ``force``) or the router
    parameter its ``*_param`` names."""
    kind = spec.get("trigger", "proximity_below")
    if kind == "temperature_above":
        limit = float(cfg["temperature_limit"])
        return TemperatureTrigger(limit, limit - float(cfg["temperature_hysteresis"]))
    if kind == "slip":
        return SlipTrigger()
    if kind == "contact_above":
        force = spec.get("force")
        force = cfg[spec.get("force_param", "contact_force")] if force is None else force
        return ContactTrigger(float(force), float(cfg["contact_hysteresis"]))
    dist = spec.get("distance")
    dist = cfg[spec.get("distance_param", "person_distance")] if dist is None else dist
    return ProximityTrigger(float(dist), float(cfg["proximity_hysteresis"]))


def make_go_to_pose_config(cfg: RouterConfig) -> GoToPoseConfig:
    return GoToPoseConfig(
        float(cfg["base_max_linear"]), float(cfg["base_max_angular"]), float(cfg["goal_tolerance"]),
        float(cfg["goal_yaw_tolerance"]), float(cfg["goal_slow_radius"]), float(cfg["goal_min_speed"]),
        float(cfg["goal_heading_gain"]), float(cfg["goal_turn_in_place"]))
