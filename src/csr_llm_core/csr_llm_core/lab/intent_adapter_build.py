"""Build the intent adapter: generated situations -> the real Reasoner -> hidden states -> fit -> file.

    python -m csr_llm_core.lab.intent_adapter_build            # `make intent-adapter`
    python -m csr_llm_core.lab.intent_adapter_build --episodes 60 --live-probes --out /tmp/adapter.npz

Every probe of every generated episode (decision_training.py) and of every run of the committed
DAgger rounds (live_probe_files.py) is decided by the bare model through the same Reasoner,
prompt and grammar as the reasoning node; what the adapter needs is recorded at the intent's
first token (the final hidden state and the model's log-probs of the intents' first tokens). One
episode (or run) in five is held out: the fit is scored on it against the bare model and chance,
then refitted on every episode and written with those scores. The decision_eval situations
(never generated here) are scored last with and without the adapter.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import yaml

from csr_llm_common.catalogue import IntentCatalogue
from .decision_situations import Stream
from .decision_training import GENERATOR_VERSION, generate
from ..intent_adapter import (DEFAULT_ADAPTER, Anchors, IntentAdapter, accuracy, chosen_intents, fit, head_digest,
                             read_weights)
from .live_probe_files import committed_rounds
from .live_probe_files import read as read_probe_file
from ..model import sha256_file


# how probes are decided (part of the features cache key): 2 = on a prefix holding every chunk said
# before the probe (1 let it lag by up to max_uncached_tokens)
RECORDING_VERSION = 2


class _Recorded(Exception):
    """Ends a training decode once the intent's first token is reached (the rest is not needed)."""


DEFAULT_ANCHORS = "last"
# Probes where only a pause is acceptable weigh this much more: acting there is the unsafe mistake.
# The measurements behind the weight: docs/experiments/2026-12-07-intent-adapter.md.
HOLD_WEIGHT = 4.0


def parse_anchors(text: str) -> Anchors:
    """'last', 'lines=2', 'question_end', 'lines=1,question_end' -> Anchors."""
    anchors = Anchors()
    for part in filter(None, (p.strip() for p in text.split(","))):
        if part == "question_end":
            anchors.question_end = True
        elif part.startswith("lines="):
            anchors.lines = int(part.split("=", 1)[1])
        elif part != "last":
            raise ValueError(f"unknown anchor {part!r} (last, lines=N, question_end)")
    return anchors


class _Recorder:
    """Stands in for an adapter during training: records what it is handed, then ends the decode."""

    def __init__(self, engine, first_tokens: Dict[str, int], intents: Sequence[str], anchors: Anchors,
                 anchor_tokens: dict):
        self.engine = engine
        self.anchors = Anchors(anchors.lines, anchors.question_end, **anchor_tokens)
        self.ids = np.array([first_tokens[name] for name in intents])
        self.hidden: List[np.ndarray] = []
        self.base: List[np.ndarray] = []

    def bias(self, hidden: np.ndarray) -> Dict[int, float]:
        logits = np.asarray(self.engine.last_logits(), dtype=np.float64)
        shifted = logits - logits.max()
        log_probs = shifted - np.log(np.exp(shifted).sum())
        self.hidden.append(np.asarray(hidden, dtype=np.float32))
        self.base.append(log_probs[self.ids])
        raise _Recorded


