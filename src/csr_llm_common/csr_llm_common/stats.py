"""The statistics every report and benchmark shares (plain module, no rclpy): one Wilson interval,
one percentile, one rounding rule, so figures from different tools agree digit for digit."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

Z95 = 1.959963984540054


def wilson_interval(successes: int, trials: int, z: float = Z95,
                    digits: Optional[int] = None) -> Tuple[float, float]:
    """Wilson score interval of a proportion ((0, 1) with no trials), rounded to ``digits`` if given."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denom = 1.0 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    low, high = max(0.0, centre - half), min(1.0, centre + half)
    if digits is None:
        return low, high
    return round(low, digits), round(high, digits)


def percentile(values: Sequence[float], q: float, digits: Optional[int] = None) -> Optional[float]:
    """Linear-interpolation percentile (numpy's default) of ``values`` for q in [0, 100]; None if empty."""
    if len(values) == 0:
        return None
    s = sorted(float(v) for v in values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    value = s[lo] + (s[hi] - s[lo]) * (pos - lo)
    return value if digits is None else round(value, digits)


def round_or_none(value: Optional[float], digits: int) -> Optional[float]:
    return None if value is None else round(float(value), digits)
