"""The uncached baseline (cache_enabled: false): the seed's stateless re-run per frame, yet it does the task.

At the start of every frame (one 50 ms plan horizon) level 2 plans a fresh segment from that
frame's measured state to the template at tau + horizon and the frame's ticks follow it; nothing
of a previous frame's plan is reused.
"""
import numpy as np
import pytest

from action_router.bspline import SegmentPlanner
from router_rig import Rig

OFFSET = 0.01      # rad added to the measured shoulder-pan position on one tick
FRAME_TICKS = 50   # one frame = the 50 ms horizon at 1 kHz
MID_FRAME = 523    # mid-trajectory (approach_handle runs 2 s), mid-frame and mid-segment for the cached run
FRAME_START = 550  # the first tick of a frame


def rig_at(cache, ticks=MID_FRAME):
    rig = Rig(cache_enabled=cache)
    rig.router.submit_decision("open_door")
    rig.step(ticks)
    return rig


def tick_with(rig, q, qd):
    r = rig.router
    r.set_joint_state(rig.joints, q, qd, [], now=rig.now)
    r.tick(rig.now)
    rig.now += rig.dt
    return r.command.reference_position.copy(), r.command.reference_velocity.copy()


def fresh_plan(rig, now, q, qd):
    """The segment a from-scratch run plans at ``now`` from (q, qd)."""
    r = rig.router
    top = r.stack.top
    st = r.subtasks[top.current]
    tau = top.phase + (now - top.run_since)
    pl = SegmentPlanner(r.n, 0.05, 100, 0.05, r.level2.q_min, r.level2.q_max, r.level2.v_max)
    anchored = r.level2.behaviour.anchored[:r.level2.behaviour.n_ctrl]
    k0 = int(round(tau / pl.ds))
    p0, v0 = pl.template_state(st.template, anchored, k0)
    pl.plan(st.template, anchored, k0, 0.0, q - p0, qd - v0)
    return pl


def test_uncached_mode_completes_a_sub_task_in_the_toy_closed_loop():
    rig = Rig(cache_enabled=False)
    rig.plant.noise_pos, rig.plant.noise_vel = 2e-4, 5e-3   # the benchmark's sensor noise
    rig.router.submit_decision("open_door")
    assert rig.run_until(lambda r: r.subtasks_completed >= 1, max_s=6.0)
    r = rig.router
    assert r.command.sub_task == "door_handle_grip"          # approach_handle reached and settled
    assert r.failsafe_count == 0 and r.level1.unknown_scene_count == 0
    assert r.level2.behaviour.hits == 0 and r.level2.behaviour.lookups > 1000   # level 2 never served a cached segment
    assert r.execution.hit_rate == 0.0                      # level 3 rebuilt every tick


def test_uncached_reference_is_the_plan_of_the_frames_first_measurement():
    rig = rig_at(False, FRAME_START)
    r = rig.router
    plan = None
    for i in range(2 * FRAME_TICKS):
        now = rig.now
        rig.step()
        assert not r.command.l2_hit
        snap = r.inputs.snapshot()                    # what this tick measured (nothing written since)
        if i % FRAME_TICKS == 0:                      # a frame starts: planned from this measurement
            plan = fresh_plan(rig, now, snap.joint_pos, snap.joint_vel)
        k = min(2 * (i % FRAME_TICKS) + 2, 100)       # one control period (2 samples) ahead in the frame
        assert np.allclose(r.command.reference_position, plan.pos[k], atol=1e-12) \
            and np.allclose(r.command.reference_velocity, plan.vel[k], atol=1e-12)


def test_a_measurement_moves_the_uncached_reference_only_at_a_frame_start_and_never_the_cached_one():
    for cache, ticks, moves in ((False, FRAME_START, True), (False, MID_FRAME, False), (True, MID_FRAME, False)):
        a, b = rig_at(cache, ticks), rig_at(cache, ticks)   # deterministic twins (noise-free plant)
        q, qd = a.plant.measure()
        pa, _ = tick_with(a, q.copy(), qd.copy())
        q2 = q.copy()
        q2[0] += OFFSET
        pb, _ = tick_with(b, q2, qd.copy())
        if moves:
            assert 0.5 * OFFSET < (pb - pa)[0] <= OFFSET and np.array_equal(pa[1:], pb[1:])
        else:
            assert np.array_equal(pa, pb)
        if cache:
            assert b.router.command.l2_hit                   # the cached segment ignores the noise


def test_uncached_reference_does_not_depend_on_the_previous_frames_state():
    a, b = rig_at(False, FRAME_START), rig_at(False, FRAME_START)
    q, qd = a.plant.measure()
    # b starts a frame from a very different state, then both see the same states
    tick_with(a, q.copy(), qd.copy())
    tick_with(b, q + 0.2, qd + 1.0)
    for i in range(1, FRAME_TICKS):
        pa, va = tick_with(a, q.copy(), qd.copy())
        pb, vb = tick_with(b, q.copy(), qd.copy())
        if i < FRAME_TICKS - 1:                             # the frame follows its own first measurement
            assert not np.array_equal(pa, pb)               # (both plans end on the template)
    pa, va = tick_with(a, q.copy(), qd.copy())             # the next frame: nothing of the last one left
    pb, vb = tick_with(b, q.copy(), qd.copy())
    assert np.array_equal(pa, pb) and np.array_equal(va, vb)


def test_bench_scales_the_cached_gains_until_the_baselines_tracking_is_matched():
    from action_router.lab.bench import at_matched_tracking, scaled_gains
    from action_router.params import make_config
    base = make_config()
    cfg = make_config(scaled_gains(2.0))
    assert all(cfg.gains[j].p == 2.0 * base.gains[j].p and cfg.gains[j].d == 2.0 * base.gains[j].d for j in base.joints)
    loose = at_matched_tracking(3000, {"tracking_rms": 1.0, "jitter": 1.0}, scales=(1.5, 2.0), log=lambda _: None)
    assert loose["matched"] and loose["gain_scale"] == 1.5 and len(loose["tried"]) == 1     # the smallest first
    assert loose["jitter_reduction"] == 1.0 - loose["jitter"]
    never = at_matched_tracking(3000, {"tracking_rms": 0.0, "jitter": 1.0}, scales=(1.5, 2.0), log=lambda _: None)
    assert not never["matched"] and [row["gain_scale"] for row in never["tried"]] == [1.5, 2.0]


def test_the_jitter_at_equal_tracking_is_interpolated_between_the_runs_around_it():
    from action_router.lab.bench import at_matched_tracking, run_closed_loop
    run = run_closed_loop(3000, True, gain_scale=1.5)          # seeded: the run the search makes
    before = {"tracking_rms": run["tracking_rms"] + 0.004, "jitter": run["jitter"] / 2}
    target = {"tracking_rms": run["tracking_rms"] + 0.001, "jitter": 4 * run["jitter"]}   # a quarter of the way
    out = at_matched_tracking(3000, target, scales=(1.5,), log=lambda _: None, cached=before)
    inter = out["interpolated"]
    assert out["matched"] and out["jitter"] == run["jitter"]
    assert inter["gain_scale"] == pytest.approx(1.0 + 0.75 * 0.5)
    assert inter["jitter"] == pytest.approx(run["jitter"] / 2 + 0.75 * run["jitter"] / 2)
    assert inter["jitter_reduction"] == pytest.approx(1.0 - inter["jitter"] / target["jitter"])
    # the run at the shipped gains already tracks as closely: nothing to interpolate
    assert at_matched_tracking(3000, target, scales=(1.5,), log=lambda _: None,
                               cached=dict(before, tracking_rms=0.0))["interpolated"] is None
