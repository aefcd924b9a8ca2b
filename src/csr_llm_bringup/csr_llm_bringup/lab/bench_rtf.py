"""Real-time factor bench (`make bench-rtf`): where a lockstepped sim run's wall time goes, per variant.

One scenario runs through ``csr-llm run --profile sim`` (as bench-decisions runs it) under each
variant (a name and ``--set`` overrides), the variants interleaved run by run and repeated, so
every ratio compares runs made side by side on the same machine load. Per run it reads
``summary.json``: ``real_time_factor``, ``decision_wall_s_per_s`` (the reasoning node's own
deciding time per sim second), ``decision_longest_ms`` (a decision that waited, e.g. for an ASR
rebuild) and the simulator's wall-time profile (``sim_wall_s``). It writes::

    {"scenario", "repeats", "baseline",
     "variants": {name: {"overrides", "runs": [per run], "real_time_factor", "decision_wall_s_per_s",
                         "longest_decision_ms", "sim_wall_s": {phase: median}, "rtf_without_decisions",
                         "rtf_ratio"}}}

medians over the repeats; ``rtf_ratio`` is the variant's median RTF over the baseline's.
``rtf_without_decisions`` is the bound the rest of the loop sets (sim seconds over the wall time
not spent waiting for decisions). ``cpu_s_per_sim_s`` is each process's CPU time per sim second
(``csr-llm run`` samples /proc): at a real-time factor of 1 their total must fit the machine's cores.
Plain module (the graph runs as subprocesses; no rclpy here).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .bench_decisions import run_scenario

# The baseline (first) is the sim profile with every node in its own process (the router's tick a
# DDS round trip); then the shipped profile (the router hosted in the simulator's process). The
# earlier baseline, the head rebuilt cold and the swap two decisions after an eviction, is
# "cold_head_swap2=reasoning.warm_head=false,reasoning.swap_after_decisions=2".
SEPARATE_FLAG = "--separate-processes"
DEFAULT_VARIANTS = (f"separate_processes={SEPARATE_FLAG}", "shipped=")
DECISION_PHASES = ("decision lockstep", "event decisions")


def parse_variant(text: str) -> Tuple[str, List[str]]:
    """"name=node.param=value,node.param=value" (or "name=" for no override; an item may be
    --separate-processes) -> (name, overrides)."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ValueError(f"variant {text!r}: write NAME=node.param=value[,node.param=value] (or NAME=)")
    overrides = [item.strip() for item in rest.split(",") if item.strip()]
    for item in overrides:
        if item == SEPARATE_FLAG:
            continue
        node_param, eq, _value = item.partition("=")
        if not eq or "." not in node_param:
            raise ValueError(f"variant {name!r}: override {item!r} is not node.param=value")
    return name, overrides


def run_figures(run_dir: Path) -> Dict[str, Any]:
    """What one run's summary.json says about its wall time."""
    summary = json.loads((run_dir / "summary.json").read_text())
    wall = dict(summary.get("sim_wall_s") or {})
    sim_s = float(summary.get("sim_seconds") or 0.0)
    deciding = sum(float(wall.get(phase, 0.0)) for phase in DECISION_PHASES)
    rest = float(wall.get("total", 0.0)) - deciding
    return {"real_time_factor": summary.get("real_time_factor"),
            "decision_wall_s_per_s": summary.get("decision_wall_s_per_s"),
            "sim_seconds": sim_s, "sim_wall_s": wall,
            "rtf_without_decisions": round(sim_s / rest, 3) if rest > 0 else None,
            "decisions": summary.get("decisions"), "decisions_reused": summary.get("decisions_reused"),
            "swaps": summary.get("swaps"),
            "longest_decision_ms": summary.get("decision_longest_ms"),
            "decision_accuracy": summary.get("decision_accuracy"),
            # CPU seconds per sim second of each process and in all (the runner's /proc samples)
            "cpu_s_per_sim_s": (summary.get("cpu") or {}).get("cpu_s_per_sim_s"),
            "cpu_s_per_sim_s_total": (summary.get("cpu") or {}).get("cpu_s_per_sim_s_total"),
            "cores_busy": (summary.get("cpu") or {}).get("cores_busy")}


def _median(values: Sequence[Any]) -> Optional[float]:
    numbers = [float(v) for v in values if v is not None]
    return round(statistics.median(numbers), 3) if numbers else None


def _median_per_key(maps: Sequence[Optional[Dict[str, float]]]) -> Optional[Dict[str, Optional[float]]]:
    present = [m for m in maps if m]
    if not present:
        return None
    keys = sorted({k for m in present for k in m}, key=lambda k: -max(m.get(k, 0.0) for m in present))
    return {k: _median([m.get(k) for m in present]) for k in keys}


