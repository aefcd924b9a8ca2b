"""Node parameters, one way for every node: a typed dataclass per node, declared with
``declare_dataclass`` (one ROS parameter per field, its value the one default), read-only unless the
node names the field live; ``accept_live_changes`` applies live ones through one callback.

``ros2 param set`` on a read-only parameter is refused by rclpy with a reason; a live parameter is
validated and applied by the node's callback, or refused with the reason it returns.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Collection, Dict, Iterable, Optional

from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult

DYNAMIC = ParameterDescriptor(dynamic_typing=True)
READ_ONLY_HINT = "read-only while the node runs: set it in the parameter file (or -p NAME:=VALUE) and restart"


def _descriptor(name: str, live: bool) -> ParameterDescriptor:
    return ParameterDescriptor(dynamic_typing=True, read_only=not live,
                               description="" if live else f"{name}: {READ_ONLY_HINT}")


def declare_all(node, defaults: Dict[str, Any], *, live: Collection[str] = ()) -> None:
    """Declare every name with its default (overrides from --params-file/-p apply); names not in
    ``live`` are read-only. For parameters whose names are only known at run time (per joint, per zone)."""
    for name, default in defaults.items():
        node.declare_parameter(name, default, _descriptor(name, name in live))


def parameter_values(node, skip: Iterable[str] = ("use_sim_time",)) -> Dict[str, Any]:
    """{name: value} of every declared parameter, except ``skip``."""
    names = node.list_parameters([], 0).names
    skipped = set(skip)
    return {p.name: p.value for p in node.get_parameters([n for n in names if n not in skipped])}


def declare_dataclass(node, defaults, *, prefix: str = "", live: Collection[str] = ()):
    """Declare one parameter per field of the dataclass instance ``defaults`` (its values are the
    defaults) and return a new instance holding the node's values.

    Nested dataclass fields are declared with the same flat names (no prefix) so a node's
    parameters stay the flat list users know; an int given for a float field is accepted. Fields
    whose (prefixed) name is in ``live`` may change at run time; the rest are read-only.
    """
    values = {}
    for f in dataclasses.fields(defaults):
        default = getattr(defaults, f.name)
        if dataclasses.is_dataclass(default):
            values[f.name] = declare_dataclass(node, default, prefix=prefix, live=live)
            continue
        name = prefix + f.name
        value = node.declare_parameter(name, default, _descriptor(name, name in live)).value
        values[f.name] = coerce(name, default, value)
    return dataclasses.replace(defaults, **values)


def coerce(name: str, default: Any, value: Any) -> Any:
    """``value`` in the type of ``default`` (an int where a float is expected becomes a float; an
    int where a string is expected becomes its digits: `cpu_affinity: 1` from YAML or ``-p``), or
    ValueError naming the parameter."""
    if isinstance(value, int) and not isinstance(value, bool):
        if isinstance(default, float):
            return float(value)
        if isinstance(default, str):
            return str(value)
    if isinstance(default, bool) != isinstance(value, bool) or \
            (type(default) is not type(value) and not isinstance(default, (list, tuple))):
        raise ValueError(f"parameter {name}: expected {type(default).__name__}, got {value!r}")
    return value


def accept_live_changes(node, apply: Callable[[Dict[str, Any]], Optional[str]]) -> None:
    """Register ``apply`` for run-time changes of the node's live parameters (call it after every
    declaration: rclpy also runs these callbacks for declarations). ``apply`` gets {name: value} of
    one ``set_parameters`` request and returns None to accept it or a reason to refuse it; read-only
    parameters never reach it (rclpy refuses them first)."""
    def on_set(params) -> SetParametersResult:
        changes = {p.name: p.value for p in params if p.name != "use_sim_time"}
        if not changes:
            return SetParametersResult(successful=True)
        try:
            reason = apply(changes)
        except (TypeError, ValueError) as exc:
            reason = str(exc)
        return SetParametersResult(successful=reason is None, reason=reason or "")

    node.add_on_set_parameters_callback(on_set)
