"""The key step alone: the last cycle's effort mean is an explicit input (EffortAccumulator), the
(intent, stage) context and the odometry delta shape the key, versions advance."""
import numpy as np
import pytest

from action_router.encoder import BLOCKS, EncoderConfig, ProjectionKeyEncoder
from action_router.inputs import RouterInputs, make_fault_log
from action_router.params import make_config
from action_router.task_key import EffortAccumulator, TaskKeyStep

CFG = make_config()
JOINTS = list(CFG.joints)
N = len(JOINTS)


def rig():
    inp = RouterInputs(JOINTS, CFG.catalogue, {"corridor": 0.85}, 1.0, make_fault_log())
    inp.set_joint_state(JOINTS, [0.1] * N, [0.0] * N)
    return inp, TaskKeyStep(ProjectionKeyEncoder(EncoderConfig(n_joints=N)), N)


def block(key, name):
    lo, hi = BLOCKS[name]
    return key[lo:hi]


def test_effort_accumulator_means_and_resets():
    acc = EffortAccumulator(2)
    out = np.full(2, 7.0)
    assert not acc.take_mean(out) and list(out) == [7.0, 7.0]      # nothing added: untouched
    acc.add(np.array([10.0, -5.0]), np.array([20.0, 10.0]))
    acc.add(np.array([0.0, 5.0]), np.array([20.0, 0.0]))            # a zero limit does not divide by zero
    assert acc.take_mean(out)
    assert out[0] == pytest.approx(0.25) and out[1] == pytest.approx((0.5 + 5.0 / 1e-9) / 2)
    assert not acc.take_mean(out)


def test_the_effort_mean_passed_in_is_what_the_key_sees():
    inp, step = rig()
    idle, busy = EffortAccumulator(N), EffortAccumulator(N)
    busy.add(np.full(N, 10.0), np.full(N, 20.0))
    step.update(0.0, inp, idle, ("open_door", 0))
    k_idle = np.zeros(64)
    step.read_latest(k_idle)
    step2 = TaskKeyStep(ProjectionKeyEncoder(EncoderConfig(n_joints=N)), N)
    step2.update(0.0, inp, busy, ("open_door", 0))
    k_busy = np.zeros(64)
    step2.read_latest(k_busy)
    assert np.linalg.norm(block(k_busy, "effort")) > 0.05 and np.allclose(block(k_idle, "effort"), 0.0)
    # with no tick in between, the next key keeps the last mean
    step2.update(0.03, inp, busy, ("open_door", 0))
    k_again = np.zeros(64)
    step2.read_latest(k_again)
    assert np.allclose(block(k_again, "effort"), block(k_busy, "effort"))


def test_context_and_versions():
    inp, step = rig()
    acc = EffortAccumulator(N)
    a = step.update(0.0, inp, acc, ("open_door", 0))
    ka = np.zeros(64)
    assert step.read_latest(ka) == a.version == 1 and step.last_time == 0.0
    b = step.update(0.03, inp, acc, ("open_door", 1))
    kb = np.zeros(64)
    assert step.read_latest(kb) == b.version == 2
    assert float(ka @ kb) < 0.9                                     # another stage: another key
    assert np.allclose(block(ka, "robot_id"), block(kb, "robot_id"))


def test_odometry_delta_between_keys_enters_the_key():
    inp, step = rig()
    acc = EffortAccumulator(N)
    inp.set_odom(0.0, 0.0, 0.0, 0.0, 0.0)
    step.update(0.0, inp, acc, ("move_to", 0))
    still = np.zeros(64)
    step.update(0.03, inp, acc, ("move_to", 0))
    step.read_latest(still)
    inp.set_odom(0.05, 0.0, 0.0, 0.0, 0.0)
    moved = np.zeros(64)
    step.update(0.06, inp, acc, ("move_to", 0))
    step.read_latest(moved)
    assert np.allclose(block(still, "odom"), 0.0) and block(moved, "odom")[0] > 0.1
