"""The uncached baseline (cache_enabled: false): stateless, yet it still does the task.

Every tick level 2 plans a fresh segment from the measured state to the template at tau + horizon
and samples it one control period ahead; nothing of the previous tick's plan is reused.
"""
import numpy as np

from action_router.bspline import SegmentPlanner
from router_rig import Rig

OFFSET = 0.01    # rad added to the measured shoulder-pan position on one tick
TICKS = 523      # mid-trajectory (approach_handle runs 2 s) and mid-segment for the cached run


def rig_at(cache, ticks=TICKS):
    rig = Rig(cache_enabled=cache)
    rig.router.submit_decision("open_door")
    rig.step(ticks)
    return rig


def tick_with(rig, q, qd):
    r = rig.router
    r.set_joint_state(rig.joints, q, qd, [], now=rig.now)
    r.tick(rig.now)
    return r.command.reference_position.copy(), r.command.reference_velocity.copy()


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


def test_uncached_reference_is_replanned_from_every_ticks_measurement():
    rig = rig_at(False)
    r = rig.router
    hits = []
    for _ in range(50):
        rig.step()
        hits.append(r.command.l2_hit)
        # the reference is exactly a fresh segment from this tick's measured state
        top = r.stack.top
        st = r.subtasks[top.current]
        tau = top.phase + (rig.now - rig.dt - top.run_since)
        pl = SegmentPlanner(r.n, 0.05, 100, 0.05, r.level2.q_min, r.level2.q_max, r.level2.v_max)
        anchored = r.level2.behaviour.anchored[:r.level2.behaviour.n_ctrl]
        k0 = int(round(tau / pl.ds))
        p0, v0 = pl.template_state(st.template, anchored, k0)
        snap = r.inputs.snapshot()                   # what this tick measured (nothing written since)
        pl.plan(st.template, anchored, k0, 0.0, snap.joint_pos - p0, snap.joint_vel - v0)
        assert np.allclose(r.command.reference_position, pl.pos[2], atol=1e-12) \
            and np.allclose(r.command.reference_velocity, pl.vel[2], atol=1e-12)
    assert not any(hits)


def test_this_ticks_measurement_moves_the_uncached_reference_but_not_the_cached_one():
    h00 = 1.0 - 3 * 0.02 ** 2 + 2 * 0.02 ** 3       # Hermite weight of the start state one period (1 ms) in
    for cache in (False, True):
        a, b = rig_at(cache), rig_at(cache)          # deterministic twins (noise-free plant)
        q, qd = a.plant.measure()
        pa, _ = tick_with(a, q.copy(), qd.copy())
        q2 = q.copy()
        q2[0] += OFFSET
        pb, _ = tick_with(b, q2, qd.copy())
        if cache:
            assert b.router.command.l2_hit and np.array_equal(pa, pb)   # the cached segment ignores the noise
        else:
            assert not b.router.command.l2_hit
            assert abs((pb - pa)[0] - OFFSET * h00) < 1e-9
            assert np.array_equal(pa[1:], pb[1:])


def test_uncached_reference_does_not_depend_on_the_previous_ticks_state():
    a, b = rig_at(False), rig_at(False)
    q, qd = a.plant.measure()
    # b sees a very different state on one tick, then the same state as a
    tick_with(a, q.copy(), qd.copy())
    tick_with(b, q + 0.2, qd + 1.0)
    a.now += a.dt
    b.now += b.dt
    pa, va = tick_with(a, q.copy(), qd.copy())
    pb, vb = tick_with(b, q.copy(), qd.copy())
    assert np.array_equal(pa, pb) and np.array_equal(va, vb)
