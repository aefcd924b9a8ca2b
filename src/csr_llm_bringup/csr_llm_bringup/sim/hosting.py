"""A node of the profile inside the simulator's process (graph `container: simulator`, manual composition).

The profile names the hosted node's class (`component: module:Class`); the runner passes it as
``--component MODULE:CLASS/NAME=PARAMS_FILE[:PARAMS_FILE...]`` before ``--ros-args`` (the files
apply in order: the profile's, then a launch's `params_file`). Under launch a hosted lifecycle node
activates itself only once launch listens to its transition events (``--await-transition-listener
SECONDS``), so launch sees every transition although they are volatile. The hosted node keeps every
topic, parameter and service it has in its own process, but its executor is spun by the
simulator's physics thread only: after the joint state is published the thread runs the node's
ready callbacks and, in every wait, spins it instead of sleeping. So all its callbacks run in one
thread, in the order its own process would run them, and a run stays reproducible; a control
tick needs no DDS round trip between two processes. Its topics still go out (recorder, aggregator,
a replay's compare). How the simulator drives a hosted controller is in control_link.py.
"""
from __future__ import annotations

import importlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Tuple

from rclpy.executors import SingleThreadedExecutor

from csr_llm_common.ros.node import run_node, stop_requested

COMPONENT_FORMAT = "MODULE:CLASS/NAME=PARAMS_FILE[:PARAMS_FILE...]"
LISTENER_FLAG = "--await-transition-listener"


@dataclass(frozen=True)
class ComponentSpec:
    module: str
    class_name: str
    name: str
    params_files: Tuple[Path, ...]

    @property
    def target(self) -> str:
        return f"{self.module}:{self.class_name}"


def parse_components(argv: Sequence[str]) -> List[ComponentSpec]:
    """The ``--component MODULE:CLASS/NAME=PARAMS_FILE`` arguments before ``--ros-args``."""
    args = list(argv)
    if "--ros-args" in args:
        args = args[:args.index("--ros-args")]
    out = []
    for index, arg in enumerate(args):
        if arg != "--component":
            continue
        if index + 1 >= len(args):
            raise ValueError(f"--component needs {COMPONENT_FORMAT}")
        target, sep, params = args[index + 1].partition("=")
        parts = target.split("/")
        module, colon, class_name = parts[0].partition(":")
        if not sep or len(parts) != 2 or not (module and colon and class_name and parts[1]) or not params:
            raise ValueError(f"--component {args[index + 1]!r}: write {COMPONENT_FORMAT}")
        out.append(ComponentSpec(module, class_name, parts[1], tuple(Path(p) for p in params.split(os.pathsep) if p)))
    return out


def listener_wait_of(argv: Sequence[str]) -> float:
    """The ``--await-transition-listener SECONDS`` before ``--ros-args`` (0 when absent: the runner)."""
    args = list(argv)
    if "--ros-args" in args:
        args = args[:args.index("--ros-args")]
    if LISTENER_FLAG not in args or args.index(LISTENER_FLAG) + 1 >= len(args):
        return 0.0
    try:
        return max(0.0, float(args[args.index(LISTENER_FLAG) + 1]))
    except ValueError:
        raise ValueError(f"{LISTENER_FLAG} needs a number of seconds") from None


def resolve_component(target: str) -> Callable[..., Any]:
    """The node class a profile's `component: module:Class` names (ValueError when it is not there)."""
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"component {target!r}: cannot import {module_name} ({err})") from None
    cls = getattr(module, class_name, None)
    if not callable(cls):
        raise ValueError(f"component {target!r}: {module_name} has no class {class_name}")
    return cls


class HostedComponent:
    """The hosted node and its executor, spun only by the caller's thread."""

    def __init__(self, spec: ComponentSpec, namespace: str = "/"):
        node_class = resolve_component(spec.target)
        cli_args = ["--ros-args", "-r", f"__node:={spec.name}"]
        for params_file in spec.params_files:
            cli_args += ["--params-file", str(params_file)]
        if namespace.strip("/"):
            cli_args += ["-r", f"__ns:=/{namespace.strip('/')}"]
        # its own arguments only: the simulator's (its name, its params file) must not reach it
        self.node = node_class(cli_args=cli_args, use_global_arguments=False)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self.name = spec.name

    def start(self, listener_wait_s: float = 0.0) -> None:
        """A lifecycle node configures and activates itself (its ``autostart``), after up to
        listener_wait_s for a subscriber to its (volatile) transition events."""
        autostart = getattr(self.node, "maybe_autostart", None)
        if autostart is None:
            return
        if listener_wait_s > 0:
            self._wait_for_transition_listener(listener_wait_s)
        autostart()

    def _wait_for_transition_listener(self, wait_s: float) -> None:
        topic = f"{self.node.get_fully_qualified_name()}/transition_event"
        deadline = time.monotonic() + wait_s
        while self.node.count_subscribers(topic) == 0 and not stop_requested():
            if time.monotonic() > deadline:
                self.node.get_logger().warning(f"nothing listens to {topic} after {wait_s:g} s: "
                                               "starting anyway (its transition events go unseen)")
                return
            time.sleep(0.05)

    def spin(self, timeout: float) -> None:
        """Run one ready callback of the node, waiting up to `timeout` s for it."""
        self.executor.spin_once(timeout_sec=timeout)

    def stop(self) -> None:
        """A lifecycle node's own stop step (zero effort, deactivate) while the context is valid."""
        deactivate = getattr(self.node, "deactivate_if_active", None)
        if deactivate is not None:
            deactivate()

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


def run_hosting(node_class: Callable[..., object], args: Optional[List[str]] = None) -> int:
    """run_node for the simulator, with the node of a ``--component`` argument in its process: it is
    built and started first (the physics thread starts with the simulator node), and on the way
    out it stops (a controller publishes zero effort) before the simulator's teardown."""
    argv = sys.argv if args is None else args
    try:
        components = parse_components(argv)
        listener_wait_s = listener_wait_of(argv)
        if len(components) > 1:
            raise ValueError(f"the simulator hosts one node, got {len(components)} components")
    except ValueError as err:
        print(f"simulator: {err}", file=sys.stderr)
        return 2

    def build():
        if not components:
            return node_class()
        hosted = HostedComponent(components[0], namespace=namespace_of(argv))
        hosted.start(listener_wait_s)
        return node_class(hosted=hosted)

    def stop_hosted(node) -> None:
        if getattr(node, "hosted", None) is not None:
            node.hosted.stop()

    return run_node(build, args=args, before_stop=stop_hosted)
