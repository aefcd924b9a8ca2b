"""The recorder node in process: its status thread ends with the recording (a daemon thread left
waking during interpreter exit can crash the process: SIGSEGV in PyEval_RestoreThread)."""
import threading
import time

import pytest
from rclpy.parameter import Parameter

from csr_llm_bringup.recorder_node import RecorderNode
from csr_llm_common.ros.spin import spinning

pytestmark = pytest.mark.dds


def status_threads():
    return [t for t in threading.enumerate() if t.name == "recorder-status"]


def test_closing_the_recorder_ends_its_status_thread(tmp_path, capsys):
    with spinning() as spinner:
        recorder = spinner.create(RecorderNode, parameter_overrides=[
            Parameter("run_dir", value=str(tmp_path / "run")), Parameter("status_period", value=0.05),
            Parameter("report", value=False)])
        deadline = time.monotonic() + 5
        while "[status]" not in capsys.readouterr().out and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status_threads(), "no status thread while recording"
        recorder.close()
        assert not status_threads()
        capsys.readouterr()
        time.sleep(0.2)
        assert "[status]" not in capsys.readouterr().out
    assert (tmp_path / "run" / "bag").exists()


def test_the_recorder_declares_its_config_read_only(tmp_path):
    from csr_llm_bringup.recorder_config import RecorderConfig
    with spinning() as spinner:
        recorder = spinner.create(RecorderNode, parameter_overrides=[
            Parameter("run_dir", value=str(tmp_path / "run")), Parameter("status_period", value=0),
            Parameter("report", value=False), Parameter("topics", value=["joint_states"])])
        try:
            assert recorder.status_period == 0.0 and recorder.wanted == ["joint_states"]
            assert recorder.storage == RecorderConfig().storage
            result = recorder.set_parameters([Parameter("storage", value="sqlite3")])[0]
            assert not result.successful and "read-only" in result.reason
        finally:
            recorder.close()
