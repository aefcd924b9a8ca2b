"""R1/R2 on real llama.cpp servers (llama-server on loopback, the bundled model): decisions equal the
embedded engine's, ASR across two server slots, failover when a server dies, refused answers, and
the vLLM request shape against a recorded exchange."""
import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from csr_llm_core.backend import DecisionRefused
from csr_llm_core.csr_state import KIND_CONTINUOUS, KIND_EVENT
from csr_llm_core.failover import ResourceHealth
from csr_llm_core.grammar import DecisionGrammar
from csr_llm_core.http_backend import HttpBackend, RemoteResource, parse_decision, settled_text
from csr_llm_core.prompt import chunk_line, tokenize_suffix
from csr_llm_core.reasoner import Reasoner, ReasonerConfig
from csr_llm_core.lab.synthetic import chunk_text

pytestmark = pytest.mark.slow   # real servers and real inference with the bundled model
DATA = Path(__file__).parent / "data"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One llama-server with two slots (two resources), shared by this module's tests."""
    from csr_llm_core.llama_server import LlamaServer, ServerNotFound
    try:
        process = LlamaServer(free_port(), slots=2, n_ctx_per_slot=3072,
                              log_path=tmp_path_factory.mktemp("server") / "llama-server.log")
    except ServerNotFound as err:
        pytest.fail(f"{err}")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def baseline_template():
    """The first release's short head (352 tokens): evictions come after few chunks."""
    from csr_llm_core.lab.decision_eval import BASELINE_PROMPT
    from csr_llm_core.prompt import PromptTemplate
    return PromptTemplate.from_mapping(BASELINE_PROMPT)


def remote(url, slot, name):
    return HttpBackend(RemoteResource(url=url, slot=slot, timeout_s=60.0), name=name)


def feed(reasoner, seqs):
    for seq in seqs:
        kind = KIND_EVENT if seq % 6 == 5 else KIND_CONTINUOUS
        reasoner.add_chunk(seq, chunk_text(seq), source="/stream", kind=kind, stamp=seq * 0.5)


def accounted(reasoner, count):
    archived = [row["seq"] for row in reasoner.state.archive.read() if row["status"] == "evicted"]
    return archived + [c.seq for c in reasoner.state.chunks] == list(range(count))


@pytest.mark.e2e   # a real llama-server
def test_decisions_through_a_server_equal_the_embedded_engine(server, engines, catalogue, template):
    local = engines[0]
    backend = remote(server.url, 0, "R1")
    assert backend.n_ctx == 3072                      # discovered from the server
    grammar = DecisionGrammar(catalogue, local.tokenize_plain)
    head = local.tokenize(template.head_text(catalogue), bos=True)
    assert backend.tokenize(template.head_text(catalogue), bos=True) == head
    prefix = list(head)
    for seq in range(12):
        prefix += local.tokenize_plain(chunk_line(chunk_text(seq)))
    assert backend.tokenize_plain(chunk_line(chunk_text(3))) == local.tokenize_plain(chunk_line(chunk_text(3)))
    local.sync(prefix)
    backend.sync(prefix)
    situations = [("open_door", [chunk_text(5)]), ("", ["[3.0s] events: person at 0.3 m in front of the base"]),
                  ("move_to", ["[1.0s] events: task: bring the tool from the warehouse"])]
    for running, events in situations:
        suffix = tokenize_suffix(template.suffix_segments(running, 0, events), local.tokenize, local.tokenize_plain)
        grounded = ["tool", "warehouse"]
        there = backend.decide(suffix, grammar, grounded)
        here = local.decide(suffix, grammar, grounded)
        assert there.decision == here.decision, (there.text, here.text)
        assert there.cached_tokens >= len(prefix)     # the server evaluated the suffix only
        assert backend.tokens == prefix
    backend.close()


