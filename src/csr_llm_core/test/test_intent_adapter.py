"""Intent adapter: generated labels, the fit, the file's checks, and the decode it biases."""
import json
import logging
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from csr_llm_common.catalogue import IntentCatalogue
from csr_llm_core.lab.decision_training import PAUSING, SAFE, generate
from csr_llm_core.grammar import DecisionGrammar
from csr_llm_core.intent_adapter import (AdapterMismatch, Anchors, IntentAdapter, accuracy, chosen_intents, fit,
                                        head_digest)
from csr_llm_core.prompt import PromptTemplate

CONFIG = Path(__file__).resolve().parents[3] / "config"


@pytest.fixture(scope="module")
def catalogue():
    return IntentCatalogue.from_file(CONFIG / "intents.yaml")


@pytest.fixture(scope="module")
def episodes():
    return generate(60, seed=3)


def _events_before(stream, position):
    return [c.text for c in stream.chunks[:position] if c.kind == 0]


def test_generated_episodes_are_reproducible_and_every_probe_is_labelled(episodes, catalogue):
    again = generate(60, seed=3)
    assert [(n, [c.text for c in s.chunks]) for n, s in episodes] == [(n, [c.text for c in s.chunks]) for n, s in again]
    probes = [p for _, s in episodes for _, p in s.probes]
    assert len(probes) > 300
    for probe in probes:
        assert probe.accept and probe.accept <= set(catalogue.names)
        assert probe.running in ("", *catalogue.names)
    counts = Counter(name for p in probes for name in p.accept)
    assert all(counts[name] > 0 for name in catalogue.names)       # every intent is right somewhere
    # the running task shown is not always the answer: copying it must not be enough
    assert sum(p.running not in p.accept for p in probes) > 0.15 * len(probes)


def test_generated_labels_follow_the_situation(episodes):
    for _, stream in episodes:
        for position, probe in stream.probes:
            newest = _events_before(stream, position)[-1].split("events: ", 1)[-1]
            if "overheating" in newest or "over the limit" in newest or "overheat warning" in newest:
                assert probe.accept == SAFE, newest
            if newest.startswith(("person close", "child standing", "a person is 0")):
                assert probe.accept == SAFE | {"back_off"}, newest
            if newest.startswith(("operator: cancel", "cancel that")):
                assert probe.accept == SAFE, newest


def test_generated_probes_after_a_pause_show_it_as_the_live_router_does(episodes, catalogue):
    """Where only pausing was acceptable, the router then reports a pause (as it does live after
    `hold_position`), so the first probe where acting is right again ("person left", a cooled motor,
    a new order after a cancel) is mostly asked with the pause running: resuming is learnt from the
    state the robot is really in, not from a question that still names the task."""
    assert PAUSING == {name for name in catalogue.names if catalogue.intents[name].pauses_task}
    shown = Counter()
    for _, stream in episodes:
        before = None
        for _, probe in stream.probes:
            if before is not None and before <= PAUSING and not probe.accept <= PAUSING:
                shown[probe.running] += 1
            before = probe.accept
    assert sum(shown.values()) > 30
    assert sum(shown[name] for name in PAUSING) > 0.5 * sum(shown.values()), shown


def test_memory_episodes_decide_on_a_fact_said_long_before(episodes):
    """A moved object: fetching it means driving where it was moved, many chunks after the note."""
    relocated = [(n, s) for n, s in episodes if n.startswith("relocated")]
    assert relocated
    for _, stream in relocated:
        note = next(i for i, c in enumerate(stream.chunks) if "cart in the" in c.text)
        zone = stream.chunks[note].text.rsplit(" ", 1)[-1]
        fetch = [(pos, p) for pos, p in stream.probes if p.args.get("zone") == zone and p.accept == {"move_to"}]
        between = sum(len(c.text) for c in stream.chunks[note + 1:fetch[0][0]]) if fetch else 0
        assert between > 4500, "the note must lie well before the decision (~1,500 tokens)"


