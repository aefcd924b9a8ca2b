"""MuJoCo simulator physics (plain module, no ROS): tracking, effort clipping, grip, slip, heat."""
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from csr_llm_bringup.sim.robot_model import APPROACH_HANDLE_POSE, JOINTS
from csr_llm_common.robot_description import load_robot_description
from csr_llm_bringup.sim.simulator import Simulator
from csr_llm_bringup.sim.thermal import ThermalModel

# the router's gains and limits (config/robot_description.yaml); i-term clamped to +-5
_ROBOT = load_robot_description(Path(__file__).resolve().parents[3] / "config" / "robot_description.yaml")
_JOINTS = {j.name: j for j in _ROBOT.joints}
KP, KI, KD = (np.array([float(_JOINTS[name].gains[k]) for name in JOINTS]) for k in ("p", "i", "d"))
EFFORT_MAX = np.array([_JOINTS[name].effort_max for name in JOINTS])


def bspline_path(control_points, duration):
    """The router's clamped cubic B-spline template (first/last control points duplicated)."""
    from action_router.bspline import basis_matrix, clamped_uniform_knots
    P = np.array([[c[0]] + list(c) + [c[-1]] for c in control_points]).T
    knots = clamped_uniform_knots(P.shape[0])

    def at(t):
        return (basis_matrix(np.array([min(max(t / duration, 0.0), 1.0)]), knots, P.shape[0]) @ P)[0]
    return at


APPROACH = bspline_path([[0.0, 0.10, 0.25, 0.30], [0.0, 0.30, 0.60, 0.70], [0.0, -0.40, -0.90, -1.00],
                         [0.0, 0.10, 0.25, 0.30], [0.04] * 4], 2.0)
REACH = bspline_path([[0.0, -0.20, -0.40], [0.0, 0.40, 0.80], [0.0, -0.50, -0.80], [0.0, 0.20, 0.40],
                      [0.04] * 3], 1.5)


class Pid:
    def __init__(self):
        self.integral = np.zeros(5)

    def __call__(self, sim, target, hold_gripper=None):
        q, qd = sim.joint_positions(), sim.joint_velocities()
        e = target - q
        self.integral = np.clip(self.integral + KI * e * sim.dt, -5.0, 5.0)
        u = KP * e - KD * qd + self.integral
        if hold_gripper is not None:
            u[4] = hold_gripper
        return u


def run(sim, seconds, target_fn, grip_after=None, grip_effort=-20.0, pid=None):
    pid = pid or Pid()
    t0 = sim.time
    for _ in range(int(round(seconds / sim.dt))):
        t = sim.time - t0
        hold = grip_effort if grip_after is not None and t >= grip_after else None
        sim.set_efforts(pid(sim, target_fn(t), hold))
        sim.step()
    return pid


@pytest.fixture(scope="module")
def gripped_handle():
    sim = Simulator()
    max_pad_before = 0.0
    pid = Pid()
    for _ in range(2600):   # approach (2 s) and settle
        sim.set_efforts(pid(sim, APPROACH(sim.time)))
        sim.step()
        max_pad_before = max(max_pad_before, *sim.pad_forces())
    run(sim, 1.0, lambda t: APPROACH(99.0), grip_after=0.0, pid=pid)
    return sim, max_pad_before


def test_pd_tracks_a_target_pose():
    sim = Simulator()
    target = np.array([APPROACH_HANDLE_POSE[j] for j in JOINTS])
    target[0] = -0.8          # away from the door handle
    run(sim, 2.5, lambda t: target)
    q = sim.joint_positions()
    assert np.all(np.abs(q[:4] - target[:4]) < 0.03), q
    assert abs(q[4] - 0.04) < 0.005
    assert np.all(np.abs(sim.joint_velocities()[:4]) < 0.05)
    # gravity is on: with zero effort the arm falls
    sim.set_efforts(np.zeros(5))
    sim.step(300)
    assert sim.joint_positions()[1] > target[1] + 0.2


