"""CSR reasoning core with Asynchronous State Reconciliation (ASR, Algorithm 1 of the CSR paper).

The logical state (`CachedState`) is the source of truth. Each llama.cpp context (`LlamaEngine`)
is a cache of a *view* of it: a token list it must hold.

* The primary serves decisions. Between decisions `pump()` appends newly arrived chunk tokens to
  its KV cache, so a decision evaluates only the suffix.
* When the prefix reaches `tau_mem`, the oldest chunks are evicted (archived, version k+1). In ASR
  mode a background thread warms the secondary on the shortened state, in small batches that pause
  while a decision is in flight (decisions have priority); chunks that arrive meanwhile go to the
  primary's view (decisions keep running on its old, longer prefix) and to a buffer; the
  secondary catches up with the buffer until fewer than `n_catchup` tokens are left, then marks
  itself ready. The decision thread swaps primary and secondary under the lock at its next step;
  the remaining (< n_catchup) tokens are appended there. No chunk is lost or duplicated: views
  are built only from the logical state and the buffer.
* In sync mode (one context) the primary re-evaluates the shortened state itself on the next
  pump or decision: the latency spike ASR removes, kept as the baseline and for tiny machines.

Decision prompt: the suffix names the running task only when it is a catalogued intent (the name
comes from a topic anyone can publish) and, when the template asks for it, repeats the newest event
chunks; all of it is plain text, never control tokens. With `calibrate` the grammar's first intent
token is calibrated once per head on content-free input (see grammar.py); with `ground_arguments`
string arguments are limited to the names the live state mentions.

Threads: `add_chunk` may be called from any thread; `pump`/`decide`/`save`/`restore` from one
decision thread; the reconcile thread touches only the secondary engine.
"""
from __future__ import annotations

import itertools
import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

from .catalogue import IntentCatalogue
from .csr_state import CachedState, Chunk, ChunkArchive, KIND_EVENT
from .engine import DecodeResult, LlamaEngine, StateFileError
from .grammar import DecisionGrammar
from .prompt import CONTENT_FREE_EVENTS, PromptTemplate, chunk_line, tokenize_suffix

MODES = ("asr", "sync")
log = logging.getLogger("csr_llm.reasoner")
# View epochs are unique across Reasoners: an engine stamped by one Reasoner (engines are shared, e.g.
# by decision_eval) must never pass for synced with another's view.
_VIEW_EPOCHS = itertools.count(1)


@dataclass
class ReasonerConfig:
    tau_mem: int = 4096
    evict_ratio: float = 0.5
    n_catchup: int = 64
    mode: str = "asr"
    rebuild_batch: int = 64          # tokens per background batch (the yield granularity)
    max_chunk_tokens: int = 512
    oversize_policy: str = "reject"
    suffix_reserve: int = 128        # context kept free for suffix + decision tokens
    overflow_wait_s: float = 2.0     # how long a full primary waits for the secondary before evicting itself
    rebuild_pause: bool = True       # the rebuild pauses while a decision runs (False: both run, on two cores)


@dataclass
class Decision:
    result: DecodeResult
    state_version: int
    prefix_tokens: int
    last_chunk_seq: int
    resource: str
    catchup_ms: float                # time spent appending pending chunks before the decision
    stamp: float = field(default_factory=time.time)


class _Stopped(Exception):
    pass


