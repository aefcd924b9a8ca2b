"""The robot description (config/robot_description.yaml): one file for joints, limits and gains.

The router and the simulator both read it, so a joint renamed or a limit changed cannot leave
the two disagreeing. Plain module, no rclpy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Tuple, Union

import yaml

LIMIT_KEYS = ("position_min", "position_max", "velocity_max", "effort_max")
GAIN_DEFAULTS: Dict[str, Any] = {"p": 50.0, "i": 0.0, "d": 2.0, "i_clamp_max": 5.0, "i_clamp_min": -5.0,
                                 "antiwindup_strategy": "conditional_integration"}


class RobotDescriptionError(ValueError):
    """The robot description file is missing or malformed."""


@dataclass(frozen=True)
class JointDescription:
    name: str
    position_min: float
    position_max: float
    velocity_max: float
    effort_max: float
    gains: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RobotDescription:
    joints: Tuple[JointDescription, ...]
    base_max_linear: float = 0.5
    base_max_angular: float = 1.0
    controller_name: str = "arm_controller"

    @property
    def joint_names(self) -> List[str]:
        return [j.name for j in self.joints]

    def limits(self) -> Dict[str, List[float]]:
        """{position_min|position_max|velocity_max|effort_max: one value per joint, in joint order}."""
        return {key: [float(getattr(j, key)) for j in self.joints] for key in LIMIT_KEYS}

    def gain_parameters(self) -> Dict[str, Any]:
        """Flat ros2_control parameter names: gains.<joint>.<p|i|d|...>."""
        return {f"gains.{j.name}.{k}": v for j in self.joints for k, v in j.gains.items()}


def robot_description_from_mapping(data: Any, where: str = "robot description") -> RobotDescription:
    if not isinstance(data, Mapping) or not isinstance(data.get("joints"), Mapping) or not data["joints"]:
        raise RobotDescriptionError(f"{where}: expected 'joints: {{name: {{position_min, position_max, "
                                    f"velocity_max, effort_max, gains}}}}'")
    joints = []
    for name, spec in data["joints"].items():
        spec = spec or {}
        try:
            values = {key: float(spec[key]) for key in LIMIT_KEYS}
        except (KeyError, TypeError, ValueError) as err:
            raise RobotDescriptionError(f"{where}: joint {name} needs numeric {', '.join(LIMIT_KEYS)}") from err
        if not all(math.isfinite(v) for v in values.values()) or values["position_min"] >= values["position_max"] \
                or values["velocity_max"] <= 0 or values["effort_max"] <= 0:
            raise RobotDescriptionError(f"{where}: joint {name}: need position_min < position_max and "
                                        f"velocity_max, effort_max > 0 (all finite)")
        gains = dict(GAIN_DEFAULTS)
        gains.update(spec.get("gains") or {})
        joints.append(JointDescription(str(name), gains=gains, **values))
    base = data.get("base") or {}
    return RobotDescription(tuple(joints), float(base.get("max_linear", 0.5)), float(base.get("max_angular", 1.0)),
                            str(data.get("controller_name", "arm_controller")))


def load_robot_description(path: Union[str, Path]) -> RobotDescription:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise RobotDescriptionError(f"cannot read robot description {path}: {err}") from err
    return robot_description_from_mapping(data, str(path))
