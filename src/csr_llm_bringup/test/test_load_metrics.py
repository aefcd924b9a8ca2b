"""The load bench's plain parts: matching events to decisions, the phase figures, the table, the
follower, the event texts and the profile without the recorder (no DDS, no model)."""
import math
from types import SimpleNamespace

import pytest
import yaml

from csr_llm_bringup.graph import load_profile
from csr_llm_core.event_bursts import CoalescedEvents
from csr_llm_bringup.lab.load_metrics import (DecisionMatcher, PlainFigures, Window, coalesced_count, cpu_shares,
                                              format_table, latency_summary, next_event_result, plain_result,
                                              probe_token, skipped_periodic_of)
from csr_llm_bringup.lab.load_robot import (HOSTILE_KINDS, ONE_MB, STREAMED_HOSTILE, FirstOrderFollower, LoadPlan,
                                            hostile_event_text, operator_line, profile_without, quick_plan)

EVENT, CONTINUOUS, WATERMARK = 0, 1, 2
PERIODIC, BY_EVENT = 0, 1


def test_a_decision_decides_the_event_chunks_in_its_prefix():
    m = DecisionMatcher()
    probe = m.add_probe("plain", probe_token(1), published_at=10.0)
    m.on_chunk(4, CONTINUOUS, "joints moved", 10.1)
    m.on_chunk(5, EVENT, f"[3.0s] events: operator: open the door {probe_token(1)}", 10.2)
    assert probe.chunk_seq == 5 and probe.chunk_at == 10.2
    assert m.on_decision(0, PERIODIC, 4, 10.5) == [] and probe.decided_at is None
    assert m.on_decision(1, PERIODIC, 6, 11.0) == [probe]
    assert probe.latency_s == pytest.approx(1.0) and probe.decision_id == 1


def test_an_event_decision_decides_the_oldest_waiting_event_without_holding_it_in_its_prefix():
    m = DecisionMatcher()
    first = m.add_probe("plain", probe_token(1), 0.0)
    second = m.add_probe("plain", probe_token(2), 0.5)
    m.on_chunk(7, EVENT, f"a {probe_token(1)}", 0.1)
    m.on_chunk(9, EVENT, f"b {probe_token(2)}", 0.6)
    assert m.on_decision(3, BY_EVENT, 2, 1.0) == [first]       # decided on cached chunks, the event in its suffix
    assert second.decided_at is None
    assert m.on_decision(4, BY_EVENT, 2, 1.7) == [second]
    assert second.latency_s == pytest.approx(1.2)


def test_an_earlier_events_decision_never_decides_a_later_probe():
    m = DecisionMatcher()
    m.on_chunk(3, EVENT, "burst line 1", 0.0)
    m.on_chunk(4, EVENT, "burst line 2", 0.0)
    probe = m.add_probe("burst", probe_token(9), 1.0)
    m.on_chunk(5, EVENT, f"x {probe_token(9)}", 1.1)
    assert m.waiting_events == 3
    m.on_decision(0, BY_EVENT, 1, 1.5)
    m.on_decision(1, BY_EVENT, 1, 2.0)
    assert probe.decided_at is None and m.waiting_events == 1
    m.on_decision(2, BY_EVENT, 1, 2.5)
    assert probe.latency_s == pytest.approx(1.5) and m.waiting_events == 0


def test_a_chunk_seen_after_the_decision_that_held_it_counts_as_decided_on_arrival():
    m = DecisionMatcher()
    probe = m.add_probe("plain", probe_token(1), 0.0)
    m.on_decision(0, PERIODIC, 12, 0.4)
    m.on_chunk(11, EVENT, f"late {probe_token(1)}", 0.5)
    assert probe.latency_s == pytest.approx(0.5)


def test_an_event_never_seen_as_a_chunk_stays_undecided():
    m = DecisionMatcher()
    probe = m.add_probe("hostile:event_1mb", probe_token(1), 0.0)
    m.on_chunk(2, EVENT, "someone else's event", 0.1)
    m.on_decision(0, BY_EVENT, 2, 0.3)
    assert probe.decided_at is None and probe.latency_s is None
    assert next_event_result(probe) == {"next_event_s": None, "decided": False}
    assert next_event_result(None) == {"next_event_s": None, "decided": False}
    assert m.of_label("hostile:event_1mb") == [probe]


def test_coalesced_counts_and_skipped_periodic_from_the_status():
    text = CoalescedEvents("events", 37, 24, 25, 25, (("shelf sensor # blocked", 37),)).text(0.5)
    assert coalesced_count(text) == 37
    assert coalesced_count("[1.0s] events: operator: 37 more events") == 0
    assert skipped_periodic_of(SimpleNamespace(backlog_chunks=3)) is None
    assert skipped_periodic_of(SimpleNamespace(skipped_periodic=4)) == 4


def test_latency_summary_uses_the_shared_percentile():
    assert latency_summary([]) == {"p50": None, "p99": None, "max": None}
    summary = latency_summary([0.2, 0.4, 0.6, 0.8, 10.0])
    assert summary["p50"] == 0.6 and summary["max"] == 10.0
    assert summary["p99"] == pytest.approx(9.632)


