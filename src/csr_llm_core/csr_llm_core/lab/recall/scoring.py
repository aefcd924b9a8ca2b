"""Scores of one method over the questions: accuracy with a Wilson 95% interval, AUC, TTFT percentiles.

AUC (yes/no families) ranks the questions by the margin log p(yes) - log p(no) at the first answer
token: threshold-free, so a model that says "yes" to everything but is more sure when the answer
is yes still shows its signal (0.5 = no signal).
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

from csr_llm_common.stats import percentile, wilson_interval

from .episode import Question



@dataclass
class Outcome:
    """One method's answer to one question."""
    question: Question
    length: int                 # the history's nominal length (tokens)
    choice: int
    scores: List[float]
    ttft_ms: float
    evidence_evicted: Optional[bool]   # None when the question names no evidence

    @property
    def correct(self) -> bool:
        return self.choice == self.question.answer

    @property
    def yes_margin(self) -> float:
        choices = [c.lower() for c in self.question.choices]
        return self.scores[choices.index("yes")] - self.scores[choices.index("no")]


def auc(positives: Sequence[float], negatives: Sequence[float]) -> Optional[float]:
    """Probability that a positive outranks a negative (ties count half); None without both classes."""
    if not positives or not negatives:
        return None
    pos, neg = np.asarray(positives, dtype=float)[:, None], np.asarray(negatives, dtype=float)[None, :]
    return float(np.mean((pos > neg) + 0.5 * (pos == neg)))


def chance(questions: Sequence[Question]) -> float:
    return statistics.mean(q.chance for q in questions) if questions else math.nan


def _accuracy(outcomes: Sequence[Outcome]) -> dict:
    n = len(outcomes)
    hits = sum(o.correct for o in outcomes)
    return {"accuracy": round(hits / n, 3) if n else None, "ci95": list(wilson_interval(hits, n, digits=3)), "n": n,
            "chance": round(chance([o.question for o in outcomes]), 3) if n else None}


def yes_no_auc(outcomes: Sequence[Outcome]) -> Optional[float]:
    yes_no = [o for o in outcomes if o.question.is_yes_no]
    positives = [o.yes_margin for o in yes_no if o.question.choices[o.question.answer].lower() == "yes"]
    negatives = [o.yes_margin for o in yes_no if o.question.choices[o.question.answer].lower() == "no"]
    value = auc(positives, negatives)
    return None if value is None else round(value, 3)


def summarize(outcomes: Sequence[Outcome]) -> dict:
    """The issue's per-method record: accuracy, ci95, n, TTFT, by_family, by_length, evicted_evidence."""
    ttfts = [o.ttft_ms for o in outcomes]
    out = dict(_accuracy(outcomes), ttft_p50_ms=percentile(ttfts, 50, digits=1),
               ttft_p99_ms=percentile(ttfts, 99, digits=1))
    families: Dict[str, List[Outcome]] = defaultdict(list)
    lengths: Dict[int, List[Outcome]] = defaultdict(list)
    for o in outcomes:
        families[o.question.family].append(o)
        lengths[o.length].append(o)
    out["by_family"] = {}
    for family, rows in sorted(families.items()):
        record = _accuracy(rows)
        if any(o.question.is_yes_no for o in rows):
            record["auc"] = yes_no_auc(rows)
        out["by_family"][family] = record
    out["by_length"] = {str(length): dict(_accuracy(rows),
                                          ttft_p50_ms=percentile([o.ttft_ms for o in rows], 50, digits=1))
                        for length, rows in sorted(lengths.items())}
    out["evicted_evidence"] = _accuracy([o for o in outcomes if o.evidence_evicted])
    out["live_evidence"] = _accuracy([o for o in outcomes if o.evidence_evicted is False])
    return out
