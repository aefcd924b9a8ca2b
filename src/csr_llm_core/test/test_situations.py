"""Sensed situation lines (situations.py): thresholds, hysteresis, no flapping, impossible readings
ignored, sensor stamps, wording from config; and the aggregator's sensed chunks."""
import math

import pytest
import yaml

from csr_llm_common.paths import config_file
from csr_llm_core.aggregator import KIND_CONTINUOUS, KIND_EVENT, SENSED_TOPIC, Aggregator, TopicSpec
from csr_llm_core.situations import (RangeSample, RouterReport, RouterSample, SituationMonitor, TemperatureSample,
                                     WrenchSample, ZoneSample)
from csr_llm_core.situations_config import (SensedParameters, SituationsConfig, load_situations,
                                            situations_from_mapping)


def texts(monitor, samples):
    return [line.text for sample in samples for line in monitor.take(sample)]


def ranges(*pairs):
    return [RangeSample(t, d, 0.0, 5.0) for t, d in pairs]


# ---------------------------------------------------------------- proximity

def test_a_person_approaching_close_moving_away_and_gone():
    m = SituationMonitor()
    lines = [line for s in ranges((0.0, math.inf), (1.0, 1.8), (2.5, 0.55), (4.0, 1.2), (6.0, 3.0))
             for line in m.take(s)]
    assert [line.text for line in lines] == ["person approaching (1.8 m)", "person close to the robot (0.55 m)",
                                             "person moving away (1.2 m)", "person gone"]
    assert [line.stamp for line in lines] == [1.0, 2.5, 4.0, 6.0]      # the readings' sensor stamps
    assert {line.kind for line in lines} == {"proximity"}


def test_proximity_hysteresis_keeps_close_until_past_the_band():
    m = SituationMonitor()
    assert texts(m, ranges((0.0, 0.5), (2.0, 0.75), (4.0, 0.79))) == ["person close to the robot (0.50 m)"]
    assert texts(m, ranges((6.0, 0.81))) == ["person moving away (0.8 m)"]
    assert texts(m, ranges((8.0, 2.1), (10.0, 2.19))) == []              # near until past 2.2 m
    assert texts(m, ranges((12.0, math.inf))) == ["person gone"]


def test_a_distance_flapping_at_the_threshold_gives_one_line_per_interval():
    m = SituationMonitor()
    flapping = [(0.1 * i, 0.3 if i % 2 else 1.0) for i in range(40)]   # 4 s, 10 Hz, across 0.6 and its band
    lines = texts(m, ranges(*flapping))
    assert len(lines) <= 4 + 1     # min_interval_s 1.0 over 4 s
    assert lines[:2] == ["person approaching (1.0 m)", "person close to the robot (0.30 m)"]


def test_a_change_inside_the_interval_is_reported_once_the_interval_passed():
    m = SituationMonitor()
    assert texts(m, ranges((0.0, 0.5), (0.5, 3.0))) == ["person close to the robot (0.50 m)"]
    assert texts(m, ranges((0.9, 3.0))) == []
    assert texts(m, ranges((1.0, 3.0))) == ["person gone"]


def test_impossible_ranges_never_make_a_line():
    m = SituationMonitor()
    assert texts(m, [RangeSample(0.0, math.nan, 0.0, 5.0), RangeSample(1.0, -0.3, 0.0, 5.0),
                     RangeSample(2.0, 7.0, 0.0, 5.0)]) == []
    assert m.faults.counts == {"sensed:proximity:nonfinite": 1, "sensed:proximity:impossible": 2}
    assert texts(m, [RangeSample(3.0, -math.inf, 0.1, 5.0)]) == ["person close to the robot (0.10 m)"]


def test_out_of_order_and_non_finite_stamps_are_ignored():
    m = SituationMonitor()
    assert texts(m, ranges((5.0, 3.0))) == []
    assert texts(m, ranges((4.0, 0.4))) == []
    assert texts(m, [RangeSample(math.inf, 0.4)]) == []
    assert m.faults.counts["sensed:stamp"] == 1


# ---------------------------------------------------------------- grip, tasks

def status(intent="", sub_task="", **kw):
    return RouterSample(active_intent=intent, active_sub_task=sub_task, **kw)


def router(t, intent="", sub_task="", **kw):
    return RouterReport(t, status(intent, sub_task, **kw))


def wrench(t, fz):
    return WrenchSample(t, (0.0, 0.0, fz), (0.0, 0.0, 0.0))


