"""Helpers for the suite's integration tests: wait for a condition, run a node in its own process.

Node processes get the test's environment (loopback-only DDS, its domain) and are stopped with
SIGINT first, as a user's Ctrl-C would, so the tests exercise the nodes' real shutdown path.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Optional, Sequence, Tuple


def wait_for(predicate: Callable[[], object], timeout: float, step: float = 0.05) -> bool:
    """True as soon as predicate() is truthy, False after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


def start_node(module: str, *params: str, env: Optional[dict] = None,
               extra_args: Sequence[str] = ()) -> subprocess.Popen:
    """`python -m module --ros-args -p name:=value ...` with merged stdout/stderr as text."""
    args = [sys.executable, "-m", module, *extra_args, "--ros-args"]
    for param in params:
        args += ["-p", param]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ if env is None else env, PYTHONUNBUFFERED="1"))


def stop_node(process: subprocess.Popen, timeout: float = 30.0) -> Tuple[int, str]:
    """SIGINT, wait, SIGKILL if it hangs; returns (exit code, everything it printed)."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
    return process.returncode, out or ""


class ChildOutput:
    """A child process's merged output, read line by line in a thread: waiting for a line never blocks
    past its timeout, even when the child prints nothing more (a hung child fails the test instead
    of holding the run)."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.lines: list = []
        self._thread = threading.Thread(target=self._read, name="child-output", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, predicate: Callable[[str], object], timeout: float) -> bool:
        """True once predicate(everything printed so far) holds; False after timeout or at the
        child's exit without it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self.text()):
                return True
            if not self._thread.is_alive():
                return bool(predicate(self.text()))
            time.sleep(0.05)
        return bool(predicate(self.text()))

    def finish(self, timeout: float = 60.0) -> Tuple[int, str]:
        """(exit code, all output) once the child exits; SIGKILL if it is still running after
        timeout seconds."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._thread.join(timeout=5)
        return self.process.returncode, self.text()


def print_recovery(title: str, recovery: dict) -> None:
    """Measured recovery times, name -> seconds (shown with pytest -s)."""
    print("\n" + title)
    for what, seconds in recovery.items():
        print(f"  {what:40s} {1000 * seconds:9.1f} ms")


class JointStream:
    """Joint states (all at `position`) at `hz` on the node clock from a background thread: a robot's
    normal input while a test injects faults. Use as a context manager."""

    def __init__(self, node, joints: Sequence[str], hz: float = 100.0, position: float = 0.1):
        from sensor_msgs.msg import JointState
        from . import qos
        self.pub = node.create_publisher(JointState, "joint_states", qos.COMMANDS)
        self.msg = JointState(name=list(joints), position=[position] * len(joints), velocity=[0.0] * len(joints))
        self.node, self.period, self.stop = node, 1.0 / hz, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.msg.header.stamp = self.node.get_clock().now().to_msg()
            self.pub.publish(self.msg)
            time.sleep(self.period)

    def __enter__(self) -> "JointStream":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=2)
