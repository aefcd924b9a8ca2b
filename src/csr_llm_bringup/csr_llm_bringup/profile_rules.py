"""Rules between the nodes of one profile, checked when the profile loads (plain module, no rclpy).

Each rule ties parameters of two nodes (or a node and the profile's `lockstep:` key) that must agree
for the graph to behave as meant; a broken one is a ProfileError naming both parameters and the
rule. A parameter the profile does not set counts with its code default (the nodes' config
dataclasses). Nodes are recognised by package and executable.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from .lockstep import LockstepSettings

ROUTER = ("action_router", "router_node")
REASONING = ("csr_llm_core", "reasoning_node")
AGGREGATOR = ("csr_llm_core", "aggregator_node")
SIMULATOR = ("csr_llm_bringup", "simulator_node")


class ProfileError(ValueError):
    """A profile or one of its parameter files is malformed, or two of its nodes disagree."""


class NodeLike(Protocol):
    name: str
    package: str
    executable: str
    parameters: Dict[str, Any]


def _router_defaults() -> Dict[str, Any]:
    from action_router.params import default_parameters
    return default_parameters()


def _reasoning_defaults() -> Dict[str, Any]:
    from csr_llm_core.reasoning_config import ReasoningNodeConfig
    cfg = ReasoningNodeConfig()
    return {"decision_hz": cfg.decision_hz, "n_ctx": cfg.n_ctx, "tau_mem": cfg.reasoner.tau_mem,
            "rebuild_pause": cfg.reasoner.rebuild_pause}


def _aggregator_defaults() -> Dict[str, Any]:
    from csr_llm_core.aggregator import AggregatorConfig
    return {"watermark_period": AggregatorConfig().watermark_period}


def _simulator_defaults() -> Dict[str, Any]:
    from .sim.sim_config import SimulatorConfig
    return dict(vars(SimulatorConfig()))


DEFAULTS: Dict[Tuple[str, str], Callable[[], Dict[str, Any]]] = {
    ROUTER: _router_defaults, REASONING: _reasoning_defaults, AGGREGATOR: _aggregator_defaults,
    SIMULATOR: _simulator_defaults}


class Graph:
    """The profile's nodes by role, with each parameter's value (the profile's, else the default)."""

    def __init__(self, nodes: Sequence[NodeLike]):
        self.nodes = list(nodes)

    def find(self, role: Tuple[str, str]) -> Optional[NodeLike]:
        for node in self.nodes:
            if (node.package, node.executable) == role:
                return node
        return None

    def value(self, node: NodeLike, name: str) -> Any:
        if name in node.parameters:
            return node.parameters[name]
        defaults = DEFAULTS.get((node.package, node.executable))
        return None if defaults is None else defaults().get(name)


def _close(a: Any, b: Any) -> bool:
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)


def check_lockstep_peers(graph: Graph, lockstep: LockstepSettings, where: str) -> List[str]:
    """The router starts a decision at its first tick after stamp + decision_delay_s: the lag the
    driver allows. Control lockstep needs one router tick per joint state, each command stamped
    with its state's time."""
    router = graph.find(ROUTER)
    if router is None or not lockstep.enabled:
        return []
    problems = []
    delay = graph.value(router, "decision_delay_s")
    if not _close(delay, lockstep.lag):
        problems.append(f"{where}.lag ({lockstep.lag:g}) must equal {router.name}.decision_delay_s ({delay}): "
                        f"the router starts a decision one lag after its stamp, the lag the lockstep driver allows")
    if lockstep.control_timeout > 0:
        for name, wanted in (("tick_source", "joint_states"), ("command_stamp", "state")):
            value = graph.value(router, name)
            if value != wanted:
                problems.append(f"{where}.control_timeout ({lockstep.control_timeout:g}) needs {router.name}.{name} "
                                f"= {wanted} (got {value!r}): control lockstep waits for the command of each state")
    return problems


def check_control_rate(graph: Graph) -> List[str]:
    """A router ticked by the simulator's joint states runs at their rate."""
    router, sim = graph.find(ROUTER), graph.find(SIMULATOR)
    if router is None or sim is None or graph.value(router, "tick_source") != "joint_states":
        return []
    control_hz, js_hz = graph.value(router, "control_hz"), graph.value(sim, "joint_state_hz")
    if _close(control_hz, js_hz):
        return []
    return [f"{router.name}.control_hz ({control_hz}) must equal {sim.name}.joint_state_hz ({js_hz}): "
            f"with tick_source joint_states the router ticks once per joint state"]


def check_watermarks(graph: Graph) -> List[str]:
    """A decision falls due at each watermark of the chunk stream: their periods match."""
    aggregator, reasoning = graph.find(AGGREGATOR), graph.find(REASONING)
    if aggregator is None or reasoning is None:
        return []
    period, hz = graph.value(aggregator, "watermark_period"), graph.value(reasoning, "decision_hz")
    if not period or not hz or _close(float(period) * float(hz), 1.0):
        return []
    return [f"{aggregator.name}.watermark_period ({period}) must be 1 / {reasoning.name}.decision_hz ({hz}): "
            f"the chunk stream's watermarks mark the due decisions"]


def check_context(graph: Graph) -> List[str]:
    """The context holds the prefix up to tau_mem and the chunks that come while R2 rebuilds."""
    reasoning = graph.find(REASONING)
    if reasoning is None:
        return []
    n_ctx, tau_mem = graph.value(reasoning, "n_ctx"), graph.value(reasoning, "tau_mem")
    if not n_ctx or int(n_ctx) > int(tau_mem):
        return []
    return [f"{reasoning.name}.n_ctx ({n_ctx}) must be larger than {reasoning.name}.tau_mem ({tau_mem}) "
            f"(0 = 1.5 x tau_mem + 256): an eviction starts at tau_mem tokens"]


def check_shared_server(graph: Graph) -> List[str]:
    """R1 and R2 as two slots of one server share its compute: R2's rebuild pauses for decisions."""
    reasoning = graph.find(REASONING)
    if reasoning is None:
        return []
    r1, r2 = reasoning.parameters.get("r1") or {}, reasoning.parameters.get("r2") or {}
    url = r1.get("url") if isinstance(r1, dict) else None
    if not url or not isinstance(r2, dict) or r2.get("url") != url or graph.value(reasoning, "rebuild_pause"):
        return []
    return [f"{reasoning.name}.r1.url and {reasoning.name}.r2.url name one server ({url}): "
            f"{reasoning.name}.rebuild_pause must be true (two slots of one server share its compute)"]


def check_profile(nodes: Sequence[NodeLike], lockstep: LockstepSettings, path: object) -> None:
    """Every rule; ProfileError listing each broken one."""
    graph = Graph(nodes)
    problems = (check_lockstep_peers(graph, lockstep, "lockstep") + check_control_rate(graph)
                + check_watermarks(graph) + check_context(graph) + check_shared_server(graph))
    if problems:
        raise ProfileError(f"{path}: " + "; ".join(problems))
