"""The Reasoner's part that keeps the primary's KV cache in step with its view (a mixin).

`pump` appends the chunks that arrived since the last sync, in `rebuild_batch` pieces that end at
line ends, and stops at a piece boundary once `preempt()` says a decision is due (`decide_on_cached`:
the decision then runs on the whole chunks already cached, at most `max_uncached_tokens` behind).
With `append_threads` > 1 a local primary appends with more threads while no rebuild or warm-up
runs on the secondary (its core is idle then); llama.cpp's results do not depend on the count.
"""
from __future__ import annotations

import contextlib
import itertools
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple

from .backend import BackendUnavailable, NoResourceAvailable


class _Preempted(Exception):
    """A decision is due: the append in progress stops at this batch boundary."""


class PrimaryAppendMixin:
    """Reasoner methods (the attributes are Reasoner's)."""
    config: Any
    primary: Any
    state: Any
    _lock: Any
    _engine_lock: Any
    _primary_view: List[int]
    _view_epoch: int
    _primary_last_seq: int
    _held_seq: int
    _reconciling: bool
    _ready: Optional[tuple]
    _warm_thread: Any
    append_batch_s: float
    preempted_pumps: int
    _check_resources: Callable[[], None]
    _maybe_swap: Callable[..., None]
    _resolve_overflow: Callable[[], Tuple[List[int], int, int]]
    _fail_over: Callable[[Any, BackendUnavailable], None]
    _append_untokenized: Callable[[], Any]

    def _sync_primary(self, deciding: bool = False, preempt: Optional[Callable[[], bool]] = None) -> None:
        """Bring the primary's cache to its view (a decision: to the whole chunks it holds, when it
        may decide on those; `_held_seq` = the newest of them). `_Preempted` when `preempt()`
        turns true before a batch."""
        self._check_resources()
        self._maybe_swap(deciding)
        with self._lock:
            view = self._primary_view
            epoch = self._view_epoch        # read with the view: another thread may replace both
            target_len = len(view)
            last_seq = self._primary_last_seq
            fits = target_len + self.config.suffix_reserve <= self.primary.n_ctx
        if not fits:
            view, target_len, epoch = self._resolve_overflow()
            last_seq = self._primary_last_seq
        engine = self.primary
        if engine.view_epoch != epoch or len(engine.tokens) > target_len:     # the view was replaced
            engine.truncate(_common_prefix(engine.tokens, view, target_len))
            engine.view_epoch = epoch
        if deciding and len(engine.tokens) < target_len and self.config.decide_on_cached \
                and self.config.swap_after_decisions == 0:
            # the whole chunks held; if that leaves more than max_uncached_tokens behind, the fewest
            # whole chunks more that do not (a partly appended chunk is appended again after it)
            held = self._chunk_end(len(engine.tokens), target_len, up=False)
            if held is None or target_len - held[0] > self.config.max_uncached_tokens:
                held = self._chunk_end(target_len - self.config.max_uncached_tokens, target_len, up=True)
            if held is not None:
                engine.truncate(held[0])
                with self._append_threads(engine):
                    engine.extend(view[len(engine.tokens):held[0]], batch=self.config.rebuild_batch, by_line=True)
                self._held_seq = held[1]
                return
        check = None
        if preempt is not None:
            batches = itertools.count()
            last = [time.perf_counter()]

            def check() -> None:     # one batch at least per pump: appends progress under any decision load
                now = time.perf_counter()
                if next(batches) > 0:
                    self.append_batch_s += 0.3 * (now - last[0] - self.append_batch_s)
                    if preempt():
                        raise _Preempted()
                last[0] = now
        with self._append_threads(engine):
            engine.extend(view[len(engine.tokens):target_len], batch=self.config.rebuild_batch, by_line=True,
                          before_batch=check)
        self._held_seq = last_seq

    def _append_threads(self, engine):
        """`append_threads` for this append when no rebuild or warm-up holds the secondary's core."""
        busy = (self._reconciling and self._ready is None) or (self._warm_thread and self._warm_thread.is_alive())
        threads = getattr(engine, "threads", None)     # a server has none
        return contextlib.nullcontext() if busy or threads is None else threads(self.config.append_threads)

    def _chunk_end(self, pos: int, view_len: int, up: bool) -> Optional[Tuple[int, int]]:
        """(view position, seq) of the chunk end nearest `pos` at or below it (`up`: at or above it);
        None when there is none among the live chunks. The view's newest chunks are the logical
        state's newest chunks (both are appended together)."""
        with self._lock:
            chunks = self.state.chunks
            if not chunks:
                return None
            end, best = view_len, None
            for i in range(len(chunks) - 1, -2, -1):        # chunks[i] ends at `end`; -1: the oldest starts there
                seq = chunks[i].seq if i >= 0 else chunks[0].seq - 1
                if end <= pos:
                    return (end, seq) if not up or end == pos or best is None else best
                best = (end, seq)
                if i >= 0:
                    end -= chunks[i].n_tokens
            return best if up else None

    def pump(self, preempt: Optional[Callable[[], bool]] = None) -> bool:
        """Append pending chunk tokens to the primary's KV cache (call between decisions); False
        when `preempt()` (asked before each `rebuild_batch` tokens) stopped it for a due decision.

        Appending is not latency-critical, so the background rebuild keeps running meanwhile (on
        its own core); it pauses only while a decision is in flight.
        """
        with self._engine_lock:
            self._append_untokenized()
            while True:
                serving = self.primary
                try:
                    self._sync_primary(preempt=preempt)
                    return True
                except _Preempted:
                    self.preempted_pumps += 1
                    return False
                except BackendUnavailable as err:
                    try:
                        self._fail_over(serving, err)
                    except NoResourceAvailable:
                        return True   # nothing can hold the prefix now; the logical state keeps every chunk

    def pump_should_stop(self, seconds_to_due: float) -> bool:
        """For `pump(preempt)` callers with a schedule: stop when the next batch would run into the
        due time, unless the cache is half of `max_uncached_tokens` behind (then only once it is
        due: a decision may wait one batch, rather than append a backlog itself later)."""
        if seconds_to_due <= 0:
            return True
        return seconds_to_due < self.append_batch_s and self.uncached_tokens < self.config.max_uncached_tokens // 2

    @property
    def uncached_tokens(self) -> int:
        """Tokens of the primary's view its cache does not hold yet (what `pump` would append)."""
        with self._lock:
            behind = len(self._primary_view) - len(self.primary.tokens)
            return behind if self.primary.view_epoch == self._view_epoch else len(self._primary_view)


def _common_prefix(held: Sequence[int], view: Sequence[int], limit: int) -> int:
    """Length of the longest common prefix of `held` and `view[:limit]`."""
    limit = min(len(held), limit)
    common = 0
    while common < limit and held[common] == view[common]:
        common += 1
    return common
