"""The recall dataset: one episode per JSONL line, a history of timed steps and multiple-choice questions.

    {"id": "ep1", "steps": [{"t": 0.5, "text": "[0.5s] events: entered the pantry"}, ...],
     "questions": [{"q": "Where was the robot at 0.5 s?", "choices": ["pantry", "attic", ...],
                    "answer": 0, "family": "state_at_time", "evidence": [0]}]}

`evidence` and `form` are optional. `form` "chat" (default) asks `q` as a question after the log,
with the options listed; "cloze" continues the log with `q` (the start of a log line) and the
choice completes it (a small model copies from its context far better than it answers questions).

`evidence` (optional) lists the step indices the answer rests on; the benchmark uses it to tell
questions whose evidence was evicted from the live prefix. Questions are asked after the whole
history. A malformed file is refused with one `DatasetError` line naming the file, line and field.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, List, Mapping, Tuple, Union


FORMS = ("chat", "cloze")


class DatasetError(ValueError):
    """A recall dataset file (or one of its episodes) is malformed."""


@dataclass(frozen=True)
class Step:
    t: float
    text: str


@dataclass(frozen=True)
class Question:
    q: str
    choices: Tuple[str, ...]
    answer: int
    family: str
    evidence: Tuple[int, ...] = ()
    form: str = "chat"          # chat: asked after the log; cloze: `q` starts a log line, a choice ends it

    @property
    def chance(self) -> float:
        return 1.0 / len(self.choices)

    @property
    def is_yes_no(self) -> bool:
        return sorted(c.lower() for c in self.choices) == ["no", "yes"]


@dataclass
class Episode:
    id: str
    steps: List[Step]
    questions: List[Question] = field(default_factory=list)

    def to_json(self) -> str:
        data = {"id": self.id, "steps": [asdict(s) for s in self.steps],
                "questions": [dict(asdict(q), choices=list(q.choices), evidence=list(q.evidence))
                              for q in self.questions]}
        return json.dumps(data, ensure_ascii=False)


def _require(condition: bool, where: str, message: str) -> None:
    if not condition:
        raise DatasetError(f"{where}: {message}")


def episode_from_mapping(data: Any, where: str = "episode") -> Episode:
    """Validate one decoded JSON episode (every field, every question) into an Episode."""
    _require(isinstance(data, Mapping), where, "an episode must be a JSON object")
    _require(isinstance(data.get("id"), (str, int)) and str(data.get("id")) != "", where,
             "'id' must be a non-empty string")
    where = f"{where} (id {data['id']})"
    steps_raw = data.get("steps")
    _require(isinstance(steps_raw, list) and bool(steps_raw), where, "'steps' must be a non-empty list")
    steps = []
    for index, step in enumerate(steps_raw):
        at = f"{where} steps[{index}]"
        _require(isinstance(step, Mapping), at, "a step must be an object {\"t\", \"text\"}")
        t = step.get("t")
        _require(isinstance(t, (int, float)) and not isinstance(t, bool), at, "'t' must be a number")
        _require(isinstance(step.get("text"), str) and step["text"].strip() != "", at, "'text' must be non-empty text")
        steps.append(Step(float(t), step["text"]))
    questions_raw = data.get("questions")
    _require(isinstance(questions_raw, list) and bool(questions_raw), where, "'questions' must be a non-empty list")
    questions = [_question(q, f"{where} questions[{i}]", len(steps)) for i, q in enumerate(questions_raw)]
    return Episode(str(data["id"]), steps, questions)


def _question(data: Any, at: str, n_steps: int) -> Question:
    _require(isinstance(data, Mapping), at, "a question must be an object")
    _require(isinstance(data.get("q"), str) and data["q"].strip() != "", at, "'q' must be non-empty text")
    choices = data.get("choices")
    _require(isinstance(choices, list) and len(choices) >= 2 and
             all(isinstance(c, str) and c.strip() and '"' not in c for c in choices),
             at, "'choices' must be a list of at least 2 non-empty strings without '\"'")
    _require(len(set(choices)) == len(choices), at, "'choices' must be distinct")
    answer = data.get("answer")
    _require(isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < len(choices),
             at, f"'answer' must be an index into choices (0..{len(choices) - 1})")
    _require(isinstance(data.get("family"), str) and data["family"] != "", at, "'family' must be a non-empty string")
    form = data.get("form", "chat")
    _require(form in FORMS, at, f"'form' must be one of {list(FORMS)}")
    evidence = data.get("evidence", [])
    _require(isinstance(evidence, list) and all(isinstance(e, int) and 0 <= e < n_steps for e in evidence),
             at, f"'evidence' must list step indices (0..{n_steps - 1})")
    return Question(data["q"], tuple(choices), answer, data["family"], tuple(evidence), form)


def load_jsonl(path: Union[str, Path]) -> List[Episode]:
    """Every episode of a JSONL file; DatasetError (one line: file, line, what) when any is malformed."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DatasetError(f"{path}: cannot be read ({err})") from err
    episodes, ids = [], set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as err:
            raise DatasetError(f"{path}:{number}: not valid JSON ({err.args[0]})") from None
        episode = episode_from_mapping(data, f"{path}:{number}")
        _require(episode.id not in ids, f"{path}:{number}", f"episode id {episode.id!r} appears twice")
        ids.add(episode.id)
        episodes.append(episode)
    _require(bool(episodes), str(path), "holds no episode")
    return episodes


def save_jsonl(episodes: Iterable[Episode], path: Union[str, Path]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(e.to_json() + "\n" for e in episodes), encoding="utf-8")
