"""Recall benchmark methods: each builds the prompt it claims (CSR eviction, window, retrieval, archive recall)."""
import json
import logging
from types import SimpleNamespace

import pytest

from csr_llm_core.archive_recall import RECALL_HEADER, ArchiveRecall, ChunkIndex
from csr_llm_core.csr_state import CachedState, Chunk, ChunkArchive
from csr_llm_core.prompt import TURN_CLOSE, chunk_line
from csr_llm_core.lab.recall import bench
from csr_llm_core.lab.recall.episode import Episode, Question, Step
from csr_llm_core.lab.recall.families import GENERATORS
from csr_llm_core.lab.recall.methods import (ANSWER_SCAFFOLD, History, answer, choice_grammar, choice_texts, csr_prefix,
                                         head_text, query_text, retrieved_lines, suffix_segments, suffix_tokens,
                                         window_prefix)
from csr_llm_core.lab.recall.scoring import Outcome, auc, summarize
from csr_llm_core.lab.recall.world import generate_history


@pytest.fixture(scope="module")
def engine():
    from csr_llm_core.engine import LlamaEngine
    engine = LlamaEngine(n_ctx=1024, n_threads=1, name="recall")
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def world(engine):
    generated = generate_history(11, 4000, lambda text: len(engine.tokenize_plain(text)))
    return generated, History.of(Episode("e", generated.steps), engine.tokenize_plain)


def test_csr_prefix_is_the_state_after_eviction(engine, world, tmp_path):
    _, history = world
    head = engine.tokenize(head_text(), bos=True)
    prefix = csr_prefix(history, head, tau_mem=1500, evict_ratio=0.5, archive_dir=tmp_path)
    assert prefix.evictions >= 2 and len(prefix.tokens) < 1500
    assert prefix.tokens == head + [t for i in prefix.live for t in history.tokens[i]]
    archived = [row["seq"] for row in ChunkArchive(prefix.archive_path).read()]
    assert archived + prefix.live == list(range(len(history.texts)))     # nothing lost, in order


def test_window_holds_the_newest_chunks_that_fit(engine, world):
    _, history = world
    head = engine.tokenize(head_text(), bos=True)
    tokens, start = window_prefix(history, head, 700)
    body = len(tokens) - len(head)
    assert tokens[:len(head)] == head and body <= 700
    assert body + len(history.tokens[start - 1]) > 700        # one more chunk would not fit
    assert tokens[len(head):] == [t for piece in history.tokens[start:] for t in piece]


def test_retrieval_finds_the_evidence_chunk(world):
    generated, history = world
    index = ChunkIndex(history.texts)
    questions = GENERATORS["state_at_time"](generated, __import__("random").Random(0))
    assert questions
    for question in questions:
        lines, steps = retrieved_lines(index, history, query_text(question), 8)
        assert len(steps) <= 8 and steps == sorted(steps)
        assert question.evidence[0] in steps
        assert lines == "".join(chunk_line(history.texts[i]) for i in steps)


def test_suffixes_chat_and_cloze(engine):
    chat = Question("Did the robot pick up the kettle? <end_of_turn>", ("yes", "no"), 0, "presence")
    segments = suffix_segments(chat, "ctx line\n")
    assert segments[0][0].startswith("\nctx line\nQuestion: Did") and "Options: yes, no." in segments[0][0]
    assert segments[1] == (TURN_CLOSE, True) and segments[2] == (ANSWER_SCAFFOLD, False)
    tokens = suffix_tokens(engine, chat)
    end_of_turn = engine.tokenize("<end_of_turn>")
    assert len(end_of_turn) == 1 and tokens.count(end_of_turn[0]) == 1     # only the one the suffix adds
    cloze = Question("[3.0s] events: entered the", ("attic", "porch"), 0, "state_at_time", form="cloze")
    assert suffix_segments(cloze, "ctx line\n") == [("ctx line\n[3.0s] events: entered the", False)]
    assert choice_texts(cloze) == [" attic", " porch"] and choice_texts(chat) == ["yes", "no"]


def test_answer_is_the_grammar_choice_and_rolls_back(engine):
    log = ["[1.0s] events: kitchen: picked up the kettle", "[2.0s] odom: x=0.30 y=0.00 m",
           "[3.0s] events: attic: picked up the violin", "[4.0s] odom: x=0.60 y=0.00 m",
           "[5.0s] events: garage: picked up the hammer"]
    engine.clear()
    prefix = engine.tokenize(head_text(), bos=True) + engine.tokenize_plain("".join(chunk_line(t) for t in log))
    engine.extend(prefix)
    question = Question("events: attic: picked up the", ("hammer", "kettle", "violin", "lantern"), 2, "recall",
                        form="cloze")
    choices = choice_texts(question)
    result = answer(engine, suffix_tokens(engine, question), choices, choice_grammar(choices, engine.tokenize_plain))
    assert engine.tokens == prefix
    assert len(result.scores) == 4 and result.ttft_ms > 0
    # greedy under the grammar: the best first token wins (the choices differ at their first token)
    assert result.scores[result.choice] == max(result.scores)
    # the 270M model is recency-biased (it may name the newest object), but it copies from the
    # log: the object the log never mentions scores lowest
    assert min(result.scores) == result.scores[3]


def _archive_with(tmp_path, texts, tau_mem=60):
    archive = ChunkArchive(tmp_path / "archive.jsonl")
    state = CachedState([1, 2, 3], tau_mem=tau_mem, archive=archive)
    for seq, text in enumerate(texts):
        state.append(Chunk(seq, "events", 0, text, tuple(range(10))))
        while state.needs_eviction():
            state.evict()
    return archive, state


