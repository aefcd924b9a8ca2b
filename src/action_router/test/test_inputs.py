"""Router inputs alone: validation and fault counting, the tick's snapshot, decisions checked against
the catalogue (refused, never clamped), zones, the IMU/wheel slip filter."""
import math

import numpy as np
import pytest

from action_router.inputs import RouterInputs, make_fault_log
from action_router.params import make_config
from router_rig import fault_kind

CFG = make_config()
JOINTS = list(CFG.joints)


def inputs():
    lines = []
    inp = RouterInputs(JOINTS, CFG.catalogue, {"corridor": 0.85, "warehouse": 0.72}, 1.0, make_fault_log(lines.append))
    return inp, lines


def test_valid_joint_states_reach_the_snapshot_and_bad_ones_are_counted_once_per_kind():
    inp, lines = inputs()
    assert inp.set_joint_state(JOINTS, [0.1, 0.2, 0.3, 0.4, 0.01], [1, 2, 3, 4, 5], [], now=1.0, stamp=(7, 9))
    for _ in range(3):
        assert not inp.set_joint_state(JOINTS, [math.nan, 0, 0, 0, 0], now=1.1)
        assert not inp.set_joint_state(JOINTS, [0.0] * 4, now=1.1)
    snap = inp.snapshot()
    assert list(snap.joint_pos) == [0.1, 0.2, 0.3, 0.4, 0.01] and snap.state_stamp == (7, 9)
    assert snap.state_time == 1.0 and snap.state_version == 1 and snap.all_joints_seen
    assert not snap.have_effort.any()
    assert [fault_kind(line) for line in lines] == ["joint_state_nonfinite", "joint_state_length"]
    assert inp.faults.total == 6 and inp.faults.counts["joint_state_length"] == 3


def test_unknown_joint_names_are_ignored_and_known_ones_kept():
    inp, lines = inputs()
    assert inp.set_joint_state(["wheel_left", "arm_elbow"], [5.0, 0.7], now=0.0)
    snap = inp.snapshot()
    assert snap.joint_pos[JOINTS.index("arm_elbow")] == 0.7 and not snap.all_joints_seen
    assert fault_kind(lines[0]) == "joint_state_unknown_joint" and "wheel_left" in lines[0]


def test_joint_names_in_another_order_or_changing_between_messages_are_mapped_each_time():
    # the name -> index mapping is computed once per distinct name list and reused while it repeats
    inp, lines = inputs()
    values = [0.1, 0.2, 0.3, 0.4, 0.01]
    assert inp.set_joint_state(JOINTS, values, values, now=0.0)
    assert list(inp.snapshot().joint_pos) == values
    backwards = JOINTS[::-1]
    for k in range(2):
        assert inp.set_joint_state(backwards, values, values, now=0.1 + k)
        snap = inp.snapshot()
        assert list(snap.joint_pos) == values[::-1] and list(snap.joint_vel) == values[::-1]
    assert inp.set_joint_state(np.array(JOINTS), values, now=3.0)    # any sequence of names
    assert list(inp.snapshot().joint_pos) == values
    assert inp.set_joint_state(JOINTS + ["wheel_left"], [0.5] * 5 + [9.0], now=3.5)   # ours first, then others
    assert list(inp.snapshot().joint_pos) == [0.5] * 5
    assert inp.set_joint_state(["arm_elbow", "wheel_left"], [0.9, 5.0], now=4.0)
    assert inp.snapshot().joint_pos[JOINTS.index("arm_elbow")] == 0.9
    assert not inp.set_joint_state(JOINTS, [0.0, 0.0, math.inf, 0.0, 0.0], now=5.0)
    assert [fault_kind(line) for line in lines] == ["joint_state_unknown_joint", "joint_state_nonfinite"]
    assert inp.faults.counts["joint_state_unknown_joint"] == 2


@pytest.mark.parametrize("intent, args, kind", [
    ("dance", {}, "decision_unknown_intent"),
    ("back_off", {"distance": 5.0}, "decision_bad_argument"),             # out of range: refused, not clamped
    ("back_off", {"distance": float("nan")}, "decision_bad_argument"),
    ("pick_object", {"object": "cat"}, "decision_bad_argument"),
    ("back_off", {"distance": 0.2, "bogus": 1}, "decision_bad_argument"),  # undeclared argument
    ("move_to", {"speed": 0.2}, "decision_missing_argument"),
])
def test_decisions_the_catalogue_refuses_are_counted_and_never_queued(intent, args, kind):
    inp, lines = inputs()
    assert not inp.submit_decision(intent, args)
    assert inp.take_decisions() == [] and [fault_kind(line) for line in lines] == [kind]