def test_committed_rounds_are_labelled_probes_on_the_chunks_before_them(catalogue):
    """The DAgger rounds the adapter is fitted on ship as probe files (live_probe_files.py)."""
    from csr_llm_core.lab.live_probe_files import committed_rounds, read, streams
    files = committed_rounds()
    assert files, "no committed round"
    for path in files:
        content = read(path)
        assert {"count", "seed", "bundled_adapter_sha256"} <= set(content["decided_with"]), path
        for run_id, stream in streams(path):
            assert run_id.startswith(path.name.split(".")[0] + "/") and stream.probes, run_id
            assert [c.seq for c in stream.chunks] == sorted(c.seq for c in stream.chunks)
            positions = [position for position, _ in stream.probes]
            assert positions == sorted(positions) and 0 < positions[0] and positions[-1] == len(stream.chunks)
            for _, probe in stream.probes:
                assert probe.accept and probe.accept <= set(catalogue.names), (run_id, probe)
                assert probe.running in set(catalogue.names) | {""}, (run_id, probe)


def test_fit_learns_what_the_hidden_state_says_and_beats_the_bare_model():
    rng = np.random.default_rng(0)
    n, d, k = 600, 32, 6
    labels = rng.integers(0, k, n)
    hidden = rng.normal(size=(n, d))
    hidden[np.arange(n), labels] += 4.0           # the state carries the answer
    base = np.log(np.full((n, k), 1.0 / k))
    base[:, 0] += 2.0                              # a bare model that prefers intent 0
    accept = np.zeros((n, k), dtype=bool)
    accept[np.arange(n), labels] = True
    accept[labels == 5, 4] = True                  # a set label: either is right
    weights = fit(hidden[:400], base[:400], accept[:400], l2=1e-3)
    assert accuracy(hidden[400:], base[400:], accept[400:]) < 0.4
    assert accuracy(hidden[400:], base[400:], accept[400:], weights) > 0.9


def test_fit_is_the_same_whatever_the_order_of_its_rows():
    """Hidden states are collinear and heavy-tailed, and a set label (stop or hold_position) leaves
    the split inside the set nearly free: a fixed number of Adam steps then ends wherever rounding
    led it (the rows' order alone moved a bias by 1.0 and 39 % of the decisions on recorded bench
    states; 34 of these 3,000 rows). The fit runs to its optimum, which no order changes."""
    rng = np.random.default_rng(0)
    n, d, k, rank = 3000, 256, 6, 40
    labels = rng.integers(0, k, n)
    latent = rng.standard_t(3, size=(n, rank))
    latent[np.arange(n), labels] += 1.0
    hidden = latent @ rng.normal(size=(rank, d)) + 0.05 * rng.normal(size=(n, d))
    base = rng.normal(size=(n, k))
    accept = np.zeros((n, k), dtype=bool)
    accept[np.arange(n), labels] = True
    accept[labels >= 3, 3:] = True               # "stop or hold"
    noisy = rng.random(n) < 0.2
    accept[noisy, rng.integers(0, k, n)[noisy]] = True
    weight = np.where(labels >= 3, 4.0, 1.0)
    order = rng.permutation(n)
    first = fit(hidden, base, accept, sample_weight=weight)
    again = fit(hidden[order], base[order], accept[order], sample_weight=weight[order])
    for a, b in zip(first, again):
        assert np.allclose(a, b, atol=1e-5), np.abs(a - b).max()
    assert np.array_equal(chosen_intents(hidden, base, first), chosen_intents(hidden, base, again))


def test_hold_weight_marks_the_probes_where_only_a_pause_is_acceptable(catalogue):
    from csr_llm_core.lab.intent_adapter_build import hold_only
    names = ["open_door", "move_to", "stop", "hold_position", "back_off"]
    accept = np.array([[0, 0, 1, 1, 0],         # stop or hold: acting would be the unsafe mistake
                       [1, 0, 1, 1, 0],         # carry on or pause
                       [0, 1, 0, 0, 0],
                       [0, 0, 0, 0, 1]], dtype=bool)
    assert hold_only(accept, names, catalogue).tolist() == [True, False, False, True]


