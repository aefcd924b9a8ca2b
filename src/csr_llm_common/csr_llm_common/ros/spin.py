"""Spin rclpy nodes in a background thread and shut them down in the order rclpy needs.

Order matters: executor.shutdown(), join the spin thread, destroy nodes, then rclpy.shutdown();
otherwise the process can abort at exit (measured: the process aborted at exit otherwise).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterable, Iterator, List, Optional

import rclpy
from rclpy.context import Context
from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.subscription import Subscription


class BackgroundSpinner:
    """Owns an rclpy context and an executor spinning in a daemon thread.

    Single-threaded by default: rclpy's MultiThreadedExecutor burns a core while a ready callback
    waits for its callback group, which starves the other processes on a small machine.
    """

    def __init__(self, args: Optional[List[str]] = None, num_threads: int = 1):
        self.context = Context()
        rclpy.init(args=args, context=self.context)
        self.executor = (SingleThreadedExecutor(context=self.context) if num_threads <= 1 else
                         MultiThreadedExecutor(num_threads=num_threads, context=self.context))
        self._nodes: List[Node] = []
        self._thread = threading.Thread(target=self._spin, name="rclpy-spin", daemon=True)
        self._started = False

    def _spin(self) -> None:
        try:
            self.executor.spin()
        except Exception:  # executor torn down under us during shutdown
            if self.context.ok():
                raise

    def create(self, node_class=Node, *args, **kwargs):
        """Construct a node (of node_class) in this spinner's context and spin it."""
        return self.add(node_class(*args, context=self.context, **kwargs))

    def add(self, node: Node) -> Node:
        self._nodes.append(node)
        self.executor.add_node(node)
        if not self._started:
            self._started = True
            self._thread.start()
        return node

    def shutdown(self) -> None:
        self.executor.shutdown(timeout_sec=2.0)
        if self._started:
            self._thread.join(timeout=5.0)
        for node in self._nodes:
            node.destroy_node()
        self._nodes.clear()
        if self.context.ok():
            rclpy.shutdown(context=self.context)


@contextlib.contextmanager
def spinning(num_threads: int = 1) -> Iterator[BackgroundSpinner]:
    spinner = BackgroundSpinner(num_threads=num_threads)
    try:
        yield spinner
    finally:
        spinner.shutdown()


def take_waiting(subscriptions: Iterable[Subscription]) -> int:
    """Run each subscription's callback on every message already waiting in its reader; returns
    how many. An executor takes one message per reader per wait, so a burst on one topic (one
    Temperature per motor) can straddle a message that follows it on another: a callback that must
    see everything published before it (a lockstepped control tick) takes the rest first."""
    taken = 0
    for sub in subscriptions:
        with sub.handle:
            while (message := sub.handle.take_message(sub.msg_type, sub.raw)) is not None:
                sub.callback(message[0])
                taken += 1
    return taken
