"""csr_llm_msgs/IntentArgument lists <-> {name: value} dicts (no rclpy).

An argument of an unknown wire type decodes to None, which the catalogue then refuses
(bad_argument): the conversion never guesses.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping

from csr_llm_msgs.msg import IntentArgument


def arguments_to_dict(arguments) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for a in arguments:
        if a.type == IntentArgument.TYPE_FLOAT:
            out[a.name] = float(a.float_value)
        elif a.type == IntentArgument.TYPE_INT:
            out[a.name] = int(a.int_value)
        elif a.type == IntentArgument.TYPE_STRING:
            out[a.name] = str(a.string_value)
        elif a.type == IntentArgument.TYPE_BOOL:
            out[a.name] = bool(a.bool_value)
        else:
            out[a.name] = None
    return out


def dict_to_arguments(values: Mapping[str, Any]) -> List[IntentArgument]:
    out = []
    for name, value in values.items():
        arg = IntentArgument(name=str(name))
        if isinstance(value, bool):       # before int: bool is an int subclass
            arg.type, arg.bool_value = IntentArgument.TYPE_BOOL, value
        elif isinstance(value, int):
            arg.type, arg.int_value = IntentArgument.TYPE_INT, value
        elif isinstance(value, float):
            arg.type, arg.float_value = IntentArgument.TYPE_FLOAT, value
        elif isinstance(value, str):
            arg.type, arg.string_value = IntentArgument.TYPE_STRING, value
        else:
            raise TypeError(f"argument {name}: no IntentArgument type for {type(value).__name__}")
        out.append(arg)
    return out
