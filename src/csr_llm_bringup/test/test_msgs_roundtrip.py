"""Every csr_llm_msgs message crosses a process boundary over Fast DDS unchanged."""
import json
import subprocess
import sys
import time
from pathlib import Path

from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from builtin_interfaces.msg import Time
from std_msgs.msg import Header
from csr_llm_msgs.msg import (CsrStatus, Decision, IntentArgument, MotorCommand, RouterStatus,
                              StateChunk)
from csr_llm_common.ros_conversions import message_to_dict
from csr_llm_common.ros.spin import spinning
import pytest

pytestmark = pytest.mark.dds   # real nodes over Fast DDS (loopback)

LISTENER = Path(__file__).with_name("msg_listener.py")


def header(sec):
    return Header(stamp=Time(sec=sec, nanosec=123456789), frame_id="base_link")


def samples():
    """One sample per type with every field set to a non-default value."""
    return {
        "StateChunk": StateChunk(header=header(1), seq=18446744073709551000, source_topic="/events",
                                 kind=StateChunk.KIND_EVENT, text="person approaching: 0.8 m, ünïcödé",
                                 token_count=12),
        "Decision": Decision(
            header=header(2), decision_id=7, intent="grip_handle",
            arguments=[IntentArgument(name="force", type=IntentArgument.TYPE_FLOAT, float_value=15.5),
                       IntentArgument(name="tries", type=IntentArgument.TYPE_INT, int_value=-3),
                       IntentArgument(name="side", type=IntentArgument.TYPE_STRING, string_value="left"),
                       IntentArgument(name="gentle", type=IntentArgument.TYPE_BOOL, bool_value=True)],
            trigger=Decision.TRIGGER_EVENT, state_version=4, prefix_tokens=8191, last_chunk_seq=99,
            ttft_ms=48.25, total_ms=812.5, resource="R2", raw_output='{"intent":"grip_handle"}'),
        "CsrStatus": CsrStatus(header=header(3), prefix_tokens=4000, static_tokens=600, tau_mem=8192,
                               chunk_count=120, state_version=3, reconciling=True, primary_resource="R1",
                               buffered_tokens=64, last_chunk_seq=500, seq_gaps=2, evictions=3, swaps=2,
                               evicted_chunks=300, evicted_tokens=9000, rejected_chunks=1),
        "MotorCommand": MotorCommand(header=header(4), joint_names=["shoulder", "elbow", "wrist"],
                                     effort=[1.5, -2.25, 0.0], effort_limit=[10.0, 8.0, 2.5],
                                     clamped=[False, True, False], reference_position=[0.5, -1.0, 0.25],
                                     execution_state=MotorCommand.EXEC_DERATED,
                                     source=MotorCommand.SOURCE_INTERRUPT, sub_task="back_off_10cm"),
        "RouterStatus": RouterStatus(header=header(5), active_intent="open_door",
                                     active_sub_task="door_handle_grip", zone="warehouse",
                                     match_similarity=0.91, match_threshold=0.72, l1_hit=True, l2_hit=True,
                                     l3_clamped=True, l1_us=12.5, l2_us=40.0, l3_us=8.0, task_hit_rate=0.89,
                                     behaviour_hit_rate=0.75, execution_hit_rate=0.5, interrupt_depth=2,
                                     execution_state=MotorCommand.EXEC_FAILSAFE, loop_hz=999.5,
                                     slip_detected=True, odom_weight=0.25, slip_events=2,
                                     unknown_scene_count=3, grip_done_count=1, derate_count=4,
                                     confidence_flips=5, failsafe_count=6, input_faults=7),
    }


def test_every_message_round_trips_between_processes():
    sent = samples()
    listener = subprocess.Popen([sys.executable, str(LISTENER), ",".join(sent), "60"],
                                stdout=subprocess.PIPE, text=True)
    received = {}
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    try:
        with spinning() as spinner:
            node = spinner.create(Node, "msg_roundtrip_talker")
            publishers = {name: node.create_publisher(type(msg), f"roundtrip/{name}", qos)
                          for name, msg in sent.items()}
            deadline = time.monotonic() + 60
            while listener.poll() is None and time.monotonic() < deadline:
                for name, msg in sent.items():
                    publishers[name].publish(msg)
                time.sleep(0.2)
        out, _ = listener.communicate(timeout=30)
    finally:
        if listener.poll() is None:
            listener.kill()
    for line in out.splitlines():
        record = json.loads(line)
        if "type" in record:
            received[record["type"]] = record["msg"]
    assert listener.returncode == 0, f"listener got only {sorted(received)}"
    for name, msg in sent.items():
        expected = message_to_dict(msg)
        for field, value in expected.items():
            assert received[name][field] == value, f"{name}.{field}: sent {value!r}, got {received[name][field]!r}"
