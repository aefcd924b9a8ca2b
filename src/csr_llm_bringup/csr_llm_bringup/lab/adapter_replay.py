"""Intent adapters compared on the same recorded states (plain module, no rclpy).

Two bench runs of two adapters compare different situations: one early decision that differs
changes every state after it, and a scenario's accuracy flips with it. This replays recorded runs
instead (bench_decisions' run folders, or training runs): every scored decision becomes a probe on
exactly the chunks its prefix held (live_episodes.py), the model's hidden state there is recorded
once (cached per run, as the adapter build caches it), and every adapter decides every probe. It
prints the accuracy per scenario and pooled, with the paired scenario-bootstrap interval of each
adapter's change against the first, and writes them as JSON.

    python -m csr_llm_bringup.lab.adapter_replay --runs build/bench/decisions_runs \
        --adapter shipped=default --adapter new=build/intent_adapter/new.npz
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import yaml

from csr_llm_common.catalogue import IntentCatalogue
from csr_llm_core.intent_adapter import DEFAULT_ADAPTER, Anchors, cache_kind, chosen_intents, read_weights
from csr_llm_core.lab.intent_adapter_build import live_features, recording_key
from csr_llm_core.prompt import PromptTemplate

from .bench_decisions import scenario_bootstrap_ci

Counts = Dict[str, Tuple[int, int]]


def load_weights(path: Path, key: dict) -> Tuple[np.ndarray, ...]:
    """(weights, bias, mean, scale) of an adapter file fitted to the key's model, head and question."""
    meta, weights = read_weights(path)
    for field, what in (("model_sha256", "model"), ("head_sha256", "prompt head"), ("suffix", "question")):
        if field in meta and meta[field] != key[field]:
            raise SystemExit(f"{path}: fitted to another {what} than the config and model here")
    if cache_kind(meta) != cache_kind(key):
        print(f"{path}: fitted on {cache_kind(meta)} contexts, replayed on {cache_kind(key)} ones")
    if Anchors.from_meta(meta.get("anchors")).count > 1:
        raise SystemExit(f"{path}: reads several anchors; replay records the intent position only")
    return weights


def scenario_counts(data: dict, weights=None) -> Counts:
    """(matched, scored) per scenario (`data["scenario"]`, one name per probe) for an adapter, or the
    bare model."""
    chosen = chosen_intents(data["hidden"], data["base"], weights)
    hit = data["accept"][np.arange(len(chosen)), chosen]
    scenario = np.asarray(data["scenario"])
    return {name: (int(hit[scenario == name].sum()), int((scenario == name).sum())) for name in sorted(set(scenario))}


def summarize(counts: Dict[str, Counts]) -> dict:
    """Pooled accuracy per adapter, and its paired interval against the first adapter's."""
    labels = list(counts)
    names = list(counts[labels[0]])
    out = {"scenarios": {n: {label: round(counts[label][n][0] / counts[label][n][1], 4) for label in labels}
                         for n in names},
           "overall": {}}
    for label in labels:
        pairs = [counts[label][n] for n in names]
        entry: Dict[str, Any] = {"accuracy": round(sum(m for m, _ in pairs) / sum(s for _, s in pairs), 4),
                 "scenario_mean": round(float(np.mean([m / s for m, s in pairs])), 4),
                 "probes": sum(s for _, s in pairs)}
        if label != labels[0]:
            base = [counts[labels[0]][n] for n in names]
            entry["change"] = round(entry["accuracy"] - out["overall"][labels[0]]["accuracy"], 4)
            entry["change_ci95"] = scenario_bootstrap_ci(pairs, base)
        out["overall"][label] = entry
    return out


def table(summary: dict) -> str:
    labels = list(summary["overall"])
    rows = [f"{'scenario':<22} " + " ".join(f"{label:>9}" for label in labels)]
    for name, row in summary["scenarios"].items():
        rows.append(f"{name:<22} " + " ".join(f"{row[label]:>9.2f}" for label in labels))
    rows.append(f"{'POOLED':<22} " + " ".join(f"{summary['overall'][label]['accuracy']:>9.3f}" for label in labels))
    for label, entry in summary["overall"].items():
        if "change" in entry:
            rows.append(f"{label} - {labels[0]}: {entry['change']:+.3f}, paired scenario bootstrap 95 % "
                        f"{entry['change_ci95']} ({entry['probes']} probes)")
    return "\n".join(rows)


def run_folders(folders: Sequence[Path]) -> List[Path]:
    """Recorded runs: a folder holding decisions.json is one, otherwise its <scenario>/latest."""
    return [run for folder in folders
            for run in ([folder] if (folder / "decisions.json").exists() else sorted(folder.glob("*/latest")))]


def main(argv: Optional[Sequence[str]] = None) -> int:
    from csr_llm_core.engine import LlamaEngine
    from csr_llm_core.reasoning_config import add_swa_full_argument
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, nargs="+", required=True,
                        help="recorded runs: run folders (decisions.json and bag) or folders of "
                             "<scenario>/latest, as bench_decisions writes them")
    parser.add_argument("--adapter", action="append", required=True, metavar="NAME=PATH",
                        help="an adapter file to score ('default': the bundled one); the first is the base")
    parser.add_argument("--features", type=Path, default=None,
                        help="hidden states are cached here (default build/bench/adapter_replay_features.npz, "
                             "_window.npz for window-only contexts)")
    add_swa_full_argument(parser)
    parser.add_argument("--config-dir", type=Path, default=Path("config"))
    parser.add_argument("--model-path", default=None)
    parser.add_argument("--n-threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("build/bench/adapter_replay.json"))
    args = parser.parse_args(argv)
    adapters: List[Tuple[str, Path]] = []
    for item in args.adapter:
        label, _, path = item.partition("=")
        if not path:
            parser.error(f"--adapter {item}: expected NAME=PATH")
        adapters.append((label, DEFAULT_ADAPTER if path == "default" else Path(path)))
    runs = run_folders(args.runs)
    if not runs:
        parser.error(f"no recorded run in {', '.join(map(str, args.runs))}")
    catalogue = IntentCatalogue.from_file(args.config_dir / "intents.yaml")
    template = PromptTemplate.from_mapping(yaml.safe_load((args.config_dir / "prompt.yaml").read_text()))
    swa_full = args.swa_full == "true"
    features = args.features or Path("build/bench/adapter_replay_features" + ("" if swa_full else "_window") + ".npz")
    engine = LlamaEngine(args.model_path, n_ctx=4096, n_threads=args.n_threads, name="replay", swa_full=swa_full)
    try:
        key = recording_key(engine, catalogue, template)
        weights = {label: load_weights(path, key) for label, path in adapters}
        data = live_features(engine, catalogue, template, runs, features, key, None)
    finally:
        engine.close()
    names = [json.loads((run / "decisions.json").read_text())["scenario"] for run in runs]
    data["scenario"] = [names[episode] for episode in data["episode"]]
    counts = {label: scenario_counts(data, w) for label, w in weights.items()}
    counts["bare"] = scenario_counts(data)
    summary = summarize(counts)
    summary["runs"] = [str(folder) for folder in args.runs]
    summary["adapters"] = {label: str(path) for label, path in adapters}
    print(table(summary))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