def test_valid_decisions_are_queued_in_order_with_typed_arguments():
    inp, _ = inputs()
    assert inp.submit_decision("back_off", {"distance": 1}, trigger=2, now=3.0)     # an int for a float
    assert inp.submit_decision("stop")
    queued = inp.take_decisions()
    assert [(d.intent, d.arguments, d.trigger, d.received) for d in queued] == \
        [("back_off", {"distance": 1.0}, 2, 3.0), ("stop", {}, 0, 0.0)]
    assert isinstance(queued[0].arguments["distance"], float) and inp.take_decisions() == []


def test_a_delayed_decision_starts_at_the_first_tick_after_its_stamp_plus_the_delay():
    lines = []
    inp = RouterInputs(JOINTS, CFG.catalogue, {"corridor": 0.85}, 1.0, make_fault_log(lines.append),
                       decision_delay_s=0.5)
    assert inp.submit_decision("open_door", now=1.2, stamp=1.0)
    assert inp.submit_decision("stop", now=1.3, stamp=1.5)
    assert inp.take_decisions(1.2) == [] and inp.take_decisions(1.5) == []     # t = stamp + delay: not yet
    assert [d.intent for d in inp.take_decisions(1.504)] == ["open_door"]        # the next tick
    assert inp.take_decisions(1.9) == [] and [d.intent for d in inp.take_decisions(2.004)] == ["stop"]
    assert inp.submit_decision("back_off", {"distance": 0.5}, now=2.1)         # unstamped: the next tick
    assert [d.intent for d in inp.take_decisions(2.104)] == ["back_off"]
    assert inp.submit_decision("stop", stamp=3.0) and inp.submit_decision("open_door")
    assert inp.take_decisions(3.2) == []          # a held decision holds the ones behind it: order kept
    assert [d.intent for d in inp.take_decisions(3.504)] == ["stop", "open_door"] and lines == []


@pytest.mark.parametrize("delay", [-0.1, math.inf, math.nan])
def test_a_negative_or_non_finite_decision_delay_is_refused(delay):
    with pytest.raises(ValueError, match="decision_delay_s"):
        make_config({"decision_delay_s": delay})


def test_zone_requests_need_a_threshold():
    inp, lines = inputs()
    assert inp.zone_request is None
    assert inp.set_zone("warehouse") and inp.zone_request == "warehouse"
    assert not inp.set_zone("mars") and inp.zone_request == "warehouse"
    assert fault_kind(lines[0]) == "zone_unknown"


def test_proximity_follows_rep117_and_rejects_nan():
    inp, lines = inputs()
    assert inp.set_proximity(-math.inf) and inp.snapshot().proximity == 0.0
    assert inp.set_proximity(math.inf) and inp.snapshot().proximity == math.inf
    assert not inp.set_proximity(float("nan")) and fault_kind(lines[0]) == "proximity_invalid"


def test_slip_filter_follows_the_wheels_unless_the_imu_disagrees():
    inp, _ = inputs()
    out = {"acc": np.zeros(3), "gyro": np.zeros(3), "speeds": np.zeros(2)}
    inp.set_odom(0.0, 0.0, 0.0, 0.4, 0.0)
    for k in range(500):                                   # 5 s at 100 Hz, no acceleration measured
        inp.set_imu([0.0, 0.0, 9.8], [0.0, 0.0, 0.0], now=k * 0.01)
    inp.imu_buf.read_into(out)
    assert out["speeds"][1] == 0.4 and out["speeds"][0] == pytest.approx(0.4, abs=0.01)
    inp.set_odom(0.0, 0.0, 0.0, 0.0, 0.0)                  # wheels lock; the IMU feels no braking
    for k in range(500, 520):
        inp.set_imu([0.0, 0.0, 9.8], [0.0, 0.0, 0.0], now=k * 0.01)
    inp.imu_buf.read_into(out)
    assert out["speeds"][1] == 0.0 and out["speeds"][0] > 0.3   # the base is still believed to move


def test_temperature_snapshot_is_a_copy_with_unknowns_as_nan():
    inp, lines = inputs()
    assert inp.set_temperature("arm_elbow", 71.5)
    assert not inp.set_temperature("nope", 20.0) and fault_kind(lines[0]) == "temperature_unknown_joint"
    snap = inp.snapshot()
    assert snap.temperature[JOINTS.index("arm_elbow")] == 71.5 and np.isnan(snap.temperature[0])
    inp.set_temperature("arm_elbow", 20.0)
    assert snap.temperature[JOINTS.index("arm_elbow")] == 71.5      # the tick's copy until its next snapshot
