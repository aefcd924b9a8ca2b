"""Bag replay regression against the committed goldens (src/csr_llm_bringup/test/goldens, docs/goldens.md).

The goldens were recorded from a known-good version (golden.yaml names its commit and model); these
tests replay them, on a fresh clone of the repository, and never record one: a missing golden fails
with the bless command to run. Three deliberate regressions (a PID gain, a prompt line, a monitor
threshold, all as parameter overrides or a prompt file in a temp dir) must each be caught with a
first divergence that names what diverged. Broken bags and bad arguments are refused clearly.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from csr_llm_bringup.compare import read_outputs
from csr_llm_bringup.golden import GOLDENS_DIR, golden_names, load_golden
from csr_llm_bringup.golden_cli import run_replay
from csr_llm_common.paths import config_dir

REPO = Path(__file__).resolve().parents[3]
GOLDEN = GOLDENS_DIR / "golden_scenario"
PACKAGES = ["csr_llm_common", "csr_llm_core", "action_router", "csr_llm_bringup"]
# graph tests: slow, dds (real nodes over Fast DDS, loopback) and e2e (`make test-e2e`)


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory):
    """A clone of the committed tree (no build output, no recorded runs) and the env to run it."""
    clone = tmp_path_factory.mktemp("clone") / "repo"
    subprocess.run(["git", "clone", "--quiet", "--local", str(REPO), str(clone)], check=True, timeout=120)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(clone / "src" / p) for p in PACKAGES))
    return clone, env


def _first_divergence(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("FIRST DIVERGENCE")]
    assert lines, output[-4000:]
    return lines[0]


@pytest.mark.slow
@pytest.mark.dds
@pytest.mark.e2e
@pytest.mark.parametrize("name", ["golden_scenario", "asr_swaps", "knob_person"])
def test_a_fresh_clone_replays_each_committed_golden_without_recording(fresh_clone, tmp_path, name):
    clone, env = fresh_clone
    golden = load_golden(name, clone / GOLDENS_DIR.relative_to(REPO))
    run = run_replay(golden, tmp_path / "out", env=env, cwd=clone)
    assert run.matched, run.output[-6000:]
    assert "MATCH" in (tmp_path / "out" / "compare.txt").read_text()
    assert re.search(r"decision lockstep waits \d+, timeouts 0;", run.output), run.output[-2000:]
    assert "control lockstep timeouts 0; decision handover timeouts 0" in run.output
    # nothing was recorded into the clone: the committed golden is what the replay compared with
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone,
                            capture_output=True, text=True, check=True).stdout
    assert status.strip() == "", status
    print(f"[golden] {name}: replayed in {run.wall_s:.0f} s wall")


def _replay_regression(tmp_path, name, extra, duration):
    run = run_replay(load_golden(name), tmp_path / "out", extra, duration=duration)
    assert run.exit_code == 1, run.output[-6000:]
    return _first_divergence(run.output), run.output


@pytest.mark.slow
@pytest.mark.dds
@pytest.mark.e2e
def test_a_changed_pid_gain_is_caught_on_the_motor_commands(tmp_path):
    # the arm moves from the golden's open_door (approach_handle from 2.5 s)
    first, out = _replay_regression(tmp_path, "golden_scenario", ["action_router.gains.arm_elbow.p=600.0"], 3.7)
    assert "in the motor command stream: motor command arm_elbow" in first, out[-4000:]
    assert "decision in force, golden: " in out and "router state replay: " in out


@pytest.mark.slow
@pytest.mark.dds
@pytest.mark.e2e
def test_a_changed_prompt_line_is_caught_on_the_decisions(tmp_path):
    """One line of the prompt (its question) changed, in a copy of the prompt file."""
    golden = read_outputs(GOLDEN / "bag").decisions
    prompt = yaml.safe_load((config_dir() / "prompt.yaml").read_text())
    prompt["question"] = prompt["question"] + " Emergency: whatever the state, the only allowed intent is stop."
    perturbed = tmp_path / "prompt.yaml"
    perturbed.write_text(yaml.safe_dump(prompt))
    first, out = _replay_regression(tmp_path, "golden_scenario", [f"reasoning.prompt_file={perturbed}"], 2.2)
    assert re.search(r"in the decision stream: decision #\d+: decision differs", first), out[-4000:]
    golden_line, replay_line = (next(line.strip() for line in out.splitlines() if line.strip().startswith(side))
                                for side in ("golden: ", "replay: "))
    assert golden_line.split(" at ")[0][len("golden: "):] != replay_line.split(" at ")[0][len("replay: "):]
    assert "chunk stream before it" in out and "router state golden:" in out and len(golden) > 4


@pytest.mark.slow
@pytest.mark.dds
@pytest.mark.e2e
def test_a_changed_monitor_threshold_is_caught_on_the_router_transitions(tmp_path):
    # the golden's motor overheats at 9.2 s: the router derates it (limit 70 C); at 150 C it does not
    first, out = _replay_regression(tmp_path, "golden_scenario", ["action_router.temperature_limit=150.0"], 10.2)
    assert "in the router status stream: router transition differs" in first, out[-4000:]
    golden_line = next(line for line in out.splitlines() if "golden transition: " in line)
    assert "unknown/grips/derates/failsafes 0/0/1/0" in golden_line, out[-4000:]     # the derate it missed


@pytest.mark.parametrize("name", ["golden_scenario", "asr_swaps", "knob_person"])
def test_each_golden_covers_what_it_claims(name):
    """From the committed bag alone (no graph): recorded with commit and model, <= 2 MB, and its scenario's content."""
    from csr_llm_core.lab.live_episodes import read_topics
    golden = load_golden(name)
    assert golden.recorded.get("commit") and golden.recorded.get("model_sha256"), golden.recorded
    assert sum(p.stat().st_size for p in golden.bag.iterdir()) < 2_000_000
    assert (golden.folder / "tolerances.yaml").is_file()
    outputs = read_outputs(golden.bag)
    intents = {d.intent for d in outputs.decisions}
    status = read_topics(golden.bag, ["csr_status"])["csr_status"][-1]
    if name == "golden_scenario":       # the door, the fetch order, the pauses (a cancel among them)
        assert {"open_door", "move_to", "hold_position"} <= intents, intents
    if name == "asr_swaps":
        assert status.evictions >= 2 and status.swaps >= 2, (status.evictions, status.swaps)
        assert max(d.state_version for d in outputs.decisions) >= 2
    if name == "knob_person":
        sub_tasks = {s.active_sub_task for s in outputs.statuses}
        assert {"grip_knob", "twist_knob"} <= sub_tasks, sub_tasks          # open_door's second variant
        assert any(s.interrupt_depth > 0 for s in outputs.statuses)         # the person_close reflex


