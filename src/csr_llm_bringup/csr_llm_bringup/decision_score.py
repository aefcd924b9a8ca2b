"""Decision scoring against a scenario's expectations (plain module, no rclpy).

A scenario event may say which decisions are sensible from its firing on (``expect:``, see
sim/scenario.py). Each fired event with an expectation opens a *window* that lasts until the next
expectation fires (``expect: none`` closes scoring) or the scenario ends. A decision stamped at
sim time ``t`` belongs to the window of the latest expectation fired strictly before ``t`` (a
decision stamped at the event's own time cannot have seen it) and is

* ``match``     its intent is in the window's set and its arguments meet the constraints,
* ``mismatch``  otherwise,
* ``unscored``  outside every window (before the first expectation, after ``none``, after the end).

``decision_accuracy_all`` = matches / (matches + mismatches); ``decision_accuracy`` counts only
the reasoning windows (an event's ``decides:``). ``reaction_s`` per window = sim time from the
event to the first matching decision in the window; a window never matched counts as its full
length and is listed in ``unmatched``. ``task_success`` = every scenario goal reached (None when
the scenario has none). The robot-level figures (task_success_rate, safety_violations,
order_to_motion_s) are robot_score.py's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from csr_llm_common.stats import percentile, round_or_none

from .robot_score import REASONING, RobotOutcome, robot_summary

MATCH, MISMATCH, UNSCORED = "match", "mismatch", "unscored"
EXPECT_NONE = "none"
_EXPECT_KEYS = {"intents", "args"}


class ExpectationError(ValueError):
    """An `expect:` entry that cannot be understood (the message says which part and why)."""


@dataclass(frozen=True)
class ArgumentConstraint:
    """`<intent>.<argument>` must be one of `values` or, for numbers, inside minimum..maximum."""
    intent: str
    argument: str
    values: Tuple[Any, ...] = ()
    minimum: Optional[float] = None
    maximum: Optional[float] = None

    @property
    def key(self) -> str:
        return f"{self.intent}.{self.argument}"

    def accepts(self, value: Any) -> bool:
        if self.values:
            return any(value == v and type(value) is type(v) or _same_number(value, v) for v in self.values)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        return ((self.minimum is None or value >= self.minimum - 1e-9)
                and (self.maximum is None or value <= self.maximum + 1e-9))

    def to_json(self) -> Any:
        if self.values:
            return list(self.values)
        out = {}
        if self.minimum is not None:
            out["min"] = self.minimum
        if self.maximum is not None:
            out["max"] = self.maximum
        return out

    def describe(self) -> str:
        if self.values:
            return f"{self.argument}={'|'.join(str(v) for v in self.values)}"
        low = "" if self.minimum is None else f"{self.minimum:g}"
        high = "" if self.maximum is None else f"{self.maximum:g}"
        return f"{self.argument} in {low}..{high}"


def _same_number(a: Any, b: Any) -> bool:
    numbers = (int, float)
    return (isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool)
            and not isinstance(b, bool) and float(a) == float(b))


@dataclass(frozen=True)
class Expectation:
    """The acceptable decisions of one window: any of `intents`, meeting every constraint on it."""
    intents: Tuple[str, ...]
    constraints: Tuple[ArgumentConstraint, ...] = ()

    def matches(self, intent: str, arguments: Mapping[str, Any]) -> bool:
        if intent not in self.intents:
            return False
        for c in self.constraints:
            if c.intent == intent and (c.argument not in arguments or not c.accepts(arguments[c.argument])):
                return False
        return True

    def to_json(self) -> Dict[str, Any]:
        return {"intents": list(self.intents), "args": {c.key: c.to_json() for c in self.constraints}}

    def describe(self) -> str:
        parts = []
        for intent in self.intents:
            mine = [c.describe() for c in self.constraints if c.intent == intent]
            parts.append(f"{intent}({', '.join(mine)})" if mine else intent)
        return " | ".join(parts)


def parse_expectation(raw: Any, catalogue: Any = None) -> Optional[Expectation]:
    """An `expect:` value -> Expectation, or None for ``none`` (scoring ends).

    Accepted: ``none``; an intent name; a list of intent names; or a mapping
    ``{intents: [names], args: {intent.argument: value | [values] | {min, max}}}``.
    With a catalogue (csr_llm_common.catalogue.IntentCatalogue), intent names, argument names and
    values are checked against it. Also reads the JSON form written by Expectation.to_json().
    """
    if raw is None:
        raise ExpectationError("empty; write `none` to end scoring, or the acceptable intents")
    if isinstance(raw, str) and raw.strip().lower() == EXPECT_NONE:
        return None
    if isinstance(raw, (str, list, tuple)):
        intents_raw: Any = [raw] if isinstance(raw, str) else list(raw)
        args_raw: Any = {}
    elif isinstance(raw, Mapping):
        unknown = set(raw) - _EXPECT_KEYS
        if unknown:
            raise ExpectationError(f"unknown keys {sorted(map(str, unknown))} (known: intents, args)")
        if "intents" not in raw:
            raise ExpectationError("a mapping needs `intents: [names]`")
        intents_raw = raw["intents"]
        if isinstance(intents_raw, str):
            intents_raw = [intents_raw]
        args_raw = raw.get("args") or {}
    else:
        raise ExpectationError(f"expected `none`, an intent, a list of intents or {{intents, args}}, got {raw!r}")
    if not isinstance(intents_raw, list) or not intents_raw:
        raise ExpectationError("`intents` must be a non-empty list of intent names")
    intents: List[str] = []
    for name in intents_raw:
        if not isinstance(name, str):
            raise ExpectationError(f"intent names are strings, got {name!r}")
        if catalogue is not None and name not in catalogue:
            raise ExpectationError(f"unknown intent {name!r} (catalogue: {', '.join(catalogue.names)})")
        if name not in intents:
            intents.append(name)
    if not isinstance(args_raw, Mapping):
        raise ExpectationError("`args` must map `intent.argument` to a value, a list of values or {min, max}")
    constraints = tuple(_parse_constraint(str(key), value, intents, catalogue) for key, value in args_raw.items())
    return Expectation(tuple(intents), constraints)


def _parse_constraint(key: str, raw: Any, intents: Sequence[str], catalogue: Any) -> ArgumentConstraint:
    where = f"args.{key}"
    intent, dot, argument = key.partition(".")
    if not dot or not intent or not argument:
        raise ExpectationError(f"{where}: keys are `intent.argument`, e.g. move_to.zone")
    if intent not in intents:
        raise ExpectationError(f"{where}: intent {intent!r} is not in this expectation's intents {list(intents)}")
    spec = None
    if catalogue is not None:
        try:
            spec = catalogue[intent].argument(argument)
        except KeyError:
            declared = [a.name for a in catalogue[intent].arguments]
            raise ExpectationError(f"{where}: intent {intent} has no argument {argument!r} "
                                   f"(arguments: {declared or 'none'})") from None
    if isinstance(raw, Mapping):
        unknown = set(raw) - {"min", "max"}
        if unknown or not raw:
            raise ExpectationError(f"{where}: a range is {{min, max}}, got keys {sorted(map(str, raw))}")
        if spec is not None and spec.type not in ("float", "int"):
            raise ExpectationError(f"{where}: a range needs a number argument; {argument} is {spec.type}")
        bounds = []
        for name in ("min", "max"):
            value = raw.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value)):
                raise ExpectationError(f"{where}.{name}: expected a number, got {value!r}")
            bounds.append(None if value is None else float(value))
        low, high = bounds
        if low is not None and high is not None and low > high:
            raise ExpectationError(f"{where}: min {low:g} is above max {high:g}")
        if spec is not None:
            for value in (low, high):
                if value is not None:
                    _check_value(spec, value, where)
        return ArgumentConstraint(intent, argument, minimum=low, maximum=high)
    values = list(raw) if isinstance(raw, (list, tuple)) else [raw]
    if not values:
        raise ExpectationError(f"{where}: an empty list accepts nothing")
    for value in values:
        if value is None or isinstance(value, (Mapping, list)):
            raise ExpectationError(f"{where}: expected a value, a list of values or {{min, max}}, got {value!r}")
        if spec is not None:
            _check_value(spec, value, where)
    return ArgumentConstraint(intent, argument, values=tuple(values))


def _check_value(spec: Any, value: Any, where: str) -> None:
    try:
        spec.check(value)
    except ValueError as err:   # csr_llm_common.catalogue.DecisionError
        raise ExpectationError(f"{where}: {err}") from None


# --------------------------------------------------------------------------------------------- scoring
@dataclass(frozen=True)
class ExpectationChange:
    """An event that fired at sim `time` with an expectation (None: scoring ends there); `decides`:
    its window's class (reasoning | sensed); `order`: a reasoning window only a task answers."""
    time: float
    event_id: str
    expectation: Optional[Expectation]
    decides: str = REASONING
    order: bool = False


