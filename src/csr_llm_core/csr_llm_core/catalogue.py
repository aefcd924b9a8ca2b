"""Intent catalogue: what a decision may say, loaded from config/intents.yaml.

The catalogue is the contract between the reasoning node (which may only emit these intents, with
well-typed arguments) and the action router (which executes them). Argument types: float and int
(with min/max, optional unit), string (with a required enum), bool.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import yaml

ARG_TYPES = ("float", "int", "string", "bool")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class CatalogueError(ValueError):
    """The intent catalogue file is malformed."""


@dataclass(frozen=True)
class ArgumentSpec:
    name: str
    type: str
    minimum: Optional[float] = None
    maximum: Optional[float] = None
    enum: Tuple[str, ...] = ()
    unit: str = ""

    def coerce(self, value: Any) -> Any:
        """A well-typed, in-range value (numbers clamped), or ValueError."""
        if self.type == "bool":
            if isinstance(value, bool):
                return value
            raise ValueError(f"argument {self.name}: expected bool, got {value!r}")
        if self.type == "string":
            if value in self.enum:
                return value
            raise ValueError(f"argument {self.name}: {value!r} is not one of {list(self.enum)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"argument {self.name}: expected a finite {self.type}, got {value!r}")
        number = float(value)
        if self.minimum is not None:
            number = max(number, self.minimum)
        if self.maximum is not None:
            number = min(number, self.maximum)
        return int(round(number)) if self.type == "int" else number


@dataclass(frozen=True)
class IntentSpec:
    name: str
    description: str
    arguments: Tuple[ArgumentSpec, ...] = ()

    def argument(self, name: str) -> ArgumentSpec:
        for spec in self.arguments:
            if spec.name == name:
                return spec
        raise KeyError(name)


@dataclass(frozen=True)
class ParsedDecision:
    intent: str
    arguments: Dict[str, Any] = field(default_factory=dict)


class IntentCatalogue:
    def __init__(self, intents: Sequence[IntentSpec]):
        if not intents:
            raise CatalogueError("the intent catalogue is empty")
        self.intents: Dict[str, IntentSpec] = {}
        for intent in intents:
            if intent.name in self.intents:
                raise CatalogueError(f"intent {intent.name!r} is defined twice")
            self.intents[intent.name] = intent

    @property
    def names(self) -> List[str]:
        return list(self.intents)

    def __contains__(self, name: str) -> bool:
        return name in self.intents

    def __getitem__(self, name: str) -> IntentSpec:
        return self.intents[name]

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "IntentCatalogue":
        raw = data.get("intents") if isinstance(data, Mapping) else None
        if not isinstance(raw, Mapping):
            raise CatalogueError("expected a mapping 'intents: {name: {description, arguments}}'")
        intents = []
        for name, body in raw.items():
            if not isinstance(name, str) or not _NAME.match(name):
                raise CatalogueError(f"intent name {name!r} must match {_NAME.pattern}")
            body = body or {}
            arguments = []
            for arg_name, spec in (body.get("arguments") or {}).items():
                arguments.append(_argument_spec(name, arg_name, spec or {}))
            intents.append(IntentSpec(name, str(body.get("description", "")).strip(), tuple(arguments)))
        return cls(intents)

    @classmethod
    def from_file(cls, path: Union[str, Path]) -> "IntentCatalogue":
        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as err:
            raise CatalogueError(f"cannot read intent catalogue {path}: {err}") from err
        try:
            return cls.from_mapping(data)
        except CatalogueError as err:
            raise CatalogueError(f"{path}: {err}") from err

    def validate(self, intent: str, arguments: Mapping[str, Any]) -> ParsedDecision:
        """Check a decision against the catalogue; numbers are clamped into range."""
        if intent not in self.intents:
            raise ValueError(f"unknown intent {intent!r}")
        spec = self.intents[intent]
        unknown = set(arguments) - {a.name for a in spec.arguments}
        if unknown:
            raise ValueError(f"intent {intent}: unknown argument(s) {sorted(unknown)}")
        values = {}
        for arg in spec.arguments:
            if arg.name not in arguments:
                raise ValueError(f"intent {intent}: missing argument {arg.name}")
            values[arg.name] = arg.coerce(arguments[arg.name])
        return ParsedDecision(intent, values)

    def describe(self) -> str:
        """The catalogue as prompt text (part of the static head)."""
        lines = []
        for intent in self.intents.values():
            args = []
            for arg in intent.arguments:
                if arg.type == "string":
                    args.append(f"{arg.name}: one of {'|'.join(arg.enum)}")
                elif arg.type in ("float", "int"):
                    unit = f" {arg.unit}" if arg.unit else ""
                    args.append(f"{arg.name}: {arg.type} {arg.minimum:g}..{arg.maximum:g}{unit}")
                else:
                    args.append(f"{arg.name}: true|false")
            signature = f"({', '.join(args)})" if args else "()"
            lines.append(f"- {intent.name}{signature}: {intent.description}")
        return "\n".join(lines)


def _argument_spec(intent: str, name: str, spec: Mapping[str, Any]) -> ArgumentSpec:
    where = f"intent {intent}, argument {name}"
    if not _NAME.match(str(name)):
        raise CatalogueError(f"{where}: name must match {_NAME.pattern}")
    kind = spec.get("type")
    if kind not in ARG_TYPES:
        raise CatalogueError(f"{where}: type must be one of {ARG_TYPES}, got {kind!r}")
    if kind == "string":
        enum = spec.get("enum")
        if not enum or not all(isinstance(v, str) and v and '"' not in v and "\\" not in v for v in enum):
            raise CatalogueError(f"{where}: a string argument needs a non-empty 'enum' of plain strings")
        return ArgumentSpec(name, kind, enum=tuple(enum))
    if kind in ("float", "int"):
        try:
            low, high = float(spec["min"]), float(spec["max"])
        except (KeyError, TypeError, ValueError) as err:
            raise CatalogueError(f"{where}: numeric arguments need numeric 'min' and 'max'") from err
        if not (math.isfinite(low) and math.isfinite(high) and low <= high):
            raise CatalogueError(f"{where}: need finite min <= max")
        return ArgumentSpec(name, kind, minimum=low, maximum=high, unit=str(spec.get("unit", "")))
    return ArgumentSpec(name, kind)
