"""Two routers over real DDS in two namespaces sharing one task store (SQLite file): robot A meets an
unknown scene, is confirmed and learns it into the store; robot B (robot ID from the machine and
its namespace, isolation on) sees the same scene and must not route A's entry: it runs its own
unknown-scene protocol. Cross-talk = B starting A's task sequence."""
import time

import numpy as np
import pytest
import yaml
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from csr_llm_common.ros.spin import spinning
from csr_llm_common.ros.testing import start_node, stop_node, wait_for
from csr_llm_msgs.msg import Decision, MotorCommand
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Float32MultiArray, String

from test_node_dds import FILES, JOINTS, REPO

pytestmark = [pytest.mark.dds, pytest.mark.slow]


def test_two_robots_sharing_a_store_never_route_each_others_entries(tmp_path):
    store = tmp_path / "task_layer.sqlite"
    unknown = yaml.safe_load((REPO / "config" / "scene_keys.yaml").read_text())["scenes"]["path_crate"][0]
    params = [f"{name}_file:={REPO / 'config' / FILES[name]}" for name in FILES] + [
        "autostart:=true", "control_hz:=100.0", "state_timeout_s:=2.0", "zone:=door", "vision_source:=features",
        f"task_store:={store}", "task_store_poll_s:=0.1"]
    procs = {ns: start_node("action_router.router_node", *params, extra_args=["--ros-args", "-r", f"__ns:=/{ns}"])
             for ns in ("robot_a", "robot_b")}
    motors = {ns: [] for ns in procs}
    requests = {ns: [] for ns in procs}
    outputs = {}
    try:
        with spinning() as sp:
            node = sp.create(Node, "scene_dds_peer")
            qos = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
            pubs = {}
            for ns in procs:
                node.create_subscription(MotorCommand, f"/{ns}/motor_command",
                                         lambda m, ns=ns: motors[ns].append(m.sub_task), qos)
                node.create_subscription(String, f"/{ns}/decision_request",
                                         lambda m, ns=ns: requests[ns].append(m.data), qos)
                pubs[ns] = {"js": node.create_publisher(JointState, f"/{ns}/joint_states", qos),
                            "imu": node.create_publisher(Imu, f"/{ns}/imu", qos),
                            "vision": node.create_publisher(Float32MultiArray, f"/{ns}/vision_features", qos),
                            "decision": node.create_publisher(Decision, f"/{ns}/decision", qos)}
            js = JointState(name=JOINTS, position=[0.0, 0.0, 0.0, 0.0, 0.04], velocity=[0.0] * 5)
            imu = Imu()
            imu.linear_acceleration.z = 9.80665
            vision = Float32MultiArray(data=[float(v) for v in np.asarray(unknown)])

            def feed(seconds):
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    for p in pubs.values():
                        js.header.stamp = imu.header.stamp = node.get_clock().now().to_msg()
                        p["js"].publish(js)
                        p["imu"].publish(imu)
                        p["vision"].publish(vision)
                    time.sleep(0.02)

            def until(pred, timeout):
                end = time.monotonic() + timeout
                while time.monotonic() < end:
                    feed(0.1)
                    if pred():
                        return True
                return False

            if not until(lambda: all(motors.values()), 60):
                printed = {ns: stop_node(proc)[1][-3000:] for ns, proc in procs.items()}
                pytest.fail(f"no motor commands from {[ns for ns in motors if not motors[ns]]}; they printed {printed}")
            pubs["robot_a"]["decision"].publish(Decision(intent="open_door"))
            assert until(lambda: motors["robot_a"] and motors["robot_a"][-1] == "retreat_1m", 15), \
                motors["robot_a"][-5:]
            assert any("unknown scene" in q for q in requests["robot_a"])
            pubs["robot_a"]["decision"].publish(Decision(intent="open_door", trigger=Decision.TRIGGER_REQUEST))
            assert until(lambda: motors["robot_a"][-1] == "approach_handle", 15), motors["robot_a"][-5:]
            assert wait_for(lambda: store.exists() and store.stat().st_size > 0, 5)
            feed(1.5)                                       # B's store thread reads A's rows
            pubs["robot_b"]["decision"].publish(Decision(intent="open_door"))
            assert until(lambda: motors["robot_b"] and motors["robot_b"][-1] in ("retreat_1m", "approach_handle"), 15)
            feed(0.3)
            cross_talk = int("approach_handle" in motors["robot_b"])
            assert cross_talk == 0, motors["robot_b"][-5:]
            assert any("unknown scene" in q for q in requests["robot_b"])
            assert not any("mapped at" in q for q in requests["robot_b"])      # A's map entry is A's
    finally:
        for ns, proc in procs.items():
            outputs[ns] = stop_node(proc)[1]
    ids = [line.split("robot ", 1)[1].split(",")[0] for ns in procs for line in outputs[ns].splitlines()
           if "seeded task-layer keys, robot " in line]
    assert len(ids) == 2 and ids[0] != ids[1] and ids[0].endswith("/robot_a"), ids
