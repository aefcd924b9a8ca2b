"""The shared ROS plumbing: stamp rounding, yaw, intent-argument conversion, fault log, paths."""
import math
import os
from types import SimpleNamespace

import pytest

from csr_llm_common.faults import FaultLog
from csr_llm_common.paths import expand_path, required_file
from csr_llm_common.ros.geometry import yaw_from_quaternion
from csr_llm_common.ros.intent_args import arguments_to_dict, dict_to_arguments
from csr_llm_common.ros.stamps import sec_to_stamp, set_stamp, stamp_to_sec


@pytest.mark.parametrize("seconds, sec, nanosec", [
    (1.9999999996, 2, 0),            # rounds up across the second boundary, never to 1 s
    (1.9999999994, 1, 999_999_999),
    (0.0, 0, 0),
    (12.5, 12, 500_000_000),
    (1e9 + 0.25, 1_000_000_000, 250_000_000),
])
def test_seconds_to_stamp_at_the_second_boundary(seconds, sec, nanosec):
    stamp = sec_to_stamp(seconds)
    assert (stamp.sec, stamp.nanosec) == (sec, nanosec)
    target = SimpleNamespace(sec=-1, nanosec=-1)
    set_stamp(target, seconds)
    assert (target.sec, target.nanosec) == (sec, nanosec)
    assert abs(stamp_to_sec(stamp) - seconds) <= 1e-9 * max(1.0, seconds) + 1e-9


def test_yaw_from_quaternion():
    for yaw in (-3.0, -1.0, 0.0, 0.5, 3.0):
        q = SimpleNamespace(x=0.0, y=0.0, z=math.sin(yaw / 2), w=math.cos(yaw / 2))
        assert yaw_from_quaternion(q) == pytest.approx(yaw)


def test_intent_arguments_round_trip_and_unknown_types():
    values = {"zone": "warehouse", "speed": 0.3, "count": 2, "fast": False}
    msgs = dict_to_arguments(values)
    assert arguments_to_dict(msgs) == values
    msgs[0].type = 42   # unknown wire type decodes to None, which the catalogue refuses
    assert arguments_to_dict(msgs)["zone"] is None
    with pytest.raises(TypeError):
        dict_to_arguments({"x": [1, 2]})


def test_fault_log_reports_each_kind_once_and_bounds_details():
    lines = []
    log = FaultLog(lines.append, texts={"imu_invalid": "imu rejected"}, counted_in="router_status.input_faults")
    assert log.record("imu_invalid", "nan") is True
    assert log.record("imu_invalid", "nan") is False
    log.record("other", "y" * 10_000)
    assert log.counts == {"imu_invalid": 2, "other": 1} and log.total == 3
    assert len(lines) == 2 and "imu rejected" in lines[0] and "router_status.input_faults" in lines[0]
    assert len(lines[1]) < 400


def test_path_parameters_expand_home_and_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("CSR_TEST_DIR", str(tmp_path))
    assert expand_path("~/x") == os.path.join(os.path.expanduser("~"), "x")
    assert expand_path("$CSR_TEST_DIR/state") == f"{tmp_path}/state"
    assert expand_path("") == ""
    (tmp_path / "intents.yaml").write_text("intents: {}")
    assert required_file("$CSR_TEST_DIR/intents.yaml", "intents_file") == tmp_path / "intents.yaml"
    with pytest.raises(ValueError, match="intents_file is not set"):
        required_file("", "intents_file")
    with pytest.raises(ValueError, match="no such file"):
        required_file(tmp_path / "missing.yaml", "intents_file")


def test_robot_description_file_matches_the_code_defaults(config_dir):
    from csr_llm_common.robot_description import RobotDescriptionError, load_robot_description, \
        robot_description_from_mapping
    description = load_robot_description(config_dir / "robot_description.yaml")
    assert description.joint_names[-1] == "gripper" and len(description.joints) == 5
    limits = description.limits()
    assert all(lo < hi for lo, hi in zip(limits["position_min"], limits["position_max"]))
    assert description.gain_parameters()["gains.arm_elbow.antiwindup_strategy"] == "conditional_integration"
    with pytest.raises(RobotDescriptionError, match="position_min < position_max"):
        robot_description_from_mapping({"joints": {"j": {"position_min": 1, "position_max": 0, "velocity_max": 1,
                                                         "effort_max": 1}}})
    with pytest.raises(RobotDescriptionError, match="needs numeric"):
        robot_description_from_mapping({"joints": {"j": {"position_min": 0}}})


