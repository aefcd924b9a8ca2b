"""Intent adapter: a small trained correction of the model's intent choice, from its own hidden state.

The decision grammar fixes the intent at its first token, so the model's choice is the argmax of
its next-token log-probabilities over the intents' first tokens. The adapter adds a learned bias
to those log-probabilities, computed from the model's final hidden state at that position:

    score(intent) = log p_model(first token of intent) + w_intent . z + b_intent,
    z = (hidden - mean) / scale

This is the same as fine-tuning the output-embedding rows of the intent tokens (a low-rank update
of the LM head where the choice is made): the model reads the state and the question, the adapter
only re-weighs how its final representation maps to the catalogue. It is trained by
`python -m csr_llm_core.lab.intent_adapter_build` (`make intent-adapter`) from generated situations
(decision_training.py), never from a model's answers, and is valid only for the model file, prompt
head and catalogue it was trained with: `load` refuses anything else with one reason, and the
reasoner then decides without it (calibrated as configured). Plain module: numpy (scipy for the fit).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

FORMAT = "csr-llm-intent-adapter/1"
DEFAULT_ADAPTER = Path(__file__).resolve().parent / "data" / "intent_adapter_gemma3_270m.npz"


class AdapterMismatch(ValueError):
    """The adapter file is unreadable or was trained for another model, head or catalogue."""


def cache_kind(meta: dict) -> str:
    """The sliding-window cache an adapter's features were recorded on (its meta, or a recording key)."""
    return "full-size" if meta.get("swa_full", True) else "window-only"


def head_digest(head_tokens: Sequence[int]) -> str:
    return hashlib.sha256(np.asarray(head_tokens, dtype=np.int32).tobytes()).hexdigest()


@dataclass
class Anchors:
    """Where in the suffix the adapter reads the model's final hidden state: always its last token,
    and optionally the question's last token and the ends of the question's last `lines` lines
    (their newline tokens, newest first: what the model made of each event line as it ended). A
    missing line repeats the earliest one found. Bound to the tokenizer's newline and end-of-turn
    ids (`bind`); the question ends at the suffix's last end-of-turn token."""
    lines: int = 0
    question_end: bool = False
    newline: int = -1
    turn_end: int = -1

    @property
    def count(self) -> int:
        return 1 + int(self.question_end) + self.lines

    def positions(self, suffix: Sequence[int]) -> List[int]:
        """Indices into `suffix`, in feature order: last token, question end, newest line end, ..."""
        last = len(suffix) - 1
        chosen = [last]
        if not (self.question_end or self.lines):
            return chosen
        closes = [i for i, token in enumerate(suffix) if token == self.turn_end]
        close = closes[-1] if closes else last
        if self.question_end:
            chosen.append(max(close - 1, 0))
        # index 0 is the newline that separates the suffix from the state log: not a line's end
        ends = [i for i in range(close - 1, 0, -1) if suffix[i] == self.newline][:self.lines]
        return chosen + ends + [ends[-1] if ends else chosen[-1]] * (self.lines - len(ends))

    def to_meta(self) -> Dict[str, object]:
        return {"lines": self.lines, "question_end": self.question_end}

    @classmethod
    def from_meta(cls, meta: Optional[Mapping[str, object]]) -> "Anchors":
        meta = meta or {}
        return cls(int(meta.get("lines", 0)), bool(meta.get("question_end", False)))  # type: ignore[call-overload]