class Reasoner:
    def __init__(self, engines: Sequence[LlamaEngine], catalogue: IntentCatalogue, template: PromptTemplate,
                 config: Optional[ReasonerConfig] = None, archive_path: Union[str, Path, None] = None,
                 logger: Optional[logging.Logger] = None):
        config = config if config is not None else ReasonerConfig()
        if config.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {config.mode!r}")
        if config.mode == "asr" and len(engines) < 2:
            raise ValueError("ASR mode needs two engines (primary and secondary)")
        self.config = config
        self.log = logger or log
        self.primary = engines[0]
        self.secondary: Optional[LlamaEngine] = engines[1] if config.mode == "asr" else None
        self.catalogue = catalogue
        self.grammar = DecisionGrammar(catalogue, self.primary.tokenize_plain)
        self.template = template
        head = self.primary.tokenize(template.head_text(catalogue), bos=True)
        self._enum_patterns = {value: re.compile(r"\b" + re.escape(value), re.IGNORECASE)
                               for intent in catalogue.intents.values() for arg in intent.arguments
                               for value in arg.enum}
        self.rejected_running: List[str] = []
        needed = config.tau_mem + config.suffix_reserve
        for engine in engines[:2 if config.mode == "asr" else 1]:
            if engine.n_ctx < needed:
                raise ValueError(f"{engine.name}: n_ctx={engine.n_ctx} is below tau_mem + suffix_reserve = {needed}")
        self.state = CachedState(head, tau_mem=config.tau_mem, evict_ratio=config.evict_ratio,
                                 max_chunk_tokens=config.max_chunk_tokens, oversize_policy=config.oversize_policy,
                                 archive=ChunkArchive(archive_path))
        self._lock = threading.RLock()
        self._engine_lock = threading.Lock()
        self._primary_idle = threading.Event()
        self._primary_idle.set()
        self._stop = threading.Event()
        self._cancel = threading.Event()
        self._view_epoch = 0        # set by _set_primary_view
        self._set_primary_view(self.state.tokens(), self.state.version)
        self._primary_last_seq = -1
        self._buffer: List[Chunk] = []
        self._reconciling = False
        self._ready: Optional[tuple] = None     # (view, version, last_seq) of a warmed secondary
        self._thread: Optional[threading.Thread] = None
        self.swaps = 0
        self.overflow_stalls = 0
        self.last_seq: Optional[int] = None
        self.seq_gaps = 0
        self.reconcile_error: Optional[BaseException] = None
        self.calibration: Optional[dict] = self._calibrate(head) if template.calibrate else None

    def _calibrate(self, head: List[int]) -> dict:
        """Content-free first-token priors, once per head, one per running task the suffix can name.

        The running task is the known part of the question; the state is the template's neutral
        state lines (sensor summaries, no events) and content-free stand-ins for the events. Runs
        on the primary, left holding the head."""
        priors = {}
        neutral = [t for line in self.template.calibration_state for t in self.primary.tokenize_plain(chunk_line(line))]
        for running in [""] + (self.catalogue.names if self.template.calibrate_per_running else []):
            logits = []
            for stand_in in CONTENT_FREE_EVENTS:
                state = self.primary.tokenize_plain(chunk_line(stand_in)) if stand_in else []
                self.primary.sync(head + neutral + state, by_line=True)
                events = [stand_in] if stand_in else []
                logits.append(self.primary.logits_after(self._suffix_tokens(running, 0, events)))
            priors[running] = self.grammar.calibrate(logits, context=running)
        self.primary.sync(head, by_line=True)
        self.log.info("intent calibration, content-free first-token probabilities with nothing running: %s",
                      ", ".join(f"{name}={p:.3f}" for name, p in priors[""].items()))
        return priors

    def _suffix_tokens(self, running: str, interrupts: int, events: Sequence[str]) -> List[int]:
        return tokenize_suffix(self.template.suffix_segments(running, interrupts, events),
                               self.primary.tokenize, self.primary.tokenize_plain)

    def running_intent(self, running: str) -> str:
        """The running task as the prompt may show it: a catalogued intent name, else nothing."""
        if not running or running in self.catalogue:
            return running or ""
        if len(self.rejected_running) < 16:
            self.rejected_running.append(running[:80])
            self.log.warning("running task %r is not a catalogued intent: shown as nothing", running[:80])
        return ""

    def decision_inputs(self, running: str = "", interrupts: int = 0):
        """(suffix tokens, grounded names, calibration context) for a decision on the current state."""
        with self._lock:
            chunks = list(self.state.chunks)
        events = [c.text for c in chunks if c.kind == KIND_EVENT]
        running = self.running_intent(running)
        suffix = self._suffix_tokens(running, int(interrupts), events)
        grounded = None
        if self.template.ground_arguments:
            text = "\n".join(c.text for c in chunks)
            grounded = [value for value, pattern in self._enum_patterns.items() if pattern.search(text)]
        return suffix, grounded, running

    # --- chunks ----------------------------------------------------------------------------
    def add_chunk(self, seq: int, text: Union[str, bytes], *, source: str = "", kind: int = KIND_EVENT,
                  stamp: float = 0.0) -> List[Chunk]:
        """Tokenize once and append; raises ChunkRejected (logged by the caller) when refused."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        tokens = tuple(self.primary.tokenize_plain(chunk_line(text))) if text.strip() else ()
        chunk = Chunk(int(seq), source, int(kind), text, tokens, float(stamp))
        with self._lock:
            if self.last_seq is not None and seq > self.last_seq + 1:
                self.seq_gaps += seq - self.last_seq - 1
            self.last_seq = seq if self.last_seq is None else max(self.last_seq, seq)
            pieces = self.state.append(chunk, detokenize=self.primary.detokenize)
            for piece in pieces:
                self._primary_view.extend(piece.tokens)
            self._primary_last_seq = chunk.seq
            if self._reconciling:
                self._buffer.extend(pieces)
            self._maybe_evict()
        return pieces

    def _maybe_evict(self) -> None:
        if self._reconciling or not self.state.needs_eviction():
            return
        eviction = self.state.evict()
        self.log.info("evicted %d chunks (%d tokens): state version %d, prefix %d tokens",
                      len(eviction.chunks), eviction.tokens, eviction.state_version, self.state.n_tokens)
        if self.config.mode == "sync":
            self._set_primary_view(self.state.tokens(), self.state.version)
            return
        self._reconciling = True
        self._buffer = []
        target = self.state.tokens()
        self._thread = threading.Thread(target=self._reconcile, name="asr-reconcile", daemon=True,
                                        args=(target, self.state.version, self._primary_last_seq))
        self._thread.start()

    # --- ASR background rebuild ------------------------------------------------------------
    def _yield_to_primary(self) -> None:
        while not self._primary_idle.wait(timeout=0.1):
            if self._stop.is_set() or self._cancel.is_set():
                raise _Stopped()
        if self._stop.is_set() or self._cancel.is_set():
            raise _Stopped()

    def _reconcile(self, target: List[int], version: int, last_seq: int) -> None:
        engine = self.secondary
        assert engine is not None, "reconciliation runs only in ASR mode, which has a secondary"
        try:
            engine.sync(target, batch=self.config.rebuild_batch, before_batch=self._yield_to_primary, by_line=True)
            view = list(target)
            while True:
                with self._lock:
                    pending, self._buffer = self._buffer, []
                    pending_tokens = [t for chunk in pending for t in chunk.tokens]
                    if pending:
                        last_seq = pending[-1].seq
                    if len(pending_tokens) <= self.config.n_catchup:
                        self._ready = (view + pending_tokens, version, last_seq)
                        return
                engine.extend(pending_tokens, batch=self.config.rebuild_batch, before_batch=self._yield_to_primary,
                              by_line=True)
                view.extend(pending_tokens)
        except _Stopped:
            return
        except Exception as err:  # keep serving on the primary; retried at the next eviction
            self.reconcile_error = err
            self.log.error("ASR reconcile on %s failed: %s; decisions continue on %s",
                           engine.name, err, self.primary.name)
            with self._lock:
                self._reconciling = False
                self._buffer = []
                self._set_primary_view(self.state.tokens(), self.state.version)

    def _maybe_swap(self) -> None:
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
            self._set_primary_view(view, version)
            self._primary_last_seq = max(last_seq, self._primary_last_seq) if view else last_seq
            self.swaps += 1
            self.log.info("ASR swap %d: %s is primary (state version %d, %d tokens)",
                          self.swaps, self.primary.name, version, len(view))
            self._maybe_evict()

    def _set_primary_view(self, tokens: List[int], version: int) -> None:
        """Replace (not extend) what the primary must hold; the next sync compares in full."""
        self._primary_view = tokens
        self._primary_version = version
        self._view_epoch = next(_VIEW_EPOCHS)

    # --- decision thread -------------------------------------------------------------------
    def _sync_primary(self) -> None:
        self._maybe_swap()
        with self._lock:
            view = self._primary_view
            epoch = self._view_epoch        # read with the view: another thread may replace both
            target_len = len(view)
            fits = target_len + self.config.suffix_reserve <= self.primary.n_ctx
        if not fits:
            view, target_len, epoch = self._resolve_overflow()
        engine = self.primary
        known = len(engine.tokens)
        if engine.view_epoch == epoch and known <= target_len:
            engine.extend(view[known:target_len], by_line=True)   # fast path: the view only grew since the last sync
        else:
            engine.sync(view[:target_len], by_line=True)
            engine.view_epoch = epoch

    def _resolve_overflow(self) -> Tuple[List[int], int, int]:
        """The primary's view no longer fits its context (chunks outran the background rebuild).

        Give the secondary `overflow_wait_s` at full speed to finish; if it cannot, cancel the
        reconciliation and evict synchronously (one logged stall) rather than fail.
        """
        self.overflow_stalls += 1
        self._primary_idle.set()
        deadline = time.monotonic() + self.config.overflow_wait_s
        while self._reconciling and self._ready is None and time.monotonic() < deadline:
            time.sleep(0.005)
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

    def _cancel_reconcile(self) -> None:
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._cancel.set()
            self._primary_idle.set()
            thread.join()
            self._primary_idle.clear()
            self._cancel.clear()

    def pump(self) -> None:
        """Append pending chunk tokens to the primary's KV cache (call between decisions).

        Appending is not latency-critical, so the background rebuild keeps running meanwhile (on
        its own core); it pauses only while a decision is in flight.
        """
        with self._engine_lock:
            self._sync_primary()

    def decide(self, running: str = "", interrupts: int = 0) -> Decision:
        with self._engine_lock:
            if self.config.rebuild_pause:
                self._primary_idle.clear()
            try:
                start = time.perf_counter()
                self._sync_primary()
                catchup_ms = (time.perf_counter() - start) * 1e3
                suffix, grounded, context = self.decision_inputs(running, interrupts)
                result = self.primary.decide(suffix, self.grammar, grounded, context)
                with self._lock:
                    return Decision(result, self._primary_version, result.prefix_tokens, self._primary_last_seq,
                                    self.primary.name, catchup_ms)
            finally:
                self._primary_idle.set()

    # --- status ----------------------------------------------------------------------------
    @property
    def reconciling(self) -> bool:
        return self._reconciling

    def status(self) -> dict:
        with self._lock:
            counters = self.state.counters
            return {"prefix_tokens": self.state.n_tokens, "static_tokens": len(self.state.head_tokens),
                    "tau_mem": self.state.tau_mem, "chunk_count": len(self.state.chunks),
                    "state_version": self.state.version, "reconciling": self._reconciling,
                    "primary_resource": self.primary.name,
                    "buffered_tokens": sum(c.n_tokens for c in self._buffer),
                    "last_chunk_seq": -1 if self.last_seq is None else self.last_seq,
                    "seq_gaps": self.seq_gaps, "evictions": counters.evictions, "swaps": self.swaps,
                    "evicted_chunks": counters.evicted_chunks, "evicted_tokens": counters.evicted_tokens,
                    "rejected_chunks": counters.rejected_chunks, "primary_view_tokens": len(self._primary_view)}

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

    # --- warm restart ----------------------------------------------------------------------
    def save(self, directory: Union[str, Path]) -> Optional[dict]:
        """Save the logical state and the primary's KV cache; skipped while reconciling."""
        directory = Path(directory)
        with self._engine_lock:
            self._primary_idle.clear()
            try:
                self._sync_primary()
                with self._lock:
                    if self._reconciling or self._primary_view != self.state.tokens():
                        self.log.warning("state not saved: reconciliation in progress")
                        return None
                    snapshot = dict(self.state.snapshot(), last_seq=self.last_seq, seq_gaps=self.seq_gaps)
                directory.mkdir(parents=True, exist_ok=True)
                stamp = self.primary.save_state(directory / "kv_state.bin", state_version=self.state.version)
                (directory / "csr_state.json").write_text(json.dumps(snapshot))
                return stamp
            finally:
                self._primary_idle.set()

    def restore(self, directory: Union[str, Path]) -> dict:
        """Restore a saved state: the live chunks, and the KV cache when it matches exactly.

        Returns {"chunks", "kv_restored", "tokens"}; raises StateFileError when nothing usable is there.
        """
        directory = Path(directory)
        try:
            snapshot = json.loads((directory / "csr_state.json").read_text())
        except (OSError, ValueError) as err:
            raise StateFileError(f"saved CSR state {directory / 'csr_state.json'}: unreadable ({err})") from err
        with self._engine_lock, self._lock:
            try:
                self.state.restore(snapshot)
            except (KeyError, TypeError, ValueError) as err:
                raise StateFileError(f"saved CSR state in {directory} refused: {err}") from err
            self.last_seq = snapshot.get("last_seq")
            self.seq_gaps = int(snapshot.get("seq_gaps", 0))
            self._set_primary_view(self.state.tokens(), self.state.version)
            self._primary_last_seq = -1 if self.last_seq is None else self.last_seq
            kv_restored = False
            try:
                self.primary.load_state(directory / "kv_state.bin", state_version=self.state.version,
                                        expected_tokens=self._primary_view)
                kv_restored = True
            except StateFileError as err:
                self.log.error("%s; the prefix will be recomputed", err)
                self.primary.clear()
            return {"chunks": len(self.state.chunks), "kv_restored": kv_restored, "tokens": len(self._primary_view)}

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
