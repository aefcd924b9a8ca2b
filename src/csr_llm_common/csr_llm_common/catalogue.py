"""Intent catalogue: what a decision may say, loaded from config/intents.yaml.

The catalogue is the contract between the reasoning node (which may only emit these intents, with
well-typed arguments) and the action router (which executes them). Argument types: float and int
(with min/max, optional unit), string (with a required enum), bool. An intent with
`pauses_task: true` (stop, hold_position, back_off) pauses the task it displaces: the router keeps
that task and reports it as paused (PausedTask) until a decision runs a task again.
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


class DecisionError(ValueError):
    """A decision the catalogue refuses; ``kind`` says why (one of DECISION_ERROR_KINDS)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


DECISION_ERROR_KINDS = ("unknown_intent", "unknown_argument", "missing_argument", "bad_argument")


@dataclass(frozen=True)
class ArgumentSpec:
    name: str
    type: str
    minimum: Optional[float] = None
    maximum: Optional[float] = None
    enum: Tuple[str, ...] = ()
    unit: str = ""

    def check(self, value: Any) -> Any:
        """The value, typed (an int is accepted for a float), or DecisionError: never clamped."""
        if self.type == "bool":
            if isinstance(value, bool):
                return value
            raise DecisionError("bad_argument", f"argument {self.name}: expected true|false, got {_short(value)}")
        if self.type == "string":
            if isinstance(value, str) and value in self.enum:
                return value
            raise DecisionError("bad_argument",
                                f"argument {self.name}: {_short(value)} is not one of {list(self.enum)}")
        integral = isinstance(value, int) or (isinstance(value, float) and self.type == "float")
        if isinstance(value, bool) or not integral or not math.isfinite(value):
            raise DecisionError("bad_argument", f"argument {self.name}: expected a finite {self.type}, "
                                                f"got {_short(value)}")
        low, high = self._bounds()
        if not (low <= value <= high):
            raise DecisionError("bad_argument", f"argument {self.name}: {value!r} is outside "
                                                f"{low:g}..{high:g}{self.unit and ' ' + self.unit}")
        return float(value) if self.type == "float" else int(value)

    def clamp(self, value: float) -> Any:
        """Bring a number the decoder generated into range (the grammar bounds its digits, not its value)."""
        low, high = self._bounds()
        number = min(max(float(value), low), high)
        return int(round(number)) if self.type == "int" else number

    def _bounds(self) -> Tuple[float, float]:
        return (-math.inf if self.minimum is None else self.minimum,
                math.inf if self.maximum is None else self.maximum)


@dataclass(frozen=True)
class IntentSpec:
    name: str
    description: str
    arguments: Tuple[ArgumentSpec, ...] = ()
    pauses_task: bool = False      # displacing a task with this intent pauses it (router status)

    def argument(self, name: str) -> ArgumentSpec:
        for spec in self.arguments:
            if spec.name == name:
                return spec
        raise KeyError(name)


@dataclass(frozen=True)
class ParsedDecision:
    intent: str
    arguments: Dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PausedTask:
    """A task a pausing intent displaced before it finished, with the arguments it was decided with."""
    intent: str
    arguments: Dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """As the decision prompt shows it, e.g. "move_to zone=warehouse speed=0.3"."""
        values = [f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}"
                  for name, value in self.arguments.items()]
        return " ".join([self.intent] + values)


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
            pauses = body.get("pauses_task", False)
            if not isinstance(pauses, bool):
                raise CatalogueError(f"intent {name}: pauses_task must be true or false, got {pauses!r}")
            intents.append(IntentSpec(name, str(body.get("description", "")).strip(), tuple(arguments), pauses))
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

    def validate(self, intent: Any, arguments: Mapping[str, Any]) -> ParsedDecision:
        """The one decision policy of the suite (reasoning node and router alike).

        Refused, with DecisionError: an intent not in the catalogue, an argument it does not
        declare, a declared argument missing, a value of the wrong type, NaN/inf, a number outside
        its min..max. Nothing is clamped or defaulted here: a refused decision leaves what runs
        unchanged, so a malformed or hostile message can never become motion.
        """
        if not isinstance(intent, str) or intent not in self.intents:
            raise DecisionError("unknown_intent", f"unknown intent {_short(intent)}")
        spec = self.intents[intent]
        unknown = [name for name in arguments if name not in {a.name for a in spec.arguments}]
        if unknown:
            names = [_short(n) for n in sorted(map(str, unknown))]
            raise DecisionError("unknown_argument", f"intent {intent}: unknown argument(s) {names}")
        values = {}
        for arg in spec.arguments:
            if arg.name not in arguments:
                raise DecisionError("missing_argument", f"intent {intent}: missing argument {arg.name}")
            try:
                values[arg.name] = arg.check(arguments[arg.name])
            except DecisionError as err:
                raise DecisionError(err.kind, f"intent {intent}: {err}") from None
        return ParsedDecision(intent, values)

    def paused_after(self, running: Optional[PausedTask], paused: Optional[PausedTask],
                     intent: str) -> Optional[PausedTask]:
        """What is paused once a decision of `intent` replaces `running` (an unfinished task or None).

        A task decision clears it; a pausing one (stop after back_off, or nothing was running)
        keeps it, or pauses the task it displaces."""
        if not self.intents[intent].pauses_task:
            return None
        if running is not None and running.intent in self.intents and not self.intents[running.intent].pauses_task:
            return running
        return paused

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


def _short(value: Any, limit: int = 60) -> str:
    """repr() bounded in length: refused input is quoted in logs, never copied whole."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"...({len(text)} chars)"


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