def record(engine, catalogue: IntentCatalogue, template, streams: Sequence[Tuple[str, Stream]],
           progress: bool = True, anchors: Optional[Anchors] = None, jobs: int = 1,
           engine_settings: Optional[dict] = None, label: str = "") -> dict:
    """Hidden states, base log-probs, accepted sets and episode index for every probe (the decode
    stops at the intent's first token: the engine rolls the suffix back as after any decision).
    With `jobs` > 1 and `engine_settings` (LlamaEngine's arguments) the streams are cut into `jobs`
    contiguous slices; this process records the first one on `engine`, and one spawned process per
    other slice loads its own engine. Episode indices stay global."""
    if jobs > 1 and engine_settings is not None and len(streams) >= 2 * jobs:
        return _record_slices(engine, catalogue, template, streams, progress, anchors, jobs, engine_settings)
    from .decision_eval import offline_config
    from ..reasoner import Reasoner
    template = replace(template, calibrate=False, intent_adapter="")
    config = offline_config(engine)
    intents = catalogue.names
    recorder = None
    accept, episode = [], []
    started = time.perf_counter()
    for index, (name, stream) in enumerate(streams):
        reasoner = Reasoner([engine], catalogue, template, config)
        if recorder is None:
            recorder = _Recorder(engine, reasoner.grammar.intent_first_tokens(), intents, anchors or Anchors(),
                                 reasoner.prompt.anchor_tokens())
        reasoner.grammar.intent_adapter = recorder
        fed = 0
        for position, probe in stream.probes:
            for chunk in stream.chunks[fed:position]:
                reasoner.add_chunk(chunk.seq, chunk.text, source=chunk.source_topic, kind=chunk.kind, stamp=chunk.stamp)
            fed = position
            try:
                reasoner.decide(running=probe.running, paused=probe.paused)
            except _Recorded:
                pass
            accept.append([name in probe.accept for name in intents])
            episode.append(index)
        reasoner.close()
        if progress and (index + 1) % 20 == 0:
            print(f"  {label}{index + 1}/{len(streams)} episodes, {len(accept)} probes, "
                  f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    assert recorder is not None
    return {"hidden": np.stack(recorder.hidden), "base": np.stack(recorder.base),
            "accept": np.array(accept, dtype=bool), "episode": np.array(episode), "intents": list(intents)}


def _record_slices(engine, catalogue, template, streams, progress, anchors, jobs: int, engine_settings: dict) -> dict:
    # as many episodes each (200 on 2 jobs: 0-100, 100-200, where the shipped features were cut);
    # measured: the same features as one process, bit for bit
    cuts = [round(len(streams) * k / jobs) for k in range(jobs + 1)]
    slices = [streams[a:b] for a, b in zip(cuts, cuts[1:])]
    # spawn, not fork: the parent holds a llama.cpp context and threads
    with ProcessPoolExecutor(len(slices) - 1, mp_context=multiprocessing.get_context("spawn")) as pool:
        others = [pool.submit(_record_in_worker, engine_settings, catalogue, template, part, progress, anchors,
                              f"[{number + 2}/{len(slices)}] ") for number, part in enumerate(slices[1:])]
        parts = [record(engine, catalogue, template, slices[0], progress, anchors, label=f"[1/{len(slices)}] ")]
        parts += [future.result() for future in others]
    merged = {k: np.concatenate([part[k] for part in parts]) for k in ("hidden", "base", "accept")}
    merged["episode"] = np.concatenate([part["episode"] + start for part, start in zip(parts, cuts)])
    merged["intents"] = parts[0]["intents"]
    return merged


def _record_in_worker(engine_settings: dict, catalogue, template, streams, progress, anchors, label) -> dict:
    from ..engine import LlamaEngine
    engine = LlamaEngine(**engine_settings)
    try:
        return record(engine, catalogue, template, streams, progress, anchors, label=label)
    finally:
        engine.close()


def score_heldout(engine, catalogue, template, adapter_path: Path) -> dict:
    """decision_eval's situations (held out from generation) without and with the adapter file."""
    from .decision_eval import build_streams, evaluate, summarize
    streams = build_streams()
    results = {}
    for name, setting in (("bare", ""), ("adapted", str(adapter_path))):
        outcomes = evaluate(engine, catalogue, replace(template, intent_adapter=setting), streams)
        results[name] = summarize(outcomes, catalogue.names)
    return {"bare": round(results["bare"]["accuracy"], 3), "adapted": round(results["adapted"]["accuracy"], 3),
            "chance": round(results["bare"]["chance"], 3), "probes": results["bare"]["probes"]}


def parse_arguments(argv=None) -> argparse.Namespace:
    from ..reasoning_config import add_swa_full_argument
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--l2", type=float, default=0.05)
    parser.add_argument("--config-dir", type=Path, default=Path("config"))
    parser.add_argument("--model-path", default=None)
    parser.add_argument("--n-threads", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 8),
                        help="processes that record probes side by side, each with its own model and --n-threads "
                             "(default: one per core, at most 8)")
    add_swa_full_argument(parser)
    parser.add_argument("--anchors", type=parse_anchors, default=parse_anchors(DEFAULT_ANCHORS),
                        help="where the hidden states are read: 'last' (default, the intent's position), "
                             "plus 'question_end' and/or 'lines=N' (the ends of the question's last N lines)")
    parser.add_argument("--max-iterations", type=int, default=5000,
                        help="L-BFGS iterations at most (the fit runs to convergence: ~300-500 here)")
    parser.add_argument("--features", type=Path, default=Path("build/intent_adapter/features.npz"),
                        help="recorded features are cached here (reused when episodes/seed/head/question match)")
    parser.add_argument("--out", type=Path, default=DEFAULT_ADAPTER)
    parser.add_argument("--skip-heldout", action="store_true", help="do not score decision_eval's situations")
    parser.add_argument("--live-runs", type=Path, nargs="+", default=[],
                        help="folders of recorded scenario runs (<scenario>/latest, as `python -m "
                             "csr_llm_bringup.lab.training_scenarios` writes them): their decisions are probes too "
                             "(several folders aggregate the runs of several rounds, as in DAgger)")
    parser.add_argument("--live-probes", type=Path, nargs="*", default=None,
                        help="probe files of recorded rounds (live_probe_files.py; default: the rounds committed "
                             "in the package, `--live-probes` alone: none)")
    parser.add_argument("--live-weight", type=float, default=1.0,
                        help="weight of a live probe relative to a generated one in the fit")
    parser.add_argument("--hold-weight", type=float, default=HOLD_WEIGHT,
                        help="weight of a probe where only pausing intents (stop, hold_position, back_off) are "
                             "acceptable: acting there is the unsafe mistake (default %(default)s)")
    parser.add_argument("--live-features", type=Path, default=Path("build/intent_adapter/live_features.npz"))
    parser.add_argument("--compare-adapter", type=Path, default=None,
                        help="also score this adapter file on the held-out live probes (default: the bundled one)")
    return parser.parse_args(argv)