def test_pause_errors_count_acting_where_only_a_pause_fits_and_pausing_where_only_a_task_fits(catalogue):
    from csr_llm_core.lab.intent_adapter_build import pause_errors
    names = ["open_door", "move_to", "stop", "hold_position", "back_off"]
    accept = np.array([[0, 0, 1, 1, 0],         # pause only: chose move_to (acted)
                       [0, 0, 1, 1, 0],         # pause only: chose stop
                       [1, 0, 0, 0, 0],         # task only: chose hold_position (held)
                       [0, 1, 0, 0, 0],         # task only: chose open_door (wrong task, not held)
                       [1, 0, 1, 0, 0]], dtype=bool)  # either: neither count
    base = np.log(np.full((5, 5), 0.1))
    for row, chosen in enumerate([1, 2, 3, 0, 3]):
        base[row, chosen] = np.log(0.6)             # the bare model's choice (no adapter)
    errors = pause_errors(np.zeros((5, 4)), base, accept, None, names, catalogue, prefix="val_")
    assert errors == {"val_acted_hold": [1, 2], "val_held_act": [1, 2]}


def _adapter(catalogue, n_embd=8):
    k = len(catalogue.names)
    return IntentAdapter(list(catalogue.names), np.zeros((k, n_embd)), np.zeros(k), np.zeros(n_embd), np.ones(n_embd),
                         {"model_sha256": "m", "head_sha256": head_digest([1, 2, 3]), "suffix": SHIPPED_SUFFIX})


SHIPPED_SUFFIX = PromptTemplate.from_file(CONFIG / "prompt.yaml").suffix_settings()


def test_adapter_file_is_refused_for_another_model_head_question_catalogue_or_size(tmp_path, catalogue):
    path = tmp_path / "adapter.npz"
    _adapter(catalogue).save(path)
    firsts = {name: i for i, name in enumerate(catalogue.names)}
    ok = IntentAdapter.load(path, model_sha256="m", head_sha256=head_digest([1, 2, 3]), n_embd=8, first_tokens=firsts,
                            suffix=SHIPPED_SUFFIX)
    assert ok.tokens == firsts
    other_question = dict(SHIPPED_SUFFIX, question="What now? {running}", recent_events=5)
    cases = [({"model_sha256": "other"}, "another model"), ({"head_sha256": head_digest([9])}, "another prompt head"),
             ({"suffix": other_question}, r"another question \(question, recent_events changed"),
             ({"n_embd": 16}, "hidden size is 16"), ({"first_tokens": {"stop": 1}}, "the catalogue has")]
    for change, reason in cases:
        kwargs = {**dict(model_sha256="m", head_sha256=head_digest([1, 2, 3]), n_embd=8, first_tokens=firsts), **change}
        with pytest.raises(AdapterMismatch, match=reason):
            IntentAdapter.load(path, **kwargs)
    (tmp_path / "broken.npz").write_bytes(b"not an adapter")
    with pytest.raises(AdapterMismatch, match="unreadable"):
        IntentAdapter.load(tmp_path / "broken.npz", **dict(model_sha256="m", head_sha256="h", n_embd=8,
                                                           first_tokens=firsts))


