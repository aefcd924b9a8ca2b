"""PID: clamp and anti-windup behaviour on worked cases, control_toolbox semantics."""
import math

import numpy as np
import pytest

from action_router.pid import Gains, VectorPid, gains_from_params


def run(pid, errors, dt=1.0):
    cmds, iterms = [], []
    for e in errors:
        cmds.append(float(pid.compute(np.array([e]), np.array([0.0]), dt)[0]))
        iterms.append(float(pid.i_term[0]))
    return cmds, iterms


def test_output_clamp_matches_control_toolbox_output_clamp_test():
    # control_toolbox test_pid.cpp outputClampTest: p=1, back_calculation, u in [-1, 1]
    pid = VectorPid([Gains(p=1.0, u_clamp_max=1.0, u_clamp_min=-1.0, antiwindup_strategy="back_calculation")])
    cmds, _ = run(pid, [0.5, 1.0, 2.0, 10.0, 50.0, 100.0, -0.5, -1, -2, -10, -50, -100])
    assert cmds == [0.5, 1.0, 1.0, 1.0, 1.0, 1.0, -0.5, -1.0, -1.0, -1.0, -1.0, -1.0]


def test_no_output_clamp_with_infinite_limits():
    pid = VectorPid([Gains(p=1.0, antiwindup_strategy="back_calculation")])
    cmds, _ = run(pid, [0.5, 2.0, 100.0, -100.0])
    assert cmds == [0.5, 2.0, 100.0, -100.0]


@pytest.mark.parametrize("strategy", ["back_calculation", "conditional_integration", "none"])
def test_zero_integral_gain_never_integrates(strategy):
    pid = VectorPid([Gains(u_clamp_max=20.0, u_clamp_min=-20.0, antiwindup_strategy=strategy)])
    cmds, iterms = run(pid, [-1.0, -1.0, -1.0, 10.0, 10.0, 10.0])
    assert cmds == [0.0] * 6 and iterms == [0.0] * 6


def test_none_winds_up_beyond_the_clamp():
    # p=0, i=1, u in [-1, 1]: the integrator is updated after the command, and keeps growing
    pid = VectorPid([Gains(i=1.0, u_clamp_max=1.0, u_clamp_min=-1.0, antiwindup_strategy="none")])
    cmds, iterms = run(pid, [1, 1, 1, 1, -1, -1, -1, -1])
    assert cmds == [0, 1, 1, 1, 1, 1, 1, 1]   # still saturated after the error reversed: windup
    assert iterms == [1, 2, 3, 4, 3, 2, 1, 0]


def test_conditional_integration_stops_integrating_while_saturated_in_the_same_direction():
    pid = VectorPid([Gains(i=1.0, u_clamp_max=1.0, u_clamp_min=-1.0, antiwindup_strategy="conditional_integration")])
    cmds, iterms = run(pid, [1, 1, 1, 1, -1, -1, -1])
    assert iterms == [1, 2, 2, 2, 1, 0, -1]
    assert cmds == [0, 1, 1, 1, 1, 1, 0]   # unwinds at once when the error changes sign


def test_back_calculation_bleeds_the_integrator_by_the_saturation_excess():
    pid = VectorPid([Gains(i=1.0, u_clamp_max=1.0, u_clamp_min=-1.0, antiwindup_strategy="back_calculation",
                           tracking_time_constant=1.0)])
    cmds, iterms = run(pid, [1, 1, 1, 1, -1, -1])
    # i += dt*(i*e + (cmd - cmd_unsat)/Tt)
    assert iterms == [1, 2, 2, 2, 0, -1]
    assert cmds == [0, 1, 1, 1, 1, 0]


def test_back_calculation_default_tracking_time_constant():
    g = Gains(p=2.0, i=4.0, d=0.0, antiwindup_strategy="back_calculation")
    assert VectorPid([g]).trk_inv[0] == pytest.approx(4.0 / 2.0)          # Tt = p / i
    g = Gains(p=2.0, i=4.0, d=1.0, antiwindup_strategy="back_calculation")
    assert VectorPid([g]).trk_inv[0] == pytest.approx(1.0 / math.sqrt(1.0 / 4.0))  # Tt = sqrt(d / i)


