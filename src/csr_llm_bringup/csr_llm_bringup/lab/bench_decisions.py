"""Decision-quality bench (`make bench-decisions`): every suite scenario through the real graph.

Each scenario of config/scenarios with ``bench: true`` (the default for a scenario with
expectations) runs once through ``csr-llm run --profile sim`` (lockstepped: reproducible), ending
with the scenario; its recorder scores the decisions live (summary.json, decisions.json). This
module collects the runs and writes::

    {"overall":   {decision_accuracy, decision_accuracy_all, reaction_p50_s, reaction_max_s,
                   task_success_rate, safety_violations, safety_by_kind, safety_worst,
                   order_to_motion_p50_s, order_to_motion_max_s,
                   intents: {name: count}, ttft_p50_ms, ttft_p99_ms, ...},
     "scenarios": {name: {the same keys, ...}}}

``decision_accuracy`` counts the reasoning windows (an event's ``decides:``), the former figure over
every window is ``decision_accuracy_all``; the robot-level keys are decisions_robot.py's
(definitions: docs/benchmarks.md). A plot (decisions_plot.py) of the accuracy per scenario with its
95 % Wilson interval and the chance level, and of the robot-level figures per scenario; a table. The
overall accuracy has two intervals: the Wilson interval over the pooled decisions, and a bootstrap
over scenarios (`accuracy_ci95_scenarios`). The decisions of one scenario are not independent (a
model that copies its last answer repeats one mistake a dozen times), so the first is too narrow to
compare two configurations; `--compare BASE NEW` prints each scenario's change and the overall
change with its paired scenario-bootstrap interval.
A safety figure next to the accuracy: `hold_violations` of `hold_decisions`,
the scored decisions in windows where only pausing intents (catalogue `pauses_task`) are
acceptable that chose a task instead (acting when it should hold); and its mirror, `act_misses` of
`act_decisions`: in windows where no pausing intent is acceptable, the decisions that paused
(holding when it should act). Plain module (it starts the graph as subprocesses; no rclpy here).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from csr_llm_common.paths import config_dir
from csr_llm_common.stats import percentile, round_or_none, wilson_interval

from ..decision_score import chance_of_match, parse_expectation
from .decisions_plot import plot
from .decisions_robot import cell, robot_overall, robot_result, robot_table

__all__ = ["bench_json", "compare", "overall", "plot", "run_suite", "scenario_bootstrap_ci", "scenario_result",
           "suite_scenarios", "table"]

BOOTSTRAP_RESAMPLES = 4000
STARTUP_WALL_S = 90.0       # wall allowance on top of the scenario for model load and discovery
WALL_PER_SIM_S = 6.0        # lockstepped graph on two loaded cores: ~2-3 wall s per sim s, with margin


def suite_scenarios(directory: Optional[Path] = None) -> List[str]:
    """Names of the scenario files that belong to the bench, in name order."""
    from ..sim.scenario import load_scenario
    names = []
    for path in sorted((directory or config_dir() / "scenarios").glob("*.yaml")):
        if load_scenario(str(path)).bench:
            names.append(path.stem)
    return names


def run_scenario(name: str, runs_dir: Path, overrides: Sequence[str] = (), python: str = sys.executable) -> Dict:
    """One lockstepped run of scenario `name` (its own runs folder and CSR archive); returns
    {"run_dir", "returncode", "wall_s", "log"}."""
    from ..sim.scenario import load_scenario
    scenario = load_scenario(name)
    runs_dir.mkdir(parents=True, exist_ok=True)
    wall_limit = STARTUP_WALL_S + WALL_PER_SIM_S * scenario.duration
    cmd = [python, "-m", "csr_llm_bringup.cli", "run", "--profile", "sim", "--runs-dir", str(runs_dir),
           "--duration", f"{wall_limit:.0f}",
           "--set", f"simulator.scenario={name}", "--set", "simulator.exit_at_end=true",
           "--set", "recorder.status_period=0.0",
           "--set", f"reasoning.archive_path={(runs_dir / 'csr_archive.jsonl').resolve()}"]
    for text in overrides:       # node.param=value, or a flag of `csr-llm run` (--separate-processes)
        cmd += [text] if text.startswith("--") else ["--set", text]
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    log = runs_dir / "runner.log"
    start = time.monotonic()
    with open(log, "w") as out:
        try:
            code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                  timeout=wall_limit + 120.0).returncode
        except subprocess.TimeoutExpired:
            code = 124
    return {"run_dir": runs_dir / "latest", "returncode": code, "wall_s": time.monotonic() - start, "log": log}


def scenario_result(run_dir: Path, catalogue: Any = None) -> Dict[str, Any]:
    """The bench keys of one run from its summary.json and decisions.json."""
    summary = json.loads((run_dir / "summary.json").read_text())
    detail_path = run_dir / "decisions.json"
    detail = json.loads(detail_path.read_text()) if detail_path.exists() else {"decisions": [], "reactions": []}
    matched, scored = int(summary.get("decisions_matched") or 0), int(summary.get("decisions_scored") or 0)
    # the reasoning windows (an older summary without them: every window)
    matched_r = int(summary.get("decisions_matched_reasoning", matched) or 0)
    scored_r = int(summary.get("decisions_scored_reasoning", scored) or 0)
    low, high = wilson_interval(matched_r, scored_r)
    low_all, high_all = wilson_interval(matched, scored)
    parsed = {r["event"]: parse_expectation(r["expect"]) for r in detail["reactions"]}
    expectations = {event: e for event, e in parsed.items() if e is not None}   # `none` ends scoring
    chances = [chance_of_match(expectations[d["event"]], catalogue) for d in detail["decisions"]
               if d["verdict"] in ("match", "mismatch") and d["event"] in expectations]
    scored_in = [d for d in detail["decisions"] if d["verdict"] in ("match", "mismatch") and d["event"] in expectations]
    hold = [d for d in scored_in if _holding_only(expectations[d["event"]], catalogue)]
    act = [d for d in scored_in if _acting_only(expectations[d["event"]], catalogue)]
    first = _first_evaluated(detail)
    return {
        "decision_accuracy": summary.get("decision_accuracy"),
        "decision_accuracy_all": summary.get("decision_accuracy_all", summary.get("decision_accuracy")),
        "reaction_p50_s": summary.get("reaction_p50_s"),
        "reaction_max_s": summary.get("reaction_max_s"),
        **robot_result(summary),
        "intents": summary.get("intents", {}),
        "ttft_p50_ms": summary.get("ttft_p50_ms"),
        "ttft_p99_ms": summary.get("ttft_p99_ms"),
        "decisions_scored": scored,
        "decisions_matched": matched,
        "decisions_scored_reasoning": scored_r,
        "decisions_matched_reasoning": matched_r,
        "accuracy_ci95": [round(low, 4), round(high, 4)],
        "accuracy_all_ci95": [round(low_all, 4), round(high_all, 4)],
        "chance_accuracy": round(sum(chances) / len(chances), 4) if chances else None,
        "hold_decisions": len(hold),
        "hold_violations": sum(1 for d in hold if not _pauses(d["intent"], catalogue)),
        "act_decisions": len(act),
        "act_misses": sum(1 for d in act if _pauses(d["intent"], catalogue)),
        "first_decisions_scored": len(first),
        "first_decisions_matched": sum(first),
        "first_decision_accuracy": _ratio(sum(first), len(first)),
        "reactions_unmatched": summary.get("reactions_unmatched") or [],
        "goals": summary.get("goals") or {},
        "sim_seconds": summary.get("sim_seconds"),   # None on wall time (no /clock)
        "_reactions": [r["reaction_s"] for r in detail["reactions"]],
        "_ttfts": [d["ttft_ms"] for d in detail["decisions"] if not d.get("reused")],
    }


def _first_evaluated(detail: Dict[str, Any]) -> List[bool]:
    """Per scored window, whether the first decision the model evaluated in it (not reused) matched.
    A wrong one there is repeated until the next event changes the inputs, so these few decisions
    decide most of a scenario's accuracy."""
    decisions = sorted(detail["decisions"], key=lambda d: d["time"])
    out = []
    for window in detail["reactions"]:
        first = next((d for d in decisions if window["start"] < d["time"] <= window["end"] and not d.get("reused")
                      and d["verdict"] in ("match", "mismatch")), None)
        if first is not None:
            out.append(first["verdict"] == "match")
    return out


