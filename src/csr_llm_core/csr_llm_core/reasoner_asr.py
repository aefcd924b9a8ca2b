"""The ASR background rebuild, the Reasoner's part that runs the secondary context (a mixin).

At an eviction `_start_reconcile` warms the secondary on the shortened logical state in a thread,
in `rebuild_batch` pieces that yield to a decision in flight; chunks that arrive meanwhile are
buffered and caught up until at most `n_catchup` tokens (and at most one `rebuild_batch`) are left,
then the secondary is ready. Where decisions never wait for appends (`decide_on_cached`), a
catch-up pass that no longer shrinks the backlog also ends it: the new primary's pump appends it.
`_maybe_swap` (decision thread) swaps it in: as soon as it is ready, or with
`swap_after_decisions` = N exactly at the Nth decision after the eviction (waiting for the rebuild
if needed), so a lockstepped run and its replay swap at the same point of the chunk stream.
If chunks still outrun the rebuild until the primary would overflow its context,
`_resolve_overflow` waits `overflow_wait_s` for it, then evicts synchronously once (logged).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, List, Optional, Tuple

from .backend import BackendUnavailable


class _Stopped(Exception):
    pass


class AsrRebuildMixin:
    """Reasoner methods (the attributes are Reasoner's)."""
    config: Any
    primary: Any
    secondary: Any
    fallback: Any
    resources: List[Any]
    state: Any
    health: Any
    log: Any
    swaps: int
    overflow_stalls: int
    _primary_view: List[int]
    _view_epoch: int
    reconcile_error: Optional[BaseException]
    _lock: Any
    _buffer: list
    _ready: Optional[tuple]
    _reconciling: bool
    _thread: Optional[threading.Thread]
    _warm_thread: Optional[threading.Thread]
    _primary_idle: threading.Event
    _stop: threading.Event
    _cancel: threading.Event
    _stopping: threading.Event
    _primary_last_seq: int
    _decisions_since_evict: int
    _set_primary_view: Callable[[List[int], int], None]
    _maybe_evict: Callable[[], None]
    pump: Callable[[], Any]

    def wait_reconciled(self, timeout: float = 60.0) -> bool:
        """Block until no reconciliation is pending (tests and benchmarks)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._reconciling and self._ready is None:
                    return True
            if self._ready is not None:
                self.pump()
            time.sleep(0.005)
        return False

    def begin_stop(self) -> None:
        """The owner is stopping: a decision waiting for a swap at its fixed boundary decides on the
        current primary instead (a slow rebuild would hold the stop); the rebuild goes on until close."""
        self._stopping.set()

    def close(self) -> bool:
        """Stop the background threads; False when one is still busy (inside llama.cpp, perhaps):
        its engine must then stay open until the process exits."""
        self._stop.set()
        ended = True
        for thread in (self._warm_thread, self._thread):
            if thread is not None:
                thread.join(timeout=10)
                if thread.is_alive():
                    self.log.warning("%s still busy after 10 s: closing without it", thread.name)
                    ended = False
        self.health.close()
        return ended

    def _start_reconcile(self) -> None:
        """Warm the secondary on the logical state in the background, then swap (holds self._lock)."""
        self._reconciling = True
        self._decisions_since_evict = 0
        self._buffer = []
        self._thread = threading.Thread(target=self._reconcile, name="asr-reconcile", daemon=True,
                                        args=(self.state.tokens(), self.state.version, self._primary_last_seq))
        self._thread.start()

    def warm_secondary(self) -> Optional[threading.Thread]:
        """Evaluate the static head on the idle secondary in the background, in `rebuild_batch`
        pieces that yield to the primary (decisions start at once), so the first eviction rebuilds
        only the live chunks; that rebuild waits for it. Only a head that ends a line: pieces end at
        every line end (`by_line`), so the warmed head's cache is bitwise the cold rebuild's, and a
        lockstepped run (swap_after_decisions) decides alike whenever the warm finishes. Returns the
        thread, or None when there is nothing to do."""
        secondary, head = self.secondary, self.state.head_tokens
        if not self.config.warm_head or secondary is None or self._reconciling or not secondary.is_local or not head \
                or head[-1] not in getattr(secondary, "line_end_tokens", ()):
            return None

        def warm() -> None:
            try:
                secondary.sync(head, batch=self.config.rebuild_batch, before_batch=self._yield_to_primary,
                               by_line=True)
            except _Stopped:
                pass
            except Exception as err:  # noqa: BLE001 - an optimisation: the rebuild evaluates the head instead
                self.log.warning("warming the secondary's head failed: %s", err)
        self._warm_thread = threading.Thread(target=warm, name="asr-warm", daemon=True)
        self._warm_thread.start()
        return self._warm_thread

    # --- ASR background rebuild ------------------------------------------------------------
    def _yield_to_primary(self) -> None:
        while not self._primary_idle.wait(timeout=0.05) and not self._rebuild_late():
            if self._stop.is_set() or self._cancel.is_set():
                raise _Stopped()
        if self._stop.is_set() or self._cancel.is_set():
            raise _Stopped()

    def _rebuild_late(self) -> bool:
        """The primary has used half its room beyond tau_mem: the rebuild stops yielding to decisions
        (a slower decision now, not an overflow stall later)."""
        room = self.primary.n_ctx - self.config.suffix_reserve - self.config.tau_mem
        return len(self._primary_view) > self.config.tau_mem + room // 2

    def _reconcile(self, target: List[int], version: int, last_seq: int) -> None:
        engine = self.secondary
        assert engine is not None, "reconciliation runs only in ASR mode, which has a secondary"
        if self._warm_thread is not None:       # one user of the secondary at a time
            self._warm_thread.join()
        try:
            engine.sync(target, batch=self.config.rebuild_batch, before_batch=self._yield_to_primary, by_line=True)
            view = list(target)
            # decisions that never wait for appends let a catch-up that no longer shrinks (chunks arrive
            # as fast as this context, paused for decisions, absorbs them) end: the new primary's pump
            # appends the backlog, as the old primary would have, instead of the primary overflowing
            may_leave_backlog = self.config.decide_on_cached and self.config.swap_after_decisions == 0
            previous: Optional[int] = None
            while True:
                with self._lock:
                    pending, self._buffer = self._buffer, []
                    pending_tokens = [t for chunk in pending for t in chunk.tokens]
                    if pending:
                        last_seq = pending[-1].seq
                    # what the swap leaves to the new primary stays below one batch (and n_catchup)
                    if len(pending_tokens) <= min(self.config.n_catchup, self.config.rebuild_batch) or (
                            may_leave_backlog and previous is not None and len(pending_tokens) >= previous):
                        self._ready = (view + pending_tokens, version, last_seq)
                        return
                previous = len(pending_tokens)
                engine.extend(pending_tokens, batch=self.config.rebuild_batch, before_batch=self._yield_to_primary,
                              by_line=True)
                view.extend(pending_tokens)
        except _Stopped:
            return
        except Exception as err:  # keep serving on the primary; retried at the next eviction
            self.reconcile_error = err
            if isinstance(err, BackendUnavailable):     # logged once per outage
                self.health.mark_down(engine.name, engine.healthy, str(err))
            else:
                self.log.error("ASR reconcile on %s failed: %s; decisions continue on %s",
                               engine.name, err, self.primary.name)
            with self._lock:
                self._reconciling = False
                self._buffer = []
                self._set_primary_view(self.state.tokens(), self.state.version)

    def _maybe_swap(self, deciding: bool = False) -> None:
        wanted = self.config.swap_after_decisions
        if wanted > 0 and self._reconciling:     # a fixed decision boundary, not whenever ready
            if not deciding:
                return
            self._decisions_since_evict += 1
            if self._decisions_since_evict < wanted:
                return
            self._await_rebuild()
        with self._lock:
            if self._ready is None:
                return
            view, version, last_seq = self._ready
            secondary = self.secondary
            assert secondary is not None, "only ASR mode (with a secondary) gets a ready view"
            for chunk in self._buffer:       # arrived after the secondary became ready
                view.extend(chunk.tokens)
                last_seq = chunk.seq
            self._ready = None
            self._buffer = []
            self._reconciling = False
            self.primary, self.secondary = secondary, self.primary
            if self.secondary is self.fallback:     # back from the fallback: it waits for the next outage
                self.secondary = next((e for e in self.resources if e not in (self.primary, self.fallback)), None) \
                    if self.config.mode == "asr" else None
            self._set_primary_view(view, version)
            self._primary_last_seq = max(last_seq, self._primary_last_seq) if view else last_seq
            self.swaps += 1
            self.log.info("ASR swap %d: %s is primary (state version %d, %d tokens)",
                          self.swaps, self.primary.name, version, len(view))
            self._maybe_evict()

    def _resolve_overflow(self) -> Tuple[List[int], int, int]:
        """The primary's view no longer fits its context (chunks outran the background rebuild).

        Give the secondary `overflow_wait_s` at full speed to finish; if it cannot, cancel the
        reconciliation and evict synchronously (one logged stall) rather than fail.
        """
        self.overflow_stalls += 1
        paused = not self._primary_idle.is_set()     # only a decision keeps the rebuild paused
        self._primary_idle.set()
        deadline = time.monotonic() + self.config.overflow_wait_s
        while self._reconciling and self._ready is None and time.monotonic() < deadline:
            time.sleep(0.005)
        if paused:
            self._primary_idle.clear()
        self._maybe_swap()
        with self._lock:
            overflow = len(self._primary_view) + self.config.suffix_reserve > self.primary.n_ctx
        if overflow:
            self.log.warning("chunks arrive faster than the prefix can be rebuilt: primary %s would overflow "
                             "n_ctx=%d; evicting synchronously (stall)", self.primary.name, self.primary.n_ctx)
            self._cancel_reconcile()     # joins the thread: must not hold self._lock here
        with self._lock:
            if overflow:
                self._reconciling = False
                self._ready = None
                self._buffer = []
                while self.state.needs_eviction():
                    self.state.evict()
                self._set_primary_view(self.state.tokens(), self.state.version)
            return self._primary_view, len(self._primary_view), self._view_epoch

    def _await_rebuild(self) -> None:
        """Block this decision until the secondary is ready (or its rebuild failed, or a stop began)."""
        paused = not self._primary_idle.is_set()
        self._primary_idle.set()                 # a pausing rebuild must not wait for us
        try:
            while self._ready is None and self._reconciling and not (self._stop.is_set() or self._stopping.is_set()):
                time.sleep(0.002)
        finally:
            if paused:
                self._primary_idle.clear()

    def _cancel_reconcile(self) -> None:
        thread = self._thread
        if thread is not None and thread.is_alive():
            paused = not self._primary_idle.is_set()
            self._cancel.set()
            self._primary_idle.set()
            thread.join()
            if paused:
                self._primary_idle.clear()
            self._cancel.clear()
