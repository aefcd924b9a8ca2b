"""Which reasoning resources are down, and when to look at them again.

A resource that fails (refused, timed out, 5xx) is marked down with one log line per outage, not
one per failed call. A background thread probes each down resource's health endpoint with
exponential back-off (`first_retry_s`, doubling up to `max_retry_s`) and marks it up again,
logged once, when it answers. The reasoner reads the flags; it never waits on a probe.

`FailoverMixin` is the reasoner's side: tokenizing on the first resource that answers, taking
recovered resources back, and moving decisions off a failed primary.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from .backend import BackendUnavailable, NoResourceAvailable, ReasoningBackend


@dataclass
class _Outage:
    since: float
    next_probe: float
    retry_s: float
    reason: str
    probes: int = 0


class ResourceHealth:
    def __init__(self, log: logging.Logger, *, first_retry_s: float = 0.5, max_retry_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self.log = log
        self.first_retry_s = first_retry_s
        self.max_retry_s = max_retry_s
        self.clock = clock
        self._down: Dict[str, _Outage] = {}
        self._probes: Dict[str, Callable[[], bool]] = {}
        self._recovered: List[str] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.outages = 0

    def is_down(self, name: str) -> bool:
        with self._lock:
            return name in self._down

    @property
    def down(self) -> List[str]:
        with self._lock:
            return sorted(self._down)

    def mark_down(self, name: str, probe: Callable[[], bool], reason: str, then: str = "") -> bool:
        """Record a failure; True (and one log line, ending with `then`) when it starts an outage."""
        with self._lock:
            if name in self._down:
                return False
            now = self.clock()
            self._down[name] = _Outage(now, now + self.first_retry_s, self.first_retry_s, reason)
            self._probes[name] = probe
            self.outages += 1
        self.log.error("resource %s is down (%s); %sprobing it with back-off up to %g s", name, reason,
                       f"{then}; " if then else "", self.max_retry_s)
        self._ensure_thread()
        self._wake.set()
        return True

    def take_recovered(self) -> List[str]:
        """Resources that came back since the last call (each reported once)."""
        with self._lock:
            names, self._recovered = self._recovered, []
            return names

    def probe_due(self) -> None:
        """Probe every down resource whose back-off has passed (the thread's step; tests call it)."""
        with self._lock:
            now = self.clock()
            due = [(name, self._probes[name]) for name, outage in self._down.items() if outage.next_probe <= now]
        for name, probe in due:
            try:
                ok = bool(probe())
            except Exception:  # a probe that raises is a failed probe, nothing more
                ok = False
            with self._lock:
                outage = self._down.get(name)
                if outage is None:
                    continue
                outage.probes += 1
                if ok:
                    del self._down[name]
                    self._recovered.append(name)
                else:
                    outage.retry_s = min(outage.retry_s * 2, self.max_retry_s)
                    outage.next_probe = self.clock() + outage.retry_s
            if ok:
                self.log.info("resource %s is back after %.1f s (%d probes)", name, self.clock() - outage.since,
                              outage.probes)

    def _next_wait(self) -> float:
        with self._lock:
            if not self._down:
                return 1.0
            return max(0.0, min(o.next_probe for o in self._down.values()) - self.clock())

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="resource-health", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=self._next_wait())
            self._wake.clear()
            if not self._stop.is_set():
                self.probe_due()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


class FailoverMixin:
    """Reasoner methods for resources that can fail (the attributes are Reasoner's)."""
    resources: List[ReasoningBackend]
    _tokenizers: List[ReasoningBackend]
    health: ResourceHealth
    primary: ReasoningBackend
    secondary: Optional[ReasoningBackend]
    fallback: Optional[ReasoningBackend]
    state: Any
    log: Any
    failovers: int
    _lock: Any
    _reconciling: bool
    _ready: Optional[tuple]
    _buffer: list

    def _start_reconcile(self) -> None: ...

    def _cancel_reconcile(self) -> None: ...

    def _set_primary_view(self, tokens: List[int], version: int) -> None: ...

    def _check_one_vocabulary(self) -> None:
        """Every resource must count tokens alike (one model), or tau_mem and the archive would lie."""
        probe = "Running task: open_door. [1.5s] joint_states: arm_elbow=-0.36 rad, 19 N"
        seen = {}
        for engine in self.resources:
            try:
                seen[engine.name] = engine.tokenize_plain(probe)
            except BackendUnavailable as err:
                self.health.mark_down(engine.name, engine.healthy, str(err))
        if len({tuple(t) for t in seen.values()}) > 1:
            raise ValueError("the resources tokenize differently (different models?): "
                             + "; ".join(f"{name}: {len(t)} tokens" for name, t in seen.items()))

    # --- tokenizer: the first resource that answers ----------------------------------------
    def _tokenizer_call(self, method: str, *args, **kwargs):
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

    def _check_resources(self) -> None:
        """Take back recovered resources; a primary known to be down fails over before it is used."""
        for name in self.health.take_recovered():
            engine = next(e for e in self.resources if e.name == name)
            with self._lock:
                engine.clear()            # what its server still caches is its business: resend it all
                engine.view_epoch = None
                if self.primary is self.fallback and not self._reconciling:
                    self.secondary = engine   # move back off the fallback through warm-up and swap
                    self._start_reconcile()
        if self.health.is_down(self.primary.name):
            raise BackendUnavailable(f"{self.primary.name} is down")

    def _fail_over(self, failed: ReasoningBackend, err: BackendUnavailable) -> None:
        """The primary failed: serve from the secondary, else the fallback, synced from the logical state."""
        self._cancel_reconcile()     # joins the thread: must not hold self._lock here
        with self._lock:
            new = next((e for e in (self.secondary, self.fallback)
                        if e is not None and e is not failed and not self.health.is_down(e.name)), None)
            self.health.mark_down(failed.name, failed.healthy, str(err),
                                  then=f"decisions continue on {new.name}" if new else "no resource left to decide")
            if new is None:
                raise NoResourceAvailable("no resource can serve decisions: " + ", ".join(self.health.down) + " down")
            self._reconciling = False
            self._ready = None
            self._buffer = []
            if self.secondary is new or self.secondary is None:
                self.secondary = failed
            self.primary = new
            new.view_epoch = None
            self._set_primary_view(self.state.tokens(), self.state.version)
            self.failovers += 1

