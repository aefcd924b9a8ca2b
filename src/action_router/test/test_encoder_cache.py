"""Key encoder (layout, slip down-weighting, robot isolation) and the task layer search."""
import threading

import numpy as np
import pytest

from action_router.buffers import DoubleBuffer
from action_router.cache import TaskLayer
from action_router.encoder import (BLOCKS, CONTENT_DIM, EncoderConfig, Observation, ProjectionKeyEncoder,
                                   robot_id_block)


def obs(**kw):
    o = Observation(intent="open_door", stage=0, joint_pos=np.zeros(5), joint_vel=np.zeros(5),
                    effort_mean=np.zeros(5))
    for k, v in kw.items():
        setattr(o, k, v)
    return o


def test_key_is_64d_unit_norm_with_the_documented_layout():
    enc = ProjectionKeyEncoder(EncoderConfig(robot_id="r1"))
    k = enc.encode(obs(vision=np.arange(32.0)))
    assert k.shape == (64,) and np.linalg.norm(k) == pytest.approx(1.0)
    assert BLOCKS["robot_id"] == (56, 64) and CONTENT_DIM == 56
    assert np.allclose(k[56:], robot_id_block("r1") * np.sqrt(0.1))
    # no vision -> the vision block is zero; vision present -> it is not
    assert np.allclose(enc.encode(obs())[16:32], 0.0)
    assert np.linalg.norm(k[16:32]) > 0


def test_different_intents_and_stages_give_distant_keys():
    enc = ProjectionKeyEncoder(EncoderConfig())
    a = enc.encode(obs()).copy()
    b = enc.encode(obs(intent="pick_object")).copy()
    c = enc.encode(obs(stage=1)).copy()
    assert a @ b < 0.7 and a @ c < 0.7


def test_slip_down_weights_the_odometry_block():
    enc = ProjectionKeyEncoder(EncoderConfig(slip_ratio=1.8, slip_confirm=1))
    delta = np.array([0.05, 0.0, 0.0])
    # wheels and IMU agree (0.5 vs 0.45 m/s): ratio 1.1 < 1.8, full weight
    k_ok = enc.encode(obs(odom_delta=delta, wheel_speed=0.5, imu_speed=0.45)).copy()
    assert enc.last_slip_weight == 1.0
    raw_ok = k_ok[52:56] / np.linalg.norm(k_ok[:56])
    # the base slides at 0.3 m/s on locked wheels: ratio (0.3 + 0.05) / 0.05 = 7 > 1.8 -> slip
    k_slip = enc.encode(obs(odom_delta=delta, wheel_speed=0.0, imu_speed=-0.3)).copy()
    assert enc.last_slip_ratio == pytest.approx(7.0)
    assert enc.last_slip_weight == pytest.approx(1.8 / 7.0)
    raw_slip = k_slip[52:56] / np.linalg.norm(k_slip[:56])
    assert np.linalg.norm(raw_slip) < 0.5 * np.linalg.norm(raw_ok)
    # wheels spinning on a still base count too (ratio taken both ways)
    enc.encode(obs(odom_delta=delta, wheel_speed=0.45, imu_speed=0.0))
    assert enc.last_slip_ratio == pytest.approx(10.0) and enc.last_slip_weight < 1.0


