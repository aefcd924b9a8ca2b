"""CSR reasoning core with Asynchronous State Reconciliation (ASR, Algorithm 1 of the CSR paper).

The logical state (`CachedState`) is the source of truth. Each llama.cpp context (`LlamaEngine`)
is a cache of a *view* of it: a token list it must hold.

* The primary serves decisions. Between decisions `pump()` appends newly arrived chunk tokens to
  its KV cache, so a decision evaluates only the suffix. With `decide_on_cached` a decision never
  waits for an append: `pump(preempt)` stops at the next `rebuild_batch` boundary once `preempt()`
  says a decision is due, and the decision runs on the whole chunks the primary already holds (the
  newer ones reach it through the suffix's newest events; the next pump appends them); that part
  is reasoner_append.py's.
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
The suffix, grounding and calibration are decision_prompt.py's.

Threads: `add_chunk` may be called from any thread; `pump`/`decide`/`save`/`restore` from one
decision thread; the reconcile thread touches only the secondary engine.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Union

from .archive_recall import ArchiveRecall, archive_header
from .backend import BackendUnavailable, DecisionRefused, NoResourceAvailable, ReasoningBackend
from csr_llm_common.catalogue import IntentCatalogue, PausedTask
from .csr_state import CachedState, Chunk, ChunkArchive, KIND_EVENT
from .decision_memo import DecisionMemo, decision_key
from .decision_prompt import DecisionPrompt
from .engine import DecodeResult
from .failover import FailoverMixin, ResourceHealth
from .grammar import DecisionGrammar
from .prompt import PromptTemplate, chunk_line
from .reasoner_append import PrimaryAppendMixin
from .reasoner_asr import AsrRebuildMixin
from .reasoner_restart import WarmRestartMixin

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


class Reasoner(PrimaryAppendMixin, AsrRebuildMixin, FailoverMixin, WarmRestartMixin):
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
        self.primary = engines[0]
        self.secondary: Optional[ReasoningBackend] = engines[1] if config.mode == "asr" else None
        self.fallback = fallback
        self.resources = list(engines[:2 if config.mode == "asr" else 1]) + ([fallback] if fallback else [])
        if len({e.name for e in self.resources}) < len(self.resources):
            raise ValueError("every resource needs its own name: " + ", ".join(e.name for e in self.resources))
        self.health = health or ResourceHealth(self.log)
        # tokens are counted in one vocabulary: an embedded engine's when there is one (never down)
        self._tokenizers = sorted(self.resources, key=lambda e: not e.is_local)
        self.catalogue = catalogue
        self.template = template
        self.prompt = DecisionPrompt(catalogue, template, self.tokenize, self.tokenize_plain, self.log)
        self.grammar = DecisionGrammar(catalogue, self.tokenize_plain)
        head = self.tokenize(template.head_text(catalogue), bos=True)
        recall = config.archive_recall_tokens if config.archive_recall_k else 0
        needed = config.tau_mem + config.suffix_reserve + recall
        for engine in self.resources:
            if engine.n_ctx < needed:
                raise ValueError(f"{engine.name}: n_ctx={engine.n_ctx} is below tau_mem + suffix_reserve"
                                 + (" + archive_recall_tokens" if recall else "") + f" = {needed}")
        self._check_one_vocabulary()
        for engine in self.resources:     # a window-only cache restores the head after an eviction's deep cut
            keep_prefix = getattr(engine, "keep_prefix", None)
            if keep_prefix is not None:
                keep_prefix(head)
        self.state = CachedState(head, tau_mem=config.tau_mem, evict_ratio=config.evict_ratio,
                                 max_chunk_tokens=config.max_chunk_tokens, oversize_policy=config.oversize_policy,
                                 archive=ChunkArchive(archive_path, archive_header(session, self.resources, config)))
        self.archive_recall = ArchiveRecall(archive_path, session=self.state.archive.session,
                                            count_tokens=lambda text: len(self.tokenize_plain(text)),
                                            logger=self.log) if config.archive_recall_k > 0 else None
        self._lock = threading.RLock()
        self._engine_lock = threading.Lock()
        self._primary_idle = threading.Event()
        self._primary_idle.set()
        self._stop = threading.Event()
        self._cancel = threading.Event()
        self._stopping = threading.Event()     # begin_stop: decisions no longer wait for a swap
        self._view_epoch = 0        # set by _set_primary_view
        self._set_primary_view(self.state.tokens(), self.state.version)
        self._primary_last_seq = -1
        self._held_seq = -1                     # the newest chunk in the primary's cache at the last sync
        self._buffer: List[Chunk] = []
        self._untokenized: List[tuple] = []     # accepted while no tokenizer answered: appended in order later
        self._reconciling = False
        self._decisions_since_evict = 0
        self._ready: Optional[tuple] = None     # (view, version, last_seq) of a warmed secondary
        self._thread: Optional[threading.Thread] = None
        self._warm_thread: Optional[threading.Thread] = None
        self.swaps = 0
        self.overflow_stalls = 0
        self.preempted_pumps = 0
        self.append_batch_s = 0.1                # recent time per appended batch (callers look ahead with it)
        self.failovers = 0
        self.refused_decisions = 0
        self.last_cached_tokens = -1
        self.memo = DecisionMemo(enabled=config.reuse_decisions)
        self.last_seq: Optional[int] = None
        self.sequence_epoch = 0                  # the aggregator start the sequence belongs to (0: unknown)
        self.seq_gaps = 0
        self.reconcile_error: Optional[BaseException] = None
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

    @property
    def rejected_running(self) -> List[str]:
        return self.prompt.rejected_running

    def running_intent(self, running: str) -> str:
        return self.prompt.running_intent(running)

    def decision_inputs(self, running: str = "", interrupts: int = 0, paused: Optional[PausedTask] = None):
        """(suffix tokens, grounded names, calibration context) for a decision on the current state."""
        with self._lock:
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
        with self._lock:
            if self.last_seq is not None and seq > self.last_seq + 1:
                self.seq_gaps += seq - self.last_seq - 1
            self.last_seq = seq if self.last_seq is None else max(self.last_seq, seq)
            self._untokenized.append((int(seq), source, int(kind), text, float(stamp)))
        return self._append_untokenized()

    def _append_untokenized(self) -> List[Chunk]:
        appended: List[Chunk] = []
        while True:
            with self._lock:
                if not self._untokenized:
                    return appended
                seq, source, kind, text, stamp = self._untokenized[0]
            try:
                tokens = tuple(self.tokenize_plain(chunk_line(text))) if text.strip() else ()
            except NoResourceAvailable:
                return appended
            chunk = Chunk(seq, source, kind, text, tokens, stamp)
            with self._lock:
                self._untokenized.pop(0)
                pieces = self.state.append(chunk, detokenize=self.detokenize)    # ChunkRejected: refused, archived
                for piece in pieces:
                    self._primary_view.extend(piece.tokens)
                self._primary_last_seq = chunk.seq
                if self._reconciling:
                    self._buffer.extend(pieces)
                self._maybe_evict()
            appended.extend(pieces)

    def _maybe_evict(self) -> None:
        if self._reconciling or not self.state.needs_eviction():
            return
        eviction = self.state.evict()
        self.log.info("evicted %d chunks (%d tokens): state version %d, prefix %d tokens",
                      len(eviction.chunks), eviction.tokens, eviction.state_version, self.state.n_tokens)
        secondary = self.secondary
        if self.config.mode == "sync" or secondary is None or self.health.is_down(secondary.name):
            self._set_primary_view(self.state.tokens(), self.state.version)    # in place (a stall)
            return
        self._start_reconcile()

    def _set_primary_view(self, tokens: List[int], version: int) -> None:
        """Replace (not extend) what the primary must hold; the next sync compares in full."""
        self._primary_view = tokens
        self._primary_version = version
        self._view_epoch = next(_VIEW_EPOCHS)

    # --- decision thread -------------------------------------------------------------------
    def decide(self, running: str = "", interrupts: int = 0, paused: Optional[PausedTask] = None) -> Decision:
        """A decision on the current state; NoResourceAvailable when every resource is down,
        DecisionRefused when the serving resource answered with something not catalogued."""
        with self._engine_lock:
            self._append_untokenized()
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
        if self.config.rebuild_pause:
            self._primary_idle.clear()
        try:
            start = time.perf_counter()
            self._sync_primary(deciding=True)
            catchup_ms = (time.perf_counter() - start) * 1e3
            suffix, grounded, context = self.decision_inputs(running, interrupts, paused)
            began = time.perf_counter()
            key = decision_key(self.primary.name, self.primary.tokens, suffix, grounded, context,
                               policy=id(self.grammar.intent_adapter))
            result = self.memo.lookup(key, began)
            reused = result is not None
            if result is None:
                result = self.primary.decide(suffix, self.grammar, grounded, context)
                self.memo.store(key, result)
            self.last_cached_tokens = result.cached_tokens
            with self._lock:
                return Decision(result, self._primary_version, result.prefix_tokens, self._held_seq,
                                self.primary.name, catchup_ms, reused=reused)
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
                    "rejected_chunks": counters.rejected_chunks, "primary_view_tokens": len(self._primary_view),
                    "cached_tokens": self.last_cached_tokens, "failovers": self.failovers,
                    "refused_decisions": self.refused_decisions, "down_resources": self.health.down,
                    "untokenized_chunks": len(self._untokenized), "preempted_pumps": self.preempted_pumps,
                    "overflow_stalls": self.overflow_stalls, "reused_decisions": self.memo.reused}

