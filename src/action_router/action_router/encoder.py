"""Task key encoder (plain module, no rclpy): observation -> 64-d, L2-normalised key.

Feature layout of the key (dimension ranges, end exclusive):

    [ 0:16)  intent block     the current intent and the stage (index of the sub-task in the
                              intent's sequence): a fixed pseudo-random unit vector per
                              (intent, stage), derived from a hash of the names
    [16:32)  vision block     scene mode (the intent has scene variants, ``set_scene_frames``):
                              the depth CNN's 16 features relative to the intent's scene centre,
                              W (f - c) * w_intent / R (R: half the distance between its variants'
                              prototypes; W weighs the directions between them fully, the others
                              less: variants.scene_frames), so with the intent block as a
                              constant the cosine of two same-intent keys is ~1 - |d|^2 / 2R^2
                              near a prototype, 0 between two variants and 0.71 halfway; zeros
                              without a fresh camera frame.
                              Otherwise (no scene frames): any feature vector, random-projected
                              to 16 dims, tanh-squashed; zeros when no features are given
    [32:40)  IMU block        linear acceleration (x, y, z - g), angular velocity (x, y, z),
                              |horizontal acceleration|, |angular velocity|; tanh(x / scale)
    [40:48)  joint block      joint positions and velocities (2n values) projected to 8 dims
    [48:52)  effort block     last-cycle mean |commanded effort| / effort limit per joint,
                              projected to 4 dims
    [52:56)  odometry block   odometry delta over the last key cycle (dx, dy, dyaw, |d|), scaled,
                              times the slip weight w_odom (below)
    [56:64)  robot-ID block   8 dims derived from a hash of the robot ID, fixed norm

The first 56 dims (content) are weighted per block and normalised to norm ``sqrt(1 - s^2)``; the
robot-ID block has norm ``s`` (``id_share = s^2``, default 0.1). Two keys of the same robot
therefore have cosine ``(1 - s^2) cos(content) + s^2``; the task layer additionally requires the
robot-ID block to be identical before two keys can match at all, so robots sharing one cache never
match each other's entries (exact isolation, not a probabilistic one).

Slip awareness: the router keeps an IMU-derived base speed (longitudinal acceleration integrated,
pulled toward the wheel speed with time constant ``slip_speed_tau``) next to the wheel speed from
the odometry twist, and the encoder compares the two: ratio = (|v_imu| + v_eps) / (|v_wheel| + v_eps),
taken both ways (max(ratio, 1/ratio)), so a base sliding on locked wheels and wheels spinning on a
still base both count. Above ``slip_ratio`` (seed: 1.8) for ``slip_confirm`` consecutive keys
the odometry block is scaled by
``w_odom = max(slip_min_weight, slip_ratio / ratio)``: the more the wheels disagree with the IMU,
the less the (then untrustworthy) odometry shapes the key. The seed's literal "IMU acceleration /
wheel speed" compares unlike quantities and fires whenever a standing base starts to move or an
arm shakes it; comparing speeds keeps its threshold and intent.

The encoder is behind the ``KeyEncoder`` interface. ``ProjectionKeyEncoder`` uses fixed
pseudo-random projection matrices (seeded, reproducible); ``load_weights`` replaces any of them
with learned ones from an ``.npz`` file (same names and shapes as ``weight_names()``), which is
where a trained encoder (the seed's key-separation curriculum) would plug in.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

KEY_DIM = 64
BLOCKS = {
    "intent": (0, 16),
    "vision": (16, 32),
    "imu": (32, 40),
    "joints": (40, 48),
    "effort": (48, 52),
    "odom": (52, 56),
    "robot_id": (56, 64),
}
CONTENT_DIM = 56
GRAVITY = 9.80665
# dims a match compares: the scene lookup (intent as the constant, vision, IMU) and the running
# check (the content but vision: the view changes while a task runs; the task layer adds the
# robot-ID share back, so with no vision it equals the whole key's cosine)
SCENE_DIMS = np.r_[0:40]
RUN_DIMS = np.r_[0:16, 32:56]


def _seed_of(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def intent_vector(intent: str, stage: int, dim: int = 16) -> np.ndarray:
    """Fixed pseudo-random unit vector for (intent, stage)."""
    v = np.random.default_rng(_seed_of(f"intent:{intent}:{stage}")).standard_normal(dim)
    return v / np.linalg.norm(v)


def robot_id_block(robot_id: str, dim: int = 8) -> np.ndarray:
    """Unit vector from a hash of the robot ID (each robot its own, reproducible)."""
    raw = hashlib.blake2b(robot_id.encode("utf-8"), digest_size=2 * dim, person=b"csr-robot-id").digest()
    vals = np.frombuffer(raw, dtype="<u2").astype(float) / 65535.0 * 2.0 - 1.0
    n = np.linalg.norm(vals)
    return vals / n if n > 0 else np.full(dim, 1.0 / np.sqrt(dim))


@dataclass
class Observation:
    """What the encoder reads. Arrays are not copied; fill them in place between encodes."""
    intent: str = ""
    stage: int = 0
    vision: Optional[np.ndarray] = None
    imu_acc: np.ndarray = field(default_factory=lambda: np.array([0.0, 0.0, GRAVITY]))
    imu_gyro: np.ndarray = field(default_factory=lambda: np.zeros(3))
    joint_pos: np.ndarray = field(default_factory=lambda: np.zeros(0))
    joint_vel: np.ndarray = field(default_factory=lambda: np.zeros(0))
    effort_mean: np.ndarray = field(default_factory=lambda: np.zeros(0))   # |effort| / limit
    odom_delta: np.ndarray = field(default_factory=lambda: np.zeros(3))    # dx, dy, dyaw
    wheel_speed: float = 0.0
    imu_speed: float = 0.0             # IMU-derived longitudinal base speed [m/s] (slip test)


class KeyEncoder:
    """Interface: encode(observation) -> unit 64-d key whose last 8 dims are the robot-ID block."""

    key_dim = KEY_DIM

    def encode(self, obs: Observation, out: Optional[np.ndarray] = None) -> np.ndarray:
        raise NotImplementedError

    def id_block(self) -> np.ndarray:
        raise NotImplementedError


@dataclass
class EncoderConfig:
    robot_id: str = "robot"
    n_joints: int = 5
    id_share: float = 0.1
    slip_ratio: float = 1.8
    slip_min_weight: float = 0.1
    slip_v_eps: float = 0.05
    slip_confirm: int = 4            # consecutive keys over the ratio before a slip counts (~0.13 s at 30 Hz)
    w_intent: float = 1.0
    w_vision: float = 0.4
    w_imu: float = 0.5
    w_joints: float = 0.35
    w_effort: float = 0.3
    w_odom: float = 0.3
    acc_scale: float = 3.0       # m/s^2
    gyro_scale: float = 1.5      # rad/s
    pos_scale: float = 1.5       # rad
    vel_scale: float = 2.0       # rad/s
    odom_scale: float = 0.1      # m (per key cycle)
    yaw_scale: float = 0.2       # rad (per key cycle)
    seed: int = 2605


class ProjectionKeyEncoder(KeyEncoder):
    """Hand-built features through fixed (or loaded) projection matrices."""

    def __init__(self, config: EncoderConfig):
        if not 0.0 < config.id_share < 1.0:
            raise ValueError("id_share must be in (0, 1)")
        self.config = config
        rng = np.random.default_rng(config.seed)
        n = config.n_joints
        self.weights: Dict[str, np.ndarray] = {
            "joints": rng.standard_normal((8, 2 * n)) / np.sqrt(2 * n),
            "effort": rng.standard_normal((4, n)) / np.sqrt(max(n, 1)),
        }
        self._vision_cache: Dict[int, np.ndarray] = {}
        self._scene_frames: Dict[str, Tuple[np.ndarray, float, np.ndarray]] = {}
        self._intent_cache: Dict[tuple, np.ndarray] = {}
        self._id = robot_id_block(config.robot_id) * np.sqrt(config.id_share)
        self._content_norm = np.sqrt(1.0 - config.id_share)
        self._content = np.zeros(CONTENT_DIM)
        self._jv = np.zeros(2 * n)
        self.last_slip_weight = 1.0
        self.last_slip_ratio = 0.0
        self._slip_count = 0

    # -- learned weights ---------------------------------------------------------------------
    def weight_names(self) -> Dict[str, tuple]:
        names = {k: v.shape for k, v in self.weights.items()}
        names["vision_<length>"] = (16, "length")
        return names

    def load_weights(self, path: str) -> None:
        """Replace projection matrices by learned ones (npz with keys from weight_names())."""
        with np.load(path) as data:
            for name in data.files:
                w = np.asarray(data[name], dtype=float)
                if name.startswith("vision_"):
                    length = int(name.split("_", 1)[1])
                    if w.shape != (16, length):
                        raise ValueError(f"{name}: shape {w.shape}, expected (16, {length})")
                    self._vision_cache[length] = w
                elif name in self.weights:
                    if w.shape != self.weights[name].shape:
                        raise ValueError(f"{name}: shape {w.shape}, expected {self.weights[name].shape}")
                    self.weights[name] = w
                else:
                    raise ValueError(f"unknown weight {name!r}")

    def _vision_matrix(self, length: int) -> np.ndarray:
        w = self._vision_cache.get(length)
        if w is None:
            rng = np.random.default_rng(self.config.seed + 7919 * length)
            w = rng.standard_normal((16, length)) / np.sqrt(max(length, 1))
            self._vision_cache[length] = w
        return w

    def _intent(self, intent: str, stage: int) -> np.ndarray:
        key = (intent, stage)
        v = self._intent_cache.get(key)
        if v is None:
            v = intent_vector(intent, stage)
            self._intent_cache[key] = v
        return v

    def id_block(self) -> np.ndarray:
        return self._id

    def set_scene_frames(self, frames: Mapping[str, Tuple[np.ndarray, float, np.ndarray]]) -> None:
        """Intents with scene variants: their scene centre c, radius R and weighting W (vision block)."""
        self._scene_frames = {k: (np.asarray(c, dtype=float), float(r), np.asarray(w, dtype=float))
                              for k, (c, r, w) in frames.items()}

    def slip_weight(self, imu_speed: float, wheel_speed: float) -> float:
        c = self.config
        ratio = (abs(float(imu_speed)) + c.slip_v_eps) / (abs(float(wheel_speed)) + c.slip_v_eps)
        ratio = max(ratio, 1.0 / ratio)
        self.last_slip_ratio = ratio
        # a slip persists; a single jolt (a door pulled, aliasing of a shaking base) does not
        self._slip_count = self._slip_count + 1 if ratio > c.slip_ratio else 0
        if self._slip_count >= c.slip_confirm:
            return max(c.slip_min_weight, c.slip_ratio / ratio)
        return 1.0

    def encode(self, obs: Observation, out: Optional[np.ndarray] = None) -> np.ndarray:
        c = self.config
        x = self._content
        x[0:16] = self._intent(obs.intent, int(obs.stage)) * c.w_intent
        frame = self._scene_frames.get(obs.intent)
        if frame is not None:
            centre, radius, weight = frame
            if obs.vision is not None and obs.vision.size == centre.size:
                np.matmul(weight, obs.vision - centre, out=x[16:32])
                x[16:32] *= c.w_intent / radius
            else:
                x[16:32] = 0.0
        elif obs.vision is not None and obs.vision.size:
            v = np.nan_to_num(np.asarray(obs.vision, dtype=float), nan=0.0, posinf=0.0, neginf=0.0)
            x[16:32] = np.tanh(self._vision_matrix(v.size) @ v) * c.w_vision
        else:
            x[16:32] = 0.0
        acc = obs.imu_acc
        gyro = obs.imu_gyro
        imu = x[32:40]
        imu[0] = acc[0] / c.acc_scale
        imu[1] = acc[1] / c.acc_scale
        imu[2] = (acc[2] - GRAVITY) / c.acc_scale
        imu[3:6] = gyro / c.gyro_scale
        imu[6] = np.hypot(acc[0], acc[1]) / c.acc_scale
        imu[7] = np.sqrt(gyro[0] ** 2 + gyro[1] ** 2 + gyro[2] ** 2) / c.gyro_scale
        np.tanh(imu, out=imu)
        imu *= c.w_imu
        n = c.n_joints
        jv = self._jv
        jv[:n] = np.tanh(obs.joint_pos / c.pos_scale)
        jv[n:] = np.tanh(obs.joint_vel / c.vel_scale)
        x[40:48] = np.tanh(self.weights["joints"] @ jv) * c.w_joints
        x[48:52] = np.tanh(self.weights["effort"] @ np.clip(obs.effort_mean, 0.0, 1.0)) * c.w_effort
        w_odom = self.slip_weight(obs.imu_speed, obs.wheel_speed)
        self.last_slip_weight = w_odom
        d = obs.odom_delta
        od = x[52:56]
        od[0] = d[0] / c.odom_scale
        od[1] = d[1] / c.odom_scale
        od[2] = d[2] / c.yaw_scale
        od[3] = np.hypot(d[0], d[1]) / c.odom_scale
        np.tanh(od, out=od)
        od *= c.w_odom * w_odom
        if not np.all(np.isfinite(x)):
            np.nan_to_num(x, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
        out = np.empty(KEY_DIM) if out is None else out
        norm = float(np.sqrt(x @ x))
        if norm > 0:
            np.multiply(x, self._content_norm / norm, out=out[:CONTENT_DIM])
        else:
            out[:CONTENT_DIM] = 0.0
        out[CONTENT_DIM:] = self._id
        return out
