"""The scene (detected objects) and which reach grips a named object (plain module, no rclpy).

The scene comes from a perception topic (``detected_objects``: names and poses in the base or the
odometry frame). A decision that names an object (an argument bound to ``reach_object``) is
accepted only if the object is in a fresh scene and within the tolerance of a reach target: the
object point, in the base frame, a reach sequence grips (``reach_targets`` in
config/router_subtasks.yaml). The nearest such target is chosen; otherwise the decision is refused
with a reason that goes out as a decision request. No blind reach.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple


@dataclass(frozen=True)
class SceneObject:
    name: str
    position: Tuple[float, float, float]     # in the scene's frame [m]


@dataclass(frozen=True)
class Scene:
    time: float                               # receive time (router clock); -inf: never
    frame: str                                # header.frame_id of the detections
    objects: Tuple[SceneObject, ...]


EMPTY_SCENE = Scene(-math.inf, "", ())


@dataclass(frozen=True)
class ReachTarget:
    name: str
    object_at: Tuple[float, float, float]     # object centre the sequence grips, base frame [m]
    tolerance: float                          # m
    subtasks: Tuple[str, ...]                 # the sequence that reaches, grips and lifts it


@dataclass(frozen=True)
class ReachChoice:
    target: Optional[ReachTarget]             # None: refused
    refusal: str = ""                         # why (the decision request text)


@dataclass(frozen=True)
class SceneFrames:
    base: str                                 # detections here are used as they are
    odom: str                                 # detections here are moved into the base frame by odometry
    timeout_s: float                          # older detections count as no scene


def to_base_frame(position: Sequence[float], frame: str, frames: SceneFrames,
                  odom_pose: Sequence[float]) -> Optional[Tuple[float, float, float]]:
    """The position in the base frame, or None for a frame the router cannot place."""
    x, y, z = (float(v) for v in position)
    if frame == frames.base:
        return x, y, z
    if frame == frames.odom:
        bx, by, yaw = (float(v) for v in odom_pose[:3])
        c, s = math.cos(yaw), math.sin(yaw)
        dx, dy = x - bx, y - by
        return c * dx + s * dy, -s * dx + c * dy, z
    return None


def choose_reach(name: str, scene: Scene, now: float, targets: Sequence[ReachTarget], frames: SceneFrames,
                 odom_pose: Sequence[float]) -> ReachChoice:
    """The reach target for object ``name``: the nearest one within its tolerance, or a refusal."""
    age = now - scene.time
    if age > frames.timeout_s:
        detail = "no detections yet" if not math.isfinite(age) else f"no detections for over {frames.timeout_s:g} s"
        return ReachChoice(None, f"object {name} not in the scene ({detail})")
    found = [o for o in scene.objects if o.name == name]
    if not found:
        seen = ", ".join(sorted({o.name for o in scene.objects})) or "nothing"
        return ReachChoice(None, f"object {name} not in the scene (seen: {seen})")
    best: Optional[Tuple[float, ReachTarget, Tuple[float, float, float]]] = None
    for obj in found:
        point = to_base_frame(obj.position, scene.frame, frames, odom_pose)
        if point is None:
            return ReachChoice(None, f"object {name} seen in frame {scene.frame!r}, not {frames.base!r} or "
                                     f"{frames.odom!r}")
        for target in targets:
            distance = math.dist(point, target.object_at)
            if best is None or distance < best[0]:
                best = (distance, target, point)
    if best is None:
        return ReachChoice(None, f"object {name}: no reach targets configured")
    distance, target, point = best
    if distance > target.tolerance:
        where = ", ".join(f"{v:.2f}" for v in point)
        return ReachChoice(None, f"object {name} out of reach at ({where}) m in {frames.base} "
                                 f"({distance:.2f} m from reach {target.name}, tolerance {target.tolerance:g} m)")
    return ReachChoice(target)
