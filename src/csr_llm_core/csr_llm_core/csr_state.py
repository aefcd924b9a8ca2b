"""Cached State Representation: static head + append-only token chunks, with eviction to an archive.

Each chunk is tokenized once, when it arrives, and its ids are kept: the prefix is the
concatenation of the head's and the chunks' token lists, never a re-tokenized string, so every
offset is an exact token count. When the prefix reaches `tau_mem` tokens the oldest
`evict_ratio` of the chunks leave (the head stays) and the state version `k` increments. Evicted
chunks are written to the archive before they leave memory: archive + live chunks = every chunk
received, in order. Refused chunks are archived too, marked as such.
"""
from __future__ import annotations

import json
import math
import os
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Deque, Iterable, List, Optional, Sequence, Tuple, Union

KIND_EVENT = 0
KIND_CONTINUOUS = 1
OVERSIZE_POLICIES = ("reject", "split")


class ChunkRejected(ValueError):
    """A chunk was refused (empty, invalid text, or over the size budget under 'reject')."""


@dataclass
class Chunk:
    seq: int
    source: str
    kind: int
    text: str
    tokens: Tuple[int, ...]
    stamp: float = 0.0
    part: int = 0          # > 0 for the pieces of a split oversize chunk

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


class ChunkArchive:
    """Append-only JSON-lines file of chunks that left memory (evicted) or were refused.

    With a `header` (session id, model, settings), a ``{"header": {...}}`` line opens this
    session's part of the file, so a file several sessions appended to says which rows are whose."""

    def __init__(self, path: Union[str, Path, None], header: Optional[dict] = None):
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self.session = str((header or {}).get("session", ""))
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if header:
                with open(self.path, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps({"header": header}, ensure_ascii=False) + "\n")

    def write(self, chunks: Iterable[Chunk], *, status: str, state_version: int) -> None:
        if self.path is None:
            return
        lines = [json.dumps({"status": status, "state_version": state_version, "seq": c.seq, "part": c.part,
                             "source": c.source, "kind": c.kind, "stamp": c.stamp, "text": c.text,
                             "tokens": list(c.tokens)}, ensure_ascii=False) for c in chunks]
        if not lines:
            return
        with self._lock, open(self.path, "a", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
            handle.flush()

    def read(self) -> List[dict]:
        if self.path is None or not self.path.exists():
            return []
        with open(self.path, encoding="utf-8") as handle:
            rows = [json.loads(line) for line in handle if line.strip()]
        return [row for row in rows if "header" not in row]


def new_session_id() -> str:
    """Start time and process: sorts by time, unique per process."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


def session_archive_path(directory: Union[str, Path], session: str, keep: int) -> Path:
    """A new archive file for one session in `directory`; of the older ones (by name: they start
    with their start time) only the newest keep - 1 are kept, so the folder cannot grow forever."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    if keep > 0:
        for old in sorted(folder.glob("*.jsonl"))[:-(keep - 1) or None]:
            old.unlink(missing_ok=True)
    return folder / f"{session}.jsonl"


@dataclass
class Eviction:
    chunks: List[Chunk]
    state_version: int
    tokens: int


@dataclass
class StateCounters:
    evictions: int = 0
    evicted_chunks: int = 0
    evicted_tokens: int = 0
    rejected_chunks: int = 0
    split_chunks: int = 0


class CachedState:
    """The logical CSR prefix. Not thread-safe by itself: the reasoner serialises access."""

    def __init__(self, head_tokens: Sequence[int], *, tau_mem: int, evict_ratio: float = 0.5,
                 max_chunk_tokens: int = 512, oversize_policy: str = "reject",
                 archive: Optional[ChunkArchive] = None, state_version: int = 0):
        if not 0.0 < evict_ratio <= 1.0:
            raise ValueError(f"evict_ratio must be in (0, 1], got {evict_ratio}")
        if oversize_policy not in OVERSIZE_POLICIES:
            raise ValueError(f"oversize_policy must be one of {OVERSIZE_POLICIES}, got {oversize_policy!r}")
        self.head_tokens: Tuple[int, ...] = tuple(head_tokens)
        if len(self.head_tokens) >= tau_mem:
            raise ValueError(f"the static head ({len(self.head_tokens)} tokens) does not fit tau_mem={tau_mem}")
        self.tau_mem = int(tau_mem)
        self.evict_ratio = float(evict_ratio)
        self.max_chunk_tokens = max(1, min(int(max_chunk_tokens), self.tau_mem - len(self.head_tokens)))
        self.oversize_policy = oversize_policy
        self.archive = archive or ChunkArchive(None)
        self.version = int(state_version)
        self.chunks: Deque[Chunk] = deque()
        self.counters = StateCounters()
        self._chunk_tokens = 0

    @property
    def n_tokens(self) -> int:
        return len(self.head_tokens) + self._chunk_tokens

    def tokens(self) -> List[int]:
        out = list(self.head_tokens)
        for chunk in self.chunks:
            out.extend(chunk.tokens)
        return out

    def append(self, chunk: Chunk, detokenize=None) -> List[Chunk]:
        """Add a chunk (or, under 'split', its pieces); returns what was appended."""
        if not chunk.tokens or not chunk.text.strip():
            self.reject(chunk, "empty text")
        pieces = [chunk]
        if chunk.n_tokens > self.max_chunk_tokens:
            if self.oversize_policy == "reject":
                self.reject(chunk, f"{chunk.n_tokens} tokens exceed max_chunk_tokens={self.max_chunk_tokens}")
            size = self.max_chunk_tokens
            pieces = []
            for part, start in enumerate(range(0, chunk.n_tokens, size), start=1):
                tokens = chunk.tokens[start:start + size]
                text = detokenize(tokens) if detokenize else chunk.text
                pieces.append(Chunk(chunk.seq, chunk.source, chunk.kind, text, tuple(tokens), chunk.stamp, part))
            self.counters.split_chunks += 1
        for piece in pieces:
            self.chunks.append(piece)
            self._chunk_tokens += piece.n_tokens
        return pieces

    def reject(self, chunk: Chunk, reason: str) -> None:
        self.counters.rejected_chunks += 1
        self.archive.write([chunk], status="rejected", state_version=self.version)
        raise ChunkRejected(f"chunk seq={chunk.seq} from {chunk.source or '?'} rejected: {reason}")

    def needs_eviction(self) -> bool:
        return self.n_tokens >= self.tau_mem and bool(self.chunks)

    def evict(self) -> Eviction:
        """Drop the oldest evict_ratio of the chunks (at least one), archive them, bump k."""
        count = max(1, math.ceil(len(self.chunks) * self.evict_ratio))
        evicted = [self.chunks.popleft() for _ in range(min(count, len(self.chunks)))]
        tokens = sum(c.n_tokens for c in evicted)
        self.archive.write(evicted, status="evicted", state_version=self.version)
        self._chunk_tokens -= tokens
        self.version += 1
        self.counters.evictions += 1
        self.counters.evicted_chunks += len(evicted)
        self.counters.evicted_tokens += tokens
        return Eviction(evicted, self.version, tokens)

    # --- persistence for warm restarts ----------------------------------------------------
    def snapshot(self) -> dict:
        return {"version": self.version, "head_tokens": list(self.head_tokens),
                "chunks": [dict(asdict(c), tokens=list(c.tokens)) for c in self.chunks],
                "counters": asdict(self.counters)}

    def restore(self, snapshot: dict) -> None:
        if list(snapshot["head_tokens"]) != list(self.head_tokens):
            raise ValueError("snapshot was taken with another static head (config or model changed)")
        self.version = int(snapshot["version"])
        self.chunks = deque(Chunk(**dict(c, tokens=tuple(c["tokens"]))) for c in snapshot["chunks"])
        self._chunk_tokens = sum(c.n_tokens for c in self.chunks)
        self.counters = StateCounters(**snapshot["counters"])