def test_anchors_read_the_question_end_and_its_line_ends_newest_first():
    newline, turn_end = 1, 2
    #         0: leading newline, line A ends at 3, line B at 6, question ends at 8, turn at 9
    suffix = [1, 50, 51, 1, 52, 53, 1, 54, 55, 2, 1, 60, 1, 70]
    anchors = Anchors(lines=2, question_end=True, newline=newline, turn_end=turn_end)
    assert anchors.count == 4
    assert anchors.positions(suffix) == [13, 8, 6, 3]
    assert Anchors(lines=3, newline=1, turn_end=2).positions(suffix) == [13, 6, 3, 3]   # a missing line repeats
    assert Anchors().positions(suffix) == [13]
    assert Anchors(lines=1, newline=1, turn_end=2).positions([1, 50, 51, 2, 60]) == [4, 4]   # no line end at all
    assert Anchors.from_meta(anchors.to_meta()).to_meta() == {"lines": 2, "question_end": True}
    assert Anchors.from_meta(None).count == 1          # a file without anchors reads the last token only


def test_a_build_parses_anchors_and_the_adapter_file_keeps_them(tmp_path, catalogue):
    from csr_llm_core.lab.intent_adapter_build import parse_anchors
    assert parse_anchors("last").count == 1
    assert parse_anchors("question_end,lines=2").to_meta() == {"lines": 2, "question_end": True}
    with pytest.raises(ValueError, match="unknown anchor"):
        parse_anchors("lines=1,middle")
    k, width = len(catalogue.names), 8 * 2
    adapter = IntentAdapter(list(catalogue.names), np.zeros((k, width)), np.zeros(k), np.zeros(width), np.ones(width),
                            {"model_sha256": "m", "head_sha256": "h"}, anchors=parse_anchors("lines=1"))
    adapter.save(tmp_path / "a.npz")
    firsts = {name: i for i, name in enumerate(catalogue.names)}
    loaded = IntentAdapter.load(tmp_path / "a.npz", model_sha256="m", head_sha256="h", n_embd=8, first_tokens=firsts,
                                newline=7, turn_end=9)
    assert (loaded.anchors.lines, loaded.anchors.newline, loaded.anchors.turn_end) == (1, 7, 9)
    with pytest.raises(AdapterMismatch, match="at 2 positions"):
        IntentAdapter.load(tmp_path / "a.npz", model_sha256="m", head_sha256="h", n_embd=16, first_tokens=firsts)


class _Tokens:
    """A tokenizer where every word is one token (enough for the grammar's structure)."""

    def __init__(self):
        self.ids = {}

    def __call__(self, text):
        import re
        return [self.ids.setdefault(piece, len(self.ids) + 10) for piece in re.findall(r"\w+|[^\w\s]|\s+", text)]


def test_intent_bias_decides_the_first_token_instead_of_the_prior(catalogue):
    grammar = DecisionGrammar(catalogue, _Tokens())
    firsts = grammar.intent_first_tokens()
    content_free = np.zeros(400)
    content_free[firsts["open_door"]] = 5.0        # the model's prior: open_door whatever the state
    grammar.calibrate([content_free])
    live = content_free.copy()
    live[firsts["stop"]] = 4.0                     # the live state adds evidence for stop
    run = grammar.start()
    step = run.first()
    assert run.at_intent_choice(step)
    assert run.pick(step, live) == firsts["stop"]              # calibrated: the prior is removed
    run = grammar.start()
    step = run.first()
    run.intent_bias = {firsts["back_off"]: 9.0}
    assert run.pick(step, live) == firsts["back_off"]          # the adapter's bias replaces the prior


