"""Benchmark: decision TTFT through the CSR cached prefix versus a full recompute, and what llama.cpp
offers on CPU to flatten it.

For each prefix size (all in one run, same model, same machine state) it measures
  full_ms         full recompute of prefix + suffix, to the first decision token (fresh context)
  csr_ms          decision TTFT through the engine on the warm, cached prefix (median of repeats)
  total_ms        the whole CSR decision: TTFT + the rest of the decision (median of repeats)
  suffix_only_ms  raw llama.cpp evaluation of the same suffix on the warm prefix (the physical limit)
  ratio           full_ms / csr_ms;  overhead = csr_ms / suffix_only_ms
  identical       both paths produced the same decision tokens (greedy)
  restore_ms      restoring the saved KV state of that prefix into the other context
  state_mb        size of that saved state
The default contexts are the reasoning node's (`--swa-full`, as its swa_full). Per variant (`variants`
in each row, a column each in the second table): csr_ms, total_ms, ratio and identical (decision
tokens equal the default full recompute's, for the same suffix); a context variant is the default
context with its options changed (its own context, built alongside; one equal to the default is skipped):
  flash_attn      flash attention, f16 KV cache
  kv_q8_0         flash attention and a q8_0 KV cache (K and V: half the bytes to read per token)
  swa_window      the local (sliding-window) layers' cache holds only their window plus a batch
                  (llama.cpp swa_full off): their attention stops growing with the prefix
  swa_window_fa   swa_window with flash attention
  full_cache      the local layers' cache as large as the context (llama.cpp swa_full on)
  threads_N       the default context with N threads (llama_set_n_threads), nothing else running
  short_suffix    the suffix without the newest events (its own full recompute for `identical`)
  paused_suffix   the suffix while a pause holds a task: running stop, the paused task shown through
                  the question's {paused} (the shipped question has none: pass a --config-dir whose
                  prompt.yaml does); its own full recompute for `identical`
The prefix is built the CSR way: static head + state chunks appended one by one.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Sequence

from csr_llm_common.catalogue import IntentCatalogue, PausedTask
from ..engine import LlamaEngine
from ..grammar import DecisionGrammar
from ..prompt import PromptTemplate, chunk_line, tokenize_suffix
from ..reasoning_config import add_swa_full_argument
from .synthetic import chunk_text

# variant name -> LlamaEngine options that its own context changes from the default context's
CONTEXT_VARIANTS: Dict[str, Dict[str, Any]] = {"flash_attn": {"flash_attn": True},
                                               "kv_q8_0": {"flash_attn": True, "kv_cache_type": "q8_0"},
                                               "swa_window": {"swa_full": False},
                                               "swa_window_fa": {"swa_full": False, "flash_attn": True},
                                               "full_cache": {"swa_full": True}}

SUFFIX_VARIANTS = ("short_suffix", "paused_suffix")     # the default context with another suffix


def _build_to(engine: LlamaEngine, tokens: list, target: int, seq: int) -> int:
    """Append chunks until the cache holds >= target tokens, then cut it to exactly target."""
    while len(tokens) < target:
        piece = engine.tokenize_plain(chunk_line(chunk_text(seq)))
        engine.extend(piece)
        tokens.extend(piece)
        seq += 1
    del tokens[target:]
    engine.truncate(target)
    engine.sync(tokens)     # a window-only cache cut deeper than its spare batch (into the head) evaluates again
    return seq


def _set_threads(engine: LlamaEngine, n_threads: int) -> None:
    import llama_cpp
    llama_cpp.llama_set_n_threads(engine.llm._ctx.ctx, n_threads, n_threads)


def _timed(engine: LlamaEngine, suffix: list, grammar: DecisionGrammar, repeats: int, full_tokens: list) -> dict:
    runs = [engine.decide(suffix, grammar) for _ in range(repeats)]
    return {"csr_ms": round(statistics.median(r.ttft_ms for r in runs), 1),
            "total_ms": round(statistics.median(r.total_ms for r in runs), 1),
            "identical": all(r.tokens == full_tokens for r in runs), "decision": runs[0].text}


def run(sizes, repeats: int, n_threads: int, config_dir: Path, model_path=None,
        variants: Sequence[str] = (), swa_full: bool = True) -> list:
    catalogue = IntentCatalogue.from_file(config_dir / "intents.yaml")
    template = PromptTemplate.from_file(config_dir / "prompt.yaml")
    n_ctx = max(sizes) + 256
    default: Dict[str, Any] = {"swa_full": swa_full, "flash_attn": False, "kv_cache_type": "f16"}
    cached = LlamaEngine(model_path, n_ctx=n_ctx, n_threads=n_threads, name="R1", **default)
    fresh = LlamaEngine(model_path, n_ctx=n_ctx, n_threads=n_threads, name="R2", **default)
    others: Dict[str, LlamaEngine] = {name: LlamaEngine(model_path, n_ctx=n_ctx, n_threads=n_threads, name=name,
                                                        **(default | CONTEXT_VARIANTS[name]))
                                      for name in variants if name in CONTEXT_VARIANTS
                                      and default | CONTEXT_VARIANTS[name] != default}
    grammar = DecisionGrammar(catalogue, cached.tokenize_plain)
    # the live suffix shape: running task plus the newest events (plain text), as the reasoner builds it
    events = [chunk_text(5), chunk_text(11)]
    suffix = tokenize_suffix(template.suffix_segments("open_door", 0, events), cached.tokenize, cached.tokenize_plain)
    segments = {"short_suffix": template.suffix_segments("open_door", 0, []),
                "paused_suffix": template.suffix_segments(
                    "stop", 0, events, PausedTask("move_to", {"zone": "warehouse", "speed": 0.3}).text())}
    other_suffixes = {name: tokenize_suffix(pieces, cached.tokenize, cached.tokenize_plain)
                      for name, pieces in segments.items() if name in variants}
    head = cached.tokenize(template.head_text(catalogue), bos=True)
    tokens = list(head)
    for engine in [cached] + list(others.values()):
        engine.extend(head)
    seq, rows = 0, []
    with tempfile.TemporaryDirectory() as scratch:
        for size in sorted(sizes):
            for engine in others.values():
                _build_to(engine, list(tokens), size, seq)
            seq = _build_to(cached, tokens, size, seq)
            fresh.clear()
            full = fresh.decide(tokens + suffix, grammar)
            base = _timed(cached, suffix, grammar, repeats, full.tokens)
            suffix_only = []
            for _ in range(repeats):
                start = time.perf_counter()
                cached.extend(suffix)
                suffix_only.append((time.perf_counter() - start) * 1e3)
                cached.truncate(size)
            state_file = Path(scratch) / f"state_{size}.bin"
            cached.save_state(state_file, state_version=0)
            start = time.perf_counter()
            fresh.load_state(state_file, state_version=0, expected_tokens=tokens)
            restore_ms = (time.perf_counter() - start) * 1e3
            measured = {name: _timed(engine, suffix, grammar, repeats, full.tokens) | {"full_ms": full.ttft_ms}
                        for name, engine in others.items()}
            for name in variants:
                if name.startswith("threads_"):
                    _set_threads(cached, int(name.split("_")[1]))
                    measured[name] = _timed(cached, suffix, grammar, repeats, full.tokens) | {"full_ms": full.ttft_ms}
                    _set_threads(cached, n_threads)
                elif name in other_suffixes:
                    other = other_suffixes[name]
                    fresh.clear()
                    other_full = fresh.decide(tokens + other, grammar)
                    measured[name] = _timed(cached, other, grammar, repeats, other_full.tokens) | {
                        "full_ms": other_full.ttft_ms, "suffix_tokens": len(other)}
            for result in measured.values():
                result["ratio"] = round(result.pop("full_ms") / result["csr_ms"], 1)
            suffix_ms = statistics.median(suffix_only)
            rows.append({"prefix_tokens": size, "full_ms": round(full.ttft_ms, 1), "csr_ms": base["csr_ms"],
                         "total_ms": base["total_ms"], "suffix_only_ms": round(suffix_ms, 1),
                         "ratio": round(full.ttft_ms / base["csr_ms"], 1),
                         "overhead": round(base["csr_ms"] / suffix_ms, 2), "identical": base["identical"],
                         "restore_ms": round(restore_ms, 1), "state_mb": round(state_file.stat().st_size / 2**20, 1),
                         "suffix_tokens": len(suffix), "decision": base["decision"], "variants": measured})
            state_file.unlink()
            print(_format_row(rows[-1]), flush=True)
    for engine in [cached, fresh] + list(others.values()):
        engine.close()
    return rows


HEADER = f"{'prefix':>7} {'full_ms':>9} {'csr_ms':>8} {'total_ms':>8} {'suffix_ms':>9} {'ratio':>7} {'overhead':>8} " \
         f"{'identical':>9} {'restore_ms':>10} {'state_mb':>8}"


def _format_row(row: dict) -> str:
    return (f"{row['prefix_tokens']:>7} {row['full_ms']:>9.1f} {row['csr_ms']:>8.1f} {row['total_ms']:>8.1f} "
            f"{row['suffix_only_ms']:>9.1f} {row['ratio']:>7.1f} {row['overhead']:>8.2f} {str(row['identical']):>9} "
            f"{row['restore_ms']:>10.1f} {row['state_mb']:>8.1f}")


def print_variants(rows: list) -> None:
    """One line per configuration: csr/total ms per prefix size, flatness and ratio at the largest."""
    names = ["default"] + list(rows[0]["variants"])
    sizes = [row["prefix_tokens"] for row in rows]
    print(f"\n{'config':>13} " + " ".join(f"{f'csr@{s}':>9} {f'total@{s}':>10}" for s in sizes)
          + f" {'max/min':>7} {'ratio@max':>9} {'identical':>9}")
    for name in names:
        cells = [row if name == "default" else row["variants"][name] for row in rows]
        flat = cells[-1]["csr_ms"] / cells[0]["csr_ms"]
        print(f"{name:>13} " + " ".join(f"{c['csr_ms']:>9.1f} {c['total_ms']:>10.1f}" for c in cells)
              + f" {flat:>7.2f} {cells[-1]['ratio']:>9.1f} {str(all(c['identical'] for c in cells)):>9}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1024,2048,4096,8192")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--n-threads", type=int, default=1)
    parser.add_argument("--variants",
                        default="flash_attn,kv_q8_0,swa_window,swa_window_fa,full_cache,threads_2,short_suffix,"
                                "paused_suffix",
                        help="comma-separated: flash_attn, kv_q8_0, swa_window, swa_window_fa, full_cache, threads_N, "
                             "short_suffix, paused_suffix ('' = none)")
    add_swa_full_argument(parser)
    parser.add_argument("--model-path", default=None)
    parser.add_argument("--config-dir", type=Path, default=Path("config"),
                        help="folder with intents.yaml and prompt.yaml (default: ./config, the workspace root's)")
    parser.add_argument("--out", type=Path, default=Path("build/bench/ttft.json"))
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in CONTEXT_VARIANTS and v not in SUFFIX_VARIANTS
               and not (v.startswith("threads_") and v[8:].isdigit())]
    if unknown:
        parser.error(f"unknown variants: {unknown}")
    print(HEADER, flush=True)
    rows = run([int(s) for s in args.sizes.split(",")], args.repeats, args.n_threads, args.config_dir,
               args.model_path, variants, swa_full=args.swa_full == "true")
    print_variants(rows)
    first, last = rows[0], rows[-1]
    print(f"goals (default): csr@{last['prefix_tokens']} / csr@{first['prefix_tokens']} = "
          f"{last['csr_ms'] / first['csr_ms']:.2f} (<= 1.5), ratio@{last['prefix_tokens']} = {last['ratio']} (>= 250)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
