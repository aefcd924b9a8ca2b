"""A node stops when asked at any moment, its start included (run_node's handlers come first)."""
import signal
import subprocess
import sys
import time

import pytest

from csr_llm_common.backoff import Backoff
from csr_llm_common.ros.testing import ChildOutput

COOPERATIVE_START = """
import time
from rclpy.node import Node
from csr_llm_common.ros import node as ros_node

class SlowStart(Node):
    def __init__(self):
        super().__init__("slow_start")
        print("up", flush=True)
        for batch in range(600):          # a prefix rebuild: one batch at a time, asking in between
            time.sleep(0.1)
            ros_node.raise_if_stop_requested(f"batch {batch}")
        print("constructed", flush=True)

raise SystemExit(ros_node.run_node(SlowStart))
"""

STUCK_START = """
from rclpy.node import Node
from csr_llm_common.ros import node as ros_node
ros_node.START_STOP_S = 1.0

def native_call():
    print("up", flush=True)
    while True:
        pass                              # never asks stop_requested()

class StuckStart(Node):
    def __init__(self):
        super().__init__("stuck_start")
        native_call()

raise SystemExit(ros_node.run_node(StuckStart))
"""


SLOW_IMPORTS = """
import csr_llm_common.stop_signal
print("up", flush=True)
import time
time.sleep(3.0)                           # rclpy, llama.cpp ... on a loaded machine
from rclpy.node import Node
from csr_llm_common.ros import node as ros_node

class Started(Node):
    def __init__(self):
        super().__init__("started")
        print("constructed", flush=True)

raise SystemExit(ros_node.run_node(Started))
"""


def test_a_node_process_stopped_during_its_imports_exits_0_without_starting():
    """Ctrl-C reaches every process at once: one still importing died of KeyboardInterrupt (-2)."""
    returncode, out, took = _stopped_during_start(SLOW_IMPORTS, signal.SIGINT, "--ros-args")
    assert returncode == 0, out
    assert "KeyboardInterrupt" not in out and "constructed" not in out, out
    assert "stop requested during start-up (before the start)" in out, out


BEFORE_OUR_CODE = """
print("up", flush=True)
import time
time.sleep(2.0)                           # the interpreter's own start-up: no handler of ours yet
""" + SLOW_IMPORTS.replace('print("up", flush=True)', "").replace("time.sleep(3.0)", "")


def test_a_ctrl_c_before_our_first_import_waits_blocked_and_stops_the_start_with_exit_0():
    """launch starts our nodes with SIGINT blocked (hold_stop_signals): a Ctrl-C in an interpreter's own
    start-up killed it with -2; now it waits pending until the handler is installed."""
    from csr_llm_common.stop_signal import hold_stop_signals
    hold_stop_signals(True)
    try:
        returncode, out, took = _stopped_during_start(BEFORE_OUR_CODE, signal.SIGINT, "--ros-args")
    finally:
        hold_stop_signals(False)
    assert returncode == 0, out
    assert "KeyboardInterrupt" not in out and "constructed" not in out, out
    assert "stop requested during start-up (before the start)" in out, out


def test_a_node_whose_launcher_exits_while_it_starts_stops_by_itself(tmp_path):
    """launch ending while it still started a node (a Ctrl-C in that instant) never signalled it: the
    node ran on alone. With CSR_LLM_STOP_WITH_PARENT=1 (our launch files) the parent's exit stops it."""
    import os
    log = tmp_path / "child.log"
    launcher = (
        "import os, subprocess, sys, time\n"
        f"out = open({str(log)!r}, 'w')\n"
        "child = subprocess.Popen([sys.executable, '-c', sys.argv[1], '--ros-args'], stdout=out, stderr=out,\n"
        "                         env={**os.environ, 'CSR_LLM_STOP_WITH_PARENT': '1'})\n"
        f"while 'up' not in open({str(log)!r}).read():\n"
        "    time.sleep(0.05)\n"
        "print(child.pid, flush=True)\n")          # and exits, leaving the child starting
    done = subprocess.run([sys.executable, "-c", launcher, SLOW_IMPORTS], capture_output=True, text=True,
                          timeout=60)
    child = int(done.stdout.split()[0])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and os.path.exists(f"/proc/{child}") \
            and "Z" not in open(f"/proc/{child}/stat").read().split()[2]:
        time.sleep(0.1)
    out = log.read_text()
    assert "stop requested during start-up (before the start)" in out, out
    assert "constructed" not in out and "Traceback" not in out, out


def _stopped_during_start(script: str, sig: int, *args: str):
    output = ChildOutput(subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
    if sig == signal.SIGINT and "--ros-args" in args:
        from csr_llm_common.stop_signal import hold_stop_signals
        hold_stop_signals(False)          # the parent's hold ends once its child started, as in launch
    assert output.wait_for(lambda text: "up\n" in text, timeout=60), output.finish(timeout=0)[1]
    sent = time.monotonic()
    output.process.send_signal(sig)
    returncode, out = output.finish(timeout=30)
    return returncode, out, time.monotonic() - sent


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_during_a_long_start_ends_it_at_the_next_step_and_exits_0(sig):
    """A reasoning node rebuilding its prefix in its constructor ignored SIGINT and SIGTERM for ~40 s
    and was SIGKILLed by launch (exit -9): the constructor now asks between its steps."""
    returncode, out, took = _stopped_during_start(COOPERATIVE_START, sig)
    assert returncode == 0, out
    assert "stop requested during start-up (batch " in out and "constructed" not in out, out
    assert took < 5.0, (took, out)


def test_a_start_that_never_asks_is_left_after_its_bound_with_one_line():
    returncode, out, took = _stopped_during_start(STUCK_START, signal.SIGINT)
    assert returncode == 0, out
    lines = [line for line in out.splitlines() if "stop requested during start-up; still starting" in line]
    assert len(lines) == 1 and "native_call (<string>:" in lines[0], out
    assert took < 10.0, (took, out)


def test_backoff_doubles_up_to_its_bound_and_logs_once_per_change():
    backoff = Backoff("R1", first_s=1.0, max_s=5.0)
    lines = [backoff.failed("refused", now=float(t)) for t in range(5)]
    assert lines[0] is not None and "waiting for R1: refused" in lines[0]
    assert lines[1:] == [None] * 4                       # same state: no line per try
    assert backoff.delay_s == 5.0                        # 1, 2, 4, 5, 5
    assert backoff.failed("timed out", now=5.0) is not None   # a new reason is a change
    assert backoff.succeeded(now=12.5) == "R1 answered after 12.5 s (6 failed tries)"
    assert backoff.delay_s == 1.0 and backoff.succeeded() is None
    assert backoff.sleep(lambda: True) is False          # a stop ends the wait at once
