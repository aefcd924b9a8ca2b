"""A decision on unchanged inputs reuses the previous result: exactly what evaluating would give."""
import time

import pytest

from csr_llm_core.csr_state import KIND_CONTINUOUS, KIND_EVENT
from csr_llm_core.decision_memo import DecisionMemo, decision_key
from csr_llm_core.engine import DecodeResult
from csr_llm_common.catalogue import ParsedDecision
from csr_llm_core.reasoner import Reasoner, ReasonerConfig
from csr_llm_core.lab.synthetic import chunk_text


def _result(text="stop"):
    return DecodeResult(ParsedDecision(text, {}), [1, 2], [1], text, 300.0, 400.0, 10, 5, cached_tokens=10)


def test_the_memo_answers_only_for_equal_inputs():
    memo = DecisionMemo()
    key = decision_key("R1", [1, 2, 3], [7, 8], ["door"], "move_to", policy=5)
    assert memo.lookup(key, time.perf_counter()) is None
    memo.store(key, _result())
    hit = memo.lookup(decision_key("R1", [1, 2, 3], [7, 8], ["door"], "move_to", policy=5), time.perf_counter())
    assert hit is not None and hit.decision.intent == "stop" and hit.tokens == [1, 2]
    assert hit.ttft_ms < 300.0 and hit.total_ms == hit.ttft_ms     # the lookup's own time, not the model's
    for other in (decision_key("R2", [1, 2, 3], [7, 8], ["door"], "move_to", policy=5),     # another resource
                  decision_key("R1", [1, 2, 4], [7, 8], ["door"], "move_to", policy=5),     # another cache
                  decision_key("R1", [1, 2, 3], [7, 9], ["door"], "move_to", policy=5),     # another suffix
                  decision_key("R1", [1, 2, 3], [7, 8], None, "move_to", policy=5),         # other grounding
                  decision_key("R1", [1, 2, 3], [7, 8], ["door"], "", policy=5),            # other context
                  decision_key("R1", [1, 2, 3], [7, 8], ["door"], "move_to", policy=6)):    # another adapter
        assert memo.lookup(other, time.perf_counter()) is None
    assert memo.reused == 1
    off = DecisionMemo(enabled=False)
    off.store(key, _result())
    assert off.lookup(key, time.perf_counter()) is None and off.reused == 0


@pytest.mark.slow
def test_an_unchanged_state_reuses_the_decision_a_changed_one_evaluates(engines, catalogue, tmp_path):
    from csr_llm_core.lab.decision_eval import BASELINE_PROMPT
    from csr_llm_core.prompt import PromptTemplate
    template = PromptTemplate.from_mapping(BASELINE_PROMPT)
    reasoner = Reasoner(engines[:1], catalogue, template, ReasonerConfig(tau_mem=2400, mode="sync"),
                        archive_path=tmp_path / "archive.jsonl")
    try:
        for seq in range(4):
            reasoner.add_chunk(seq, chunk_text(seq), source="/stream", kind=KIND_CONTINUOUS, stamp=seq * 0.5)
        reasoner.pump()
        first = reasoner.decide(running="open_door")
        again = reasoner.decide(running="open_door")
        assert not first.reused and again.reused and reasoner.status()["reused_decisions"] == 1
        assert again.result.tokens == first.result.tokens and again.prefix_tokens == first.prefix_tokens
        reasoner.memo.enabled = False        # what evaluating the same inputs gives: the same tokens
        evaluated = reasoner.decide(running="open_door")
        assert not evaluated.reused and evaluated.result.tokens == first.result.tokens
        assert evaluated.result.ttft_ms > again.result.ttft_ms
        reasoner.memo.enabled = True
        assert not reasoner.decide(running="move_to").reused          # the running task changed
        reasoner.add_chunk(4, "events: person at 0.4 m in front of the base", source="/events", kind=KIND_EVENT,
                           stamp=2.0)
        reasoner.pump()
        changed = reasoner.decide(running="move_to")
        assert not changed.reused and changed.prefix_tokens > first.prefix_tokens     # a new chunk
        assert reasoner.decide(running="move_to").reused
        assert reasoner.status()["reused_decisions"] == 2
    finally:
        reasoner.close()