def test_i_clamp_bounds_the_integral_term():
    pid = VectorPid([Gains(i=1.0, i_clamp_max=0.5, i_clamp_min=-0.25, antiwindup_strategy="none")])
    _, iterms = run(pid, [1, 1, -1, -1, -1])
    assert iterms == [0.5, 0.5, -0.25, -0.25, -0.25]


def test_p_i_d_terms_and_error_dot():
    pid = VectorPid([Gains(p=2.0, i=0.5, d=0.1, antiwindup_strategy="none")])
    u = pid.compute(np.array([1.0]), np.array([3.0]), 0.01)
    assert u[0] == pytest.approx(2.0 + 0.0 + 0.3)       # i_term enters from the next step
    u = pid.compute(np.array([1.0]), np.array([0.0]), 0.01)
    assert u[0] == pytest.approx(2.0 + 0.5 * 0.01)


def test_zero_dt_returns_the_previous_command_unchanged():
    pid = VectorPid([Gains(p=1.0, i=1.0, antiwindup_strategy="none")])
    first = pid.compute(np.array([2.0]), np.array([0.0]), 0.1).copy()
    i_before = pid.i_term.copy()
    again = pid.compute(np.array([50.0]), np.array([0.0]), 0.0)
    assert again[0] == first[0] and pid.i_term[0] == i_before[0]


def test_nonfinite_error_gives_zero_for_that_joint_only_and_keeps_state():
    pid = VectorPid([Gains(p=1.0, i=1.0, antiwindup_strategy="none")] * 2)
    pid.compute(np.array([1.0, 1.0]), np.zeros(2), 1.0)
    u = pid.compute(np.array([np.nan, 1.0]), np.array([0.0, np.inf]), 1.0)
    assert list(u) == [0.0, 0.0] and list(pid.nonfinite) == [True, True]
    assert pid.i_term[0] == 1.0
    u = pid.compute(np.array([1.0, 1.0]), np.zeros(2), 1.0)
    assert np.all(np.isfinite(u))


def test_output_limits_narrow_to_execution_layer_limit():
    pid = VectorPid([Gains(p=100.0, u_clamp_max=50.0, u_clamp_min=-50.0, antiwindup_strategy="none")])
    pid.set_output_limits(np.array([10.0]))
    assert pid.compute(np.array([1.0]), np.zeros(1), 0.001)[0] == 10.0 and pid.clamped[0]
    pid.set_output_limits(np.array([80.0]))
    assert pid.compute(np.array([1.0]), np.zeros(1), 0.001)[0] == 50.0


def test_gains_from_ros2_control_parameter_names():
    params = {"gains.j1.p": 3.0, "gains.j1.i": 1.0, "gains.j1.d": 0.5, "gains.j1.i_clamp_max": 2.0,
              "gains.j1.i_clamp_min": -2.0, "gains.j1.u_clamp_max": 9.0, "gains.j1.u_clamp_min": -9.0,
              "gains.j1.antiwindup_strategy": "back_calculation"}
    g = gains_from_params(["j1"], params)["j1"]
    assert (g.p, g.i, g.d, g.i_clamp_max, g.i_clamp_min, g.u_clamp_max, g.u_clamp_min, g.antiwindup_strategy) == \
        (3.0, 1.0, 0.5, 2.0, -2.0, 9.0, -9.0, "back_calculation")
    with pytest.raises(ValueError):
        gains_from_params(["j1"], {"gains.j1.antiwindup_strategy": "magic"})
    with pytest.raises(ValueError):
        gains_from_params(["j1"], {"gains.j1.u_clamp_max": -1.0, "gains.j1.u_clamp_min": 1.0})