@pytest.mark.dds
def test_a_node_declares_its_parameters_from_a_dataclass():
    import rclpy
    from rclpy.context import Context
    from rclpy.node import Node
    from rclpy.parameter import Parameter

    from csr_llm_core.http_backend import RemoteResource
    from csr_llm_core.reasoning_config import ReasoningNodeConfig
    from csr_llm_core.reasoner import ReasonerConfig
    from csr_llm_common.ros.params import declare_dataclass, parameter_values

    context = Context()
    rclpy.init(context=context)
    try:
        node = Node("config_probe", context=context, parameter_overrides=[
            Parameter("tau_mem", value=1024), Parameter("decision_hz", value=4),   # an int for a float
            Parameter("state_dir", value="~/csr_state"), Parameter("cpu_affinity", value=1)])   # an int for a str
        cfg = declare_dataclass(node, ReasoningNodeConfig())
        assert cfg.reasoner.tau_mem == 1024 and cfg.decision_hz == 4.0 and isinstance(cfg.decision_hz, float)
        assert cfg.cpu_affinity == "1"
        assert cfg.reasoner.mode == "asr" and cfg.status_hz == 2.0              # code defaults
        assert parameter_values(node)["tau_mem"] == 1024 and "use_sim_time" not in parameter_values(node)
        bad = Node("config_probe_bad", context=context, parameter_overrides=[Parameter("tau_mem", value="big")])
        with pytest.raises(ValueError, match="tau_mem"):
            declare_dataclass(bad, ReasoningNodeConfig())
        eight = Node("config_probe_threads", context=context,
                     parameter_overrides=[Parameter("append_threads", value=8)])
        threads = declare_dataclass(eight, ReasoningNodeConfig()).validated()
        eight.destroy_node()
        assert threads.clamp_append_threads(2) and threads.reasoner.append_threads == 2     # what the CPUs allow
        assert not threads.clamp_append_threads(2) and threads.reasoner.append_threads == 2
        with pytest.raises(ValueError, match="append_threads"):
            ReasoningNodeConfig(reasoner=ReasonerConfig(append_threads=0)).validated()
        # rebuild_pause false: R2's rebuild needs a core of its own beside R1's
        beside = ReasoningNodeConfig(reasoner=ReasonerConfig(rebuild_pause=False))
        assert not beside.pause_rebuild_without_a_core(2, {}) and not beside.reasoner.rebuild_pause
        assert "needs 2 CPUs" in beside.pause_rebuild_without_a_core(1, {}) and beside.reasoner.rebuild_pause
        served = ReasoningNodeConfig(reasoner=ReasonerConfig(rebuild_pause=False))     # R2 on a server
        assert not served.pause_rebuild_without_a_core(1, {"R2": RemoteResource(url="http://127.0.0.1:8080")})
        assert not served.reasoner.rebuild_pause
        node.destroy_node()
        bad.destroy_node()
    finally:
        rclpy.shutdown(context=context)


