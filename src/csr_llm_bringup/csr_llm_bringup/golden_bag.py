"""Compact a recorded sim run into a golden bag (plain module, no rclpy).

A golden keeps only what a replay needs, in a rosbag2 MCAP folder (metadata.yaml + one .mcap) with
zstd chunk compression, readable by `ros2 bag info` / `ros2 bag play`:
* the inputs the graph consumes: the sensor topics, the operator lines (events), the detected
  objects, and the head camera as the 16 features the router computes from each depth frame
  (std_msgs/Float32MultiArray on /vision_features, stamped at the frame's time; the depth CNN runs
  here once, the replayed router reads the features);
* the outputs to compare: decisions, the chunk stream (the context of a divergence), the CSR status,
  the router status at its transitions only, the motor commands at a reduced rate. The bless step
  takes them from a replay of the compacted inputs (`outputs_from`), not from the sim run: the
  replay graph is what every later replay runs (the sim's own first aggregation window depends on
  when its nodes matched, a replay's does not).
/clock is not kept: the player derives it from the messages' stamps.
"""
from __future__ import annotations

import heapq
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple, cast

import numpy as np
from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer

from .bags import typestore

INPUTS = ("/joint_states", "/imu", "/odom", "/gripper/wrench", "/motor_temperature", "/proximity", "/zone",
          "/events", "/detected_objects", "/scenario/expectations")
OUTPUTS = ("/decision", "/state_chunks", "/csr_status")
MOTOR_TOPIC, ROUTER_STATUS_TOPIC = "/motor_command", "/router_status"
# inputs with a header: a repeat of a message (same bytes) repeats its stamp
STAMPED_INPUTS = ("/joint_states", "/imu", "/odom", "/gripper/wrench", "/motor_temperature", "/proximity",
                  "/detected_objects")
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


def _messages(reader: AnyReader, topics: Sequence[str], header_time: bool) -> Iterator[Tuple[int, str, str, bytes]]:
    """(timestamp ns, topic, type, raw) of `topics`; `header_time`: the header stamp as timestamp
    (a replay's recorder may stamp its bag with another clock than the inputs')."""
    for conn, timestamp, raw in reader.messages(connections=[c for c in reader.connections if c.topic in topics]):
        if header_time:
            stamp = cast(Any, reader.deserialize(raw, conn.msgtype)).header.stamp
            timestamp = stamp.sec * 1_000_000_000 + stamp.nanosec or timestamp
        yield timestamp, conn.topic, conn.msgtype, bytes(raw)


def compact(raw_bag: Path, out_bag: Path, motor_every: int = 5, outputs_from: Optional[Path] = None) -> CompactResult:
    """Write the golden bag `out_bag` from the full recording `raw_bag` (see the module docstring);
    `outputs_from`: take the outputs from this bag (a replay of the inputs) instead."""
    store = typestore()
    result = CompactResult()
    camera = None
    last_status: Tuple = ()
    motor_seen = 0
    outputs = (*OUTPUTS, MOTOR_TOPIC, ROUTER_STATUS_TOPIC)
    sources = [Path(raw_bag)] + ([Path(outputs_from)] if outputs_from is not None else [])
    readers = [AnyReader([path], default_typestore=store) for path in sources]
    with ExitStack() as stack:
        for reader in readers:
            stack.enter_context(reader)
        writer = stack.enter_context(open_compressed_writer(out_bag))
        conns: Dict[str, Any] = {}
        inputs = [*INPUTS, CAMERA_TOPIC] + ([] if outputs_from is not None else list(outputs))
        streams = [_messages(readers[0], inputs, header_time=False)]
        if outputs_from is not None:
            streams.append(_messages(readers[1], outputs, header_time=True))
        seen_inputs: Dict[str, set] = {}
        for timestamp, topic, msgtype, raw in heapq.merge(*streams, key=lambda m: m[0]):
            keep = True
            if topic in STAMPED_INPUTS:
                # a sensor timer that fired again while a lockstep boundary held sim time repeats its
                # sample (same stamp, same content): kept once, the replay's input does not depend on
                # how long the recording waited there
                recent = seen_inputs.setdefault(topic, set())
                if len(recent) > 64:
                    recent.clear()
                keep = raw not in recent
                recent.add(raw)
            if topic == MOTOR_TOPIC:
                keep = motor_seen % motor_every == 0
                motor_seen += 1
            elif topic == ROUTER_STATUS_TOPIC:
                key = status_key(store.deserialize_cdr(raw, msgtype))
                keep, last_status = key != last_status, key
            elif topic == CAMERA_TOPIC:
                camera = camera or _FeatureCamera()
                topic, msgtype, timestamp, raw = _features_message(store, camera, raw, msgtype, timestamp)
            if keep:
                if topic not in conns:
                    conns[topic] = writer.add_connection(topic, msgtype, typestore=store)
                writer.write(conns[topic], timestamp, raw)
                result.kept[topic] = result.kept.get(topic, 0) + 1
            else:
                result.dropped[topic] = result.dropped.get(topic, 0) + 1
    return result


def _features_message(store, camera: _FeatureCamera, raw: bytes, msgtype: str, timestamp: int
                      ) -> Tuple[str, str, int, bytes]:
    """A depth frame -> the /vision_features message of its features, stamped at the frame's time."""
    image = cast(Any, store.deserialize_cdr(raw, msgtype))
    features = store.types[FEATURES_TYPE](layout=store.types["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0),
                                          data=camera.features(image))
    stamp_ns = image.header.stamp.sec * 1_000_000_000 + image.header.stamp.nanosec
    return FEATURES_TOPIC, FEATURES_TYPE, stamp_ns or timestamp, bytes(store.serialize_cdr(features, FEATURES_TYPE))


def bag_size(bag: Path) -> int:
    return sum(p.stat().st_size for p in Path(bag).rglob("*") if p.is_file())