def test_derivative_filter_attenuates_a_noisy_error_dot_and_passes_a_steady_one():
    rng = np.random.default_rng(3)
    noise = rng.standard_normal(4000) * 5e-3          # measured-velocity noise, rad/s
    raw = VectorPid([Gains(d=8.0)])
    filtered = VectorPid([Gains(d=8.0, derivative_filter_time_constant=0.005)])
    u_raw = [float(raw.compute(np.zeros(1), np.array([0.2 + v]), 0.001)[0]) for v in noise]
    u_f = [float(filtered.compute(np.zeros(1), np.array([0.2 + v]), 0.001)[0]) for v in noise]
    # the D term's tick-to-tick change (what the actuator sees as jitter) shrinks several times
    assert np.std(np.diff(u_f)) < 0.25 * np.std(np.diff(u_raw))
    # a steady error_dot still reaches the D term in full (first-order low-pass, unity DC gain)
    assert np.mean(u_f[1000:]) == pytest.approx(8.0 * 0.2, rel=0.01)


def test_derivative_filter_follows_a_step_with_its_time_constant_and_zero_means_unfiltered():
    tc, dt = 0.01, 0.001
    pid = VectorPid([Gains(d=1.0, derivative_filter_time_constant=tc), Gains(d=1.0)])
    pid.compute(np.zeros(2), np.zeros(2), dt)          # primed at 0
    u = [pid.compute(np.zeros(2), np.ones(2), dt).copy() for _ in range(10)]
    assert all(step[1] == 1.0 for step in u)          # no filter: the step at once
    # after one time constant (10 ticks) the filtered D input has covered ~1 - 1/e of the step
    assert u[-1][0] == pytest.approx(1.0 - (tc / (tc + dt)) ** 10) and 0.6 < u[-1][0] < 0.65


def test_derivative_filter_restarts_from_the_current_error_dot_after_a_reset():
    pid = VectorPid([Gains(d=2.0, derivative_filter_time_constant=0.05)])
    for _ in range(50):
        pid.compute(np.zeros(1), np.array([1.0]), 0.001)
    pid.reset()
    # no memory of the old error_dot and no ramp from zero: the first step after a reset is unfiltered
    assert pid.compute(np.zeros(1), np.array([-0.5]), 0.001)[0] == pytest.approx(-1.0)


def test_derivative_filter_time_constant_is_a_gain_parameter():
    g = gains_from_params(["j1"], {"gains.j1.d": 1.0, "gains.j1.derivative_filter_time_constant": 0.004})["j1"]
    assert g.derivative_filter_time_constant == 0.004 and g.scaled(0.5).derivative_filter_time_constant == 0.004
    with pytest.raises(ValueError):
        gains_from_params(["j1"], {"gains.j1.derivative_filter_time_constant": -0.001})


def test_error_filter_attenuates_white_position_noise_and_passes_a_steady_error():
    rng = np.random.default_rng(5)
    noise = rng.standard_normal(4000) * 2e-4          # encoder noise, rad
    raw = VectorPid([Gains(p=120.0)])
    filtered = VectorPid([Gains(p=120.0, error_filter_time_constant=0.002)])
    u_raw = [float(raw.compute(np.array([0.01 + n]), np.zeros(1), 0.001)[0]) for n in noise]
    u_f = [float(filtered.compute(np.array([0.01 + n]), np.zeros(1), 0.001)[0]) for n in noise]
    # a = 1/3: the P term's tick-to-tick change falls to a * sqrt(2 / (2 - a)) / sqrt(2) = 0.26 of it
    assert np.std(np.diff(u_f)) == pytest.approx(0.26 * np.std(np.diff(u_raw)), rel=0.1)
    assert np.mean(u_f[100:]) == pytest.approx(120.0 * 0.01, rel=0.01)     # unity DC gain


def test_error_filter_restarts_from_the_current_error_after_a_reset_and_skips_a_nonfinite_joint():
    pid = VectorPid([Gains(p=10.0, error_filter_time_constant=0.05), Gains(p=10.0, error_filter_time_constant=0.05)])
    for _ in range(50):
        pid.compute(np.array([1.0, 1.0]), np.zeros(2), 0.001)
    before = pid.error_filtered.copy()
    out = pid.compute(np.array([np.nan, 1.0]), np.zeros(2), 0.001)
    assert out[0] == 0.0 and pid.error_filtered[0] == before[0]      # NaN: commanded 0, state kept
    pid.reset()
    # no memory of the old error and no ramp from zero: the first step after a reset is unfiltered
    assert pid.compute(np.array([-0.5, 0.2]), np.zeros(2), 0.001) == pytest.approx([-5.0, 2.0])


