"""Plain conversions of ROS message objects (rosidl Python classes), without rclpy."""
from __future__ import annotations

import array
from typing import Any


def message_to_dict(msg: Any) -> Any:
    """A ROS message as nested dicts/lists of plain Python values (field order kept)."""
    if hasattr(msg, "get_fields_and_field_types"):
        return {name: message_to_dict(getattr(msg, name)) for name in msg.get_fields_and_field_types()}
    if isinstance(msg, (list, tuple, array.array)):
        return [message_to_dict(item) for item in msg]
    if hasattr(msg, "tolist"):  # numpy arrays used for fixed-size numeric fields
        return msg.tolist()
    if isinstance(msg, bytes):
        return list(msg)
    return msg