@pytest.mark.e2e   # a real llama-server
def test_asr_between_two_server_slots_loses_and_duplicates_no_chunk(server, catalogue, baseline_template, tmp_path):
    engines = [remote(server.url, 0, "R1"), remote(server.url, 1, "R2")]
    config = ReasonerConfig(tau_mem=1024, evict_ratio=0.5, n_catchup=48, mode="asr")
    reasoner = Reasoner(engines, catalogue, baseline_template, config, archive_path=tmp_path / "archive.jsonl")
    resources, cached = set(), []
    try:
        for seq in range(36):
            feed(reasoner, [seq])
            reasoner.pump()
            if seq % 3 == 0:
                decision = reasoner.decide(running="open_door")
                resources.add(decision.resource)
                cached.append(decision.result.cached_tokens)
                assert decision.result.decision.intent in catalogue
        assert reasoner.wait_reconciled(timeout=120)
        reasoner.pump()
        status = reasoner.status()
    finally:
        reasoner.close()
    assert status["evictions"] >= 2 and status["swaps"] >= 2 and resources == {"R1", "R2"}
    assert accounted(reasoner, 36)
    assert reasoner.primary.tokens == reasoner.state.tokens()
    assert min(cached) > 300         # every decision found at least the head in the slot's cache


def _logged(caplog, text):
    return [r for r in caplog.records if text in r.getMessage()]


@pytest.mark.e2e   # a real llama-server
def test_a_killed_server_fails_over_is_logged_once_and_is_used_again(server, catalogue, baseline_template,
                                                                      tmp_path, caplog):
    from csr_llm_core.llama_server import LlamaServer
    port = free_port()
    doomed = LlamaServer(port, slots=1, n_ctx_per_slot=3072)
    logger = logging.getLogger("test_remote.failover")
    health = ResourceHealth(logger, first_retry_s=0.2, max_retry_s=0.5)
    engines = [remote(doomed.url, 0, "R1"), remote(server.url, 1, "R2")]
    engines[0].resource.connect_timeout_s = 0.5
    config = ReasonerConfig(tau_mem=1024, evict_ratio=0.5, n_catchup=48, mode="asr")
    reasoner = Reasoner(engines, catalogue, baseline_template, config, archive_path=tmp_path / "archive.jsonl",
                        logger=logger, health=health)
    caplog.set_level(logging.INFO, logger="test_remote")
    served = []
    try:
        for seq in range(40):
            if seq == 8:
                doomed.kill()                       # mid-run, while R1 serves
            if seq == 20:
                doomed = LlamaServer(port, slots=1, n_ctx_per_slot=3072)     # back on the same port
            feed(reasoner, [seq])
            reasoner.pump()
            if seq % 2 == 0:
                decision = reasoner.decide(running="open_door")
                served.append((seq, decision.resource))
                assert decision.result.decision.intent in catalogue
            if seq >= 20:
                time.sleep(0.05)                    # room for the health probe
        assert reasoner.wait_reconciled(timeout=120)
        status = reasoner.status()
    finally:
        reasoner.close()
        doomed.stop()
    assert len(served) == 20                        # no decision was lost to the dead server
    assert all(resource == "R2" for seq, resource in served if 8 <= seq < 20)
    assert len(_logged(caplog, "resource R1 is down")) == 1
    assert len(_logged(caplog, "resource R1 is back")) == 1
    assert status["failovers"] == 1 and status["down_resources"] == []
    assert any(resource == "R1" for seq, resource in served if seq > 20)     # used again after recovery
    assert accounted(reasoner, 40)