@dataclass(frozen=True)
class DecisionRecord:
    time: float                       # sim stamp of the decision
    intent: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScoredDecision:
    time: float
    intent: str
    arguments: Mapping[str, Any]
    verdict: str                      # MATCH | MISMATCH | UNSCORED
    event_id: str = ""                # the window it was scored in ("" when unscored)


@dataclass(frozen=True)
class Reaction:
    event_id: str
    start: float                      # the event's sim time
    end: float                        # end of its window
    reaction_s: float                 # to the first match, or the window's length when never matched
    matched: bool
    expectation: Expectation


@dataclass
class DecisionScore:
    decisions: List[ScoredDecision]
    reactions: List[Reaction]
    windows: List[Tuple[float, float, ExpectationChange]]   # (start, end, change) of every scored window
    goals: Dict[str, Optional[float]] = field(default_factory=dict)   # goal id -> sim time reached (None: not)
    robot: RobotOutcome = field(default_factory=RobotOutcome)         # the simulator's safety and motion record

    def count(self, verdict: str) -> int:
        return sum(1 for d in self.decisions if d.verdict == verdict)

    @property
    def scored(self) -> int:
        return self.count(MATCH) + self.count(MISMATCH)

    @property
    def accuracy(self) -> Optional[float]:
        return self.count(MATCH) / self.scored if self.scored else None

    @property
    def reaction_p50_s(self) -> Optional[float]:
        return percentile([r.reaction_s for r in self.reactions], 50.0)

    @property
    def reaction_max_s(self) -> Optional[float]:
        return max((r.reaction_s for r in self.reactions), default=None)

    @property
    def unmatched(self) -> List[str]:
        return [r.event_id for r in self.reactions if not r.matched]

    @property
    def task_success(self) -> Optional[bool]:
        return all(t is not None for t in self.goals.values()) if self.goals else None

    @property
    def intents(self) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for d in self.decisions:
            out[d.intent] = out.get(d.intent, 0) + 1
        return out

    def summary(self) -> Dict[str, Any]:
        return {
            **robot_summary(self, self.robot),
            "decisions_scored": self.scored,
            "decisions_matched": self.count(MATCH),
            "decisions_unscored": self.count(UNSCORED),
            "reaction_p50_s": round_or_none(self.reaction_p50_s, 3),
            "reaction_max_s": round_or_none(self.reaction_max_s, 3),
            "reactions_unmatched": self.unmatched,
            "task_success": self.task_success,
            "goals": {k: round_or_none(v, 3) for k, v in self.goals.items()},
        }


