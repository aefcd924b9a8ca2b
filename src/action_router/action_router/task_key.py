"""The task-key step: observation -> 64-d key into the key double buffer (plain module, no rclpy).

It runs at ``key_hz`` (in the node: its own timer, so possibly another thread than the tick) and
on demand when level 1 starts a sub-task. The observation is joint state, IMU, odometry delta since
the previous key, vision features (inputs' double buffers), the current (intent, stage) and the
last cycle's mean |effort| / limit. That effort mean is an explicit input: level 3 returns its
command, the tick adds it to an ``EffortAccumulator``, and each key takes (and resets) the
accumulator's mean. Nothing else flows from the levels back into the key.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from .buffers import DoubleBuffer
from .encoder import GRAVITY, KEY_DIM, KeyEncoder, Observation
from .inputs import RouterInputs


class EffortAccumulator:
    """Sum of |effort| / limit over the ticks since the last key (thread-safe: tick adds, key takes)."""

    def __init__(self, n: int):
        self._sum = np.zeros(n)
        self._count = 0
        self._lock = threading.Lock()

    def add(self, effort: np.ndarray, limit: np.ndarray) -> None:
        with self._lock:
            self._sum += np.abs(effort) / np.maximum(limit, 1e-9)
            self._count += 1

    def take_mean(self, out: np.ndarray) -> bool:
        """Write the mean into out and reset; False (out untouched) when nothing was added."""
        with self._lock:
            count = self._count
            if count:
                np.divide(self._sum, count, out=out)
            self._sum[:] = 0.0
            self._count = 0
        return bool(count)


@dataclass(frozen=True)
class KeyUpdate:
    version: int                 # key buffer version after this key
    slip_weight: float           # odometry weight in this key (1 = trusted)
    slip_started: bool           # this key confirmed a new slip episode
    slip_ratio: float


class TaskKeyStep:
    """Encodes keys into ``key_buffer``; ``update`` is serialised (tick and key timer may both call it)."""

    def __init__(self, encoder: KeyEncoder, n_joints: int, vision_timeout: float = math.inf):
        self.encoder = encoder
        self.vision_timeout = float(vision_timeout)
        self.vision_fresh = False        # the last key carried a camera frame no older than vision_timeout
        self.key_buffer = DoubleBuffer({"key": (KEY_DIM,)})
        self.last_time = -math.inf
        self.slip_events = 0
        self._slipping = False
        self._obs = Observation(joint_pos=np.zeros(n_joints), joint_vel=np.zeros(n_joints),
                                effort_mean=np.zeros(n_joints))
        self._key = np.zeros(KEY_DIM)
        self._odom_pose = np.zeros(3)
        self._odom_init = False
        self._vision: Optional[dict] = None
        self._lock = threading.Lock()

    @property
    def slipping(self) -> bool:
        """The last key held a confirmed slip (a bool written by the key step: any thread may read it)."""
        return self._slipping

    def update(self, now: float, inputs: RouterInputs, efforts: EffortAccumulator,
               context: Tuple[str, int]) -> KeyUpdate:
        """One key from the inputs' latest values, the effort mean since the last key and (intent, stage)."""
        with self._lock:
            return self._update(now, inputs, efforts, context)

    def _update(self, now: float, inputs: RouterInputs, efforts: EffortAccumulator,
                context: Tuple[str, int]) -> KeyUpdate:
        obs = self._obs
        obs.intent, obs.stage = context
        # own copies of the snapshots: this may run outside the tick thread
        js = {"pos": obs.joint_pos, "vel": obs.joint_vel}
        inputs.joint_buf.read_into(js)
        imu = {"acc": np.empty(3), "gyro": np.empty(3), "speeds": np.empty(2)}
        _, imu_ver = inputs.imu_buf.read_into(imu)
        if imu_ver == 0:
            imu["acc"][:] = (0.0, 0.0, GRAVITY)
            imu["gyro"][:] = 0.0
            imu["speeds"][:] = 0.0
        obs.imu_acc, obs.imu_gyro = imu["acc"], imu["gyro"]
        obs.imu_speed = float(imu["speeds"][0])
        odom = {"pose": np.empty(3), "twist": np.empty(2)}
        _, odom_ver = inputs.odom_buf.read_into(odom)
        if odom_ver and self._odom_init:
            d = odom["pose"] - self._odom_pose
            d[2] = (d[2] + math.pi) % (2 * math.pi) - math.pi
            obs.odom_delta = d
        else:
            obs.odom_delta = np.zeros(3)
        if odom_ver:
            self._odom_pose[:] = odom["pose"]
            self._odom_init = True
        obs.wheel_speed = float(odom["twist"][0]) if odom_ver else 0.0
        efforts.take_mean(obs.effort_mean)   # no tick since the last key: the last mean stands
        vision_buf = inputs.vision_buf
        if vision_buf is not None:
            if self._vision is None or self._vision["v"].size != inputs.vision_len:
                self._vision = {"v": np.zeros(inputs.vision_len)}
            stamp, version = vision_buf.read_into(self._vision)
            self.vision_fresh = bool(version) and now - stamp <= self.vision_timeout
            obs.vision = self._vision["v"] if self.vision_fresh else None
        else:
            self.vision_fresh = False
            obs.vision = None
        key = self.encoder.encode(obs, self._key)
        weight = float(getattr(self.encoder, "last_slip_weight", 1.0))
        slipping = weight < 1.0
        started = slipping and not self._slipping
        if started:
            self.slip_events += 1
        self._slipping = slipping
        self.key_buffer.write(now, key=key)
        self.last_time = now
        return KeyUpdate(self.key_buffer.version, weight, started,
                         float(getattr(self.encoder, "last_slip_ratio", 0.0)))

    def read_latest(self, out: np.ndarray) -> int:
        """Copy the latest key into out; returns its version (0: no key yet)."""
        _, version = self.key_buffer.read_into({"key": out})
        return version
