"""Event bursts (plain module): what passes, what is held, when it is coalesced, nothing lost."""
import pytest

from csr_llm_core.event_bursts import EventBursts, event_kind


def _run(bursts, events):
    """(stamp, text) events -> (passed texts, coalesced summaries) after every window closed."""
    passed, out = [], []
    for stamp, text in events:
        due, alone = bursts.admit("events", text, stamp)
        out.extend(due)
        if alone:
            passed.append(text)
    out.extend(bursts.close())
    return passed, out


def test_an_order_during_a_flood_passes_and_the_flood_is_one_chunk_per_period():
    bursts = EventBursts(max_per_window=2, window_s=0.5, chunk_period_s=1.0)
    flood = [(i * 0.01, f"flood {i}") for i in range(200)]            # 2 s at 100/s
    order = [(0.905, "operator: stop"), (0.906, "operator: go"), (0.907, "operator: stop")]
    passed, out = _run(bursts, sorted(flood + order) + [(2.1, "operator: wait")])
    # one event of a kind the flood has not shown passes per window; the rest is held
    assert passed == ["flood 0", "flood 1", "operator: stop", "operator: wait"]
    coalesced = [c for c in out if not c.released]
    assert sum(c.count for c in coalesced) == 198 + 2 == bursts.coalesced_total
    assert not [c for c in out if c.released]
    # first window, then one per 1 s (two windows) while the burst lasts
    assert [(c.first_window, c.last_window, c.closing_window) for c in coalesced] == \
        [(0, 0, 0), (1, 2, 2), (3, 3, 4)]
    assert coalesced[0].kinds == (("flood #", 48),)


def test_after_a_flood_its_last_few_held_events_come_out_as_they_were():
    bursts = EventBursts(max_per_window=2, window_s=0.5, chunk_period_s=1.0)
    flood = [(i * 0.01, f"flood {i}") for i in range(100)]            # 1 s at 100/s
    passed, out = _run(bursts, flood + [(1.1, "flood 999")])           # same kind, in the next window
    assert passed == ["flood 0", "flood 1"] and out[-1].released == ("flood 999",)
    assert bursts.coalesced_total == 98


def test_quiet_traffic_is_never_held_and_zero_disables_coalescing():
    bursts = EventBursts(max_per_window=3, window_s=0.5, chunk_period_s=1.0)
    events = [(i * 0.2, f"e{i}") for i in range(20)]                   # 5/s: <= 3 per window
    assert _run(bursts, events) == ([f"e{i}" for i in range(20)], [])
    off = EventBursts(max_per_window=0, window_s=0.5)
    assert not off.enabled
    with pytest.raises(ValueError, match="event_window"):
        EventBursts(max_per_window=3, window_s=0.0)


def test_event_kind_masks_numbers_and_is_bounded():
    assert event_kind("sensor 3 at -1.5 m, 20 C") == "sensor # at # m, # C"
    assert len(event_kind("y" * 500)) == 63
