"""kill -9 inside the running graph (the `robot` profile under `csr-llm run`, the real model, real DDS).

One run, three faults in turn, each with its recovery time printed (pytest -s):

1. the reasoning node is killed while a task runs: the router finds the decision stream lost within
   its `decision_timeout_s` and ramps to the safe stop (zero effort); the runner reports the death
   and restarts the node (`--restart reasoning`), which warm-starts from its checkpoint and decides
   again, and the router runs the new decision;
2. the router is killed: the runner reports it and stops the graph with exit 1 (its last command
   staying applied is the motor controller's to handle: README, "Safety"); the others exit 0;
3. the saved state is corrupted between runs: the next reasoning node refuses the KV file (checksum),
   recomputes the prefix from the saved chunks and decides on them.
"""
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rclpy.node import Node

from std_msgs.msg import String
from csr_llm_msgs.msg import CsrStatus, Decision, MotorCommand, RouterStatus
from csr_llm_common.ros import qos
from csr_llm_common.ros.spin import spinning
from csr_llm_common.ros.testing import ChildOutput, JointStream, print_recovery, start_node, stop_node, wait_for
from action_router.params import make_config

pytestmark = [pytest.mark.dds, pytest.mark.slow, pytest.mark.e2e]

CONFIG = Path(__file__).resolve().parents[3] / "config"
DECISION_TIMEOUT_S = 5.0            # config/action_router.yaml
RAMP_S = 0.2                        # failsafe_ramp_s (params.py DEFAULTS)
ENDLESS_TASKS = ("open_door", "move_to", "hold_position", "stop")
LOST = f"failure flag set (no decision for {DECISION_TIMEOUT_S:g} s: reasoning node lost?)"


class RunnerOutput(ChildOutput):
    """`csr-llm run` in a child process, its output collected line by line by a thread."""

    def __init__(self, args):
        super().__init__(subprocess.Popen([sys.executable, "-m", "csr_llm_bringup.cli", "run", *args],
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          env=dict(os.environ, PYTHONUNBUFFERED="1")))
        self.proc = self.process

    def pid(self, node: str, nth: int = 0) -> int:
        return [int(p) for p in re.findall(rf"(?:started|restarted) /{node} .*?pid (\d+)\)", self.text())][nth]

    def finish_run(self, timeout: float = 60.0) -> int:
        """The runner's exit code; past timeout it gets a Ctrl-C and 30 s more."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGINT)
        return self.finish(timeout=30)[0]


def endless_task_runs(status: RouterStatus) -> bool:
    """The router runs a task that never ends by itself in this test (joint states standing still, no
    odometry, no object in the scene), and no fail-safe is ramping."""
    return status.active_intent in ENDLESS_TASKS and status.execution_state != MotorCommand.EXEC_FAILSAFE


def stamp_s(msg) -> float:
    return msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec


def node_log_tails(runs_dir: Path, names, chars: int = 2000) -> str:
    """The end of each named node's log in the run (a native crash's stacks are there, not in the
    runner's output)."""
    tails = []
    for name in names:
        for log in sorted(runs_dir.glob(f"*/{name}.log")):
            tails.append(f"--- {log}\n{log.read_text(errors='replace')[-chars:]}")
    return "\n".join(tails)


def flip_bytes(path: Path, count: int = 4096) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + count] = bytes(b ^ 0xFF for b in data[middle:middle + count])
    path.write_bytes(bytes(data))


