"""The interface the reasoner drives R1 and R2 through, whatever computes them.

A backend holds a cache of a token list (`tokens`): the embedded llama.cpp context (engine.py,
`LlamaEngine`) holds its KV cache itself; a remote server (http_backend.py, `HttpBackend`) holds it
in a slot or a prefix cache, and `tokens` is what it was last asked to hold. The logical state
(chunks, archive) is never in a backend: the reasoner can rebuild any backend's cache from it.

Errors a backend raises in place of a result:
* `BackendUnavailable`: the resource cannot serve now (refused, timed out, 5xx, reset). The reasoner
  moves decisions to another resource and probes this one with back-off.
* `DecisionRefused`: the resource answered, but not with a catalogued decision (garbage, an
  unknown intent, a malformed argument). The decision is dropped, never published.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Protocol, Sequence, runtime_checkable

from .grammar import DecisionGrammar


class BackendUnavailable(RuntimeError):
    """The resource did not answer usefully (connection refused or reset, timeout, 5xx)."""


class DecisionRefused(ValueError):
    """The resource answered with something that is not a catalogued decision."""


class NoResourceAvailable(RuntimeError):
    """Every resource that could serve decisions is down."""


@runtime_checkable
class ReasoningBackend(Protocol):
    name: str
    n_ctx: int
    tokens: List[int]
    view_epoch: Optional[int]
    is_local: bool              # holds its KV cache in this process (saved state, logits, calibration)

    def tokenize(self, text: str, *, bos: bool = False) -> List[int]: ...

    def tokenize_plain(self, text: str) -> List[int]: ...

    def detokenize(self, tokens: Sequence[int]) -> str: ...

    def truncate(self, n: int) -> None: ...

    def extend(self, tokens: Sequence[int], *, batch: Optional[int] = None,
               before_batch: Optional[Callable[[], None]] = None, by_line: bool = False) -> None: ...

    def sync(self, target: Sequence[int], **extend_args) -> int: ...

    def clear(self) -> None: ...

    def decide(self, suffix: Sequence[int], grammar: DecisionGrammar,
               grounded: Optional[Sequence[str]] = None, context: str = ""): ...

    def healthy(self) -> bool: ...

    def close(self) -> None: ...


def sync_cache(backend: "ReasoningBackend", target: Sequence[int], **extend_args) -> int:
    """Make `backend` hold exactly `target`: keep the common prefix, drop the rest, evaluate what is
    new. Returns how many tokens had to be evaluated. Every backend's `sync`."""
    held = backend.tokens
    common = 0
    limit = min(len(held), len(target))
    while common < limit and held[common] == target[common]:
        common += 1
    backend.truncate(common)
    kept = len(backend.tokens)     # below common where the cut cleared a window-only cache
    backend.extend(target[kept:], **extend_args)
    return len(target) - kept