def test_error_filter_time_constant_is_a_gain_parameter_with_a_router_wide_default():
    from action_router.params import make_config
    g = gains_from_params(["j1"], {"gains.j1.p": 1.0, "gains.j1.error_filter_time_constant": 0.003})["j1"]
    assert g.error_filter_time_constant == 0.003 and g.scaled(0.5).error_filter_time_constant == 0.003
    with pytest.raises(ValueError):
        gains_from_params(["j1"], {"gains.j1.error_filter_time_constant": -0.001})
    cfg = make_config()
    assert all(g.error_filter_time_constant == cfg["error_filter_time_constant"] > 0 for g in cfg.gains.values())
    joint = cfg.joints[0]
    cfg = make_config({"error_filter_time_constant": 0.0, f"gains.{joint}.error_filter_time_constant": 0.01})
    assert cfg.gains[joint].error_filter_time_constant == 0.01
    assert all(cfg.gains[j].error_filter_time_constant == 0.0 for j in cfg.joints[1:])


def _vector_reference_step(pid, state, error, error_dot, dt):
    """The class docstring's formulas in numpy over all joints at once (the oracle for the per-joint
    loop): state holds e_f, e_dot_f, primed flags and i_term; returns the command."""
    ok = np.isfinite(error) & np.isfinite(error_dot)
    for key, tc, x in (("e", pid.e_filter_tc, error), ("d", pid.d_filter_tc, error_dot)):
        a = dt / (tc + dt)
        stepped = np.where(state[key + "_primed"], state[key] + a * (np.where(ok, x, 0.0) - state[key]), x)
        np.copyto(state[key], stepped, where=ok)
        state[key + "_primed"] |= ok
    e, ed = state["e"], state["d"]
    unsat = pid.p * e + state["i"] + pid.d * ed
    cmd = np.minimum(np.maximum(unsat, pid.u_min), pid.u_max)
    sat = cmd != unsat
    di = dt * pid.i * e
    di = np.where(pid.back_active, di + dt * pid.trk_inv * (cmd - unsat), di)
    use = ok & (np.abs(e) > pid.deadband) & (pid.is_none | pid.back_active | (pid.is_cond & ~(sat & (e * unsat > 0))))
    state["i"] = np.minimum(np.maximum(np.where(use, state["i"] + di, state["i"]), pid.i_min), pid.i_max)
    return np.where(ok, cmd, 0.0)


def test_the_per_joint_loop_gives_exactly_the_vectorised_formulas():
    rng = np.random.default_rng(3)
    strategies = ["none", "back_calculation", "conditional_integration", "back_calculation", "none", "none"]
    gains = [Gains(p=float(rng.uniform(1, 50)), i=float(rng.uniform(0, 20)) * (j != 4), d=float(rng.uniform(0, 5)),
                   i_clamp_max=1.0, i_clamp_min=-1.0, u_clamp_max=float(rng.uniform(2, 8)), u_clamp_min=-5.0,
                   antiwindup_strategy=strategies[j], error_deadband=1e-3 if j == 5 else 2.2e-16,
                   derivative_filter_time_constant=0.002 * (j % 2), error_filter_time_constant=0.002 * (j > 2))
             for j in range(6)]
    pid = VectorPid(gains)
    state = {"e": np.zeros(6), "d": np.zeros(6), "e_primed": np.zeros(6, bool), "d_primed": np.zeros(6, bool),
             "i": np.zeros(6)}
    for step in range(400):
        error, error_dot = rng.normal(0, 0.5, 6), rng.normal(0, 2.0, 6)
        if step % 37 == 5:
            error[step % 6] = math.nan                 # a non-finite joint: 0, its state untouched
        if step % 53 == 9:
            error_dot[(step + 1) % 6] = math.inf
        dt = 0.004 if step % 11 == 0 else 0.001
        expected = _vector_reference_step(pid, state, error, error_dot, dt)
        assert np.array_equal(pid.compute(error, error_dot, dt), expected)
        assert np.array_equal(pid.i_term, state["i"]) and np.array_equal(pid.error_filtered, state["e"])
