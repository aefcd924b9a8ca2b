"""The Reasoner's parts on stand-in engines (no model): the primary view and appender, the ASR
rebuilder's rebuild, catch-up and swap, resource roles and failover, the checkpointer."""
import json
import logging
import time

import pytest

from csr_llm_core.asr_rebuilder import AsrRebuilder
from csr_llm_core.backend import BackendUnavailable, NoResourceAvailable, sync_cache
from csr_llm_core.checkpointer import Checkpointer
from csr_llm_core.csr_state import CachedState
from csr_llm_core.failover import ResourceHealth
from csr_llm_core.kv_state_file import StateFileError
from csr_llm_core.reasoner import ReasonerConfig
from csr_llm_core.reasoner_primary import Preempted, PrimaryAppender, PrimaryView
from csr_llm_core.resource_roles import ResourceRoles

LOG = logging.getLogger("test_reasoner_parts")
NEWLINE = ord("\n")


class StandIn:
    """A backend whose 'KV cache' is its token list: one token a character."""

    def __init__(self, name, n_ctx=4096, is_local=False):
        self.name, self.n_ctx, self.is_local = name, n_ctx, is_local
        self.tokens, self.view_epoch, self.batches = [], None, 0
        self.line_end_tokens = frozenset({NEWLINE})

    def tokenize(self, text, *, bos=False):
        return ([1] if bos else []) + [ord(c) for c in text]

    def tokenize_plain(self, text):
        return [ord(c) for c in text]

    def detokenize(self, tokens):
        return "".join(chr(t) for t in tokens)

    def truncate(self, n):
        del self.tokens[n:]

    def extend(self, tokens, *, batch=None, before_batch=None, by_line=False):
        tokens = list(tokens)
        step = batch or 64
        for start in range(0, len(tokens), step):
            if before_batch is not None:
                before_batch()
            self.tokens.extend(tokens[start:start + step])
            self.batches += 1

    def sync(self, target, **extend_args):
        return sync_cache(self, target, **extend_args)

    def clear(self):
        self.tokens = []

    def healthy(self):
        return True


def parts(mode="asr", tau_mem=200, engines=None, **settings):
    config = ReasonerConfig(tau_mem=tau_mem, mode=mode, n_catchup=8, rebuild_batch=8, **settings)
    engines = engines or [StandIn("R1"), StandIn("R2")]
    health = ResourceHealth(LOG)
    roles = ResourceRoles(engines, asr=mode == "asr", fallback=None, health=health, log=LOG)
    view = PrimaryView(CachedState(roles.tokenize("head:\n", bos=True), tau_mem=tau_mem), LOG)
    rebuilder = AsrRebuilder(config, view, roles, health, LOG)
    return config, roles, view, PrimaryAppender(config, view), rebuilder


def feed(view, rebuilder, roles, seqs):
    for seq in seqs:
        view.queue(seq, "/s", 1, f"chunk {seq:03d} reading", float(seq))
        view.append_queued(roles.tokenize_plain, roles.detokenize, rebuilder.after_append)


def test_the_appender_brings_the_primary_to_its_view_and_a_sync_eviction_is_done_in_place():
    config, roles, view, appender, rebuilder = parts(mode="sync")
    feed(view, rebuilder, roles, range(3))
    appender.sync(roles.primary, view.snapshot())
    assert roles.primary.tokens == view.state.tokens() and appender.held_seq == 2
    assert view.uncached_tokens(roles.primary) == 0
    feed(view, rebuilder, roles, range(3, 12))             # past tau_mem: evicted, the view replaced
    assert view.state.counters.evictions >= 1 and not rebuilder.reconciling
    appender.sync(roles.primary, view.snapshot())
    assert roles.primary.tokens == view.state.tokens()
    counts = view.counts()
    assert counts["prefix_tokens"] == len(view.state.tokens()) and counts["last_chunk_seq"] == 11


def test_a_decision_runs_on_the_whole_chunks_held_and_a_preempted_append_stops_at_a_batch():
    config, roles, view, appender, rebuilder = parts(mode="sync", tau_mem=1000)
    feed(view, rebuilder, roles, range(2))
    appender.sync(roles.primary, view.snapshot())
    held = len(roles.primary.tokens)
    feed(view, rebuilder, roles, [2])
    appender.sync(roles.primary, view.snapshot(), deciding=True)      # nothing appended: whole chunks held
    assert len(roles.primary.tokens) == held and appender.held_seq == 1
    with pytest.raises(Preempted):
        appender.sync(roles.primary, view.snapshot(), preempt=lambda: True)
    assert held < len(roles.primary.tokens) < len(view.state.tokens())      # one batch, then stopped
    assert appender.should_stop(0.0, 0) and not appender.should_stop(10.0, 0)


def test_the_asr_rebuild_catches_up_and_swaps_without_losing_a_chunk():
    config, roles, view, appender, rebuilder = parts()
    first, second = roles.primary, roles.secondary
    seq = 0
    while not rebuilder.reconciling:
        feed(view, rebuilder, roles, [seq])
        appender.sync(roles.primary, view.snapshot())
        seq += 1
    feed(view, rebuilder, roles, [seq])                  # arrives during the rebuild: buffered
    deadline = time.monotonic() + 5
    while not rebuilder.idle() and time.monotonic() < deadline:
        rebuilder.maybe_swap()
        time.sleep(0.01)
    assert rebuilder.swaps == 1 and roles.primary is second and roles.secondary is first
    appender.sync(roles.primary, view.snapshot())
    assert roles.primary.tokens == view.state.tokens() and appender.held_seq == seq
    assert rebuilder.close()


