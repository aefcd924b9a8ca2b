"""Recall benchmark data: generated histories, question families against ground truth, the JSONL format."""
import json
import random

import pytest

from csr_llm_core.lab.recall.episode import DatasetError, Episode, Question, Step, load_jsonl, save_jsonl
from csr_llm_core.lab.recall.families import COUNT_WORDS, FAMILIES, GENERATORS, balanced_sample, make_questions
from csr_llm_core.lab.recall.world import Fact, estimate_tokens, generate_history


@pytest.fixture(scope="module")
def history():
    return generate_history(7, 12000)


def _facts(history, kind):
    return [f for f in history.facts if f.kind == kind]


def test_history_is_reproducible_and_long_enough(history):
    again = generate_history(7, 12000)
    assert again.steps == history.steps and again.facts == history.facts
    assert sum(estimate_tokens(s.text + "\n") for s in history.steps) >= 12000
    for fact in history.facts:        # every fact is an event chunk that says it
        text = history.steps[fact.step].text
        assert "events:" in text and (fact.room in text or fact.kind == "person") and fact.obj in text
    assert not any(obj in s.text for s in history.steps for obj in history.unused_objects)


def test_every_family_has_questions_with_distinct_choices(history):
    for family in FAMILIES:
        questions = GENERATORS[family](history, random.Random(1))
        assert questions, family
        for q in questions:
            assert q.family == family
            assert len(set(q.choices)) == len(q.choices) == (2 if family == "presence" else 4)
            assert 0 <= q.answer < len(q.choices)


def test_answers_follow_the_ground_truth(history):
    rng = random.Random(3)
    enters = {f"[{f.t:.1f}s]": f.room for f in _facts(history, "enter")}
    for q in GENERATORS["state_at_time"](history, rng):
        assert q.choices[q.answer] == enters[q.q.split()[0]]
        assert history.steps[q.evidence[0]].text.endswith("entered the " + q.choices[q.answer])
    for q in GENERATORS["recall"](history, rng):
        room = q.q.split(":")[1].strip()
        picks = [f.obj for f in _facts(history, "pick") if f.room == room]
        assert picks == [q.choices[q.answer]]
    for q in GENERATORS["state_updating"](history, rng):
        obj = q.q.split("put down the ")[1].split(" in the")[0]
        places = [f.room for f in _facts(history, "place") if f.obj == obj]
        assert len(places) >= 2 and q.choices[q.answer] == places[-1]
    for q in GENERATORS["counting"](history, rng):
        kind = "person" if "person" in q.q else "pick"
        facts = [f for f in _facts(history, kind) if kind == "person" or q.q.endswith(f"the {f.obj}?")]
        assert q.choices[q.answer] == COUNT_WORDS[len(facts) - 1]
        assert list(q.evidence) == [f.step for f in facts]
    for q in GENERATORS["order"](history, rng):
        first = {}
        for f in _facts(history, "pick"):
            first.setdefault(f.obj, f.t)
        assert q.choices[q.answer] == min(q.choices, key=first.__getitem__)
    picked = {f.obj for f in _facts(history, "pick")}
    for q in GENERATORS["presence"](history, rng):
        obj = q.q.split("the ")[-1].rstrip("?")
        assert q.choices[q.answer] == ("yes" if obj in picked else "no")


def test_balanced_sample_spreads_answers():
    questions = [Question(f"q{i}", ("once", "twice", "three times", "four times"), 0 if i < 8 else 1, "counting")
                 for i in range(10)]
    picked = balanced_sample(questions, 4, random.Random(0))
    assert sorted(q.answer for q in picked) == [0, 0, 1, 1]


def test_make_questions_balances_presence(history):
    questions = make_questions(history, 5, per_family=2)
    presence = [q for q in questions if q.family == "presence"]
    assert [q.answer for q in presence].count(0) == [q.answer for q in presence].count(1) == 2


def test_generated_episode_round_trips_through_jsonl(history, tmp_path):
    episode = Episode("ep", history.steps, make_questions(history, 1, per_family=1))
    save_jsonl([episode], tmp_path / "d.jsonl")
    loaded, = load_jsonl(tmp_path / "d.jsonl")
    assert loaded.steps == episode.steps and loaded.questions == episode.questions


GOOD = {"id": "e1", "steps": [{"t": 0.0, "text": "[0.0s] events: entered the attic"}],
        "questions": [{"q": "Where?", "choices": ["attic", "porch"], "answer": 0, "family": "state_at_time"}]}


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("steps"), "'steps' must be a non-empty list"),
    (lambda d: d["steps"][0].update(t="now"), "steps[0]: 't' must be a number"),
    (lambda d: d["questions"][0].update(choices=["attic"]), "'choices' must be a list of at least 2"),
    (lambda d: d["questions"][0].update(choices=["attic", "attic"]), "'choices' must be distinct"),
    (lambda d: d["questions"][0].update(answer=2), "'answer' must be an index into choices (0..1)"),
    (lambda d: d["questions"][0].update(answer=True), "'answer' must be an index"),
    (lambda d: d["questions"][0].pop("family"), "'family' must be a non-empty string"),
    (lambda d: d["questions"][0].update(evidence=[3]), "'evidence' must list step indices (0..0)"),
    (lambda d: d["questions"][0].update(form="essay"), "'form' must be one of"),
])
def test_loader_refuses_malformed_episodes_with_one_line(tmp_path, mutate, message):
    data = json.loads(json.dumps(GOOD))
    mutate(data)
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(GOOD | {"id": "ok"}) + "\n" + json.dumps(data) + "\n")
    with pytest.raises(DatasetError) as caught:
        load_jsonl(path)
    text = str(caught.value)
    assert "\n" not in text and f"{path}:2" in text and message in text


@pytest.mark.parametrize("content, message", [
    ("{not json\n", ":1: not valid JSON"),
    ("\n\n", "holds no episode"),
    ("[1, 2]\n", "an episode must be a JSON object"),
    (json.dumps(GOOD) + "\n" + json.dumps(GOOD) + "\n", "episode id 'e1' appears twice"),
])
def test_loader_refuses_malformed_files(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(DatasetError, match=message):
        load_jsonl(path)


def test_loader_refuses_a_missing_file(tmp_path):
    with pytest.raises(DatasetError, match="cannot be read"):
        load_jsonl(tmp_path / "absent.jsonl")


def test_question_properties():
    assert Question("Did it?", ("yes", "no"), 0, "presence").is_yes_no
    assert Question("x", ("a", "b", "c", "d"), 0, "f").chance == 0.25
    assert Step(1.0, "x") == Step(1.0, "x") and Fact("enter", 1.0, 0, room="attic").room == "attic"
