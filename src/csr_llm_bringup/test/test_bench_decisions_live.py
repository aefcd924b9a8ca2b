"""bench_decisions end to end: one suite scenario through the real lockstepped graph and the model."""
import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.dds, pytest.mark.slow]


def test_one_scenario_through_the_graph_is_scored(tmp_path):
    out, png = tmp_path / "decisions.json", tmp_path / "decisions.png"
    result = subprocess.run(
        [sys.executable, "-m", "csr_llm_bringup.bench_decisions", "--scenarios", "door_open",
         "--runs-dir", str(tmp_path / "runs"), "--out", str(out), "--plot", str(png)],
        capture_output=True, text=True, timeout=400)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    bench = json.loads(out.read_text())
    scenario = bench["scenarios"]["door_open"]
    for key in ("decision_accuracy", "reaction_p50_s", "reaction_max_s", "task_success_rate", "intents",
                "ttft_p50_ms", "ttft_p99_ms"):
        assert key in scenario and key in bench["overall"], key
    # the door task opens at 1.0 s: decisions from then on are scored, whatever the model answers
    assert scenario["decisions_scored"] >= 20, output[-2000:]
    assert 0.0 <= scenario["decision_accuracy"] <= 1.0
    assert sum(scenario["intents"].values()) >= scenario["decisions_scored"]
    run = tmp_path / "runs" / "door_open" / "latest"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scenario"] == "door_open" and summary["task_success"] in (True, False)
    assert (run / "decisions.png").exists() and png.exists()
    assert "## Decision scoring" in (run / "report.md").read_text()
