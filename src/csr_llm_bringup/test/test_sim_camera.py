"""The head depth camera (mj_multiRay, no OpenGL) and the depth CNN on its images: depth equals
the known distance to a wall, every pixel agrees with mj_ray, the robot never sees itself; the
CNN gives 16 finite features at the scale of one scene kind's spread; scenes built to differ
route to their own variant through the plain Router (plain modules, no ROS)."""
import math

import mujoco
import numpy as np
import pytest

from action_router.camera_features import depth_from_image
from action_router.depth_cnn import FEATURES, DepthFeatureExtractor
from csr_llm_bringup.lab.bench_scene import EXPECTED, INTENT_OF, base_objects, route_once
from csr_llm_bringup.sim.depth_camera import CameraSpec, DepthCamera, mount_pose
from csr_llm_bringup.sim.scene_keys import SceneMaker
from action_router.params import make_config
from action_router.router import Router

WALL = """<mujoco><worldbody>
  <geom name="wall" type="box" pos="2.05 0 1" size="0.05 3 1"/>
  <geom name="floor" type="plane" size="5 5 0.1"/>
</worldbody></mujoco>"""


def test_depth_equals_the_distance_to_a_wall_facing_the_camera():
    model = mujoco.MjModel.from_xml_string(WALL)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    spec = CameraSpec(width=32, height=24, hfov=math.radians(60), max_range=5.0, mount=(0.0, 0.0, 1.0), pitch=0.0)
    cam = DepthCamera(model, spec)
    pos, rot = mount_pose(spec, (0.5, 0.0, 0.0))           # 1.5 m from the wall's face at x = 2.0
    depth, geom = cam.capture(data, pos, rot)
    wall = geom == mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "wall")
    assert wall.sum() > 0.4 * wall.size
    # z-depth (REP 118): a wall perpendicular to the optical axis reads one distance everywhere
    assert np.allclose(depth[wall], 1.5, atol=1e-6)
    far = CameraSpec(width=8, height=6, hfov=math.radians(60), max_range=1.0, mount=(0.0, 0.0, 1.0), pitch=0.0)
    depth, geom = DepthCamera(model, far).capture(data, *mount_pose(far, (0.5, 0.0, 0.0)))
    assert np.isinf(depth).all() and (geom == -1).all()     # nothing within range: +inf, no geom


@pytest.mark.parametrize("handle", ["lever", "knob"])
def test_every_pixel_agrees_with_mj_ray_and_the_robot_is_invisible(handle):
    maker = SceneMaker(seed=3)
    sim = maker.sim(handle)
    sim.set_base_pose(0.0, 0.0, 0.0)
    depth, geom = (a.copy() for a in sim.depth_image())
    spec = sim.camera.spec
    pos, rot = mount_pose(spec, sim.base_pose())
    gid = np.zeros(1, dtype=np.int32)
    groups = np.array([1, 1, 1, 0, 0, 0], dtype=np.uint8)
    for v in range(0, spec.height, 5):
        for u in range(0, spec.width, 7):
            vec = rot @ sim.camera._dirs_cam[v * spec.width + u]
            dist = mujoco.mj_ray(sim.model, sim.data, pos, vec, groups, 1, -1, gid)
            assert int(gid[0]) == int(geom[v, u]), (u, v)
            if gid[0] >= 0:
                assert dist * sim.camera._axis_cos[v, u] == pytest.approx(depth[v, u], abs=1e-5)
    # the arm moved into view changes nothing: the robot's geoms are not in the camera's groups
    sim.physics.set_joint_positions([0.0, -1.0, 0.5, 0.0, 0.04])
    mujoco.mj_forward(sim.model, sim.data)
    assert np.array_equal(sim.depth_image()[0], depth)
    # the handles differ where the camera looks
    other = maker.sim("none")
    other.set_base_pose(0.0, 0.0, 0.0)
    assert np.sum(np.abs(other.depth_image()[0] - depth) > 0.005) > 20


def test_cnn_output_shape_and_scale():
    maker = SceneMaker(seed=5)
    cnn = DepthFeatureExtractor()
    assert cnn.version == "depth_cnn_v1" and cnn.camera["width"] == maker.camera.width
    feats = {kind: np.stack([cnn.features(maker.depth(kind)) for _ in range(12)])
             for kind in ("door_lever", "door_knob", "shelf_high", "path_clear")}
    for kind, f in feats.items():
        assert f.shape == (12, FEATURES) and np.isfinite(f).all(), kind
    # one unit = the spread within a kind (whitened discriminant): spread ~1, kinds several apart
    spread = np.mean([np.linalg.norm(f - f.mean(axis=0), axis=1).mean() for f in feats.values()])
    assert 0.2 < spread < 3.0, spread
    # lever and knob (a few cm of relief) apart along the direction between them
    axis = feats["door_lever"].mean(axis=0) - feats["door_knob"].mean(axis=0)
    axis /= np.linalg.norm(axis)
    lever, knob = feats["door_lever"] @ axis, feats["door_knob"] @ axis
    assert lever.min() > knob.max(), (lever, knob)
    assert lever.mean() - knob.mean() > 3.0 * max(lever.std(), knob.std())
    # dropped pixels (no return) read as their neighbours, not as spikes
    depth = maker.depth("door_lever")
    holed = depth.copy()
    holed[::7, ::5] = np.nan
    assert np.linalg.norm(cnn.features(holed) - cnn.features(depth)) < spread


def test_depth_image_decoding_and_rejection():
    d = np.array([[1.0, 2.0], [np.inf, 0.5]], dtype="<f4")
    out, why = depth_from_image("32FC1", 2, 2, 8, False, d.tobytes())
    assert why == "" and np.array_equal(out, d.astype(float))
    mm = np.array([[1000, 0], [2500, 500]], dtype="<u2")
    out, _ = depth_from_image("16UC1", 2, 2, 4, False, mm.tobytes())
    assert out[0, 0] == 1.0 and math.isnan(out[0, 1]) and out[1, 0] == 2.5
    assert depth_from_image("rgb8", 2, 2, 6, False, bytes(12))[0] is None
    assert "step" in depth_from_image("32FC1", 2, 2, 8, False, bytes(7))[1]


def test_scenes_built_to_differ_route_to_their_own_variant():
    maker = SceneMaker(seed=11)
    cnn = DepthFeatureExtractor()
    cfg = make_config({"robot_id": "test"})
    for kind in ("door_lever", "door_knob", "shelf_high", "shelf_low", "path_clear", "path_crate", "door_open"):
        intent, args = INTENT_OF[kind.split("_")[0]]
        got = []
        for _ in range(3):
            depth = maker.depth(kind)
            sim = maker._sims[maker.last_handle]
            got.append(route_once(Router(cfg), cnn.features(depth), intent, args, sim.zone(), sim.base_pose(),
                                  base_objects(sim)))
        want = EXPECTED[kind] or "unknown"
        assert got.count(want) >= 2 and all(g in (want, "unknown") for g in got), (kind, got)
