"""Engine over a real llama.cpp context: exact KV bookkeeping, reuse equals recompute, rollback."""
import pytest

from csr_llm_core.engine import ContextFullError
from csr_llm_core.grammar import DecisionGrammar
from csr_llm_core.prompt import chunk_line

from csr_llm_core.lab.synthetic import chunk_text

pytestmark = pytest.mark.slow   # real inference with the bundled model


def build_prefix(engine, template, catalogue, target_tokens):
    """Head + chunks appended one by one (the CSR path); returns the token list."""
    engine.clear()
    tokens = engine.tokenize(template.head_text(catalogue), bos=True)
    engine.extend(tokens)
    seq = 0
    while len(tokens) < target_tokens:
        piece = engine.tokenize_plain(chunk_line(chunk_text(seq)))
        engine.extend(piece)
        tokens += piece
        seq += 1
    return tokens


def test_kv_cache_holds_exactly_the_concatenated_chunk_tokens(engines, template, catalogue):
    engine = engines[0]
    tokens = build_prefix(engine, template, catalogue, 600)
    assert engine.tokens == tokens
    assert engine.kv_positions() == len(tokens)
    engine.truncate(400)
    assert engine.tokens == tokens[:400] and engine.kv_positions() == 400
    evaluated = engine.sync(tokens)
    assert evaluated == len(tokens) - 400
    assert engine.tokens == tokens and engine.kv_positions() == len(tokens)


@pytest.mark.parametrize("prefix_len", [400, 2600])
def test_decision_through_cached_prefix_equals_full_recompute(engines, template, catalogue, prefix_len):
    cached, fresh = engines
    grammar = DecisionGrammar(catalogue, cached.tokenize_plain)
    prefix = build_prefix(cached, template, catalogue, prefix_len)
    suffix = cached.tokenize(template.suffix_text("open_door", 1))
    csr = cached.decide(suffix, grammar)
    assert cached.tokens == prefix and cached.kv_positions() == len(prefix)   # suffix rolled back
    fresh.clear()
    full = fresh.decide(prefix + suffix, grammar)
    assert fresh.tokens == []
    assert csr.tokens == full.tokens, (csr.text, full.text)
    assert csr.decision == full.decision
    assert csr.decision.intent in catalogue


def test_context_overflow_is_refused_before_touching_the_cache(engines):
    engine = engines[0]
    engine.clear()
    engine.extend([2] + [100] * 10)
    with pytest.raises(ContextFullError, match="exceed n_ctx"):
        engine.extend([100] * engine.n_ctx)
    assert engine.tokens == [2] + [100] * 10 and engine.kv_positions() == 11


@pytest.mark.slow
@pytest.mark.parametrize("prefix_len", [500, 2600])
def test_calibrated_grounded_decision_through_cached_prefix_equals_full_recompute(engines, template, catalogue,
                                                                                   prefix_len):
    """The levers (events in the suffix, first-token calibration, grounded arguments) keep CSR == recompute."""
    from csr_llm_core.prompt import tokenize_suffix
    cached, fresh = engines
    grammar = DecisionGrammar(catalogue, cached.tokenize_plain)
    head = cached.tokenize(template.head_text(catalogue), bos=True)
    cached.clear()
    cached.extend(head)
    content_free = tokenize_suffix(template.suffix_segments("", 0, ["N/A"]), cached.tokenize, cached.tokenize_plain)
    grammar.calibrate([cached.logits_after(content_free)])
    prefix = build_prefix(cached, template, catalogue, prefix_len)
    events = [chunk_text(5), chunk_text(11)]
    suffix = tokenize_suffix(template.suffix_segments("open_door", 0, events), cached.tokenize, cached.tokenize_plain)
    grounded = ["box", "warehouse"]
    csr = cached.decide(suffix, grammar, grounded)
    fresh.clear()
    full = fresh.decide(prefix + suffix, grammar, grounded)
    assert csr.tokens == full.tokens, (csr.text, full.text)
    assert csr.decision.intent in catalogue
    for value in csr.decision.arguments.values():
        if isinstance(value, str):
            assert value in grounded


def test_a_decision_the_grammar_fixes_entirely_still_reports_its_latency(engines, template, catalogue):
    """One intent without arguments: nothing to choose, the TTFT is the whole decision."""
    from csr_llm_common.catalogue import IntentCatalogue
    engine = engines[0]
    only = IntentCatalogue.from_mapping({"intents": {"stop": {}}})
    build_prefix(engine, template, catalogue, 400)
    result = engine.decide(engine.tokenize_plain("state"), DecisionGrammar(only, engine.tokenize_plain))
    assert result.decision.intent == "stop" and result.chosen == [] and result.ttft_ms == result.total_ms
    assert len(engine.tokens) == result.prefix_tokens