def test_the_committed_goldens_total_at_most_5_mb():
    assert set(golden_names()) >= {"golden_scenario", "asr_swaps", "knob_person"}
    total = sum(p.stat().st_size for p in GOLDENS_DIR.rglob("*") if p.is_file())
    assert total <= 5_000_000, total


def test_replaying_a_golden_that_is_missing_fails_and_records_nothing(tmp_path):
    shutil.copytree(GOLDENS_DIR / "golden_scenario", tmp_path / "lost", ignore=shutil.ignore_patterns("bag"))
    from csr_llm_bringup.golden import GoldenMissing
    with pytest.raises(GoldenMissing, match="replays never record one"):
        run_replay(load_golden("lost", tmp_path), tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "lost" / "bag").exists()
    result = subprocess.run([sys.executable, "-m", "csr_llm_bringup.golden_cli", "replay", "no_such_golden"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "golden: error: golden no_such_golden: no " in result.stderr


def test_a_truncated_bag_is_a_clear_error_not_a_crash(tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(GOLDEN / "bag", broken)
    (mcap,) = broken.glob("*.mcap")
    mcap.write_bytes(mcap.read_bytes()[: mcap.stat().st_size // 3])
    result = subprocess.run([sys.executable, "-m", "csr_llm_bringup.cli", "replay", str(broken),
                             "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert f"csr-llm: error: bag {broken}: cannot be opened" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_output_folder_that_holds_a_bag_is_refused_before_any_node_starts(tmp_path):
    (tmp_path / "out" / "bag").mkdir(parents=True)
    result = subprocess.run([sys.executable, "-m", "csr_llm_bringup.cli", "replay", str(GOLDEN / "bag"),
                             "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert f"csr-llm: error: {tmp_path / 'out' / 'bag'} exists already" in result.stderr
    assert "Traceback" not in result.stderr and "[runner] started" not in result.stdout


def test_a_duration_that_is_not_positive_is_refused_before_any_node_starts(tmp_path):
    result = subprocess.run([sys.executable, "-m", "csr_llm_bringup.cli", "replay", str(GOLDEN / "bag"),
                             "--duration", "0", "--out", str(tmp_path / "out")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert "csr-llm: error: --duration 0: give a positive number of bag seconds" in result.stderr
    assert "[runner] started" not in result.stdout and not (tmp_path / "out").exists()
