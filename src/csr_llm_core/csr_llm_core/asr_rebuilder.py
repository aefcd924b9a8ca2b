"""The ASR background rebuild on the secondary context, its catch-up and the swap (plain module, no rclpy).

At an eviction (`after_append`) the rebuilder warms the secondary on the shortened logical state
in a thread, in `rebuild_batch` pieces that yield while a decision is in flight
(`decision_running`); chunks that arrive meanwhile go to the primary's view and to a buffer, which
the secondary catches up with until at most `n_catchup` tokens (and at most one `rebuild_batch`)
are left: then it is ready. Where decisions never wait for appends (`decide_on_cached`), a
catch-up pass that no longer shrinks the backlog also ends it: the new primary's pump appends it.
`maybe_swap` (decision thread) swaps it in: as soon as it is ready, or with
`swap_after_decisions` = N exactly at the Nth decision after the eviction (waiting for the rebuild
if needed), so a lockstepped run and its replay swap at the same point of the chunk stream.
If chunks still outrun the rebuild until the primary would overflow its context,
`resolve_overflow` waits `overflow_wait_s` for it, then evicts synchronously once (logged).
In sync mode, or while the secondary is down, an eviction is done in place on the primary's view.

Locks: the view's lock (reasoner_primary.py) is taken first, this part's own lock inside it; the
rebuild thread takes only this part's lock, except when a failed rebuild resets the view.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Optional

from .backend import BackendUnavailable, ReasoningBackend
from .csr_state import Chunk
from .failover import ResourceHealth
from .reasoner_primary import PrimaryView, ViewSnapshot
from .resource_roles import ResourceRoles


class _Stopped(Exception):
    pass


@dataclass
class _Rebuilt:
    """A warmed secondary's view: the tokens it holds, their state version and newest chunk."""
    tokens: List[int]
    version: int
    last_seq: int


