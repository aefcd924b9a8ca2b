"""What a decision asks, given the live state: suffix tokens, grounded names, calibration priors.

The suffix names the running task only when it is a catalogued intent (the name comes from a topic
anyone can publish), the paused task only when it is a valid catalogued decision, and, when the
template asks for it, repeats the newest event chunks; all of it is plain text, never control
tokens. With `calibrate` the grammar's first intent token is calibrated once per head on
content-free input (see grammar.py): that needs next-token logits in this process, so it runs on an
embedded engine only. With `ground_arguments` string arguments are limited to the names the live
state mentions.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from csr_llm_common.catalogue import DecisionError, IntentCatalogue, PausedTask
from .csr_state import Chunk, KIND_EVENT
from .grammar import DecisionGrammar
from .intent_adapter import DEFAULT_ADAPTER, AdapterMismatch, IntentAdapter, cache_kind, head_digest
from csr_llm_common.paths import expand_path
from .prompt import CONTENT_FREE_EVENTS, TURN_CLOSE, PromptTemplate, chunk_line, tokenize_suffix

Tokenize = Callable[[str], List[int]]


class DecisionPrompt:
    def __init__(self, catalogue: IntentCatalogue, template: PromptTemplate, tokenize: Tokenize,
                 tokenize_plain: Tokenize, log: logging.Logger):
        self.catalogue = catalogue
        self.template = template
        self.tokenize = tokenize
        self.tokenize_plain = tokenize_plain
        self.log = log
        self.rejected_running: List[str] = []
        self._enum_patterns = {value: re.compile(r"\b" + re.escape(value), re.IGNORECASE)
                               for intent in catalogue.intents.values() for arg in intent.arguments
                               for value in arg.enum}

    def suffix_tokens(self, running: str, interrupts: int, events: Sequence[str], paused: str = "") -> List[int]:
        return tokenize_suffix(self.template.suffix_segments(running, interrupts, events, paused),
                               self.tokenize, self.tokenize_plain)

    def paused_text(self, paused: Optional[PausedTask]) -> str:
        """The paused task as the prompt may show it: a valid catalogued decision, else nothing."""
        if paused is None or not paused.intent:
            return ""
        try:
            return PausedTask(paused.intent, self.catalogue.validate(paused.intent, paused.arguments).arguments).text()
        except DecisionError as err:
            if len(self.rejected_running) < 16:
                self.rejected_running.append(f"paused {paused.intent[:80]}")
                self.log.warning("paused task is not a valid decision (%s): shown as nothing", err)
            return ""

    def shown_running(self, running: str, paused: Optional[PausedTask]) -> str:
        """What {running} names: with `running_shows_paused_task`, the paused task while a pausing
        intent holds it (a task stays the running task through the pause, as the router resumes it);
        with `bare_pause_shows_nothing`, nothing while a pausing intent holds no task."""
        intents = self.catalogue.intents
        if running not in intents or not intents[running].pauses_task:
            return running
        held = paused.intent if paused is not None else ""
        holds_task = held in intents and not intents[held].pauses_task
        if holds_task and self.template.running_shows_paused_task:
            return held
        if not holds_task and self.template.bare_pause_shows_nothing:
            return ""
        return running

    def running_intent(self, running: str) -> str:
        """The running task as the prompt may show it: a catalogued intent name, else nothing."""
        if not running or running in self.catalogue:
            return running or ""
        if len(self.rejected_running) < 16:
            self.rejected_running.append(running[:80])
            self.log.warning("running task %r is not a catalogued intent: shown as nothing", running[:80])
        return ""

    def inputs(self, chunks: Sequence[Chunk], running: str, interrupts: int,
               paused: Optional[PausedTask] = None) -> Tuple[List[int], Optional[List[str]], str]:
        """(suffix tokens, grounded names, calibration context) for a decision on these chunks."""
        events = [c.text for c in chunks if c.kind == KIND_EVENT]
        running = self.running_intent(self.shown_running(running, paused))
        suffix = self.suffix_tokens(running, int(interrupts), events, self.paused_text(paused))
        grounded = None
        if self.template.ground_arguments:
            text = "\n".join(c.text for c in chunks)
            grounded = [value for value, pattern in self._enum_patterns.items() if pattern.search(text)]
        return suffix, grounded, running

    def anchor_tokens(self) -> dict:
        """The newline and end-of-turn ids an adapter's Anchors find lines and the question's end by."""
        return {"newline": self.tokenize_plain("\n")[-1], "turn_end": self.tokenize(TURN_CLOSE)[0]}

    def load_adapter(self, resources: Sequence, grammar: DecisionGrammar,
                     head: List[int]) -> Optional[IntentAdapter]:
        """The template's intent adapter when it fits the model, head and catalogue; else None (logged)."""
        setting = self.template.intent_adapter
        if not setting:
            return None
        if not all(e.is_local for e in resources):
            self.log.warning("intent adapter needs the hidden state in this process: off for every resource, "
                             "as %s run on a server", ", ".join(e.name for e in resources if not e.is_local))
            return None
        from .model import model_checksum
        path = DEFAULT_ADAPTER if setting == "default" else Path(expand_path(setting))
        engine = resources[0]
        try:
            adapter = IntentAdapter.load(path, model_sha256=model_checksum(engine.model_path),
                                         head_sha256=head_digest(head), n_embd=engine.n_embd,
                                         first_tokens=grammar.intent_first_tokens(),
                                         suffix=self.template.suffix_settings(), **self.anchor_tokens())
        except AdapterMismatch as err:
            self.log.warning("%s; deciding without it", err)
            return None
        meta = adapter.meta
        self.log.info("intent adapter %s: trained on %s examples, %s of them from %s recorded runs (held-out "
                      "accuracy %s generated, %s live; bare model %s, %s)", path.name, meta.get("train_examples"),
                      meta.get("live_examples", 0), meta.get("live_runs", 0), meta.get("val_accuracy"),
                      meta.get("live_val_accuracy", "-"), meta.get("val_base_accuracy"),
                      meta.get("live_val_base_accuracy", "-"))
        here = cache_kind({"swa_full": not getattr(engine, "n_swa", 0)})
        if cache_kind(meta) != here:      # another kernel path: the hidden states it reads differ
            self.log.warning("intent adapter %s was fitted on %s sliding-window caches, this context's is %s "
                             "(swa_full): its decisions may differ from those it was scored on",
                             path.name, cache_kind(meta), here)
        return adapter

    def calibrate(self, engine, grammar: DecisionGrammar, head: List[int]) -> dict:
        """Content-free first-token priors, once per head, one per running task the suffix can name.

        The running task is the known part of the question; the state is the template's neutral
        state lines (sensor summaries, no events) and content-free stand-ins for the events. Runs
        on `engine` (embedded: it needs logits), left holding the head."""
        priors = {}
        neutral = [t for line in self.template.calibration_state for t in self.tokenize_plain(chunk_line(line))]
        for running in [""] + (self.catalogue.names if self.template.calibrate_per_running else []):
            logits = []
            for stand_in in CONTENT_FREE_EVENTS:
                state = self.tokenize_plain(chunk_line(stand_in)) if stand_in else []
                engine.sync(head + neutral + state, by_line=True)
                events = [stand_in] if stand_in else []
                logits.append(engine.logits_after(self.suffix_tokens(running, 0, events)))
            priors[running] = grammar.calibrate(logits, context=running)
        engine.sync(head, by_line=True)
        self.log.info("intent calibration, content-free first-token probabilities with nothing running: %s",
                      ", ".join(f"{name}={p:.3f}" for name, p in priors[""].items()))
        return priors
