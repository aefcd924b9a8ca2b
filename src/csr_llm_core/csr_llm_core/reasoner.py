"""CSR reasoning core with Asynchronous State Reconciliation (ASR, Algorithm 1 of the CSR paper).

The logical state (`CachedState`) is the source of truth. Each llama.cpp context (`LlamaEngine`)
is a cache of a *view* of it: a token list it must hold.

* The primary serves decisions. Between decisions `pump()` appends newly arrived chunk tokens to
  its KV cache, so a decision evaluates only the suffix. With `decide_on_cached` a decision never
  waits for an append: `pump(preempt)` stops at the next `rebuild_batch` boundary once `preempt()`
  says a decision is due, and the decision runs on the whole chunks the primary already holds (the
  newer ones reach it through the suffix's newest events; the next pump appends them).
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

Resources (backend.py): R1 and R2 are embedded llama.cpp contexts or inference servers
(http_backend.py), in any mix, plus an optional embedded `fallback`. A resource that fails
(`BackendUnavailable`) is marked down once (failover.py); decisions move to the secondary, else to
the fallback, which re-syncs from the logical state, so no chunk is lost; in-flight ASR work is
dropped and an eviction while the secondary is down is done in place. A resource that comes back
is synced again before it serves; the fallback hands back to it through the ASR warm-up and swap.

The `Reasoner` composes its parts: `PrimaryView` and `PrimaryAppender` (reasoner_primary.py: the
logical state, the primary's view, appends to the primary), `AsrRebuilder` (asr_rebuilder.py:
evictions, the background rebuild, the swap), `ResourceRoles` (resource_roles.py: which resource
serves, failover, tokenizing) and `Checkpointer` (checkpointer.py: warm restart). The suffix,
grounding and calibration are decision_prompt.py's.

Threads: `add_chunk` may be called from any thread; `pump`/`decide`/`save`/`restore` from one
decision thread; the reconcile thread touches only the secondary engine.
(plain module, no rclpy)
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager, List, Optional, Sequence, Union

from csr_llm_common.catalogue import IntentCatalogue, PausedTask

from .archive_recall import ArchiveRecall, archive_header
from .asr_rebuilder import AsrRebuilder
from .backend import BackendUnavailable, DecisionRefused, NoResourceAvailable, ReasoningBackend
from .checkpointer import Checkpointer
from .csr_state import CachedState, Chunk, ChunkArchive, KIND_EVENT
from .decision_memo import DecisionMemo, decision_key
from .decision_prompt import DecisionPrompt
from .engine import DecodeResult
from .failover import ResourceHealth
from .grammar import DecisionGrammar
from .prompt import PromptTemplate
from .reasoner_primary import Preempted, PrimaryAppender, PrimaryView
from .resource_roles import ResourceRoles

MODES = ("asr", "sync")
log = logging.getLogger("csr_llm.reasoner")


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
    # after an eviction, the k evicted chunks of this session that best match the newest events
    # (BM25, archive_recall.py) open the decision suffix, within archive_recall_tokens; 0 = off
    archive_recall_k: int = 0
    archive_recall_tokens: int = 256
    # 0: swap as soon as the rebuild is ready (wall-time dependent: a robot). N > 0: swap exactly at
    # the Nth decision after an eviction, waiting for the rebuild if needed, and evaluate every
    # context in rebuild_batch pieces, so run and replay decide alike (lockstepped sim, replay)
    swap_after_decisions: int = 0
    # a decision runs on the whole chunks the primary has evaluated and never waits for an append
    # (pump stops for it at a batch boundary); beyond max_uncached_tokens left behind it appends
    # first. Ignored with swap_after_decisions > 0: there every decision includes every chunk
    decide_on_cached: bool = True
    max_uncached_tokens: int = 512
    # evaluate the static head on an idle local secondary at start, so the first eviction rebuilds
    # only the live chunks (False: that rebuild evaluates the head too; what bench-rtf compares)
    warm_head: bool = True
    # a decision whose inputs (cached tokens, suffix, grounding, context) equal the previous one's
    # returns its result without evaluating (decision_memo.py); False: every decision evaluates
    reuse_decisions: bool = True
    # threads for a local primary's appends while the secondary is idle (decisions keep n_threads;
    # results are bit-identical for any count); 1 = off
    append_threads: int = 1


@dataclass
class Decision:
    result: DecodeResult
    state_version: int
    prefix_tokens: int
    last_chunk_seq: int
    resource: str
    catchup_ms: float                # time spent appending pending chunks before the decision
    stamp: float = field(default_factory=time.time)
    reused: bool = False             # the previous decision's result: its inputs were unchanged


class Reasoner:
    """The facade: chunks in, decisions out, over the parts above."""

    def __init__(self, engines: Sequence[ReasoningBackend], catalogue: IntentCatalogue, template: PromptTemplate,
                 config: Optional[ReasonerConfig] = None, archive_path: Union[str, Path, None] = None,
                 logger: Optional[logging.Logger] = None, fallback: Optional[ReasoningBackend] = None,
                 health: Optional[ResourceHealth] = None, session: str = ""):
        config = config if config is not None else ReasonerConfig()
        if config.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {config.mode!r}")
        if config.mode == "asr" and len(engines) < 2:
            raise ValueError("ASR mode needs two engines (primary and secondary)")
        self.config = config
        self.log = logger or log
        self.health = health or ResourceHealth(self.log)
        self.roles = ResourceRoles(engines, asr=config.mode == "asr", fallback=fallback, health=self.health,
                                   log=self.log)
        self.catalogue = catalogue
        self.template = template
        self.prompt = DecisionPrompt(catalogue, template, self.tokenize, self.tokenize_plain, self.log)
        self.grammar = DecisionGrammar(catalogue, self.tokenize_plain)
        head = self.tokenize(template.head_text(catalogue), bos=True)
        self._check_context_sizes()
        self.roles.check_one_vocabulary()
        for engine in self.resources:     # a window-only cache restores the head after an eviction's deep cut
            keep_prefix = getattr(engine, "keep_prefix", None)
            if keep_prefix is not None:
                keep_prefix(head)
        state = CachedState(head, tau_mem=config.tau_mem, evict_ratio=config.evict_ratio,
                            max_chunk_tokens=config.max_chunk_tokens, oversize_policy=config.oversize_policy,
                            archive=ChunkArchive(archive_path, archive_header(session, self.resources, config)))
        self.view = PrimaryView(state, self.log)
        self.appender = PrimaryAppender(config, self.view)
        self.rebuilder = AsrRebuilder(config, self.view, self.roles, self.health, self.log)
        self.checkpointer = Checkpointer(self.view, self.roles, self.rebuilder, self.log)
        self.archive_recall = ArchiveRecall(archive_path, session=state.archive.session,
                                            count_tokens=lambda text: len(self.tokenize_plain(text)),
                                            logger=self.log) if config.archive_recall_k > 0 else None
        self._engine_lock = threading.Lock()     # the decision thread's engine work, one call at a time
        self.refused_decisions = 0
        self.last_cached_tokens = -1
        self.memo = DecisionMemo(enabled=config.reuse_decisions)
        self.calibration: Optional[dict] = None
        self.grammar.intent_adapter = self.prompt.load_adapter(self.resources, self.grammar, head)
        # with an adapter its bias replaces the content-free priors: no calibration then
        calibrate = template.calibrate and self.grammar.intent_adapter is None
        if calibrate and all(e.is_local for e in self.resources):
            self.calibration = self.prompt.calibrate(self.primary, self.grammar, head)
        elif calibrate:            # one decision policy on every resource, so none is calibrated
            self.log.warning("intent calibration needs next-token logits in this process: off for every "
                             "resource, as %s run on a server",
                             ", ".join(e.name for e in self.resources if not e.is_local))

    def _check_context_sizes(self) -> None:
        recall = self.config.archive_recall_tokens if self.config.archive_recall_k else 0
        needed = self.config.tau_mem + self.config.suffix_reserve + recall
        for engine in self.resources:
            if engine.n_ctx < needed:
                raise ValueError(f"{engine.name}: n_ctx={engine.n_ctx} is below tau_mem + suffix_reserve"
                                 + (" + archive_recall_tokens" if recall else "") + f" = {needed}")

    # --- the parts' figures, as attributes (callers read these) ------------------------------
    primary = property(lambda self: self.roles.primary)
    secondary = property(lambda self: self.roles.secondary)
    fallback = property(lambda self: self.roles.fallback)
    resources = property(lambda self: self.roles.resources)
    failovers = property(lambda self: self.roles.failovers)
    state = property(lambda self: self.view.state)
    last_seq = property(lambda self: self.view.last_seq)
    seq_gaps = property(lambda self: self.view.seq_gaps)
    sequence_epoch = property(lambda self: self.view.sequence_epoch)
    reconciling = property(lambda self: self.rebuilder.reconciling)
    reconcile_error = property(lambda self: self.rebuilder.reconcile_error)
    swaps = property(lambda self: self.rebuilder.swaps)
    overflow_stalls = property(lambda self: self.rebuilder.overflow_stalls)
    append_batch_s = property(lambda self: self.appender.append_batch_s)
    preempted_pumps = property(lambda self: self.appender.preempted_pumps)
    rejected_running = property(lambda self: self.prompt.rejected_running)

    def tokenize(self, text: str, *, bos: bool = False) -> List[int]:
        return self.roles.tokenize(text, bos=bos)

    def tokenize_plain(self, text: str) -> List[int]:
        return self.roles.tokenize_plain(text)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.roles.detokenize(tokens)

    def running_intent(self, running: str) -> str:
        return self.prompt.running_intent(running)

    def decision_inputs(self, running: str = "", interrupts: int = 0, paused: Optional[PausedTask] = None):
        """(suffix tokens, grounded names, calibration context) for a decision on the current state."""
        with self.view.locked():
            chunks = list(self.state.chunks)
            evicted = self.state.counters.evictions > 0
        suffix, grounded, context = self.prompt.inputs(chunks, running, interrupts, paused)
        if self.archive_recall is not None and evicted:
            query = "\n".join([c.text for c in chunks if c.kind == KIND_EVENT][-3:] + [context])
            suffix = self.archive_recall.suffix_tokens(query, self.config.archive_recall_k,
                                                       self.config.archive_recall_tokens, self.tokenize_plain) + suffix
        return suffix, grounded, context

    # --- chunks ----------------------------------------------------------------------------
    def add_chunk(self, seq: int, text: Union[str, bytes], *, source: str = "", kind: int = KIND_EVENT,
                  stamp: float = 0.0) -> List[Chunk]:
        """Tokenize once and append; raises ChunkRejected (logged by the caller) when refused.

        When no resource answers to tokenize (every server down, no embedded engine) the chunk is
        kept, in order, and appended by the first call that can tokenize again."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        self.view.queue(seq, source, kind, text, stamp)
        return self._append_queued()

    def _append_queued(self) -> List[Chunk]:
        return self.view.append_queued(self.tokenize_plain, self.detokenize, self.rebuilder.after_append)

    # --- decision thread -------------------------------------------------------------------
    def decide(self, running: str = "", interrupts: int = 0, paused: Optional[PausedTask] = None) -> Decision:
        """A decision on the current state; NoResourceAvailable when every resource is down,
        DecisionRefused when the serving resource answered with something not catalogued."""
        with self._engine_lock:
            self._append_queued()
            while True:
                serving = self.primary
                try:
                    return self._decide_on_primary(running, interrupts, paused)
                except BackendUnavailable as err:
                    self._fail_over(serving, err)
                except DecisionRefused:
                    self.refused_decisions += 1
                    raise

    def _decide_on_primary(self, running: str, interrupts: int, paused: Optional[PausedTask]) -> Decision:
        with self.rebuilder.decision_running(pause=self.config.rebuild_pause):
            start = time.perf_counter()
            self._sync_primary(deciding=True)
            catchup_ms = (time.perf_counter() - start) * 1e3
            suffix, grounded, context = self.decision_inputs(running, interrupts, paused)
            began = time.perf_counter()
            primary = self.primary
            key = decision_key(primary.name, primary.tokens, suffix, grounded, context,
                               policy=id(self.grammar.intent_adapter))
            result = self.memo.lookup(key, began)
            reused = result is not None
            if result is None:
                result = primary.decide(suffix, self.grammar, grounded, context)
                self.memo.store(key, result)
            self.last_cached_tokens = result.cached_tokens
            with self.view.locked():
                return Decision(result, self.view.version, result.prefix_tokens, self.appender.held_seq,
                                primary.name, catchup_ms, reused=reused)

    def pump(self, preempt: Optional[Callable[[], bool]] = None) -> bool:
        """Append pending chunk tokens to the primary's KV cache (call between decisions); False
        when `preempt()` (asked before each `rebuild_batch` tokens) stopped it for a due decision.

        Appending is not latency-critical, so the background rebuild keeps running meanwhile (on
        its own core); it pauses only while a decision is in flight.
        """
        with self._engine_lock:
            self._append_queued()
            while True:
                serving = self.primary
                try:
                    self._sync_primary(preempt=preempt)
                    return True
                except Preempted:
                    return False
                except BackendUnavailable as err:
                    try:
                        self._fail_over(serving, err)
                    except NoResourceAvailable:
                        return True   # nothing can hold the prefix now; the logical state keeps every chunk

    def decision_due(self) -> ContextManager[None]:
        """The owner has a decision due: the background rebuild yields from now (with
        `rebuild_pause`), as it does while a decision runs."""
        return self.rebuilder.decision_running(pause=self.config.rebuild_pause)

    def pump_should_stop(self, seconds_to_due: float) -> bool:
        """See PrimaryAppender.should_stop."""
        return self.appender.should_stop(seconds_to_due, self.uncached_tokens)

    @property
    def uncached_tokens(self) -> int:
        """Tokens of the primary's view its cache does not hold yet (what `pump` would append)."""
        return self.view.uncached_tokens(self.primary)

    def _sync_primary(self, deciding: bool = False, preempt: Optional[Callable[[], bool]] = None) -> None:
        """Take resources back, swap a ready secondary in, then bring the primary to its view."""
        self._check_resources()
        self.rebuilder.maybe_swap(deciding)
        target = self.view.snapshot()
        if target.length + self.config.suffix_reserve > self.primary.n_ctx:
            target = self.rebuilder.resolve_overflow()
        self.appender.sync(self.primary, target, deciding=deciding, preempt=preempt,
                           secondary_busy=self.rebuilder.secondary_busy())

    def _check_resources(self) -> None:
        """Take back recovered resources; a primary known to be down fails over before it is used."""
        for name in self.health.take_recovered():
            with self.view.locked():
                if self.roles.take_back(name, may_rebuild=not self.rebuilder.reconciling):
                    self.rebuilder.start()     # move back off the fallback through warm-up and swap
        if self.health.is_down(self.primary.name):
            raise BackendUnavailable(f"{self.primary.name} is down")

    def _fail_over(self, failed: ReasoningBackend, err: BackendUnavailable) -> None:
        """The primary failed: serve from the secondary, else the fallback, synced from the logical state."""
        self.rebuilder.cancel()     # joins the thread: must not hold the view's lock here
        with self.view.locked():
            self.roles.fail_over(failed, err)
            self.rebuilder.reset()
            self.view.reset_to_state()

    # --- status ----------------------------------------------------------------------------
    def status(self) -> dict:
        with self.view.locked():
            counts = self.view.counts()
            return {**counts, "reconciling": self.rebuilder.reconciling, "primary_resource": self.primary.name,
                    "buffered_tokens": self.rebuilder.buffered_tokens(), "swaps": self.rebuilder.swaps,
                    "cached_tokens": self.last_cached_tokens, "failovers": self.roles.failovers,
                    "refused_decisions": self.refused_decisions, "down_resources": self.health.down,
                    "preempted_pumps": self.appender.preempted_pumps,
                    "overflow_stalls": self.rebuilder.overflow_stalls, "reused_decisions": self.memo.reused}

    # --- background rebuild and stopping ---------------------------------------------------
    def warm_secondary(self) -> Optional[threading.Thread]:
        """See AsrRebuilder.warm: the head on the idle secondary, so the first eviction rebuilds less."""
        return self.rebuilder.warm(self.secondary, self.state.head_tokens)

    def wait_reconciled(self, timeout: float = 60.0) -> bool:
        """Block until no reconciliation is pending (tests and benchmarks)."""
        return self.rebuilder.wait_reconciled(timeout, self.pump)

    def begin_stop(self) -> None:
        """The owner is stopping: a decision waiting for a swap at its fixed boundary decides on the
        current primary instead (a slow rebuild would hold the stop); the rebuild goes on until close."""
        self.rebuilder.begin_stop()

    def close(self) -> bool:
        """Stop the background threads; False when one is still busy (inside llama.cpp, perhaps):
        its engine must then stay open until the process exits."""
        ended = self.rebuilder.close()
        self.health.close()
        return ended

    # --- warm restart (checkpointer.py) ----------------------------------------------------
    def start_sequence(self, epoch: int, first_seq: int) -> None:
        """A restarted aggregator: its sequence (under a newer epoch) continues this state."""
        self.view.start_sequence(epoch, first_seq)

    def save(self, directory: Union[str, Path]) -> Optional[dict]:
        """Save the logical state and an embedded primary's KV cache (skipped while reconciling).

        A server primary is not touched (it may be down): the logical state alone is saved."""
        with self._engine_lock, self.rebuilder.decision_running():
            local = self.primary.is_local
            if local:
                self._sync_primary()
            return self.checkpointer.save(directory, local=local)

    def save_at_stop(self, directory: Union[str, Path], wait_s: float) -> dict:
        """The shutdown save: the state with its KV cache when a pending reconciliation ends within
        wait_s, else the logical state alone (a restart recomputes the prefix), so a stop never waits
        on a slow rebuild and never loses an accepted chunk. Returns {"chunks", "kv_saved"}."""
        if self.wait_reconciled(timeout=wait_s) and self.save(directory) is not None:
            with self.view.locked():
                return {"chunks": len(self.state.chunks), "kv_saved": bool(self.primary.is_local)}
        return {"chunks": self.checkpoint(directory), "kv_saved": False}

    def checkpoint(self, directory: Union[str, Path]) -> int:
        """See Checkpointer.checkpoint: the logical state alone, without taking the engine."""
        return self.checkpointer.checkpoint(directory)

    def restore(self, directory: Union[str, Path]) -> dict:
        """See Checkpointer.restore: {"chunks", "kv_restored", "tokens"}; StateFileError when unusable."""
        with self._engine_lock:
            return self.checkpointer.restore(directory)
