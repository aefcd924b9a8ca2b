"""The Reasoner's primary side: the logical state with the primary's view of it, and the appender
that keeps the primary's KV cache in step with that view (plain module, no rclpy).

`PrimaryView` owns the logical state (`CachedState`, the source of truth), the token list the
primary must hold (its view: the state's tokens, or an older, longer prefix while an ASR rebuild
runs), the chunk sequence numbering and the chunks still waiting for a tokenizer, under one lock.
That lock is the outermost of the Reasoner's: other parts take theirs inside it, never around it.

`PrimaryAppender` appends the view's new tokens to the primary, in `rebuild_batch` pieces that end
at line ends, and stops at a piece boundary once `preempt()` says a decision is due
(`decide_on_cached`: the decision then runs on the whole chunks already cached, at most
`max_uncached_tokens` behind). With `append_threads` > 1 a local primary appends with more threads
while the secondary is idle (its core is free then); llama.cpp's results do not depend on the count.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Dict, List, Optional, Sequence, Tuple

from .backend import NoResourceAvailable, ReasoningBackend
from .csr_state import CachedState, Chunk
from .prompt import chunk_line

# View epochs are unique across Reasoners: an engine stamped by one Reasoner (engines are shared, e.g.
# by decision_eval) must never pass for synced with another's view.
_VIEW_EPOCHS = itertools.count(1)


@dataclass(frozen=True)
class ViewSnapshot:
    """What the primary must hold, read at one instant. `tokens` is the live view list: it only
    grows until it is replaced, so its first `length` tokens stay as read."""
    tokens: List[int]
    length: int
    epoch: int
    version: int
    last_seq: int       # the newest chunk among those `length` tokens


class Preempted(Exception):
    """A decision is due: the append in progress stops at this batch boundary."""


class PrimaryView:
    """The logical state and the token list the primary must hold (thread-safe)."""

    def __init__(self, state: CachedState, log: logging.Logger):
        self.state = state
        self.log = log
        self._lock = threading.RLock()
        self._tokens: List[int] = []
        self._version = 0
        self._epoch = 0
        self._newest_seq = -1                  # the newest chunk in the view
        self._untokenized: List[tuple] = []    # accepted while no tokenizer answered: appended in order later
        self.last_seq: Optional[int] = None
        self.seq_gaps = 0
        self.sequence_epoch = 0                # the aggregator start the sequence belongs to (0: unknown)
        self.reset_to_state()

    def locked(self) -> ContextManager[Any]:
        """Hold the view across a compound change (a swap, a failover): the view lock is reentrant."""
        return self._lock

    # --- arrivals --------------------------------------------------------------------------
    def queue(self, seq: int, source: str, kind: int, text: str, stamp: float) -> None:
        """Count sequence gaps and queue the chunk for `append_queued`."""
        with self._lock:
            if self.last_seq is not None and seq > self.last_seq + 1:
                self.seq_gaps += seq - self.last_seq - 1
            self.last_seq = seq if self.last_seq is None else max(self.last_seq, seq)
            self._untokenized.append((int(seq), source, int(kind), text, float(stamp)))

    def append_queued(self, tokenize_plain: Callable[[str], List[int]], detokenize: Callable[[Sequence[int]], str],
                      on_appended: Callable[[List[Chunk]], None]) -> List[Chunk]:
        """Tokenize and append the queued chunks in order, until none is left or no tokenizer answers;
        `on_appended(pieces)` runs under the lock, atomic with each append. ChunkRejected when refused."""
        appended: List[Chunk] = []
        while True:
            with self._lock:
                if not self._untokenized:
                    return appended
                seq, source, kind, text, stamp = self._untokenized[0]
            try:
                tokens = tuple(tokenize_plain(chunk_line(text))) if text.strip() else ()
            except NoResourceAvailable:
                return appended
            chunk = Chunk(seq, source, kind, text, tokens, stamp)
            with self._lock:
                self._untokenized.pop(0)
                pieces = self.state.append(chunk, detokenize=detokenize)    # ChunkRejected: refused, archived
                for piece in pieces:
                    self._tokens.extend(piece.tokens)
                self._newest_seq = chunk.seq
                on_appended(pieces)
            appended.extend(pieces)

    def start_sequence(self, epoch: int, first_seq: int) -> None:
        with self._lock:
            self.sequence_epoch = int(epoch)
            self.last_seq = int(first_seq) - 1

    # --- the view --------------------------------------------------------------------------
    def replace(self, tokens: List[int], version: int, newest_seq: Optional[int] = None) -> None:
        """Replace (not extend) what the primary must hold; the next sync compares in full."""
        with self._lock:
            self._tokens = tokens
            self._version = version
            self._epoch = next(_VIEW_EPOCHS)
            if newest_seq is not None:
                self._newest_seq = newest_seq

    def reset_to_state(self) -> None:
        """The primary must hold the logical state itself (an in-place eviction, a failover)."""
        with self._lock:
            self.replace(self.state.tokens(), self.state.version)

    def snapshot(self) -> ViewSnapshot:
        with self._lock:
            return ViewSnapshot(self._tokens, len(self._tokens), self._epoch, self._version, self._newest_seq)

    @property
    def length(self) -> int:
        return len(self._tokens)

    @property
    def version(self) -> int:
        return self._version

    @property
    def newest_seq(self) -> int:
        return self._newest_seq

    def holds_state(self) -> bool:
        with self._lock:
            return self._tokens == self.state.tokens()

    def fits(self, n_ctx: int, reserve: int) -> bool:
        with self._lock:
            return len(self._tokens) + reserve <= n_ctx

    def rebuild_target(self) -> Tuple[List[int], int, int]:
        """(tokens, version, newest chunk) of the logical state, for a rebuild."""
        with self._lock:
            return self.state.tokens(), self.state.version, self._newest_seq

    def uncached_tokens(self, engine: ReasoningBackend) -> int:
        """Tokens of the view `engine` (the primary) does not hold yet (what a pump would append)."""
        with self._lock:
            behind = len(self._tokens) - len(engine.tokens)
            return behind if engine.view_epoch == self._epoch else len(self._tokens)

    # --- the logical state -----------------------------------------------------------------
    def evict_if_due(self) -> bool:
        """Evict the oldest chunks when the prefix reached tau_mem (logged); True when it did."""
        with self._lock:
            if not self.state.needs_eviction():
                return False
            eviction = self.state.evict()
            self.log.info("evicted %d chunks (%d tokens): state version %d, prefix %d tokens",
                          len(eviction.chunks), eviction.tokens, eviction.state_version, self.state.n_tokens)
            return True

    def evict_until_below(self) -> None:
        with self._lock:
            while self.state.needs_eviction():
                self.state.evict()

    def chunk_end(self, pos: int, view_len: int, up: bool) -> Optional[Tuple[int, int]]:
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

    def counts(self) -> Dict[str, int]:
        """The state's and the view's figures for the Reasoner's status."""
        with self._lock:
            counters = self.state.counters
            return {"prefix_tokens": self.state.n_tokens, "static_tokens": len(self.state.head_tokens),
                    "tau_mem": self.state.tau_mem, "chunk_count": len(self.state.chunks),
                    "state_version": self.state.version,
                    "last_chunk_seq": -1 if self.last_seq is None else self.last_seq,
                    "seq_gaps": self.seq_gaps, "evictions": counters.evictions,
                    "evicted_chunks": counters.evicted_chunks, "evicted_tokens": counters.evicted_tokens,
                    "rejected_chunks": counters.rejected_chunks, "primary_view_tokens": len(self._tokens),
                    "untokenized_chunks": len(self._untokenized)}

    # --- warm restart ----------------------------------------------------------------------
    def logical_snapshot(self) -> dict:
        """The state and sequence a restart continues from."""
        with self._lock:
            return dict(self.state.snapshot(), last_seq=self.last_seq, seq_gaps=self.seq_gaps,
                        sequence_epoch=self.sequence_epoch)

    def restore(self, snapshot: dict, n_vocab: Optional[int]) -> None:
        """Continue from a saved snapshot; KeyError, TypeError or ValueError (the state as it was) when
        it is malformed or holds token ids outside the vocabulary."""
        with self._lock:
            empty = self.state.snapshot()      # what a refused file leaves: the state as it was
            try:
                self.state.restore(snapshot)
                _check_vocabulary(self.state, n_vocab)
            except (KeyError, TypeError, ValueError):
                self.state.restore(empty)
                raise
            self.last_seq = snapshot.get("last_seq")
            self.seq_gaps = int(snapshot.get("seq_gaps", 0))
            self.sequence_epoch = int(snapshot.get("sequence_epoch", 0))
            self.replace(self.state.tokens(), self.state.version, -1 if self.last_seq is None else self.last_seq)


