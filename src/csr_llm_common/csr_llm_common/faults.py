"""One fault log for every node and plain module: bad input is reported once per kind, then counted.

A malformed or hostile stream must neither flood the logs nor go unnoticed: the first fault of a
kind gets one line (through ``report``), later ones only raise ``counts[kind]`` and ``total``, which
the nodes publish in their status messages.
"""
from __future__ import annotations

import threading
from typing import Callable, Dict, Mapping, Optional

MAX_DETAIL_CHARS = 200


class FaultLog:
    def __init__(self, report: Optional[Callable[[str], None]] = None,
                 texts: Optional[Mapping[str, str]] = None, counted_in: str = ""):
        """``texts`` maps a kind to its explanation; ``counted_in`` names where counts are published."""
        self.report = report
        self.texts = dict(texts or {})
        self.counted_in = counted_in
        self.counts: Dict[str, int] = {}
        self.total = 0
        self._lock = threading.Lock()

    def record(self, kind: str, detail: str = "") -> bool:
        """Count a fault; True when it was the first of its kind (and so was reported)."""
        with self._lock:
            first = kind not in self.counts
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.total += 1
        if first and self.report is not None:
            self.report(self.line(kind, detail))
        return first

    def line(self, kind: str, detail: str = "") -> str:
        detail = str(detail)
        if len(detail) > MAX_DETAIL_CHARS:
            detail = detail[:MAX_DETAIL_CHARS] + f"...({len(detail)} chars)"
        where = f"counted in {self.counted_in}" if self.counted_in else "counted, not logged"
        return (f"input fault [{kind}]: {self.texts.get(kind, kind)}" + (f" ({detail})" if detail else "")
                + f"; further faults of this kind are {where}")
