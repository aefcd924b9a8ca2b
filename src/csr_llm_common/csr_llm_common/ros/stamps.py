"""builtin_interfaces/Time <-> float seconds, with one rounding rule for every hop.

Integer nanoseconds are the exchange unit: seconds are rounded to the nearest nanosecond once,
then split with divmod, so 1.9999999996 s becomes 2 s 0 ns (never 1 s, never nanosec = 1e9).
"""
from __future__ import annotations

from builtin_interfaces.msg import Time

NS_PER_S = 1_000_000_000


def stamp_to_ns(stamp) -> int:
    return int(stamp.sec) * NS_PER_S + int(stamp.nanosec)


def stamp_to_sec(stamp) -> float:
    return stamp_to_ns(stamp) / NS_PER_S


def sec_to_ns(seconds: float) -> int:
    return int(round(float(seconds) * NS_PER_S))


def ns_to_stamp(ns: int) -> Time:
    sec, nanosec = divmod(int(ns), NS_PER_S)
    return Time(sec=sec, nanosec=nanosec)


def sec_to_stamp(seconds: float) -> Time:
    return ns_to_stamp(sec_to_ns(seconds))


def set_stamp(target, seconds: float) -> None:
    """Write seconds into an existing Time field in place (no allocation on hot paths)."""
    target.sec, target.nanosec = divmod(sec_to_ns(seconds), NS_PER_S)


def is_zero(stamp) -> bool:
    return not (stamp.sec or stamp.nanosec)