def test_effort_commands_are_clipped_and_bad_ones_ignored():
    sim = Simulator()
    assert sim.set_efforts([1e9, -1e9, 50.0, -16.0, -30.0]) is None
    assert np.allclose(sim.effort_command, [40.0, -60.0, 35.0, -15.0, -25.0])
    before = sim.effort_command.copy()
    assert sim.set_efforts([1.0, 2.0, 3.0]) == "effort_length"
    assert sim.set_efforts([1.0, float("nan"), 0.0, 0.0, 0.0]) == "effort_nonfinite"
    assert sim.set_efforts([1.0, float("inf"), 0.0, 0.0, 0.0]) == "effort_nonfinite"
    assert sim.set_efforts("bad") in ("effort_type", "effort_length")
    assert np.array_equal(sim.effort_command, before)
    sim.step(20)
    assert np.all(np.abs(sim.joint_efforts()) <= EFFORT_MAX + 1e-12)
    assert np.all(np.abs(sim.data.ctrl[:5]) <= EFFORT_MAX + 1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=0, max_size=8))
def test_applied_efforts_never_exceed_the_limits(values):
    sim = _shared_sim()
    previous = sim.effort_command.copy()
    fault = sim.set_efforts(values)
    if fault is None:
        assert len(values) == 5 and all(math.isfinite(v) for v in values)
        assert np.allclose(sim.effort_command, np.clip(values, -EFFORT_MAX, EFFORT_MAX))
    else:
        assert np.array_equal(sim.effort_command, previous)
    sim.step(2)
    assert np.all(np.abs(sim.joint_efforts()) <= EFFORT_MAX + 1e-12)
    assert np.all(np.isfinite(sim.joint_positions()))


_SIM = []


def _shared_sim():
    if not _SIM:
        _SIM.append(Simulator())
    return _SIM[0]


def test_gripping_the_door_handle_at_the_approach_pose_exceeds_15_N(gripped_handle):
    sim, max_pad_before = gripped_handle
    # the router's approach trajectory slides the open jaws around the handle bar without pushing it
    assert max_pad_before < 5.0
    assert sim.grip_force() > 15.0
    fixed, moving = sim.pad_forces()
    assert fixed > 15.0 and moving > 15.0
    assert 0.005 < sim.joint_positions()[4] < 0.03   # closed on the bar, not on itself


def test_pulling_the_gripped_handle_opens_the_door(gripped_handle):
    sim, _ = gripped_handle
    start = sim.joint_positions().copy()

    def pull(t):   # pull_door: lift -0.3, elbow +0.4 over 2 s (relative)
        a = min(t / 2.0, 1.0)
        return start + np.array([0.0, -0.3 * a, 0.4 * a, 0.0, 0.0])
    run(sim, 2.5, pull, grip_after=0.0)
    assert sim.door_angle() > 0.1
    assert sim.grip_force() > 5.0


def test_box_placed_in_reach_is_gripped_above_15_N_and_lifted():
    sim = Simulator()
    sim.set_base_pose(1.8, 0.0, 0.0)
    placed = sim.place_object("box", in_reach="reach_shelf")
    assert sim.object_present
    pid = run(sim, 2.0, REACH)
    run(sim, 0.5, lambda t: REACH(99.0), grip_after=0.0, grip_effort=-18.0, pid=pid)
    assert sim.grip_force() > 15.0
    top = REACH(99.0)
    run(sim, 1.5, lambda t: top + np.array([0.0, -0.3 * min(t, 1.0), 0.0, 0.0, 0.0]), grip_after=0.0,
        grip_effort=-18.0, pid=pid)
    assert sim.object_position()[2] > placed[2] + 0.05
    assert sim.grip_force() > 15.0
    sim.remove_object()
    assert not sim.object_present
    sim.step(200)
    assert sim.object_position()[2] > 0.5   # parked objects float out of the world