@dataclass
class Probes:
    """Every probe's features and labels; held: validation probes (every fifth episode), live: from recorded runs."""
    hidden: np.ndarray
    base: np.ndarray
    accept: np.ndarray
    held: np.ndarray
    live: np.ndarray
    intents: Sequence[str]


def gather_probes(args: argparse.Namespace, engine, catalogue: IntentCatalogue, template, recorded: dict,
                  key: dict, parallel: dict) -> Probes:
    """The generated episodes' probes (recorded, or from the cache under ``key``) and the live ones
    (--live-runs, --live-probes); adds the live probes' provenance to ``key``."""
    data = _cached(args.features, key)
    if data is None:
        print(f"recording {args.episodes} generated episodes ...", file=sys.stderr, flush=True)
        data = record(engine, catalogue, template, generate(args.episodes, args.seed), anchors=args.anchors,
                      **parallel)
        _save(args.features, data, key)
    hidden, base, accept, episode = data["hidden"], data["base"], data["accept"], data["episode"]
    held = episode % 5 == 0
    live = np.zeros(len(hidden), dtype=bool)
    runs = [run for folder in args.live_runs for run in sorted(folder.glob("*/latest"))]
    probe_files = committed_rounds() if args.live_probes is None else args.live_probes
    if runs or probe_files:
        live_data = live_features(engine, catalogue, template, runs, args.live_features, recorded, args.anchors,
                                  probe_files=probe_files, **parallel)
        hidden, base, accept = (np.concatenate([data[k], live_data[k]]) for k in ("hidden", "base", "accept"))
        held = np.concatenate([held, live_data["episode"] % 5 == 0])
        live = np.concatenate([live, np.ones(len(live_data["hidden"]), dtype=bool)])
        key["live_runs"] = int(len(np.unique(live_data["episode"])))
        key["live_weight"] = args.live_weight
        provenance = [json.loads((folder / "decided_with.json").read_text()) for folder in args.live_runs
                      if (folder / "decided_with.json").exists()]
        provenance += [read_probe_file(f)["decided_with"] for f in probe_files]
        if provenance:
            key["live_decided_with"] = provenance[0] if len(provenance) == 1 else provenance
        if probe_files:
            key["live_probe_files"] = {f.name: sha256_file(f)[:16] for f in probe_files}
    return Probes(hidden, base, accept, held, live, data["intents"])


def validation_scores(probes: Probes, weights, catalogue: IntentCatalogue, compare_adapter: Path) -> dict:
    """Accuracies of the fit on the held-out generated probes (and live ones), against the base model and chance."""
    hidden, base, accept, held, live = probes.hidden, probes.base, probes.accept, probes.held, probes.live
    generated = held & ~live
    scores = {"train_examples": int(len(hidden)), "live_examples": int(live.sum()),
              "val_examples": int(generated.sum()),
              "val_accuracy": round(accuracy(hidden[generated], base[generated], accept[generated], weights), 3),
              "val_base_accuracy": round(accuracy(hidden[generated], base[generated], accept[generated]), 3),
              "val_chance": round(float(accept[generated].mean()), 3),
              "train_accuracy": round(accuracy(hidden[~held], base[~held], accept[~held], weights), 3)}
    scores.update(pause_errors(hidden[generated], base[generated], accept[generated], weights, probes.intents,
                               catalogue, prefix="val_"))
    if live.any():
        scores.update(_live_scores(hidden[held & live], base[held & live], accept[held & live], weights,
                                   compare_adapter))
        scores.update(pause_errors(hidden[held & live], base[held & live], accept[held & live], weights,
                                   probes.intents, catalogue, prefix="live_val_"))
    return scores


