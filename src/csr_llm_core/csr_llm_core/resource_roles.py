"""Which reasoning resource serves decisions, which one rebuilds, and which one is the fallback
(plain module, no rclpy).

R1 and R2 (embedded llama.cpp contexts or inference servers, backend.py) take the primary and,
in ASR mode, the secondary role; an optional embedded fallback serves when both are down. An ASR
swap exchanges the roles; a failover moves decisions off a failed primary to the secondary, else
the fallback; a recovered resource is cleared (resent in full) and, when the fallback serves,
becomes the secondary that takes over through the ASR warm-up and swap. Text is tokenized on the
first resource that answers, an embedded one first (one vocabulary: they must all agree).
Which resources are down is failover.py's `ResourceHealth`.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, List, Optional, Sequence

from .backend import BackendUnavailable, NoResourceAvailable, ReasoningBackend
from .failover import ResourceHealth

VOCABULARY_PROBE = "Running task: open_door. [1.5s] joint_states: arm_elbow=-0.36 rad, 19 N"


class ResourceRoles:
    def __init__(self, engines: Sequence[ReasoningBackend], *, asr: bool, fallback: Optional[ReasoningBackend],
                 health: ResourceHealth, log: logging.Logger):
        self.asr = asr
        self.health = health
        self.log = log
        self._lock = threading.Lock()
        self.primary: ReasoningBackend = engines[0]
        self.secondary: Optional[ReasoningBackend] = engines[1] if asr else None
        self.fallback = fallback
        self.resources: List[ReasoningBackend] = list(engines[:2 if asr else 1]) + ([fallback] if fallback else [])
        if len({e.name for e in self.resources}) < len(self.resources):
            raise ValueError("every resource needs its own name: " + ", ".join(e.name for e in self.resources))
        # tokens are counted in one vocabulary: an embedded engine's when there is one (never down)
        self._tokenizers = sorted(self.resources, key=lambda e: not e.is_local)
        self.failovers = 0

    # --- tokenizer: the first resource that answers ----------------------------------------
    def check_one_vocabulary(self) -> None:
        """Every resource must count tokens alike (one model), or tau_mem and the archive would lie."""
        seen = {}
        for engine in self.resources:
            try:
                seen[engine.name] = engine.tokenize_plain(VOCABULARY_PROBE)
            except BackendUnavailable as err:
                self.health.mark_down(engine.name, engine.healthy, str(err))
        if len({tuple(t) for t in seen.values()}) > 1:
            raise ValueError("the resources tokenize differently (different models?): "
                             + "; ".join(f"{name}: {len(t)} tokens" for name, t in seen.items()))

    def _tokenizer_call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        for engine in self._tokenizers:
            if self.health.is_down(engine.name):
                continue
            try:
                return getattr(engine, method)(*args, **kwargs)
            except BackendUnavailable as err:
                self.health.mark_down(engine.name, engine.healthy, str(err))
        raise NoResourceAvailable("no resource answers to tokenize: " + ", ".join(self.health.down))

    def tokenize(self, text: str, *, bos: bool = False) -> List[int]:
        return self._tokenizer_call("tokenize", text, bos=bos)

    def tokenize_plain(self, text: str) -> List[int]:
        return self._tokenizer_call("tokenize_plain", text)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self._tokenizer_call("detokenize", tokens)

    # --- roles -----------------------------------------------------------------------------
    def secondary_usable(self) -> bool:
        """An ASR secondary that is not down (else an eviction is done in place)."""
        secondary = self.secondary
        return self.asr and secondary is not None and not self.health.is_down(secondary.name)

    def swap(self) -> None:
        """The rebuilt secondary serves; back from the fallback, the fallback waits for the next outage."""
        with self._lock:
            secondary = self.secondary
            assert secondary is not None, "only ASR mode (with a secondary) swaps"
            self.primary, self.secondary = secondary, self.primary
            if self.secondary is self.fallback:
                self.secondary = next((e for e in self.resources if e not in (self.primary, self.fallback)), None) \
                    if self.asr else None

    def take_back(self, name: str, *, may_rebuild: bool) -> bool:
        """A recovered resource: cleared (what its server still caches is its business: it is resent in
        full). True when it must be rebuilt to move decisions back off the fallback (`may_rebuild`:
        no rebuild runs now); it is the secondary then."""
        engine = next(e for e in self.resources if e.name == name)
        with self._lock:
            engine.clear()
            engine.view_epoch = None
            if self.primary is self.fallback and may_rebuild:
                self.secondary = engine
                return True
            return False

    def fail_over(self, failed: ReasoningBackend, err: BackendUnavailable) -> ReasoningBackend:
        """The primary failed: the secondary serves, else the fallback (to be synced from the logical
        state); NoResourceAvailable when none is up."""
        with self._lock:
            new = next((e for e in (self.secondary, self.fallback)
                        if e is not None and e is not failed and not self.health.is_down(e.name)), None)
            self.health.mark_down(failed.name, failed.healthy, str(err),
                                  then=f"decisions continue on {new.name}" if new else "no resource left to decide")
            if new is None:
                raise NoResourceAvailable("no resource can serve decisions: " + ", ".join(self.health.down) + " down")
            if self.secondary is new or self.secondary is None:
                self.secondary = failed
            self.primary = new
            new.view_epoch = None
            self.failovers += 1
            return new