def test_wheel_odometry_is_wrong_on_the_slip_patch_and_the_imu_sees_the_real_motion():
    results = {}
    for name, x0 in (("slip", -1.6), ("floor", 0.0)):
        sim = Simulator()
        sim.set_base_pose(x0, 0.0, 0.0)
        v_imu = 0.0
        odom_v, true_v, slip = [], [], []
        for k in range(500):
            sim.set_cmd_vel(0.4, 0.0)
            sim.step()
            v_imu += sim.imu()[0][0] * sim.dt
            if k % 50 == 49:
                odom_v.append(sim.odom()[3])
                true_v.append(sim.base_velocity()[0])
                slip.append(sim.on_slip)
        acc_z = sim.imu()[0][2]
        results[name] = (np.array(odom_v), np.array(true_v), v_imu, slip, sim)
        assert abs(acc_z - 9.81) < 0.05   # gravity included
        assert abs(v_imu - sim.base_velocity()[0]) < 0.02   # the IMU integrates to the true speed
    odom_v, true_v, _, slip, sim = results["slip"]
    assert all(slip)
    assert np.max(odom_v - true_v) > 0.15            # wheels spin: odometry overestimates the speed
    assert sim.odom()[0] - sim.base_pose()[0] > 0.05  # and the distance
    odom_v, true_v, _, slip, sim = results["floor"]
    assert not any(slip)
    assert np.max(np.abs(odom_v[2:] - true_v[2:])) < 0.02
    assert abs(sim.odom()[0] - sim.base_pose()[0]) < 0.01


def test_base_commands_are_clipped_and_time_out():
    sim = Simulator()
    assert sim.set_cmd_vel(5.0, -9.0) is None
    sim.step(1500)
    vx, _, wz = sim.base_velocity()
    assert vx <= 0.5 + 0.02 and wz >= -1.0 - 0.02
    assert sim.set_cmd_vel(float("nan"), 0.0) == "cmd_vel_nonfinite"
    sim.step(1500)   # no new cmd_vel for > cmd_vel_timeout: the base stops
    assert abs(sim.base_velocity()[0]) < 0.01 and abs(sim.base_velocity()[2]) < 0.01


def test_the_base_holds_still_against_arm_reaction_torques():
    sim = Simulator()
    run(sim, 1.5, lambda t: np.array([1.5 * min(t, 1.0), 0.5, -0.5, 0.0, 0.04]))
    x, y, yaw = sim.base_pose()
    assert abs(x) < 0.005 and abs(y) < 0.005 and abs(yaw) < 0.005


def test_thermal_model_crosses_70_C_with_sustained_effort_and_cools_back():
    th = ThermalModel(EFFORT_MAX)
    effort = EFFORT_MAX.copy()
    t, crossed = 0.0, None
    while t < 60.0:
        th.update(effort, 0.01, t)
        t += 0.01
        if crossed is None and th.temperature[1] > 70.0:
            crossed = t
    assert crossed is not None and 20.0 < crossed < 40.0
    assert np.all(th.temperature < 86.0)
    while t < 120.0:
        th.update(np.zeros(5), 0.01, t)
        t += 0.01
    assert np.all(th.temperature < 30.0) and np.all(th.temperature >= 25.0)
    # half the effort heats a quarter as much
    th2 = ThermalModel(EFFORT_MAX)
    for k in range(20000):
        th2.update(EFFORT_MAX / 2, 0.01, k * 0.01)
    assert abs(th2.temperature[0] - 40.0) < 0.1


def test_scenario_heat_boost_pushes_a_motor_over_70_C_in_the_simulator():
    sim = Simulator()
    sim.heat("arm_elbow", rate=16.0, duration=4.5)
    sim.step(4500)
    assert sim.temperatures()[2] > 70.0
    sim.step(20000)
    assert sim.temperatures()[2] < 50.0
    with pytest.raises(ValueError):
        sim.heat("no_such_joint", add=5.0)


def test_the_mjcf_text_is_pinned_for_each_handle_type():
    """sha256 of build_mjcf() for the default description (config/robot_description.yaml) and world:
    a change to the model's text must be deliberate (then update the hashes)."""
    import hashlib

    from csr_llm_bringup.sim.robot_model import build_mjcf
    pinned = {"lever": "04fc945af54f38040ff2b43d077a98b1bddb778622d17143cdd83704763fa58e",
              "knob": "390789f2b4b24bcd5e5a769e009a532077c097591fb3a2425159bef438e204c8",
              "none": "29b18d8d04ca4bd34024e93e5a67572915dbf5dd5bfeb7f48ec7b4e0ca33166f"}
    for handle, digest in pinned.items():
        assert hashlib.sha256(build_mjcf(world={"handle": handle}).encode()).hexdigest() == digest, handle
