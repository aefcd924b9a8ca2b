"""Benchmark: decision latency over >= 10 eviction cycles, ASR versus synchronous eviction.

One deterministic chunk stream (sensor summaries and events at `--chunk-hz`) is played twice in
one run, in real time: once through the ASR reasoner (two contexts, background rebuild, swap) until
`--cycles` evictions have each been swapped in, then the same chunks through the single-context
baseline that re-evaluates the shortened prefix when it evicts. Decisions are due at
`--decision-hz`; a decision's latency is measured from the moment it was due to its first token,
so time spent waiting for an append or recomputing the prefix before it (the stall ASR removes)
counts. Chunks are appended between decisions by `pump`, in `--rebuild-batch` pieces, stopped
before a piece would run into the next due time (`Reasoner.append_batch_s`); the decision runs on
the whole chunks already cached (at most `max_uncached_tokens` behind). Prints a table,
writes JSON (per decision, per eviction cycle) and a plot of due->first token and TTFT alone over
time with eviction and swap marks.
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

from csr_llm_common.catalogue import IntentCatalogue
from ..csr_state import KIND_CONTINUOUS, KIND_EVENT
from ..engine import LlamaEngine
from ..prompt import PromptTemplate
from ..reasoner import Reasoner, ReasonerConfig
from ..reasoning_config import add_swa_full_argument
from .synthetic import chunk_text


def play(reasoner: Reasoner, chunk_hz: float, decision_hz: float, n_chunks: int, swaps_wanted: int = 0) -> dict:
    """Real-time stream of `n_chunks` (or, with swaps_wanted, until that many swaps): per-decision
    latency samples and event marks. Decisions first, then due chunks, then appends (pre-emptible)."""
    start = time.monotonic()
    next_chunk, next_decision, seq = 0.0, 0.5 / decision_hz, 0
    samples: List[Dict[str, Any]] = []
    evictions: List[float] = []
    swaps: List[float] = []
    last = reasoner.status()

    def decision_due() -> bool:      # before the next batch would run into the due time (see pump_should_stop)
        return reasoner.pump_should_stop(next_decision - (time.monotonic() - start))

    while seq < n_chunks and not (swaps_wanted and last["swaps"] >= swaps_wanted):
        now = time.monotonic() - start
        if now >= next_decision:
            due = next_decision
            began = time.monotonic() - start
            decision = reasoner.decide(running="open_door")
            result = decision.result
            latency_ms = (began - due) * 1e3 + decision.catchup_ms + result.ttft_ms
            samples.append({"t": round(due, 3), "latency_ms": round(latency_ms, 1), "ttft_ms": round(result.ttft_ms, 1),
                            "total_ms": round(result.total_ms, 1), "wait_ms": round((began - due) * 1e3, 1),
                            "catchup_ms": round(decision.catchup_ms, 1), "resource": decision.resource,
                            "state_version": decision.state_version, "prefix_tokens": decision.prefix_tokens,
                            "last_chunk_seq": decision.last_chunk_seq, "chunks_added": seq,
                            "uncached_tokens": reasoner.uncached_tokens})
            next_decision += 1.0 / decision_hz
            while next_decision < time.monotonic() - start:   # missed slots are skipped, not queued
                next_decision += 1.0 / decision_hz
        elif now >= next_chunk:
            kind = KIND_EVENT if seq % 6 == 5 else KIND_CONTINUOUS
            reasoner.add_chunk(seq, chunk_text(seq), source="/bench", kind=kind, stamp=now)
            seq += 1
            next_chunk += 1.0 / chunk_hz
        elif (reasoner.uncached_tokens or reasoner.status()["reconciling"]) and not decision_due():
            reasoner.pump(preempt=decision_due)     # also swaps in a ready secondary
            if not reasoner.uncached_tokens:
                time.sleep(max(0.0, min(0.005, min(next_chunk, next_decision) - now)))
        else:
            time.sleep(max(0.0, min(next_chunk, next_decision) - now))
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
    behind = np.array([s["chunks_added"] - 1 - s["last_chunk_seq"] for s in samples])   # staleness in chunks
    return {"samples": samples, "eviction_marks": evictions, "swap_marks": swaps, "elapsed_s": elapsed,
            "chunks": seq, "p50_ms": round(float(np.percentile(latencies, 50)), 1),
            "p99_ms": round(float(np.percentile(latencies, 99)), 1),
            "max_ms": round(float(latencies.max()), 1), "decisions": len(samples),
            "ttft_p50_ms": round(float(np.percentile(ttfts, 50)), 1),
            "ttft_p99_ms": round(float(np.percentile(ttfts, 99)), 1), "ttft_max_ms": round(float(ttfts.max()), 1),
            "decisions_per_s": round(len(samples) / elapsed, 2), "evictions": last["evictions"],
            "chunks_behind_p50": float(np.percentile(behind, 50)), "chunks_behind_max": int(behind.max()),
            "swaps": last["swaps"], "overflow_stalls": last["overflow_stalls"],
            "preempted_pumps": last["preempted_pumps"], "cycles": cycles(samples, evictions, swaps, elapsed)}


def cycles(samples: list, evictions: list, swaps: list, elapsed: float) -> list:
    """Per eviction: when it was swapped in (None: never), how long the rebuild took, and the
    latency of the decisions due until the next eviction."""
    rows = []
    for i, evicted in enumerate(evictions):
        until = evictions[i + 1] if i + 1 < len(evictions) else float("inf")
        swapped = next((s for s in swaps if evicted < s <= until), None)   # a swap may evict at once
        latencies = [s["latency_ms"] for s in samples if evicted <= s["t"] < until]
        rows.append({"evicted_at": evicted, "swapped_at": swapped,
                     "rebuild_s": None if swapped is None else round(swapped - evicted, 2),
                     "decisions": len(latencies),
                     "p50_ms": round(float(np.percentile(latencies, 50)), 1) if latencies else None,
                     "max_ms": max(latencies) if latencies else None})
    return rows


def rebuild_windows(samples: list, cycle_rows: list) -> dict:
    """Decisions due inside a rebuild window (a `cycles` row's eviction -> its swap, or the end of
    the run when none came) against the others: where the tail sits, and what it is made of
    (waiting for an append batch, catching up before deciding)."""
    spans = [(c["evicted_at"], float("inf") if c["swapped_at"] is None else c["swapped_at"]) for c in cycle_rows]

    def inside(t: float) -> bool:
        return any(evicted <= t < swapped for evicted, swapped in spans)

    def stats(rows: list) -> dict:
        if not rows:
            return {"decisions": 0}
        column = {k: np.array([r[k] for r in rows]) for k in ("latency_ms", "ttft_ms", "wait_ms", "catchup_ms")}
        return {"decisions": len(rows), "share": round(len(rows) / len(samples), 3),
                "p50_ms": round(float(np.percentile(column["latency_ms"], 50)), 1),
                "p99_ms": round(float(np.percentile(column["latency_ms"], 99)), 1),
                "ttft_p50_ms": round(float(np.percentile(column["ttft_ms"], 50)), 1),
                "wait_p50_ms": round(float(np.percentile(column["wait_ms"], 50)), 1),
                "wait_p90_ms": round(float(np.percentile(column["wait_ms"], 90)), 1),
                "catchups_over_50_ms": int((column["catchup_ms"] > 50).sum())}
    return {"inside": stats([r for r in samples if inside(r["t"])]),
            "outside": stats([r for r in samples if not inside(r["t"])])}


def plot(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(11, 5))
    colors = {"asr": "tab:blue", "sync": "tab:red"}
    for mode, result in results.items():
        t = [s["t"] for s in result["samples"]]
        ax.plot(t, [s["latency_ms"] for s in result["samples"]], ".-", color=colors[mode], lw=0.8, ms=3,
                label=f"{mode}: due -> first token, p50 {result['p50_ms']:.0f} ms, max {result['max_ms']:.0f} ms")
        ax.plot(t, [s["ttft_ms"] for s in result["samples"]], "x", color=colors[mode], ms=3, alpha=0.5,
                label=f"{mode}: TTFT alone, p50 {result['ttft_p50_ms']:.0f} ms, max {result['ttft_max_ms']:.0f} ms")
        for i, mark in enumerate(result["eviction_marks"]):
            ax.axvline(mark, color=colors[mode], ls=":", lw=0.8, label=f"{mode} eviction" if i == 0 else None)
        for i, mark in enumerate(result.get("swap_marks", []) if mode == "asr" else []):
            ax.axvline(mark, color="tab:green", ls="--", lw=0.8, label="asr swap" if i == 0 else None)
    ax.set_yscale("log")
    ax.set_xlabel("stream time [s]")
    ax.set_ylabel("decision latency [ms]")
    ax.set_title("CSR decision latency over eviction cycles: ASR vs synchronous eviction")
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=10, help="ASR plays until this many evictions were swapped in")
    parser.add_argument("--max-chunks", type=int, default=200, help="ASR stops here even short of --cycles")
    parser.add_argument("--chunk-hz", type=float, default=0.5)
    parser.add_argument("--decision-hz", type=float, default=2.0)
    parser.add_argument("--tau-mem", type=int, default=2560)
    parser.add_argument("--evict-ratio", type=float, default=0.5)
    parser.add_argument("--n-catchup", type=int, default=64)
    parser.add_argument("--rebuild-batch", type=int, default=32)
    parser.add_argument("--append-threads", type=int, default=ReasonerConfig.append_threads,
                        help="threads for the primary's appends while the secondary is idle (ReasonerConfig)")
    parser.add_argument("--rebuild-pause", type=int, choices=(0, 1), default=0,
                        help="0 (config/reasoning.yaml): the rebuild runs beside the primary's decisions on the "
                             "other core; 1 (ReasonerConfig's default): it pauses while one runs")
    parser.add_argument("--model-path", default=None)
    add_swa_full_argument(parser)
    parser.add_argument("--config-dir", type=Path, default=Path("config"),
                        help="folder with intents.yaml and prompt.yaml (default: ./config, the workspace root's)")
    parser.add_argument("--out", type=Path, default=Path("build/bench/asr.json"))
    parser.add_argument("--plot", type=Path, default=Path("build/bench/asr.png"))
    return parser.parse_args(argv)


def play_both_modes(args: argparse.Namespace) -> dict:
    """{mode: play's result}: ASR until --cycles swaps, then sync on as many chunks, on the same contexts."""
    catalogue = IntentCatalogue.from_file(args.config_dir / "intents.yaml")
    template = PromptTemplate.from_file(args.config_dir / "prompt.yaml")
    n_ctx = 2 * args.tau_mem
    engines = [LlamaEngine(args.model_path, n_ctx=n_ctx, n_threads=1, name=name, swa_full=args.swa_full == "true")
               for name in ("R1", "R2")]
    results: dict = {}
    for mode in ("asr", "sync"):
        # the baseline: a decision first appends every pending token, the re-evaluation of the
        # shortened prefix after an eviction included
        config = ReasonerConfig(tau_mem=args.tau_mem, evict_ratio=args.evict_ratio, n_catchup=args.n_catchup,
                                mode=mode, rebuild_batch=args.rebuild_batch, decide_on_cached=mode == "asr",
                                append_threads=args.append_threads,
                                rebuild_pause=bool(args.rebuild_pause),
                                reuse_decisions=False)   # every due decision evaluates: its latency is measured
        for engine in engines:
            engine.clear()
        reasoner = Reasoner(engines if mode == "asr" else engines[:1], catalogue, template, config)
        reasoner.pump()
        warming = reasoner.warm_secondary()
        if warming is not None:      # the measured stream starts with the head on both contexts
            warming.join()
        n_chunks = results["asr"]["chunks"] if mode == "sync" else args.max_chunks
        print(f"[bench-asr] {mode}: chunks at {args.chunk_hz} Hz "
              + (f"until {args.cycles} swaps" if mode == "asr" else f"({n_chunks}, as many as asr)")
              + f", decisions due at {args.decision_hz} Hz, tau_mem={args.tau_mem}", flush=True)
        results[mode] = play(reasoner, args.chunk_hz, args.decision_hz, n_chunks,
                             args.cycles if mode == "asr" else 0)
        reasoner.close()
    for engine in engines:
        engine.close()
    return results


def summarize(args: argparse.Namespace, results: dict) -> dict:
    """The JSON record: both modes' figures, the goals, the config and the raw samples."""
    asr, sync = results["asr"], results["sync"]
    keys = ("p50_ms", "p99_ms", "max_ms", "decisions_per_s", "ttft_p50_ms", "ttft_p99_ms", "ttft_max_ms",
            "overflow_stalls", "preempted_pumps", "chunks", "chunks_behind_p50", "chunks_behind_max")
    swapped = [c for c in asr["cycles"] if c["swapped_at"] is not None]
    windows = rebuild_windows(asr["samples"], asr["cycles"])
    return {"asr": dict({k: asr[k] for k in keys + ("swaps",)}, rebuild_windows=windows),
            "sync": {k: sync[k] for k in keys},
            "evictions": asr["evictions"], "sync_evictions": sync["evictions"],
            "goals": {"asr_p99_le_2x_p50": asr["p99_ms"] <= 2 * asr["p50_ms"],
                      "asr_p99_le_1_5x_p50": asr["p99_ms"] <= 1.5 * asr["p50_ms"],
                      "asr_max_le_2x_p50": asr["max_ms"] <= 2 * asr["p50_ms"],
                      "sync_max_ge_5x_asr_max": sync["max_ms"] >= 5 * asr["max_ms"],
                      "asr_ge_2_decisions_per_s": asr["decisions_per_s"] >= 2.0,
                      "asr_ge_10_cycles_each_swapped": len(swapped) >= 10 and asr["overflow_stalls"] == 0},
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "cycles": {mode: results[mode]["cycles"] for mode in results},
            "samples": {mode: results[mode]["samples"] for mode in results},
            "marks": {mode: {"evictions": results[mode]["eviction_marks"], "swaps": results[mode]["swap_marks"]}
                      for mode in results}}


def print_report(results: dict, summary: dict) -> None:
    asr, sync = results["asr"], results["sync"]
    print("latency = from the moment a decision is due to its first token; ttft = inside decide() only")
    print(f"{'mode':>5} {'p50_ms':>8} {'p99_ms':>8} {'max_ms':>8} {'dec/s':>6} {'evictions':>9} {'swaps':>5} "
          f"{'ttft_p50':>9} {'ttft_p99':>9} {'ttft_max':>9} {'preempted':>9} {'overflow':>8}")
    for mode in ("asr", "sync"):
        r = results[mode]
        print(f"{mode:>5} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} {r['max_ms']:>8.1f} {r['decisions_per_s']:>6.2f} "
              f"{r['evictions']:>9} {r['swaps']:>5} {r['ttft_p50_ms']:>9.1f} {r['ttft_p99_ms']:>9.1f} "
              f"{r['ttft_max_ms']:>9.1f} {r['preempted_pumps']:>9} {r['overflow_stalls']:>8}")
    print("staleness: chunks added but not in a decision's cached prefix (their events are in its suffix): "
          + ", ".join(f"{m} p50 {results[m]['chunks_behind_p50']:.0f} max {results[m]['chunks_behind_max']}"
                      for m in results))
    for where, w in summary["asr"]["rebuild_windows"].items():
        if w["decisions"]:
            print(f"asr decisions {where} rebuild windows: {w['share']:.0%}, p50 / p99 {w['p50_ms']:.0f} / "
                  f"{w['p99_ms']:.0f} ms, ttft p50 {w['ttft_p50_ms']:.0f} ms, waiting for an append p50 / p90 "
                  f"{w['wait_p50_ms']:.0f} / {w['wait_p90_ms']:.0f} ms, catch-ups > 50 ms {w['catchups_over_50_ms']}")
    swapped = [c for c in asr["cycles"] if c["swapped_at"] is not None]
    rebuilds = [c["rebuild_s"] for c in swapped]
    print(f"asr cycles swapped: {len(swapped)} of {len(asr['cycles'])}; rebuild (eviction -> swap) "
          + (f"median {np.median(rebuilds):.1f} s, max {max(rebuilds):.1f} s" if rebuilds else "none"))
    print(f"sync max / asr max = {sync['max_ms'] / asr['max_ms']:.1f}x; asr p99 / p50 = "
          f"{asr['p99_ms'] / asr['p50_ms']:.2f}; asr max / p50 = {asr['max_ms'] / asr['p50_ms']:.2f}; "
          f"goals: {summary['goals']}")


def main(argv=None) -> int:
    args = parse_arguments(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    results = play_both_modes(args)
    summary = summarize(args, results)
    print_report(results, summary)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    plot(results, args.plot)
    print(f"wrote {args.out} and {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