def test_archive_recall_returns_evicted_chunks_in_order_within_budget(tmp_path):
    texts = [f"[{i}.0s] events: entered the {room}" for i, room in
             enumerate(["attic", "porch", "cellar", "attic", "garage", "study", "pantry", "nursery", "kitchen"])]
    archive, state = _archive_with(tmp_path, texts)
    live = {c.seq for c in state.chunks}
    recall = ArchiveRecall(archive.path, count_tokens=lambda text: 5)
    found = recall.recall("where is the attic", k=4, max_tokens=100)
    assert [c.seq for c in found.chunks] == [0, 3] and not live & {0, 3}
    assert found.text == RECALL_HEADER + "\n" + texts[0] + "\n" + texts[3] + "\n"
    assert recall.recall("attic", k=4, max_tokens=16).n_tokens == 10     # the budget keeps one 10-token chunk
    assert recall.recall("attic", k=0, max_tokens=100).text == ""
    assert recall.recall("nothing in common", k=4, max_tokens=100).chunks == []


def test_archive_recall_follows_the_file(tmp_path, caplog):
    path = tmp_path / "archive.jsonl"
    recall = ArchiveRecall(path)
    assert recall.recall("attic", 2, 100).chunks == []                  # no file yet
    row = {"status": "evicted", "seq": 0, "part": 0, "text": "entered the attic", "tokens": [1, 2]}
    half = json.dumps(dict(row, seq=1, text="attic again"))
    path.write_text(json.dumps(row) + "\n" + json.dumps(dict(row, status="rejected", text="attic refused")) + "\n"
                    + "{broken\n" + half[:10])
    with caplog.at_level(logging.WARNING):
        assert [c.text for c in recall.recall("attic", 5, 100).chunks] == ["entered the attic"]
    assert recall.bad_lines == 1 and "malformed line" in caplog.text
    with open(path, "a") as handle:                                    # the half-written line completes
        handle.write(half[10:] + "\n")
    assert [c.seq for c in recall.recall("attic", 5, 100).chunks] == [0, 1]


def test_scoring_auc_and_summary():
    assert auc([2.0, 3.0], [1.0, 0.0]) == 1.0 and auc([1.0], [1.0]) == 0.5 and auc([], [1.0]) is None
    yes, no = Question("a?", ("yes", "no"), 0, "presence"), Question("b?", ("yes", "no"), 1, "presence")
    outcomes = [Outcome(yes, 4096, 0, [-0.1, -2.0], 10.0, True), Outcome(no, 4096, 0, [-0.5, -1.0], 20.0, None)]
    record = summarize(outcomes)
    assert record["accuracy"] == 0.5 and record["n"] == 2 and record["chance"] == 0.5
    assert record["by_family"]["presence"]["auc"] == 1.0        # yes-biased, yet ranked right
    assert record["evicted_evidence"]["n"] == 1 and record["by_length"]["4096"]["ttft_p50_ms"] == 15.0


def test_bench_refuses_a_malformed_dataset_with_one_line(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "x", "steps": []}\n')
    assert bench.main(["--dataset", str(path), "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'steps' must be a non-empty list" in err


@pytest.mark.slow
def test_bench_runs_every_method_on_a_small_dataset(tmp_path):
    generated = generate_history(5, 1500)
    steps = generated.steps
    questions = [q for family in ("state_at_time", "presence") for q in GENERATORS[family](generated,
                                                                                         __import__("random").Random(0))[:2]]
    episode = Episode("small", [Step(s.t, s.text) for s in steps], questions)
    args = SimpleNamespace(model_path=None, n_threads=1, tau_mem=900, evict_ratio=0.5, window=300, retrieval_k=4,
                           archive_k=2, archive_tokens=200, full_per_episode=1)
    result = bench.run([(1500, episode)], args, log=lambda line: None)
    assert set(result["methods"]) == {"csr", "window", "retrieval", "full", "csr_archive"}
    assert result["episodes"][0]["evictions"] >= 1 and result["methods"]["full"]["n"] == 1
    assert result["methods"]["csr"]["n"] == len(questions)
    assert result["methods"]["full"]["same_answer_as_csr"]["n"] == 1
    assert any(row["recalled"] for row in result["questions"])        # evicted chunks came back for some
    bench.plot(result, tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 0 and "accuracy (n)" in bench.format_table(result)


def test_archive_recall_suffix_tokens_are_plain_and_bounded(engine, tmp_path):
    texts = [f"[{i}.0s] events: entered the {room} <end_of_turn>" for i, room in
             enumerate(["attic", "porch", "cellar", "garage", "study", "pantry"])]
    archive = ChunkArchive(tmp_path / "archive.jsonl")
    state = CachedState([1], tau_mem=60, archive=archive)
    for seq, text in enumerate(texts):
        state.append(Chunk(seq, "events", 0, text, tuple(engine.tokenize_plain(chunk_line(text)))))
        while state.needs_eviction():
            state.evict()
    recall = ArchiveRecall(archive.path, count_tokens=lambda text: len(engine.tokenize_plain(text)))
    tokens = recall.suffix_tokens("attic", 3, 64, engine.tokenize_plain)
    assert engine.detokenize(tokens).startswith(RECALL_HEADER) and "attic" in engine.detokenize(tokens)
    assert len(tokens) <= 64 and engine.tokenize("<end_of_turn>")[0] not in tokens
    assert recall.suffix_tokens("zebra", 3, 64, engine.tokenize_plain) == []
