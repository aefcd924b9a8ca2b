"""The recorder's rate limit (plain): which messages of a rate-limited topic are kept, what is counted."""
import pytest

from csr_llm_bringup.recorder_config import RateLimiter, RecorderConfig


def test_a_rate_limited_topic_keeps_one_message_per_period_and_counts_the_rest():
    limiter = RateLimiter(["/motor_command"], hz=100.0)           # one per 10 ms
    kept = [t for t in range(0, 50_000_000, 1_000_000) if limiter.keep("/motor_command", t)]   # 1 kHz for 50 ms
    assert kept == [0, 10_000_000, 20_000_000, 30_000_000, 40_000_000]
    assert limiter.dropped["/motor_command"] == 45


def test_other_topics_are_never_limited_and_a_clock_jump_back_keeps_the_message():
    limiter = RateLimiter(["/motor_command"], hz=10.0)
    assert all(limiter.keep("/decision", t) for t in (0, 1, 2, 3))
    assert limiter.keep("/motor_command", 5_000_000_000)
    assert limiter.keep("/motor_command", 1_000_000_000)          # sim time restarted: kept, not dropped
    assert limiter.dropped == {"/motor_command": 0}


def test_the_default_limits_nothing_and_a_bad_rate_is_refused():
    assert RecorderConfig().rate_limited_topics == []
    with pytest.raises(ValueError, match="rate_limit_hz"):
        RateLimiter(["/x"], hz=0.0)