def _pauses(intent: str, catalogue: Any) -> bool:
    return catalogue is not None and intent in catalogue and catalogue[intent].pauses_task


def _holding_only(expectation: Any, catalogue: Any) -> bool:
    """A window where only pausing intents (stop, hold_position, back_off) are acceptable."""
    return all(_pauses(intent, catalogue) for intent in expectation.intents)


def _acting_only(expectation: Any, catalogue: Any) -> bool:
    """A window where only tasks are acceptable (an order or a resume): pausing there is the miss."""
    return catalogue is not None and not any(_pauses(intent, catalogue) for intent in expectation.intents)


def overall(results: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """Pooled over the scenarios: accuracy over the scored decisions (of the reasoning windows, and
    of all), reactions and TTFTs pooled; the robot-level figures (decisions_robot.robot_overall)."""
    names = [name for name, r in results.items() if "error" not in r]
    ok = [results[name] for name in names]
    matched, scored = (sum(_reasoning_counts(r)[i] for r in ok) for i in (0, 1))
    matched_all = sum(r["decisions_matched"] for r in ok)
    scored_all = sum(r["decisions_scored"] for r in ok)
    reactions = [x for r in ok for x in r["_reactions"]]
    ttfts = [x for r in ok for x in r["_ttfts"]]
    intents: Dict[str, int] = {}
    for r in ok:
        for name, count in r["intents"].items():
            intents[name] = intents.get(name, 0) + int(count)
    chances = [(r["chance_accuracy"], r["decisions_scored"]) for r in ok if r["chance_accuracy"] is not None]
    first_scored = sum(r.get("first_decisions_scored", 0) for r in ok)
    first_matched = sum(r.get("first_decisions_matched", 0) for r in ok)
    low, high = wilson_interval(matched, scored)
    low_all, high_all = wilson_interval(matched_all, scored_all)
    by_scenario = scenario_bootstrap_ci([_reasoning_counts(r) for r in ok])
    return {
        "decision_accuracy": round(matched / scored, 4) if scored else None,
        "decision_accuracy_all": round(matched_all / scored_all, 4) if scored_all else None,
        "reaction_p50_s": round_or_none(percentile(reactions, 50.0), 3),
        "reaction_max_s": round_or_none(max(reactions) if reactions else None, 3),
        **robot_overall(ok, names),
        "intents": dict(sorted(intents.items(), key=lambda kv: -kv[1])),
        "ttft_p50_ms": round_or_none(percentile(ttfts, 50.0), 1),
        "ttft_p99_ms": round_or_none(percentile(ttfts, 99.0), 1),
        "decisions_scored": scored_all,
        "decisions_matched": matched_all,
        "decisions_scored_reasoning": scored,
        "decisions_matched_reasoning": matched,
        "hold_decisions": sum(r["hold_decisions"] for r in ok),
        "hold_violations": sum(r["hold_violations"] for r in ok),
        "act_decisions": sum(r["act_decisions"] for r in ok),
        "act_misses": sum(r["act_misses"] for r in ok),
        "first_decisions_scored": first_scored,
        "first_decisions_matched": first_matched,
        "first_decision_accuracy": _ratio(first_matched, first_scored),
        "accuracy_ci95": [round(low, 4), round(high, 4)],
        "accuracy_all_ci95": [round(low_all, 4), round(high_all, 4)],
        "accuracy_ci95_scenarios": by_scenario,
        "chance_accuracy": (round(sum(c * n for c, n in chances) / sum(n for _, n in chances), 4)
                            if chances and sum(n for _, n in chances) else None),
        "scenarios_run": len(ok),
        "scenarios_failed": sorted(name for name, r in results.items() if "error" in r),
        "scenarios_rerun": sorted(name for name, r in results.items() if r.get("reruns")),
    }


def _reasoning_counts(r: Dict[str, Any]) -> Tuple[int, int]:
    """(matched, scored) in the reasoning windows; every window for a result without them."""
    return (r.get("decisions_matched_reasoning", r["decisions_matched"]),
            r.get("decisions_scored_reasoning", r["decisions_scored"]))


def _ratio(matched: int, scored: int) -> Optional[float]:
    return round(matched / scored, 4) if scored else None


def scenario_bootstrap_ci(counts: Sequence[Sequence[int]], base: Optional[Sequence[Sequence[int]]] = None,
                          resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> Optional[List[float]]:
    """95 % percentile-bootstrap interval of the pooled accuracy over scenarios, each given as
    (matched, scored): whole scenarios are resampled with replacement. With `base` (the same
    scenarios, in the same order, under another configuration) it is the interval of the
    difference, both sides resampled alike (paired). None with fewer than two scenarios."""
    import numpy as np
    new = np.asarray(counts, dtype=float).reshape(-1, 2)
    if len(new) < 2 or (base is not None and len(base) != len(new)):
        return None
    picks = np.random.default_rng(seed).integers(0, len(new), size=(resamples, len(new)))

    def pooled(c: Any) -> Any:
        matched, scored = c[picks, 0].sum(axis=1), c[picks, 1].sum(axis=1)
        return np.divide(matched, scored, out=np.full(resamples, np.nan), where=scored > 0)

    stat = pooled(new) - (pooled(np.asarray(base, dtype=float).reshape(-1, 2)) if base is not None else 0.0)
    stat = stat[np.isfinite(stat)]
    if not len(stat):
        return None
    low, high = np.percentile(stat, [2.5, 97.5])
    return [round(float(low), 4), round(float(high), 4)]


def compare(base: Dict[str, Any], new: Dict[str, Any]) -> str:
    """Per scenario (those both runs scored) the accuracy before and after; then the pooled change
    with its paired scenario-bootstrap 95 % interval."""
    names = [n for n, r in new["scenarios"].items()
             if "error" not in r and "error" not in base["scenarios"].get(n, {"error": "missing"})]
    rows = [f"{'scenario':<22} {'base':>6} {'new':>6} {'change':>7}  task base/new"]
    pairs = []
    for name in names:
        a, b = base["scenarios"][name], new["scenarios"][name]
        pairs.append((_reasoning_counts(a), _reasoning_counts(b)))
        acc_a, acc_b = a["decision_accuracy"] or 0.0, b["decision_accuracy"] or 0.0
        rows.append(f"{name:<22} {acc_a:>6.2f} {acc_b:>6.2f} {acc_b - acc_a:>+7.2f}  "
                    f"{_task(a)}/{_task(b)}")
    if not pairs:
        return "no scenario scored in both runs"
    matched_a, scored_a = (sum(p[0][i] for p in pairs) for i in (0, 1))
    matched_b, scored_b = (sum(p[1][i] for p in pairs) for i in (0, 1))
    acc_a, acc_b = matched_a / max(scored_a, 1), matched_b / max(scored_b, 1)
    ci = scenario_bootstrap_ci([p[1] for p in pairs], base=[p[0] for p in pairs])
    moved = sum(1 for p in pairs if abs(p[1][0] / max(p[1][1], 1) - p[0][0] / max(p[0][1], 1)) >= 0.1)
    rows.append(f"{'OVERALL':<22} {acc_a:>6.2f} {acc_b:>6.2f} {acc_b - acc_a:>+7.2f}  "
                f"paired scenario bootstrap 95 % of the change: "
                + ("-" if ci is None else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]")
                + f"; {moved} of {len(pairs)} scenarios moved by 0.10 or more")
    return "\n".join(rows)


def _task(r: Dict[str, Any]) -> str:
    rate = r.get("task_success_rate")
    return "-" if rate is None else f"{rate:.0%}"


def bench_json(results: Dict[str, Dict[str, Any]], wall_s: float) -> Dict[str, Any]:
    scenarios = {name: {k: v for k, v in r.items() if not k.startswith("_")} for name, r in results.items()}
    return {"overall": dict(overall(results), wall_s=round(wall_s, 1)), "scenarios": scenarios}


def table(bench: Dict[str, Any]) -> str:
    rows = [f"{'scenario':<22} {'accuracy':>8} {'95% CI':>13} {'chance':>6} {'scored':>6} {'react p50':>9} "
            f"{'react max':>9} {'task':>4} {'TTFT p50':>8} {'acted/hold':>10} {'held/act':>9}  top intents"]
    items = list(bench["scenarios"].items()) + [("OVERALL", bench["overall"])]
    for name, r in items:
        if "error" in r:
            rows.append(f"{name:<22} FAILED: {r['error']}")
            continue
        ci = r.get("accuracy_ci95") or [None, None]
        top = ", ".join(f"{k} {v}" for k, v in sorted(r["intents"].items(), key=lambda kv: -kv[1])[:3])
        rows.append(f"{name:<22} {cell(r['decision_accuracy']):>8} {cell(ci[0]) + '-' + cell(ci[1]):>13} "
                    f"{cell(r.get('chance_accuracy')):>6} {r['decisions_scored']:>6} "
                    f"{cell(r['reaction_p50_s'], '.1f'):>9} "
                    f"{cell(r['reaction_max_s'], '.1f'):>9} {cell(r['task_success_rate'], '.0%'):>4} "
                    f"{cell(r['ttft_p50_ms'], '.0f'):>8} {_hold_cell(r):>10} {_act_cell(r):>9}  {top}")
    by_scenario = bench["overall"].get("accuracy_ci95_scenarios")
    if by_scenario:
        rows.append(f"overall accuracy, 95 % bootstrap over scenarios: {by_scenario[0]:.2f}-{by_scenario[1]:.2f} "
                    "(decisions within a scenario are not independent: use this one to compare runs)")
    o = bench["overall"]
    if o.get("decision_accuracy_all") is not None:
        rows.append(f"accuracy above: the reasoning windows; over every window: {o['decision_accuracy_all']:.2f} "
                    f"({o['decisions_matched']} of {o['decisions_scored']})")
    if o.get("first_decisions_scored"):
        rows.append(f"first evaluated decision after each expectation change: {o['first_decisions_matched']} of "
                    f"{o['first_decisions_scored']} matched ({o['first_decision_accuracy']:.2f})")
    return "\n".join(rows) + "\n\n" + robot_table(bench)


def _hold_cell(r: Dict[str, Any]) -> str:
    return f"{r['hold_violations']}/{r['hold_decisions']}" if "hold_decisions" in r else "-"


def _act_cell(r: Dict[str, Any]) -> str:
    return f"{r['act_misses']}/{r['act_decisions']}" if "act_decisions" in r else "-"


def score_run(run: Dict[str, Any], catalogue: Any, reruns: int = 0, tag: str = "bench-decisions") -> Dict[str, Any]:
    """A finished run's bench keys (scenario_result), or {"error": ...} for a run that failed or
    left no readable result; one line on stdout either way."""
    try:
        if run["returncode"] != 0:
            raise RuntimeError(f"run exited {run['returncode']} (log: {run.get('log')})")
        result = scenario_result(Path(run["run_dir"]), catalogue)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        print(f"[{tag}]   FAILED: {err}", flush=True)
        return {"error": str(err), "reruns": reruns}
    result.update(wall_s=round(run["wall_s"], 1), reruns=reruns)
    print(f"[{tag}]   accuracy {result['decision_accuracy']}, reaction p50 {result['reaction_p50_s']} s, "
          f"task {result['task_success_rate']}, {result['wall_s']} s wall", flush=True)
    return result


def run_with_reruns(name: str, runs_dir: Path, overrides: Sequence[str], reruns: int,
                    run=None) -> Tuple[Dict, int]:
    """run_scenario, again up to `reruns` times while it exits non-zero; each failed run's log is
    kept as runner.failed<N>.log. Returns the last run and how often it was run again."""
    run = run or run_scenario
    result, done = run(name, runs_dir, overrides), 0
    while result["returncode"] != 0 and done < reruns:
        done += 1
        kept = Path(result["log"]).replace(Path(result["log"]).with_name(f"runner.failed{done}.log"))
        print(f"[bench-decisions]   run exited {result['returncode']} (log: {kept}); "
              f"running it again ({done} of {reruns})", flush=True)
        result = run(name, runs_dir, overrides)
    return result, done


def run_suite(names: Sequence[str], runs_dir: Path, overrides: Sequence[str], catalogue: Any, reruns: int = 1,
              rescore: bool = False, give_up_after: int = 2, run=None) -> Dict[str, Dict[str, Any]]:
    """Each scenario run (or, with `rescore`, re-read) and scored, in order. When the first
    `give_up_after` scenarios all fail (0: never; not when re-scoring), the rest are not run: a cause
    they share (a missing file, a bad override) would fail every one of them, each after its full
    wall limit."""
    results: Dict[str, Dict[str, Any]] = {}
    for i, name in enumerate(names, 1):
        done: Dict[str, Any] = {"run_dir": runs_dir / name / "latest", "returncode": 0, "wall_s": 0.0}
        again = 0
        if not rescore:
            print(f"[bench-decisions] {i}/{len(names)} {name} ...", flush=True)
            done, again = run_with_reruns(name, runs_dir / name, overrides, reruns, run=run)
        results[name] = score_run(done, catalogue, again)
        if not rescore and i == give_up_after < len(names) and all("error" in r for r in results.values()):
            reason = f"not run: the first {i} scenarios failed (see their runner logs)"
            print(f"[bench-decisions] {reason}; {len(names) - i} left", flush=True)
            results.update({rest: {"error": reason} for rest in names[i:]})
            break
    return results


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_decisions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", help="comma-separated subset (default: every bench scenario)")
    parser.add_argument("--out", default="build/bench/decisions.json")
    parser.add_argument("--plot", default="build/bench/decisions.png")
    parser.add_argument("--runs-dir", default="build/bench/decision_runs", help="one run folder per scenario")
    parser.add_argument("--set", action="append", default=[], metavar="NODE.PARAM=VALUE",
                        help="parameter override for every run")
    parser.add_argument("--rescore", action="store_true", help="do not run; re-read the runs already in --runs-dir")
    parser.add_argument("--reruns", type=int, default=1,
                        help="a run that exits non-zero (a node that crashed or hung) is run again this often: "
                             "the lockstepped run is reproducible, and a failed run scores nothing")
    parser.add_argument("--give-up-after", type=int, default=2, metavar="N",
                        help="when the first N scenarios all fail, do not run the rest (0: run every one)")
    parser.add_argument("--compare", nargs=2, metavar=("BASE_JSON", "NEW_JSON"),
                        help="do not run; compare two bench results scenario by scenario")
    args = parser.parse_args(argv)
    if args.compare:
        base, new = (json.loads(Path(path).read_text()) for path in args.compare)
        print(compare(base, new))
        return 0
    from csr_llm_common.catalogue import IntentCatalogue
    catalogue = IntentCatalogue.from_file(config_dir() / "intents.yaml")
    available = suite_scenarios()
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()] if args.scenarios else available
    start = time.monotonic()
    results = run_suite(names, Path(args.runs_dir), args.set, catalogue, reruns=args.reruns, rescore=args.rescore,
                        give_up_after=args.give_up_after)
    bench = bench_json(results, time.monotonic() - start)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(bench, indent=2) + "\n")
    plot(bench, Path(args.plot), n_intents=len(catalogue.names))
    print(table(bench))
    print(f"[bench-decisions] {out}, {args.plot} ({bench['overall']['wall_s']:.0f} s wall)")
    return 1 if bench["overall"]["scenarios_failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