def test_killed_reasoning_node_and_router_inside_the_running_graph(tmp_path):
    state_dir = tmp_path / "state"
    runner = RunnerOutput(["--profile", "robot", "--runs-dir", str(tmp_path / "runs"), "--restart", "reasoning",
                           "--set", "action_router.autostart=true", "--set", f"reasoning.state_dir={state_dir}",
                           "--set", "reasoning.checkpoint_period_s=1.0", "--set", "reasoning.status_hz=5.0",
                           "--set", f"reasoning.archive_path={tmp_path / 'archive.jsonl'}",
                           # the joint states of this test stand still (no plant) and its Python stream
                           # shares this process with a 1 kHz command subscription: on a loaded machine
                           # it paused > 1 s once (stop 33), and the stale-state fail-safe ended the task
                           # before the decision stream's loss could. Neither a clamp nor a stale state
                           # may end the task here: the stale-state timeout outlasts the decision timeout.
                           "--set", "action_router.state_timeout_s=15.0",
                           "--set", "action_router.failsafe_clamp_persist_s=60.0"])
    decisions, statuses, commands, recovery = [], [], [], {}
    try:
        with spinning() as spinner:
            node = spinner.create(Node, "graph_fault_driver")
            node.create_subscription(Decision, "decision", lambda m: decisions.append((time.monotonic(), m)),
                                     qos.DECISIONS)
            node.create_subscription(RouterStatus, "router_status", statuses.append, qos.ROUTER_STATUS)
            events = node.create_publisher(String, "events", qos.EVENTS)
            with JointStream(node, make_config().joints):
                def order_until(done, timeout: float) -> bool:
                    """Repeat the operator's order (events are volatile) until `done()`."""
                    deadline = time.monotonic() + timeout
                    while time.monotonic() < deadline and not done() and runner.proc.poll() is None:
                        if events.get_subscription_count() > 0:
                            events.publish(String(data="operator: please open the door"))
                        wait_for(done, 3)
                    return bool(done())

                # the model decides on the order; the router runs a task that cannot end by itself
                # here (a back_off would, the decision stream alive or not)
                assert order_until(lambda: decisions, 150), "no decision from the graph\n" + runner.text()[-4000:]
                assert wait_for(lambda: (state_dir / "csr_state.json").exists(), 10), "no checkpoint written"
                time.sleep(1.2)                              # one more checkpoint period: the order is saved
                assert order_until(lambda: statuses and endless_task_runs(statuses[-1]), 30), \
                    (statuses[-1:], runner.text()[-3000:])
                running = statuses[-1].active_intent
                failsafes = statuses[-1].failsafe_count
                # 1 kHz in this Python process only from now on (it would slow the start-up above); a
                # deep queue: under load this process may fall seconds behind, the ramp must not be dropped
                node.create_subscription(MotorCommand, "motor_command",
                                         lambda m: commands.append((time.monotonic(), m)), qos.reliable(5000))
                assert wait_for(lambda: commands, 10), "no motor command reached the test before the kill"

                # 1. kill -9 of the reasoning node while `running` runs
                killed_at = time.monotonic()
                os.kill(runner.pid("reasoning"), signal.SIGKILL)
                assert wait_for(lambda: LOST in runner.text(), DECISION_TIMEOUT_S + 3, step=0.01), \
                    f"the router kept running {running!r} without decisions\n" + runner.text()[-3000:]
                safe_at = time.monotonic()
                assert wait_for(lambda: statuses[-1].failsafe_count == failsafes + 1, 2), statuses[-1]
                recovery["reasoning killed -> router fail-safe"] = safe_at - killed_at
                # on the commands' own stamps (the router's clock): this process may receive them late
                def ramp_stamps():
                    return [stamp_s(m) for _, m in list(commands) if m.execution_state == MotorCommand.EXEC_FAILSAFE]

                # this process may receive the commands late: wait until the ramp is behind it
                assert wait_for(lambda: ramp_stamps() and stamp_s(commands[-1][1]) > ramp_stamps()[0] + RAMP_S, 10), \
                    ("no fail-safe ramp in the motor commands", len(commands),
                     sorted({m.execution_state for _, m in commands}))
                ramp = ramp_stamps()
                assert wait_for(lambda: stamp_s(commands[-1][1]) > ramp[0] + RAMP_S + 0.3, 5)
                stopped = [m for _, m in commands if stamp_s(m) > ramp[0] + RAMP_S + 0.01]
                assert all(m.execution_state == MotorCommand.EXEC_STOPPED and not any(m.effort)
                           for m in stopped[:100]), stopped[0]
                recovery["fail-safe ramp -> zero effort"] = next(
                    stamp_s(m) for _, m in commands if stamp_s(m) >= ramp[0]
                    and m.execution_state == MotorCommand.EXEC_STOPPED) - ramp[0]
                assert wait_for(lambda: "restarted /reasoning" in runner.text(), 30), runner.text()[-3000:]
                assert wait_for(lambda: decisions[-1][0] > killed_at, 120), runner.text()[-3000:]
                back_at = decisions[-1][0]
                recovery["reasoning killed -> next decision"] = back_at - killed_at
                assert wait_for(lambda: statuses[-1].active_intent != "" and statuses[-1].failsafe_count
                                == failsafes + 1, 10), statuses[-1]       # re-armed: the new decision runs

                # 2. kill -9 of the router: the runner reports it and stops the graph
                os.kill(runner.pid("action_router"), signal.SIGKILL)
                rc = runner.finish_run(timeout=90)
    finally:
        if runner.proc.poll() is None:
            runner.proc.send_signal(signal.SIGINT)
            runner.finish_run()
    out = runner.text()
    assert "[runner] /reasoning exited unexpectedly with code -9; restarting in 1 s (1/5)" in out, out[-4000:]
    assert re.search(r"\[reasoning\].*warm restart from .*KV recomputed", out), out[-4000:]
    assert out.count("failure flag set") == 1 and LOST in out, out[-4000:]   # the decision loss alone
    assert re.search(r"\[runner\] /action_router exited unexpectedly with code -9", out), out[-4000:]
    assert rc == 1, out[-3000:]
    codes = re.search(r"exit codes: (\{.*\})", out).group(1)
    assert "'aggregator': 0" in codes and "'reasoning': 0" in codes and "'recorder': 0" in codes, \
        (codes, node_log_tails(tmp_path / "runs", ("aggregator", "reasoning", "recorder")))
    for _, cmd in commands:
        assert all(math.isfinite(v) and abs(v) <= lim + 1e-9 for v, lim in zip(cmd.effort, cmd.effort_limit))

    # 3. the clean stop saved the KV cache; corrupt it: refused, the prefix recomputed, decisions go on
    saved = state_dir / "kv_state.bin"
    assert saved.exists(), out[-3000:]
    flip_bytes(saved)
    started = time.monotonic()
    reasoning = start_node("csr_llm_core.reasoning_node", f"intents_file:={CONFIG / 'intents.yaml'}",
                           f"prompt_file:={CONFIG / 'prompt.yaml'}", f"state_dir:={state_dir}",
                           "decision_hz:=2.0", "status_hz:=5.0", f"archive_path:={tmp_path / 'archive.jsonl'}")
    later, csr = [], []
    try:
        with spinning() as spinner:
            node = spinner.create(Node, "corrupt_state_watcher")
            node.create_subscription(Decision, "decision", later.append, qos.DECISIONS)
            node.create_subscription(CsrStatus, "csr_status", csr.append, qos.COMMANDS)
            assert wait_for(lambda: later or reasoning.poll() is not None, 90), "no decision after a corrupt state"
            recovery["corrupt KV file -> first decision"] = time.monotonic() - started
            assert wait_for(lambda: csr, 10)
    finally:
        rc2, out2 = stop_node(reasoning)
    print_recovery("graph recovery (kill -9, corrupt saved state):", recovery)
    assert rc2 == 0 and later, out2[-3000:]
    assert "does not match its checksum" in out2 and "the prefix will be recomputed" in out2, out2[-3000:]
    assert csr[-1].chunk_count > 0, csr[-1]                 # the saved chunks kept, their KV recomputed
    assert recovery["reasoning killed -> router fail-safe"] <= DECISION_TIMEOUT_S + 1.0 + 0.5