@pytest.mark.slow
def test_bundled_adapter_loads_for_the_shipped_prompt_and_keeps_csr_equal_to_recompute(engines, catalogue, caplog):
    """The committed adapter fits the bundled model and config/prompt.yaml; CSR == recompute with it."""
    import yaml
    from csr_llm_core.reasoner import Reasoner, ReasonerConfig
    from csr_llm_core.lab.synthetic import chunk_text
    template = PromptTemplate.from_mapping(yaml.safe_load((CONFIG / "prompt.yaml").read_text()))
    assert template.intent_adapter == "default"
    cached, fresh = engines
    with caplog.at_level(logging.INFO):
        reasoner = Reasoner([cached], catalogue, template, ReasonerConfig(tau_mem=2400, mode="sync"))
    assert reasoner.grammar.intent_adapter is not None, caplog.text
    assert "intent adapter" in caplog.text
    for seq in range(12):
        reasoner.add_chunk(seq, chunk_text(seq), kind=0 if seq % 4 == 0 else 1)
    reasoner.add_chunk(12, "[9.0s] events: task: open the door", kind=0)
    csr = reasoner.decide(running="")
    suffix, grounded, context = reasoner.decision_inputs("")
    fresh.clear()
    full = fresh.decide(list(cached.tokens) + suffix, reasoner.grammar, grounded, context)
    assert csr.result.tokens == full.tokens, (csr.result.text, full.text)
    reasoner.close()
    # another head (a changed prompt): refused with one line, decisions go on calibrated
    caplog.clear()
    other = replace(template, robot_description=template.robot_description + " It is a test robot.")
    with caplog.at_level(logging.WARNING):
        reasoner = Reasoner([cached], catalogue, other, ReasonerConfig(tau_mem=2400, mode="sync"))
    assert reasoner.grammar.intent_adapter is None and reasoner.calibration is not None
    assert "another prompt head" in caplog.text
    assert reasoner.decide().result.decision.intent in catalogue
    reasoner.close()
    # the same head, another question: the adapter was fitted to the old one, so it is refused too
    caplog.clear()
    asked_otherwise = replace(template, question=template.question + "{paused}")
    with caplog.at_level(logging.WARNING):
        reasoner = Reasoner([cached], catalogue, asked_otherwise, ReasonerConfig(tau_mem=2400, mode="sync"))
    assert reasoner.grammar.intent_adapter is None and "another question (question changed" in caplog.text
    reasoner.close()
    # a context whose sliding-window cache is of the other kind than the one it was fitted on: kept, with a warning
    from csr_llm_core.decision_prompt import DecisionPrompt
    from csr_llm_core.engine import LlamaEngine
    from csr_llm_core.intent_adapter import DEFAULT_ADAPTER
    with np.load(DEFAULT_ADAPTER, allow_pickle=False) as saved:
        fitted_full = json.loads(str(saved["meta"])).get("swa_full", True)
    other_kind = LlamaEngine(n_ctx=1024, swa_full=not fitted_full, name="other-kind")
    prompt = DecisionPrompt(catalogue, template, other_kind.tokenize, other_kind.tokenize_plain,
                            logging.getLogger("other-kind"))
    grammar = DecisionGrammar(catalogue, other_kind.tokenize_plain)
    head = other_kind.tokenize(template.head_text(catalogue), bos=True)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        adapter = prompt.load_adapter([other_kind], grammar, head)
    assert adapter is not None
    assert "sliding-window caches" in caplog.text and "(swa_full)" in caplog.text
    other_kind.close()


@pytest.mark.slow   # runs the bundled model
def test_offline_decisions_read_every_chunk_said_before_the_probe(engines, catalogue):
    """Training and evaluation decide on the whole stream so far (no node appends between their
    decisions: a prefix lagging the suffix's events would teach the adapter another situation)."""
    import yaml
    from csr_llm_core.lab.decision_eval import evaluate
    from csr_llm_core.prompt import chunk_line
    template = replace(PromptTemplate.from_mapping(yaml.safe_load((CONFIG / "prompt.yaml").read_text())),
                       calibrate=False, intent_adapter="")
    cached, _ = engines
    name, stream = generate(1, seed=14)[0]      # ~1K tokens of chunks: no eviction
    head = cached.tokenize(template.head_text(catalogue), bos=True)
    outcomes = evaluate(cached, catalogue, template, {name: ("generated", stream)})
    assert len(outcomes) == len(stream.probes) >= 2
    for outcome, (position, _) in zip(outcomes, stream.probes):
        said = sum(len(cached.tokenize(chunk_line(c.text))) for c in stream.chunks[:position])
        assert outcome.prefix_tokens == len(head) + said, (position, outcome.prefix_tokens, len(head) + said)


