"""A reasoning resource on an inference server (llama.cpp `llama-server` or vLLM), over HTTP.

The server keeps the KV cache; we keep the token list it was asked to hold (`tokens`). Warming
(`extend`/`sync`) sends the prompt with nothing to generate, so the server's prefix cache holds it;
a decision sends prefix + suffix with the catalogue's grammar, greedy, streamed (the first event
is the time to first token), and reads back how many prompt tokens the server took from its cache.
Its text is parsed and checked with the catalogue exactly as the local decoder's output: numbers
clamped to their range (the grammar bounds digits, not values), anything else refused.

Failures map onto two errors (backend.py): `BackendUnavailable` (refused, timed out, reset, 5xx)
and `DecisionRefused` (an answer that is not a catalogued decision). The API key comes from an
environment variable named in the resource, never from a parameter file.
"""
from __future__ import annotations

import http.client
import json
import os
import threading
import time
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Callable, Dict, Generator, Iterator, List, Optional, Sequence
from urllib.parse import urlsplit

from .backend import BackendUnavailable, DecisionRefused, sync_cache
from csr_llm_common.catalogue import DecisionError, ParsedDecision
from .engine import ContextFullError, DecodeResult
from .grammar import DecisionGrammar
from .prompt import SCAFFOLD
from .server_api import ResponseError, dialect

MAX_DECISION_TOKENS = 64     # a decision is ~5-20 tokens; the grammar ends it, this only bounds a runaway


@dataclass
class RemoteResource:
    """Where one reasoning resource lives and how long to wait for it."""
    url: str                         # http://host:port of the server
    api: str = "llama.cpp"           # llama.cpp | vllm
    slot: int = -1                   # llama.cpp slot (id_slot); -1 = any idle slot
    model: str = ""                  # vLLM: the served model name (required by its API)
    api_key_env: str = ""            # name of the environment variable holding the API key ("" = none)
    connect_timeout_s: float = 1.0
    timeout_s: float = 30.0          # one request (warming a long prefix on a slow server takes a while)
    stream_gap_timeout_s: float = 5.0  # most time between two streamed events of a decision
    warm_batch: int = 512            # tokens per warming request (the ASR rebuild yields between them)


