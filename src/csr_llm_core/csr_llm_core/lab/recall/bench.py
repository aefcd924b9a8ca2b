"""Memory recall benchmark: CSR against a sliding window, BM25 retrieval, full recompute and CSR + archive recall.

Same model, same questions, one run. Histories are generated (`world`, `families`) at several
lengths, or read from a JSONL dataset (`--dataset`, format in `episode`); every question is put to
every method (full recompute: the first `--full-per-episode` questions of each episode, since each
costs a whole prefix evaluation). Writes the issue's JSON record and a plot of accuracy against TTFT.

    python -m csr_llm_core.lab.recall.bench                       # default: ~10-15 min on 2 cores
    python -m csr_llm_core.lab.recall.bench --full                # more episodes and questions
    python -m csr_llm_core.lab.recall.bench --dataset my.jsonl --model-path bigger.gguf
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ...archive_recall import ArchiveRecall, ChunkIndex
from .episode import Episode, load_jsonl, save_jsonl
from .families import FAMILIES, family_counts, make_questions
from .methods import (METHODS, History, answer, archive_context, choice_grammar, choice_texts, csr_prefix, head_text,
                      query_text, retrieved_lines, suffix_tokens, window_prefix)
from .scoring import Outcome, chance, summarize
from .world import generate_history


def generate(lengths: Sequence[int], episodes: int, per_family: int, seed: int,
             count_tokens) -> List[Tuple[int, Episode]]:
    out = []
    for length in lengths:
        for index in range(episodes):
            episode_seed = seed * 1000 + length // 1000 * 10 + index
            history = generate_history(episode_seed, length, count_tokens)
            questions = make_questions(history, episode_seed, per_family, FAMILIES)
            out.append((length, Episode(f"gen-{length}-{index}", history.steps, questions)))
    return out


def _engine(model_path, n_ctx: int, n_threads: int, name: str):
    from ...engine import LlamaEngine
    return LlamaEngine(model_path, n_ctx=n_ctx, n_threads=n_threads, name=name)


def run(episodes: Sequence[Tuple[int, Episode]], args, log=print) -> dict:
    n_ctx = args.tau_mem + args.archive_tokens + 1024
    engines = {"csr": _engine(args.model_path, n_ctx, args.n_threads, "csr"),
               "window": _engine(args.model_path, args.window + 2048, args.n_threads, "window"),
               "retrieval": _engine(args.model_path, 4096, args.n_threads, "retrieval"),
               "full": _engine(args.model_path, n_ctx, args.n_threads, "full")}
    csr = engines["csr"]
    head = csr.tokenize(head_text(), bos=True)
    outcomes: Dict[str, List[Outcome]] = {m: [] for m in METHODS}
    rows, build = [], []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        for length, episode in episodes:
            history = History.of(episode, csr.tokenize_plain)
            prefix = csr_prefix(history, head, args.tau_mem, args.evict_ratio, Path(scratch))
            live = set(prefix.live)
            t0 = time.perf_counter()
            csr.sync(prefix.tokens, by_line=True)
            build_s = time.perf_counter() - t0
            window_tokens = min(args.window, len(prefix.tokens) - len(head))
            window, window_from = window_prefix(history, head, window_tokens)
            engines["window"].sync(window, by_line=True)
            engines["retrieval"].sync(head)
            index = ChunkIndex(history.texts)
            recall = ArchiveRecall(prefix.archive_path, count_tokens=lambda t: len(csr.tokenize_plain(t)))
            build.append({"episode": episode.id, "length": length, "history_tokens": history.n_tokens,
                          "csr_prefix_tokens": len(prefix.tokens), "evictions": prefix.evictions,
                          "window_prefix_tokens": len(window), "csr_build_s": round(build_s, 1)})
            for number, question in enumerate(episode.questions):
                evicted = None if not question.evidence else any(e not in live for e in question.evidence)
                choices = choice_texts(question)
                grammar = choice_grammar(choices, csr.tokenize_plain)
                got = {"csr": answer(csr, suffix_tokens(csr, question), choices, grammar),
                       "window": answer(engines["window"], suffix_tokens(csr, question), choices, grammar)}
                t0 = time.perf_counter()
                context, retrieved = retrieved_lines(index, history, query_text(question), args.retrieval_k)
                got["retrieval"] = answer(engines["retrieval"], suffix_tokens(csr, question, context), choices,
                                          grammar, extra_ms=(time.perf_counter() - t0) * 1e3)
                t0 = time.perf_counter()
                context, recalled = archive_context(recall, question, args.archive_k, args.archive_tokens)
                got["csr_archive"] = answer(csr, suffix_tokens(csr, question, context), choices, grammar,
                                            extra_ms=(time.perf_counter() - t0) * 1e3)
                if number < args.full_per_episode:
                    engines["full"].clear()
                    got["full"] = answer(engines["full"], prefix.tokens + suffix_tokens(csr, question),
                                         choices, grammar)
                for method, result in got.items():
                    outcomes[method].append(Outcome(question, length, result.choice, result.scores, result.ttft_ms,
                                                    evicted))
                rows.append({"episode": episode.id, "length": length, "family": question.family, "q": question.q,
                             "answer": question.choices[question.answer], "evidence_evicted": evicted,
                             "evidence_in_window": None if not question.evidence else
                             all(e >= window_from for e in question.evidence),
                             "retrieved_evidence": None if not question.evidence else
                             all(e in retrieved for e in question.evidence),
                             "recalled": recalled,
                             "answers": {m: question.choices[r.choice] for m, r in got.items()}})
            log(f"[{time.perf_counter() - started:6.0f} s] {episode.id}: {history.n_tokens} tokens, csr prefix "
                f"{len(prefix.tokens)} ({prefix.evictions} evictions), window {len(window)}, "
                f"{len(episode.questions)} questions")
    for engine in engines.values():
        engine.close()
    questions = [q for _, e in episodes for q in e.questions]
    methods = {m: summarize(outcomes[m]) for m in METHODS if outcomes[m]}
    if "full" in methods:
        methods["full"]["same_answer_as_csr"] = same_answer(rows, "full", "csr")
    return {"chance": round(chance(questions), 3), "model": str(csr.model_path),
            "settings": {"tau_mem": args.tau_mem, "evict_ratio": args.evict_ratio, "window_tokens": args.window,
                         "retrieval_k": args.retrieval_k, "archive_k": args.archive_k,
                         "archive_tokens": args.archive_tokens, "full_per_episode": args.full_per_episode,
                         "n_threads": args.n_threads, "families": family_counts(questions)},
            "methods": methods,
            "episodes": build, "questions": rows, "wall_s": round(time.perf_counter() - started, 1)}


def same_answer(rows: Sequence[dict], method: str, other: str) -> dict:
    """How often two methods gave the same answer, over the questions both answered."""
    both = [r for r in rows if method in r["answers"] and other in r["answers"]]
    same = sum(r["answers"][method] == r["answers"][other] for r in both)
    return {"rate": round(same / len(both), 3) if both else None, "n": len(both)}


def format_table(result: dict) -> str:
    methods = result["methods"]
    families = sorted({f for m in methods.values() for f in m["by_family"]})
    lines = [f"chance {result['chance']:.3f} (per family below)",
             f"{'':<20}" + "".join(f"{m:>16}" for m in methods)]

    def row(name: str, cell) -> None:
        lines.append(f"{name:<20}" + "".join(f"{cell(m):>16}" for m in methods.values()))

    def acc(record: Optional[dict]) -> str:
        if not record or not record.get("n"):
            return "-"
        return f"{record['accuracy']:.2f} ({record['n']})"

    row("accuracy (n)", acc)
    row("ci95", lambda m: f"{m['ci95'][0]:.2f}-{m['ci95'][1]:.2f}")
    row("ttft p50 ms", lambda m: f"{m['ttft_p50_ms']:.0f}")
    row("ttft p99 ms", lambda m: f"{m['ttft_p99_ms']:.0f}")
    for family in families:
        chance_of = next((m["by_family"][family]["chance"] for m in methods.values() if family in m["by_family"]), 0)
        row(f"{family} [{chance_of:.2f}]", lambda m, f=family: acc(m["by_family"].get(f)))
        if any(m["by_family"].get(family, {}).get("auc") is not None for m in methods.values()):
            row(f"  {family} AUC", lambda m, f=family: str(m["by_family"].get(f, {}).get("auc", "-")))
    for length in sorted({int(k) for m in methods.values() for k in m["by_length"]}):
        row(f"{length} tok", lambda m, n=str(length): acc(m["by_length"].get(n)))
        row("  ttft p50 ms", lambda m, n=str(length): f"{m['by_length'][n]['ttft_p50_ms']:.0f}"
            if n in m["by_length"] else "-")
    row("evicted evidence", lambda m: acc(m["evicted_evidence"]))
    row("live evidence", lambda m: acc(m["live_evidence"]))
    agreement = methods.get("full", {}).get("same_answer_as_csr")
    if agreement and agreement["n"]:
        lines.append(f"full recompute answered as csr on {agreement['rate']:.2f} of its {agreement['n']} questions "
                     "(same prompt; only the evaluation batches differ)")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for method, record in result["methods"].items():
        points = sorted((int(k), v) for k, v in record["by_length"].items())
        xs = [v["ttft_p50_ms"] for _, v in points]
        ys = [v["accuracy"] for _, v in points]
        axis.plot(xs, ys, "o-", label=method)
        for (length, value), x, y in zip(points, xs, ys):
            label = f"{length // 1000}K" + (f" n={value['n']}" if value["n"] < 5 else "")
            axis.annotate(label, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
    axis.axhline(result["chance"], color="grey", linestyle="--", label="chance")
    axis.set_xscale("log")
    axis.set_xlabel("TTFT p50 (ms, log)")
    axis.set_ylabel("accuracy")
    axis.set_title(f"Memory recall ({Path(result['model']).name})")
    axis.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, help="JSONL episodes to run instead of generated ones")
    parser.add_argument("--lengths", default="4096,8192,16384,32768", help="generated history lengths (tokens)")
    parser.add_argument("--episodes", type=int, default=1, help="generated episodes per length")
    parser.add_argument("--per-family", type=int, default=3, help="questions per family and episode")
    parser.add_argument("--full", action="store_true",
                        help="3 episodes per length, 5 questions per family, 2 full recomputes per episode")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tau-mem", type=int, default=20480, help="CSR eviction threshold (tokens)")
    parser.add_argument("--evict-ratio", type=float, default=0.5)
    parser.add_argument("--window", type=int, default=2048, help="sliding window budget (tokens, after the head)")
    parser.add_argument("--retrieval-k", type=int, default=8)
    parser.add_argument("--archive-k", type=int, default=4)
    parser.add_argument("--archive-tokens", type=int, default=384, help="token budget of the recalled chunks")
    parser.add_argument("--full-per-episode", type=int, default=1,
                        help="questions per episode also run as full recompute")
    parser.add_argument("--n-threads", type=int, default=1)
    parser.add_argument("--model-path", default=None, help="any GGUF (default: the bundled Gemma 3 270M)")
    parser.add_argument("--save-dataset", type=Path, help="also write the generated episodes as JSONL")
    parser.add_argument("--out", type=Path, default=Path("build/bench/recall.json"))
    parser.add_argument("--plot", type=Path, default=Path("build/bench/recall.png"))
    args = parser.parse_args(argv)
    if args.full:
        args.episodes, args.per_family, args.full_per_episode = 3, 5, 2
    if args.dataset:
        from .episode import DatasetError
        try:
            loaded = load_jsonl(args.dataset)
        except DatasetError as err:
            print(f"recall bench: {err}", file=sys.stderr)
            return 2
        tokenizer = _engine(args.model_path, 512, 1, "tokenizer")
        episodes = [(_bucket(sum(len(tokenizer.tokenize_plain(s.text + "\n")) for s in e.steps)), e) for e in loaded]
        tokenizer.close()
    else:
        tokenizer = _engine(args.model_path, 512, 1, "tokenizer")
        episodes = generate([int(n) for n in args.lengths.split(",")], args.episodes, args.per_family, args.seed,
                            lambda text: len(tokenizer.tokenize_plain(text)))
        tokenizer.close()
        if args.save_dataset:
            save_jsonl([e for _, e in episodes], args.save_dataset)
    result = run(episodes, args, log=lambda line: print(line, file=sys.stderr, flush=True))
    print(format_table(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    plot(result, args.plot)
    print(f"wrote {args.out} and {args.plot} ({result['wall_s']:.0f} s)")
    return 0


def _bucket(tokens: int) -> int:
    """A dataset history's length for the by_length table: its token count, to the nearest 1K."""
    return max(1000, int(round(tokens, -3)))


if __name__ == "__main__":
    raise SystemExit(main())