def plain_figures():
    m = DecisionMatcher()
    decided = m.add_probe("plain", "t1", 1.0)
    missed = m.add_probe("plain", "t2", 5.0)
    m.on_chunk(1, EVENT, "e t1", 1.1)
    m.on_chunk(2, EVENT, "e t2", 5.1)
    m.on_decision(0, BY_EVENT, 0, 1.5)
    window = Window(0.0, 10.0)
    return PlainFigures(window, [decided, missed], decision_times=[0.5, 1.5, 2.5, 12.0],
                        loop_hz=[(-1.0, 0.0), (1.0, 998.0), (6.0, 990.5), (11.0, 10.0)],
                        skipped_periodic=[(1.0, 3.0), (9.0, 7.0)], backlog=[(2.0, 1.0), (4.0, 12.0)],
                        cpu={"reasoning": 0.6})


def test_plain_result_in_the_issues_format():
    result = plain_result(plain_figures())
    assert result["event_to_decision_s"] == {"p50": 0.5, "p99": 0.5, "max": 0.5}
    assert result["decisions_per_s"] == 0.3          # three decisions in the 10 s window
    assert result["loop_hz_min"] == 990.5             # samples outside the window ignored
    assert result["skipped_periodic"] == 4
    assert (result["events"], result["undecided"], result["backlog_max"]) == (2, 1, 12)
    assert result["cpu"] == {"reasoning": 0.6}
    figures = plain_figures()
    figures.skipped_periodic = [(1.0, None)]
    assert plain_result(figures)["skipped_periodic"] is None


def test_cpu_shares_and_table():
    assert cpu_shares({"router": 30.0, "reasoning": 33.0}, 60.0) == {"reasoning": 0.55, "router": 0.5}
    assert cpu_shares({"router": 1.0}, 0.0) == {}
    results = {"recorder_on": {"plain": plain_result(plain_figures()),
                               "burst": {"next_event_s": 2.5, "decided": True, "coalesced": 4900},
                               "hostile": {"event_1mb": {"next_event_s": None, "decided": False},
                                           "prompt_injection": {"next_event_s": 1.25, "decided": True,
                                                                "events_queued_before": 7}}}}
    table = format_table(results)
    assert "recorder_on: plain: event -> decision p50 / p99 / max" in table
    assert "1 of 2" in table and "4900" in table and "not decided" in table and "990.5 Hz" in table
    assert "1.25 s (7 earlier events still queued)" in table


def test_follower_tracks_the_reference_and_holds_where_it_has_none():
    follower = FirstOrderFollower(3, tau_s=0.05, start=0.0)
    follower.set_reference([1.0, math.nan, -1.0, 5.0])          # one too many: ignored
    for _ in range(200):                                         # 1 s at 200 Hz: 20 time constants
        positions, velocities = follower.step(0.005)
    assert positions[0] == pytest.approx(1.0, abs=1e-6) and positions[1] == 0.0
    assert positions[2] == pytest.approx(-1.0, abs=1e-6) and abs(velocities[0]) < 1e-3
    follower = FirstOrderFollower(1, tau_s=0.05, start=0.0)
    follower.set_reference([1.0])
    positions, velocities = follower.step(0.05)
    assert positions[0] == pytest.approx(1 - math.exp(-1)) and velocities[0] == pytest.approx(positions[0] / 0.05)


def test_event_texts_and_plans():
    assert set(HOSTILE_KINDS) == set(STREAMED_HOSTILE) | {"event_1mb", "prompt_injection"}
    assert len(hostile_event_text("event_1mb")) == ONE_MB
    assert "IGNORE ALL PREVIOUS INSTRUCTIONS" in hostile_event_text("prompt_injection")
    with pytest.raises(ValueError):
        hostile_event_text("nan_joint_states")
    assert operator_line(3, probe_token(3)).endswith("(ref 3)")
    quick = quick_plan()
    assert quick.plain_s < LoadPlan().plain_s and set(quick.hostile_kinds) <= set(HOSTILE_KINDS)


def test_profile_without_the_recorder_loads_the_same_nodes_from_another_folder(tmp_path):
    path = profile_without("robot", "recorder", tmp_path / "robot_without_recorder.yaml")
    full, copy = load_profile("robot"), load_profile(path)
    assert [s.name for s in copy.nodes] == [s.name for s in full.nodes if s.name != "recorder"]
    for spec in copy.nodes:
        assert spec.parameters == full.node(spec.name).parameters, spec.name
    assert yaml.safe_load(path.read_text())["use_sim_time"] is False
    with pytest.raises(ValueError):
        profile_without("robot", "no_such_node", tmp_path / "x.yaml")


def test_variants_are_parsed_with_their_overrides_and_bad_ones_refused():
    from csr_llm_bringup.lab.bench_load import parse_args
    args = parse_args(["--variant", 'pinned:action_router.cpu_affinity="1"; reasoning.cpu_affinity="0"'])
    assert args.variant == [("pinned", ['action_router.cpu_affinity="1"', 'reasoning.cpu_affinity="0"'])]
    for bad in ("pinned", "pinned:", ":a.b=1", "recorder_off:a.b=1", "pinned:a.b"):
        with pytest.raises(SystemExit):
            parse_args(["--variant", bad])
