"""CameraFeatures inline (lockstepped sim and replay): the features are delivered before submit returns."""
import numpy as np

from action_router.camera_features import CameraFeatures
from action_router.depth_cnn import DepthFeatureExtractor


def test_inline_camera_delivers_the_frames_features_before_submit_returns():
    got = []
    camera = CameraFeatures(lambda f, t: got.append((np.array(f), t)), inline=True)
    try:
        depth = np.linspace(0.5, 3.0, 48 * 64).reshape(48, 64)
        camera.submit(depth, 1.25)
        assert len(got) == 1 and got[0][1] == 1.25
        np.testing.assert_allclose(got[0][0], DepthFeatureExtractor(None).features(depth))
        camera.submit(depth[::-1], 1.5)
        assert [t for _, t in got] == [1.25, 1.5] and camera.frames == 2 and camera.dropped == 0
    finally:
        camera.close()
