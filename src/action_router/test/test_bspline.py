"""B-spline re-plan: 100 samples over 50 ms, continuity at the junction, limits respected."""
import numpy as np
import pytest

from action_router.bspline import SegmentPlanner, basis_matrix, clamped_uniform_knots, make_template

JOINTS = ["a", "b", "c"]
SPEC = {"mode": "absolute", "duration": 1.0,
        "control_points": {"a": [0.0, 0.5, 1.0], "b": [0.0, -0.4, -0.8], "c": [0.2, 0.2, 0.2]}}


def planner(**kw):
    return SegmentPlanner(3, horizon=0.05, samples=100, blend_time=0.3, **kw)


def test_basis_is_a_partition_of_unity():
    knots = clamped_uniform_knots(7)
    B = basis_matrix(np.linspace(0, 1, 101), knots, 7)
    assert np.allclose(B.sum(axis=1), 1.0)
    assert B[0, 0] == 1.0 and B[-1, -1] == 1.0


def test_segment_has_100_samples_over_50_ms():
    pl = planner()
    assert pl.samples == 100 and pl.ds == pytest.approx(0.0005)
    tpl = make_template("t", SPEC, JOINTS, 0.05, 100)
    anchored = tpl.anchor(np.zeros(3))
    pl.plan(tpl, anchored, 0, 0.0, np.zeros(3), np.zeros(3))
    assert pl.pos.shape == (101, 3)          # 100 samples + the junction state at 50 ms
    assert pl._s[100] == pytest.approx(0.05)


def test_template_starts_and_ends_at_rest_and_absolute_mode_reanchors():
    tpl = make_template("t", SPEC, JOINTS, 0.05, 100)
    q0 = np.array([0.3, 0.1, -0.2])
    anchored = tpl.anchor(q0)
    pos0, vel0 = tpl.B[0] @ anchored, tpl.dB[0] @ anchored
    posT, velT = tpl.B[-1] @ anchored, tpl.dB[-1] @ anchored
    assert np.allclose(pos0, q0) and np.allclose(vel0, 0)
    assert np.allclose(posT, [1.0, -0.8, 0.2]) and np.allclose(velT, 0, atol=1e-9)


def test_replan_is_position_and_velocity_continuous_at_the_junction_with_the_current_state():
    tpl = make_template("t", SPEC, JOINTS, 0.05, 100)
    pl = planner()
    anchored = tpl.anchor(np.zeros(3))
    k0 = 400  # 0.2 s into the template
    p_t, v_t = pl.template_state(tpl, anchored, k0)
    q = p_t + np.array([0.05, -0.03, 0.02])       # the arm is off the template ...
    qd = v_t + np.array([0.2, 0.1, -0.3])         # ... and moving differently
    pl.plan(tpl, anchored, k0, 0.0, q - p_t, qd - v_t)
    assert np.allclose(pl.pos[0], q) and np.allclose(pl.vel[0], qd)
    # smooth inside the segment: finite differences agree with the velocities
    fd = np.diff(pl.pos, axis=0) / pl.ds
    mid = 0.5 * (pl.vel[1:] + pl.vel[:-1])
    assert np.max(np.abs(fd - mid)) < 0.05


def test_chained_segments_join_exactly():
    tpl = make_template("t", SPEC, JOINTS, 0.05, 100)
    pl = planner()
    anchored = tpl.anchor(np.zeros(3))
    e0, ev0 = np.array([0.1, 0.0, -0.1]), np.array([0.0, 0.5, 0.0])
    pl.plan(tpl, anchored, 200, 0.0, e0, ev0)
    end_pos, end_vel = pl.pos[100].copy(), pl.vel[100].copy()
    pl.plan(tpl, anchored, 300, 0.05, e0, ev0)     # next segment: 100 rows and 50 ms later
    assert np.allclose(pl.pos[0], end_pos) and np.allclose(pl.vel[0], end_vel)


