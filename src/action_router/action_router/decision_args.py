"""A decision's arguments -> the sub-task fields they set, or a refusal (plain module, no rclpy).

``argument_bindings`` maps each argument onto a field (``params.ARGUMENT_FIELDS``). Numbers pass
through; ``base_goal`` keeps the zone name (its goal is looked up per tick); ``reach_object`` is
resolved against the scene now: the decision then runs that reach target's sequence, or is refused
(object missing, out of reach) and what runs stays unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from .scene import ReachTarget, Scene, SceneFrames, choose_reach
from .zones import Zone


@dataclass(frozen=True)
class ResolvedArguments:
    fields: Dict[str, Any] = field(default_factory=dict)   # frame args (compared to confirm a running task)
    subtasks: Optional[Tuple[str, ...]] = None             # the reach target's sequence, else the intent's
    refusal: str = ""                                       # non-empty: refused, why


def bound_fields(arguments: Mapping[str, Any], binding: Mapping[str, str]) -> Dict[str, Any]:
    """{field: value} of the bound arguments present (what a running task's frame holds)."""
    return {target_field: arguments[name] for name, target_field in binding.items() if name in arguments}


def resolve_arguments(arguments: Mapping[str, Any], binding: Mapping[str, str], *, zones: Mapping[str, Zone],
                      scene: Scene, now: float, targets: Sequence[ReachTarget], frames: SceneFrames,
                      odom_pose: Sequence[float]) -> ResolvedArguments:
    subtasks = None
    fields = bound_fields(arguments, binding)
    for target_field, value in fields.items():
        if target_field == "base_goal":
            zone = zones.get(str(value))
            if zone is None or zone.goal is None:
                return ResolvedArguments(refusal=f"zone {value} has no goal pose")
        elif target_field == "reach_object":
            choice = choose_reach(str(value), scene, now, targets, frames, odom_pose)
            if choice.target is None:
                return ResolvedArguments(refusal=choice.refusal)
            subtasks = choice.target.subtasks
    return ResolvedArguments(fields, subtasks)