def score_decisions(changes: Iterable[ExpectationChange], decisions: Iterable[DecisionRecord], end_time: float,
                    goals: Optional[Mapping[str, Optional[float]]] = None,
                    robot: Optional[RobotOutcome] = None) -> DecisionScore:
    """Score `decisions` against the expectation timeline `changes`, up to sim time `end_time`;
    `robot`: the simulator's outcome for the robot-level figures."""
    ordered = sorted((c for c in changes if c.time < end_time), key=lambda c: c.time)   # stable: file order kept
    # of several changes at one instant only the last counts (the earlier ones never had a window)
    timeline = [c for i, c in enumerate(ordered) if i + 1 == len(ordered) or ordered[i + 1].time > c.time]
    windows = []
    for i, change in enumerate(timeline):
        if change.expectation is not None:
            end = timeline[i + 1].time if i + 1 < len(timeline) else end_time
            windows.append((change.time, end, change))
    # a decision stamped at a change's own instant may or may not have seen it (the event's own
    # decision and a periodic one share that stamp): it is scored against neither expectation
    instants = [c.time for c in timeline]
    first_match: Dict[int, float] = {}
    scored = []
    for d in sorted(decisions, key=lambda d: d.time):
        verdict, event_id = UNSCORED, ""
        at_a_change = any(abs(d.time - t) <= 1e-9 for t in instants)
        for k, (start, end, change) in enumerate([] if at_a_change else windows):
            if start < d.time <= end:
                assert change.expectation is not None
                ok = change.expectation.matches(d.intent, d.arguments)
                verdict, event_id = (MATCH if ok else MISMATCH), change.event_id
                if ok and k not in first_match:
                    first_match[k] = d.time
                break
        scored.append(ScoredDecision(d.time, d.intent, dict(d.arguments), verdict, event_id))
    reactions = []
    for k, (start, end, change) in enumerate(windows):
        assert change.expectation is not None
        matched = k in first_match
        reactions.append(Reaction(change.event_id, start, end, (first_match[k] if matched else end) - start,
                                  matched, change.expectation))
    return DecisionScore(scored, reactions, windows, dict(goals or {}), robot or RobotOutcome())