def test_an_object_gripped_lifted_and_the_pick_task_done():
    m = SituationMonitor()
    out = texts(m, [router(0.0, "pick_object", "reach_shelf"), router(1.5, "pick_object", "grip_object"),
                    wrench(1.6, 20.0), wrench(1.7, 20.0), wrench(1.8, 20.0),
                    router(2.0, "pick_object", "lift_object"), router(3.0, "", "hold")])
    assert out == ["sub-task reach_shelf of pick_object done", "object gripped (20 N)",
                   "sub-task grip_object of pick_object done", "object lifted (20 N held); task pick_object done"]
    assert texts(m, [wrench(3.5, 1.0), wrench(3.8, 1.0)]) == ["object released"]


def test_a_grip_lost_while_its_task_runs_is_a_drop_and_the_pick_fails():
    m = SituationMonitor()
    texts(m, [router(0.0, "pick_object", "grip_object"), wrench(0.1, 18.0), wrench(0.4, 18.0),
              router(0.5, "pick_object", "lift_object")])
    assert texts(m, [wrench(0.6, 2.0), wrench(0.7, 2.0), wrench(0.9, 2.0)]) == ["object dropped (grip force 2 N)"]
    assert texts(m, [router(1.5, "", "hold")]) == \
        ["task pick_object failed at sub-task lift_object (nothing held, grip force 2 N)"]


def test_the_door_handle_is_named_by_the_grip_sub_task_and_the_door_task_end_says_the_door_is_open():
    m = SituationMonitor()
    out = texts(m, [router(0.0, "open_door", "door_handle_grip"), wrench(0.1, 25.0), wrench(0.4, 25.0),
                    router(0.5, "open_door", "pull_door"), router(2.5, "", "hold")])
    assert out == ["door handle gripped (25 N)", "sub-task door_handle_grip of open_door done",
                   "the door is open; task open_door done"]


def test_a_grip_force_between_the_thresholds_or_too_short_changes_nothing():
    m = SituationMonitor()
    assert texts(m, [wrench(0.0, 10.0), wrench(0.5, 10.0), wrench(0.6, 20.0), wrench(0.7, 0.0)]) == []
    assert texts(m, [WrenchSample(1.0, (math.nan, 0.0, 0.0)), WrenchSample(1.5, (0.0, 0.0, 1e6))]) == []
    assert set(m.faults.counts) == {"sensed:wrench:nonfinite", "sensed:wrench:impossible"}


def test_task_failures_pauses_replacements_and_interrupts():
    m = SituationMonitor()
    assert texts(m, [router(0.0, "move_to", "drive_to_zone"),
                     router(1.0, "", "retreat_1m", unknown_scene_count=1)]) == \
        ["task move_to failed at sub-task drive_to_zone (unknown scene)"]
    assert texts(m, [router(2.0, "open_door", "approach_handle"),
                     router(3.0, "open_door", "approach_handle", failsafe_count=1)]) == \
        ["task open_door failed at sub-task approach_handle (fail-safe stop)"]
    # a pause, a replacement and an interrupt frame: the reasoning or the router's reflex did it
    assert texts(m, [router(4.0, "hold_position", "hold", paused_intent="open_door", failsafe_count=1),
                     router(5.0, "move_to", "drive_to_zone", failsafe_count=1),
                     router(6.0, "move_to", "retreat_10cm", interrupt_depth=1, failsafe_count=1),
                     router(7.0, "move_to", "freeze", interrupt_depth=1, failsafe_count=1),
                     router(8.0, "move_to", "drive_to_zone", failsafe_count=1)]) == []


# ---------------------------------------------------------------- zone, temperature, slip

def test_arrivals_in_a_zone_after_their_dwell_not_the_start_zone():
    m = SituationMonitor()
    assert texts(m, [ZoneSample(t, "door") for t in (0.0, 0.3, 0.6, 1.0)]) == []
    assert texts(m, [ZoneSample(3.0, "corridor"), ZoneSample(3.2, "door"), ZoneSample(3.4, "corridor")]) == []
    assert texts(m, [ZoneSample(t, "warehouse") for t in (4.0, 4.2, 4.6)]) == ["arrived in the warehouse"]
    assert texts(m, [ZoneSample(t, "door") for t in (5.0, 5.6)]) == []                 # 2 s interval
    assert texts(m, [ZoneSample(6.7, "door")]) == ["arrived at the door"]
    assert texts(m, [ZoneSample(8.0, "  ")]) == []


def temps(motor, *pairs):
    return [TemperatureSample(t, c, motor) for t, c in pairs]


def test_a_motor_heating_over_its_limit_and_cooled():
    m = SituationMonitor()
    out = texts(m, temps("arm_shoulder_lift", (0.0, 40.0), (1.0, 56.0), (3.0, 71.0), (5.0, 68.0), (7.0, 64.0),
                         (9.0, 49.0)))
    assert out == ["motor arm_shoulder_lift is heating up (56 C)", "motor arm_shoulder_lift above 70 C (71 C)",
                   "motor arm_shoulder_lift cooled down (64 C)"]
    assert texts(m, temps("arm_elbow", (10.0, 56.0), (12.0, 50.0))) == \
        ["motor arm_elbow is heating up (56 C)", "motor arm_elbow cooled down (50 C)"]