def test_roles_fail_over_to_the_secondary_and_then_to_nothing():
    config, roles, view, appender, rebuilder = parts()
    first, second = roles.primary, roles.secondary
    assert roles.fail_over(first, BackendUnavailable("refused")) is second
    assert roles.primary is second and roles.secondary is first and roles.failovers == 1
    assert roles.health.is_down("R1") and not roles.secondary_usable()
    with pytest.raises(NoResourceAvailable):
        roles.fail_over(second, BackendUnavailable("refused"))
    assert roles.take_back("R1", may_rebuild=True) is False          # no fallback serves: nothing to rebuild
    roles.health.close()


def test_the_checkpointer_saves_the_logical_state_and_refuses_a_foreign_one(tmp_path):
    config, roles, view, appender, rebuilder = parts(mode="sync", tau_mem=1000)
    checkpointer = Checkpointer(view, roles, rebuilder, LOG)
    feed(view, rebuilder, roles, range(4))
    assert checkpointer.checkpoint(tmp_path) == 4
    assert checkpointer.save(tmp_path, local=False)["kv"] == "kept by R1's server"
    config2, roles2, view2, _, rebuilder2 = parts(mode="sync", tau_mem=1000)
    restored = Checkpointer(view2, roles2, rebuilder2, LOG).restore(tmp_path)
    assert restored == {"chunks": 4, "kv_restored": False, "tokens": len(view.state.tokens())}
    assert view2.state.tokens() == view.state.tokens() and view2.last_seq == 3
    snapshot = json.loads((tmp_path / "csr_state.json").read_text())
    snapshot["head_tokens"] = [9]
    (tmp_path / "csr_state.json").write_text(json.dumps(snapshot))
    with pytest.raises(StateFileError, match="another static head"):
        Checkpointer(view2, roles2, rebuilder2, LOG).restore(tmp_path)
    assert view2.state.tokens() == view.state.tokens()                # refused: the state as it was


class Deciding(StandIn):
    """A stand-in server that decides `hold_position` on whatever it holds, or fails when told to."""

    def __init__(self, name, **kwargs):
        super().__init__(name, **kwargs)
        self.failing = False

    def decide(self, suffix, grammar, grounded=None, context=""):
        from csr_llm_common.catalogue import ParsedDecision
        from csr_llm_core.engine import DecodeResult
        if self.failing:
            raise BackendUnavailable(f"{self.name}: connection refused")
        return DecodeResult(ParsedDecision("hold_position"), [], [], "", 1.0, 1.0, len(self.tokens), len(suffix))


def facade(catalogue, tmp_path, mode, **settings):
    from csr_llm_core.lab.decision_eval import BASELINE_PROMPT
    from csr_llm_core.prompt import PromptTemplate
    from csr_llm_core.reasoner import Reasoner
    template = PromptTemplate.from_mapping(BASELINE_PROMPT)
    engines = [Deciding("R1", n_ctx=20000), Deciding("R2", n_ctx=20000)]
    config = ReasonerConfig(mode=mode, tau_mem=3000, n_catchup=8, rebuild_batch=16, **settings)
    return Reasoner(engines if mode == "asr" else engines[:1], catalogue, template, config,
                    archive_path=tmp_path / "archive.jsonl", health=ResourceHealth(LOG, first_retry_s=60))


@pytest.mark.parametrize("mode", ["asr", "sync"])
def test_the_facade_streams_evicts_and_swaps_without_losing_a_chunk(catalogue, tmp_path, mode):
    reasoner = facade(catalogue, tmp_path, mode)
    try:
        for seq in range(80):
            reasoner.add_chunk(seq, f"[{seq}.0s] /joint_states: arm_elbow={seq / 100:.2f} rad\n" * 3)
            reasoner.pump()
            if seq % 5 == 0:
                decision = reasoner.decide(running="open_door")
                assert decision.result.decision.intent == "hold_position"
                assert decision.prefix_tokens == len(reasoner.primary.tokens)
        assert reasoner.wait_reconciled(timeout=10)
        reasoner.pump()
        status = reasoner.status()
    finally:
        assert reasoner.close()
    archived = [row["seq"] for row in reasoner.state.archive.read() if row["status"] == "evicted"]
    assert archived + [c.seq for c in reasoner.state.chunks] == list(range(80))
    assert reasoner.primary.tokens == reasoner.state.tokens() and status["evictions"] >= 2
    assert (status["swaps"] >= 1) == (mode == "asr") and status["last_chunk_seq"] == 79
    assert status["primary_view_tokens"] == status["prefix_tokens"] == len(reasoner.state.tokens())


def test_the_facade_fails_over_to_the_secondary_and_resyncs_it_from_the_logical_state(catalogue, tmp_path):
    reasoner = facade(catalogue, tmp_path, "asr")
    try:
        for seq in range(5):
            reasoner.add_chunk(seq, f"[{seq}.0s] /events: door {seq} closed")
        reasoner.pump()
        reasoner.primary.failing = True
        decision = reasoner.decide()
        assert decision.resource == "R2" and reasoner.secondary.name == "R1"
        assert reasoner.pump() and reasoner.primary.tokens == reasoner.state.tokens()
        status = reasoner.status()
        assert status["failovers"] == 1 and status["down_resources"] == ["R1"] and status["primary_resource"] == "R2"
        reasoner.primary.failing = True
        with pytest.raises(NoResourceAvailable):
            reasoner.decide()
        assert reasoner.pump() is True            # nothing can hold the prefix: the logical state keeps it
        assert reasoner.add_chunk(5, "[5.0s] /events: kept for later") == []     # no tokenizer answers
        assert [c.seq for c in reasoner.state.chunks] == list(range(5))
        assert reasoner.status()["untokenized_chunks"] == 1
    finally:
        reasoner.close()
