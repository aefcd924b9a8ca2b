"""One llama.cpp context whose KV cache mirrors a token list exactly (llama-cpp-python, low level).

The engine keeps `tokens`, the ids whose keys/values are in the context's KV cache, in order.
`extend` appends (in small batches, optionally pausing between them), `truncate` rolls back, and
`sync` makes the cache equal a target list while reusing the longest common prefix. `decide`
evaluates a suffix, runs the constrained decision grammar greedily, then rolls the cache back to
the prefix, so suffixes never pollute it. Saved KV state files are kv_state_file.py's.
"""
from __future__ import annotations

import contextlib
import ctypes
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Union

import numpy as np

from .backend import sync_cache
from .grammar import DecisionGrammar, ParsedDecision
from .kv_state_file import STATE_MAGIC, StateFileError, tokens_digest  # noqa: F401 - part of this module's API
from .kv_state_file import read_state_file, read_state_stamp, write_state_file
from .model import load_llama, resolve_model_path


class ContextFullError(RuntimeError):
    """The tokens to evaluate do not fit in the context window."""


@dataclass
class DecodeResult:
    decision: ParsedDecision
    tokens: List[int]          # every token of the decision text (chosen and grammar-fixed)
    chosen: List[int]          # the tokens the model chose
    text: str                  # the decision text after the scaffold
    ttft_ms: float             # suffix evaluation + first choice
    total_ms: float            # until the decision was complete
    prefix_tokens: int         # cached prefix length the decision was made on
    suffix_tokens: int
    cached_tokens: int = -1    # prompt tokens served from the cache (-1: the resource did not say)


