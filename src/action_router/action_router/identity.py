"""A robot's identity for the robot-ID block of its task keys (plain module, no rclpy).

The seed hashes the robot's MAC address into the last 8 key dims. ``robot_id`` (a router
parameter) overrides it; left empty, the identity is this machine's (``/etc/machine-id``, else
the MAC address ``uuid.getnode()`` reports) joined with the node's namespace, so two robots
simulated on one machine in two namespaces differ, and no two machines share a literal default.
"""
from __future__ import annotations

import uuid
from pathlib import Path


def machine_identity() -> str:
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            text = Path(path).read_text(encoding="ascii").strip()
        except OSError:
            continue
        if text:
            return f"machine:{text}"
    return f"mac:{uuid.getnode():012x}"


def robot_identity(robot_id: str, namespace: str = "") -> str:
    """The configured ID, else machine identity + namespace."""
    if robot_id:
        return robot_id
    ns = namespace.strip("/")
    return machine_identity() + (f"/{ns}" if ns else "")
