"""bench-asr's split of decisions into those due inside a rebuild window and the others."""
from csr_llm_core.lab.bench_asr import cycles, rebuild_windows


def sample(t, latency, wait=0.0, catchup=0.0):
    return {"t": t, "latency_ms": latency, "ttft_ms": latency - wait - catchup, "wait_ms": wait, "catchup_ms": catchup}


def test_decisions_between_an_eviction_and_its_swap_are_inside_a_rebuild_window():
    samples = [sample(0.5, 100),
               sample(2.0, 300, wait=100), sample(4.9, 500, catchup=200),    # evicted at 2, swapped at 5
               sample(5.0, 110), sample(6.0, 120),
               sample(8.0, 200)]                                              # evicted at 7, not swapped by the end
    windows = rebuild_windows(samples, cycles(samples, evictions=[2.0, 7.0], swaps=[5.0], elapsed=9.0))
    inside, outside = windows["inside"], windows["outside"]
    assert inside["decisions"] == 3 and outside["decisions"] == 3
    assert inside["share"] == 0.5 and inside["p50_ms"] == 300.0 and inside["ttft_p50_ms"] == 200.0
    assert inside["wait_p50_ms"] == 0.0 and inside["catchups_over_50_ms"] == 1
    assert outside["p50_ms"] == 110.0 and outside["wait_p90_ms"] == 0.0 and outside["catchups_over_50_ms"] == 0
    assert rebuild_windows(samples, cycles(samples, [], [], 9.0))["inside"] == {"decisions": 0}