def main(argv=None) -> int:
    from ..engine import LlamaEngine
    from ..prompt import PromptTemplate
    args = parse_arguments(argv)
    catalogue = IntentCatalogue.from_file(args.config_dir / "intents.yaml")
    template = PromptTemplate.from_mapping(yaml.safe_load((args.config_dir / "prompt.yaml").read_text()))
    swa_full = args.swa_full == "true"
    settings = dict(model_path=args.model_path, n_ctx=4096, n_threads=args.n_threads, name="adapter", swa_full=swa_full)
    engine = LlamaEngine(**settings)
    parallel = {"jobs": args.jobs, "engine_settings": settings}
    # what any probe's features depend on; the generated episodes' cache adds which episodes they are
    recorded = recording_key(engine, catalogue, template)
    if args.anchors.count > 1:          # the default's key (and cached features) stay as they were
        recorded["anchors"] = args.anchors.to_meta()
    key = {"episodes": args.episodes, "seed": args.seed, "generator": GENERATOR_VERSION, **recorded}
    started = time.perf_counter()
    probes = gather_probes(args, engine, catalogue, template, recorded, key, parallel)
    hidden, base, accept, held = probes.hidden, probes.base, probes.accept, probes.held
    weight = np.where(probes.live, args.live_weight, 1.0) * np.where(hold_only(accept, probes.intents, catalogue),
                                                                     args.hold_weight, 1.0)
    key["hold_weight"] = args.hold_weight
    fit_settings = {"l2": args.l2, "max_iterations": args.max_iterations}
    key["fit"] = "lbfgs"
    weights = fit(hidden[~held], base[~held], accept[~held], sample_weight=weight[~held], **fit_settings)
    scores = validation_scores(probes, weights, catalogue, args.compare_adapter or DEFAULT_ADAPTER)
    print(json.dumps(scores, sort_keys=True), file=sys.stderr, flush=True)
    final = fit(hidden, base, accept, sample_weight=weight, **fit_settings)
    adapter = IntentAdapter(list(probes.intents), *final, meta=dict(key, l2=args.l2, **scores),
                            anchors=args.anchors)
    adapter.save(args.out)
    if not args.skip_heldout:
        adapter.meta["decision_eval"] = score_heldout(engine, catalogue, template, args.out)
        adapter.save(args.out)
    engine.close()
    print(json.dumps(adapter.meta, indent=1, sort_keys=True))
    print(f"wrote {args.out} ({time.perf_counter() - started:.0f} s)")
    return 0


def hold_only(accept: np.ndarray, intents: Sequence[str], catalogue: IntentCatalogue) -> np.ndarray:
    """Per probe: every acceptable intent pauses the task (a window where acting is the unsafe mistake)."""
    pausing = np.array([catalogue.intents[name].pauses_task for name in intents])
    return ~(np.asarray(accept, dtype=bool) & ~pausing).any(axis=1)


def pause_errors(hidden, base, accept, weights, intents: Sequence[str], catalogue: IntentCatalogue,
                 prefix: str = "") -> dict:
    """The two ways a decision errs between pausing and acting, as [errors, probes]: `acted_hold`,
    a task chosen where only pausing intents are acceptable (the unsafe one), and `held_act`, a
    pause chosen where only tasks are acceptable (an order or a resume ignored)."""
    pausing = np.array([catalogue.intents[name].pauses_task for name in intents])
    accept = np.asarray(accept, dtype=bool)
    chose_pause = pausing[chosen_intents(hidden, base, weights)]
    hold = hold_only(accept, intents, catalogue)
    act = ~(accept & pausing).any(axis=1)
    return {f"{prefix}acted_hold": [int((hold & ~chose_pause).sum()), int(hold.sum())],
            f"{prefix}held_act": [int((act & chose_pause).sum()), int(act.sum())]}