def test_blend_converges_onto_the_template():
    tpl = make_template("t", SPEC, JOINTS, 0.05, 100)
    pl = planner()
    anchored = tpl.anchor(np.zeros(3))
    pl.plan(tpl, anchored, 1200, 0.3, np.array([0.2, 0.2, 0.2]), np.ones(3))   # blend finished
    p, v = pl.template_state(tpl, anchored, 1200)
    assert np.allclose(pl.pos[0], p) and np.allclose(pl.vel[0], v)


def test_limits_are_respected_even_from_a_wild_state():
    lo, hi, vmax = np.array([-0.5, -0.5, -0.5]), np.array([0.5, 0.5, 0.5]), np.array([0.3, 0.3, 0.3])
    pl = planner(q_min=lo, q_max=hi, v_max=vmax)
    tpl = make_template("t", SPEC, JOINTS, 0.05, 100)
    anchored = tpl.anchor(np.zeros(3))
    for k0 in (0, 500, 1900, 2500):
        p, v = pl.template_state(tpl, anchored, k0)
        pl.plan(tpl, anchored, k0, 0.0, np.array([2.0, -3.0, 0.4]) - p, np.array([5.0, -5.0, 0.0]) - v)
        assert np.all(pl.pos >= lo) and np.all(pl.pos <= hi)
        assert np.all(np.abs(pl.vel) <= vmax)


def test_hold_template_and_bad_specs():
    hold = make_template("h", {"mode": "relative", "duration": None}, JOINTS, 0.05, 100)
    anchored = hold.anchor(np.array([0.1, 0.2, 0.3]))
    assert np.allclose(hold.B[5] @ anchored, [0.1, 0.2, 0.3])
    with pytest.raises(ValueError):
        make_template("x", {"duration": 1.0, "control_points": {"zz": [0, 1]}}, JOINTS, 0.05, 100)
    with pytest.raises(ValueError):
        make_template("x", {"duration": 1.0, "control_points": {"a": [0, 1], "b": [0, 1, 2]}}, JOINTS, 0.05, 100)
    with pytest.raises(ValueError):
        make_template("x", {"mode": "sideways"}, JOINTS, 0.05, 100)


def test_a_blend_is_stretched_so_that_it_alone_stays_within_the_velocity_limit():
    vmax = np.array([1.0, 2.0, 1.0])
    pl = SegmentPlanner(3, horizon=0.05, samples=100, blend_time=0.15, v_max=vmax)
    assert pl.blend_time_for(np.array([0.01, -0.02, 0.0])) == pytest.approx(0.15)      # small offsets: as set
    e0 = np.array([0.2, -0.8, 0.1])                           # joint b: 1.5 * 0.8 / 2.0 = 0.6 s
    assert pl.blend_time_for(e0) == pytest.approx(0.6)
    # on a standing template the blend is the whole motion: at mid-blend it reaches the limit, and the
    # positions move as the velocities say; unstretched, the clip to the limit would leave the
    # positions running ahead of the velocities
    still = make_template("t", {"mode": "absolute", "duration": 1.0,
                                "control_points": {j: [0.0, 0.0] for j in JOINTS}}, JOINTS, 0.05, 100)
    anchored = still.anchor(np.zeros(3))

    def worst(tb):
        peak, mismatch = np.zeros(3), 0.0
        for seg in range(int(tb / 0.05) + 1):
            pl.plan(still, anchored, 100 * seg, 0.05 * seg, e0, np.zeros(3), tb)
            peak = np.maximum(peak, np.abs(pl.vel).max(axis=0))
            mean_vel = (pl.vel[1:] + pl.vel[:-1]) / 2
            mismatch = max(mismatch, float(np.abs(np.diff(pl.pos, axis=0) / pl.ds - mean_vel).max()))
        return peak, mismatch

    peak, mismatch = worst(pl.blend_time_for(e0))
    assert peak[1] == pytest.approx(2.0, rel=1e-3) and mismatch < 0.01
    assert worst(0.15)[1] > 1.0