class LlamaEngine:
    """A llama.cpp context plus the exact token list its KV cache holds (the embedded backend)."""

    is_local = True

    def __init__(self, model_path: Union[str, Path, None] = None, *, n_ctx: int = 4096, n_threads: int = 1,
                 n_batch: int = 256, name: str = "R1", llm=None, flash_attn: bool = False,
                 kv_cache_type: str = "f16", swa_full: bool = True):
        self.model_path = resolve_model_path(model_path)
        self.llm = llm if llm is not None else load_llama(self.model_path, n_ctx=n_ctx, n_threads=n_threads,
                                                          n_batch=n_batch, flash_attn=flash_attn,
                                                          kv_cache_type=kv_cache_type, swa_full=swa_full)
        self.name = name
        self.n_threads = n_threads
        self.n_ctx = self.llm.n_ctx()
        self.n_batch = n_batch
        self.n_vocab = self.llm.n_vocab()
        self.n_embd = self.llm.n_embd()
        # a local layer's window when its cache keeps only the window (swa_full off), else 0
        self.n_swa = _window_only_swa(self.llm)
        self.tokens: List[int] = []
        self.window_resets = 0  # deep cuts that cleared the window-only cache
        self.window_restores = 0  # ... of those, the ones the kept prefix's snapshot restored
        self._keep_tokens: List[int] = []    # keep_prefix: the prefix to snapshot on a window-only cache
        self._kept_state: Optional[ctypes.Array] = None
        # Set by the Reasoner: the epoch of its view of the state these tokens were synced to (None:
        # never synced); while it is unchanged the view has only grown, so syncing may just append.
        self.view_epoch: Optional[int] = None
        # tokens that end a line ("\n", "\n\n", ...): prefix text is evaluated in pieces that end
        # at line ends, so how the KV cache was computed depends on the text alone, never on how
        # many chunks happened to be queued at a sync (batch-size-dependent kernels change logits)
        self.line_end_tokens = frozenset(self.tokenize_plain("\n" * k)[-1] for k in range(1, 5))
        self.llm._ctx.kv_cache_clear()

    # --- tokenizer -------------------------------------------------------------------------
    def tokenize(self, text: str, *, bos: bool = False) -> List[int]:
        return list(self.llm.tokenize(text.encode("utf-8"), add_bos=bos, special=True))

    def tokenize_plain(self, text: str) -> List[int]:
        """Tokenize text that must not be able to produce control tokens (sensor text)."""
        return list(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.llm.detokenize(list(tokens)).decode("utf-8", errors="replace")

    # --- KV cache --------------------------------------------------------------------------
    def truncate(self, n: int) -> None:
        """Roll the cache back to the first n tokens. On a window-only cache (swa_full off) a cut
        deeper than its spare batch has lost the window before n: the cache falls back to the kept
        prefix (`keep_prefix`) when n reaches it, else it is cleared, and the caller evaluates again
        from len(tokens) with its own batching (sync and the reasoner do)."""
        if n < len(self.tokens):
            self.llm._ctx.kv_cache_seq_rm(-1, n, -1)
            del self.tokens[n:]
            if self.n_swa and not self._window_intact(n):
                self.window_resets += 1
                if self._restore_kept_prefix():
                    self.window_restores += 1
                else:
                    self.clear()

    def keep_prefix(self, tokens: Sequence[int]) -> None:
        """On a window-only cache: snapshot the cache once it holds exactly `tokens` (the static head;
        a by-line sync ends a batch there), so a cut that loses the window but keeps these tokens
        restores them instead of evaluating them again (an ASR eviction cuts the secondary back to
        the head). The snapshot is sequence 0's KV state, exact. Nothing to do on a full-size cache."""
        if self.n_swa and tokens:
            self._keep_tokens, self._kept_state = list(tokens), None
            self._snapshot_kept_prefix()

    def _snapshot_kept_prefix(self) -> None:
        keep = self._keep_tokens
        if keep and self._kept_state is None and self.tokens == keep:
            import llama_cpp
            ctx = self.llm._ctx.ctx
            size = llama_cpp.llama_state_seq_get_size(ctx, 0)
            buffer = (ctypes.c_uint8 * size)()
            if llama_cpp.llama_state_seq_get_data(ctx, buffer, size, 0) == size:
                self._kept_state = buffer

    def _restore_kept_prefix(self) -> bool:
        keep, state = self._keep_tokens, self._kept_state
        if state is None or len(self.tokens) < len(keep) or self.tokens[:len(keep)] != keep:
            return False
        import llama_cpp
        self.clear()
        if llama_cpp.llama_state_seq_set_data(self.llm._ctx.ctx, state, len(state), 0) != len(state):
            self.clear()
            return False
        self.tokens = list(keep)
        return True

    def _window_intact(self, n: int) -> bool:
        """Whether the local-layer cache still holds the n_swa positions before n (cells older than
        the newest n_swa + one batch are reused)."""
        low, high = self._seq_positions()
        return n == 0 or (high == n - 1 and 0 <= low <= max(0, n - self.n_swa))

    def extend(self, tokens: Sequence[int], *, batch: Optional[int] = None,
               before_batch: Optional[Callable[[], None]] = None, by_line: bool = False) -> None:
        """Evaluate tokens after the current ones; `before_batch` may block to yield the CPU.

        `by_line`: also end a batch after every line-end token, so the same text is always
        evaluated in the same pieces (reproducible logits whatever was queued at the call)."""
        if not tokens:
            return
        if len(self.tokens) + len(tokens) > self.n_ctx:
            raise ContextFullError(f"{self.name}: {len(self.tokens)} + {len(tokens)} tokens exceed n_ctx={self.n_ctx}")
        step = min(batch or self.n_batch, self.n_batch)
        for piece in self._pieces(list(tokens), step, by_line):
            if before_batch is not None:
                before_batch()
            self.llm._batch.set_batch(batch=piece, n_past=len(self.tokens), logits_all=False)
            self.llm._ctx.decode(self.llm._batch)
            self.tokens.extend(piece)
            self._snapshot_kept_prefix()

    @contextlib.contextmanager
    def threads(self, n: int) -> Iterator[None]:
        """Evaluate with `n` threads inside the block (appends on a core left idle; no more than the
        context's own is a no-op), then with the context's own again. llama.cpp's CPU kernels split
        rows between threads, so the KV cache and logits are bit-identical whatever the count
        (tested): decisions stay reproducible."""
        if n <= self.n_threads or not hasattr(self.llm, "_ctx"):     # a stand-in llm has no context
            yield
            return
        import llama_cpp
        llama_cpp.llama_set_n_threads(self.llm._ctx.ctx, n, n)
        try:
            yield
        finally:
            llama_cpp.llama_set_n_threads(self.llm._ctx.ctx, self.n_threads, self.n_threads)

    def _pieces(self, tokens: List[int], step: int, by_line: bool) -> List[List[int]]:
        pieces: List[List[int]] = []
        current: List[int] = []
        for token in tokens:
            current.append(token)
            if len(current) == step or (by_line and token in self.line_end_tokens):
                pieces.append(current)
                current = []
        if current:
            pieces.append(current)
        return pieces

    def sync(self, target: Sequence[int], **extend_args) -> int:
        """Make the cache hold exactly `target`; returns how many tokens had to be evaluated."""
        return sync_cache(self, target, **extend_args)

    def clear(self) -> None:
        self.llm._ctx.kv_cache_clear()
        self.tokens = []

    def kv_positions(self) -> int:
        """Number of positions llama.cpp holds for sequence 0 (max position + 1)."""
        return self._seq_positions()[1] + 1

    def _seq_positions(self) -> tuple:
        """(lowest, highest) position llama.cpp holds for sequence 0; the lowest is the local
        layers' on a sliding-window model."""
        import llama_cpp
        memory = llama_cpp.llama_get_memory(self.llm._ctx.ctx)
        return (int(llama_cpp.llama_memory_seq_pos_min(memory, 0)),
                int(llama_cpp.llama_memory_seq_pos_max(memory, 0)))

    def last_logits(self) -> np.ndarray:
        pointer = self.llm._ctx.get_logits_ith(-1)
        return np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))

    def hidden_after(self, tokens: Sequence[int]) -> np.ndarray:
        """Evaluate `tokens` (kept in the cache) and return the last one's final hidden state (a copy)."""
        import llama_cpp
        ctx = self.llm._ctx.ctx
        llama_cpp.llama_set_embeddings(ctx, True)
        try:
            self.extend(tokens)
            pointer = llama_cpp.llama_get_embeddings_ith(ctx, -1)
            return np.array(np.ctypeslib.as_array(pointer, shape=(self.n_embd,)), dtype=np.float32)
        finally:
            llama_cpp.llama_set_embeddings(ctx, False)

    def hidden_states(self, tokens: Sequence[int], positions: Sequence[int]) -> np.ndarray:
        """Evaluate `tokens` (kept in the cache); the final hidden states at `positions` (indices into
        `tokens`, the last one among them), concatenated in their order. Each wanted token is its own
        one-token batch with embeddings on: llama.cpp would otherwise output every token of a batch."""
        if not positions or max(positions) != len(tokens) - 1:
            raise ValueError("the positions must end at the last token")
        states = {}
        start = 0
        for position in sorted(set(positions)):
            self.extend(tokens[start:position])
            states[position] = self.hidden_after(tokens[position:position + 1])
            start = position + 1
        return np.concatenate([states[p] for p in positions])

    def logits_after(self, tokens: Sequence[int]) -> np.ndarray:
        """Next-token logits after appending `tokens` to the cache (a copy); the cache is rolled back."""
        prefix_len = len(self.tokens)
        try:
            self.extend(tokens)
            return np.array(self.last_logits(), dtype=np.float32)
        finally:
            self.truncate(prefix_len)

    # --- decisions -------------------------------------------------------------------------
    def decide(self, suffix: Sequence[int], grammar: DecisionGrammar,
               grounded: Optional[Sequence[str]] = None, context: str = "") -> DecodeResult:
        """Evaluate the suffix on the cached prefix, decode a decision, roll back to the prefix.

        `grounded`, `context`: argument grounding and calibration context (see grammar.start)."""
        prefix_len = len(self.tokens)
        start = time.perf_counter()
        adapter = grammar.intent_adapter
        try:
            run = grammar.start(grounded, context)
            step = run.first()
            if adapter is not None and not step.feed and run.at_intent_choice(step):
                run.intent_bias = adapter.bias(self.hidden_states(suffix, adapter.anchors.positions(suffix)))
            else:
                self.extend(suffix)
            ttft: Optional[float] = None
            while not step.done:
                if step.feed:
                    self.extend(step.feed)
                token = run.pick(step, self.last_logits())
                if ttft is None:
                    ttft = time.perf_counter() - start
                step = run.advance(token)
        finally:
            self.truncate(prefix_len)
        total = time.perf_counter() - start
        if ttft is None:        # the grammar fixed the whole decision (one intent, nothing to choose)
            ttft = total
        assert run.result is not None, "the decode loop ends only when the grammar has returned"
        return DecodeResult(run.result, list(run.tokens), list(run.chosen), run.text,
                            ttft * 1e3, total * 1e3, prefix_len, len(suffix), cached_tokens=prefix_len)

    def healthy(self) -> bool:
        return True           # in this process: it fails only with the process

    # --- saved state (kv_state_file.py) -----------------------------------------------------
    def save_state(self, path: Union[str, Path], *, state_version: int) -> dict:
        """Write the KV state, stamped with model checksum, state version and token list."""
        import llama_cpp
        size = llama_cpp.llama_state_get_size(self.llm._ctx.ctx)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_get_data(self.llm._ctx.ctx, buffer, size)
        return write_state_file(path, memoryview(buffer)[:written], model_path=self.model_path, tokens=self.tokens,
                                n_ctx=self.n_ctx, n_swa=self.n_swa, state_version=state_version)

    @staticmethod
    def read_state_stamp(path: Union[str, Path]) -> dict:
        return read_state_stamp(path)

    def load_state(self, path: Union[str, Path], *, state_version: int,
                   expected_tokens: Optional[Sequence[int]] = None) -> dict:
        """Restore a saved KV state; refuse it unless model, version and tokens all match."""
        import llama_cpp
        stamp, tokens, data = read_state_file(path, model_path=self.model_path, state_version=state_version,
                                              n_ctx=self.n_ctx, n_swa=self.n_swa, expected_tokens=expected_tokens)
        buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if llama_cpp.llama_state_set_data(self.llm._ctx.ctx, buffer, len(data)) != len(data):
            self.clear()
            raise StateFileError(f"saved state {path}: llama.cpp rejected the state data")
        self.tokens = tokens
        return stamp

    def close(self) -> None:
        self.llm.close()


def _window_only_swa(llm) -> int:
    import llama_cpp
    n_swa = int(llama_cpp.llama_model_n_swa(llm.model)) if hasattr(llama_cpp, "llama_model_n_swa") else 0
    return n_swa if n_swa > 0 and not llm.context_params.swa_full else 0