def test_a_temperature_flapping_at_the_limit_gives_at_most_one_line_per_interval():
    m = SituationMonitor()
    out = texts(m, temps("wrist", *[(0.1 * i, 71.0 if i % 2 else 64.0) for i in range(60)]))
    assert len(out) <= 3 + 1
    assert texts(m, temps("wrist", (20.0, 300.5), (21.0, math.nan), (22.0, -150.0))) == []
    assert {"sensed:temperature:impossible", "sensed:temperature:nonfinite"} <= set(m.faults.counts)


def test_slipping_and_back_on_grip_from_the_routers_flag():
    m = SituationMonitor()
    out = texts(m, [router(0.1 * i, slip_detected=True) for i in range(4)])
    assert out == ["base slipping (wheels and IMU disagree)"]
    assert texts(m, [router(0.5, slip_detected=False), router(1.0, slip_detected=True),
                     router(1.1, slip_detected=False), router(1.6, slip_detected=False)]) == []   # regain_s 1.0
    assert texts(m, [router(2.1, slip_detected=False)]) == []      # min_interval_s 2.0 from 0.2 s
    assert texts(m, [router(2.2, slip_detected=False)]) == ["base back on grip"]


def test_the_routers_reflexes_starting_and_clearing_each_say_one_line_naming_the_task():
    m = SituationMonitor()
    reports = [router(0.0, "pick_object", "reach_shelf"),
               router(0.1, "pick_object", "freeze", interrupt_depth=1, active_reflexes=("temperature_high",)),
               router(0.2, "pick_object", "freeze", interrupt_depth=1, active_reflexes=("temperature_high",)),
               router(0.3, "pick_object", "freeze", interrupt_depth=2,
                      active_reflexes=("temperature_high", "person_close")),
               router(0.4, "pick_object", "reach_shelf", active_reflexes=())]
    assert texts(m, reports) == [
        "reflex: holding for a motor over its limit; task pick_object resumes by itself",
        "reflex: holding for a person close; task pick_object resumes by itself",
        "reflex cleared (a motor over its limit); task pick_object resumes",
        "reflex cleared (a person close); task pick_object resumes"]
    idle = SituationMonitor()
    assert texts(idle, [router(0.0, active_reflexes=("contact",)), router(0.5, active_reflexes=("mystery",))]) == [
        "reflex: holding for an unexpected contact", "reflex: holding for mystery",
        "reflex cleared (an unexpected contact)"]


# ---------------------------------------------------------------- config

def test_wording_thresholds_and_rates_come_from_config():
    config = situations_from_mapping({
        "proximity": {"close_m": 1.0, "wording": {"close": "someone within {distance:.1f} m"}},
        "zone": {"announce_initial": True, "dwell_s": 0}})
    m = SituationMonitor(config)
    assert texts(m, ranges((0.0, 0.9))) == ["someone within 0.9 m"]
    assert texts(m, [ZoneSample(0.0, "corridor")]) == ["arrived in the corridor"]


def test_the_shipped_file_holds_the_defaults():
    assert load_situations(config_file("situations.yaml")) == SituationsConfig()


@pytest.mark.parametrize("data, message", [
    ({"proximity": {"close": 1.0}}, "proximity.close: unknown key"),
    ({"weather": {}}, "unknown section 'weather'"),
    ({"grip": {"grip_n": -1}}, "grip.grip_n: expected a number >= 0"),
    ({"grip": {"wording": {"gripped": "{thing} gripped"}}}, "grip.wording.gripped"),
    ({"proximity": {"close_m": 3.0}}, "close_m must be below approach_m"),
])
def test_a_bad_situations_file_is_refused_with_one_clear_line(data, message):
    with pytest.raises(ValueError, match=message):
        situations_from_mapping(data)


# ---------------------------------------------------------------- the aggregator's sensed chunks

def test_sensed_lines_are_held_to_their_windows_close_and_released_sorted_with_their_sensor_stamp():
    agg = Aggregator([TopicSpec("odom", "odometry", 1.0, 0.0)], watermark_period=0.5, max_lag_s=5.0)
    odom = {"x": 0.0, "y": 0.0, "yaw": 0.0, "v": 0.0, "w": 0.0}
    agg.take_sample("odom", odom, 10.0)
    agg.take_sample("odom", odom, 12.5)
    # arrival order is a race between topics (a temperature, the router's reflex it caused): held
    assert agg.on_sensed("reflex: holding for a person close", 12.7) == []
    assert agg.on_sensed("person close to the robot (0.55 m)", 12.7) == []
    assert agg.on_sensed("person gone", 12.2) == []           # behind the open window: at its start
    with pytest.raises(ValueError, match="behind the stream"):
        agg.on_sensed("base back on grip", 1.0)
    released = [c for c in agg.take_sample("odom", odom, 13.0) if c.kind == KIND_EVENT]
    assert [(c.source_topic, c.stamp, c.text) for c in released] == [
        (SENSED_TOPIC, 12.5, "[12.5s] sensed: person gone"),
        (SENSED_TOPIC, 12.7, "[12.7s] sensed: person close to the robot (0.55 m)"),
        (SENSED_TOPIC, 12.7, "[12.7s] sensed: reflex: holding for a person close")]
    assert [c.seq for c in released] == list(range(released[0].seq, released[0].seq + 3))


