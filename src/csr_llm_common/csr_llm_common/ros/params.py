"""Node parameters as plain values, through rclpy's public API (never the private ``_parameters``)."""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterable

from rcl_interfaces.msg import ParameterDescriptor

DYNAMIC = ParameterDescriptor(dynamic_typing=True)


def declare_all(node, defaults: Dict[str, Any], *, dynamic: bool = True) -> None:
    """Declare every name with its default (overrides from --params-file/-p apply)."""
    for name, default in defaults.items():
        if dynamic:
            node.declare_parameter(name, default, DYNAMIC)
        else:
            node.declare_parameter(name, default)


def parameter_values(node, skip: Iterable[str] = ("use_sim_time",)) -> Dict[str, Any]:
    """{name: value} of every declared parameter, except ``skip``."""
    names = node.list_parameters([], 0).names
    skipped = set(skip)
    return {p.name: p.value for p in node.get_parameters([n for n in names if n not in skipped])}


def declare_dataclass(node, defaults, *, prefix: str = ""):
    """Declare one parameter per field of the dataclass instance ``defaults`` (its values are the
    defaults) and return a new instance holding the node's values.

    Nested dataclass fields are declared with the same flat names (no prefix) so a node's
    parameters stay the flat list users know; an int given for a float field is accepted.
    """
    values = {}
    for f in dataclasses.fields(defaults):
        default = getattr(defaults, f.name)
        if dataclasses.is_dataclass(default):
            values[f.name] = declare_dataclass(node, default, prefix=prefix)
            continue
        value = node.declare_parameter(prefix + f.name, default, DYNAMIC).value
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        elif isinstance(default, bool) != isinstance(value, bool) or \
                (type(default) is not type(value) and not isinstance(default, (list, tuple))):
            raise ValueError(f"parameter {prefix + f.name}: expected {type(default).__name__}, got {value!r}")
        values[f.name] = value
    return dataclasses.replace(defaults, **values)