@dataclass
class IntentAdapter:
    intents: List[str]             # row order of `weights`
    weights: np.ndarray            # (n_intents, n_embd)
    bias_terms: np.ndarray         # (n_intents,)
    mean: np.ndarray               # (n_embd,) feature standardisation
    scale: np.ndarray              # (n_embd,)
    meta: Dict[str, object] = field(default_factory=dict)
    tokens: Dict[str, int] = field(default_factory=dict)    # intent -> first token (bound at load)
    anchors: Anchors = field(default_factory=Anchors)      # where the features are read (meta "anchors")

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        z = (np.asarray(hidden, dtype=np.float64) - self.mean) / self.scale
        return self.weights @ z + self.bias_terms

    def bias(self, hidden: np.ndarray) -> Dict[int, float]:
        """Per first token, what to add to the model's log-probability (DecodeRun.intent_bias)."""
        values = self.logits(hidden)
        return {self.tokens[name]: float(v) for name, v in zip(self.intents, values)}

    def bind(self, first_tokens: Mapping[str, int], newline: int = -1, turn_end: int = -1) -> "IntentAdapter":
        if sorted(first_tokens) != sorted(self.intents):
            raise AdapterMismatch(f"trained for intents {sorted(self.intents)}, "
                                  f"the catalogue has {sorted(first_tokens)}")
        self.tokens = {name: int(first_tokens[name]) for name in self.intents}
        self.anchors.newline, self.anchors.turn_end = int(newline), int(turn_end)
        return self

    # --- file ------------------------------------------------------------------------------
    def save(self, path: Union[str, Path]) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = dict(self.meta, format=FORMAT, intents=self.intents, anchors=self.anchors.to_meta())
        with open(path, "wb") as handle:
            np.savez_compressed(handle, weights=self.weights.astype(np.float32),
                                bias=self.bias_terms.astype(np.float32), mean=self.mean.astype(np.float32),
                                scale=self.scale.astype(np.float32), meta=np.array(json.dumps(meta, sort_keys=True)))

    @classmethod
    def load(cls, path: Union[str, Path], *, model_sha256: str, head_sha256: str, n_embd: int,
             first_tokens: Mapping[str, int], newline: int = -1, turn_end: int = -1,
             suffix: Optional[Mapping] = None) -> "IntentAdapter":
        """Read and check an adapter; AdapterMismatch (one reason per problem) unless it fits.
        `suffix`: the live question's settings (PromptTemplate.suffix_settings), checked against
        those the adapter was fitted to where its file records them."""
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(str(data["meta"]))
                adapter = cls(list(meta["intents"]), data["weights"].astype(np.float64),
                              data["bias"].astype(np.float64), data["mean"].astype(np.float64),
                              data["scale"].astype(np.float64), meta, anchors=Anchors.from_meta(meta.get("anchors")))
        except (OSError, KeyError, ValueError) as err:
            raise AdapterMismatch(f"intent adapter {path}: unreadable ({err})") from err
        problems = []
        if meta.get("format") != FORMAT:
            problems.append(f"format {meta.get('format')!r}, expected {FORMAT!r}")
        if meta.get("model_sha256") != model_sha256:
            problems.append("it was trained for another model file")
        if meta.get("head_sha256") != head_sha256:
            problems.append("it was trained for another prompt head (config/prompt.yaml or intents changed)")
        if suffix is not None and "suffix" in meta and meta["suffix"] != dict(suffix):
            changed = sorted(k for k in set(meta["suffix"]) | set(suffix) if meta["suffix"].get(k) != suffix.get(k))
            problems.append(f"it was trained for another question ({', '.join(changed)} changed in config/prompt.yaml)")
        width = n_embd * adapter.anchors.count
        if adapter.weights.shape != (len(adapter.intents), width) or adapter.mean.shape != (width,):
            problems.append(f"its weights are {adapter.weights.shape}, the model's hidden size is {n_embd} "
                            f"at {adapter.anchors.count} positions")
        if not np.all(np.isfinite(adapter.weights)) or not np.all(adapter.scale > 0):
            problems.append("its weights are not finite")
        if problems:
            raise AdapterMismatch(f"intent adapter {path} refused: " + "; ".join(problems))
        return adapter.bind(first_tokens, newline, turn_end)


