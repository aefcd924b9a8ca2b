"""Prompt layout: static head (robot, intents, instruction, examples) + state chunk lines + dynamic suffix.

The head opens a Gemma user turn; every state chunk adds one line (`text` + newline) to it; the
suffix closes the turn with the question and opens the model turn with the JSON scaffold that
the decision grammar continues. Sensor text is tokenized without control tokens, so text in a
chunk can never close the turn or inject a role. The suffix follows the same rule: only the turn
markers it adds itself are control tokens; the question, the running task and the repeated latest
events (topic text) are tokenized as plain text (`suffix_segments`).

Two question styles:
* legacy: "Now running: {running}. Pending interrupts: {interrupts}. ..." (the first release);
* with `recent_events` > 0 the suffix first repeats the newest event chunks of the state (newest
  last), so the decision sees what changed next to what is running. Examples given as
  {events, running, decision} are rendered in the head with the same event block and question, so
  the model reads each example as it will read the live question.

A question with {paused} shows the task the router reports paused (displaced unfinished by stop,
hold_position or back_off) through `paused_format`, and nothing when none is paused.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Mapping, Sequence, Tuple, Union

import yaml

from csr_llm_common.catalogue import IntentCatalogue

SCAFFOLD = '{"intent": "'
TURN_OPEN = "<start_of_turn>user\n"
TURN_CLOSE = "<end_of_turn>\n<start_of_turn>model\n"
LEGACY_QUESTION = "Now running: {running}. Pending interrupts: {interrupts}. Choose the next intent."
NO_EVENTS = "none"
NOTHING_RUNNING = "nothing"
# Content-free stand-ins for the state (Zhao et al. 2021): what the calibration pass shows instead of events.
CONTENT_FREE_EVENTS = ("N/A", "")


@dataclass
class PromptTemplate:
    robot_description: str
    question: str = LEGACY_QUESTION
    examples: List[Mapping] = field(default_factory=list)
    instruction: str = ""            # how to decide (head, after the intents): cached, costs no decision latency
    recent_events: int = 0           # newest event chunks repeated before the question in the suffix
    events_header: str = "Latest events, newest last:"
    calibrate: bool = False          # contextual calibration of the intent's first token
    calibrate_per_running: bool = True   # one content-free prior per running task (else one, nothing running)
    ground_arguments: bool = False   # enum arguments limited to the names the state mentions
    examples_as_turns: bool = False  # each example as a user turn + model answer (chat few-shot)
    calibration_state: List[str] = field(default_factory=list)   # neutral state lines (no events) to calibrate on
    intent_adapter: str = ""         # "", "default" (the bundled file) or a path: see intent_adapter.py
    paused_format: str = " (paused task: {task})"   # what {paused} shows when a task is paused
    # {running} names the task in progress: while a pausing intent (stop, hold_position, back_off)
    # holds a task, the paused task, not the pause (the model's own last decision, to be copied)
    running_shows_paused_task: bool = False
    # {running} shows nothing while a pausing intent runs with no task paused: a pause is not a task
    # (shown by name, the model's own last hold is copied through a new task)
    bare_pause_shows_nothing: bool = False

    @classmethod
    def from_file(cls, path: Union[str, Path]) -> "PromptTemplate":
        data = yaml.safe_load(Path(path).read_text()) or {}
        if not data.get("robot_description"):
            raise ValueError(f"{path}: 'robot_description' is required")
        return cls.from_mapping(data, where=str(path))

    @classmethod
    def from_mapping(cls, data: Mapping, where: str = "prompt") -> "PromptTemplate":
        template = cls(
            robot_description=str(data["robot_description"]).strip(),
            question=str(data.get("question") or LEGACY_QUESTION).strip(),
            examples=list(data.get("examples") or []),
            instruction=str(data.get("instruction") or "").strip(),
            recent_events=int(data.get("recent_events") or 0),
            events_header=str(data.get("events_header", cls.events_header) or ""),
            calibrate=bool(data.get("calibrate", False)),
            calibrate_per_running=bool(data.get("calibrate_per_running", True)),
            ground_arguments=bool(data.get("ground_arguments", False)),
            examples_as_turns=bool(data.get("examples_as_turns", False)),
            calibration_state=[str(line) for line in data.get("calibration_state") or []],
            intent_adapter=str(data.get("intent_adapter") or ""),
            paused_format=str(data.get("paused_format", cls.paused_format)),
            running_shows_paused_task=bool(data.get("running_shows_paused_task", False)),
            bare_pause_shows_nothing=bool(data.get("bare_pause_shows_nothing", False)))
        for index, example in enumerate(template.examples):
            if "decision" not in example or not ("state" in example or "events" in example):
                raise ValueError(f"{where}: example {index} needs 'decision' and 'state' or 'events'")
        try:
            template.question_text(NOTHING_RUNNING, 0)
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(f"{where}: question may use only {{running}}, {{interrupts}}, {{events}}, "
                             f"{{paused}}: {err}") from err
        try:
            template.paused_format.format(task="stop")
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(f"{where}: paused_format may use only {{task}}: {err}") from err
        return template

    def suffix_settings(self) -> dict:
        """What shapes the live question (with the head, what a trained intent adapter was fitted to)."""
        settings = {"question": self.question, "recent_events": self.recent_events, "events_header": self.events_header,
                    "paused_format": self.paused_format, "running_shows_paused_task": self.running_shows_paused_task}
        if self.bare_pause_shows_nothing:     # only when on: adapters fitted before it keep their settings
            settings["bare_pause_shows_nothing"] = True
        return settings

    def head_text(self, catalogue: IntentCatalogue) -> str:
        lines = [TURN_OPEN + self.robot_description, "",
                 "Intents (answer with exactly one, as JSON):", catalogue.describe()]
        if self.instruction:
            lines += ["", self.instruction]
        if self.examples and self.examples_as_turns:
            # the examples become earlier exchanges of the chat; the state log opens the last user turn
            text = "\n".join(lines + ["", "Examples follow, then the state log."])
            for example in self.examples:
                events = list(example.get("events") or [example.get("state", "")])
                text += "\n\n" + self.situation_text(example.get("running", ""), 0, events, len(events),
                                                     str(example.get("paused") or ""))
                text += TURN_CLOSE + example["decision"] + "<end_of_turn>\n" + TURN_OPEN
            return text + "State log, oldest first ([time] topic: state):\n"
        if self.examples:
            lines += ["", "Examples:"]
            for example in self.examples:
                if "events" in example:      # rendered like the live question
                    events = list(example["events"])
                    lines += ["", self.situation_text(example.get("running", ""), 0, events, len(events),
                                                      str(example.get("paused") or "")),
                              f"Answer: {example['decision']}"]
                else:
                    lines.append(f"State: {example['state']} -> {example['decision']}")
        lines += ["", "State log, oldest first ([time] topic: state):", ""]
        return "\n".join(lines)

    def question_text(self, running: str, interrupts: int, events_block: str = "", paused: str = "") -> str:
        return self.question.format(running=running or NOTHING_RUNNING, interrupts=interrupts, events=events_block,
                                    paused=self.paused_format.format(task=paused) if paused else "")

    def situation_text(self, running: str, interrupts: int, events: Sequence[str], count: int,
                       paused: str = "") -> str:
        """The question with the newest `count` events: at {events} when the question has it, else before it."""
        block = self.events_text(events, count)
        if "{events}" in self.question:
            return self.question_text(running, interrupts, block, paused)
        return block + "\n" + self.question_text(running, interrupts, paused=paused)

    def events_text(self, events: Sequence[str], count: int) -> str:
        shown = "\n".join(events[-count:]) if count and events else NO_EVENTS
        return f"{self.events_header}\n{shown}" if self.events_header else shown

    def suffix_segments(self, running: str = "", interrupts: int = 0, events: Sequence[str] = (),
                        paused: str = "") -> List[Tuple[str, bool]]:
        """The suffix as (text, control) pieces: only the turn markers may become control tokens."""
        if self.recent_events:
            question = "\n" + self.situation_text(running, interrupts, events, self.recent_events, paused)
        else:
            question = self.question_text(running, interrupts, paused=paused)
        return [(question, False), (TURN_CLOSE, True), (SCAFFOLD, False)]

    def suffix_text(self, running: str = "", interrupts: int = 0, events: Sequence[str] = (),
                    paused: str = "") -> str:
        return "".join(text for text, _ in self.suffix_segments(running, interrupts, events, paused))


def tokenize_suffix(segments: Sequence[Tuple[str, bool]], tokenize_control, tokenize_plain) -> List[int]:
    """Tokenize suffix pieces; topic text (control=False) can never yield <start_of_turn>/<end_of_turn>."""
    tokens: List[int] = []
    for text, control in segments:
        tokens += tokenize_control(text) if control else tokenize_plain(text)
    return tokens


def chunk_line(text: str) -> str:
    """What a chunk adds to the prompt: its exact text and a newline."""
    return text + "\n"
