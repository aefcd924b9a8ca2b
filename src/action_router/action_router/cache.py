"""Three-layer cache of the action router, invalidated by physical signals (plain module, no rclpy).

Task layer (``TaskLayer``): 64-d keys -> sub-task pointer. How it is populated:
  * seeded at configure time with one prototype entry per (intent, stage): the key the encoder
    gives for that intent/stage in the sub-task's nominal situation (its ``prototype`` pose from
    config, robot at rest, no vision). Seeded entries are never evicted.
  * learned entries: (a) after a level-1 miss the router keeps the missed key; when the reasoning
    node answers the decision request with the same intent, that key is inserted for the sub-task
    it asked about (the big model confirmed the scene); (b) when a sub-task completes normally and
    the key it started from matched with a similarity below ``learn_below``, that key is inserted
    too. So the hit rate climbs with operation (the seed's 32 % -> 89 %). Learned entries live in
    a fixed-capacity ring (least recently hit replaced first).
  Search is one matrix-vector product over the preallocated key matrix; entries of other robots
  (different robot-ID block) are masked out exactly (unless ``isolation`` is off: then robots
  sharing a store use each other's learned entries).
  Scene entries (``KIND_SCENE``, variants.py): a variant's prototype key whose value is the
  variant (its sub-task sequence), learned scene keys, and map entries of unknown scenes (variant
  -1). ``match(dims=..., intent=..., kind=...)`` compares only the given key dims (cosine over
  them), only entries of that intent and kind: the scene lookup and the running check each use
  their own dims (encoder.SCENE_DIMS / RUN_DIMS).

Behaviour layer (``BehaviourLayer``): the anchored B-spline coefficients of the running sub-task,
the running blend (t0, e0, ev0) and the current 50 ms segment. A tick that falls inside the
segment is a hit; a new sub-task, a resume, a large tracking error or leaving the segment is a
miss (re-plan).

Execution layer (``ExecutionLayer``): per joint the PID gains, the effort (current) limit, the
sub-task torque limit written by level 2, a derated set (scaled gains and limits), a confidence
bit and the failure flag. The effective arrays the PID uses are rebuilt only when one of these
changes (a miss); otherwise the tick reuses them (a hit). The physical signals that invalidate
the layers are watched by the monitors in ``monitors.py``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence, Tuple

import numpy as np

from .encoder import CONTENT_DIM, KEY_DIM, RUN_DIMS, SCENE_DIMS
from .pid import Gains

KIND_STAGE = 0      # an (intent, stage) entry: the running check
KIND_SCENE = 1      # a scene entry: the scene lookup at a task's start


class TaskLayer:
    """Preallocated key matrix with seeded (permanent) and learned (ring) entries."""

    def __init__(self, capacity: int = 512, key_dim: int = KEY_DIM, isolation: bool = True):
        self.capacity = int(capacity)
        self.isolation = bool(isolation)
        self.kind = np.zeros(self.capacity, dtype=np.int64)
        self.variant = np.full(self.capacity, -1, dtype=np.int64)   # scene entries: variant index, -1 = map
        self._dims = {"scene": SCENE_DIMS, "run": RUN_DIMS}
        self._norms = {name: np.zeros(self.capacity) for name in self._dims}
        self.keys = np.zeros((self.capacity, key_dim))
        self.pointer = np.full(self.capacity, -1, dtype=np.int64)   # sub-task index (global)
        self.intent = np.full(self.capacity, -1, dtype=np.int64)    # intent index
        self.stage = np.full(self.capacity, -1, dtype=np.int64)
        self.seeded = np.zeros(self.capacity, dtype=bool)
        self.last_hit = np.zeros(self.capacity)
        self.count = 0
        self.n_seeded = 0
        self.hits = 0
        self.lookups = 0
        self._sims = np.zeros(self.capacity)
        self._valid = np.zeros(self.capacity, dtype=bool)

    def insert(self, key: np.ndarray, pointer: int, intent: int, stage: int, seeded: bool = False,
               now: float = 0.0, kind: int = KIND_STAGE, variant: int = -1) -> int:
        if self.count < self.capacity:
            idx = self.count
            self.count += 1
        else:
            learned = np.flatnonzero(~self.seeded[:self.count])
            if learned.size == 0:
                raise OverflowError("task layer full of seeded entries")
            idx = int(learned[np.argmin(self.last_hit[learned])])
        self.keys[idx] = key
        for name, dims in self._dims.items():
            self._norms[name][idx] = np.linalg.norm(key[dims])
        self.kind[idx] = kind
        self.variant[idx] = variant
        self.pointer[idx] = pointer
        self.intent[idx] = intent
        self.stage[idx] = stage
        self.seeded[idx] = seeded
        self.last_hit[idx] = now
        if seeded:
            self.n_seeded += 1
        return idx

    def match(self, key: np.ndarray, threshold: float, now: float = 0.0, count: bool = True, *,
              dims: str = "", intent: int = -1, kind: int = KIND_STAGE) -> Tuple[bool, int, float]:
        """Best entry of this robot (and kind, and intent if >= 0): (hit, entry index or -1, cosine
        similarity over ``dims``: "" = the whole key, "scene" or "run")."""
        n = self.count
        if count:
            self.lookups += 1
        if n == 0:
            return False, -1, -1.0
        sims = self._sims[:n]
        if dims:
            sel = self._dims[dims]
            q = key[sel]
            qn = float(np.linalg.norm(q))
            np.matmul(self.keys[:n][:, sel], q, out=sims)
            sims /= np.maximum(self._norms[dims][:n] * qn, 1e-12)
            if dims == "run":     # (1 - s^2) cos + s^2: the whole key's cosine when vision is zero
                id_sq = float(key[CONTENT_DIM:] @ key[CONTENT_DIM:])
                sims *= 1.0 - id_sq
                sims += id_sq
        else:
            np.matmul(self.keys[:n], key, out=sims)
        # exact robot isolation: the ID block must be identical
        valid = self._valid[:n]
        if self.isolation:
            np.all(self.keys[:n, CONTENT_DIM:] == key[CONTENT_DIM:], axis=1, out=valid)
        else:
            valid[:] = True
        valid &= self.kind[:n] == kind
        if intent >= 0:
            valid &= self.intent[:n] == intent
        sims[~valid] = -2.0
        best = int(np.argmax(sims))
        sim = float(sims[best])
        if sim < -1.5:
            return False, -1, -1.0
        hit = sim >= threshold
        if hit:
            if count:
                self.hits += 1
            self.last_hit[best] = now
        return hit, best, sim

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0


class BehaviourLayer:
    """Anchored template coefficients, the running blend and the current segment."""

    def __init__(self, n_joints: int, max_ctrl: int = 64):
        self.valid = False
        self.subtask = -1
        self.anchored = np.zeros((max_ctrl, n_joints))
        self.n_ctrl = 0
        self.seg_t0 = 0.0          # time of the segment's first sample
        self.seg_k0 = 0            # template grid row of the segment's first sample
        self.blend_t0 = 0.0
        self.blend_time = 0.0      # the running blend's duration (set by each re-plan)
        self.e0 = np.zeros(n_joints)
        self.ev0 = np.zeros(n_joints)
        self.hits = 0
        self.lookups = 0

    def invalidate(self) -> None:
        self.valid = False

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0


@dataclass
class ExecutionSet:
    gains: List[Gains]
    effort_limit: np.ndarray


class ExecutionLayer:
    """Per-joint execution value: nominal and derated sets, torque limit, confidence, failure."""

    def __init__(self, nominal: ExecutionSet, derate_gain_scale: float = 0.6, derate_limit_scale: float = 0.5,
                 low_confidence_limit_scale: float = 0.7):
        self.n = len(nominal.gains)
        self.nominal = nominal
        self.derate_gain_scale = float(derate_gain_scale)
        self.derated = ExecutionSet([g.scaled(derate_gain_scale) for g in nominal.gains],
                                    nominal.effort_limit * derate_limit_scale)
        self.low_confidence_limit_scale = float(low_confidence_limit_scale)
        self.derated_mask = np.zeros(self.n, dtype=bool)
        self.torque_limit = np.full(self.n, np.inf)     # written by level 2 per sub-task
        self.confidence = np.ones(self.n, dtype=bool)
        self.failure = False
        self.limit = nominal.effort_limit.copy()         # effective, used by level 3
        self.gains: List[Gains] = list(nominal.gains)    # effective
        self.dirty = True
        self.gains_changed = True
        self.hits = 0
        self.lookups = 0

    def set_nominal_gains(self, gains: Sequence[Gains]) -> None:
        """New nominal gains (a live parameter change); the derated set follows at its scale."""
        self.nominal = ExecutionSet(list(gains), self.nominal.effort_limit)
        self.derated = ExecutionSet([g.scaled(self.derate_gain_scale) for g in gains], self.derated.effort_limit)
        self.dirty = self.gains_changed = True

    def set_torque_limit(self, limit: np.ndarray) -> None:
        if (limit != self.torque_limit).any():
            self.torque_limit[:] = limit
            self.dirty = True

    def set_derated(self, mask: np.ndarray) -> None:
        if (mask != self.derated_mask).any():
            self.derated_mask[:] = mask
            self.dirty = True
            self.gains_changed = True

    def set_confidence(self, conf: np.ndarray) -> None:
        if (conf != self.confidence).any():
            self.confidence[:] = conf
            self.dirty = True

    def refresh(self) -> bool:
        """Rebuild the effective value if invalidated; returns True on a hit (nothing to do)."""
        self.lookups += 1
        if not self.dirty:
            self.hits += 1
            return True
        base = np.where(self.derated_mask, self.derated.effort_limit, self.nominal.effort_limit)
        lim = np.minimum(base, self.torque_limit)
        lim = np.where(self.confidence, lim, lim * self.low_confidence_limit_scale)
        self.limit[:] = np.maximum(lim, 0.0)
        if self.gains_changed:
            self.gains = [d if m else g for g, d, m in zip(self.nominal.gains, self.derated.gains, self.derated_mask)]
        self.dirty = False
        return False

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0
