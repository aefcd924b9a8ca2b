"""rosbag2 helpers over the pure-Python `rosbags` library (stands in for `ros2 bag` here).

The type store is ROS 2 Kilted's standard types plus our csr_llm_msgs, registered from the .msg
files, so bags we write embed our definitions and open in `ros2 bag`/Foxglove elsewhere.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Optional

from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from csr_llm_common.paths import msg_dir

STORAGES = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}


@lru_cache(maxsize=1)
def typestore():
    store = get_typestore(Stores.ROS2_KILTED)
    types = {}
    for path in sorted(msg_dir().glob("*.msg")):
        types.update(get_types_from_msg(path.read_text(), f"csr_llm_msgs/msg/{path.stem}"))
    store.register(types)
    return store


def open_writer(path: Path, storage: str = "mcap") -> Writer:
    if storage not in STORAGES:
        raise ValueError(f"storage must be one of {sorted(STORAGES)}, got {storage!r}")
    writer = Writer(Path(path), version=9, storage_plugin=STORAGES[storage])
    writer.open()
    return writer


def ros_type_name(type_string: str) -> str:
    """'pkg/msg/Type' as rclpy reports it -> the same (rosbags uses that form too)."""
    return type_string if type_string.count("/") == 2 else type_string.replace("/", "/msg/", 1)


def import_message_class(type_string: str) -> Optional[type]:
    """The rosidl Python class for 'pkg/msg/Type', or None if the package is not importable."""
    import importlib
    package, _, name = ros_type_name(type_string).split("/")
    try:
        return getattr(importlib.import_module(f"{package}.msg"), name)
    except (ImportError, AttributeError):
        return None
