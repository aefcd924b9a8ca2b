"""When the router node ticks (tick_source), the key grid on state time, the loop rate."""
import math

import pytest

from action_router.tick_schedule import LoopRate, TickSchedule


@pytest.mark.parametrize("source, on_state, timer, fills, takes", [
    ("timer", False, True, False, False),
    ("joint_states", True, False, False, True),
    ("state_or_timer", True, True, True, False),
])
def test_each_tick_source_picks_its_events(source, on_state, timer, fills, takes):
    s = TickSchedule(source, 1000.0, 30.0)
    assert (s.tick_on_state, s.uses_timer, s.timer_fills_gaps, s.take_before_tick) == (on_state, timer, fills, takes)
    assert s.period == pytest.approx(0.001)


def test_the_timer_only_fills_gaps_under_state_or_timer():
    s = TickSchedule("state_or_timer", 100.0, 30.0)
    s.ticked(10.0)
    assert not s.timer_due(10.005) and s.timer_due(10.011)
    t = TickSchedule("timer", 100.0, 30.0)
    t.ticked(10.0)
    assert t.timer_due(10.001)


def test_a_resent_or_older_state_opens_no_new_period():
    s = TickSchedule("joint_states", 1000.0, 30.0)
    assert s.new_state(1.0) and not s.new_state(1.0) and not s.new_state(0.5) and s.new_state(1.001)


def test_the_key_updates_on_a_fixed_grid_of_state_time():
    s = TickSchedule("joint_states", 1000.0, 10.0)
    times = [t / 1000 + 0.0005 for t in range(1050, 1400)]     # between grid points: no rounding edge
    due = [t for t in times if s.key_due(t)]
    assert due == pytest.approx([1.0505, 1.1005, 1.2005, 1.3005])


def test_the_loop_rate_counts_ticks_per_window_of_a_second():
    rate = LoopRate(0.0)
    for k in range(1, 501):
        rate.tick(k * 0.002)
    assert rate.ticks == 500 and rate.hz == pytest.approx(500.0)
    rate.restart(5.0)
    assert rate.ticks == 0 and rate.hz == pytest.approx(500.0) and not math.isnan(rate.hz)
