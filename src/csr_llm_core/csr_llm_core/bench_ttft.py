"""Benchmark: decision TTFT through the CSR cached prefix versus a full recompute.

For each prefix size (all in one run, same model, same machine state) it measures
  full_ms         full recompute of prefix + suffix, to the first decision token (fresh context)
  csr_ms          decision TTFT through the engine on the warm, cached prefix (median of repeats)
  suffix_only_ms  raw llama.cpp evaluation of the same suffix on the warm prefix (the physical limit)
  ratio           full_ms / csr_ms;  overhead = csr_ms / suffix_only_ms
  identical       both paths produced the same decision tokens (greedy)
  restore_ms      restoring the saved KV state of that prefix into the other context
  state_mb        size of that saved state
The prefix is built the CSR way: static head + state chunks appended one by one.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from .catalogue import IntentCatalogue
from .engine import LlamaEngine
from .grammar import DecisionGrammar
from .prompt import PromptTemplate, chunk_line, tokenize_suffix
from .synthetic import chunk_text


def _build_to(engine: LlamaEngine, tokens: list, target: int, seq: int) -> int:
    """Append chunks until the cache holds >= target tokens, then cut it to exactly target."""
    while len(tokens) < target:
        piece = engine.tokenize_plain(chunk_line(chunk_text(seq)))
        engine.extend(piece)
        tokens.extend(piece)
        seq += 1
    del tokens[target:]
    engine.truncate(target)
    return seq


def run(sizes, repeats: int, n_threads: int, config_dir: Path, model_path=None) -> list:
    catalogue = IntentCatalogue.from_file(config_dir / "intents.yaml")
    template = PromptTemplate.from_file(config_dir / "prompt.yaml")
    n_ctx = max(sizes) + 256
    cached = LlamaEngine(model_path, n_ctx=n_ctx, n_threads=n_threads, name="R1")
    fresh = LlamaEngine(model_path, n_ctx=n_ctx, n_threads=n_threads, name="R2")
    grammar = DecisionGrammar(catalogue, cached.tokenize_plain)
    # the live suffix shape: running task plus the newest events (plain text), as the reasoner builds it
    suffix = tokenize_suffix(template.suffix_segments("open_door", 0, [chunk_text(5), chunk_text(11)]),
                             cached.tokenize, cached.tokenize_plain)
    tokens = cached.tokenize(template.head_text(catalogue), bos=True)
    cached.extend(tokens)
    seq, rows = 0, []
    with tempfile.TemporaryDirectory() as scratch:
        for size in sorted(sizes):
            seq = _build_to(cached, tokens, size, seq)
            csr_runs = [cached.decide(suffix, grammar) for _ in range(repeats)]
            suffix_only = []
            for _ in range(repeats):
                start = time.perf_counter()
                cached.extend(suffix)
                suffix_only.append((time.perf_counter() - start) * 1e3)
                cached.truncate(size)
            fresh.clear()
            full = fresh.decide(tokens + suffix, grammar)
            state_file = Path(scratch) / f"state_{size}.bin"
            cached.save_state(state_file, state_version=0)
            start = time.perf_counter()
            fresh.load_state(state_file, state_version=0, expected_tokens=tokens)
            restore_ms = (time.perf_counter() - start) * 1e3
            csr_ms = statistics.median(r.ttft_ms for r in csr_runs)
            suffix_ms = statistics.median(suffix_only)
            rows.append({"prefix_tokens": size, "full_ms": round(full.ttft_ms, 1), "csr_ms": round(csr_ms, 1),
                         "suffix_only_ms": round(suffix_ms, 1), "ratio": round(full.ttft_ms / csr_ms, 1),
                         "overhead": round(csr_ms / suffix_ms, 2),
                         "identical": all(r.tokens == full.tokens for r in csr_runs),
                         "restore_ms": round(restore_ms, 1), "state_mb": round(state_file.stat().st_size / 2**20, 1),
                         "suffix_tokens": len(suffix), "decision": csr_runs[0].text})
            state_file.unlink()
            print(_format_row(rows[-1]), flush=True)
    cached.close()
    fresh.close()
    return rows


HEADER = f"{'prefix':>7} {'full_ms':>9} {'csr_ms':>8} {'suffix_ms':>9} {'ratio':>7} {'overhead':>8} " \
         f"{'identical':>9} {'restore_ms':>10} {'state_mb':>8}"


def _format_row(row: dict) -> str:
    return (f"{row['prefix_tokens']:>7} {row['full_ms']:>9.1f} {row['csr_ms']:>8.1f} {row['suffix_only_ms']:>9.1f} "
            f"{row['ratio']:>7.1f} {row['overhead']:>8.2f} {str(row['identical']):>9} {row['restore_ms']:>10.1f} "
            f"{row['state_mb']:>8.1f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1024,2048,4096,8192")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--n-threads", type=int, default=1)
    parser.add_argument("--model-path", default=None)
    parser.add_argument("--config-dir", type=Path, default=Path("config"),
                        help="folder with intents.yaml and prompt.yaml (default: ./config, the workspace root's)")
    parser.add_argument("--out", type=Path, default=Path("build/bench/ttft.json"))
    args = parser.parse_args(argv)
    print(HEADER, flush=True)
    rows = run([int(s) for s in args.sizes.split(",")], args.repeats, args.n_threads, args.config_dir,
               args.model_path)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
