"""The camera thread of the router: depth images in, CNN features out to the vision double buffer
(plain module, no rclpy).

The node's image callback only validates the image and swaps it into a one-slot mailbox
(``submit``); this thread runs the depth CNN (depth_cnn.py, ~1 ms) on the newest image and writes
the 16 features with the image's time through ``deliver`` (the router's ``set_vision``). A frame
that arrives while the previous one is being processed replaces any frame still waiting: the key
always sees the latest scene and the 1 kHz tick never runs the CNN. The process keeps one BLAS
thread (threadpoolctl): the CNN's small matrix products gain nothing from more, and on a busy
machine a BLAS thread waiting for a core stalled it ~10x (measured: 1.5 ms -> 10-20 ms per frame).
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Tuple

import numpy as np
from threadpoolctl import threadpool_limits

from .depth_cnn import DepthFeatureExtractor

DEPTH_ENCODINGS = {"32FC1": ("<f4", 1.0), "16UC1": ("<u2", 1e-3)}   # REP 118: metres, or millimetres


def depth_from_image(encoding: str, height: int, width: int, step: int, bigendian: bool,
                     data: bytes) -> Tuple[Optional[np.ndarray], str]:
    """A depth array in metres, or (None, why) for an image to reject."""
    spec = DEPTH_ENCODINGS.get(encoding)
    if spec is None:
        return None, f"depth image encoding {encoding!r} (expected one of {sorted(DEPTH_ENCODINGS)})"
    dtype = np.dtype(spec[0]).newbyteorder(">" if bigendian else "<")
    if height <= 0 or width <= 0 or step < width * dtype.itemsize or len(data) < step * height:
        return None, f"depth image {width}x{height} with step {step} and {len(data)} bytes"
    rows = np.frombuffer(bytes(data), dtype=np.uint8)[:step * height].reshape(height, step)
    depth = rows[:, :width * dtype.itemsize].copy().view(dtype).reshape(height, width).astype(float)
    if spec[1] != 1.0:
        depth[depth == 0] = np.nan        # 16UC1: 0 = no return
        depth *= spec[1]
    return depth, ""


def single_blas_thread() -> None:
    """Limit BLAS to one thread for the whole process (what the router's threads share)."""
    threadpool_limits(limits=1, user_api="blas")


class CameraFeatures:
    def __init__(self, deliver: Callable[[np.ndarray, float], object], weights: str = ""):
        single_blas_thread()
        self.extractor = DepthFeatureExtractor(weights or None)
        self.deliver = deliver
        self.frames = 0
        self.dropped = 0
        self.cnn_ms_total = 0.0
        self._slot: Optional[Tuple[np.ndarray, float]] = None
        self._event = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="camera-cnn", daemon=True)
        self._thread.start()

    def submit(self, depth: np.ndarray, stamp: float) -> None:
        if self._slot is not None:
            self.dropped += 1
        self._slot = (depth, stamp)           # reference swap: the thread takes the newest
        self._event.set()

    def _run(self) -> None:
        out = np.empty(16)
        while not self._stop.is_set():
            self._event.wait(0.1)
            self._event.clear()
            item, self._slot = self._slot, None
            if item is None:
                continue
            t0 = time.perf_counter()
            self.extractor.features(item[0], out)
            self.cnn_ms_total += (time.perf_counter() - t0) * 1e3
            self.frames += 1
            self.deliver(out.copy(), item[1])

    @property
    def cnn_ms_mean(self) -> float:
        return self.cnn_ms_total / self.frames if self.frames else 0.0

    def close(self) -> None:
        self._stop.set()
        self._event.set()
        self._thread.join(timeout=2.0)