def summarise(scenario: str, variants: Dict[str, List[str]], runs: Dict[str, List[Dict[str, Any]]],
              baseline: str) -> Dict[str, Any]:
    """Medians per variant over its runs, and each variant's RTF over the baseline's."""
    out: Dict[str, Any] = {"scenario": scenario, "repeats": max((len(r) for r in runs.values()), default=0),
                           "baseline": baseline, "variants": {}}
    for name, overrides in variants.items():
        done = [r for r in runs.get(name, []) if "error" not in r]
        phases = sorted({phase for r in done for phase in r["sim_wall_s"]})
        out["variants"][name] = {
            "overrides": overrides, "runs": runs.get(name, []),
            "real_time_factor": _median([r["real_time_factor"] for r in done]),
            "decision_wall_s_per_s": _median([r["decision_wall_s_per_s"] for r in done]),
            "longest_decision_ms": _median([r["longest_decision_ms"] for r in done]),
            "rtf_without_decisions": _median([r["rtf_without_decisions"] for r in done]),
            "sim_wall_s": {phase: _median([r["sim_wall_s"].get(phase) for r in done]) for phase in phases},
            "cpu_s_per_sim_s": _median_per_key([r.get("cpu_s_per_sim_s") for r in done]),
            "cpu_s_per_sim_s_total": _median([r.get("cpu_s_per_sim_s_total") for r in done]),
            "cores_busy": _median([r.get("cores_busy") for r in done]),
        }
    base = out["variants"].get(baseline, {}).get("real_time_factor")
    for entry in out["variants"].values():
        rtf = entry["real_time_factor"]
        entry["rtf_ratio"] = round(rtf / base, 3) if rtf is not None and base else None
    return out


def table(bench: Dict[str, Any]) -> str:
    def cell(value: Any, spec: str = ".3f") -> str:
        return "-" if value is None else format(value, spec)
    lines = [f"{'variant':18s} {'RTF':>6s} {'ratio':>6s} {'dec s/s':>8s} {'longest ms':>10s} "
             f"{'RTF w/o dec':>11s} {'lockstep s':>10s} {'control s':>9s} {'CPU s/s':>8s} {'cores':>6s}"]
    for name, v in bench["variants"].items():
        wall = v["sim_wall_s"]
        lines.append(f"{name:18s} {cell(v['real_time_factor']):>6s} {cell(v['rtf_ratio'], '.2f'):>6s} "
                     f"{cell(v['decision_wall_s_per_s']):>8s} {cell(v['longest_decision_ms'], '.0f'):>10s} "
                     f"{cell(v['rtf_without_decisions']):>11s} {cell(wall.get('decision lockstep'), '.1f'):>10s} "
                     f"{cell(wall.get('control round trip'), '.1f'):>9s} "
                     f"{cell(v.get('cpu_s_per_sim_s_total'), '.2f'):>8s} "
                     f"{cell(v.get('cores_busy'), '.2f'):>6s}")
    lines += [f"  {name} CPU s per sim s: " + ", ".join(f"{k} {x:.2f}" for k, x in v["cpu_s_per_sim_s"].items()
                                                        if x is not None)
              for name, v in bench["variants"].items() if v.get("cpu_s_per_sim_s")]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_rtf", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="door_person", help="one scenario with an eviction (default door_person)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per variant, interleaved (default 2)")
    parser.add_argument("--variant", action="append", metavar="NAME=node.param=value,...",
                        help="a variant (repeatable; the first is the baseline); default: "
                             + " and ".join(DEFAULT_VARIANTS))
    parser.add_argument("--out", default="build/bench/rtf.json")
    parser.add_argument("--runs-dir", default="build/bench/rtf_runs")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats: at least 1")
    try:
        variants = dict(parse_variant(text) for text in (args.variant or DEFAULT_VARIANTS))
    except ValueError as err:
        parser.error(str(err))
    runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in variants}
    start = time.monotonic()
    for repeat in range(args.repeats):
        for name, overrides in variants.items():
            print(f"[bench-rtf] {args.scenario} run {repeat + 1}/{args.repeats}: {name} ...", flush=True)
            run = run_scenario(args.scenario, Path(args.runs_dir) / name / str(repeat), overrides)
            try:
                if run["returncode"] != 0:
                    raise RuntimeError(f"run exited {run['returncode']} (log: {run.get('log')})")
                figures = run_figures(Path(run["run_dir"]))
            except (OSError, ValueError, KeyError, RuntimeError) as err:
                figures = {"error": str(err)}
                print(f"[bench-rtf]   FAILED: {err}", flush=True)
            else:
                print(f"[bench-rtf]   RTF {figures['real_time_factor']}, deciding "
                      f"{figures['decision_wall_s_per_s']} s per sim s, longest decision "
                      f"{figures['longest_decision_ms']} ms", flush=True)
            runs[name].append(figures)
    baseline = next(iter(variants))
    bench = summarise(args.scenario, variants, runs, baseline)
    bench["wall_s"] = round(time.monotonic() - start, 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(bench, indent=2) + "\n")
    print(table(bench))
    print(f"[bench-rtf] {out} ({bench['wall_s']:.0f} s wall; ratios against {baseline}, runs interleaved)")
    failed = [name for name, rs in runs.items() if any("error" in r for r in rs)]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
