"""Small helpers shared by the node modules (these import rclpy; plain modules never do)."""
from __future__ import annotations

import math
import signal
import threading
from typing import Optional

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions


def stamp_seconds(node: Node, header=None) -> float:
    """The message's header stamp in seconds, or the node clock (sim time when enabled) if unset."""
    if header is not None and (header.stamp.sec or header.stamp.nanosec):
        return header.stamp.sec + header.stamp.nanosec * 1e-9
    return node.get_clock().now().nanoseconds * 1e-9


class FaultLog:
    """Log one clear line per kind of fault (then count silently), so bad input cannot flood logs."""

    def __init__(self, node: Node):
        self._node = node
        self._seen = set()
        self._lock = threading.Lock()
        self.count = 0

    def report(self, kind: str, message: str) -> None:
        with self._lock:
            self.count += 1
            first = kind not in self._seen
            self._seen.add(kind)
        if first:
            self._node.get_logger().warning(f"{message} (further '{kind}' faults are counted, not logged)")


def finite_or(value: float, default: float) -> float:
    return value if math.isfinite(value) else default


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


def run_node(node_factory, args=None, executor_factory=None) -> int:
    """rclpy.init, build the node, spin until Ctrl-C/SIGTERM, then tear down in the right order.

    rclpy's own signal handler would invalidate the context before the node's destroy_node runs
    (its last log lines and saves then fail); here SIGINT/SIGTERM raise KeyboardInterrupt instead.
    """
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    node: Optional[Node] = None
    executor = None
    try:
        node = node_factory()
        if executor_factory is None:
            # rclpy's MultiThreadedExecutor spins a core at 100 % whenever a ready callback waits
            # for its (mutually exclusive) group (measured: the simulator node starved the graph);
            # our callbacks are short and long work runs in the nodes' own threads
            from rclpy.executors import SingleThreadedExecutor
            executor = SingleThreadedExecutor()
        else:
            executor = executor_factory()
        executor.add_node(node)
        while rclpy.ok():   # short waits, so KeyboardInterrupt from SIGINT/SIGTERM is delivered promptly
            executor.spin_once(timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if executor is not None:
            executor.shutdown(timeout_sec=2.0)
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0
