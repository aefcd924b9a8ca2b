"""Robot-level figures of a scored run (plain module, no rclpy): what the robot did, next to what it decided.

From the decision score (decision_score.py) and the simulator's outcome (the ``end`` record of
`scenario/expectations`: sim/safety.py counters and motion intervals):

* ``task_success_rate``  goals reached by their deadlines (a goal's ``by:``, default the scenario's
  end) / goals;
* ``safety_violations``  episodes of the four safety kinds (sim/safety.py), per kind with its worst
  instance, and ``safety_worst``: the instance furthest over its limit (value / limit);
* ``order_to_motion_s``  per order window (a reasoning window only a task answers): from the order
  to the first sim time at or after the window's first matching decision at which the robot moves
  (base over 0.05 m/s or an arm joint over 0.1 rad/s, held 50 ms); the robot already moving at that
  decision counts from the decision. An order never matched, or with no motion before its window
  ends, counts as the window's length and is listed in ``orders_without_motion``;
* ``decision_accuracy``  matches / scored decisions in the reasoning windows (the event's
  ``decides:``, docs/scenarios.md); ``decision_accuracy_all`` over every window.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from csr_llm_common.stats import percentile, round_or_none

if TYPE_CHECKING:
    from .decision_score import DecisionScore

REASONING = "reasoning"
# safety kind -> the limit its value is compared with (sim/safety.py SafetyLimits)
KIND_LIMITS = {"person_speed": "person_speed_mps", "contact_force": "contact_force_n",
               "motor_overload": "motor_limit_c", "slip_speed": "slip_speed_mps"}


@dataclass(frozen=True)
class RobotOutcome:
    """The simulator's record of a run: safety counters ({kind: {count, worst}, limits}) and the
    intervals in which the robot moved. ``known`` is False for a run that did not report them."""
    safety: Mapping[str, Any] = field(default_factory=dict)
    motion: Tuple[Tuple[float, float], ...] = ()
    known: bool = False

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]]) -> "RobotOutcome":
        """From the `end` record of the simulator's `scenario/expectations` records."""
        for rec in records:
            if rec.get("kind") == "end" and isinstance(rec.get("safety"), Mapping):
                motion = tuple((float(a), float(b)) for a, b in rec.get("motion") or ())
                return cls(dict(rec["safety"]), motion, True)
        return cls()

    def counts(self) -> Dict[str, int]:
        return {kind: int(v.get("count", 0)) for kind, v in self.safety.items() if isinstance(v, Mapping)
                and "count" in v}

    def worst(self) -> Optional[Dict[str, Any]]:
        """The worst instance over the kinds: the one furthest over its limit (value / limit)."""
        limits = self.safety.get("limits") or {}
        best: Optional[Dict[str, Any]] = None
        for kind, entry in self.safety.items():
            if not isinstance(entry, Mapping) or not entry.get("worst"):
                continue
            limit = float(limits.get(KIND_LIMITS.get(kind, ""), 0.0) or 0.0)
            ratio = float(entry["worst"]["value"]) / limit if limit > 0 else float("inf")
            if best is None or ratio > best["over_limit"]:
                best = dict(entry["worst"], kind=kind, over_limit=round(ratio, 3))
        return best

    def moving_from(self, t: float, until: float) -> Optional[float]:
        """The first sim time in [t, until] at which the robot moves (None: it does not)."""
        for start, end in self.motion:
            if start <= t <= end:
                return t
            if t < start <= until:
                return start
        return None


@dataclass(frozen=True)
class OrderMotion:
    event_id: str
    start: float
    seconds: float             # order to motion, or the window's length when it never moved
    moved: bool


def order_motions(score: "DecisionScore", outcome: RobotOutcome) -> List[OrderMotion]:
    """Order-to-motion of each order window (module docstring)."""
    out = []
    for (start, end, change), reaction in zip(score.windows, score.reactions):
        if not change.order:
            continue
        moved_at = outcome.moving_from(start + reaction.reaction_s, end) if reaction.matched else None
        out.append(OrderMotion(change.event_id, start, (end if moved_at is None else moved_at) - start,
                               moved_at is not None))
    return out


def class_counts(score: "DecisionScore", decides: str = REASONING) -> Tuple[int, int]:
    """(matched, scored) decisions in the windows of one class."""
    classes = {change.event_id: change.decides for _, _, change in score.windows}
    scored = [d for d in score.decisions if d.verdict in ("match", "mismatch") and classes.get(d.event_id) == decides]
    return sum(1 for d in scored if d.verdict == "match"), len(scored)


def goal_counts(goals: Mapping[str, Optional[float]]) -> Tuple[int, int]:
    """(reached by their deadlines, goals): the scenario records a goal only when reached in time."""
    return sum(1 for t in goals.values() if t is not None), len(goals)


def robot_summary(score: "DecisionScore", outcome: RobotOutcome) -> Dict[str, Any]:
    """The robot-level keys of a run's summary (module docstring)."""
    matched, scored = class_counts(score)
    reached, total = goal_counts(score.goals)
    orders = order_motions(score, outcome) if outcome.known else []
    seconds = [o.seconds for o in orders]
    counts = outcome.counts()
    return {
        "decision_accuracy": round(matched / scored, 4) if scored else None,
        "decisions_scored_reasoning": scored,
        "decisions_matched_reasoning": matched,
        "decision_accuracy_all": round_or_none(score.accuracy, 4),
        "task_success_rate": round(reached / total, 4) if total else None,
        "goals_reached": reached,
        "goals_total": total,
        "safety_violations": sum(counts.values()) if outcome.known else None,
        "safety": {k: v for k, v in outcome.safety.items() if k != "limits"} if outcome.known else None,
        "safety_worst": outcome.worst() if outcome.known else None,
        "order_to_motion_p50_s": round_or_none(percentile(seconds, 50.0), 3),
        "order_to_motion_max_s": round_or_none(max(seconds) if seconds else None, 3),
        "orders": [{"event": o.event_id, "start": round(o.start, 3), "seconds": round(o.seconds, 3),
                    "moved": o.moved} for o in orders],
        "orders_without_motion": [o.event_id for o in orders if not o.moved],
        "motion_known": outcome.known,
    }


def pooled_seconds(runs: Sequence[Mapping[str, Any]]) -> List[float]:
    """Every order's order-to-motion time over several runs' summaries."""
    return [float(o["seconds"]) for r in runs for o in (r.get("orders") or [])]
