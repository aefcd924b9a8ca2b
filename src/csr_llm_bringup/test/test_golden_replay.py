"""Bag replay regression: the golden bag replays to the same decisions; perturbations and broken
bags are reported clearly. The golden bag (>5 MB) is not tracked: `make golden` records it, and
these tests record it first when it is missing (a live lockstepped run of the golden scenario).
Both run ASR with swaps at a fixed decision after each eviction, so the replay covers evictions,
background rebuilds and swaps."""
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from rosbags.highlevel import AnyReader

from csr_llm_bringup.bags import typestore
from csr_llm_bringup.compare import read_outputs
from csr_llm_common.paths import config_dir
from csr_llm_common.ros.stamps import stamp_to_sec

pytestmark = [pytest.mark.dds, pytest.mark.e2e]   # real nodes over Fast DDS (loopback); records the golden if missing

GOLDEN = Path(__file__).with_name("golden_sim")
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module", autouse=True)
def golden_bag():
    if not list(GOLDEN.glob("*.mcap")):
        result = subprocess.run(["make", "golden"], cwd=REPO, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0 and list(GOLDEN.glob("*.mcap")), result.stdout[-3000:] + result.stderr[-2000:]
    return GOLDEN


@dataclass
class _DecisionOut:
    decision_id: int
    trigger: int
    stamp: float


def _decisions_and_statuses(bag: Path):
    decisions, statuses = [], []
    with AnyReader([bag], default_typestore=typestore()) as reader:
        conns = [c for c in reader.connections if c.topic in ("/decision", "/csr_status")]
        for conn, _t, raw in reader.messages(connections=conns):
            msg = reader.deserialize(raw, conn.msgtype)
            if conn.topic == "/decision":
                decisions.append(_DecisionOut(msg.decision_id, msg.trigger, stamp_to_sec(msg.header.stamp)))
            else:
                statuses.append(msg)
    return decisions, statuses


def replay(tmp_path, *extra, bag=GOLDEN):
    return subprocess.run([sys.executable, "-m", "csr_llm_bringup.cli", "replay", str(bag), "--golden", str(GOLDEN),
                           "--out", str(tmp_path / "out"), *extra],
                          capture_output=True, text=True, timeout=400)


@pytest.mark.slow
def test_golden_bag_replays_to_the_same_decisions_and_motor_commands(tmp_path):
    result = replay(tmp_path)
    report = (tmp_path / "out" / "compare.txt").read_text() if (tmp_path / "out" / "compare.txt").exists() else ""
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert report.startswith("MATCH") and "match exactly" in report, report
    decisions = int(report.split("decisions: ")[1].split()[0])
    assert decisions >= 10
    # the golden scenario's situation changes, and so do its decisions: replay guards their quality
    intents = {d.intent for d in read_outputs(GOLDEN).decisions}
    assert len(intents) >= 4, intents
    assert report.count(" ok") == 5 and "EXCEEDED" not in report      # every joint within tolerance
    # every decision arrived at its lockstep boundary (none waited for in vain: the loop's schedule
    # releases the boundaries before its first decision) and the router held each before the next state
    assert re.search(r"decision lockstep waits \d+, timeouts 0;", result.stdout), result.stdout[-2000:]
    assert "control lockstep timeouts 0; decision handover timeouts 0" in result.stdout
    # no status announced a due time past a periodic decision not yet published (a lockstepped peer
    # would have run ahead of it), and each status names the newest decision out
    decisions, statuses = _decisions_and_statuses(tmp_path / "out" / "bag")
    assert statuses and any(st.next_decision_due > 0 for st in statuses)
    for st in statuses:
        late = [d for d in decisions if d.trigger == 0 and d.stamp < st.next_decision_due - 1e-6
                and d.decision_id > st.last_decision_id]
        assert not late, (st.next_decision_due, st.last_decision_id, late[:3])
    # the recording holds no zero-stamped state: a zero stamp reads as unstamped, and the replay
    # then ticked it at a time set by when the recorder happened to receive it
    with AnyReader([GOLDEN], default_typestore=typestore()) as reader:
        conns = [c for c in reader.connections if c.topic == "/joint_states"]
        stamps = [stamp_to_sec(reader.deserialize(raw, c.msgtype).header.stamp)
                  for c, _t, raw in reader.messages(connections=conns)]
    assert stamps and min(stamps) > 0
    # the replay guards ASR: evictions, background rebuilds and swaps happened, at the same decisions
    # (a swap after the bag's last decision lands only if the rebuild ends before the replay stops:
    # on a loaded machine it may not, so the log is asked for the swaps the decisions show)
    reasoning_log = (tmp_path / "out" / "reasoning.log").read_text()
    golden_versions = [d.state_version for d in read_outputs(GOLDEN).decisions]
    replay_versions = [d.state_version for d in read_outputs(tmp_path / "out" / "bag").decisions]
    assert replay_versions[:len(golden_versions)] == golden_versions
    assert reasoning_log.count("evicted") >= 2 and max(golden_versions) >= 1, reasoning_log[-3000:]
    assert reasoning_log.count("ASR swap") >= max(golden_versions), reasoning_log[-3000:]


@pytest.mark.slow
def test_a_perturbed_prompt_is_caught_with_the_first_divergence(tmp_path):
    first = read_outputs(GOLDEN).decisions[0].intent
    forced = "hold_position" if first != "hold_position" else "stop"   # differs from the golden's first
    prompt = yaml.safe_load((config_dir() / "prompt.yaml").read_text())
    for example in prompt["examples"]:
        example["decision"] = f'{{"intent": "{forced}", "args": {{}}}}'
    prompt["question"] = prompt["question"] + f" Emergency: the only allowed intent is {forced}."
    perturbed = tmp_path / "prompt.yaml"
    perturbed.write_text(yaml.safe_dump(prompt))
    # the first decision diverges: the bag's first 2.5 s suffice (a cut at 3 s would split the bag's
    # event at 3.25 s from the decision it triggered, stamped 3.0 s)
    result = replay(tmp_path, "--set", f"reasoning.prompt_file={perturbed}", "--no-motor-check", "--duration", "2.5")
    assert result.returncode == 1, result.stdout[-3000:]
    out = result.stdout
    assert "MISMATCH" in out and "FIRST DIVERGENCE at decision #" in out
    assert re.search(r"decision lockstep waits \d+, timeouts 0;", out), out[-3000:]
    # the first differing decision is named with both sides and the chunk before it
    golden_line = [line.strip() for line in out.splitlines() if line.strip().startswith("golden: ")][0]
    replay_line = [line.strip() for line in out.splitlines() if line.strip().startswith("replay: ")][0]
    assert golden_line[len("golden: "):] != replay_line[len("replay: "):]
    assert "last chunk before it (seq" in out and "state version" in out


def _cut_after_the_arm_moved(seconds: float = 2.0) -> float:
    """A replay length `seconds` after the golden run's first arm task starts, moved off its events
    by >= 0.3 s (a cut there would split an event from the decision it triggers). The golden bag is
    recorded with the bundled adapter, whose first decisions decide when the arm starts."""
    from csr_llm_core.lab.live_episodes import read_topics, stamp_s
    start = next(d.t for d in read_outputs(GOLDEN).decisions if d.intent in ("open_door", "pick_object"))
    events = [stamp_s(c.header) for c in read_topics(GOLDEN, ["state_chunks"])["state_chunks"] if c.kind == 0]
    cut = start + seconds
    while any(abs(event - cut) < 0.3 for event in events):
        cut += 0.5
    return cut


@pytest.mark.slow
def test_a_perturbed_pid_gain_is_caught_on_the_motor_commands(tmp_path):
    result = replay(tmp_path, "--set", "action_router.gains.arm_elbow.p=600.0",
                    "--duration", f"{_cut_after_the_arm_moved():.1f}")
    out = result.stdout
    assert result.returncode == 1, out[-3000:]
    assert "match exactly" in out and "not compared" in out, out[-3000:]   # same decisions in the 2 s ...
    # the decision due at the cut was waited for, not timed out on (nothing is due after the cut)
    assert re.search(r"decision lockstep waits \d+, timeouts 0;", out), out[-3000:]
    elbow = [line for line in out.splitlines() if "arm_elbow: max |diff|" in line][0]
    assert "EXCEEDED first at" in elbow                            # ... but the elbow's commands differ


def test_a_truncated_bag_is_a_clear_error_not_a_crash(tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(GOLDEN, broken)
    (mcap,) = broken.glob("*.mcap")
    mcap.write_bytes(mcap.read_bytes()[: mcap.stat().st_size // 3])
    result = subprocess.run([sys.executable, "-m", "csr_llm_bringup.cli", "replay", str(broken),
                             "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert f"csr-llm: error: bag {broken}: cannot be opened" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_output_folder_that_holds_a_bag_is_refused_before_any_node_starts(tmp_path):
    (tmp_path / "out" / "bag").mkdir(parents=True)
    result = subprocess.run([sys.executable, "-m", "csr_llm_bringup.cli", "replay", str(GOLDEN),
                             "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert f"csr-llm: error: {tmp_path / 'out' / 'bag'} exists already" in result.stderr
    assert "Traceback" not in result.stderr and "[runner] started" not in result.stdout


def test_a_duration_that_is_not_positive_is_refused_before_any_node_starts(tmp_path):
    result = subprocess.run([sys.executable, "-m", "csr_llm_bringup.cli", "replay", str(GOLDEN), "--duration", "0",
                             "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "csr-llm: error: --duration 0: give a positive number of bag seconds" in result.stderr
    assert "[runner] started" not in result.stdout and not (tmp_path / "out").exists()
