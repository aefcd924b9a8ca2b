"""Level 1 as a scene lookup: which variant of the decided intent fits what the camera sees
(plain module, no rclpy).

The language model decides *what* (the intent); the task layer remembers *how* for each scene
(seed 002, 2.2 and 3.2). ``router_subtasks.yaml`` ``variants`` gives an intent two or more
variants, each with its own sub-task sequence and the scene kind it is for (prototype CNN
features in ``config/scene_keys.yaml``). At a task's start, with a fresh camera frame, the start
key (intent block, vision block relative to the intent's scene centre, IMU) is matched among the
scene entries of that intent only (``TaskLayer.match(dims="scene", intent=..., kind=KIND_SCENE)``):

  * best >= the zone's threshold and a variant -> a hit: the frame runs that variant's sequence;
  * best is a map entry (an unknown scene recorded before) -> still no sequence: the unknown-scene
    protocol runs again, its request says where the scene was mapped;
  * else -> the unknown-scene protocol (back off, hold, request a decision) and a map entry: the
    key with the base pose and zone, in the task layer and the shared store, so the next visit is
    recognised. A confirming decision (same intent within ``confirm_window_s``) learns the key
    for the intent's first variant: the next visit is a hit.

Without a fresh frame (no camera, camera stalled) the intent's first variant runs as before.
Learned and map entries go to the shared store (task_store.py); entries other routers wrote
come back from it and join the layer (``drain``); with isolation on they never match here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import yaml

from .cache import KIND_SCENE, TaskLayer
from .encoder import GRAVITY, KEY_DIM, KeyEncoder, Observation
from .task_store import StoredEntry, TaskStore


@dataclass(frozen=True)
class VariantSpec:
    name: str
    scene: str                       # scene kind in scene_keys.yaml
    subtasks: Tuple[str, ...]


@dataclass(frozen=True)
class SceneResult:
    hit: bool
    variant: Optional[VariantSpec]
    similarity: float
    mapped: str = ""                 # matched a map entry: where it was recorded
    entry: int = -1                  # the best entry (the map entry when mapped)


def load_scene_keys(path: Path) -> Dict[str, np.ndarray]:
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    scenes = data.get("scenes") or {}
    out = {}
    for name, rows in scenes.items():
        arr = np.asarray(rows, dtype=float)
        if arr.ndim != 2 or arr.shape[0] == 0:
            raise ValueError(f"{path}: scenes.{name} must be a non-empty list of feature vectors")
        out[str(name)] = arr
    return out


def parse_variants(table: Mapping, subtasks: Mapping, sequences: Mapping, prototypes: Mapping[str, np.ndarray],
                   where: Path) -> Dict[str, List[VariantSpec]]:
    """intent -> variants; each needs known sub-tasks and a scene with prototypes."""
    out: Dict[str, List[VariantSpec]] = {}
    for intent, variants in (table or {}).items():
        if intent not in sequences:
            raise ValueError(f"{where}: variants.{intent}: not an intent of `intents`")
        specs = []
        for name, spec in (variants or {}).items():
            seq = tuple(str(s) for s in (spec or {}).get("subtasks") or [])
            scene = str((spec or {}).get("scene", ""))
            if not seq or any(s not in subtasks for s in seq):
                raise ValueError(f"{where}: variants.{intent}.{name} has unknown or no sub-tasks {list(seq)}")
            if scene not in prototypes:
                raise ValueError(f"{where}: variants.{intent}.{name}: scene {scene!r} has no prototypes "
                                 f"(known: {sorted(prototypes)})")
            specs.append(VariantSpec(str(name), scene, seq))
        if len(specs) < 2:
            raise ValueError(f"{where}: variants.{intent} needs two or more variants")
        dims = {prototypes[v.scene].shape[1] for v in specs}
        if len(dims) != 1:
            raise ValueError(f"{where}: variants.{intent}: prototypes of different lengths {sorted(dims)}")
        out[str(intent)] = specs
    return out


OFF_AXIS_WEIGHT = 0.35     # directions that do not tell the intent's variants apart count this much


def scene_frames(variants: Mapping[str, List[VariantSpec]], prototypes: Mapping[str, np.ndarray],
                 off_axis: float = OFF_AXIS_WEIGHT) -> Dict[str, Tuple[np.ndarray, float, np.ndarray]]:
    """Per intent: the centre c of its variants' prototype means, the weighting W (full weight
    along the directions between its variants, ``off_axis`` across them: a scene far off in any
    direction still misses, while the spread that does not matter for this intent weighs less)
    and R = half the variants' mean distance (the encoder's vision block is W (f - c) / R)."""
    frames = {}
    for intent, specs in variants.items():
        means = np.stack([prototypes[v.scene].mean(axis=0) for v in specs])
        centre = means.mean(axis=0)
        basis, _ = np.linalg.qr((means - centre).T)          # span of the variants' differences
        weight = off_axis * np.eye(centre.size) + (1.0 - off_axis) * basis @ basis.T
        pairs = [np.linalg.norm(means[i] - means[j]) for i in range(len(means)) for j in range(i + 1, len(means))]
        frames[intent] = (centre, max(0.5 * float(np.mean(pairs)), 1e-3), weight)
    return frames


class SceneLookup:
    """Scene entries of the task layer, the map of unknown scenes, and the shared store's traffic."""

    def __init__(self, layer: TaskLayer, intent_names: Sequence[str], variants: Mapping[str, List[VariantSpec]],
                 robot_id: str, store: Optional[TaskStore] = None):
        self.layer = layer
        self.intent_names = list(intent_names)
        self.intent_index = {n: i for i, n in enumerate(self.intent_names)}
        self.variants = {k: list(v) for k, v in variants.items()}
        self.robot_id = robot_id
        self.store = store
        self.robot_of: Dict[int, str] = {}          # entry index -> robot that wrote it
        self.pose_of: Dict[int, Tuple[float, float, float]] = {}
        self.map: List[dict] = []                  # unknown scenes recorded (this robot and others)
        self.lookups = self.hits = self.unknown = self.foreign_hits = 0
        self._pending: Optional[Tuple[int, str, float]] = None     # (map entry, intent, time)

    def has_variants(self, intent: str) -> bool:
        return intent in self.variants

    def seed(self, encoder: KeyEncoder, prototypes: Mapping[str, np.ndarray], n_joints: int,
             first_subtask: Mapping[str, int]) -> None:
        obs = Observation(joint_pos=np.zeros(n_joints), joint_vel=np.zeros(n_joints), effort_mean=np.zeros(n_joints))
        obs.imu_acc = np.array([0.0, 0.0, GRAVITY])
        for intent, specs in self.variants.items():
            ii = self.intent_index[intent]
            for vi, spec in enumerate(specs):
                for row in prototypes[spec.scene]:
                    obs.intent, obs.stage, obs.vision = intent, 0, row
                    key = encoder.encode(obs, np.empty(KEY_DIM))
                    idx = self.layer.insert(key, first_subtask[spec.subtasks[0]], ii, 0, seeded=True,
                                            kind=KIND_SCENE, variant=vi)
                    self.robot_of[idx] = self.robot_id

    def lookup(self, intent: str, key: np.ndarray, threshold: float, now: float) -> SceneResult:
        ii = self.intent_index[intent]
        self.lookups += 1
        hit, best, sim = self.layer.match(key, threshold, now, count=False, dims="scene", intent=ii, kind=KIND_SCENE)
        if not hit:
            return SceneResult(False, None, sim)
        if self.robot_of.get(best, self.robot_id) != self.robot_id:
            self.foreign_hits += 1
        vi = int(self.layer.variant[best])
        if vi < 0:
            x, y, _ = self.pose_of.get(best, (math.nan, math.nan, 0.0))
            return SceneResult(False, None, sim, mapped=f"mapped at ({x:.2f}, {y:.2f})", entry=best)
        self.hits += 1
        return SceneResult(True, self.variants[intent][vi], sim)

    def record_unknown(self, intent: str, key: np.ndarray, pose: Sequence[float] | np.ndarray, zone: str, now: float,
                       map_entry: int = -1) -> None:
        """The unknown scene goes into the map (unless it matched map entry ``map_entry``) and
        waits for a confirming decision."""
        self.unknown += 1
        if map_entry < 0:
            pose_t = (float(pose[0]), float(pose[1]), float(pose[2]))
            map_entry = self._add(key, intent, -1, pose_t, zone, now, self.robot_id)
            self._publish(key, intent, "", "map", pose_t, zone, now)
        self._pending = (map_entry, intent, now)

    def confirm(self, intent: str, now: float, window: float) -> Optional[str]:
        """A decision arrived: the same intent in time teaches the pending scene its first variant."""
        pend, self._pending = self._pending, None
        if pend is None or pend[1] != intent or now - pend[2] > window or intent not in self.variants:
            return None
        idx = pend[0]
        first = self.variants[intent][0]
        self.layer.variant[idx] = 0         # the map entry now points at the first variant
        pose = self.pose_of.get(idx, (0.0, 0.0, 0.0))
        self._publish(self.layer.keys[idx].copy(), intent, first.name, "learned", pose, "", now)
        return f"task layer: learned the unknown scene at ({pose[0]:.2f}, {pose[1]:.2f}) as {intent}/{first.name}"

    def drain(self) -> int:
        """Entries other routers stored since the last call join the layer (tick thread)."""
        if self.store is None:
            return 0
        new = self.store.take_new()
        for e in new:
            if e.intent not in self.variants or e.key.shape != (KEY_DIM,):
                continue
            names = [v.name for v in self.variants[e.intent]]
            vi = names.index(e.variant) if e.variant in names else -1
            if e.variant and vi < 0:
                continue        # a variant this router does not know
            same = self._find(e.key) if vi >= 0 else -1
            if same >= 0:
                self.layer.variant[same] = vi      # a mapped scene was learned: upgrade its entry
            else:
                self._add(e.key, e.intent, vi, e.pose, e.zone, e.t, e.robot)
        return len(new)

    def _find(self, key: np.ndarray) -> int:
        n = self.layer.count
        rows = np.flatnonzero(np.all(self.layer.keys[:n] == key, axis=1))
        return int(rows[0]) if rows.size else -1

    def _add(self, key: np.ndarray, intent: str, vi: int, pose: tuple, zone: str, now: float, robot: str) -> int:
        ii = self.intent_index[intent]
        idx = self.layer.insert(key, -1, ii, 0, seeded=False, now=now, kind=KIND_SCENE, variant=vi)
        self.robot_of[idx] = robot
        self.pose_of[idx] = tuple(pose)
        if vi < 0:
            self.map.append({"intent": intent, "pose": list(pose), "zone": zone, "t": now, "robot": robot})
        return idx

    def _publish(self, key: np.ndarray, intent: str, variant: str, kind: str, pose: tuple, zone: str,
                 now: float) -> None:
        if self.store is not None:
            self.store.put(StoredEntry(self.robot_id, intent, variant, kind, key.copy(), pose, zone, now))