def _check_vocabulary(state: CachedState, n_vocab: Optional[int]) -> None:
    """ValueError when a restored chunk holds a token id outside the model's vocabulary (a corrupt
    or foreign file): every decision on such a prefix would fail in llama_decode."""
    if not n_vocab:
        return
    for chunk in state.chunks:
        bad = [t for t in chunk.tokens if not 0 <= int(t) < n_vocab]
        if bad:
            raise ValueError(f"chunk {chunk.seq} holds token ids outside the vocabulary (e.g. {bad[0]}; "
                             f"n_vocab={n_vocab})")


class PrimaryAppender:
    """Brings the primary's KV cache to a view snapshot (decision thread only)."""

    def __init__(self, config: Any, view: PrimaryView):
        self.config = config
        self.view = view
        self.held_seq = -1                 # the newest chunk in the primary's cache at the last sync
        self.append_batch_s = 0.1          # recent time per appended batch (callers look ahead with it)
        self.preempted_pumps = 0

    def sync(self, engine: ReasoningBackend, target: ViewSnapshot, *, deciding: bool = False,
             preempt: Optional[Callable[[], bool]] = None, secondary_busy: bool = True) -> None:
        """Bring `engine`'s cache to `target` (a decision: to the whole chunks it holds, when it may
        decide on those; `held_seq` = the newest of them). `Preempted` when `preempt()` turns true
        before a batch. `secondary_busy`: the secondary's core is taken (no extra append threads)."""
        view, target_len = target.tokens, target.length
        if engine.view_epoch != target.epoch or len(engine.tokens) > target_len:     # the view was replaced
            engine.truncate(_common_prefix(engine.tokens, view, target_len))
            engine.view_epoch = target.epoch
        if deciding and len(engine.tokens) < target_len and self.config.decide_on_cached \
                and self.config.swap_after_decisions == 0:
            # the whole chunks held; if that leaves more than max_uncached_tokens behind, the fewest
            # whole chunks more that do not (a partly appended chunk is appended again after it)
            held = self.view.chunk_end(len(engine.tokens), target_len, up=False)
            if held is None or target_len - held[0] > self.config.max_uncached_tokens:
                held = self.view.chunk_end(target_len - self.config.max_uncached_tokens, target_len, up=True)
            if held is not None:
                engine.truncate(held[0])
                with self._threads(engine, secondary_busy):
                    engine.extend(view[len(engine.tokens):held[0]], batch=self.config.rebuild_batch, by_line=True)
                self.held_seq = held[1]
                return
        with self._threads(engine, secondary_busy):
            engine.extend(view[len(engine.tokens):target_len], batch=self.config.rebuild_batch, by_line=True,
                          before_batch=None if preempt is None else self._preempt_check(preempt))
        self.held_seq = target.last_seq

    def _preempt_check(self, preempt: Callable[[], bool]) -> Callable[[], None]:
        """A before-batch hook that tracks the time per batch and raises Preempted when a decision is
        due; one batch at least per pump, so appends progress under any decision load."""
        batches = itertools.count()
        last = [time.perf_counter()]

        def check() -> None:
            now = time.perf_counter()
            if next(batches) > 0:
                self.append_batch_s += 0.3 * (now - last[0] - self.append_batch_s)
                if preempt():
                    self.preempted_pumps += 1
                    raise Preempted()
            last[0] = now
        return check

    def _threads(self, engine: ReasoningBackend, secondary_busy: bool) -> ContextManager[Any]:
        """`append_threads` for this append when the secondary's core is free."""
        threads = getattr(engine, "threads", None)     # a server has none
        return contextlib.nullcontext() if secondary_busy or threads is None else threads(self.config.append_threads)

    def should_stop(self, seconds_to_due: float, uncached_tokens: int) -> bool:
        """For `pump(preempt)` callers with a schedule: stop when the next batch would run into the
        due time, unless the cache is half of `max_uncached_tokens` behind (then only once it is
        due: a decision may wait one batch, rather than append a backlog itself later)."""
        if seconds_to_due <= 0:
            return True
        return seconds_to_due < self.append_batch_s and uncached_tokens < self.config.max_uncached_tokens // 2


def _common_prefix(held: Sequence[int], view: Sequence[int], limit: int) -> int:
    """Length of the longest common prefix of `held` and `view[:limit]`."""
    limit = min(len(held), limit)
    common = 0
    while common < limit and held[common] == view[common]:
        common += 1
    return common
