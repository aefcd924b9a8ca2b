"""The two kinds of sliding-window cache decide the same generated probes (plain module, no rclpy).

Gemma 3's local layers can keep the whole context (`swa_full` true, the default) or only their
window (false). Both mask the same positions, but once the context is longer than the window their
kernels give other numbers. This records the same generated episodes (decision_training.py) on
one context of each kind, through the real Reasoner as the adapter build does, and prints how far
the hidden states and the intents' log-probabilities move and how often the bare model and an
intent adapter choose the same intent, with each kind's accuracy on the same probes:

    python -m csr_llm_core.lab.cache_kinds --episodes 30 --seed 11 [--adapter FILE] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, Optional

import numpy as np
import yaml

from csr_llm_common.catalogue import IntentCatalogue
from ..intent_adapter import DEFAULT_ADAPTER, Weights, chosen_intents, read_weights

def compare(full: dict, window: dict, adapter: Optional[Weights]) -> Dict[str, object]:
    """Figures for two recordings of the same probes (rows in the same order)."""
    a, b = (np.asarray(d["hidden"], dtype=np.float64) for d in (full, window))
    relative = np.linalg.norm(a - b, axis=1) / np.linalg.norm(a, axis=1)
    accept = np.asarray(full["accept"])
    rows = np.arange(len(accept))
    report: Dict[str, object] = {
        "probes": int(len(accept)),
        "hidden_relative_l2": {"median": round(float(np.median(relative)), 4), "max": round(float(relative.max()), 4)},
        "identical_hidden": int((relative == 0).sum()),
        "intent_logp_max_abs_diff": round(float(np.abs(np.subtract(full["base"], window["base"])).max()), 3),
        "chance": round(float(accept.mean()), 3)}
    deciders = {"bare": None, **({"adapted": adapter} if adapter is not None else {})}
    for name, weights in deciders.items():
        first, second = (chosen_intents(d["hidden"], d["base"], weights) for d in (full, window))
        right_full, right_window = accept[rows, first], accept[rows, second]
        report[name] = {"same_intent": round(float(np.mean(first == second)), 3),
                        "accuracy_full_size": round(float(right_full.mean()), 3),
                        "accuracy_window_only": round(float(right_window.mean()), 3),
                        # the discordant pairs behind a paired (McNemar) comparison of the two kinds
                        "right_only_full_size": int((right_full & ~right_window).sum()),
                        "right_only_window_only": int((right_window & ~right_full).sum())}
    return report


def main(argv=None) -> int:
    from .decision_training import generate
    from ..engine import LlamaEngine
    from .intent_adapter_build import record
    from ..prompt import PromptTemplate
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=30)
    parser.add_argument("--seed", type=int, default=11, help="generator seed (the adapter build uses 7)")
    parser.add_argument("--config-dir", type=Path, default=Path("config"))
    parser.add_argument("--model-path", default=None)
    parser.add_argument("--adapter", type=Path, default=DEFAULT_ADAPTER, help="'none' for the bare model only")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures here (JSON)")
    args = parser.parse_args(argv)
    catalogue = IntentCatalogue.from_file(args.config_dir / "intents.yaml")
    template = PromptTemplate.from_mapping(yaml.safe_load((args.config_dir / "prompt.yaml").read_text()))
    streams = generate(args.episodes, args.seed)
    recorded = {}
    for swa_full in (True, False):
        engine = LlamaEngine(args.model_path, n_ctx=4096, n_threads=1, name="kinds", swa_full=swa_full)
        print(f"recording {args.episodes} episodes on a {'full-size' if swa_full else 'window-only'} cache ...",
              file=sys.stderr, flush=True)
        recorded[swa_full] = record(engine, catalogue, template, streams, progress=False)
        engine.close()
    adapter = None if str(args.adapter) == "none" else read_weights(args.adapter)[1]
    report = compare(recorded[True], recorded[False], adapter)
    report.update(episodes=args.episodes, seed=args.seed, adapter=str(args.adapter))
    text = json.dumps(report, indent=1, sort_keys=True)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
