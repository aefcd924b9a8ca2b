"""golden_bag.compact and the golden folder model on a small synthetic recording (no ROS graph)."""
import numpy as np
import pytest
import yaml
from rosbags.highlevel import AnyReader

from csr_llm_bringup.bag_io import inspect_bag
from csr_llm_bringup.bags import open_writer, typestore
from csr_llm_bringup.golden import GoldenMissing, load_golden
from csr_llm_bringup.golden_bag import FEATURES_TOPIC, compact


def _header(store, t):
    sec = int(t)
    return store.types["std_msgs/msg/Header"](
        stamp=store.types["builtin_interfaces/msg/Time"](sec=sec, nanosec=int(round((t - sec) * 1e9))), frame_id="")


def _raw_bag(path):
    store = typestore()
    T = store.types
    writer = open_writer(path)
    conns = {}

    def write(topic, msgtype, t, msg):
        if topic not in conns:
            conns[topic] = writer.add_connection(topic, msgtype, typestore=store)
        writer.write(conns[topic], int(t * 1e9), store.serialize_cdr(msg, msgtype))

    depth = np.full((48, 64), 2.0, dtype=np.float32)
    depth[20:30, 30:40] = 0.8
    for i in range(50):
        t = 0.004 * (i + 1)
        write("/joint_states", "sensor_msgs/msg/JointState", t, T["sensor_msgs/msg/JointState"](
            header=_header(store, t), name=["arm_elbow"], position=np.array([0.1 * i]), velocity=np.array([0.0]),
            effort=np.array([0.0])))
        write("/motor_command", "csr_llm_msgs/msg/MotorCommand", t, T["csr_llm_msgs/msg/MotorCommand"](
            header=_header(store, t), joint_names=["arm_elbow"], effort=np.array([float(i)]),
            effort_limit=np.array([10.0]), clamped=np.array([False]), reference_position=np.array([0.0]),
            execution_state=0, source=1, sub_task=""))
        status = T["csr_llm_msgs/msg/RouterStatus"](**{**_status_defaults(store), "header": _header(store, t),
                                                      "active_intent": "open_door" if i >= 25 else ""})
        write("/router_status", "csr_llm_msgs/msg/RouterStatus", t, status)
        write("/clock", "rosgraph_msgs/msg/Clock", t, T["rosgraph_msgs/msg/Clock"](clock=_header(store, t).stamp))
        if i % 8 == 0:
            write("/camera/depth/image_raw", "sensor_msgs/msg/Image", t, T["sensor_msgs/msg/Image"](
                header=_header(store, t), height=48, width=64, encoding="32FC1", is_bigendian=0, step=64 * 4,
                data=np.frombuffer(depth.tobytes(), dtype=np.uint8)))
    writer.close()


def _status_defaults(store):
    cls = store.types["csr_llm_msgs/msg/RouterStatus"]
    values = {}
    for name, kind in cls.__dataclass_fields__.items():
        if name == "__msgtype__":
            continue
        values[name] = {"str": "", "bool": False, "float": 0.0, "int": 0}.get(str(kind.type), [])
    return values


def test_compaction_keeps_replay_inputs_reduces_outputs_and_turns_the_camera_into_features(tmp_path):
    pytest.importorskip("action_router.depth_cnn")
    _raw_bag(tmp_path / "raw")
    result = compact(tmp_path / "raw", tmp_path / "golden")
    assert result.kept["/joint_states"] == 50
    assert result.kept["/motor_command"] == 10                  # every 5th
    assert result.kept["/router_status"] == 2                   # its transitions only
    assert result.kept[FEATURES_TOPIC] == 7 and "/camera/depth/image_raw" not in result.kept
    assert "/clock" not in result.kept
    meta = yaml.safe_load((tmp_path / "golden" / "metadata.yaml").read_text())
    assert meta["rosbag2_bagfile_information"]["storage_identifier"] == "mcap"
    assert b"zstd" in next((tmp_path / "golden").glob("*.mcap")).read_bytes()   # chunk compression
    report = inspect_bag(tmp_path / "golden")
    assert report.topics[FEATURES_TOPIC].status == "ok" and not report.problems
    from action_router.depth_cnn import DepthFeatureExtractor
    depth = np.full((48, 64), 2.0)
    depth[20:30, 30:40] = 0.8
    expected = DepthFeatureExtractor(None).features(depth)
    with AnyReader([tmp_path / "golden"], default_typestore=typestore()) as reader:
        conns = [c for c in reader.connections if c.topic == FEATURES_TOPIC]
        (first, *_rest) = [(t, reader.deserialize(raw, c.msgtype)) for c, t, raw in reader.messages(connections=conns)]
    assert first[0] == 4_000_000                                  # stamped at its frame's time
    np.testing.assert_allclose(first[1].data, expected, rtol=1e-6, atol=1e-6)


def test_a_missing_golden_is_an_error_naming_the_bless_command(tmp_path):
    with pytest.raises(GoldenMissing, match="no .*golden.yaml"):
        load_golden("nothing", tmp_path)
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "golden.yaml").write_text("name: g\nscenario: golden\n")
    golden = load_golden("g", tmp_path)
    with pytest.raises(GoldenMissing, match="replays never record one.*make golden-bless NAME=g"):
        golden.require_bag()
