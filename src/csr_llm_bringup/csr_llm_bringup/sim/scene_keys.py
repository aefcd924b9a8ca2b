"""Randomized camera scenes of the simulated world, and the fit of the depth CNN's head and the
level-1 scene prototypes on them (plain module: MuJoCo + numpy, no rclpy).

Scene kinds (what level 1 tells apart; ``KNOWN`` kinds have a sub-task variant each):

    door_lever, door_knob     the robot at the door (start pose +- 5 cm, +- 3.5 deg), lever or knob
    shelf_high, shelf_low     at the warehouse shelf, the box in reach of reach_shelf / reach_shelf_low,
                              then the base moved +- 2.5 cm, +- 1.7 deg (object positions vary within
                              the reach targets' 5 cm tolerance: farther, pick_object is refused)
    path_clear, path_crate    anywhere in the world facing either way, with nothing / a crate
                              0.8-1.3 m ahead (+- 0.2 m aside, any yaw)
    door_plain                (unknown) a door without a handle
    door_open                 (unknown) the door already swung open (nothing to grip)

Every depth image gets Gaussian depth noise (``noise`` m, 1 cm by default: a lighting-free RGB-D
sensor's error at 1 m) and 1 % dropped pixels (no return).

``python -m csr_llm_bringup.sim.scene_keys`` fits the CNN head (a whitened linear discriminant of
the known kinds, path_clear split by heading and side of the door, each direction shrunk by its
separation) and writes ``action_router/data/depth_cnn_v1.npz`` and ``config/scene_keys.yaml``
(prototypes per kind: its mean feature vector, or k-means centres for the spread-out path kinds;
the task layer's seed). The unknown kinds are never fitted on.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import mujoco
import numpy as np
import yaml

from action_router.depth_cnn import CONV_SHAPES, DEFAULT_WEIGHTS, FEATURES, POOLED, VERSION, DepthFeatureExtractor, \
    seeded_convolutions

from csr_llm_common.paths import config_dir
from .depth_camera import CameraSpec
from .simulator import Simulator

KNOWN = ("door_lever", "door_knob", "shelf_high", "shelf_low", "path_clear", "path_crate")
UNKNOWN = ("door_plain", "door_open")
PROTOTYPES_PER_KIND = {"path_clear": 6, "path_crate": 4}   # k-means centres; other kinds: 1 (the mean)


class SceneMaker:
    """Builds randomized scenes in one simulator per handle type and captures their depth images."""

    def __init__(self, seed: int = 0, noise: float = 0.01, dropout: float = 0.01, camera: Optional[CameraSpec] = None):
        self.rng = np.random.default_rng(seed)
        self.noise = float(noise)
        self.dropout = float(dropout)
        self.camera = camera or CameraSpec()
        self._sims: Dict[str, Simulator] = {}
        self.last_handle = "lever"   # the simulator of the last scene (its handle type)
        self.view = ""            # sub-kind of the last scene (path kinds: heading and side of the door)
        self.kinds: Dict[str, Callable[[], Simulator]] = {
            "door_lever": lambda: self._door("lever"), "door_knob": lambda: self._door("knob"),
            "door_plain": lambda: self._door("none"), "shelf_high": lambda: self._shelf("reach_shelf"),
            "shelf_low": lambda: self._shelf("reach_shelf_low"),
            "door_open": lambda: self._door("lever", 1.2),
            "path_clear": lambda: self._path(False), "path_crate": lambda: self._path(True)}

    def sim(self, handle: str = "lever") -> Simulator:
        self.last_handle = handle
        if handle not in self._sims:
            self._sims[handle] = Simulator(world={"handle": handle}, camera=self.camera)
        return self._sims[handle]

    def _reset(self, sim: Simulator, door: float = 0.0) -> None:
        sim.remove_object()
        sim.remove_crate()
        sim.set_door_angle(door)

    def _jitter(self, x: float, y: float, yaw: float, scale: float = 1.0) -> Tuple[float, float, float]:
        r = self.rng
        return (x + scale * r.uniform(-0.05, 0.05), y + scale * r.uniform(-0.05, 0.05),
                yaw + scale * r.uniform(-0.06, 0.06))

    def _door(self, handle: str, angle: float = 0.0) -> Simulator:
        sim = self.sim(handle)
        self._reset(sim, angle)
        sim.set_base_pose(*self._jitter(0.0, 0.0, 0.0))
        return sim

    def _shelf(self, pose: str) -> Simulator:
        sim = self.sim()
        self._reset(sim)
        sim.set_base_pose(2.4, 0.0, 0.0)
        sim.place_object("box", in_reach=pose)
        sim.set_base_pose(*self._jitter(2.4, 0.0, 0.0, 0.5))
        return sim

    def _path(self, crate: bool) -> Simulator:
        sim = self.sim()
        self._reset(sim)
        r = self.rng
        back = r.random() < 0.3
        x, y = r.uniform(-4.0, 5.0), r.uniform(-1.0, 1.0)
        yaw = (math.pi if back else 0.0) + r.normal(0.0, 0.3)
        sim.set_base_pose(x, y, yaw)
        self.view = ("back" if back else "fwd") + ("_far" if x > 0.9 else "_near")
        if crate:
            ahead, aside = r.uniform(0.8, 1.3), r.uniform(-0.2, 0.2)
            c, s = math.cos(yaw), math.sin(yaw)
            sim.place_crate(x + c * ahead - s * aside, y + s * ahead + c * aside, r.uniform(0.0, 1.5))
        return sim

    def depth(self, kind: str) -> np.ndarray:
        """A new randomized scene of `kind`: its noisy depth image."""
        self.view = ""
        sim = self.kinds[kind]()
        mujoco.mj_forward(sim.model, sim.data)
        depth, _ = sim.depth_image()
        out = depth.astype(float)
        finite = np.isfinite(out)
        out[finite] += self.rng.normal(0.0, self.noise, size=int(finite.sum()))
        out[self.rng.random(out.shape) < self.dropout] = np.inf
        return out


def dataset(maker: SceneMaker, kinds: Sequence[str], per_kind: int
            ) -> Tuple[List[np.ndarray], np.ndarray, List[str]]:
    """Images, kind labels (index into kinds) and sub-kind names ("path_clear/fwd_far", ...)."""
    images, labels, views = [], [], []
    for k, kind in enumerate(kinds):
        for _ in range(per_kind):
            images.append(maker.depth(kind))
            labels.append(k)
            views.append(f"{kind}/{maker.view}" if maker.view else kind)
    return images, np.array(labels), views


def kmeans(x: np.ndarray, k: int, seed: int = 0, iterations: int = 30) -> np.ndarray:
    """k centres of the rows of x (k-means++ start, Lloyd iterations)."""
    rng = np.random.default_rng(seed)
    centres = [x[rng.integers(len(x))]]
    while len(centres) < k:
        d2 = np.min([np.sum((x - c) ** 2, axis=1) for c in centres], axis=0)
        centres.append(x[rng.choice(len(x), p=d2 / d2.sum())])
    c = np.array(centres)
    for _ in range(iterations):
        assign = np.argmin(((x[:, None, :] - c[None]) ** 2).sum(axis=2), axis=1)
        c = np.array([x[assign == j].mean(axis=0) if np.any(assign == j) else c[j] for j in range(k)])
    return c


def fit_head(pooled: np.ndarray, labels: np.ndarray, reg: float = 1e-2) -> Tuple[np.ndarray, np.ndarray, float]:
    """Whitened linear discriminant of the labelled pooled features: (head, mean, scale). One unit
    is the within-kind spread; each direction is shrunk by lambda / (1 + lambda) of its
    between/within variance ratio lambda, so directions that separate little add little noise."""
    mean = pooled.mean(axis=0)
    x = pooled - mean
    classes = np.unique(labels)
    sw = np.zeros((x.shape[1], x.shape[1]))
    sb = np.zeros_like(sw)
    for c in classes:
        xc = x[labels == c]
        mc = xc.mean(axis=0)
        d = xc - mc
        sw += d.T @ d
        sb += len(xc) * np.outer(mc, mc)
    sw /= len(x)
    sb /= len(x)
    sw += reg * np.trace(sw) / sw.shape[0] * np.eye(sw.shape[0])
    evals, evecs = np.linalg.eigh(sw)
    white = evecs / np.sqrt(evals)                     # sw^-1/2 (columns)
    lam, vec = np.linalg.eigh(white.T @ sb @ white)
    order = np.argsort(lam)[::-1][:FEATURES]
    directions = (white @ vec[:, order]).T             # FEATURES x POOLED
    lam = np.maximum(lam[order], 0.0)
    head = directions * (lam / (1.0 + lam))[:, None]
    return head, mean, 1.0


def fit_and_write(per_kind: int = 500, seed: int = 1, weights_path: Path = DEFAULT_WEIGHTS,
                  prototypes_path: Optional[Path] = None) -> dict:
    maker = SceneMaker(seed)
    conv = seeded_convolutions()
    spec = maker.camera
    arrays: Dict[str, Any] = {"version": VERSION, "max_depth": 4.0, "camera_width": spec.width,
                              "camera_height": spec.height, "camera_hfov": spec.hfov, "camera_pitch": spec.pitch,
                              "camera_mount_z": spec.mount[2], **conv}
    # a provisional file (zero head) to run the convolution stack through the extractor
    weights_path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(weights_path, head=np.zeros((FEATURES, POOLED)), mean=np.zeros(POOLED), scale=1.0, **arrays)
    extractor = DepthFeatureExtractor(weights_path)
    images, labels, views = dataset(maker, KNOWN, per_kind)
    pooled = np.stack([extractor.pooled(im) for im in images])
    names = sorted(set(views))
    head, mean, scale = fit_head(pooled, np.array([names.index(v) for v in views]))
    np.savez(weights_path, head=head, mean=mean, scale=scale, **arrays)
    extractor = DepthFeatureExtractor(weights_path)
    prototypes = {}
    for k, kind in enumerate(KNOWN):
        feats = np.stack([extractor.features(images[i]) for i in np.flatnonzero(labels == k)])
        n = PROTOTYPES_PER_KIND.get(kind, 1)
        centres = feats.mean(axis=0, keepdims=True) if n == 1 else kmeans(feats, n, seed)
        prototypes[kind] = [[round(float(v), 4) for v in c] for c in centres]
    path = prototypes_path or config_dir() / "scene_keys.yaml"
    header = ("# Level-1 scene prototypes: per scene kind, CNN feature vectors (action_router/depth_cnn.py,\n"
              f"# {VERSION}) of randomized simulated scenes. Written by `python -m csr_llm_bringup.sim.scene_keys`;\n"
              "# router_subtasks.yaml `variants` name these kinds. Refit both together.\n")
    path.write_text(header + yaml.safe_dump({"version": VERSION, "scenes": prototypes}, default_flow_style=None,
                                            width=120))
    return {"weights": str(weights_path), "prototypes": str(path), "samples": len(images)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-kind", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print(fit_and_write(args.per_kind, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["CONV_SHAPES", "KNOWN", "UNKNOWN", "SceneMaker", "dataset", "fit_head", "fit_and_write"]
