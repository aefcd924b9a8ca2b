"""Benchmark: decision latency over >= 5 eviction cycles, ASR versus synchronous eviction.

One deterministic chunk stream (sensor summaries and events at `--chunk-hz`) is played twice in
one run, in real time: once through the ASR reasoner (two contexts, background rebuild, swap) and
once through the single-context baseline that re-evaluates the shortened prefix when it evicts.
Decisions are due at `--decision-hz`; a decision's latency is measured from the moment it was
due to its first token, so time spent appending chunks or recomputing the prefix before it (the
stall ASR removes) counts. Prints a table, writes JSON and a plot of latency over time with
eviction and swap marks.
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np

from .catalogue import IntentCatalogue
from .csr_state import KIND_CONTINUOUS, KIND_EVENT
from .engine import LlamaEngine
from .prompt import PromptTemplate
from .reasoner import Reasoner, ReasonerConfig
from .synthetic import chunk_text


def play(reasoner: Reasoner, n_chunks: int, chunk_hz: float, decision_hz: float) -> dict:
    """Real-time stream: returns per-decision latency samples and event marks."""
    start = time.monotonic()
    next_chunk, next_decision, seq = 0.0, 0.5 / decision_hz, 0
    samples, evictions, swaps = [], [], []
    last = reasoner.status()
    while seq < n_chunks:
        now = time.monotonic() - start
        if now >= next_chunk:
            kind = KIND_EVENT if seq % 6 == 5 else KIND_CONTINUOUS
            reasoner.add_chunk(seq, chunk_text(seq), source="/bench", kind=kind, stamp=now)
            seq += 1
            next_chunk += 1.0 / chunk_hz
            reasoner.pump()
        elif now >= next_decision:
            due = next_decision
            began = time.monotonic() - start
            decision = reasoner.decide(running="open_door")
            latency_ms = (began - due) * 1e3 + decision.catchup_ms + decision.result.ttft_ms
            samples.append({"t": round(due, 3), "latency_ms": round(latency_ms, 1),
                            "ttft_ms": round(decision.result.ttft_ms, 1), "resource": decision.resource,
                            "state_version": decision.state_version, "prefix_tokens": decision.prefix_tokens})
            next_decision += 1.0 / decision_hz
            while next_decision < time.monotonic() - start:   # missed slots are skipped, not queued
                next_decision += 1.0 / decision_hz
        else:
            time.sleep(min(next_chunk, next_decision) - now)
        status = reasoner.status()
        t = round(time.monotonic() - start, 3)
        if status["evictions"] > last["evictions"]:
            evictions.append(t)
        if status["swaps"] > last["swaps"]:
            swaps.append(t)
        last = status
    elapsed = time.monotonic() - start
    latencies = np.array([s["latency_ms"] for s in samples])
    ttfts = np.array([s["ttft_ms"] for s in samples])
    return {"samples": samples, "eviction_marks": evictions, "swap_marks": swaps, "elapsed_s": elapsed,
            "p50_ms": round(float(np.percentile(latencies, 50)), 1),
            "p99_ms": round(float(np.percentile(latencies, 99)), 1),
            "max_ms": round(float(latencies.max()), 1), "decisions": len(samples),
            "ttft_p50_ms": round(float(np.percentile(ttfts, 50)), 1),
            "ttft_p99_ms": round(float(np.percentile(ttfts, 99)), 1),
            "decisions_per_s": round(len(samples) / elapsed, 2), "evictions": last["evictions"],
            "swaps": last["swaps"]}


def plot(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(10, 4.5))
    colors = {"asr": "tab:blue", "sync": "tab:red"}
    for mode, result in results.items():
        t = [s["t"] for s in result["samples"]]
        ax.plot(t, [s["latency_ms"] for s in result["samples"]], ".-", color=colors[mode], lw=0.8, ms=3,
                label=f"{mode}: p50 {result['p50_ms']:.0f} ms, max {result['max_ms']:.0f} ms")
        for i, mark in enumerate(result["eviction_marks"]):
            ax.axvline(mark, color=colors[mode], ls=":", lw=0.8, label=f"{mode} eviction" if i == 0 else None)
        for i, mark in enumerate(result.get("swap_marks", []) if mode == "asr" else []):
            ax.axvline(mark, color="tab:green", ls="--", lw=0.8, label="asr swap" if i == 0 else None)
    ax.set_yscale("log")
    ax.set_xlabel("stream time [s]")
    ax.set_ylabel("decision latency, due -> first token [ms]")
    ax.set_title("CSR decision latency over eviction cycles: ASR vs synchronous eviction")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=75)
    parser.add_argument("--chunk-hz", type=float, default=1.5)
    parser.add_argument("--decision-hz", type=float, default=3.0)
    parser.add_argument("--tau-mem", type=int, default=1536)
    parser.add_argument("--evict-ratio", type=float, default=0.5)
    parser.add_argument("--n-catchup", type=int, default=64)
    parser.add_argument("--rebuild-batch", type=int, default=32)
    parser.add_argument("--model-path", default=None)
    parser.add_argument("--config-dir", type=Path, default=Path("config"),
                        help="folder with intents.yaml and prompt.yaml (default: ./config, the workspace root's)")
    parser.add_argument("--out", type=Path, default=Path("build/bench/asr.json"))
    parser.add_argument("--plot", type=Path, default=Path("build/bench/asr.png"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    catalogue = IntentCatalogue.from_file(args.config_dir / "intents.yaml")
    template = PromptTemplate.from_file(args.config_dir / "prompt.yaml")
    n_ctx = 2 * args.tau_mem
    engines = [LlamaEngine(args.model_path, n_ctx=n_ctx, n_threads=1, name=name) for name in ("R1", "R2")]
    results = {}
    for mode in ("asr", "sync"):
        config = ReasonerConfig(tau_mem=args.tau_mem, evict_ratio=args.evict_ratio, n_catchup=args.n_catchup,
                                mode=mode, rebuild_batch=args.rebuild_batch)
        for engine in engines:
            engine.clear()
        reasoner = Reasoner(engines if mode == "asr" else engines[:1], catalogue, template, config)
        reasoner.pump()
        print(f"[bench-asr] {mode}: {args.chunks} chunks at {args.chunk_hz} Hz, decisions due at "
              f"{args.decision_hz} Hz, tau_mem={args.tau_mem}", flush=True)
        results[mode] = play(reasoner, args.chunks, args.chunk_hz, args.decision_hz)
        reasoner.close()
    for engine in engines:
        engine.close()
    asr, sync = results["asr"], results["sync"]
    keys = ("p50_ms", "p99_ms", "max_ms", "decisions_per_s", "ttft_p50_ms", "ttft_p99_ms")
    summary = {"asr": {k: asr[k] for k in keys + ("swaps",)},
               "sync": {k: sync[k] for k in keys},
               "evictions": asr["evictions"], "sync_evictions": sync["evictions"],
               "goals": {"asr_p99_le_2x_p50": asr["p99_ms"] <= 2 * asr["p50_ms"],
                         "sync_max_ge_5x_asr_max": sync["max_ms"] >= 5 * asr["max_ms"],
                         "asr_ge_2_decisions_per_s": asr["decisions_per_s"] >= 2.0},
               "config": vars(args) | {"out": str(args.out), "plot": str(args.plot)},
               "samples": {mode: results[mode]["samples"] for mode in results},
               "marks": {mode: {"evictions": results[mode]["eviction_marks"], "swaps": results[mode]["swap_marks"]}
                         for mode in results}}
    print("latency = from the moment a decision is due to its first token; ttft = inside decide() only")
    print(f"{'mode':>5} {'p50_ms':>8} {'p99_ms':>8} {'max_ms':>8} {'dec/s':>6} {'evictions':>9} {'swaps':>5} "
          f"{'ttft_p50':>9} {'ttft_p99':>9}")
    for mode in ("asr", "sync"):
        r = results[mode]
        print(f"{mode:>5} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} {r['max_ms']:>8.1f} {r['decisions_per_s']:>6.2f} "
              f"{r['evictions']:>9} {r['swaps']:>5} {r['ttft_p50_ms']:>9.1f} {r['ttft_p99_ms']:>9.1f}")
    print(f"sync max / asr max = {sync['max_ms'] / asr['max_ms']:.1f}x; asr p99 / p50 = "
          f"{asr['p99_ms'] / asr['p50_ms']:.2f}; goals: {summary['goals']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    plot(results, args.plot)
    print(f"wrote {args.out} and {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
