"""The router node's parameters: declared from ``RouterParams`` and the robot description; the PID
gains ``gains.<joint>.*`` apply while the node runs, as control_toolbox's PidROS does, everything
else is read-only (rclpy refuses a set with the reason in its descriptor)."""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List

from csr_llm_common.ros.params import accept_live_changes, declare_all, declare_dataclass

from .params import (GAIN_PREFIX, RouterParams, description_defaults, flat_parameters, gain_parameters,
                     robot_description, updated_gains)
from .pid import Gains
from .zones import DEFAULT_ZONES, PREFIX as ZONE_PREFIX, zone_parameters


def declare_zones(node) -> None:
    """zones.<zone>.threshold/.goal of the default zones, and of the zones named in ``zone_names``
    beyond them (the nav2 plugin pattern: a list of names, then parameters per name), so a zone
    added in a params file is read and checked. Without a value those stay unset and configure
    names them."""
    declare_all(node, zone_parameters(DEFAULT_ZONES))
    names = [str(n) for n in node.declare_parameter("zone_names", list(DEFAULT_ZONES)).value]
    declare_all(node, {f"{ZONE_PREFIX}{zone}.{key}": None for zone in names if zone not in DEFAULT_ZONES
                       for key in ("threshold", "goal")})


class RouterParameters:
    """Declares every parameter of the router node and applies live gain changes.

    ``values`` are the fixed-name parameters (read-only). Joints, limits, base limits and the
    controller name default to the robot description (read-only); ``gains.<joint>.*`` of every
    joint are live: a change is checked (``params.updated_gains``) and handed to ``on_gains`` with
    the gains of every joint, or refused with the reason."""

    def __init__(self, node, on_gains: Callable[[Dict[str, Gains]], None]):
        self.values: RouterParams = declare_dataclass(node, RouterParams())
        described = description_defaults(robot_description(
            {"robot_description_file": self.values.node.robot_description_file}))
        declare_all(node, {k: v for k, v in described.items() if not k.startswith(GAIN_PREFIX)})
        self.joints: List[str] = [str(j) for j in node.get_parameter("joints").value]
        self._gains: Dict[str, Any] = gain_parameters(self.joints, described, flat_parameters(self.values.motion))
        declare_all(node, self._gains, live=self._gains)
        self._gains = {name: node.get_parameter(name).value for name in self._gains}
        declare_zones(node)
        self._on_gains = on_gains
        self._lock = threading.Lock()
        accept_live_changes(node, self._apply)     # after every declaration

    def _apply(self, changes: Dict[str, Any]) -> None:
        with self._lock:
            gains = updated_gains(self.joints, self._gains, changes)    # ValueError: refused, with why
            self._on_gains(gains)
            self._gains.update(changes)
