"""bench-router's DDS statistics: order-statistic confidence interval, summaries, loop period."""
import numpy as np

from action_router.lab.bench_dds import period_stats, quantile_ci, summarise


def test_p99_interval_brackets_the_true_quantile_of_a_known_distribution():
    rng = np.random.default_rng(5)
    true_p99 = -np.log(0.01)                        # exponential(1)
    covered = 0
    for _ in range(200):
        lo, hi = quantile_ci(np.sort(rng.exponential(size=5000)), 0.99)
        covered += lo <= true_p99 <= hi
    assert 0.90 <= covered / 200 <= 0.995            # ~95 % coverage, distribution-free


def test_summary_and_period_statistics():
    s = summarise(np.arange(1, 1001, dtype=float))
    assert s["max"] == 1000 and s["p50"] == 500.5 and s["p99"] < s["p999"] <= s["max"]
    intervals = np.array([1000.0] * 98 + [1600.0, 400.0])   # one late tick, then a short one
    p = period_stats(intervals, 0.001)
    assert p["late_ticks"] == 1 and p["p50"] == 1000.0 and p["max"] == 1600.0 and p["intervals"] == 100