# --- training ----------------------------------------------------------------------------------
def _log_softmax(values: np.ndarray) -> np.ndarray:
    shifted = values - values.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def adapted_scores(base_logp: np.ndarray, z: np.ndarray, weights: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """The adapted intent scores for rows of standardized hidden states `z` (n, d)."""
    return base_logp + z @ weights.T + bias


def fit(hidden: np.ndarray, base_logp: np.ndarray, accept: np.ndarray, *, l2: float = 0.05,
        l2_bias: float = 1e-3, max_iterations: int = 5000, sample_weight: Optional[np.ndarray] = None,
        ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Fit (weights, bias, mean, scale) by L-BFGS on the set likelihood, to convergence.

    `hidden` (n, d) hidden states, `base_logp` (n, k) the model's log-probs of the k intents'
    first tokens, `accept` (n, k) booleans: the intents an operator accepts. The loss is
    -log sum_{a accepted} softmax(scores)_a (any accepted intent is right), plus l2 * |W|^2 and
    l2_bias * |b|^2. Why converged and why the bias penalty: where the labels accept a set (stop or
    hold_position) the loss barely constrains the split inside it, and a fixed number of Adam steps
    wandered along those directions on rounding noise (the rows' order alone moved a bias by 1.0 and
    39 % of the decisions on recorded bench states). At the optimum the fit is the same in any order."""
    from scipy.optimize import minimize      # the fit only: the reasoning node never imports it
    hidden = np.asarray(hidden, dtype=np.float64)
    accept = np.asarray(accept, dtype=bool)
    if not accept.any(axis=1).all():
        raise ValueError("every example needs at least one accepted intent")
    mean = hidden.mean(axis=0)
    scale = hidden.std(axis=0) + 1e-3
    z = (hidden - mean) / scale
    base_logp = np.asarray(base_logp, dtype=np.float64)
    n, d = z.shape
    k = accept.shape[1]
    weight = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    weight = weight / weight.sum()

    def loss_and_gradient(flat: np.ndarray) -> Tuple[float, np.ndarray]:
        weights, bias = flat[:k * d].reshape(k, d), flat[k * d:]
        logp = _log_softmax(adapted_scores(base_logp, z, weights, bias))
        p = np.exp(logp)
        accepted_mass = (p * accept).sum(axis=1)
        loss = -(weight * np.log(accepted_mass)).sum() + l2 * (weights * weights).sum() + l2_bias * (bias * bias).sum()
        # d(-log sum_A p)/d scores = p - p * 1_A / sum_A p
        grad_scores = (p - p * accept / accepted_mass[:, None]) * weight[:, None]
        grad = np.concatenate([(grad_scores.T @ z + 2 * l2 * weights).ravel(),
                               grad_scores.sum(axis=0) + 2 * l2_bias * bias])
        return float(loss), grad

    result = minimize(loss_and_gradient, np.zeros(k * d + k), jac=True, method="L-BFGS-B",
                      options={"maxiter": max_iterations, "gtol": 1e-9, "ftol": 1e-14})
    if not result.success and result.nit >= max_iterations:
        raise RuntimeError(f"intent adapter fit did not converge in {max_iterations} iterations: {result.message}")
    return result.x[:k * d].reshape(k, d), result.x[k * d:], mean, scale


Weights = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]     # (weights, bias, mean, scale)


def chosen_intents(hidden: np.ndarray, base_logp: np.ndarray, adapter: Optional[Weights] = None) -> np.ndarray:
    """Per row, the index of the intent the decision starts with (the bare model's when `adapter` is None)."""
    if adapter is None:
        return np.asarray(base_logp).argmax(axis=1)
    weights, bias, mean, scale = adapter
    z = (np.asarray(hidden, dtype=np.float64) - mean) / scale
    return adapted_scores(np.asarray(base_logp), z, weights, bias).argmax(axis=1)


def accuracy(hidden: np.ndarray, base_logp: np.ndarray, accept: np.ndarray,
             adapter: Optional[Weights] = None) -> float:
    """Share of rows whose chosen intent is accepted (the bare model's when `adapter` is None)."""
    chosen = chosen_intents(hidden, base_logp, adapter)
    return float(np.asarray(accept)[np.arange(len(chosen)), chosen].mean())


def read_weights(path: Union[str, Path]) -> Tuple[dict, Weights]:
    """An adapter file's meta and (weights, bias, mean, scale), unchecked (offline tools check what they need)."""
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        weights = tuple(data[k].astype(np.float64) for k in ("weights", "bias", "mean", "scale"))
    return meta, weights  # type: ignore[return-value]