def test_all_servers_down_decisions_continue_on_the_embedded_fallback(catalogue, baseline_template, engines,
                                                                       tmp_path, caplog):
    from csr_llm_core.llama_server import LlamaServer
    port = free_port()
    doomed = LlamaServer(port, slots=1, n_ctx_per_slot=3072)
    logger = logging.getLogger("test_remote.fallback")
    health = ResourceHealth(logger, first_retry_s=0.2, max_retry_s=0.5)
    config = ReasonerConfig(tau_mem=1024, evict_ratio=0.5, mode="sync")
    embedded = engines[0]
    embedded.name = "embedded"
    reasoner = Reasoner([remote(doomed.url, 0, "R1")], catalogue, baseline_template, config,
                        archive_path=tmp_path / "archive.jsonl", logger=logger, fallback=embedded, health=health)
    caplog.set_level(logging.INFO, logger="test_remote")
    served = []
    try:
        for seq in range(24):
            if seq == 4:
                doomed.kill()
            if seq == 12:
                doomed = LlamaServer(port, slots=1, n_ctx_per_slot=3072)
            feed(reasoner, [seq])
            decision = reasoner.decide()
            served.append(decision.resource)
            time.sleep(0.05)
        assert reasoner.wait_reconciled(timeout=60)
        final = reasoner.decide()
    finally:
        reasoner.close()
        doomed.stop()
        embedded.name = "R1"
    assert served[:4] == ["R1"] * 4 and "embedded" in served[4:12]
    assert final.resource == "R1"                    # handed back through warm-up and swap
    assert len(_logged(caplog, "resource R1 is down")) == 1
    assert accounted(reasoner, 24)


class _Scripted(BaseHTTPRequestHandler):
    """A server that answers what the test scripts (a misbehaving or foreign server)."""
    answers: dict = {}
    requests: list = []

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        type(self).requests.append((self.path, body, self.headers.get("Authorization")))
        status, content_type, payload = type(self).answers[self.path]
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Scripted.requests = []
    yield httpd, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _sse(*events):
    return b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events)


@pytest.mark.parametrize("stream", [
    _sse({"content": 'fly_away", "args": {}}'}),                                  # not in the catalogue
    _sse({"content": 'pick_object", "args": {"object": "cat"}}'}),                # value not in the enum
    _sse({"content": 'open_door", "args": {}} and then some'}),                   # not one JSON object
    _sse(b"<html>502 Bad Gateway</html>"),                                        # not JSON at all
    _sse({"content": 17}),                                                        # content of the wrong type
])
def test_garbage_or_uncatalogued_answers_are_refused(scripted, catalogue, engines, stream):
    _, url = scripted
    _Scripted.answers = {"/props": (200, "application/json", b'{"default_generation_settings": {"n_ctx": 4096}}'),
                         "/completion": (200, "text/event-stream", stream)}
    backend = HttpBackend(RemoteResource(url=url), name="R1")
    with pytest.raises(DecisionRefused):
        backend.decide([2, 100], DecisionGrammar(catalogue, engines[0].tokenize_plain))


def test_numbers_are_clamped_like_the_local_decoder_and_everything_else_validated(catalogue, engines):
    grammar = DecisionGrammar(catalogue, engines[0].tokenize_plain)
    decision = parse_decision(grammar, 'move_to", "args": {"zone": "warehouse", "speed": 9.5}}', "R1")
    assert decision.arguments == {"zone": "warehouse", "speed": 0.5}
    with pytest.raises(DecisionRefused):
        parse_decision(grammar, 'move_to", "args": {"zone": "warehouse"}}', "R1")     # speed missing
    with pytest.raises(DecisionRefused):
        parse_decision(grammar, 'stop", "args": {}, "why": "x"}', "R1")               # extra key
    # a decision ends as soon as the grammar fixes it: an intent without arguments, named unambiguously
    assert settled_text(grammar, "ho") == 'hold_position", "args": {}}'
    assert settled_text(grammar, "mo") is None                  # move_to: its arguments are still to come
    assert settled_text(grammar, 'open_door", "args": {}} and more') is None      # left the grammar


