"""Start a profile's node graph as separate processes where `ros2 launch` is absent.

Same graph as the launch files (both read `graph.load_profile`). Each node runs as
`python -c 'from <module> import <func>; ...' --ros-args ...` resolved from the package's
console_scripts entry point, with its merged parameters in a generated params file. Output lines
are prefixed with the node name; SIGINT/SIGTERM are forwarded (each node in its own session, so a
terminal Ctrl-C reaches it once, through us); shutdown escalates SIGINT -> SIGTERM -> SIGKILL.
Fast DDS is limited to UDP on loopback for the children, so no shared-memory segments outlive
them. Each child's CPU time is sampled while the graph runs (`cpu`, process_cpu.py). A node that
exits on its own while the graph runs makes the run fail (exit code 1), unless
the profile marks it `ends_run` and it exits with 0 (e.g. the simulator at the end of a scenario),
or marks it `restart` (or `csr-llm run --restart NAME`): then a crash is reported and the node is
started again after a back-off (1, 2, 4 ... s), at most MAX_RESTARTS times per run. A node with a
`container` gets no process: its params file goes to the container's process as
`--component MODULE:CLASS/NAME=PARAMS_FILE` (before `--ros-args`, the profile's `component:`), which
builds it there.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Dict, List, Optional, Sequence, TextIO, Tuple

import yaml

from csr_llm_common.ros.dds_env import localhost_dds_env

from .graph import NodeSpec, Profile
from .process_cpu import CpuSeries, process_cpu_s


# After SIGINT a node gets this long (report, joins, saves) before SIGTERM; the launch files use
# the same grace (sigterm_timeout), so `ros2 launch` and the runner stop a node the same way.
STOP_GRACE_S = 30.0
STACK_DUMP_WAIT_S = 1.0      # after SIGUSR1, before SIGKILL: time for a hung node to print its stacks
# A node marked `restart` is started again at most this often per run, after 1, 2, 4 ... s.
MAX_RESTARTS = 5
RESTART_DELAY_S = 1.0
CPU_SAMPLE_S = 0.5           # how often each child's CPU time is read (/proc) while the graph runs

class LaunchError(RuntimeError):
    pass


def resolve_entry_point(package: str, executable: str) -> tuple:
    """(module, function) of the console script `executable` provided by `package`."""
    for entry in metadata.entry_points(group="console_scripts"):
        if entry.name == executable and entry.value.split(".")[0].split(":")[0] == package:
            module, _, func = entry.value.partition(":")
            return module.strip(), func.strip()
    raise LaunchError(f"package {package!r} has no executable {executable!r} (is it installed? run `make setup`)")


def component_argument(spec: NodeSpec, params_file: Path) -> str:
    """How a container process is told to build the hosted node `spec` (see sim/hosting.py)."""
    return f"{spec.component}/{spec.name}={params_file}"


def node_command(spec: NodeSpec, params_file: Path, python: str = sys.executable,
                 components: Sequence[str] = ()) -> List[str]:
    module, func = resolve_entry_point(spec.package, spec.executable)
    argv = [python, "-c", f"import sys; from {module} import {func}; sys.exit({func}())"]
    for component in components:
        argv += ["--component", component]
    argv += ["--ros-args", "-r", f"__node:={spec.name}", "--params-file", str(params_file)]
    if spec.namespace.strip("/"):
        argv += ["-r", f"__ns:=/{spec.namespace.strip('/')}"]
    for source, target in spec.remappings:
        argv += ["-r", f"{source}:={target}"]
    return argv


def write_params_file(spec: NodeSpec, directory: Path) -> Path:
    path = directory / f"{spec.name}.params.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": spec.parameters}}, sort_keys=False))
    return path


def child_environment(base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ if base is None else base)
    localhost_dds_env(env)
    env.setdefault("FASTDDS_BUILTIN_TRANSPORTS", "UDPv4")   # no SHM segments left behind
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("RCUTILS_CONSOLE_OUTPUT_FORMAT", "[{severity}] [{time}] {message}")
    return env


@dataclass
class _Child:
    spec: NodeSpec
    argv: List[str]
    process: subprocess.Popen
    reader: threading.Thread
    exited_unexpectedly: bool = False
    restarts: int = 0
    restart_at: Optional[float] = None     # monotonic time of the pending restart


class GraphRunner:
    def __init__(self, profile: Profile, work_dir: Path, out: TextIO = sys.stdout, log_dir: Optional[Path] = None,
                 grace_s: float = STOP_GRACE_S):
        self.profile = profile
        self.work_dir = Path(work_dir)
        self.out = out
        self.log_dir = log_dir
        self.grace_s = grace_s
        self.children: List[_Child] = []
        self._print_lock = threading.Lock()
        self._stop = threading.Event()
        self.failed: List[str] = []
        self.cpu: Dict[str, CpuSeries] = {}     # per process (named by its node and the nodes it hosts)
        self._cpu_next = 0.0

    def _emit(self, name: str, line: str) -> None:
        with self._print_lock:
            self.out.write(f"[{name}] {line}")
            if not line.endswith("\n"):
                self.out.write("\n")
            self.out.flush()

    def _pump_output(self, name: str, stream, log_file) -> None:
        for line in stream:
            self._emit(name, line)
            if log_file is not None:
                log_file.write(line)
                log_file.flush()
        if log_file is not None:
            log_file.close()

    def _spawn(self, spec: NodeSpec, argv: List[str]) -> Tuple[subprocess.Popen, threading.Thread]:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   errors="replace", env=child_environment(), start_new_session=True)
        log_file = open(self.log_dir / f"{spec.name}.log", "a") if self.log_dir else None
        reader = threading.Thread(target=self._pump_output, args=(spec.name, process.stdout, log_file), daemon=True)
        reader.start()
        return process, reader

    def start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        plans = []
        for spec in self.profile.processes:
            components = [component_argument(hosted, write_params_file(hosted, self.work_dir))
                          for hosted in self.profile.hosted_by(spec.name)]
            plans.append((spec, node_command(spec, write_params_file(spec, self.work_dir), components=components)))
        for spec, argv in plans:
            process, reader = self._spawn(spec, argv)
            self.children.append(_Child(spec, argv, process, reader))
            hosted = "".join(f", hosting {h.full_name}" for h in self.profile.hosted_by(spec.name))
            self._emit("runner", f"started {spec.full_name} ({spec.package}/{spec.executable}{hosted}, "
                                 f"pid {process.pid})")

    def _crashed(self, child: _Child, code: int) -> bool:
        """Schedule a restart of a crashed `restart` node; False when the run must stop instead."""
        if not child.spec.restart or child.restarts >= MAX_RESTARTS:
            return False
        delay = RESTART_DELAY_S * 2 ** child.restarts
        child.restarts += 1
        child.restart_at = time.monotonic() + delay
        self._emit("runner", f"{child.spec.full_name} exited unexpectedly with code {code}; restarting in "
                             f"{delay:g} s ({child.restarts}/{MAX_RESTARTS})")
        return True

    def _restart_due(self, child: _Child) -> None:
        if child.restart_at is None or time.monotonic() < child.restart_at:
            return
        child.restart_at = None
        child.reader.join(timeout=5)
        child.process, child.reader = self._spawn(child.spec, child.argv)
        self._emit("runner", f"restarted {child.spec.full_name} (pid {child.process.pid})")

    def request_stop(self, *_args) -> None:
        self._stop.set()

    def wait(self, duration: Optional[float] = None) -> None:
        """Until stop is requested, duration passes, or a node exits on its own."""
        deadline = None if not duration else time.monotonic() + duration
        while not self._stop.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                self._emit("runner", f"duration of {duration:g} s reached")
                return
            for child in self.children:
                if child.restart_at is not None:
                    self._restart_due(child)
                    continue
                code = child.process.poll()
                if code == 0 and child.spec.ends_run:
                    self._emit("runner", f"{child.spec.full_name} finished; stopping the run")
                    return
                if code is not None and self._crashed(child, code):
                    continue
                if code is not None:
                    child.exited_unexpectedly = True
                    self.failed.append(child.spec.name)
                    self._emit("runner", f"{child.spec.full_name} exited unexpectedly with code {code}; stopping")
                    return
            self.sample_cpu()
            self._stop.wait(0.1)

    def process_label(self, spec: NodeSpec) -> str:
        return "+".join([spec.name] + [h.name for h in self.profile.hosted_by(spec.name)])

    def sample_cpu(self, period_s: float = CPU_SAMPLE_S) -> None:
        """Every child's CPU seconds so far, at most once per period (process_cpu.py)."""
        now = time.monotonic()
        if now < self._cpu_next:
            return
        self._cpu_next = now + period_s
        for child in self.children:
            if child.process.poll() is None:
                self.cpu.setdefault(self.process_label(child.spec), CpuSeries()).add(
                    child.process.pid, now, process_cpu_s(child.process.pid))

    def shutdown(self) -> Dict[str, int]:
        self.sample_cpu(period_s=0.0)
        alive = [c for c in self.children if c.process.poll() is None]
        for child in alive:
            _signal_group(child.process, signal.SIGINT)
        deadline = time.monotonic() + self.grace_s
        for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            for child in alive:
                try:
                    child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            alive = [c for c in alive if c.process.poll() is None]
            if not alive:
                break
            if sig == signal.SIGKILL:      # our nodes print their stacks on SIGUSR1: the log says where they hung
                for child in alive:
                    _signal_group(child.process, signal.SIGUSR1)
                time.sleep(STACK_DUMP_WAIT_S)
            for child in alive:
                self._emit("runner", f"{child.spec.full_name} did not stop; sending {sig.name}")
                _signal_group(child.process, sig)
            deadline = time.monotonic() + wait_s
        for child in self.children:
            child.process.wait()
            child.reader.join(timeout=5)
        codes = {c.spec.name: c.process.returncode for c in self.children}
        for child in self.children:
            if not child.exited_unexpectedly and child.process.returncode not in (0, -signal.SIGINT):
                self.failed.append(child.spec.name)
                self._emit("runner", f"{child.spec.full_name} ended with code {child.process.returncode}")
        return codes

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