def test_anchors_land_on_the_shipped_question_and_engine_reads_them_as_one_token_batches(engines, catalogue):
    """On the real tokenizer the anchors are the question's '?' and its event lines' newlines; the
    engine's hidden state at each is the one a cache ending there gives (evaluated piece by piece)."""
    import yaml
    from csr_llm_core.reasoner import Reasoner, ReasonerConfig
    template = replace(PromptTemplate.from_mapping(yaml.safe_load((CONFIG / "prompt.yaml").read_text())),
                       calibrate=False, intent_adapter="")
    cached, _ = engines
    reasoner = Reasoner([cached], catalogue, template, ReasonerConfig(tau_mem=2400, mode="sync"))
    reasoner.add_chunk(0, "[1.0s] events: task: open the door", kind=0)
    reasoner.add_chunk(1, "[4.0s] events: person close to the robot (0.45 m)", kind=0)
    suffix, _, _ = reasoner.decision_inputs("open_door")
    anchors = Anchors(lines=2, question_end=True, **reasoner.prompt.anchor_tokens())
    positions = anchors.positions(suffix)
    words = [cached.detokenize([suffix[p]]) for p in positions]
    assert words[1].endswith("?") and words[2] == words[3] == "\n", words
    assert cached.detokenize(suffix[positions[3] + 1:positions[2]]).endswith("(0.45 m)")     # the newest line
    prefix = list(cached.tokens)
    features = cached.hidden_states(suffix, positions)
    assert len(cached.tokens) == len(prefix) + len(suffix)
    cached.truncate(len(prefix))
    for block, position in enumerate(positions):
        expect = cached.hidden_states(suffix[:position + 1], sorted({p for p in positions if p <= position}))
        cached.truncate(len(prefix))
        np.testing.assert_array_equal(features[block * cached.n_embd:(block + 1) * cached.n_embd],
                                      expect[-cached.n_embd:])
    with pytest.raises(ValueError, match="end at the last token"):
        cached.hidden_states(suffix, [0])
    reasoner.close()


@pytest.mark.slow   # runs the bundled model
def test_recording_in_several_processes_gives_the_probes_of_one_in_the_same_order(catalogue):
    """`--jobs`: contiguous slices of the episodes recorded side by side, each process with its own
    model, merged back in episode order with global episode indices. In the build (one context per
    process) the states were bit-identical to one process's (102 of 102 probes); here this process
    created contexts before, and a context's states then move by up to ~1 in some dimensions (not in
    direction), so the check is each row's direction and that it is nearest to its own probe."""
    import yaml
    from csr_llm_core.engine import LlamaEngine
    from csr_llm_core.lab.intent_adapter_build import record
    template = PromptTemplate.from_mapping(yaml.safe_load((CONFIG / "prompt.yaml").read_text()))
    settings = {"n_ctx": 3072, "n_threads": 1, "name": "recorder"}
    streams = generate(2, seed=21)      # one episode per process
    results = []
    for parallel in ({}, {"jobs": 2, "engine_settings": settings}):
        engine = LlamaEngine(**settings)
        try:
            results.append(record(engine, catalogue, template, streams, progress=False, **parallel))
        finally:
            engine.close()
    alone, split = results
    assert split["episode"].tolist() == alone["episode"].tolist() and set(alone["episode"].tolist()) == {0, 1}
    assert np.array_equal(split["accept"], alone["accept"]) and split["intents"] == alone["intents"]
    a, b = alone["hidden"].astype(np.float64), split["hidden"].astype(np.float64)
    cosine = (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosine.min() > 0.99, cosine.round(4)
    # each row is its own probe's: nearer to it than to any other probe's state
    distance = np.linalg.norm(a[:, None, :] - b[None, :, :], axis=2)
    assert (distance.argmin(axis=0) == np.arange(len(b))).all()