def test_vllm_request_shape_matches_the_recorded_exchange(scripted, catalogue, engines, monkeypatch):
    """vLLM needs a GPU: its side of one decision is replayed from data/vllm_exchange.json."""
    exchange = json.loads((DATA / "vllm_exchange.json").read_text())
    _, url = scripted
    _Scripted.answers = {
        "/v1/models": (200, "application/json", json.dumps(exchange["models"]).encode()),
        "/v1/completions": (200, "text/event-stream", _sse(*exchange["stream"], b"[DONE]")),
    }
    monkeypatch.setenv("CSR_TEST_VLLM_KEY", "secret-key")
    backend = HttpBackend(RemoteResource(url=url, api="vllm", model=exchange["request"]["model"],
                                         api_key_env="CSR_TEST_VLLM_KEY"), name="R2")
    assert backend.n_ctx == exchange["models"]["data"][0]["max_model_len"]
    backend.tokens = list(exchange["request"]["prompt"][:-4])
    grammar = DecisionGrammar(catalogue, engines[0].tokenize_plain)
    result = backend.decide(exchange["request"]["prompt"][-4:], grammar)
    path, sent, auth = _Scripted.requests[-1]
    expected = dict(exchange["request"], structured_outputs={"grammar": grammar.to_gbnf()})
    assert path == "/v1/completions" and sent == expected and auth == "Bearer secret-key"
    assert result.decision.intent == "stop" and result.cached_tokens == exchange["cached_tokens"]


@pytest.mark.dds
@pytest.mark.e2e
def test_reasoning_node_decides_on_server_slots_over_dds(server, catalogue, config_dir, tmp_path):
    """The node wired to R1/R2 on two slots of a server: decisions flow, csr_status shows the cache hit."""
    from rclpy.node import Node
    from csr_llm_msgs.msg import CsrStatus, Decision, StateChunk
    from csr_llm_common.ros.qos import CHUNK_STREAM, DECISIONS
    from csr_llm_common.ros.spin import spinning
    from csr_llm_common.ros.testing import start_node, stop_node, wait_for
    params = [f"intents_file:={config_dir / 'intents.yaml'}", f"prompt_file:={config_dir / 'prompt.yaml'}",
              "tau_mem:=2048", "decision_hz:=0.0", "status_hz:=5.0", f"archive_path:={tmp_path / 'archive.jsonl'}",
              f"r1.url:={server.url}", "r1.slot:=0", f"r2.url:={server.url}", "r2.slot:=1",
              "decide_on_cached:=false"]     # each decision covers every chunk received before it
    reasoning = start_node("csr_llm_core.reasoning_node", *params)
    decisions, statuses = [], []
    try:
        with spinning() as spinner:
            node = spinner.create(Node, "test_remote_driver")
            node.create_subscription(Decision, "decision", decisions.append, DECISIONS)
            node.create_subscription(CsrStatus, "csr_status", statuses.append, 10)
            chunks = node.create_publisher(StateChunk, "state_chunks", CHUNK_STREAM)
            assert wait_for(lambda: statuses, 60), "reasoning node never published csr_status"
            # two events, the second once the first is decided (events queued together on the wall clock
            # are decided together, on the newest state)
            for seq in range(6):
                kind = StateChunk.KIND_EVENT if seq in (2, 5) else StateChunk.KIND_CONTINUOUS
                chunks.publish(StateChunk(seq=seq, kind=kind, text=chunk_text(seq), source_topic="/test"))
                time.sleep(0.2)
                if seq == 2:
                    assert wait_for(lambda: len(decisions) >= 1, 60)
            assert wait_for(lambda: len(decisions) >= 2, 60)
            assert [d.last_chunk_seq for d in decisions[:2]] == [2, 5]
            # the status after the last decision: the server served that decision's whole prefix from its cache
            assert wait_for(lambda: statuses[-1].chunk_count == 6
                            and statuses[-1].cached_tokens >= statuses[-1].prefix_tokens, 10), statuses[-1]
    finally:
        rc, out = stop_node(reasoning)
    assert rc == 0, out[-3000:]
    assert "R1 on llama.cpp at " + server.url in out, out[-2000:]
    assert all(d.intent in catalogue and d.resource == "R1" for d in decisions)
    status = statuses[-1]
    assert status.prefix_tokens > 1000 and status.failovers == 0 and list(status.down_resources) == []
