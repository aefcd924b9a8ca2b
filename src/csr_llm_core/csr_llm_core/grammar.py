"""Token-level decision grammar compiled from the intent catalogue.

A decision is generated as the JSON text
    NAME", "args": {"a1": "enum_value", "a2": 0.35}}
continuing the scaffold `{"intent": "` that ends the prompt suffix. The grammar is compiled once
per catalogue into per-intent programs over token ids, so that:

* at every free step only tokens the grammar allows can be chosen (greedy = argmax over the
  allowed ids), whatever the prompt says: only catalogued intents with well-typed arguments can
  come out;
* text the grammar fixes (punctuation, argument names, the rest of a name once its first token
  decides it) is never sampled: it is fed to the model in one batch when a later free choice needs
  it ("jump-forward"), and not evaluated at all when nothing follows. With intents that differ at
  their first token, a decision without arguments costs exactly one step: TTFT is the decision
  latency.

Each fixed piece of text is tokenized on its own, so the token sequence of a decision is canonical
and identical whichever path (cached prefix or full recompute) produced the logits.

Two optional adjustments, both properties of the grammar object (so the cached path and a full
recompute apply them identically):
* contextual calibration (Zhao et al. 2021, "Calibrate Before Use"): `calibrate()` stores the
  log-probabilities the model gives the intents' first tokens on content-free input (per context,
  e.g. per running task); the first choice then maximises
  log p(token | state) - log p(token | content-free), removing the model's prior for some intent
  names and for copying the running one (the choice among the allowed first tokens only);
* grounded arguments: `start(grounded=...)` limits string arguments to the enum values the state
  mentions (all values when it mentions none); it never changes which intent is chosen.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Generator, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from csr_llm_common.catalogue import ArgumentSpec, IntentCatalogue, ParsedDecision

Tokenize = Callable[[str], List[int]]
_Op = Tuple[List[int], np.ndarray]     # what a decode program yields: (tokens to feed, allowed ids)

MAX_INT_DIGITS = 6
MAX_FRACTION_DIGITS = 3


def _values(node: "_Trie") -> Iterator[str]:
    if node.value is not None:
        yield node.value
    for child in node.children.values():
        yield from _values(child)


class _Trie:
    """Token-sequence trie; `value` is set on the node that ends a complete sequence."""

    def __init__(self) -> None:
        self.children: Dict[int, "_Trie"] = {}
        self.value: Optional[str] = None

    def insert(self, tokens: Sequence[int], value: str) -> None:
        node = self
        for token in tokens:
            node = node.children.setdefault(token, _Trie())
        if node.value is not None or node.children:
            raise ValueError(f"ambiguous token sequence for {value!r}")
        node.value = value

    def single_completion(self) -> Optional[Tuple[List[int], str]]:
        """When exactly one sequence continues from here: its remaining tokens and value."""
        node, rest = self, []
        while node.value is None:
            if len(node.children) != 1:
                return None
            (token, node), = node.children.items()
            rest.append(token)
        return rest, node.value


@dataclass
class Step:
    """What the decoder needs next: evaluate `feed`, then pick one of `allowed` (or stop)."""
    feed: List[int]
    allowed: Optional[np.ndarray]  # None when the decision is complete

    @property
    def done(self) -> bool:
        return self.allowed is None


@dataclass
class DecodeRun:
    """One constrained decode; drive it with `first()` then `advance(chosen_token)`."""
    grammar: "DecisionGrammar"
    tokens: List[int] = field(default_factory=list)   # every token of the decision, in order
    chosen: List[int] = field(default_factory=list)   # the tokens the model picked
    grounded: Optional[FrozenSet[str]] = None      # string arguments limited to these (None: all)
    _gen: Optional[Generator[_Op, int, ParsedDecision]] = None
    _pending: List[int] = field(default_factory=list)
    _text: List[str] = field(default_factory=list)
    result: Optional[ParsedDecision] = None
    prior: Optional[Dict[int, float]] = None      # content-free log-probs of the first intent tokens
    # added to the intent's first-token log-probs instead of the prior (an intent adapter's output)
    intent_bias: Optional[Dict[int, float]] = None

    def first(self) -> Step:
        self._gen = self.grammar._program(self)
        return self._next(None)

    def advance(self, token: int) -> Step:
        self.chosen.append(token)
        self._pending.append(token)     # the model must see its own choice before the next one
        return self._next(token)

    def pick(self, step: Step, logits: np.ndarray) -> int:
        """Greedy choice among the allowed tokens (calibrated at the intent's first token)."""
        allowed = step.allowed
        if allowed is None:
            raise ValueError("the decision is complete: there is nothing to pick")
        scores = np.asarray(logits[allowed], dtype=np.float64)
        if self.at_intent_choice(step):
            if self.intent_bias is not None:
                scores = log_softmax(scores) + np.array([self.intent_bias.get(int(t), 0.0) for t in allowed])
            elif self.prior is not None:
                scores = log_softmax(scores) - np.array([self.prior.get(int(t), 0.0) for t in allowed])
        return int(allowed[int(np.argmax(scores))])

    def at_intent_choice(self, step: Step) -> bool:
        """Whether `step` picks the intent's first token (the first free step of every decision)."""
        return not self.chosen and step.allowed is not None and \
            np.array_equal(step.allowed, self.grammar.first_token_ids)

    def _next(self, token: Optional[int]) -> Step:
        gen = self._gen
        if gen is None:
            raise RuntimeError("call first() before advance()")
        try:
            op = gen.send(token) if token is not None else next(gen)
        except StopIteration as stop:
            self.result = stop.value
            self.tokens.extend(self._pending)
            self._pending = []
            return Step([], None)
        forced, allowed = op
        feed = self._pending + forced
        self.tokens.extend(feed)
        self._pending = []
        return Step(feed, allowed)

    def _defer(self, tokens: Sequence[int]) -> None:
        self._pending.extend(tokens)

    @property
    def text(self) -> str:
        return "".join(self._text)


def log_softmax(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    shifted = values - values.max()
    return shifted - np.log(np.exp(shifted).sum())


class DecisionGrammar:
    """Compiles an IntentCatalogue against a tokenizer into per-intent token programs."""

    def __init__(self, catalogue: IntentCatalogue, tokenize: Tokenize):
        self.catalogue = catalogue
        self.tokenize = tokenize
        self._quote = self._tokens('"')
        self._intents = _Trie()
        for name in catalogue.names:
            self._intents.insert(self._tokens(name) + self._quote, name)
        self._enum_tries: Dict[Tuple[str, str], _Trie] = {}
        self._digit_ids = {str(d): self._single(str(d)) for d in range(10)}
        self._dot = self._single(".")
        self._minus = self._single("-")
        self._bool = _Trie()
        self._bool.insert(self._tokens("true"), "true")
        self._bool.insert(self._tokens("false"), "false")
        for intent in catalogue.intents.values():
            for arg in intent.arguments:
                if arg.type == "string":
                    trie = _Trie()
                    for value in arg.enum:
                        trie.insert(self._tokens(value) + self._quote, value)
                    self._enum_tries[(intent.name, arg.name)] = trie
        self._grounded_tries: Dict[Tuple[str, str, frozenset], _Trie] = {}
        self.first_token_priors: Dict[str, Dict[int, float]] = {}
        # an IntentAdapter (intent_adapter.py) or None: when set, embedded engines hand it the hidden
        # state before the intent's first token and decide with its bias instead of the priors
        self.intent_adapter: Optional[Any] = None
        self._first_ids = np.fromiter(self._intents.children, dtype=np.int64)

    @property
    def first_token_ids(self) -> np.ndarray:
        """The tokens the intent choice starts with (the first free step of every decision)."""
        return self._first_ids

    def intent_first_tokens(self) -> Dict[str, int]:
        """The token each intent starts with; ValueError when two intents share one."""
        firsts: Dict[str, int] = {}
        for token, node in self._intents.children.items():
            names = list(_values(node))
            if len(names) != 1:
                raise ValueError(f"intents {names} start with the same token")
            firsts[names[0]] = int(token)
        return firsts

    def calibrate(self, content_free_logits: Sequence[np.ndarray], context: str = "") -> Dict[str, float]:
        """Store the content-free prior of the first intent tokens (mean probability over the inputs).

        `context` names the known part of the prompt the prior was measured with (the running
        task): decisions started with that context are calibrated with it. Returns the prior per
        intent name (probabilities, for logs and reports)."""
        ids = self.first_token_ids
        if not content_free_logits:
            raise ValueError("calibration needs at least one content-free logits vector")
        probs = np.mean([np.exp(log_softmax(np.asarray(logits)[ids])) for logits in content_free_logits], axis=0)
        self.first_token_priors[context] = {int(t): float(np.log(p)) for t, p in zip(ids, probs)}
        names = {}
        for token, node in self._intents.children.items():
            for name in _values(node):
                names[name] = float(probs[list(ids).index(token)])
        return names

    def _tokens(self, text: str) -> List[int]:
        tokens = list(self.tokenize(text))
        if not tokens:
            raise ValueError(f"text {text!r} tokenizes to nothing")
        return tokens

    def _single(self, text: str) -> int:
        tokens = self._tokens(text)
        if len(tokens) != 1:
            raise ValueError(f"the tokenizer splits {text!r}; numeric arguments need single-char tokens")
        return tokens[0]

    def start(self, grounded: Optional[Sequence[str]] = None, context: str = "") -> DecodeRun:
        """A new decode.

        `grounded`: the names the state mentions (string arguments are limited to them);
        `context`: which calibration prior applies (the one measured with it, else the default "")."""
        run = DecodeRun(self, grounded=frozenset(grounded) if grounded is not None else None)
        run.prior = self.first_token_priors.get(context, self.first_token_priors.get(""))
        return run

    def _enum_trie(self, run: DecodeRun, intent: str, arg: ArgumentSpec) -> _Trie:
        if run.grounded is None:
            return self._enum_tries[(intent, arg.name)]
        values = [v for v in arg.enum if v in run.grounded]
        if not values:
            return self._enum_tries[(intent, arg.name)]
        key = (intent, arg.name, frozenset(values))
        if key not in self._grounded_tries:
            trie = _Trie()
            for value in values:
                trie.insert(self._tokens(value) + self._quote, value)
            self._grounded_tries[key] = trie
        return self._grounded_tries[key]

    # The program is a generator: it yields (forced_tokens, allowed_ids) and receives the choice.
    # It reads and writes only `run`, the decode that started it.
    def _program(self, run: DecodeRun) -> Generator[_Op, int, ParsedDecision]:
        intent = yield from self._choose(run, self._intents)
        spec = self.catalogue[intent]
        run._text.append(f'{intent}"')
        values: Dict[str, Any] = {}
        if not spec.arguments:
            self._fixed(run, ', "args": {}}')
            return ParsedDecision(intent, {})
        separator = ', "args": {'
        for index, arg in enumerate(spec.arguments):
            last = index == len(spec.arguments) - 1
            closing = "}}" if last else ", "
            value: Any
            if arg.type == "string":
                self._fixed(run, f'{separator}"{arg.name}": "')
                value = yield from self._choose(run, self._enum_trie(run, intent, arg))
                run._text.append(f'{value}"')
                self._fixed(run, closing)
            elif arg.type == "bool":
                self._fixed(run, f'{separator}"{arg.name}": ')
                value = (yield from self._choose(run, self._bool)) == "true"
                run._text.append("true" if value else "false")
                self._fixed(run, closing)
            else:
                self._fixed(run, f'{separator}"{arg.name}": ')
                value = yield from self._number(run, arg, closing)
            values[arg.name] = value
            separator = ""
        return self.catalogue.validate(intent, values)

    def _fixed(self, run: DecodeRun, text: str) -> None:
        run._text.append(text)
        run._defer(self._tokens(text))

    def _choose(self, run: DecodeRun, trie: _Trie) -> Generator[_Op, int, str]:
        node = trie
        while True:
            completion = node.single_completion()
            if completion is not None:
                rest, value = completion
                run._defer(rest)
                return value
            allowed = np.fromiter(node.children, dtype=np.int64)
            token = yield (self._take_pending(run), allowed)
            node = node.children[token]

    @staticmethod
    def _take_pending(run: DecodeRun) -> List[int]:
        pending, run._pending = run._pending, []
        return pending

    def _number(self, run: DecodeRun, arg: ArgumentSpec,
                closing: str) -> Generator[_Op, int, Any]:
        """Digits (optional sign, at most one '.', bounded length) until the closing token."""
        closing_tokens = self._tokens(closing)
        terminator, after = closing_tokens[0], closing_tokens[1:]
        digits = np.array(list(self._digit_ids.values()), dtype=np.int64)
        by_id = {v: k for k, v in self._digit_ids.items()}
        text = ""
        int_digits = frac_digits = 0
        seen_dot = False
        while True:
            allowed: List[int] = []
            if not text and arg.minimum is not None and arg.minimum < 0:
                allowed.append(self._minus)
            leading_zero = not seen_dot and text.lstrip("-") == "0"   # no "007": the text stays JSON
            if (seen_dot and frac_digits < MAX_FRACTION_DIGITS) or \
                    (not seen_dot and int_digits < MAX_INT_DIGITS and not leading_zero):
                allowed.extend(digits.tolist())
            if arg.type == "float" and not seen_dot and int_digits > 0:
                allowed.append(self._dot)
            if int_digits > 0 and (not seen_dot or frac_digits > 0):
                allowed.append(terminator)
            token = yield (self._take_pending(run), np.array(allowed, dtype=np.int64))
            if token == terminator:
                break
            if token == self._minus:
                text += "-"
            elif token == self._dot:
                text += "."
                seen_dot = True
            else:
                text += by_id[token]
                if seen_dot:
                    frac_digits += 1
                else:
                    int_digits += 1
        run._text.append(text + closing)
        run._defer(after)
        return arg.clamp(float(text))

    def to_gbnf(self, grounded: Optional[Sequence[str]] = None) -> str:
        """The same grammar in llama.cpp GBNF (for remote llama.cpp/vLLM servers).

        `grounded` limits string arguments as `start(grounded=...)` does (all values when the
        state mentions none of them)."""
        names = frozenset(grounded) if grounded is not None else None
        rules = ["root ::= " + " | ".join(f"intent-{i.replace('_', '-')}" for i in self.catalogue.names)]
        for intent in self.catalogue.intents.values():
            parts = [json.dumps(f'{intent.name}", "args": {{')]
            for index, arg in enumerate(intent.arguments):
                parts.append(json.dumps(f'{", " if index else ""}"{arg.name}": '))
                if arg.type == "string":
                    values = [v for v in arg.enum if names is None or v in names] or list(arg.enum)
                    parts.append("(" + " | ".join(json.dumps(f'"{v}"') for v in values) + ")")
                elif arg.type == "bool":
                    parts.append('("true" | "false")')
                elif arg.type == "int":
                    parts.append('"-"? [0-9]{1,6}')
                else:
                    parts.append('"-"? [0-9]{1,6} ("." [0-9]{1,3})?')
            parts.append(json.dumps("}}"))
            rules.append(f"intent-{intent.name.replace('_', '-')} ::= " + " ".join(parts))
        return "\n".join(rules) + "\n"