@pytest.mark.dds
def test_ros2_param_set_on_a_reasoning_parameter_is_refused_with_a_reason():
    """No reasoning parameter is safe to change under a running reasoner: every one is read-only, and
    a set_parameters request over DDS (what `ros2 param set` sends) is refused saying so."""
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from rclpy.parameter_client import AsyncParameterClient

    from csr_llm_common.ros.params import READ_ONLY_HINT, declare_dataclass
    from csr_llm_common.ros.spin import spinning
    from csr_llm_common.ros.testing import wait_for
    from csr_llm_core.http_backend import RemoteResource
    from csr_llm_core.reasoning_config import ReasoningNodeConfig

    with spinning() as spinner:
        reasoning = spinner.create(Node, "reasoning_like")
        declare_dataclass(reasoning, ReasoningNodeConfig())
        declare_dataclass(reasoning, RemoteResource(url=""), prefix="r1.")
        assert reasoning.has_parameter("r1.stream_gap_timeout_s")      # not the router's decision_timeout_s
        assert not reasoning.has_parameter("r1.decision_timeout_s")
        client = AsyncParameterClient(spinner.create(Node, "param_setter"), "reasoning_like")
        assert client.wait_for_services(timeout_sec=20.0)
        for name, value in (("decision_hz", 5.0), ("r1.stream_gap_timeout_s", 1.0)):
            future = client.set_parameters([Parameter(name, value=value)])
            assert wait_for(future.done, timeout=20.0)
            result = future.result().results[0]
            assert not result.successful and "read-only" in result.reason and name in result.reason
            described = client.describe_parameters([name])
            assert wait_for(described.done, timeout=20.0)
            descriptor = described.result().descriptors[0]
            assert descriptor.read_only and READ_ONLY_HINT in descriptor.description
        assert reasoning.get_parameter("decision_hz").value == 2.0


def test_a_stop_that_leaves_a_busy_thread_behind_says_where_it_is():
    """The reasoning node's stop names the frames of a thread that did not finish in time."""
    import threading
    from csr_llm_common.ros.node import thread_where
    release = threading.Event()

    def stuck_in_a_decode():
        release.wait(10)

    thread = threading.Thread(target=stuck_in_a_decode, name="decision-loop")
    thread.start()
    try:
        assert "stuck_in_a_decode (test_ros_plumbing.py" in thread_where(thread)
    finally:
        release.set()
        thread.join()
    assert thread_where(thread) == "?"