def test_window_only_swa_cache_decides_as_a_full_recompute_and_recomputes_after_a_deep_cut(engines, template,
                                                                                            catalogue):
    import llama_cpp
    from csr_llm_core.engine import LlamaEngine
    fresh = engines[1]
    windowed = LlamaEngine(n_ctx=2048, swa_full=False, name="W")
    try:
        assert windowed.n_swa > 0                   # Gemma 3's local layers
        grammar = DecisionGrammar(catalogue, windowed.tokenize_plain)
        prefix = build_prefix(windowed, template, catalogue, 1400)
        memory = llama_cpp.llama_get_memory(windowed.llm._ctx.ctx)
        assert llama_cpp.llama_memory_seq_pos_min(memory, 0) > 0     # older local-layer cells were reused
        suffix = windowed.tokenize(template.suffix_text("open_door", 1))
        for cut in (len(prefix), 600):
            windowed.sync(prefix[:cut], by_line=True)      # the deep cut clears; sync evaluates again
            assert windowed.tokens == prefix[:cut]
            csr = windowed.decide(suffix, grammar)
            assert windowed.tokens == prefix[:cut] and windowed.kv_positions() == cut
            fresh.clear()
            full = fresh.decide(prefix[:cut] + suffix, grammar)
            assert csr.tokens == full.tokens, (cut, csr.text, full.text)
        assert windowed.window_resets == 1          # the suffix roll-backs fit its spare batch; the cut did not
    finally:
        windowed.close()


def test_the_reasoning_node_builds_window_only_contexts_when_swa_full_is_off():
    from csr_llm_core.reasoning_config import ReasoningNodeConfig, make_resources
    for swa_full in (True, False):
        cfg = ReasoningNodeConfig(n_ctx=1024, swa_full=swa_full).validated()
        engines, fallback = make_resources(cfg, {})
        try:
            assert fallback is None and len(engines) == 2
            assert all((engine.n_swa > 0) == (not swa_full) for engine in engines)
        finally:
            for engine in engines:
                engine.close()


def test_a_saved_state_is_refused_by_a_context_whose_swa_full_differs(engines, tmp_path):
    from csr_llm_core.engine import LlamaEngine, StateFileError
    full = engines[0]
    windowed = LlamaEngine(n_ctx=1024, swa_full=False, name="W")
    try:
        for engine in (full, windowed):
            engine.clear()
            engine.extend(engine.tokenize("Robot log.\n", bos=True) + engine.tokenize_plain("door closed\n" * 80))
        path = tmp_path / "window.bin"
        windowed.save_state(path, state_version=0)
        kept = list(full.tokens)
        with pytest.raises(StateFileError, match="swa_full differs"):     # llama.cpp itself would load it
            full.load_state(path, state_version=0)
        assert full.tokens == kept and full.kv_positions() == len(kept)   # refused before touching the cache
        windowed.clear()
        windowed.load_state(path, state_version=0)
        assert windowed.kv_positions() == len(windowed.tokens) > 0
    finally:
        windowed.close()


def test_a_window_only_cache_restores_its_kept_head_after_a_deep_cut_and_still_decides_as_a_full_recompute(
        engines, template, catalogue):
    from csr_llm_core.engine import LlamaEngine
    fresh = engines[1]
    windowed = LlamaEngine(n_ctx=3072, swa_full=False, name="W")
    try:
        grammar = DecisionGrammar(catalogue, windowed.tokenize_plain)
        head = windowed.tokenize(template.head_text(catalogue), bos=True)
        windowed.keep_prefix(head)
        prefix = build_prefix(windowed, template, catalogue, len(head) + 1000)     # head first, then chunks
        assert prefix[:len(head)] == head
        suffix = windowed.tokenize(template.suffix_text("open_door", 1))
        cut = len(head) + 40                  # an eviction keeps the head and a few chunk tokens
        windowed.truncate(cut)
        assert windowed.tokens == head and windowed.kv_positions() == len(head)   # restored, not cleared
        assert windowed.window_resets == 1 and windowed.window_restores == 1
        windowed.sync(prefix[:cut], by_line=True)
        csr = windowed.decide(suffix, grammar)
        fresh.clear()
        full = fresh.decide(prefix[:cut] + suffix, grammar)
        assert csr.tokens == full.tokens, (csr.text, full.text)
        windowed.extend(prefix[cut:], by_line=True)
        windowed.truncate(len(head) - 100)   # shorter than the kept head: cleared as before
        assert windowed.tokens == [] and windowed.window_resets == 2 and windowed.window_restores == 1
    finally:
        windowed.close()
