"""Offline decision-quality evaluation: chunk streams -> the real Reasoner/LlamaEngine -> accuracy.

Each situation is a script of robot life: sensor samples go through the real `Aggregator` (so the
chunk texts are exactly what the aggregator node emits) and events are said on `events`; probes
ask for a decision at a point of the stream, with the running task the router would report, and
the intents an operator would accept there (written from the situation, never from what a model
answered). The same situations run through several prompt variants in one process, so the
levers (head instruction/examples, suffix, calibration, grounded arguments) are compared on the
same model, machine and chunks; chance is the expected accuracy of a uniform pick among the
catalogued intents.

These situations are held out: the head's examples in config/prompt.yaml use other events,
wording and tasks. Keep it that way (score the general case, not the suite).

    python -m csr_llm_core.lab.decision_eval                  # all variants, all situations
    python -m csr_llm_core.lab.decision_eval --variants baseline,combined --situations person_close_door
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..aggregator import KIND_EVENT
from csr_llm_common.catalogue import IntentCatalogue
from .decision_situations import SITUATIONS, Probe, Stream

# The first release's prompt, kept as a baseline to measure the current one against.
BASELINE_PROMPT = {
    "robot_description": (
        "You are the decision layer of a mobile manipulator: a differential-drive base, a four-joint arm "
        "and a gripper with a force sensor. It works in a building with a corridor, a door and a "
        "warehouse with shelves. Safety first: when a person is close, back off; when something is "
        "wrong, stop."),
    "examples": [
        {"state": "/events: person approaching, distance 0.6 m",
         "decision": '{"intent": "back_off", "args": {"distance": 0.1}}'},
        {"state": "/events: task: open the door", "decision": '{"intent": "open_door", "args": {}}'},
        {"state": "/events: task: fetch a box from the warehouse",
         "decision": '{"intent": "move_to", "args": {"zone": "warehouse", "speed": 0.3}}'},
    ],
    "question": "Now running: {running}. Pending interrupts: {interrupts}. Choose the next intent.",
}


def golden_bag_stream(bag: Path) -> Optional[Stream]:
    """The golden bag's recorded `state_chunks`, probed after its events (None without rosbags)."""
    try:
        from .live_episodes import read_topics, state_chunks
        chunks = state_chunks(read_topics(bag, ["state_chunks"])["state_chunks"])
    except ImportError:
        return None
    probes = []
    for index, chunk in enumerate(chunks):
        if chunk.kind == KIND_EVENT and chunk.text.endswith("task: open the door"):
            probes.append((index + 1, Probe(frozenset({"open_door"}))))
        elif chunk.kind == KIND_EVENT and chunk.text.endswith("person approaching"):
            probes.append((index + 1, Probe(frozenset({"back_off", "stop", "hold_position"}), "open_door",
                                            note="person approaching, distance unknown")))
    return Stream(chunks, probes)


# --- variants --------------------------------------------------------------------------------
def variant_templates(prompt: Mapping) -> Dict[str, Mapping]:
    """Prompt mappings per lever: each adds one lever to the baseline; `combined` has them all,
    `calibrated` all but the intent adapter (calibration instead)."""
    base = dict(BASELINE_PROMPT, recent_events=0, calibrate=False, ground_arguments=False)
    head = {k: prompt[k] for k in ("robot_description", "instruction", "examples", "events_header", "calibration_state",
                                   "examples_as_turns") if k in prompt}
    suffix = {k: prompt[k] for k in ("question", "recent_events", "events_header") if k in prompt}
    return {
        "baseline": base,
        "head": dict(base, **head),
        "suffix": dict(base, **suffix),
        "calibration": dict(base, calibrate=True),
        "head+suffix": {**base, **head, **suffix},
        "calibrated": dict(prompt, intent_adapter=""),
        "combined": dict(prompt),
    }


@dataclass
class Outcome:
    situation: str
    category: str
    probe: Probe
    intent: str
    arguments: dict
    ttft_ms: float
    prefix_tokens: int
    suffix_tokens: int

    @property
    def correct(self) -> bool:
        return self.intent in self.probe.accept

    @property
    def args_correct(self) -> Optional[bool]:
        if not self.probe.args or not self.correct:
            return None
        return all(self.arguments.get(k) == v for k, v in self.probe.args.items())


def chance_level(probes: Sequence[Probe], n_intents: int) -> float:
    return statistics.mean(len(p.accept) / n_intents for p in probes)