def _interrupted(script: str):
    """(exit code, output) of a node script sent SIGINT once it printed "up"."""
    import signal
    import subprocess
    import sys
    from csr_llm_common.ros.testing import ChildOutput
    output = ChildOutput(subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
    assert output.wait_for(lambda text: "up\n" in text, timeout=60), output.finish(timeout=0)[1]
    output.process.send_signal(signal.SIGINT)
    return output.finish(timeout=30)


HANGING_TEARDOWN = """
import time
from rclpy.node import Node
from csr_llm_common.ros import node as ros_node
ros_node.TEARDOWN_DUMP_S = 0.5

class Hangs(Node):
    def __init__(self):
        super().__init__("hangs")
        print("up", flush=True)

    def destroy_node(self):
        time.sleep(3.0)            # a writer that never finishes closing
        return super().destroy_node()

ros_node.run_node(Hangs)
"""


def test_a_node_stuck_in_its_teardown_prints_where_before_it_is_killed():
    """A node that does not exit after SIGINT (a bench run's recorder was SIGKILLed with no clue why)
    prints every thread's stack once TEARDOWN_DUMP_S has passed, and still exits when done."""
    returncode, out = _interrupted(HANGING_TEARDOWN)
    assert returncode == 0, out
    assert "Timeout (0:00:00.500000)!" in out and "in destroy_node" in out, out


HOLDS_THE_GIL = """
from rclpy.node import Node
from csr_llm_common.ros import node as ros_node

def busy_in_c():
    print("up", flush=True)
    sum(range(10 ** 15))          # one C call: no Python signal handler runs until it returns

class HoldsTheGil(Node):
    def __init__(self):
        super().__init__("holds_the_gil")
        self.create_timer(0.1, busy_in_c)

ros_node.run_node(HoldsTheGil)
"""


def test_a_node_hung_with_the_gil_held_prints_its_stacks_on_sigusr1():
    """A bench run's recorder ignored SIGINT and SIGTERM and printed nothing before the runner's
    SIGKILL: its Python handlers never ran. SIGUSR1 (which the runner sends before SIGKILL) dumps
    every thread's stack from C."""
    import signal
    import subprocess
    import sys
    from csr_llm_common.ros.testing import ChildOutput
    output = ChildOutput(subprocess.Popen([sys.executable, "-c", HOLDS_THE_GIL], stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
    try:
        assert output.wait_for(lambda text: "up\n" in text, timeout=60), output.finish(timeout=0)[1]
        output.process.send_signal(signal.SIGINT)
        assert output.process.poll() is None          # the stop handler cannot run
        output.process.send_signal(signal.SIGUSR1)
        assert output.wait_for(lambda text: "in busy_in_c" in text, timeout=10), output.finish(timeout=0)[1]
    finally:
        output.process.kill()
        output.finish(timeout=10)


NEVER_DESTROYED = """
import threading
from rclpy.node import Node
from csr_llm_common.ros import node as ros_node
ros_node.TEARDOWN_BUDGET_S = 1.0     # destroy_node gets what is left of it: the minimum, 1 s

class NeverDestroyed(Node):
    def __init__(self):
        super().__init__("never_destroyed")
        print("up", flush=True)

    def destroy_node(self):
        print("own shutdown steps done", flush=True)
        threading.Event().wait()   # as rclpy's node destruction once did inside DDS
        return super().destroy_node()

ros_node.run_node(NeverDestroyed)
"""


def test_a_destroy_node_that_never_returns_is_left_after_its_bound_with_one_line():
    """A test run's aggregator hung in rclpy's destroy_node until the runner SIGKILLed it (exit -9,
    a failed run): past what is left of TEARDOWN_BUDGET_S (counted from the stop) the process says
    where it is stuck and exits 0 by itself, inside the runner's grace."""
    returncode, out = _interrupted(NEVER_DESTROYED)
    assert returncode == 0, out
    assert "own shutdown steps done" in out, out
    lines = [line for line in out.splitlines() if "destroy_node still running after 1.0 s" in line]
    assert len(lines) == 1 and "<- destroy_node (<string>:" in lines[0] and lines[0].endswith("exiting without it"), out


def test_a_reasoning_node_with_a_bad_parameter_says_so_in_one_line_and_exits_2():
    """The fatal line only: no second traceback from tearing down a node that never started."""
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "csr_llm_core.reasoning_node", "--ros-args",
                           "-p", "tau_mem:=big"], capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "cannot start: parameter tau_mem: expected int" in out, out
    assert "AttributeError" not in out, out


STUCK_DECISION = """
import sys, threading
from csr_llm_core import reasoning_node
from csr_llm_core.engine import LlamaEngine
reasoning_node.DECISION_JOIN_S = 0.5
release = threading.Event()

def stuck_in_a_decode(self):
    print("deciding", flush=True)
    release.wait(60)

close = LlamaEngine.close
def reported_close(self):
    print("engine closed", flush=True)
    close(self)

reasoning_node.ReasoningNode._decision_loop = stuck_in_a_decode
LlamaEngine.close = reported_close
sys.exit(reasoning_node.main(["reasoning", "--ros-args", "-p", "intents_file:=%s", "-p", "prompt_file:=%s",
                              "-p", "tau_mem:=2048", "-p", "n_ctx:=3072"]))
"""


@pytest.mark.slow   # runs the bundled model
def test_a_stop_during_a_decision_leaves_the_contexts_to_the_process_exit():
    """A decision thread that does not end in time may be inside llama.cpp: freeing its context under
    it crashed a bench run's reasoning node (SIGSEGV). It says so in one line and exits cleanly."""
    import signal
    import subprocess
    import sys
    from pathlib import Path
    config = Path(__file__).resolve().parents[3] / "config"
    script = STUCK_DECISION % (config / "intents.yaml", config / "prompt.yaml")
    from csr_llm_common.ros.testing import ChildOutput
    output = ChildOutput(subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
    # "deciding" may share its line with a log line the main thread wrote meanwhile (unbuffered output)
    assert output.wait_for(lambda text: "deciding" in text, timeout=120), output.finish(timeout=0)[1]
    output.process.send_signal(signal.SIGINT)
    returncode, out = output.finish(timeout=60)
    assert returncode == 0, out
    assert "decision thread still busy after 0.5 s" in out and "<- stuck_in_a_decode" in out, out
    assert "the contexts stay open until the process exits: state not saved" in out, out
    assert "engine closed" not in out, out
