"""Subscriber process for the message round-trip test.

Prints one JSON line per message type (the first sample received, as a plain dict) and exits
when every requested type has arrived, or with code 3 after the timeout.
"""
import json
import sys
import time

import rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

import csr_llm_msgs.msg as csr_msgs
from csr_llm_common.ros_conversions import message_to_dict


def main() -> int:
    names = sys.argv[1].split(",")
    timeout = float(sys.argv[2])
    rclpy.init()
    node = Node("msg_roundtrip_listener")
    received = {}
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)

    def make_callback(name):
        def callback(msg):
            if name not in received:
                received[name] = message_to_dict(msg)
                print(json.dumps({"type": name, "msg": received[name]}), flush=True)
        return callback

    subscriptions = [node.create_subscription(getattr(csr_msgs, name), f"roundtrip/{name}",
                                              make_callback(name), qos) for name in names]
    print(json.dumps({"ready": True, "subscriptions": len(subscriptions)}), flush=True)
    deadline = time.monotonic() + timeout
    while len(received) < len(names) and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.1)
    node.destroy_node()
    rclpy.shutdown()
    return 0 if len(received) == len(names) else 3


if __name__ == "__main__":
    sys.exit(main())
