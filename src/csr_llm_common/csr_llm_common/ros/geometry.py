"""Geometry helpers on message fields (no rclpy)."""
from __future__ import annotations

import math


def yaw_from_quaternion(q) -> float:
    """Heading about +z of a quaternion with fields x, y, z, w (REP 103, radians in [-pi, pi])."""
    return math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))
