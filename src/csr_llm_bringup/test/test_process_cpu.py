"""Per-process CPU time of a run: /proc samples, restarts, the recorded span, summary.json."""
import json
import subprocess
import sys
import time

import pytest

from csr_llm_bringup.cli import add_cpu_profile
from csr_llm_bringup.process_cpu import CpuSeries, cpu_profile, process_cpu_s
from csr_llm_bringup.run_report import RunStats


def test_a_busy_child_is_sampled_and_a_gone_one_is_none():
    child = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 0.6\n"
                              "while time.process_time() < end: pass\ntime.sleep(30)"])
    try:
        deadline = time.monotonic() + 30
        used = 0.0
        while used < 0.5 and time.monotonic() < deadline:
            used = process_cpu_s(child.pid) or 0.0
            time.sleep(0.1)
        assert 0.5 <= used < 5.0
    finally:
        child.kill()
        child.wait()
    assert process_cpu_s(child.pid) is None


def test_a_series_adds_up_across_a_restart_and_interpolates_inside_a_span():
    series = CpuSeries()
    series.add(100, 10.0, 1.0)
    series.add(100, 12.0, 3.0)
    series.add(100, 13.0, None)           # gone between two samples: nothing recorded
    series.add(200, 14.0, 0.5)            # restarted: its CPU counts on top of the first process's
    assert series.at(11.0) == pytest.approx(2.0) and series.at(14.0) == pytest.approx(3.5)
    assert series.at(0.0) == 1.0 and series.at(99.0) == 3.5
    other = CpuSeries()
    other.add(7, 10.0, 0.0)
    other.add(7, 14.0, 2.0)
    profile = cpu_profile({"reasoning": series, "simulator+action_router": other}, 11.0, 14.0, sim_seconds=1.5)
    assert profile["cpu_s"] == {"reasoning": 1.5, "simulator+action_router": 1.5}
    assert profile["cpu_s_total"] == 3.0 and profile["cores_busy"] == 1.0
    assert profile["cpu_s_per_sim_s"]["reasoning"] == 1.0 and profile["cpu_s_per_sim_s_total"] == 2.0
    assert "cpu_s_per_sim_s" not in cpu_profile({"r": series}, 11.0, 14.0, sim_seconds=None)


def test_the_run_summary_gains_the_cpu_profile_of_its_recorded_span(tmp_path, capsys):
    stats = RunStats(clock_seen=True)
    stats.on_time(0.0, 100.0)
    stats.on_time(2.0, 104.0)
    (tmp_path / "summary.json").write_text(json.dumps(stats.summary()))
    assert json.loads((tmp_path / "summary.json").read_text())["wall_span_monotonic_s"] == [100.0, 104.0]
    series = CpuSeries()
    for t, cpu in ((90.0, 5.0), (100.0, 6.0), (104.0, 9.0), (120.0, 10.0)):     # start-up and teardown outside
        series.add(1, t, cpu)
    add_cpu_profile(tmp_path / "summary.json", {"reasoning": series})
    cpu = json.loads((tmp_path / "summary.json").read_text())["cpu"]
    assert cpu["cpu_s"] == {"reasoning": 3.0} and cpu["cpu_s_per_sim_s"] == {"reasoning": 1.5}
    assert "CPU s per sim s: reasoning 1.5" in capsys.readouterr().out
    add_cpu_profile(tmp_path / "missing.json", {"reasoning": series})     # no recorder: nothing to add
    assert not (tmp_path / "missing.json").exists()
