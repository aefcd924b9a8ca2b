"""What differs between the inference servers a remote resource can be: the one place that knows.

Two dialects, both taking prompts as token-id arrays (so the prefix the server caches is exactly
our token list, never a re-tokenized string):

* `LlamaServerApi`: llama.cpp's own `llama-server`. `/completion` with `cache_prompt` (reuse of the
  slot's KV cache for the longest common prefix), `id_slot` (one slot per resource, so two slots of
  one server are two resources), `n_predict` (0 = evaluate the prompt into the cache only), GBNF
  `grammar`; it reports `timings.cache_n`, the prompt tokens served from the cache. `/tokenize`
  with `parse_special: false` keeps sensor text out of control tokens; `/props` gives the slot's
  `n_ctx`.
* `VllmApi`: vLLM's OpenAI-compatible `/v1/completions` (automatic prefix caching is per block and
  needs no request field; a random `cache_salt` makes a request miss it on purpose), structured
  output with the same GBNF (`structured_outputs.grammar`), cached tokens in
  `usage.prompt_tokens_details.cached_tokens` (served with `--enable-prompt-tokens-details`),
  `max_model_len` from `/v1/models`. vLLM has no "evaluate only" request: a warm-up generates one
  token. Its `/tokenize` cannot leave special tokens unparsed, so the plain tokenization of
  sensor text refuses text that spells a control token (`<...>`), rather than letting it through.

Each dialect builds request bodies and reads responses; transport, timeouts and failover live in
http_backend.py.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

APIS = ("llama.cpp", "vllm")
# a control-token spelling such as <start_of_turn> or <|im_start|>: never sent to a tokenizer that parses them
_CONTROL_TOKEN_TEXT = re.compile(r"<\|?[A-Za-z_][A-Za-z0-9_|]*>")


class ResponseError(ValueError):
    """A response that does not have the shape the dialect expects (a broken or foreign server)."""


@dataclass
class Completion:
    """What a finished completion told us, in one shape whatever the server."""
    text: str
    tokens: List[int]               # generated ids when the server returns them, else []
    cached_tokens: int              # prompt tokens served from the server's prefix cache (-1: not reported)
    prompt_evaluated: int           # prompt tokens the server evaluated (-1: not reported)


def _int(value: Any, default: int = -1) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


class LlamaServerApi:
    name = "llama.cpp"
    completion_path = "/completion"
    health_path = "/health"
    context_path = "/props"

    def __init__(self, slot: int = -1, model: str = ""):
        self.slot = slot

    def warm_body(self, tokens: Sequence[int]) -> Dict[str, Any]:
        return {"prompt": list(tokens), "n_predict": 0, "cache_prompt": True, "id_slot": self.slot}

    def decision_body(self, tokens: Sequence[int], grammar: str, max_tokens: int, *, cache: bool = True,
                      stream: bool = True) -> Dict[str, Any]:
        # top_k 1 + temperature 0: greedy among the tokens the grammar allows (as the local decoder)
        return {"prompt": list(tokens), "n_predict": max_tokens, "cache_prompt": cache, "id_slot": self.slot,
                "grammar": grammar, "temperature": 0.0, "top_k": 1, "stream": stream, "return_tokens": True,
                "n_probs": 0, "timings_per_token": True}      # cache_n in every event: a decision may end early

    def read_chunk(self, event: Dict[str, Any]) -> Tuple[str, List[int]]:
        """Text and token ids of one streamed event (or of a whole non-streamed response)."""
        text = event.get("content", "")
        if not isinstance(text, str):
            raise ResponseError(f"llama.cpp server: 'content' is {type(text).__name__}, not text")
        tokens = event.get("tokens") or []
        return text, [t for t in tokens if isinstance(t, int)]

    def read_final(self, text: str, tokens: List[int], last: Dict[str, Any]) -> Completion:
        timings = last.get("timings") or {}
        return Completion(text, tokens, _int(timings.get("cache_n")), _int(timings.get("prompt_n")))

    def read_n_ctx(self, props: Dict[str, Any]) -> int:
        settings = props.get("default_generation_settings") or {}
        n_ctx = _int(settings.get("n_ctx"), 0) or _int(props.get("n_ctx"), 0)
        if n_ctx <= 0:
            raise ResponseError("llama.cpp server: /props reports no n_ctx")
        return n_ctx

    def tokenize_request(self, text: str, *, special: bool, bos: bool) -> Tuple[str, Dict[str, Any]]:
        return "/tokenize", {"content": text, "add_special": bos, "parse_special": special}

    def read_tokens(self, body: Dict[str, Any]) -> List[int]:
        tokens = body.get("tokens")
        if not isinstance(tokens, list):
            raise ResponseError("llama.cpp server: /tokenize returned no token list")
        return [int(t["id"]) if isinstance(t, dict) else int(t) for t in tokens]

    def detokenize_request(self, tokens: Sequence[int]) -> Tuple[str, Dict[str, Any]]:
        return "/detokenize", {"tokens": list(tokens)}

    def read_text(self, body: Dict[str, Any]) -> str:
        return str(body.get("content", ""))


class VllmApi:
    name = "vllm"
    completion_path = "/v1/completions"
    health_path = "/health"
    context_path = "/v1/models"

    def __init__(self, slot: int = -1, model: str = ""):
        self.model = model          # vLLM requires the served model's name in every request

    def _base(self, tokens: Sequence[int]) -> Dict[str, Any]:
        body: Dict[str, Any] = {"prompt": list(tokens), "temperature": 0.0}
        if self.model:
            body["model"] = self.model
        return body

    def warm_body(self, tokens: Sequence[int]) -> Dict[str, Any]:
        return dict(self._base(tokens), max_tokens=1)

    def decision_body(self, tokens: Sequence[int], grammar: str, max_tokens: int, *, cache: bool = True,
                      stream: bool = True) -> Dict[str, Any]:
        body = dict(self._base(tokens), max_tokens=max_tokens, structured_outputs={"grammar": grammar},
                    stream=stream, return_token_ids=True)
        if stream:     # usage (cached tokens) in every event: a decision may end early
            body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        if not cache:
            body["cache_salt"] = uuid.uuid4().hex     # a salt no cached block carries: a full recompute
        return body

    def read_chunk(self, event: Dict[str, Any]) -> Tuple[str, List[int]]:
        choices = event.get("choices")
        if choices is None:
            return "", []
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            if choices == [] and "usage" in event:     # the usage-only event that ends a stream
                return "", []
            raise ResponseError("vLLM: a completion without choices")
        text = choices[0].get("text", "")
        if not isinstance(text, str):
            raise ResponseError(f"vLLM: choice text is {type(text).__name__}, not text")
        tokens = choices[0].get("token_ids") or []
        return text, [t for t in tokens if isinstance(t, int)]

    def read_final(self, text: str, tokens: List[int], last: Dict[str, Any]) -> Completion:
        usage = last.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        cached = _int(details.get("cached_tokens"))
        prompt = _int(usage.get("prompt_tokens"))
        return Completion(text, tokens, cached, prompt - cached if prompt >= 0 and cached >= 0 else -1)

    def read_n_ctx(self, models: Dict[str, Any]) -> int:
        data = models.get("data") or []
        for entry in data:
            if isinstance(entry, dict) and (not self.model or entry.get("id") == self.model):
                n_ctx = _int(entry.get("max_model_len"), 0)
                if n_ctx > 0:
                    return n_ctx
        raise ResponseError(f"vLLM: /v1/models lists no max_model_len for model {self.model or '(any)'!r}")

    def tokenize_request(self, text: str, *, special: bool, bos: bool) -> Tuple[str, Dict[str, Any]]:
        if not special and _CONTROL_TOKEN_TEXT.search(text):
            raise ResponseError(f"text spells a control token and vLLM's /tokenize would parse it: {text[:80]!r}")
        body: Dict[str, Any] = {"prompt": text, "add_special_tokens": bos}
        if self.model:
            body["model"] = self.model
        return "/tokenize", body

    def read_tokens(self, body: Dict[str, Any]) -> List[int]:
        tokens = body.get("tokens")
        if not isinstance(tokens, list):
            raise ResponseError("vLLM: /tokenize returned no token list")
        return [int(t) for t in tokens]

    def detokenize_request(self, tokens: Sequence[int]) -> Tuple[str, Dict[str, Any]]:
        body: Dict[str, Any] = {"tokens": list(tokens)}
        if self.model:
            body["model"] = self.model
        return "/detokenize", body

    def read_text(self, body: Dict[str, Any]) -> str:
        return str(body.get("prompt", ""))


def dialect(api: str, slot: int = -1, model: str = "") -> Any:
    if api == "llama.cpp":
        return LlamaServerApi(slot, model)
    if api == "vllm":
        return VllmApi(slot, model)
    raise ValueError(f"api must be one of {APIS}, got {api!r}")

