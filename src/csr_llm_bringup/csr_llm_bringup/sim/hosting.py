"""The router inside the simulator's process (graph `container: simulator`, manual composition).

In the lockstepped sim every control tick used to be a DDS round trip between two Python
processes on loaded cores: joint state out, the router's executor woken, the command back, the
simulator's executor woken, then its physics thread (measured with `make run` on 2 cores: ~3.1 ms
wall per tick, about 0.3 ms of it the router's own work). Hosted, the router node keeps every
topic, parameter and service it has in its own process, but its executor is spun by the
simulator's physics thread only: after the joint state is published the thread runs the router's
ready callbacks (the same subscription callback ticks it, as in its own process) and reads the
command it just computed; in every wait it spins the router instead of sleeping. So all the
router's callbacks run in one thread, in the order its own process would run them, and a run
stays reproducible. The router's topics still go out (recorder, aggregator, a replay's compare).
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence

from rclpy.executors import SingleThreadedExecutor

from action_router.outputs import Command
from action_router.router_node import RouterNode
from csr_llm_common.ros.node import run_node

ROUTER_COMPONENT = ("action_router", "router_node")      # the only node the simulator hosts


@dataclass(frozen=True)
class ComponentSpec:
    package: str
    executable: str
    name: str
    params_file: Path


def parse_components(argv: Sequence[str]) -> List[ComponentSpec]:
    """The ``--component PACKAGE/EXECUTABLE/NAME=PARAMS_FILE`` arguments before ``--ros-args``."""
    args = list(argv)
    if "--ros-args" in args:
        args = args[:args.index("--ros-args")]
    out = []
    for index, arg in enumerate(args):
        if arg != "--component":
            continue
        if index + 1 >= len(args):
            raise ValueError("--component needs PACKAGE/EXECUTABLE/NAME=PARAMS_FILE")
        target, sep, params = args[index + 1].partition("=")
        parts = target.split("/")
        if not sep or len(parts) != 3 or not all(parts) or not params:
            raise ValueError(f"--component {args[index + 1]!r}: write PACKAGE/EXECUTABLE/NAME=PARAMS_FILE")
        out.append(ComponentSpec(parts[0], parts[1], parts[2], Path(params)))
    return out


class HostedRouter:
    """The router node and its executor, spun only by the caller's thread."""

    def __init__(self, spec: ComponentSpec, namespace: str = "/"):
        if (spec.package, spec.executable) != ROUTER_COMPONENT:
            raise ValueError(f"the simulator hosts the router ({'/'.join(ROUTER_COMPONENT)}) only, "
                             f"not {spec.package}/{spec.executable}")
        cli_args = ["--ros-args", "-r", f"__node:={spec.name}", "--params-file", str(spec.params_file)]
        if namespace.strip("/"):
            cli_args += ["-r", f"__ns:=/{namespace.strip('/')}"]
        # its own arguments only: the simulator's (its name, its params file) must not reach it
        self.node = RouterNode(cli_args=cli_args, use_global_arguments=False)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self.name = spec.name

    def start(self) -> None:
        """Configure and activate it (its ``autostart``)."""
        self.node.maybe_autostart()

    @property
    def active(self) -> bool:
        return bool(self.node.control_active)

    @property
    def last_decision_id(self) -> int:
        return int(self.node.last_decision_id)

    def report_to(self, handover, log) -> None:
        """At the start: the handover compares the hosted router's decision ids directly."""
        if not self.active:
            log.warning(f"hosted router {self.name} is not active: the simulation runs without its commands")
            return
        handover.on_router_status(self.last_decision_id)

    def idle_for(self, handover) -> Callable[[float], None]:
        """How the handover waits: spinning the router, which then reports its newest decision."""
        def idle(timeout: float) -> None:
            self.spin(timeout)
            handover.on_router_status(self.last_decision_id)
        return idle

    def spin(self, timeout: float) -> None:
        """Run one ready callback of the router, waiting up to `timeout` s for it."""
        self.executor.spin_once(timeout_sec=timeout)

    def tick(self, t: float, timeout: float, stop: threading.Event) -> Optional[Command]:
        """Spin until the router ticked the state at `t` (its joint_states callback); its command,
        or None after `timeout` wall s (counted by the caller)."""
        deadline = time.monotonic() + timeout
        while self.node.last_tick_time < t - 1e-9 and not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.executor.spin_once(timeout_sec=min(remaining, 0.005))
        return self.node.last_command

    def stop(self) -> None:
        """Zero effort and deactivate (the router's own stop step)."""
        self.node.deactivate_if_active()

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=2.0)
        self.node.destroy_node()


def namespace_of(argv: Sequence[str]) -> str:
    """The process's ``-r __ns:=/x`` (a hosted node shares its container's namespace)."""
    argv = list(argv)
    for index, arg in enumerate(argv[:-1]):
        if arg in ("-r", "--remap") and argv[index + 1].startswith("__ns:="):
            return argv[index + 1].split(":=", 1)[1]
    return "/"


def run_hosting_router(node_class: Callable[..., object], args: Optional[List[str]] = None) -> int:
    """run_node for the simulator, with the router of a ``--component`` argument in its process:
    the router is built and activated first (the physics thread starts with the node), and on
    the way out it publishes zero effort and deactivates before the simulator's teardown."""
    argv = sys.argv if args is None else args
    try:
        components = parse_components(argv)
        if len(components) > 1:
            raise ValueError(f"the simulator hosts one router, got {len(components)} components")
    except ValueError as err:
        print(f"simulator: {err}", file=sys.stderr)
        return 2

    def build():
        if not components:
            return node_class()
        hosted = HostedRouter(components[0], namespace=namespace_of(argv))
        hosted.start()
        return node_class(hosted_router=hosted)

    def stop_hosted(node) -> None:
        if getattr(node, "hosted", None) is not None:
            node.hosted.stop()

    return run_node(build, args=args, before_stop=stop_hosted)