class HttpTransport:
    """One keep-alive connection; every failure to get an answer becomes BackendUnavailable."""

    def __init__(self, resource: RemoteResource, name: str):
        parts = urlsplit(resource.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{name}: url must be http(s)://host:port, got {resource.url!r}")
        self.name = name
        self.scheme, self.host = parts.scheme, parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.base = parts.path.rstrip("/")
        self.resource = resource
        self.headers = {"Content-Type": "application/json"}
        if resource.api_key_env:
            key = os.environ.get(resource.api_key_env, "")
            if not key:
                raise ValueError(f"{name}: environment variable {resource.api_key_env} (the API key) is not set")
            self.headers["Authorization"] = f"Bearer {key}"
        self._conn: Optional[http.client.HTTPConnection] = None
        self._lock = threading.Lock()

    def _connect(self) -> http.client.HTTPConnection:
        if self._conn is None:
            kind = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            self._conn = kind(self.host, self.port, timeout=self.resource.connect_timeout_s)
            self._conn.connect()
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _send(self, method: str, path: str, body: Optional[dict], timeout: float) -> http.client.HTTPResponse:
        payload = json.dumps(body).encode() if body is not None else None
        reused = self._conn is not None
        try:
            response = self._exchange(method, path, payload, timeout)
        except _STALE_CONNECTION:
            if not reused:
                raise
            self.close()       # the server closed the idle keep-alive connection: once more on a new one
            response = self._exchange(method, path, payload, timeout)
        if response.status >= 400:
            detail = response.read()[:300].decode(errors="replace")
            message = f"{self.name}: {method} {path} answered {response.status}: {detail}"
            # 5xx: the server cannot serve now; 4xx: it refuses what we sent (a foreign or broken server)
            raise BackendUnavailable(message) if response.status >= 500 else ResponseError(message)
        return response

    def _exchange(self, method: str, path: str, payload: Optional[bytes], timeout: float) -> http.client.HTTPResponse:
        conn = self._connect()
        if conn.sock is None:      # the server closed it after the last answer (Connection: close)
            conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(timeout)
        conn.request(method, self.base + path, body=payload, headers=self.headers)
        return conn.getresponse()

    def call(self, method: str, path: str, body: Optional[dict] = None, *, timeout: float) -> Dict[str, Any]:
        """One request, its whole JSON answer; the connection stays open for the next one."""
        with self._lock:
            try:
                return _json(self._send(method, path, body, timeout).read())
            except _NETWORK_ERRORS as err:
                self.close()
                raise self._unavailable(method, path, err) from err
            except ResponseError:
                self.close()
                raise

    def stream(self, path: str, body: dict, *, timeout: float) -> Generator[Dict[str, Any], None, None]:
        """POST and yield each server-sent event; `timeout` bounds the wait for every event."""
        with self._lock:
            finished = False
            try:
                yield from _events(self._send("POST", path, body, timeout))
                finished = True
            except _NETWORK_ERRORS as err:
                raise self._unavailable("POST", path, err) from err
            finally:
                if not finished:
                    self.close()     # a half-read stream must not leak into the next request

    def _unavailable(self, method: str, path: str, err: BaseException) -> BackendUnavailable:
        self.close()
        return BackendUnavailable(f"{self.name}: {self.resource.url} {method} {path}: {type(err).__name__}: {err}")

    def get(self, path: str, timeout: float) -> Dict[str, Any]:
        return self.call("GET", path, timeout=timeout)

    def post(self, path: str, body: dict, timeout: float) -> Dict[str, Any]:
        return self.call("POST", path, body, timeout=timeout)


_STALE_CONNECTION = (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected)
_NETWORK_ERRORS = (OSError, http.client.HTTPException)    # refused, reset, timed out (socket.timeout is an OSError)


def _json(raw: bytes) -> Dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError as err:
        raise ResponseError(f"not JSON: {raw[:80]!r}") from err
    if not isinstance(value, dict):
        raise ResponseError(f"expected a JSON object, got {type(value).__name__}")
    return value


def _events(response: http.client.HTTPResponse) -> Iterator[Dict[str, Any]]:
    """Server-sent events (`data: {...}` lines) up to `data: [DONE]` or the end of the stream."""
    for raw in response:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        yield _json(data)


class HttpBackend:
    """R1 or R2 on a server: the ReasoningBackend interface over one slot / prefix cache."""

    is_local = False

    def __init__(self, resource: RemoteResource, *, name: str = "R1", n_ctx: int = 0):
        self.resource = resource
        self.name = name
        self.api = dialect(resource.api, resource.slot, resource.model)
        self.transport = HttpTransport(resource, name)
        self.tokens: List[int] = []
        self.view_epoch: Optional[int] = None
        self.cache_prompt = True            # False: every decision is a full recompute (the bench's baseline)
        self.last_cached_tokens = -1
        self.n_ctx = n_ctx or self.discover_n_ctx()

    @property
    def server(self) -> str:
        return f"{self.api.name} at {self.resource.url}" + (f" slot {self.resource.slot}"
                                                            if self.resource.slot >= 0 else "")

    def discover_n_ctx(self) -> int:
        try:
            return self.api.read_n_ctx(self.transport.get(self.api.context_path, self.resource.timeout_s))
        except ResponseError as err:
            raise BackendUnavailable(f"{self.name}: cannot read the context size: {err}") from err

    def healthy(self) -> bool:
        try:
            self.transport.get(self.api.health_path, self.resource.connect_timeout_s)
            return True
        except (BackendUnavailable, ResponseError):
            return False

    # --- tokenizer (the server's own vocabulary, so tau_mem counts its tokens) ----------------
    def _tokenize(self, text: str, special: bool, bos: bool) -> List[int]:
        path, body = self.api.tokenize_request(text, special=special, bos=bos)
        return self.api.read_tokens(self.transport.post(path, body, self.resource.timeout_s))

    def tokenize(self, text: str, *, bos: bool = False) -> List[int]:
        return self._tokenize(text, True, bos)

    def tokenize_plain(self, text: str) -> List[int]:
        return self._tokenize(text, False, False)

    def detokenize(self, tokens: Sequence[int]) -> str:
        path, body = self.api.detokenize_request(tokens)
        return self.api.read_text(self.transport.post(path, body, self.resource.timeout_s))

    # --- the server's cache ------------------------------------------------------------------
    def truncate(self, n: int) -> None:
        del self.tokens[n:]          # the server rolls back itself when the next prompt is shorter

    def clear(self) -> None:
        self.tokens = []

    def extend(self, tokens: Sequence[int], *, batch: Optional[int] = None,
               before_batch: Optional[Callable[[], None]] = None, by_line: bool = False) -> None:
        """Have the server cache `tokens` after the current ones, in `warm_batch` requests."""
        if not tokens:
            return
        target = self.tokens + list(tokens)
        if len(target) > self.n_ctx:
            raise ContextFullError(f"{self.name}: {len(self.tokens)} + {len(tokens)} tokens exceed n_ctx={self.n_ctx}")
        step = max(batch or 0, self.resource.warm_batch)
        for end in range(len(self.tokens) + step, len(target) + step, step):
            if before_batch is not None:
                before_batch()
            self._warm(target[:min(end, len(target))])

    def _warm(self, prompt: List[int]) -> None:
        body = self.api.warm_body(prompt)
        try:
            answer = self.transport.post(self.api.completion_path, body, self.resource.timeout_s)
        except ResponseError as err:
            raise BackendUnavailable(f"{self.name}: warming refused: {err}") from err
        self.last_cached_tokens = self.api.read_final("", [], answer).cached_tokens
        self.tokens = prompt

    def sync(self, target: Sequence[int], **extend_args) -> int:
        return sync_cache(self, target, **extend_args)

    # --- decisions ---------------------------------------------------------------------------
    def decide(self, suffix: Sequence[int], grammar: DecisionGrammar,
               grounded: Optional[Sequence[str]] = None, context: str = "") -> DecodeResult:
        """Prefix (cached on the server) + suffix -> one grammar-constrained greedy decision."""
        prompt = self.tokens + list(suffix)
        if len(prompt) + MAX_DECISION_TOKENS > self.n_ctx:
            raise ContextFullError(f"{self.name}: a decision on {len(prompt)} tokens may exceed n_ctx={self.n_ctx}")
        body = self.api.decision_body(prompt, grammar.to_gbnf(grounded), MAX_DECISION_TOKENS,
                                      cache=self.cache_prompt)
        start = time.perf_counter()
        ttft: Optional[float] = None
        text: List[str] = []
        tokens: List[int] = []
        last: Dict[str, Any] = {}
        settled: Optional[str] = None
        try:
            events = self.transport.stream(self.api.completion_path, body, timeout=self.resource.stream_gap_timeout_s)
            # closed (and its connection dropped, which stops the server's generation) when the decision is
            # settled early or a bad event stops the loop
            with closing(events):
                for event in events:
                    piece, ids = self.api.read_chunk(event)
                    if (piece or ids) and ttft is None:
                        ttft = time.perf_counter() - start
                    text.append(piece)
                    tokens.extend(ids)
                    last = event
                    settled = settled_text(grammar, "".join(text))
                    if settled is not None:
                        break
        except ResponseError as err:
            raise DecisionRefused(f"{self.name}: {err}") from err
        total = time.perf_counter() - start
        done = self.api.read_final(settled or "".join(text), tokens, last)
        self.last_cached_tokens = done.cached_tokens
        decision = parse_decision(grammar, done.text, self.name)
        return DecodeResult(decision, done.tokens, done.tokens, done.text, (ttft or total) * 1e3, total * 1e3,
                            len(self.tokens), len(suffix), cached_tokens=done.cached_tokens)

    def close(self) -> None:
        self.transport.close()


def settled_text(grammar: DecisionGrammar, text: str) -> Optional[str]:
    """The whole decision text once `text` (so far) can only end one way, else None.

    The server generates under the same grammar, so when the text so far is the start of exactly one
    intent's text and that intent takes no arguments, the rest is fixed: as the local decoder, we
    need not wait for the server to spell it out. A text that left the grammar settles nothing."""
    if not text:
        return None
    candidates: List[Optional[str]] = []   # None: an intent whose arguments are still to come
    for name in grammar.catalogue.names:
        lead = f'{name}", "args": {{'
        if grammar.catalogue[name].arguments:
            if lead.startswith(text) or text.startswith(lead):
                candidates.append(None)
        elif (lead + "}}").startswith(text):
            candidates.append(lead + "}}")
    return candidates[0] if len(candidates) == 1 else None


def parse_decision(grammar: DecisionGrammar, text: str, source: str) -> ParsedDecision:
    """A server's continuation of the scaffold -> a catalogued decision, or DecisionRefused.

    The same policy as the local decoder: numbers are clamped to their argument's range (the
    grammar bounds their digits, not their value), everything else must validate as it is."""
    try:
        value = json.loads(SCAFFOLD + text)
    except ValueError:
        raise DecisionRefused(f"{source}: the server's decision is not JSON: {text[:80]!r}") from None
    if not isinstance(value, dict) or set(value) != {"intent", "args"} or not isinstance(value["args"], dict):
        raise DecisionRefused(f"{source}: the server's decision has the wrong shape: {text[:80]!r}")
    intent, args = value["intent"], dict(value["args"])
    catalogue = grammar.catalogue
    if isinstance(intent, str) and intent in catalogue:
        for spec in catalogue[intent].arguments:
            number = args.get(spec.name)
            if spec.type in ("int", "float") and isinstance(number, (int, float)) and not isinstance(number, bool):
                args[spec.name] = spec.clamp(number)
    try:
        return catalogue.validate(intent, args)
    except DecisionError as err:
        raise DecisionRefused(f"{source}: the server's decision is refused: {err}") from None
