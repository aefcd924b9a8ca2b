"""The five ways to remember, as prompts over one llama.cpp model, and a choice-grammar answer.

Every method sees the same static head (attention sink and instructions), the same question
block and answers through the same choice grammar; what differs is the history it is given:

    csr          the live CSR prefix: head + every chunk left after eviction at tau_mem (cached)
    window       head + the newest chunks that fit `window_tokens` (StreamingLLM-style, cached)
    retrieval    head (cached) + the top-k BM25 chunks of the whole history, in the suffix
    full         the csr prompt evaluated from an empty cache (the cost CSR avoids)
    csr_archive  the csr prefix + the top-k BM25 chunks of the archive (evicted chunks) in the suffix

The answer is a decision of `DecisionGrammar` over a catalogue whose "intents" are the choices:
the suffix ends in an open quote and only a choice (then the closing quote) can follow; the
log-probabilities of the choices' first tokens at the first step are kept as threshold-free scores.
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...archive_recall import ArchiveRecall, ChunkIndex
from csr_llm_common.catalogue import IntentCatalogue, IntentSpec
from ...csr_state import KIND_EVENT, CachedState, Chunk, ChunkArchive
from ...grammar import DecisionGrammar, log_softmax
from ...prompt import TURN_CLOSE, TURN_OPEN, chunk_line, tokenize_suffix
from .episode import Episode, Question

METHODS = ("csr", "window", "retrieval", "full", "csr_archive")
HEAD = ("You are the memory of a household robot. Its log follows: sensor summaries and events, oldest "
        "first, one per line as [time] topic: state. Answer the question about the log with one of the "
        "options, copied exactly.\n\nLog:\n")
ANSWER_SCAFFOLD = 'Answer: "'
Tokenize = Callable[[str], List[int]]


def head_text() -> str:
    return TURN_OPEN + HEAD


def question_block(question: Question) -> str:
    return f"Question: {question.q}\nOptions: {', '.join(question.choices)}.\n"


def suffix_segments(question: Question, context: str = "") -> List[Tuple[str, bool]]:
    """After the log: optional context lines (retrieved or recalled), then the question and the open
    answer (chat), or the start of one more log line (cloze)."""
    if question.form == "cloze":
        return [(context + question.q, False)]
    return [("\n" + context + question_block(question), False), (TURN_CLOSE, True), (ANSWER_SCAFFOLD, False)]


def choice_texts(question: Question) -> List[str]:
    """The texts the grammar chooses among: a cloze choice continues a line, after a space."""
    return [" " + c if question.form == "cloze" else c for c in question.choices]


@dataclass
class History:
    """One episode's chunks, tokenized once (as the reasoner does: the chunk line, plain text)."""
    texts: List[str]
    tokens: List[List[int]]

    @classmethod
    def of(cls, episode: Episode, tokenize_plain: Tokenize) -> "History":
        texts = [s.text for s in episode.steps]
        return cls(texts, [tokenize_plain(chunk_line(t)) for t in texts])

    @property
    def n_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)


@dataclass
class CsrPrefix:
    tokens: List[int]          # head + live chunks
    live: List[int]            # step indices of the live chunks
    archive_path: Path
    evictions: int


def csr_prefix(history: History, head: Sequence[int], tau_mem: int, evict_ratio: float, archive_dir: Path,
               max_chunk_tokens: int = 512) -> CsrPrefix:
    """The state the reasoning node holds after this history: CachedState with eviction to a real archive."""
    archive_path = Path(tempfile.mkstemp(suffix=".jsonl", dir=archive_dir)[1])
    state = CachedState(head, tau_mem=tau_mem, evict_ratio=evict_ratio, max_chunk_tokens=max_chunk_tokens,
                        oversize_policy="split", archive=ChunkArchive(archive_path))
    for index, (text, tokens) in enumerate(zip(history.texts, history.tokens)):
        state.append(Chunk(index, "", KIND_EVENT, text, tuple(tokens)))
        while state.needs_eviction():
            state.evict()
    live = sorted({c.seq for c in state.chunks})
    return CsrPrefix(state.tokens(), live, archive_path, state.counters.evictions)


def window_start(history: History, window_tokens: int) -> int:
    """First step of the newest whole chunks whose tokens fit in window_tokens."""
    total, start = 0, len(history.tokens)
    while start > 0 and total + len(history.tokens[start - 1]) <= window_tokens:
        start -= 1
        total += len(history.tokens[start])
    return start


def window_prefix(history: History, head: Sequence[int], window_tokens: int) -> Tuple[List[int], int]:
    start = window_start(history, window_tokens)
    tokens = list(head)
    for piece in history.tokens[start:]:
        tokens.extend(piece)
    return tokens, start


def retrieved_lines(index: ChunkIndex, history: History, query: str, k: int) -> Tuple[str, List[int]]:
    """The top-k chunks of the history for the query, as log lines in their original order."""
    steps = sorted(index.top(query, k))
    return "".join(chunk_line(history.texts[i]) for i in steps), steps


def query_text(question: Question) -> str:
    """What the retrievers search with: the question and its options."""
    return question.q + " " + " ".join(question.choices)


def archive_context(recall: ArchiveRecall, question: Question, k: int, max_tokens: int) -> Tuple[str, List[int]]:
    result = recall.recall(query_text(question), k, max_tokens)
    return result.text, [c.seq for c in result.chunks]


# --- answering -----------------------------------------------------------------------------
@dataclass
class Answer:
    choice: int
    scores: List[float]        # log-softmax of each choice's first token at the first step
    ttft_ms: float


def choice_grammar(choices: Sequence[str], tokenize_plain: Tokenize) -> DecisionGrammar:
    """The decision grammar with the choices as its intents (the suffix opened the quote)."""
    return DecisionGrammar(IntentCatalogue([IntentSpec(c, "") for c in choices]), tokenize_plain)


def answer(engine, tokens: Sequence[int], choices: Sequence[str], grammar: Optional[DecisionGrammar] = None,
           extra_ms: float = 0.0) -> Answer:
    """Evaluate `tokens` on the engine's cache, decode a choice greedily, roll back; TTFT to the first pick.

    The loop is LlamaEngine.decide's, keeping the first step's scores; `extra_ms` (retrieval time)
    is added to the TTFT."""
    grammar = grammar or choice_grammar(choices, engine.tokenize_plain)
    prefix_len = len(engine.tokens)
    first: Dict[int, float] = {}
    ttft: Optional[float] = None
    start = time.perf_counter()
    try:
        engine.extend(tokens)
        run = grammar.start()
        step = run.first()
        while not step.done:
            if step.feed:
                engine.extend(step.feed)
            logits = engine.last_logits()
            allowed = step.allowed
            assert allowed is not None
            if not first:
                first = dict(zip(allowed.tolist(), log_softmax(np.asarray(logits)[allowed]).tolist()))
            token = run.pick(step, logits)
            if ttft is None:
                ttft = time.perf_counter() - start
            step = run.advance(token)
    finally:
        engine.truncate(prefix_len)
    if ttft is None:
        ttft = time.perf_counter() - start
    assert run.result is not None
    scores = [first.get(engine.tokenize_plain(c)[0], float("-inf")) for c in choices]
    return Answer(list(choices).index(run.result.intent), scores, ttft * 1e3 + extra_ms)


def suffix_tokens(engine, question: Question, context: str = "") -> List[int]:
    return tokenize_suffix(suffix_segments(question, context), engine.tokenize, engine.tokenize_plain)
