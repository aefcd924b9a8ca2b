"""The workspace builds the way a ROS user builds it, and `make setup` re-runs do no work."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
VENV_BIN = Path(sys.executable).parent


def _clean_make_env():
    env = dict(os.environ)
    for key in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"):
        env.pop(key, None)
    return env


@pytest.mark.slow
def test_colcon_build_of_the_whole_workspace(tmp_path):
    shutil.copytree(REPO / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(REPO / "config", tmp_path / "config")
    shutil.copy(REPO / "colcon.meta", tmp_path / "colcon.meta")
    venv = VENV_BIN.parent
    env = dict(os.environ, PATH=f"{VENV_BIN}:{os.environ['PATH']}", AMENT_PREFIX_PATH=str(venv),
               CMAKE_PREFIX_PATH=str(venv))
    result = subprocess.run(
        [str(VENV_BIN / "colcon"), "build", "--event-handlers", "console_cohesion-",
         "--cmake-args", f"-DPython3_EXECUTABLE={sys.executable}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "5 packages finished" in result.stdout
    install = tmp_path / "install"
    for package in ("csr_llm_common", "csr_llm_core", "action_router", "csr_llm_bringup"):
        assert (install / package / "share/ament_index/resource_index/packages" / package).is_file()
        assert list((install / package / "lib").glob(f"python3*/site-packages/{package}/__init__.py"))
    share = install / "csr_llm_bringup" / "share" / "csr_llm_bringup"
    assert (share / "launch" / "sim.launch.py").is_file() and (share / "config" / "sim.yaml").is_file()
    assert (share / "config" / "gazebo" / "ros_gz_bridge.yaml").is_file()
    (msgs_site,) = (install / "csr_llm_msgs" / "lib").glob("python3*/site-packages")
    probe = subprocess.run(
        [sys.executable, "-c", "import csr_llm_msgs.msg as m, sys; m.Decision(); print(m.__file__)"],
        env=dict(env, PYTHONPATH=str(msgs_site)), capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip().startswith(str(msgs_site))


def test_make_setup_rerun_does_no_install_work():
    stamps = sorted((REPO / ".venv" / ".stamps").glob("*"))
    assert {p.name for p in stamps} >= {"pip", "msgs", "packages", "model"}, "run `make setup` first"
    before = {p: p.stat().st_mtime_ns for p in stamps}
    dry = subprocess.run(["make", "-n", "setup"], cwd=REPO, env=_clean_make_env(),
                         capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    planned = [line for line in dry.stdout.splitlines() if line.strip()]
    assert len(planned) == 1 and "[setup] environment ready" in planned[0], planned
    real = subprocess.run(["make", "setup"], cwd=REPO, env=_clean_make_env(),
                          capture_output=True, text=True, timeout=120)
    assert real.returncode == 0, real.stderr
    steps = [line for line in real.stdout.splitlines() if line.startswith("[setup]")]
    assert steps == ["[setup] environment ready in .venv"], steps
    assert before == {p: p.stat().st_mtime_ns for p in stamps}
