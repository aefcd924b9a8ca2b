"""The router's zones: a nested map per zone, read from flat parameters (plain module, no rclpy).

In a params file (or ``make_config({"zones": {...}})``)::

    zones:
      corridor:  {threshold: 0.85, goal: [-2.5, 0.0]}        # level-1 cosine threshold; move_to goal
      warehouse: {threshold: 0.72, goal: [2.27, -0.04, 0.0]} # goal: [x, y] or [x, y, yaw] in odom

ROS 2 flattens it into ``zones.<zone>.threshold`` and ``zones.<zone>.goal`` parameters (the way
``gains.<joint>.p`` are flattened), which is what the router node declares and hands over.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

from .go_to_pose import BaseGoal

PREFIX = "zones."
FIELDS = ("threshold", "goal")

# Consistent with the simulator's world (csr_llm_bringup/sim/robot_model.py DEFAULT_WORLD): door
# is the start pose, where the handle is in the approach_handle reach; warehouse puts the default
# shelf (3.0, -0.3) at the reach_shelf object point; corridor is past the low-friction patch.
DEFAULT_ZONES: Dict[str, Dict[str, Any]] = {
    "corridor": {"threshold": 0.85, "goal": [-2.5, 0.0]},
    "warehouse": {"threshold": 0.72, "goal": [2.27, -0.04, 0.0]},
    "door": {"threshold": 0.80, "goal": [0.0, 0.0, 0.0]},
}


@dataclass(frozen=True)
class Zone:
    name: str
    threshold: float                   # level-1 match threshold in this zone
    goal: Optional[BaseGoal]           # where move_to(zone) drives the base (None: not a goal)


def zone_parameters(zones: Mapping[str, Mapping[str, Any]]) -> Dict[str, Any]:
    """The flat parameters of a nested zone map."""
    return {f"{PREFIX}{zone}.{key}": value for zone, fields in zones.items() for key, value in fields.items()}


def without_zone_parameters(params: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in params.items() if not k.startswith(PREFIX)}


def parse_zones(params: Mapping[str, Any]) -> Dict[str, Zone]:
    """Every ``zones.<zone>.<field>`` parameter into one ``Zone`` per zone; clear errors otherwise."""
    fields: Dict[str, Dict[str, Any]] = {}
    for name, value in params.items():
        if not name.startswith(PREFIX):
            continue
        zone, _, key = name[len(PREFIX):].rpartition(".")
        if not zone or key not in FIELDS:
            raise ValueError(f"parameter {name}: expected zones.<zone>.threshold or zones.<zone>.goal")
        fields.setdefault(zone, {})[key] = value
    if not fields:
        raise ValueError("no zones configured (zones.<zone>.threshold)")
    zones = {}
    for zone, spec in fields.items():
        if spec.get("threshold") is None:
            raise ValueError(f"zone {zone!r} has no threshold (zones.{zone}.threshold)")
        threshold = float(spec["threshold"])
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"zones.{zone}.threshold must be in (0, 1], got {threshold}")
        zones[zone] = Zone(zone, threshold, _goal(zone, spec.get("goal")))
    return zones


def _goal(zone: str, value: Any) -> Optional[BaseGoal]:
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        return None
    try:
        numbers = [float(v) for v in value]
    except (TypeError, ValueError):
        numbers = []
    if len(numbers) not in (2, 3) or not all(math.isfinite(v) for v in numbers):
        raise ValueError(f"zones.{zone}.goal must be [x, y] or [x, y, yaw] (m, m, rad), got {value!r}")
    return BaseGoal(numbers[0], numbers[1], numbers[2] if len(numbers) == 3 else None)
