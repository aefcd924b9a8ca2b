"""The one statistics module: Wilson interval, percentile, rounding."""
import numpy as np
import pytest

from csr_llm_common.stats import percentile, round_or_none, wilson_interval


def test_wilson_interval_known_values_and_empty():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(8, 10, digits=3) == (0.49, 0.943)          # Wilson 95 % for 8 of 10
    low, high = wilson_interval(0, 20)
    assert low == 0.0 and 0.15 < high < 0.17
    assert wilson_interval(20, 20)[1] == pytest.approx(1.0)
    low, high = wilson_interval(5, 10)                                # symmetric around one half
    assert low == pytest.approx(0.2366, abs=1e-3) and high == pytest.approx(0.7634, abs=1e-3)


def test_percentile_matches_numpy_linear_interpolation():
    values = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6]
    for q in (0, 10, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([], 50) is None
    assert percentile(np.array([1.0, 2.0]), 50, digits=1) == 1.5
    assert round_or_none(None, 2) is None and round_or_none(1.23456, 2) == 1.23
