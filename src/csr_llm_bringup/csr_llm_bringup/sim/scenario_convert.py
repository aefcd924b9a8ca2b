"""Convert a narrated scenario file (plain module, no rclpy): drop the `say:` of its sensed events.

A scenario says only what the robot cannot sense (operator orders, outside notices, distractors);
the graph writes what it senses itself (the aggregator's sensed lines, docs/situations.md). A
`say:` on an event whose window is `sensed` (``decides: sensed``, or by default one fired by
`when:` conditions) narrates it, and the loader refuses the file (scenario_format.check_no_narration).
This drops those lines and keeps everything else: ids, `when`/`at`/`after`, the world actions,
`expect`, `unless_goal`, `decides`, the goals. Where each dropped line is a block-style
``say: ...`` entry of its own (the suite's layout), only those lines leave the text and every
comment stays; otherwise the file is rewritten by PyYAML under a one-line header saying it was
converted and from what. Converting a converted file changes nothing.

    csr-llm scenario convert FILE [-o OUT]
    python -m csr_llm_bringup.sim.scenario_convert FILE [-o OUT]
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

import yaml

from .scenario_format import SENSED, ScenarioError, window_class


@dataclass
class Conversion:
    text: str                                                  # the converted file
    dropped: List[Tuple[str, str]] = field(default_factory=list)   # (event id, the line it said)
    rewritten: bool = False                                    # PyYAML rewrote the file (comments lost)


def _narrated(data) -> List[int]:
    """Indexes of the events that say a line although their window is sensed."""
    events = data.get("events") if isinstance(data, dict) else None
    if not isinstance(events, list):
        return []
    out = []
    for i, raw in enumerate(events):
        if isinstance(raw, dict) and "say" in raw:
            try:
                sensed = window_class(raw, f"event {i}") == SENSED
            except ScenarioError:
                continue                         # a bad `decides:`: the loader names it
            if sensed:
                out.append(i)
    return out


def _say_line_spans(text: str, indexes: List[int]) -> Optional[List[Tuple[int, int]]]:
    """The line ranges [first, last] of those events' `say:` entries, or None when one is not a
    block entry on lines of its own (then only a rewrite can drop it)."""
    root = yaml.compose(text)
    events = next((v for k, v in root.value if k.value == "events"), None) if isinstance(
        root, yaml.MappingNode) else None
    if not isinstance(events, yaml.SequenceNode):
        return None
    lines = text.splitlines()
    spans = []
    for i in indexes:
        node = events.value[i]
        if not isinstance(node, yaml.MappingNode) or node.flow_style:
            return None
        pair = next(((k, v) for k, v in node.value if k.value == "say"), None)
        if pair is None or pair is node.value[0]:
            return None                          # `- say: ...` opens the list item: keep the item's shape
        key, value = pair
        first, end = key.start_mark.line, value.end_mark
        last = end.line if end.column > 0 else end.line - 1
        if lines[first][:key.start_mark.column].strip():
            return None
        tail = lines[end.line][end.column:].strip() if end.column > 0 and end.line < len(lines) else ""
        if tail and not tail.startswith("#"):
            return None
        spans.append((first, last))
    return spans


def convert_text(text: str, source: str = "<text>") -> Conversion:
    """The converted text of a scenario file (unchanged when nothing narrates)."""
    data = yaml.safe_load(text)
    indexes = _narrated(data)
    if not indexes:
        return Conversion(text)
    dropped = [(str(data["events"][i].get("id", f"event_{i}")), str(data["events"][i]["say"])) for i in indexes]
    spans = _say_line_spans(text, indexes)
    if spans is not None:
        gone = {n for first, last in spans for n in range(first, last + 1)}
        kept = [line for n, line in enumerate(text.splitlines(keepends=True)) if n not in gone]
        return Conversion("".join(kept), dropped)
    for i in indexes:
        del data["events"][i]["say"]
    header = f"# converted from {source} by `csr-llm scenario convert`: sensed events say nothing\n"
    body = yaml.safe_dump(data, sort_keys=False, width=120, allow_unicode=True)
    return Conversion(header + body, dropped, rewritten=True)


def convert_file(path: Path, out: Optional[Path] = None) -> Conversion:
    """Convert `path` into `out` (default: in place)."""
    conversion = convert_text(path.read_text(encoding="utf-8"), str(path))
    target = out or path
    if out is not None or conversion.dropped:
        target.write_text(conversion.text, encoding="utf-8")
    return conversion


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="scenario YAML to convert (in place unless -o)")
    parser.add_argument("-o", "--out", type=Path, default=None, help="write the converted file here")


def run(args) -> int:
    try:
        conversion = convert_file(args.file, args.out)
    except (OSError, yaml.YAMLError) as err:
        print(f"csr-llm scenario convert: error: {args.file}: {err}", file=sys.stderr)
        return 2
    target = args.out or args.file
    if not conversion.dropped:
        print(f"{args.file}: no sensed event says a line; {target} unchanged"
              if args.out is None else f"{args.file}: nothing to drop; copied to {target}")
        return 0
    for event_id, said in conversion.dropped:
        print(f"dropped: {event_id}: {said}")
    how = "rewritten by PyYAML (comments lost)" if conversion.rewritten else "comments kept"
    print(f"{target}: {len(conversion.dropped)} sensed line(s) dropped, {how}; review what is left: "
          f"a timed line that reports the sensed state (\"person approaching\") is narration too")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m csr_llm_bringup.sim.scenario_convert",
                                     description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
