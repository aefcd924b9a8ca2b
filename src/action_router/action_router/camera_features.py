"""Depth images in, CNN features out to the router's vision double buffer, off the tick (plain
module, no rclpy).

The node's image callback only validates the image and hands it to ``CameraFeatures.submit``. The
depth CNN (depth_cnn.py) runs in a child process (``process=True``, the default): in a thread of
the router's own process it would hold the GIL while it runs, and ticks that fall into it would
wait (bench-scene measures both).
A receiver thread writes each result, stamped with its image's time, through ``deliver`` (the
router's ``set_vision``); ``inline`` runs it in ``submit`` instead, for the lockstepped sim and
replay (reproducible ticks matter there, latency does not). One frame is in flight at a time; a
frame arriving meanwhile replaces any frame still waiting, so the key always sees the latest scene.
The child keeps one BLAS thread (threadpoolctl): the CNN's small products gain nothing from more,
and on a busy machine a BLAS thread waiting for a core would stall it.
"""
from __future__ import annotations

import multiprocessing as mp
import signal
import threading
import time
from typing import Any, Callable, Optional, Tuple

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
    """Limit BLAS to one thread for the whole process."""
    threadpool_limits(limits=1, user_api="blas")


def _worker(conn, weights: str) -> None:
    """Child process: depth arrays in, (features, CNN ms) out, until None arrives."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C reaches the group: the router closes us
    single_blas_thread()
    extractor = DepthFeatureExtractor(weights or None)
    out = np.empty(16)
    while True:
        try:
            item = conn.recv()
        except (EOFError, OSError):      # the router is gone
            return
        if item is None:
            return
        t0 = time.perf_counter()
        extractor.features(item, out)
        conn.send((out.copy(), (time.perf_counter() - t0) * 1e3))


class CameraFeatures:
    def __init__(self, deliver: Callable[[np.ndarray, float], object], weights: str = "", process: bool = True,
                 inline: bool = False):
        """``inline``: the CNN runs in ``submit`` itself and delivers before it returns (a lockstepped
        sim or replay: each tick then sees the features of exactly the frames that arrived before it)."""
        self.deliver = deliver
        self.inline = inline
        self.frames = 0
        self.dropped = 0
        self.cnn_ms_total = 0.0
        self._lock = threading.Lock()
        self._waiting: Optional[Tuple[np.ndarray, float]] = None
        self._in_flight: Optional[float] = None        # stamp of the frame being processed
        self._stop = threading.Event()
        self._extractor: Optional[DepthFeatureExtractor] = None
        self._conn: Optional[Any] = None
        self._proc: Optional[Any] = None
        if process and not inline:
            # spawn: a fresh interpreter, never a fork of a process with DDS threads
            ctx = mp.get_context("spawn")
            self._conn, child = ctx.Pipe()
            self._proc = ctx.Process(target=_worker, args=(child, weights), name="camera-cnn", daemon=True)
            self._proc.start()
        else:
            single_blas_thread()
            self._extractor = DepthFeatureExtractor(weights or None)
        self._results: Optional[Tuple[np.ndarray, float]] = None
        self._event = threading.Event()
        self._thread = threading.Thread(target=self._run, name="camera-features", daemon=True)
        if not inline:
            self._thread.start()

    def submit(self, depth: np.ndarray, stamp: float) -> None:
        if self.inline and self._extractor is not None:
            t0 = time.perf_counter()
            features = self._extractor.features(depth)
            self.frames += 1
            self.cnn_ms_total += (time.perf_counter() - t0) * 1e3
            self.deliver(features, stamp)
            return
        with self._lock:
            if self._in_flight is not None:
                if self._waiting is not None:
                    self.dropped += 1
                self._waiting = (depth, stamp)
                return
            self._in_flight = stamp
        self._send(depth)

    def _send(self, depth: np.ndarray) -> None:
        if self._conn is not None:
            self._conn.send(np.ascontiguousarray(depth, dtype=np.float32))
        else:
            self._results = (np.asarray(depth), 0.0)
            self._event.set()

    def _receive(self) -> Optional[Tuple[np.ndarray, float]]:
        if self._conn is not None:
            if not self._conn.poll(0.1):
                return None
            features, ms = self._conn.recv()
            return features, ms
        self._event.wait(0.1)
        self._event.clear()
        item, self._results = self._results, None
        if item is None or self._extractor is None:
            return None
        t0 = time.perf_counter()
        features = self._extractor.features(item[0])
        return features, (time.perf_counter() - t0) * 1e3

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                got = self._receive()
            except (EOFError, OSError):
                return
            if got is None:
                continue
            features, ms = got
            with self._lock:
                stamp = self._in_flight
                nxt, self._waiting = self._waiting, None
                self._in_flight = nxt[1] if nxt is not None else None
            self.frames += 1
            self.cnn_ms_total += ms
            if stamp is not None:
                self.deliver(features, stamp)
            if nxt is not None:
                self._send(nxt[0])

    @property
    def cnn_ms_mean(self) -> float:
        return self.cnn_ms_total / self.frames if self.frames else 0.0

    def close(self) -> None:
        self._stop.set()
        self._event.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=2.0)
        if self._conn is not None and self._proc is not None:
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._proc.join(timeout=3.0)
            if self._proc.is_alive():
                self._proc.terminate()
