"""Level 1 for the router: task keys, the scene variant of a starting task, the task-layer match
(plain module, no rclpy).

``TaskMatcher`` owns the key step (``task_key.py``: keys at key_hz, or at once when a sub-task
starts; with last cycle's effort mean from an ``EffortAccumulator`` the tick fills), the (intent,
stage) the key step encodes, level 1 (``level1.py``), the scene lookup of variants
(``variants.py``) with the shared task store, and the task completed last. At a task's start the
camera's scene picks the intent's variant (its sub-task sequence); a new key of the running task
frame is matched in the task layer. A miss returns the unknown-scene protocol's frame and request
for the caller to run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import numpy as np

from .encoder import KEY_DIM, KeyEncoder
from .inputs import RouterInputs
from .interrupts import SOURCE_TASK, Frame
from .level1 import UnknownScene
from .params import RouterConfig
from .router_setup import SubTaskTable, make_level1
from .task_key import EffortAccumulator, KeyUpdate, TaskKeyStep
from .task_store import open_store
from .variants import SceneLookup


@dataclass(frozen=True)
class CompletedTask:
    """A task that ran to its end: deciding it again re-runs its variant without a scene check."""
    intent: str
    args: Dict[str, object]
    variant: str
    subtasks: List[int]


class TaskMatcher:
    def __init__(self, cfg: RouterConfig, table: SubTaskTable, encoder: KeyEncoder, inputs: RouterInputs,
                 robot_id: str, n_joints: int, info: Callable[[str], None]):
        self._table = table
        self._inputs = inputs
        self._info = info
        self.cache_enabled = bool(cfg["cache_enabled"])
        self.key_period = 1.0 / float(cfg["key_hz"])
        self._confirm_window = float(cfg["confirm_window_s"])
        self.key_step = TaskKeyStep(encoder, n_joints, float(cfg["vision_timeout_s"]))
        self.efforts = EffortAccumulator(n_joints)
        self.level1 = make_level1(cfg, table)
        self.store = open_store(str(cfg["task_store"]), float(cfg["task_store_poll_s"]), info)
        self.scenes = SceneLookup(self.level1.task_layer, table.intent_names, cfg.variants, robot_id, self.store)
        self._key_context = ("", 0)     # (intent, stage) the key step encodes
        self._key = np.zeros(KEY_DIM)   # the key the last match read
        self._last_done: Optional[CompletedTask] = None

    def seed(self, encoder: KeyEncoder, cfg: RouterConfig, n_joints: int) -> None:
        """One prototype key per (intent, stage) and per scene variant."""
        self.level1.seed(encoder, self._table.intent_names, self._table.sequences, self.key_period, n_joints)
        self.scenes.seed(encoder, cfg.scene_prototypes, n_joints, self._table.index)

    # ------------------------------------------------------------------ keys (any thread)
    def update_key(self, now: float) -> KeyUpdate:
        """Encode the current observation into the key buffer."""
        update = self.key_step.update(now, self._inputs, self.efforts, self._key_context)
        if update.slip_started:
            self._info(f"slip: wheels and IMU disagree (ratio {update.slip_ratio:.1f}); "
                       f"odometry down-weighted in the task key")
        return update

    def add_effort(self, effort: np.ndarray, limit: np.ndarray) -> None:
        """This tick's command, for the next key's effort mean."""
        self.efforts.add(effort, limit)

    def key_due(self, now: float) -> bool:
        return now - self.key_step.last_time >= self.key_period - 1e-9

    # ------------------------------------------------------------------ tick
    def drain_store(self) -> None:
        """Scene entries other routers stored join the task layer."""
        if self.store is not None:
            self.scenes.drain()

    def decision_arrived(self, intent: str, now: float) -> List[str]:
        """A decision ends the confirmation windows: what it taught the task layer, one line each."""
        learned = (self.level1.decision_arrived(intent, self._table.intent_index[intent], now),
                   self.scenes.confirm(intent, now, self._confirm_window))
        return [line for line in learned if line]

    def task_started(self, frame: Frame) -> None:
        if self._last_done is not None and (self._last_done.intent, self._last_done.args) != (frame.name, frame.args):
            self._last_done = None
        self.level1.reset_misses()

    def task_completed(self, frame: Frame) -> None:
        self._last_done = CompletedTask(frame.name, dict(frame.args), frame.variant, list(frame.subtasks))

    def subtask_completed(self, frame: Frame, subtask: int, now: float) -> None:
        if frame.source == SOURCE_TASK:
            self.level1.subtask_completed(frame, subtask, now)

    def match(self, now: float, top: Optional[Frame], state_ok: bool, odom_pose: np.ndarray, threshold: float,
              zone: str) -> Optional[UnknownScene]:
        """Level 1 on the frame that commands: the unknown-scene protocol to run, if it missed."""
        if top is None or top.done:
            self._key_context = ("", 0)
            return None
        if top.source != SOURCE_TASK or top.intent_index < 0 or not state_ok:
            return None
        self._key_context = (top.name, top.index)
        starting = not top.started
        if starting or not self.cache_enabled:
            self.update_key(now)   # a fresh key for this (intent, stage) now
        version = self.key_step.read_latest(self._key)
        if starting and not top.scene_checked and top.index == 0 and self.scenes.has_variants(top.name):
            top.scene_checked = True
            redo = self._last_done
            if redo is not None and (redo.intent, redo.args) == (top.name, top.args):
                top.variant, top.subtasks = redo.variant, list(redo.subtasks)   # decided again: no new scene
            elif self.key_step.vision_fresh:
                unknown = self._choose_variant(now, top, odom_pose, threshold, zone)
                if unknown is not None:
                    return unknown
        return self.level1.step(now, top, self._key, version, starting, self.cache_enabled,
                                threshold, zone).unknown_scene

    def _choose_variant(self, now: float, top: Frame, odom_pose: np.ndarray, threshold: float,
                        zone: str) -> Optional[UnknownScene]:
        """The variant of a starting task from the scene; else the unknown-scene protocol."""
        res = self.scenes.lookup(top.name, self._key, threshold, now)
        self.level1.note_scene_match(res.similarity, res.hit)
        if res.variant is not None:
            top.subtasks = self._table.ids(res.variant.subtasks)
            top.variant = res.variant.name
            self._info(f"scene: {top.name} -> variant {res.variant.name} (similarity {res.similarity:.3f})")
            return None
        self.scenes.record_unknown(top.name, self._key, odom_pose, zone, now, res.entry if res.mapped else -1)
        detail = res.mapped or f"scene similarity={res.similarity:.3f} < {threshold:.2f}"
        return self.level1.unknown_scene(now, top, self._key, detail, zone)

    def unknown_scene(self, now: float, frame: Frame, detail: str, zone: str) -> UnknownScene:
        """The unknown-scene protocol for ``frame`` (its key: the last one matched)."""
        return self.level1.unknown_scene(now, frame, self._key, detail, zone)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
