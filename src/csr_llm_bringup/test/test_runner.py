"""The runner: prefixed logs, Ctrl-C and crashing nodes end cleanly with the right exit code."""
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from csr_llm_common.paths import config_dir
from csr_llm_common.ros.testing import ChildOutput

pytestmark = pytest.mark.dds   # real nodes over Fast DDS (loopback)


def write_profile(path: Path, aggregator_params: str = "") -> Path:
    cfg = config_dir()
    path.write_text(f"""
use_sim_time: false
nodes:
  - name: aggregator
    package: csr_llm_core
    executable: aggregator_node
    parameter_files: [{cfg / 'aggregator.yaml'}]
    remappings: {{events: scenario_events}}
{aggregator_params}
  - name: recorder
    package: csr_llm_bringup
    executable: recorder_node
    parameter_files: [{cfg / 'recorder.yaml'}]
    parameters: {{status_period: 0.0, topics: [state_chunks]}}
""")
    return path


def shm_entries():
    """Fast DDS shared-memory data segments (port lock files are shared between processes by design)."""
    if not os.path.isdir("/dev/shm"):
        return set()
    return {name for name in os.listdir("/dev/shm") if "fastdds" in name and "_port" not in name}


def run_cli(tmp_path, profile, *extra):
    return subprocess.Popen([sys.executable, "-m", "csr_llm_bringup.cli", "run", "--profile", str(profile),
                             "--runs-dir", str(tmp_path / "runs"), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def child_pids(output):
    return [int(pid) for pid in re.findall(r"pid (\d+)\)", output)]


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_started(output, names, timeout=60):
    """Each named node has said it runs (the output is read in a thread: a silent child cannot hold
    the test)."""
    return output.wait_for(lambda text: all(
        any(f"[{n}]" in ln and ("aggregating" in ln or "recording" in ln) for ln in text.splitlines())
        for n in names), timeout)


@pytest.mark.slow
def test_ctrl_c_stops_every_node_cleanly(tmp_path):
    before = shm_entries()
    runner = ChildOutput(run_cli(tmp_path, write_profile(tmp_path / "two.yaml")))
    assert wait_started(runner, ["aggregator", "recorder"]), runner.finish(timeout=0)[1]
    runner.process.send_signal(signal.SIGINT)
    returncode, output = runner.finish(timeout=60)
    assert returncode == 0, output
    pids = child_pids(output)
    assert len(pids) == 2 and not any(alive(pid) for pid in pids)
    assert "exit codes: {'aggregator': 0, 'recorder': 0}" in output
    assert shm_entries() - before == set()
    latest = tmp_path / "runs" / "latest"
    assert latest.is_symlink() and (latest / "aggregator.log").exists() and (latest / "summary.json").exists()
    assert "-r events:=scenario_events" not in output     # remaps are passed as arguments, not logged
    assert (latest / "params" / "aggregator.params.yaml").exists()


@pytest.mark.slow
def test_a_crashing_node_stops_the_graph_with_a_nonzero_exit(tmp_path):
    before = shm_entries()
    profile = write_profile(tmp_path / "crash.yaml", "    parameters: {sources: [mystery]}")
    runner = run_cli(tmp_path, profile, "--duration", "60")
    out, _ = runner.communicate(timeout=90)
    assert runner.returncode == 1, out
    assert re.search(r"\[runner\] /aggregator exited unexpectedly with code [1-9]", out), out
    assert "[aggregator]" in out and "set mystery.type" in out            # the node's own error, prefixed
    assert not any(alive(pid) for pid in child_pids(out))
    assert shm_entries() - before == set()


@pytest.mark.slow
def test_a_killed_restart_node_is_reported_and_started_again(tmp_path):
    runner = ChildOutput(run_cli(tmp_path, write_profile(tmp_path / "two.yaml"), "--restart", "aggregator"))
    assert wait_started(runner, ["aggregator", "recorder"]), runner.finish(timeout=0)[1]
    first = int(re.search(r"started /aggregator .*pid (\d+)\)", runner.text()).group(1))
    os.kill(first, signal.SIGKILL)
    runner.wait_for(lambda text: text.count("aggregating") >= 2, timeout=60)
    runner.process.send_signal(signal.SIGINT)
    returncode, output = runner.finish(timeout=60)
    assert "[runner] /aggregator exited unexpectedly with code -9; restarting in 1 s (1/5)" in output, output
    assert re.search(r"\[runner\] restarted /aggregator \(pid \d+\)", output), output
    assert sum("aggregating" in ln for ln in output.splitlines()) == 2, output
    assert returncode == 0 and "exit codes: {'aggregator': 0, 'recorder': 0}" in output, output


def test_restart_of_an_unknown_node_is_a_clear_error(tmp_path):
    result = subprocess.run([sys.executable, "-m", "csr_llm_bringup.cli", "run", "--profile", "robot",
                             "--runs-dir", str(tmp_path), "--restart", "nobody"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2 and "--restart nobody: no such node in profile robot" in result.stderr


def test_unknown_profile_is_a_clear_error(tmp_path):
    result = subprocess.run([sys.executable, "-m", "csr_llm_bringup.cli", "run", "--profile", "nope",
                             "--runs-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "csr-llm: error: no profile 'nope'" in result.stderr
