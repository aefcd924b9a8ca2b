"""A decision on unchanged inputs is the previous decision (plain module, no rclpy).

Greedy decoding under the grammar is a function of the tokens the resource holds, the suffix, the
grounded names and the calibration context. When a periodic decision finds all four equal to the
previous decision's (nothing arrived, the running task is the same: a robot holding still), the
answer is known: evaluating the suffix again would cost a full TTFT to produce the same tokens. The
memo keeps the last decision's inputs and result; a hit returns that result, timed as the lookup.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Optional, Sequence, Tuple

from .engine import DecodeResult

Key = Tuple[str, Tuple[int, ...], Tuple[int, ...], Optional[Tuple[str, ...]], str, int]


def decision_key(resource: str, held: Sequence[int], suffix: Sequence[int],
                 grounded: Optional[Sequence[str]], context: str, policy: int = 0) -> Key:
    """Everything a greedy decision depends on besides the model and grammar; `policy` names what
    biases the intent choice (the adapter object), so replacing it never reuses an older answer."""
    return (resource, tuple(held), tuple(suffix), None if grounded is None else tuple(grounded), context, policy)


@dataclass
class DecisionMemo:
    enabled: bool = True
    reused: int = 0                       # decisions answered from the memo
    _key: Optional[Key] = None
    _result: Optional[DecodeResult] = None

    def lookup(self, key: Key, started: float) -> Optional[DecodeResult]:
        """The previous result when `key` equals its inputs, with TTFT and total set to the time
        since `started` (perf_counter); None otherwise."""
        if not self.enabled or self._result is None or key != self._key:
            return None
        self.reused += 1
        elapsed_ms = (time.perf_counter() - started) * 1e3
        return replace(self._result, ttft_ms=elapsed_ms, total_ms=elapsed_ms,
                       tokens=list(self._result.tokens), chosen=list(self._result.chosen))

    def store(self, key: Key, result: DecodeResult) -> None:
        if self.enabled:
            self._key, self._result = key, result

    def clear(self) -> None:
        self._key, self._result = None, None