def test_held_sensed_lines_go_out_by_the_clock_when_no_sample_closes_their_window():
    agg = Aggregator([TopicSpec("odom", "odometry", 1.0, 0.0)], watermark_period=0.5, max_lag_s=5.0)
    agg.take_sample("odom", {"x": 0.0, "y": 0.0, "yaw": 0.0, "v": 0.0, "w": 0.0}, 12.5)
    assert agg.on_sensed("task move_to done", 12.6) == []
    assert agg.release_stale_sensed(13.5) == []                     # within two windows: a sample may come
    (chunk,) = agg.release_stale_sensed(13.7)
    assert (chunk.source_topic, chunk.stamp, chunk.text) == (SENSED_TOPIC, 12.6, "[12.6s] sensed: task move_to done")
    assert agg.release_stale_sensed(20.0) == []


def test_sensed_state_lines_go_out_with_the_windows_summaries_and_events_after_them():
    agg = Aggregator([TopicSpec("odom", "odometry", 1.0, 0.0)], watermark_period=0.5, max_lag_s=5.0)
    odom = {"x": 0.0, "y": 0.0, "yaw": 0.0, "v": 0.0, "w": 0.0}
    agg.take_sample("odom", odom, 12.5)
    assert agg.on_sensed("reflex: holding for a person close", 12.6, event=False) == []
    assert agg.on_sensed("person close to the robot (0.55 m)", 12.6, event=False) == []
    assert agg.on_sensed("task move_to done", 12.7) == []
    out = [c for c in agg.take_sample("odom", odom, 13.0) if c.source_topic == SENSED_TOPIC]
    assert [(c.kind, c.text) for c in out] == [
        (KIND_CONTINUOUS, "[12.6s] sensed: person close to the robot (0.55 m)"),
        (KIND_CONTINUOUS, "[12.6s] sensed: reflex: holding for a person close"),
        (KIND_EVENT, "[12.7s] sensed: task move_to done")]
    assert agg.on_sensed("object gripped (20 N)", 13.1, event=False) == []
    (late,) = agg.release_stale_sensed(14.2)                # no sample closed its window
    assert (late.kind, late.text) == (KIND_CONTINUOUS, "[13.1s] sensed: object gripped (20 N)")


def test_which_sensed_lines_are_events_comes_from_config():
    assert SituationsConfig().events.kinds == ["task", "zone"]
    with pytest.raises(ValueError, match="events.kinds: unknown weather"):
        situations_from_mapping({"events": {"kinds": ["task", "weather"]}})
    m = SituationMonitor()
    kinds = [line.kind for r in [router(0.0, "pick_object", "reach_shelf"), router(0.5, "pick_object", "grip_object"),
                                 router(1.0, "", "")] for line in m.take(r)]
    assert kinds == ["sub_task", "task"]


def test_sensed_lines_without_watermarks_keep_their_stamp():
    agg = Aggregator([TopicSpec("odom", "odometry", 1.0, 0.0)])
    agg.take_sample("odom", {"x": 0.0, "y": 0.0, "yaw": 0.0, "v": 0.0, "w": 0.0}, 3.0)
    (chunk,) = agg.on_sensed("arrived in the warehouse", 2.75)
    assert chunk.stamp == 2.75 and chunk.text == "[2.8s] sensed: arrived in the warehouse"


# ---------------------------------------------------------------- staging

@pytest.mark.parametrize("profile, on", [("sim", True), ("replay", True), ("robot", True), ("robot_remote", True)])
def test_sensed_lines_are_on_in_every_profile_that_runs_the_graph(profile, on):
    nodes = yaml.safe_load(config_file(f"{profile}.yaml").read_text())["nodes"]
    (aggregator,) = [n for n in nodes if n["name"] == "aggregator"]
    files = [yaml.safe_load(config_file(f).read_text()) for f in aggregator.get("parameter_files", [])]
    from_files = [p for f in files for section in f.values() for p in [section.get("ros__parameters", {})]]
    value = (aggregator.get("parameters") or {}).get("sensed_lines", SensedParameters().sensed_lines)
    assert value is on and all("sensed_lines" not in p for p in from_files)
