"""Double buffers between sensor threads and the control tick (plain module, no rclpy).

A writer fills the back slot and then publishes it by flipping the front index; a reader copies
the front slot. A sequence counter (even: stable, odd: a write in progress) guards the case where
the writer flips twice while a reader is still copying: the reader retries, so a tick never sees a
half-written set of values (seqlock over two slots). Writers must be a single thread per buffer
(ROS callbacks of one subscription in one mutually exclusive callback group).
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np


class DoubleBuffer:
    """Two slots of named float arrays with fixed shapes, plus a stamp per write."""

    def __init__(self, fields: Dict[str, Tuple[int, ...]]):
        self.fields = tuple(fields)
        self._slots = [{k: np.zeros(s) for k, s in fields.items()} for _ in range(2)]
        self._stamp = [float("nan"), float("nan")]
        self._front = 0
        self._seq = 0          # writes completed * 2 (+1 while writing)
        self.version = 0       # number of published writes

    def write(self, stamp: float, **values) -> None:
        back = 1 - self._front
        self._seq += 1  # odd: writing
        slot = self._slots[back]
        for k, v in values.items():
            slot[k][...] = v
        self._stamp[back] = stamp
        self._front = back
        self.version += 1
        self._seq += 1  # even: stable

    def read_into(self, out: Dict[str, np.ndarray], retries: int = 16) -> Tuple[float, int]:
        """Copy the front slot into out (same field names); returns (stamp, version).

        Slot F (the front when the read starts) is rewritten only by the second write after it
        became the front. With s0 even that write starts at s0 + 3, so s1 - s0 <= 2 proves the
        copy whole; with s0 odd the front may be read just before the in-progress write flips it,
        and the next write (to F) starts at s0 + 2, so s1 - s0 <= 1 is required.
        """
        stamp, version = float("nan"), 0
        for _ in range(retries):
            s0 = self._seq
            version = self.version  # before the front: never newer than the data copied
            front = self._front
            slot = self._slots[front]
            for k in out:
                np.copyto(out[k], slot[k])
            stamp = self._stamp[front]
            s1 = self._seq
            if s1 - s0 <= (1 if s0 & 1 else 2):
                return stamp, version
        return stamp, version
