"""Level 1: task-layer match and the unknown-scene protocol (plain module, no rclpy).

On a new key for the running task frame (key_hz, every tick with the cache disabled, and at
once when a sub-task starts) the key is matched in the task layer against the zone's threshold.
A hit of the frame's intent keeps the sub-task running; at a sub-task start it may point the frame
at another stage of its task. A miss (confirmed ``miss_confirmations`` times while a sub-task
runs, at once when it starts) runs the unknown-scene protocol: back off and hold (the
``unknown_scene`` sub-tasks) and ask the reasoning node for a new decision. The missed key is kept;
if the answer confirms the same intent within ``confirm_window_s`` it is learned.

Task-layer seeding: one prototype key per (intent, stage), the key the encoder gives for that
stage in its nominal situation (``prototype`` pose, robot at rest, no vision).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from .cache import TaskLayer
from .encoder import GRAVITY, KEY_DIM, KeyEncoder, Observation
from .interrupts import SOURCE_UNKNOWN_SCENE, Frame
from .subtask import SubTask


@dataclass(frozen=True)
class UnknownScene:
    """The protocol's outcome: the frame to run as the new base and the decision request to send."""
    frame: Frame
    request: str


@dataclass(frozen=True)
class Level1Result:
    matched: bool                     # a match ran this tick (else the last result stands)
    hit: bool = False
    similarity: float = 0.0
    unknown_scene: Optional[UnknownScene] = None


@dataclass(frozen=True)
class _PendingConfirm:
    key: np.ndarray
    intent: str
    stage: int
    subtask: int
    since: float


NO_MATCH = Level1Result(matched=False)


class Level1:
    def __init__(self, subtasks: Sequence[SubTask], unknown_subtasks: Sequence[int], unknown_request: str,
                 task_capacity: int, miss_confirmations: int, confirm_window_s: float, learn_below: float):
        self.subtasks = list(subtasks)
        self.task_layer = TaskLayer(int(task_capacity))
        self.unknown_subtasks = list(unknown_subtasks)
        self.unknown_request = unknown_request
        self.miss_confirmations = int(miss_confirmations)
        self.confirm_window_s = float(confirm_window_s)
        self.learn_below = float(learn_below)
        self.unknown_scene_count = 0
        self.hit = False                  # last match (for status)
        self.similarity = 0.0
        self._misses = 0
        self._version_seen = 0
        self._pending: Optional[_PendingConfirm] = None

    def seed(self, encoder: KeyEncoder, intent_names: Sequence[str], sequences: Sequence[Sequence[int]],
             key_period: float, n_joints: int) -> None:
        obs = Observation(joint_pos=np.zeros(n_joints), joint_vel=np.zeros(n_joints), effort_mean=np.zeros(n_joints))
        for ii, intent in enumerate(intent_names):
            for stage, si in enumerate(sequences[ii]):
                st = self.subtasks[si]
                obs.intent, obs.stage = intent, stage
                obs.joint_pos[:] = st.prototype_pose
                obs.odom_delta = np.array([st.base_vx * key_period, 0.0, st.base_wz * key_period])
                obs.wheel_speed = obs.imu_speed = st.base_vx     # a nominal sub-task does not slip
                obs.imu_acc = np.array([0.0, 0.0, GRAVITY])
                key = encoder.encode(obs, np.empty(KEY_DIM))
                self.task_layer.insert(key, si, ii, stage, seeded=True)

    def step(self, now: float, frame: Frame, key: np.ndarray, key_version: int, starting: bool,
             cache_enabled: bool, threshold: float, zone: str) -> Level1Result:
        """Match the key of the running task frame; may repoint a starting frame at another stage."""
        if not starting and cache_enabled and key_version == self._version_seen:
            return NO_MATCH  # no new key: the task-layer result of the last match stands
        self._version_seen = key_version
        layer = self.task_layer
        hit, best, sim = layer.match(key, threshold, now, dims="run")
        self.similarity = sim
        self.hit = hit
        ptr = int(layer.pointer[best]) if best >= 0 else -1
        if hit and layer.intent[best] == frame.intent_index:
            self._misses = 0
            if starting:
                stage = int(layer.stage[best])
                if stage != frame.index and 0 <= stage < len(frame.subtasks) and frame.subtasks[stage] == ptr:
                    frame.index = stage  # the cache points at another stage of this task
                frame.matched_sim = sim
                frame.start_key = key.copy()
            return Level1Result(True, hit, sim)
        self._misses += 1
        unknown = None
        if starting or self._misses >= self.miss_confirmations:
            unknown = self.unknown_scene(now, frame, key, f"similarity={sim:.3f} < {threshold:.2f}", zone)
        return Level1Result(True, hit, sim, unknown)

    def unknown_scene(self, now: float, frame: Frame, key: np.ndarray, detail: str, zone: str) -> UnknownScene:
        """Keep the missed key for confirmation; the protocol's frame and request."""
        sub = frame.current
        self.unknown_scene_count += 1
        self._pending = _PendingConfirm(key.copy(), frame.name, frame.index, sub, now)
        self._misses = 0
        request = (f"{self.unknown_request} (intent={frame.name}, sub_task={self.subtasks[sub].name}, "
                   f"{detail}, zone={zone})")
        return UnknownScene(Frame(SOURCE_UNKNOWN_SCENE, "unknown_scene", list(self.unknown_subtasks)), request)

    def decision_arrived(self, intent: str, intent_index: int, now: float) -> Optional[str]:
        """A decision ends the confirmation window; the same intent in time learns the missed key."""
        pend, self._pending = self._pending, None
        if pend is None or pend.intent != intent or now - pend.since > self.confirm_window_s:
            return None
        self.task_layer.insert(pend.key, pend.subtask, intent_index, pend.stage, seeded=False, now=now)
        return (f"task layer: learned the missed scene of {intent}/{self.subtasks[pend.subtask].name} "
                f"(confirmed by a new decision)")

    def subtask_completed(self, frame: Frame, subtask: int, now: float) -> None:
        """A task sub-task that started from a weak match is learned under the key it started from."""
        if frame.start_key is not None and frame.matched_sim < self.learn_below:
            self.task_layer.insert(frame.start_key, subtask, frame.intent_index, frame.index, now=now)

    def reset_misses(self) -> None:
        self._misses = 0

    def note_scene_match(self, similarity: float, hit: bool) -> None:
        """A scene lookup stands as the last match (status)."""
        self.similarity, self.hit = similarity, hit