def test_router_slip_flag_follows_the_base_not_the_arm():
    """IMU-derived speed vs wheel speed: no slip when the base starts to move or stands and shakes."""
    from router_rig import Rig
    rig = Rig()
    r = rig.router
    r.submit_decision("hold_position")
    wheel = 0.0
    for k in range(3000):                         # 3 s: shaking in place, then moving with the wheels
        t = k * 0.001
        shake = 1.0 * np.sin(2 * np.pi * 8 * t)    # zero-mean arm reaction, 1 m/s^2
        accel = 0.5 if 1.0 <= t < 1.4 else 0.0     # a real start: base and wheels accelerate together
        wheel += accel * 0.001
        rig.imu_acc = [shake + accel, 0.0, 9.80665]
        r.set_odom(0.0, 0.0, 0.0, wheel, 0.0, now=rig.now)
        rig.step()
        if k % 33 == 0:
            r.update_key(rig.now)
            assert r.encoder.last_slip_weight == 1.0, t
    for _ in range(600):                          # wheels lock, the base slides on at 0.2 m/s
        rig.imu_acc = [-0.05, 0.0, 9.80665]
        r.set_odom(0.0, 0.0, 0.0, 0.0, 0.0, now=rig.now)
        rig.step()
    r.update_key(rig.now)
    for _ in range(4):                            # confirmed over consecutive keys
        r.update_key(rig.now)
    assert r.encoder.last_slip_weight < 1.0 and r.status().slip_detected


def test_robots_sharing_a_cache_never_match_each_others_entries():
    a = ProjectionKeyEncoder(EncoderConfig(robot_id="robot_a"))
    b = ProjectionKeyEncoder(EncoderConfig(robot_id="robot_b"))
    layer = TaskLayer(16)
    ka = a.encode(obs()).copy()
    layer.insert(ka, pointer=3, intent=0, stage=0, seeded=True)
    kb = b.encode(obs()).copy()           # identical situation, other robot
    hit, best, sim = layer.match(kb, threshold=-1.0)  # even with no threshold at all
    assert not hit and best == -1
    hit, best, sim = layer.match(ka, threshold=0.85)
    assert hit and layer.pointer[best] == 3 and sim == pytest.approx(1.0)
    # and the ID blocks of many robots differ
    ids = {tuple(robot_id_block(f"robot_{i}")) for i in range(200)}
    assert len(ids) == 200


def test_task_layer_threshold_ring_and_hit_rate():
    layer = TaskLayer(4)
    rng = np.random.default_rng(1)
    keys = rng.standard_normal((6, 64))
    keys[:, 56:] = 0.1
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    layer.insert(keys[0], 0, 0, 0, seeded=True)
    for i in range(1, 6):
        layer.insert(keys[i], i, 0, 0, now=float(i))
    assert layer.count == 4 and layer.seeded[0]          # seeded entry never evicted
    hit, best, _ = layer.match(keys[5], 0.99)
    assert hit and layer.pointer[best] == 5
    hit, _, _ = layer.match(keys[1], 0.99)                # evicted (least recently hit)
    assert not hit
    assert layer.hit_rate == 0.5


def test_load_learned_weights(tmp_path):
    enc = ProjectionKeyEncoder(EncoderConfig())
    w = np.zeros((8, 10))
    np.savez(tmp_path / "w.npz", joints=w, vision_4=np.ones((16, 4)))
    enc.load_weights(str(tmp_path / "w.npz"))
    k = enc.encode(obs(joint_pos=np.ones(5), vision=np.ones(4)))
    assert np.allclose(k[40:48], 0.0) and np.all(k[16:32] > 0)
    np.savez(tmp_path / "bad.npz", joints=np.zeros((3, 3)))
    with pytest.raises(ValueError):
        enc.load_weights(str(tmp_path / "bad.npz"))


def test_double_buffer_reader_never_sees_a_half_written_set():
    buf = DoubleBuffer({"a": (64,), "b": (64,)})
    stop = threading.Event()

    def writer():
        k = 0
        while not stop.is_set():
            k += 1
            buf.write(float(k), a=np.full(64, float(k)), b=np.full(64, float(k)))

    t = threading.Thread(target=writer)
    t.start()
    out = {"a": np.zeros(64), "b": np.zeros(64)}
    try:
        bad = 0
        for _ in range(20000):
            stamp, _ = buf.read_into(out)
            if not (np.all(out["a"] == stamp) and np.all(out["b"] == stamp)):
                bad += 1
    finally:
        stop.set()
        t.join()
    assert bad == 0
