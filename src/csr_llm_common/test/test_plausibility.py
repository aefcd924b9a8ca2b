"""The physical bounds both the aggregator and the router apply: each impossible reading refused
with its kind, every plausible one passed; names bounded with the cut marked."""
import math

import numpy as np
import pytest

from csr_llm_common.plausibility import (IMPOSSIBLE, MAX_NAME_CHARS, MOTOR_TEMPERATURE_MAX_C, NONFINITE,
                                         TRUNCATION_MARK, JointLimits, bounded_name, joint_refusal,
                                         range_refusal, temperature_refusal, wrench_refusal)


@pytest.mark.parametrize("celsius, kind, why", [
    (-300.0, IMPOSSIBLE, "below absolute zero"),
    (-273.16, IMPOSSIBLE, "below absolute zero"),
    (-150.0, IMPOSSIBLE, "below -100 C"),
    (MOTOR_TEMPERATURE_MAX_C + 0.1, IMPOSSIBLE, "above 300 C"),
    (1e300, IMPOSSIBLE, "above"),
    (math.nan, NONFINITE, "non-finite"),
    (-math.inf, NONFINITE, "non-finite"),
])
def test_impossible_motor_temperatures_are_refused_with_their_kind(celsius, kind, why):
    refusal = temperature_refusal(celsius)
    assert refusal is not None and refusal.kind == kind and why in str(refusal)


@pytest.mark.parametrize("celsius", [-40.0, 0.0, 25.0, 70.0, 180.0, MOTOR_TEMPERATURE_MAX_C])
def test_plausible_motor_temperatures_pass(celsius):
    assert temperature_refusal(celsius) is None


@pytest.mark.parametrize("distance, bounds, kind", [
    (math.nan, (), NONFINITE),
    (-0.5, (), IMPOSSIBLE),
    (-1e-9, (0.0, 5.0), IMPOSSIBLE),
    (7.0, (0.0, 5.0), IMPOSSIBLE),           # finite beyond max_range: REP 117 says +inf
    (0.01, (0.05, 5.0), IMPOSSIBLE),         # finite below min_range: REP 117 says -inf
])
def test_impossible_ranges_are_refused(distance, bounds, kind):
    refusal = range_refusal(distance, *bounds)
    assert refusal is not None and refusal.kind == kind


@pytest.mark.parametrize("distance, bounds", [
    (0.0, ()), (0.5, ()), (50.0, ()),                 # no interval set: any finite distance >= 0
    (math.inf, (0.0, 5.0)), (-math.inf, (0.0, 5.0)),  # REP 117: nothing in range / too close
    (5.0, (0.0, 5.0)), (0.05, (0.05, 5.0)),           # the interval's ends are inside
    (9.0, (0.0, 0.0)), (9.0, (math.nan, math.nan)),   # an unset interval is not applied
])
def test_plausible_ranges_pass(distance, bounds):
    assert range_refusal(distance, *bounds) is None


def test_wrenches_beyond_physics_are_refused():
    assert wrench_refusal((0.0, 0.0, 20.0), (0.1, 0.0, 0.0)) is None
    assert wrench_refusal((math.nan, 0.0, 0.0)).kind == NONFINITE
    assert wrench_refusal((0.0, 0.0, 0.0), (math.inf, 0.0, 0.0)).kind == NONFINITE
    assert wrench_refusal((1e300, 0.0, 0.0)).kind == IMPOSSIBLE
    assert wrench_refusal((0.0, 0.0, 0.0), (0.0, 0.0, 1e6)).kind == IMPOSSIBLE


def test_joint_values_beyond_the_generic_bounds_are_refused():
    assert joint_refusal([0.1, -2.0], [1.0, 0.0], [5.0, 5.0]) is None
    assert joint_refusal([math.nan]).kind == NONFINITE
    assert joint_refusal([1e300]).kind == IMPOSSIBLE
    refusal = joint_refusal([0.0], [5e4])
    assert refusal.kind == IMPOSSIBLE and "velocity" in refusal.reason
    assert joint_refusal([0.0], [0.0], [-1e9]).kind == IMPOSSIBLE


def test_joint_limits_from_a_description_allow_overshoot_but_not_the_impossible():
    # two joints: an arm joint in [-2, 2] rad at 1.5 rad/s, 60 N m; a gripper in [0, 0.08] m
    limits = JointLimits.from_description([-2.0, 0.0], [2.0, 0.08], [1.5, 0.2], [60.0, 25.0])
    everything = slice(None)
    ok = np.array([2.3, -0.01]), np.array([3.0, 0.5]), np.array([-90.0, 30.0])
    assert limits.refusal(everything, *ok) is None                       # overshoot, an impact: plausible
    assert limits.refusal(everything, np.array([6.5, 0.0])) is not None  # beyond its travel past the limit
    assert limits.refusal(everything, np.array([0.0, 0.0]), np.array([16.0, 0.0])) is not None
    assert limits.refusal(everything, np.array([0.0, 0.0]), None, np.array([0.0, -251.0])) is not None
    assert limits.refusal(everything, np.array([math.nan, 0.0])) is not None
    # a message naming only the gripper: its values are checked against the gripper's bounds
    refusal = limits.refusal([1], np.array([0.3]))
    assert refusal.kind == IMPOSSIBLE and "position 0.3" in refusal.reason
    assert limits.refusal([1], np.array([0.1])) is None


def test_generic_joint_limits_match_the_generic_checks():
    limits = JointLimits.generic(1)
    for values in ([1e300], [5e4]), ([0.0], [0.0]), ([9e4], [900.0]):
        position, velocity = (np.array(v, dtype=float) for v in values)
        assert (limits.refusal(slice(None), position, velocity) is None) == \
            (joint_refusal(position.tolist(), velocity.tolist()) is None)


def test_names_are_bounded_and_the_cut_is_marked():
    assert bounded_name("arm_elbow") == ("arm_elbow", False)
    assert bounded_name("a\n b\t c") == ("a b c", False)
    name, cut = bounded_name("j" * 10_000)
    assert cut and len(name) == MAX_NAME_CHARS and name.endswith(TRUNCATION_MARK)
    assert bounded_name("x" * MAX_NAME_CHARS) == ("x" * MAX_NAME_CHARS, False)
