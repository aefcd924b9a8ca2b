"""A light CNN on the head camera's depth image -> the 16 vision features of the task key (plain
module: numpy only, no rclpy).

Architecture (weights in ``data/depth_cnn_v1.npz``, a small versioned file in the repository):

    depth (H x W, m; +inf/NaN/0 = no return: filled from its neighbours), resized to 64 x 48
    -> inverse depth 1/d (near things dominate, the far floor fades)
    conv1 3x3, 8 filters, ReLU, 2x2 average pool  -> 32 x 24 x 8
    conv2 3x3, 16 filters, ReLU, 2x2 average pool -> 16 x 12 x 16
    conv3 3x3, 16 filters, ReLU, 2x2 average pool -> 8 x 6 x 16 = 768 values (where things are kept)
    head  (768 -> 16) linear, after subtracting the training mean; output divided by ``scale``

The convolutions are fixed (seeded, stored in the file); the head is fitted on simulated scenes by
``csr_llm_bringup.sim.scene_keys`` as a linear discriminant (scenes of one kind close together,
kinds apart: the seed's key-separation stage): whitened so one unit is the spread of one kind,
each direction shrunk by lambda / (1 + lambda) of its separation lambda (directions that separate
nothing add no noise; ``scale`` is 1). The key encoder scales the block to the other blocks.
Valid on the camera it was fitted for
(``camera`` in the file: size, field of view, mount); refit for another.

It runs at the camera rate in the router node's camera thread, never in the 1 kHz tick (the key
reads its result from the vision double buffer).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Union

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

FEATURES = 16
INPUT_SHAPE = (48, 64)          # rows, columns
VERSION = "depth_cnn_v1"
DEFAULT_WEIGHTS = Path(__file__).resolve().parent / "data" / f"{VERSION}.npz"
CONV_SHAPES = {"conv1": (8, 1, 3, 3), "conv2": (16, 8, 3, 3), "conv3": (16, 16, 3, 3)}
POOLED = 8 * 6 * 16


def seeded_convolutions(seed: int = 14) -> Dict[str, np.ndarray]:
    """The fixed convolution stack: conv1 holds relief/edge detectors, the rest are random
    zero-mean filters scaled to keep the activations' size from layer to layer."""
    rng = np.random.default_rng(seed)
    conv1 = np.zeros(CONV_SHAPES["conv1"])
    lap = np.array([[-1, -1, -1], [-1, 8, -1], [-1, -1, -1]], dtype=float) / 8.0
    sx = np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]], dtype=float) / 4.0
    designed = [lap, -lap, sx, -sx, sx.T, -sx.T, np.full((3, 3), 1.0 / 9.0), -np.full((3, 3), 1.0 / 9.0)]
    for k, f in enumerate(designed):
        conv1[k, 0] = f
    out = {"conv1": conv1}
    for name in ("conv2", "conv3"):
        shape = CONV_SHAPES[name]
        w = rng.standard_normal(shape)
        w -= w.mean(axis=(2, 3), keepdims=True) * 0.5
        out[name] = w / np.sqrt(shape[1] * 9)
    return out


def resize_blocks(depth: np.ndarray, shape=INPUT_SHAPE) -> np.ndarray:
    """Block-mean resize to `shape` (integer factors), or nearest-pixel sampling otherwise."""
    h, w = depth.shape
    rows, cols = shape
    if (h, w) == (rows, cols):
        return depth
    if h % rows == 0 and w % cols == 0:
        return depth.reshape(rows, h // rows, cols, w // cols).mean(axis=(1, 3))
    ri = (np.arange(rows) * h // rows).astype(int)
    ci = (np.arange(cols) * w // cols).astype(int)
    return depth[np.ix_(ri, ci)]


def fill_missing(depth: np.ndarray, far: float) -> np.ndarray:
    """Pixels without a return (inf, NaN, <= 0) take the largest valid value of their 3x3
    neighbourhood (a dropped pixel on a surface reads as that surface, not as a spike to ``far``);
    with no valid neighbour they read ``far``."""
    valid = np.isfinite(depth) & (depth > 0.0)
    if valid.all():
        return depth
    d = np.where(valid, depth, -np.inf)
    windows = sliding_window_view(np.pad(d, 1, mode="constant", constant_values=-np.inf), (3, 3))
    neighbour = windows.max(axis=(2, 3))
    out = np.where(valid, depth, neighbour)
    out[~np.isfinite(out)] = far
    return out


def _conv_relu_pool(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x: (C, H, W) -> ReLU(conv3x3 'same') pooled 2x2 -> (F, H/2, W/2)."""
    c, h, wd = x.shape
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1)), mode="edge")
    patches = sliding_window_view(padded, (3, 3), axis=(1, 2))          # C, H, W, 3, 3
    cols = np.ascontiguousarray(patches.transpose(1, 2, 0, 3, 4)).reshape(h * wd, c * 9)   # im2col
    y = cols @ w.reshape(w.shape[0], c * 9).T                            # (H W, F): one BLAS call
    np.maximum(y, 0.0, out=y)
    return y.reshape(h // 2, 2, wd // 2, 2, -1).mean(axis=(1, 3)).transpose(2, 0, 1)


class DepthFeatureExtractor:
    """Depth image -> 16 features (unit scale); ``features`` allocates only small temporaries."""

    def __init__(self, weights: Union[str, Path, None] = None, max_depth: float = 4.0):
        path = Path(weights) if weights else DEFAULT_WEIGHTS
        with np.load(path, allow_pickle=False) as data:
            self.version = str(data["version"])
            self.conv = {name: np.asarray(data[name], dtype=float) for name in CONV_SHAPES}
            self.head = np.asarray(data["head"], dtype=float)
            self.mean = np.asarray(data["mean"], dtype=float)
            self.scale = float(data["scale"])
            self.max_depth = float(data["max_depth"]) if "max_depth" in data.files else float(max_depth)
            self.camera = {k[len("camera_"):]: float(data[k]) for k in data.files if k.startswith("camera_")}
        for name, shape in CONV_SHAPES.items():
            if self.conv[name].shape != shape:
                raise ValueError(f"{path}: {name} has shape {self.conv[name].shape}, expected {shape}")
        if self.head.shape != (FEATURES, POOLED) or self.mean.shape != (POOLED,) or not self.scale > 0:
            raise ValueError(f"{path}: head must be ({FEATURES}, {POOLED}), mean ({POOLED},), scale > 0")

    def pooled(self, depth: np.ndarray) -> np.ndarray:
        """The convolution stack's 768 outputs (what the head is fitted on)."""
        d = fill_missing(np.asarray(depth, dtype=float), self.max_depth)
        d = resize_blocks(np.minimum(d, self.max_depth))
        x = 1.0 / np.maximum(d, 0.05)
        x = x[None]
        for name in ("conv1", "conv2", "conv3"):
            x = _conv_relu_pool(x, self.conv[name])
        return x.reshape(-1)

    def features(self, depth: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
        out = np.empty(FEATURES) if out is None else out
        np.matmul(self.head, self.pooled(depth) - self.mean, out=out)
        out /= self.scale
        return out
