"""A depth camera without a renderer: a pinhole grid of rays cast with ``mujoco.mj_multiRay``
(plain module: MuJoCo + numpy, no rclpy, no OpenGL).

Every pixel is one ray from the optical centre; ``capture`` returns, per pixel, the depth along the
optical axis (z-depth, as REP 118 depth images and ``sensor_msgs/Image`` 32FC1 carry it: a wall
perpendicular to the axis has one depth everywhere) and the id of the geom hit. A ray that hits
nothing within ``max_range`` reads +inf (REP 118: "too far"). Only the geom groups in
``geomgroups`` are seen: the simulator puts the robot's own geoms in ``ROBOT_GEOM_GROUP`` so the
camera sees the world, not its arm. mj_multiRay culls a whole body when the ray misses the bounding
volume of that body's collision geoms, so a visual-only geom must not share a body with a smaller
collision geom (robot_model.py keeps collision geoms in their own bodies; a test compares every
pixel with ``mj_ray``, which does not cull).

Camera frame: x forward along the optical axis in the body, the image's u to the right and v down
(the ROS optical convention z-forward/x-right/y-down is what ``CameraInfo`` describes; the
intrinsics below are that convention's fx, fy, cx, cy).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import mujoco
import numpy as np
import numpy.typing as npt

ROBOT_GEOM_GROUP = 3       # geoms of the robot itself (invisible to its own camera)


@dataclass(frozen=True)
class CameraSpec:
    width: int = 64
    height: int = 48
    hfov: float = math.radians(70.0)       # horizontal field of view
    max_range: float = 5.0                  # m; farther (or nothing) reads +inf
    mount: Tuple[float, float, float] = (0.20, 0.0, 1.10)   # optical centre in the base frame (a head mast)
    pitch: float = math.radians(35.0)       # tilt down from horizontal

    @property
    def focal(self) -> float:
        """Focal length in pixels (square pixels)."""
        return 0.5 * self.width / math.tan(0.5 * self.hfov)

    def intrinsics(self) -> Tuple[float, float, float, float]:
        """fx, fy, cx, cy (pixel centres at integer + 0.5)."""
        f = self.focal
        return f, f, 0.5 * self.width, 0.5 * self.height


class DepthCamera:
    """Casts ``width * height`` rays per capture into preallocated buffers."""

    def __init__(self, model: mujoco.MjModel, spec: Optional[CameraSpec] = None,
                 geomgroups: Sequence[int] = (0, 1, 2)):
        self.model = model
        self.spec = spec = spec or CameraSpec()
        fx, fy, cx, cy = spec.intrinsics()
        u = (np.arange(spec.width) + 0.5 - cx) / fx
        v = (np.arange(spec.height) + 0.5 - cy) / fy
        uu, vv = np.meshgrid(u, v)
        # camera-frame ray directions (x forward, y left, z up), unit length; cos to the optical axis
        dirs = np.stack([np.ones_like(uu), -uu, -vv], axis=-1).reshape(-1, 3)
        norms = np.linalg.norm(dirs, axis=1, keepdims=True)
        self._dirs_cam = dirs / norms
        self._axis_cos = (1.0 / norms[:, 0]).reshape(spec.height, spec.width)
        self.nray = spec.width * spec.height
        self._vec = np.zeros(3 * self.nray)
        self._dist = np.zeros(self.nray)
        self._geomid = np.zeros(self.nray, dtype=np.int32)
        self._group = np.zeros(6, dtype=np.uint8)
        for g in geomgroups:
            self._group[int(g)] = 1
        self.depth = np.zeros((spec.height, spec.width), dtype=np.float32)
        self.geom = np.zeros((spec.height, spec.width), dtype=np.int32)

    def capture(self, data: mujoco.MjData, position: npt.ArrayLike, rotation: npt.ArrayLike
                ) -> Tuple[np.ndarray, np.ndarray]:
        """Depth image (float32, m, +inf = no return) and geom ids (-1 = none) seen from a camera
        at world ``position`` whose body axes (x forward, y left, z up) are ``rotation``'s columns."""
        pnt = np.asarray(position, dtype=float)
        np.matmul(self._dirs_cam, np.asarray(rotation, dtype=float).T, out=self._vec.reshape(-1, 3))
        mujoco.mj_multiRay(self.model, data, pnt, self._vec, self._group, 1, -1, self._geomid, self._dist,
                           None, self.nray, self.spec.max_range)
        dist = self._dist.reshape(self.spec.height, self.spec.width)
        # mj_multiRay's cutoff culls by bounding volume, not by hit distance: cut at max_range here
        hit = (dist >= 0.0) & (dist <= self.spec.max_range)
        np.multiply(dist, self._axis_cos, out=self.depth, where=hit, casting="unsafe")
        self.depth[~hit] = np.inf
        self.geom[:] = np.where(hit, self._geomid.reshape(self.spec.height, self.spec.width), -1)
        return self.depth, self.geom


def mount_pose(spec: CameraSpec, base_pose: Sequence[float]) -> Tuple[np.ndarray, np.ndarray]:
    """World position and rotation of the camera on a planar base at (x, y, yaw)."""
    x, y, yaw = (float(v) for v in base_pose)
    c, s = math.cos(yaw), math.sin(yaw)
    mx, my, mz = spec.mount
    position = np.array([x + c * mx - s * my, y + s * mx + c * my, mz])
    cp, sp = math.cos(spec.pitch), math.sin(spec.pitch)
    yaw_rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    pitch_rot = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])   # about y: x tilts down
    return position, yaw_rot @ pitch_rot
