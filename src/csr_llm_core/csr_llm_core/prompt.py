"""Prompt layout: static head (robot, intents, examples) + state chunk lines + dynamic suffix.

The head opens a Gemma user turn; every state chunk adds one line (`text` + newline) to it; the
suffix closes the turn with the question and opens the model turn with the JSON scaffold that
the decision grammar continues. Sensor text is tokenized without control tokens, so text in a
chunk can never close the turn or inject a role.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Mapping, Union

import yaml

from .catalogue import IntentCatalogue

SCAFFOLD = '{"intent": "'
TURN_OPEN = "<start_of_turn>user\n"
TURN_CLOSE = "<end_of_turn>\n<start_of_turn>model\n"


@dataclass
class PromptTemplate:
    robot_description: str
    question: str = "Now running: {running}. Pending interrupts: {interrupts}. Choose the next intent."
    examples: List[Mapping[str, str]] = field(default_factory=list)

    @classmethod
    def from_file(cls, path: Union[str, Path]) -> "PromptTemplate":
        data = yaml.safe_load(Path(path).read_text()) or {}
        if not data.get("robot_description"):
            raise ValueError(f"{path}: 'robot_description' is required")
        return cls(str(data["robot_description"]).strip(), str(data.get("question") or cls.question),
                   list(data.get("examples") or []))

    def head_text(self, catalogue: IntentCatalogue) -> str:
        lines = [TURN_OPEN + self.robot_description, "",
                 "Intents (answer with exactly one, as JSON):", catalogue.describe()]
        if self.examples:
            lines += ["", "Examples:"]
            lines += [f"State: {ex['state']} -> {ex['decision']}" for ex in self.examples]
        lines += ["", "State log, oldest first ([time] topic: state):", ""]
        return "\n".join(lines)

    def suffix_text(self, running: str = "", interrupts: int = 0) -> str:
        question = self.question.format(running=running or "nothing", interrupts=interrupts)
        return f"{question}{TURN_CLOSE}{SCAFFOLD}"


def chunk_line(text: str) -> str:
    """What a chunk adds to the prompt: its exact text and a newline."""
    return text + "\n"