def recording_key(engine, catalogue: IntentCatalogue, template) -> dict:
    """What recorded features depend on: how probes are recorded, the model, the head, the question,
    and (only when window-only, so full-size keys stay as they were) the sliding-window cache: its
    kernels give other hidden states."""
    from ..model import model_checksum
    key = {"recording": RECORDING_VERSION, "model_sha256": model_checksum(engine.model_path),
           "head_sha256": head_digest(engine.tokenize(template.head_text(catalogue), bos=True)),
           "suffix": template.suffix_settings()}
    if engine.n_swa:
        key["swa_full"] = False
    return key


def live_features(engine, catalogue, template, runs: Sequence[Path], path: Path, key: dict, anchors,
                  probe_files: Sequence[Path] = (), **parallel) -> dict:
    """Features of every run's probes, in order (run folders, then the runs of each probe file; a
    run's probes share its episode index). Runs already in the cache under the same key are reused,
    so a new DAgger round records its own runs only; a run whose decisions changed is recorded
    again. The cache keeps every run it has seen, so a fit on fewer rounds records nothing."""
    from .live_episodes import run_streams
    from .live_probe_files import streams as file_streams
    sources: List[Tuple[str, Any]] = [
        (f"{r.parent.parent.name}/{r.parent.name}@{sha256_file(r / 'decisions.json')[:16]}",
         lambda run=r: [stream for _, stream in run_streams([run])]) for r in runs]
    for probe_file in probe_files:
        sources += [(run_id, lambda stream=stream: [stream]) for run_id, stream in file_streams(probe_file)]
    ids = [run_id for run_id, _ in sources]
    cached = _cached(path, key, fields=("run",))
    known = set(cached["run"].tolist()) if cached else set()
    todo = [(run_id, stream) for run_id, load in sources if run_id not in known for stream in load()]
    parts = [cached] if cached else []
    if todo:
        print(f"recording {len(todo)} live runs ({len(sources) - len(todo)} cached) ...", file=sys.stderr, flush=True)
        new = record(engine, catalogue, template, todo, anchors=anchors, **parallel)
        new["run"] = np.array([todo[i][0] for i in new["episode"]])
        parts.append(new)
    if not parts:
        raise SystemExit(f"no scored decisions in the live runs ({len(sources)} runs)")
    columns = ("hidden", "base", "accept", "run")
    merged: Dict[str, Any] = {k: np.concatenate([part[k] for part in parts]) for k in columns}
    merged["intents"] = list(parts[0]["intents"])
    order = {run_id: index for index, run_id in enumerate(ids)}
    position = np.array([order.get(run_id, -1) for run_id in merged["run"].tolist()])
    if todo:
        _save(path, dict(merged, episode=position), key)
    rows = np.flatnonzero(position >= 0)
    rows = rows[np.argsort(position[rows], kind="stable")]
    data = {k: merged[k][rows] for k in columns}
    data["episode"], data["intents"] = position[rows], merged["intents"]
    return data


def _live_scores(hidden, base, accept, weights, other: Path) -> dict:
    """Held-out live probes: this fit, the bare model, chance and another adapter file (what the
    runs decided with, by default), all on the same probes."""
    scores = {"live_val_examples": int(len(hidden)),
              "live_val_accuracy": round(accuracy(hidden, base, accept, weights), 3),
              "live_val_base_accuracy": round(accuracy(hidden, base, accept), 3),
              "live_val_chance": round(float(accept.mean()), 3)}
    try:
        _, previous = read_weights(other)
        if previous[0].shape[1] == hidden.shape[1]:
            scores["live_val_compared_accuracy"] = round(accuracy(hidden, base, accept, previous), 3)
    except (OSError, KeyError, ValueError) as err:
        print(f"cannot score {other} on the live probes: {err}", file=sys.stderr)
    return scores


def _save(path: Path, data: dict, key: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {k: np.asarray(v) for k, v in data.items()}
    arrays["key"] = np.array(json.dumps(key, sort_keys=True))
    np.savez_compressed(path, **arrays)  # type: ignore[arg-type]  # numpy stubs: **kwds vs allow_pickle


def _cached(path: Path, key: dict, fields: Sequence[str] = ()):
    if not path.exists():
        return None
    with np.load(path, allow_pickle=False) as data:
        if "key" not in data or json.loads(str(data["key"])) != key or any(f not in data for f in fields):
            return None
        return {k: data[k] for k in ("hidden", "base", "accept", "episode", "intents", *fields)}


if __name__ == "__main__":
    raise SystemExit(main())