def best_constant(probes: Sequence[Probe], intents: Sequence[str]) -> Tuple[str, float]:
    """The best always-the-same-intent policy and its accuracy (what a degenerate model can reach)."""
    scores = {name: statistics.mean(name in p.accept for p in probes) for name in intents}
    name = max(scores, key=lambda n: scores[n])
    return name, scores[name]


def offline_config(engine):
    """The reasoner settings for offline decisions on a scripted stream (evaluation, adapter training).

    Every decision sees every chunk said before it: the live node appends between decisions, but
    here nothing does, and with `decide_on_cached` the prefix would lag the stream by up to
    `max_uncached_tokens` (the suffix's events would be newer than the state the model reads).
    Every probe is evaluated (no reuse): evaluation times and recorded features are the model's."""
    from ..reasoner import ReasonerConfig
    return ReasonerConfig(tau_mem=engine.n_ctx - 256, mode="sync", suffix_reserve=128, max_chunk_tokens=512,
                          decide_on_cached=False, reuse_decisions=False)


def evaluate(engine, catalogue: IntentCatalogue, template, streams: Mapping[str, Tuple[str, Stream]],
             log=None) -> List[Outcome]:
    """Run every stream through a fresh Reasoner (sync mode) on `engine`; the head stays cached."""
    from ..reasoner import Reasoner
    config = offline_config(engine)
    outcomes, grammar = [], None
    for name, (category, stream) in streams.items():
        reasoner = Reasoner([engine], catalogue, template if grammar is None else replace(template, calibrate=False),
                            config, logger=log)
        if grammar is None:
            grammar = reasoner.grammar          # calibrated once per head, shared by the situations
        reasoner.grammar = grammar
        fed = 0
        for position, probe in stream.probes:
            for chunk in stream.chunks[fed:position]:
                reasoner.add_chunk(chunk.seq, chunk.text, source=chunk.source_topic, kind=chunk.kind,
                                   stamp=chunk.stamp)
            fed = position
            decision = reasoner.decide(running=probe.running, paused=probe.paused)
            result = decision.result
            outcomes.append(Outcome(name, category, probe, result.decision.intent, dict(result.decision.arguments),
                                    result.ttft_ms, result.prefix_tokens, result.suffix_tokens))
        reasoner.close()
    return outcomes


def summarize(outcomes: Sequence[Outcome], intents: Sequence[str]) -> dict:
    probes = [o.probe for o in outcomes]
    args = [o.args_correct for o in outcomes if o.args_correct is not None]
    by_situation: Dict[str, List[bool]] = {}
    for o in outcomes:
        by_situation.setdefault(o.situation, []).append(o.correct)
    by_category: Dict[str, List[bool]] = {}
    for o in outcomes:
        by_category.setdefault(o.category, []).append(o.correct)
    return {
        "accuracy": statistics.mean(o.correct for o in outcomes), "probes": len(outcomes),
        "chance": chance_level(probes, len(intents)),
        "best_constant": best_constant(probes, intents),
        "args_accuracy": statistics.mean(args) if args else None, "args_probes": len(args),
        "intent_counts": {name: sum(o.intent == name for o in outcomes) for name in intents},
        "ttft_ms_p50": statistics.median(o.ttft_ms for o in outcomes),
        "suffix_tokens_p50": statistics.median(o.suffix_tokens for o in outcomes),
        "by_situation": {k: statistics.mean(v) for k, v in by_situation.items()},
        "by_category": {k: statistics.mean(v) for k, v in by_category.items()},
        "decisions": [{"situation": o.situation, "running": o.probe.running, "accept": sorted(o.probe.accept),
                       "intent": o.intent, "args": o.arguments, "correct": o.correct,
                       "ttft_ms": round(o.ttft_ms, 1)} for o in outcomes],
    }


def format_report(results: Mapping[str, dict], situations: Sequence[str], intents: Sequence[str]) -> str:
    names = list(results)
    width = max(len(s) for s in [*situations, "overall", "chance"]) + 2
    lines = [f"{'situation':<{width}}" + "".join(f"{n:>13}" for n in names)]
    for situation in situations:
        lines.append(f"{situation:<{width}}" + "".join(f"{results[n]['by_situation'].get(situation, math.nan):>13.2f}"
                                                     for n in names))
    lines.append(f"{'overall':<{width}}" + "".join(f"{results[n]['accuracy']:>13.3f}" for n in names))
    lines.append(f"{'chance':<{width}}" + "".join(f"{results[n]['chance']:>13.3f}" for n in names))
    constant, score = results[names[0]]["best_constant"]
    lines.append(f"{'always ' + constant:<{width}}" + "".join(f"{score:>13.3f}" for n in names))
    lines.append(f"{'args (ok/asked)':<{width}}" + "".join(
        f"{'-' if results[n]['args_accuracy'] is None else format(results[n]['args_accuracy'], '.2f')}"
        f"/{results[n]['args_probes']}".rjust(13) for n in names))
    lines.append(f"{'TTFT p50 ms':<{width}}" + "".join(f"{results[n]['ttft_ms_p50']:>13.1f}" for n in names))
    lines.append(f"{'suffix tokens':<{width}}" + "".join(f"{results[n]['suffix_tokens_p50']:>13.0f}" for n in names))
    lines.append(f"{'head tokens':<{width}}" + "".join(f"{results[n].get('head_tokens', 0):>13}" for n in names))
    lines.append("intent counts:")
    for intent in intents:
        lines.append(f"  {intent:<{width - 2}}" + "".join(f"{results[n]['intent_counts'][intent]:>13}" for n in names))
    return "\n".join(lines)


