"""bench_rtf (plain): variant parsing, one run's figures from the summary.json RunStats writes, medians
and ratios. The real graph runs in `make bench-rtf` (its runs go through bench_decisions.run_scenario,
which test_bench_decisions_live exercises)."""
import json

import pytest

from csr_llm_bringup.lab.bench_rtf import DEFAULT_VARIANTS, parse_variant, run_figures, summarise, table
from csr_llm_bringup.run_report import RunStats


def test_variants_parse_and_bad_ones_say_what_to_write():
    assert parse_variant("shipped=") == ("shipped", [])
    assert parse_variant("swap2=reasoning.swap_after_decisions=2, reasoning.warm_head=false") == \
        ("swap2", ["reasoning.swap_after_decisions=2", "reasoning.warm_head=false"])
    assert [parse_variant(v) for v in DEFAULT_VARIANTS] == [("separate_processes", ["--separate-processes"]),
                                                           ("shipped", [])]
    for bad in ("noequals", "=reasoning.x=1", "v=swap_after_decisions=2", "v=reasoning.x"):
        with pytest.raises(ValueError, match="node.param=value"):
            parse_variant(bad)


def _run_dir(tmp_path, name, rtf, totals, lockstep_s, total_s, cpu=None):
    """A run folder's summary.json as RunStats writes it, from decisions with these total_ms."""
    run = tmp_path / name
    run.mkdir()
    stats = RunStats(clock_seen=True)
    stats.on_time(0.0, 0.0)
    for i, total in enumerate(totals):
        stats.on_decision(0.5 * (i + 1), 100.0, "stop", "R1", 0, total_ms=total)
    stats.on_time(10.0, 10.0 / rtf)
    summary = stats.summary()
    (run / "summary.json").write_text(json.dumps({
        **{key: summary[key] for key in ("decisions", "decision_wall_s_per_s", "decision_longest_ms")},
        "real_time_factor": rtf, "sim_seconds": 10.0, "swaps": 1, "decision_accuracy": 0.5,
        "sim_wall_s": {"decision lockstep": lockstep_s, "event decisions": 1.0, "control round trip": 5.0,
                       "total": total_s},
        **({"cpu": {"cpu_s_per_sim_s": cpu, "cpu_s_per_sim_s_total": sum(cpu.values()), "cores_busy": 1.5}}
           if cpu else {})}))
    return run


def test_run_figures_read_the_summary_with_its_longest_decision(tmp_path):
    figures = run_figures(_run_dir(tmp_path, "r", 0.4, [200.0, 3000.0, 250.0], lockstep_s=14.0, total_s=25.0))
    assert figures["longest_decision_ms"] == 3000.0 and figures["decisions"] == 3
    assert figures["real_time_factor"] == 0.4
    assert figures["rtf_without_decisions"] == pytest.approx(10.0 / (25.0 - 15.0), abs=1e-3)


def test_medians_per_variant_and_ratios_against_the_baseline(tmp_path):
    slow = [run_figures(_run_dir(tmp_path, f"s{i}", rtf, [200.0, 8000.0], 20.0, 30.0))
            for i, rtf in enumerate((0.30, 0.34))]
    fast = [run_figures(_run_dir(tmp_path, f"f{i}", rtf, [200.0, 900.0], 12.0, 22.0,
                                 cpu={"reasoning": 2.0 + i, "recorder": 0.5}))
            for i, rtf in enumerate((0.44, 0.46))]
    bench = summarise("door_person", {"before": ["reasoning.swap_after_decisions=2"], "after": []},
                      {"before": slow, "after": fast + [{"error": "run exited 1"}]}, baseline="before")
    before, after = bench["variants"]["before"], bench["variants"]["after"]
    assert before["real_time_factor"] == pytest.approx(0.32) and after["real_time_factor"] == pytest.approx(0.45)
    assert before["rtf_ratio"] == 1.0 and after["rtf_ratio"] == pytest.approx(0.45 / 0.32, abs=1e-3)
    assert before["longest_decision_ms"] == 8000.0 and after["longest_decision_ms"] == 900.0
    assert after["sim_wall_s"]["decision lockstep"] == 12.0 and len(after["runs"]) == 3   # the failed run is kept
    assert bench["repeats"] == 3 and bench["baseline"] == "before"
    text = table(bench)
    assert text.splitlines()[0].startswith("variant") and "1.41" in text and "8000" in text
    assert after["cpu_s_per_sim_s"] == {"reasoning": 2.5, "recorder": 0.5} and after["cpu_s_per_sim_s_total"] == 3.0
    assert before["cpu_s_per_sim_s"] is None and "after CPU s per sim s: reasoning 2.50, recorder 0.50" in text