def chance_of_match(expectation: Expectation, catalogue: Any) -> float:
    """Probability that a uniformly random decision matches: an intent drawn uniformly from the
    catalogue, each constrained argument uniformly from its enum or its min..max range."""
    names = catalogue.names
    total = 0.0
    for intent in expectation.intents:
        p = 1.0 / len(names)
        for c in expectation.constraints:
            if c.intent != intent:
                continue
            spec = catalogue[intent].argument(c.argument)
            if spec.type == "string":
                p *= len(set(c.values) & set(spec.enum)) / len(spec.enum)
            elif spec.type == "bool":
                p *= len(set(c.values) & {True, False}) / 2.0
            elif spec.minimum is not None and spec.maximum is not None and spec.maximum > spec.minimum:
                if c.values:
                    p *= 0.0 if spec.type == "float" else len(set(c.values)) / (spec.maximum - spec.minimum + 1)
                else:
                    low = spec.minimum if c.minimum is None else max(spec.minimum, c.minimum)
                    high = spec.maximum if c.maximum is None else min(spec.maximum, c.maximum)
                    p *= max(0.0, high - low) / (spec.maximum - spec.minimum)
        total += p
    return total


def changes_from_records(records: Iterable[Mapping[str, Any]]) -> List[ExpectationChange]:
    """The expectation timeline from the simulator's `scenario/expectations` JSON records
    (``kind: event`` records that carry an ``expect`` key; ``"none"`` ends scoring). A record
    without ``decides`` (an older run) counts as a reasoning window."""
    out = []
    for rec in records:
        if rec.get("kind") == "event" and "expect" in rec:
            out.append(ExpectationChange(float(rec["time"]), str(rec.get("event", "")),
                                         parse_expectation(rec["expect"]), str(rec.get("decides", REASONING)),
                                         bool(rec.get("order", False))))
    return out
