"""Property tests: whatever arrives on the inputs, no command exceeds its limit, the router stays up
in a safe state, and each kind of fault is logged once."""
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from action_router.params import make_config
from action_router.router import Router
from router_rig import fault_kind

CFG = make_config()
JOINTS = list(CFG.joints)
WILD = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64),
                 st.sampled_from([0.0, 1e300, -1e300, 1e7, float("nan"), float("inf"), -float("inf")]))
SANE = st.floats(min_value=-3.0, max_value=3.0)
NAMES = st.one_of(st.sampled_from(JOINTS), st.sampled_from(["wheel_left", "", "ARM_ELBOW", "gripper ", "ü"]))


@st.composite
def joint_state(draw):
    names = draw(st.lists(NAMES, min_size=0, max_size=7))
    n = len(names)
    length = lambda: draw(st.sampled_from([n, n, n, 0, max(n - 1, 0), n + 1]))  # noqa: E731
    value = st.one_of(SANE, WILD)
    return ("joint_state", names, [draw(value) for _ in range(length())], [draw(value) for _ in range(length())],
            [draw(value) for _ in range(length())])


@st.composite
def event(draw):
    kind = draw(st.sampled_from(["joint_state", "good_state", "imu", "odom", "wrench", "temperature", "proximity",
                                 "vision", "zone", "decision", "tick", "tick"]))
    if kind == "joint_state":
        return draw(joint_state())
    if kind == "good_state":
        return ("good_state", [draw(SANE) for _ in JOINTS], [draw(SANE) for _ in JOINTS])
    if kind in ("imu", "odom", "wrench", "vision"):
        size = draw(st.sampled_from([3, 3, 5, 2, 0, 8]))
        return (kind, [draw(st.one_of(SANE, WILD)) for _ in range(size)])
    if kind == "temperature":
        return (kind, draw(st.sampled_from(JOINTS + ["nope"])), draw(st.one_of(st.floats(0, 120), WILD)))
    if kind == "proximity":
        return (kind, draw(st.one_of(st.floats(0, 3), WILD)))
    if kind == "zone":
        return (kind, draw(st.sampled_from(["corridor", "warehouse", "door", "mars", ""])))
    if kind == "decision":
        intent = draw(st.sampled_from(["open_door", "pick_object", "move_to", "hold_position", "back_off", "stop",
                                       "dance", "", "OPEN_DOOR"]))
        args = draw(st.dictionaries(st.sampled_from(["speed", "distance", "zone", "object", "bogus"]),
                                    st.one_of(SANE, WILD, st.text(max_size=5), st.booleans(), st.integers()),
                                    max_size=2))
        return (kind, intent, args)
    return ("tick", draw(st.integers(1, 30)))


LOGGED = []
ROUTER = Router(CFG, fault_report=lambda line: LOGGED.append(fault_kind(line)))
CLOCK = [0.0]


def apply(r, ev, now):
    kind = ev[0]
    if kind == "joint_state":
        r.set_joint_state(ev[1], ev[2], ev[3], ev[4], now=now)
    elif kind == "good_state":
        r.set_joint_state(JOINTS, ev[1], ev[2], [], now=now)
    elif kind == "imu":
        r.set_imu(ev[1][:3], ev[1][3:6] if len(ev[1]) >= 6 else ev[1][:3], now=now)
    elif kind == "odom":
        v = (list(ev[1]) + [0.0] * 5)[:5]
        r.set_odom(*v, now=now)
    elif kind == "wrench":
        r.set_wrench(ev[1], now=now)
    elif kind == "vision":
        r.set_vision(ev[1], now=now)
    elif kind == "temperature":
        r.set_temperature(ev[1], ev[2], now=now)
    elif kind == "proximity":
        r.set_proximity(ev[1], now=now)
    elif kind == "zone":
        r.set_zone(ev[1])
    elif kind == "decision":
        r.submit_decision(ev[1], ev[2], now=now)


def check(r):
    assert np.all(np.isfinite(r.command.effort))
    assert np.all(np.abs(r.command.effort) <= r.command.effort_limit + 1e-12)
    assert np.all(r.command.effort_limit <= r.effort_max + 1e-12) and np.all(r.command.effort_limit >= 0)
    assert math.isfinite(r.command.base_vx) and abs(r.command.base_vx) <= float(CFG["base_max_linear"]) + 1e-12
    assert math.isfinite(r.command.base_wz) and abs(r.command.base_wz) <= float(CFG["base_max_angular"]) + 1e-12
    assert np.all(np.isfinite(r.command.reference_position)) and np.all(np.isfinite(r.command.reference_velocity))
    assert r.arbiter.sources["arm"] == r.arbiter.sources["base"] == r.command.source


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(event(), min_size=1, max_size=40))
def test_no_command_ever_exceeds_its_limit_and_the_router_stays_up(events):
    r = ROUTER
    for ev in events:
        apply(r, ev, CLOCK[0])
        if ev[0] == "tick":
            for _ in range(ev[1]):
                CLOCK[0] += 0.001
                r.tick(CLOCK[0])
                check(r)
        elif ev[0] == "good_state":
            CLOCK[0] += 0.001
            r.tick(CLOCK[0])
            check(r)


def test_each_kind_of_fault_was_logged_exactly_once():
    # runs after the property test in this module (same router): many faults, one line per kind
    r = ROUTER
    assert r.faults.total >= len(LOGGED)
    assert len(LOGGED) == len(set(LOGGED)), LOGGED
    assert set(LOGGED) == set(r.faults.counts)


def test_garbage_only_leaves_the_router_in_a_safe_zero_state():
    faults = []
    r = Router(CFG, fault_report=lambda line: faults.append(fault_kind(line)))
    r.submit_decision("open_door")
    for k in range(200):
        r.set_joint_state(JOINTS, [float("nan")] * 5, [0.0] * 5, [], now=k * 0.001)
        r.set_joint_state(JOINTS[:3], [0.0] * 5, [], [], now=k * 0.001)
        r.set_imu([float("inf")] * 3, [0.0] * 3, now=k * 0.001)
        r.tick(k * 0.001)
        check(r)
        assert np.all(r.command.effort == 0.0) and r.command.base_vx == 0.0
    assert sorted(faults) == ["imu_invalid", "joint_state_length", "joint_state_nonfinite"]
    assert r.faults.total == 600