def build_streams(names: Optional[Sequence[str]] = None, bag: Optional[Path] = None) -> Dict[str, Tuple[str, Stream]]:
    selected = names or list(SITUATIONS)
    unknown = [n for n in selected if n not in SITUATIONS and n != "golden_bag"]
    if unknown:
        raise ValueError(f"unknown situation(s) {unknown}; known: {sorted(SITUATIONS)}")
    streams = {n: (SITUATIONS[n][0], SITUATIONS[n][1]().stream()) for n in selected if n in SITUATIONS}
    if bag is not None and (names is None or "golden_bag" in names):
        golden = golden_bag_stream(bag)
        if golden is not None and golden.probes:
            streams["golden_bag"] = ("recorded bag", golden)
    return streams


def main(argv=None) -> int:
    from ..engine import LlamaEngine
    from ..prompt import PromptTemplate
    from ..reasoning_config import add_swa_full_argument
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="baseline,head,suffix,calibration,head+suffix,calibrated,combined")
    parser.add_argument("--situations", default="", help="comma-separated names (default: all)")
    parser.add_argument("--config-dir", type=Path, default=Path("config"),
                        help="folder with intents.yaml and prompt.yaml (default: ./config)")
    parser.add_argument("--model-path", default=None)
    parser.add_argument("--n-ctx", type=int, default=6144)
    parser.add_argument("--n-threads", type=int, default=1)
    add_swa_full_argument(parser)
    goldens = Path(__file__).resolve().parents[3] / "csr_llm_bringup" / "test" / "goldens"
    default_bag = goldens / "golden_scenario" / "bag"
    parser.add_argument("--bag", type=Path, default=default_bag if default_bag.exists() else None,
                        help="a bag with state_chunks to probe too (default: the golden bag)")
    parser.add_argument("--out", type=Path, default=Path("build/decision_eval/latest.json"))
    parser.add_argument("--verbose", action="store_true", help="print every decision")
    parser.add_argument("--override", default="{}", help="JSON merged into config/prompt.yaml (experiments)")
    args = parser.parse_args(argv)
    catalogue = IntentCatalogue.from_file(args.config_dir / "intents.yaml")
    prompt = json.loads(json.dumps(__import__("yaml").safe_load((args.config_dir / "prompt.yaml").read_text())))
    prompt.update(json.loads(args.override))
    variants = variant_templates(prompt)
    chosen = [v for v in args.variants.split(",") if v]
    unknown = [v for v in chosen if v not in variants]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; known: {list(variants)}")
    streams = build_streams([s for s in args.situations.split(",") if s] or None, args.bag)
    engine = LlamaEngine(args.model_path, n_ctx=args.n_ctx, n_threads=args.n_threads, name="eval",
                         swa_full=args.swa_full == "true")
    results, started = {}, time.perf_counter()
    try:
        for name in chosen:
            template = PromptTemplate.from_mapping(variants[name], where=name)
            outcomes = evaluate(engine, catalogue, template, streams)
            results[name] = summarize(outcomes, catalogue.names)
            results[name]["head_tokens"] = len(engine.tokenize(template.head_text(catalogue), bos=True))
            print(f"[{name}] accuracy {results[name]['accuracy']:.3f} over {len(outcomes)} probes "
                  f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
            if args.verbose:
                for row in results[name]["decisions"]:
                    mark = "ok " if row["correct"] else "BAD"
                    print(f"  {mark} {row['situation']:<24} running={row['running'] or '-':<14} -> {row['intent']} "
                          f"{row['args']} (accept {row['accept']})", file=sys.stderr)
    finally:
        engine.close()
    print(format_report(results, list(streams), catalogue.names))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"model": str(engine.model_path), "results": results}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