class AsrRebuilder:
    def __init__(self, config: Any, view: PrimaryView, roles: ResourceRoles, health: ResourceHealth,
                 log: logging.Logger):
        self.config = config
        self.view = view
        self.roles = roles
        self.health = health
        self.log = log
        self._lock = threading.Lock()
        self._buffer: List[Chunk] = []
        self._ready: Optional[_Rebuilt] = None
        self._reconciling = False
        self._decisions_since_evict = 0
        self._thread: Optional[threading.Thread] = None
        self._warm_thread: Optional[threading.Thread] = None
        self._primary_idle = threading.Event()     # cleared while a decision runs: the rebuild pauses
        self._primary_idle.set()
        self._pausers = 0                          # decision_running contexts open (they nest)
        self._pausers_lock = threading.Lock()
        self._stop = threading.Event()
        self._cancel = threading.Event()
        self._stopping = threading.Event()     # begin_stop: decisions no longer wait for a swap
        self.swaps = 0
        self.overflow_stalls = 0
        self.reconcile_error: Optional[BaseException] = None

    # --- state -----------------------------------------------------------------------------
    @property
    def reconciling(self) -> bool:
        return self._reconciling

    def idle(self) -> bool:
        """No rebuild pending and none waiting for its swap."""
        with self._lock:
            return not self._reconciling and self._ready is None

    def secondary_busy(self) -> bool:
        """A rebuild or head warm-up holds the secondary's core."""
        warming = self._warm_thread is not None and self._warm_thread.is_alive()
        return (self._reconciling and self._ready is None) or warming

    def buffered_tokens(self) -> int:
        with self._lock:
            return sum(c.n_tokens for c in self._buffer)

    @property
    def paused(self) -> bool:
        """The rebuild yields at its next batch boundary (a decision runs or is due)."""
        return not self._primary_idle.is_set()

    @contextlib.contextmanager
    def decision_running(self, pause: bool = True) -> Iterator[None]:
        """While a decision (or a save) runs on the primary, or one is due, the rebuild pauses
        (`pause`); nested uses (a due decision, then the decision) end the pause at the outer end."""
        if not pause:
            yield
            return
        with self._pausers_lock:
            self._pausers += 1
            self._primary_idle.clear()
        try:
            yield
        finally:
            with self._pausers_lock:
                self._pausers -= 1
                if not self._pausers:
                    self._primary_idle.set()

    @contextlib.contextmanager
    def _unpaused(self) -> Iterator[None]:
        """The rebuild runs at full speed inside, even during a decision (the decision waits for it)."""
        paused = not self._primary_idle.is_set()
        self._primary_idle.set()
        try:
            yield
        finally:
            if paused:
                self._primary_idle.clear()

    # --- evictions (called holding the view's lock) ----------------------------------------
    def after_append(self, pieces: List[Chunk]) -> None:
        """New chunks reached the logical state and the primary's view: buffered for a rebuild in
        progress; an eviction when the prefix reached tau_mem."""
        with self._lock:
            if self._reconciling:
                self._buffer.extend(pieces)
        self._maybe_evict()

    def _maybe_evict(self) -> None:
        if self._reconciling or not self.view.evict_if_due():
            return
        if not self.roles.secondary_usable():
            self.view.reset_to_state()    # in place (a stall)
            return
        self.start()

    def start(self) -> None:
        """Warm the secondary on the logical state in the background, then swap (hold the view's lock)."""
        target, version, last_seq = self.view.rebuild_target()
        engine = self.roles.secondary
        assert engine is not None, "a rebuild runs only with a secondary"
        with self._lock:
            self._reconciling = True
            self._decisions_since_evict = 0
            self._buffer = []
        self._thread = threading.Thread(target=self._reconcile, name="asr-reconcile", daemon=True,
                                        args=(engine, target, version, last_seq))
        self._thread.start()

    def reset(self) -> None:
        """Drop the rebuild's results (a failover, an overflow; its thread has ended)."""
        with self._lock:
            self._reconciling = False
            self._ready = None
            self._buffer = []

    # --- the background threads ------------------------------------------------------------
    def warm(self, secondary: Optional[ReasoningBackend], head: List[int]) -> Optional[threading.Thread]:
        """Evaluate the static head on the idle secondary in the background, in `rebuild_batch`
        pieces that yield to the primary (decisions start at once), so the first eviction rebuilds
        only the live chunks; that rebuild waits for it. Only a head that ends a line: pieces end at
        every line end (`by_line`), so the warmed head's cache is bitwise the cold rebuild's, and a
        lockstepped run (swap_after_decisions) decides alike whenever the warm finishes. Returns the
        thread, or None when there is nothing to do."""
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

    def _yield_to_primary(self) -> None:
        while not self._primary_idle.wait(timeout=0.05) and not self._rebuild_late():
            if self._stop.is_set() or self._cancel.is_set():
                raise _Stopped()
        if self._stop.is_set() or self._cancel.is_set():
            raise _Stopped()

    def _rebuild_late(self) -> bool:
        """The primary has used half its room beyond tau_mem: the rebuild stops yielding to decisions
        (a slower decision now, not an overflow stall later)."""
        room = self.roles.primary.n_ctx - self.config.suffix_reserve - self.config.tau_mem
        return self.view.length > self.config.tau_mem + room // 2

    def _reconcile(self, engine: ReasoningBackend, target: List[int], version: int, last_seq: int) -> None:
        if self._warm_thread is not None:       # one user of the secondary at a time
            self._warm_thread.join()
        try:
            engine.sync(target, batch=self.config.rebuild_batch, before_batch=self._yield_to_primary, by_line=True)
            self._catch_up(engine, list(target), version, last_seq)
        except _Stopped:
            return
        except Exception as err:  # keep serving on the primary; retried at the next eviction
            self.reconcile_error = err
            if isinstance(err, BackendUnavailable):     # logged once per outage
                self.health.mark_down(engine.name, engine.healthy, str(err))
            else:
                self.log.error("ASR reconcile on %s failed: %s; decisions continue on %s",
                               engine.name, err, self.roles.primary.name)
            with self.view.locked():
                self.reset()
                self.view.reset_to_state()

    def _catch_up(self, engine: ReasoningBackend, view: List[int], version: int, last_seq: int) -> None:
        """Append the buffered arrivals until few enough are left for the swap; then ready."""
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
                    self._ready = _Rebuilt(view + pending_tokens, version, last_seq)
                    return
            previous = len(pending_tokens)
            engine.extend(pending_tokens, batch=self.config.rebuild_batch, before_batch=self._yield_to_primary,
                          by_line=True)
            view.extend(pending_tokens)

    # --- decision thread -------------------------------------------------------------------
    def maybe_swap(self, deciding: bool = False) -> None:
        """Swap the ready secondary in (with swap_after_decisions: only at its decision boundary)."""
        wanted = self.config.swap_after_decisions
        if wanted > 0 and self._reconciling:     # a fixed decision boundary, not whenever ready
            if not deciding:
                return
            self._decisions_since_evict += 1
            if self._decisions_since_evict < wanted:
                return
            self._await_rebuild()
        with self.view.locked():
            with self._lock:
                rebuilt = self._ready
                if rebuilt is None:
                    return
                for chunk in self._buffer:       # arrived after the secondary became ready
                    rebuilt.tokens.extend(chunk.tokens)
                    rebuilt.last_seq = chunk.seq
                self._ready = None
                self._buffer = []
                self._reconciling = False
                self.swaps += 1
            self.roles.swap()
            newest = max(rebuilt.last_seq, self.view.newest_seq) if rebuilt.tokens else rebuilt.last_seq
            self.view.replace(rebuilt.tokens, rebuilt.version, newest)
            self.log.info("ASR swap %d: %s is primary (state version %d, %d tokens)",
                          self.swaps, self.roles.primary.name, rebuilt.version, len(rebuilt.tokens))
            self._maybe_evict()

    def resolve_overflow(self) -> ViewSnapshot:
        """The primary's view no longer fits its context (chunks outran the background rebuild).

        Give the secondary `overflow_wait_s` at full speed to finish; if it cannot, cancel the
        rebuild and evict synchronously (one logged stall) rather than fail. Returns the view now.
        """
        self.overflow_stalls += 1
        with self._unpaused():
            deadline = time.monotonic() + self.config.overflow_wait_s
            while self._reconciling and self._ready is None and time.monotonic() < deadline:
                time.sleep(0.005)
        self.maybe_swap()
        primary = self.roles.primary
        overflow = not self.view.fits(primary.n_ctx, self.config.suffix_reserve)
        if overflow:
            self.log.warning("chunks arrive faster than the prefix can be rebuilt: primary %s would overflow "
                             "n_ctx=%d; evicting synchronously (stall)", primary.name, primary.n_ctx)
            self.cancel()     # joins the thread: must not hold the view's lock here
        with self.view.locked():
            if overflow:
                self.reset()
                self.view.evict_until_below()
                self.view.reset_to_state()
            return self.view.snapshot()

    def _await_rebuild(self) -> None:
        """Block this decision until the secondary is ready (or its rebuild failed, or a stop began)."""
        with self._unpaused():                   # a pausing rebuild must not wait for us
            while self._ready is None and self._reconciling and not (self._stop.is_set() or self._stopping.is_set()):
                time.sleep(0.002)

    def cancel(self) -> None:
        """Stop a rebuild in progress and wait for its thread (call without the view's lock)."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            paused = not self._primary_idle.is_set()
            self._cancel.set()
            self._primary_idle.set()
            thread.join()
            if paused:
                self._primary_idle.clear()
            self._cancel.clear()

    # --- stopping --------------------------------------------------------------------------
    def wait_reconciled(self, timeout: float, pump: Callable[[], Any]) -> bool:
        """Block until no rebuild is pending, letting `pump` swap a ready one in."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.idle():
                return True
            if self._ready is not None:
                pump()
            time.sleep(0.005)
        return False

    def begin_stop(self) -> None:
        self._stopping.set()

    def close(self) -> bool:
        """Stop the background threads; False when one is still busy (inside llama.cpp, perhaps)."""
        self._stop.set()
        ended = True
        for thread in (self._warm_thread, self._thread):
            if thread is not None:
                thread.join(timeout=10)
                if thread.is_alive():
                    self.log.warning("%s still busy after 10 s: closing without it", thread.name)
                    ended = False
        return ended
