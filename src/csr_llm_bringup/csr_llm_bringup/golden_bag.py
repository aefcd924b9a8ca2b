"""Compact a recorded sim run into a golden bag (plain module, no rclpy).

A golden keeps only what a replay needs, in a rosbag2 MCAP folder (metadata.yaml + one .mcap) with
zstd chunk compression, readable by `ros2 bag info` / `ros2 bag play`:
* the inputs the graph consumes: the sensor topics, the operator lines (events), the detected
  objects, and the head camera as the 16 features the router computes from each depth frame
  (std_msgs/Float32MultiArray on /vision_features, stamped at the frame's time; the depth CNN runs
  here once, the replayed router reads the features);
* the outputs to compare: decisions, the chunk stream (the context of a divergence), the CSR status,
  the router status at its transitions only, the motor commands at a reduced rate.
/clock is not kept: the player derives it from the messages' stamps.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Tuple, cast

import numpy as np
from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer

from .bags import typestore

INPUTS = ("/joint_states", "/imu", "/odom", "/gripper/wrench", "/motor_temperature", "/proximity", "/zone",
          "/events", "/detected_objects", "/scenario/expectations")
OUTPUTS = ("/decision", "/state_chunks", "/csr_status")
MOTOR_TOPIC, ROUTER_STATUS_TOPIC = "/motor_command", "/router_status"
CAMERA_TOPIC, FEATURES_TOPIC = "/camera/depth/image_raw", "/vision_features"
FEATURES_TYPE = "std_msgs/msg/Float32MultiArray"
# what a router status transition is: a change of any of these fields
STATUS_FIELDS = ("active_intent", "active_sub_task", "paused_intent", "execution_state", "interrupt_depth",
                 "unknown_scene_count", "grip_done_count", "derate_count", "failsafe_count", "last_decision_id")


@dataclass
class CompactResult:
    kept: Dict[str, int] = field(default_factory=dict)      # topic -> messages written
    dropped: Dict[str, int] = field(default_factory=dict)   # topic -> messages left out


def status_key(msg: Any) -> Tuple:
    return tuple(getattr(msg, name) for name in STATUS_FIELDS)


def open_compressed_writer(path: Path) -> Writer:
    """A rosbag2 MCAP writer with zstd chunk compression (MCAP's own, transparent to readers); not open yet."""
    writer = Writer(Path(path), version=9, storage_plugin=StoragePlugin.MCAP)
    writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
    return writer


class _FeatureCamera:
    """Depth image -> the router's 16 scene features (the router's own CNN and image decoding)."""

    def __init__(self) -> None:
        from action_router.camera_features import depth_from_image, single_blas_thread
        from action_router.depth_cnn import DepthFeatureExtractor
        single_blas_thread()
        self._decode = depth_from_image
        self._extractor = DepthFeatureExtractor(None)

    def features(self, image: Any) -> np.ndarray:
        depth, why = self._decode(image.encoding, image.height, image.width, image.step, bool(image.is_bigendian),
                                  bytes(image.data))
        if depth is None:
            raise ValueError(f"camera frame cannot be decoded: {why}")
        return np.asarray(self._extractor.features(depth), dtype=np.float32)


def compact(raw_bag: Path, out_bag: Path, motor_every: int = 5) -> CompactResult:
    """Write the golden bag `out_bag` from the full recording `raw_bag` (see the module docstring)."""
    store = typestore()
    result = CompactResult()
    camera = None
    last_status: Tuple = ()
    motor_seen = 0
    with AnyReader([Path(raw_bag)], default_typestore=store) as reader, open_compressed_writer(out_bag) as writer:
        conns: Dict[str, Any] = {}

        def write(topic: str, msgtype: str, timestamp: int, data: bytes) -> None:
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, msgtype, typestore=store)
            writer.write(conns[topic], timestamp, data)
            result.kept[topic] = result.kept.get(topic, 0) + 1

        for conn, timestamp, raw in reader.messages():
            topic = conn.topic
            keep = topic in INPUTS or topic in OUTPUTS
            if topic == MOTOR_TOPIC:
                keep = motor_seen % motor_every == 0
                motor_seen += 1
            elif topic == ROUTER_STATUS_TOPIC:
                key = status_key(reader.deserialize(raw, conn.msgtype))
                keep, last_status = key != last_status, key
            elif topic == CAMERA_TOPIC:
                camera = camera or _FeatureCamera()
                image = cast(Any, reader.deserialize(raw, conn.msgtype))
                features = store.types[FEATURES_TYPE](
                    layout=store.types["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0),
                    data=camera.features(image))
                stamp_ns = image.header.stamp.sec * 1_000_000_000 + image.header.stamp.nanosec
                write(FEATURES_TOPIC, FEATURES_TYPE, stamp_ns or timestamp,
                      bytes(store.serialize_cdr(features, FEATURES_TYPE)))
                continue
            if keep:
                write(topic, conn.msgtype, timestamp, bytes(raw))
            else:
                result.dropped[topic] = result.dropped.get(topic, 0) + 1
    return result


def bag_size(bag: Path) -> int:
    return sum(p.stat().st_size for p in Path(bag).rglob("*") if p.is_file())
