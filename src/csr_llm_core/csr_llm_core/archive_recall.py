"""Read the chunk archive back: BM25 retrieval of evicted chunks for a query, bounded in tokens.

`ChunkArchive` (csr_state) writes every evicted or refused chunk as a JSON line and never reads
them. `ArchiveRecall` follows that file (only complete new lines are read, so a line being written
is picked up on the next call), indexes the *evicted* chunks with BM25 (`bm25s`) and returns the
top-k for a query as a block of text for the prompt suffix: chunks in their original order, at
most `max_tokens` (counted from the token ids the archive stores for each chunk line).
`ChunkIndex` is the same BM25 ranking over any list of chunk texts (the benchmark's retrieval
baseline uses it over a whole history). With a `session`, only the rows after that session's
header line count (a file other sessions appended to holds their chunks too). `archive_header`
is what the reasoner writes there. Plain module, no rclpy.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Union

from .csr_state import new_session_id

RECALL_HEADER = "Recalled from the archive (evicted earlier), oldest first:"


class ChunkIndex:
    """BM25 (bm25s, English stopwords) over chunk texts; `top(query, k)` -> indices, best first."""

    def __init__(self, texts: Sequence[str]):
        import bm25s
        self._bm25s = bm25s
        self.size = len(texts)
        self._retriever = None
        if texts:
            corpus = bm25s.tokenize(list(texts), stopwords="en", show_progress=False)
            self._retriever = bm25s.BM25()
            self._retriever.index(corpus, show_progress=False)

    def top(self, query: str, k: int) -> List[int]:
        """Indices of the (at most k) chunks that share a term with the query, best first."""
        if self._retriever is None or k <= 0 or not query.strip():
            return []
        tokens = self._bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.ids or not tokens.ids[0]:
            return []
        docs, scores = self._retriever.retrieve(tokens, k=min(k, self.size), show_progress=False)
        return [int(d) for d, s in zip(docs[0], scores[0]) if s > 0]


@dataclass(frozen=True)
class RecalledChunk:
    seq: int
    part: int
    text: str
    n_tokens: int


@dataclass(frozen=True)
class Recall:
    chunks: List[RecalledChunk]         # in original (seq) order
    text: str                           # header + one line per chunk, "" when nothing was recalled

    @property
    def n_tokens(self) -> int:
        return sum(c.n_tokens for c in self.chunks)


def recall_block(chunks: Sequence[RecalledChunk]) -> str:
    """The suffix text for recalled chunks: a header line, then each chunk's line (text + newline)."""
    if not chunks:
        return ""
    return RECALL_HEADER + "\n" + "".join(c.text + "\n" for c in chunks)


def archive_header(session: str, resources: Sequence[Any], config: Any) -> dict:
    """Which session, model(s) and settings the archive rows that follow belong to."""
    return {"session": session or new_session_id(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "resources": [{"name": r.name, "where": str(getattr(r, "server", "") or getattr(r, "model_path", ""))}
                          for r in resources],
            "mode": config.mode, "tau_mem": config.tau_mem, "evict_ratio": config.evict_ratio}


class ArchiveRecall:
    """Top-k evicted chunks of an archive file for a query (the file may grow between calls)."""

    def __init__(self, path: Union[str, Path, None], *, count_tokens: Optional[Callable[[str], int]] = None,
                 logger: Optional[logging.Logger] = None, session: str = ""):
        """`count_tokens`: the model's token count of a text (for the header; else about 3 chars a token)."""
        self.path = Path(path) if path else None
        self.header_tokens = count_tokens(RECALL_HEADER + "\n") if count_tokens else len(RECALL_HEADER) // 3 + 1
        self.log = logger or logging.getLogger("csr_llm.archive_recall")
        self.chunks: List[RecalledChunk] = []
        self.bad_lines = 0
        self._offset = 0
        self._index: Optional[ChunkIndex] = None
        self.session = session
        self._ours = not session          # inside our session's rows (always, without a session)

    def refresh(self) -> int:
        """Read the complete lines added since the last call; returns how many chunks were added."""
        if self.path is None or not self.path.exists():
            return 0
        with open(self.path, "rb") as handle:
            handle.seek(self._offset)
            data = handle.read()
        end = data.rfind(b"\n") + 1            # a line still being written waits for the next call
        self._offset += end
        added = 0
        for raw in data[:end].splitlines():
            chunk = self._parse(raw)
            if chunk is not None:
                self.chunks.append(chunk)
                added += 1
        if added:
            self._index = None
        return added

    def _parse(self, raw: bytes) -> Optional[RecalledChunk]:
        if not raw.strip():
            return None
        try:
            row = json.loads(raw)
            if "header" in row:
                self._ours = not self.session or row["header"].get("session") == self.session
                return None
            if not self._ours or row.get("status") != "evicted":   # refused chunks never were in the prompt
                return None
            return RecalledChunk(int(row["seq"]), int(row.get("part", 0)), str(row["text"]), len(row["tokens"]))
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            self.bad_lines += 1
            if self.bad_lines <= 3:
                self.log.warning("archive %s: skipped a malformed line (%s)", self.path, err)
            return None

    def recall(self, query: str, k: int, max_tokens: int) -> Recall:
        """The best k evicted chunks for `query` whose lines fit in `max_tokens`, in original order."""
        self.refresh()
        if k <= 0 or not self.chunks:
            return Recall([], "")
        if self._index is None:
            self._index = ChunkIndex([c.text for c in self.chunks])
        budget = max_tokens - self.header_tokens
        picked: List[RecalledChunk] = []
        for index in self._index.top(query, k):
            chunk = self.chunks[index]
            if chunk.n_tokens <= budget:
                picked.append(chunk)
                budget -= chunk.n_tokens
        picked.sort(key=lambda c: (c.seq, c.part))
        return Recall(picked, recall_block(picked))

    def suffix_tokens(self, query: str, k: int, max_tokens: int,
                      tokenize_plain: Callable[[str], List[int]]) -> List[int]:
        """The recalled block as plain-text tokens (never control tokens), to open a decision suffix; [] if none."""
        text = self.recall(query, k, max_tokens).text
        return list(tokenize_plain(text)) if text else []
