"""Node graph per profile: the single source of truth for what runs, read by the launch files and the runner.

A profile (config/<profile>.yaml) lists the nodes; each node names its package and executable, an
optional namespace and remaps, whether it is a lifecycle node, the ROS 2 parameter files it loads
(sections `/**` and `<node name>` are used, as ros2 does) and inline parameter overrides. The
profile's `use_sim_time` is set on every node. A node with `container: <other node>` runs inside
that node's process (manual composition, as ROS 2 component containers do; only hosts that know
how to host it accept one: the simulator hosts the router), built from its `component:
module:Class`; `separate_processes` ignores every `container`.

The profile's `lockstep:` key (lockstep.py) turns lockstep on: `driver` names the node that holds
each state (the simulator; none: `csr-llm replay`'s bag player), which gets its parameters from
the key's period, lag, timeout and control_timeout. `--set lockstep.KEY=VALUE` overrides them.
The rules between nodes (profile_rules.py) are checked on load. Plain module: no rclpy, no launch.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import yaml

from csr_llm_common.paths import config_dir

from .lockstep import LockstepSettings
from .profile_rules import ProfileError, check_profile

LOCKSTEP_KEY = "lockstep"


@dataclass
class NodeSpec:
    name: str
    package: str
    executable: str
    namespace: str = ""
    lifecycle: bool = False
    ends_run: bool = False          # when this node exits by itself with code 0, the run is over
    restart: bool = False           # a crash restarts the node (runner: with back-off; launch: respawn)
    parameters: Dict[str, Any] = field(default_factory=dict)   # merged: files, then overrides
    remappings: List[Tuple[str, str]] = field(default_factory=list)
    parameter_files: List[str] = field(default_factory=list)
    container: str = ""             # the node whose process runs this one ("" = a process of its own)
    component: str = ""             # module:Class of the node, built in its container's process

    @property
    def full_name(self) -> str:
        ns = self.namespace.strip("/")
        return f"/{ns}/{self.name}" if ns else f"/{self.name}"


@dataclass
class Profile:
    name: str
    path: Path
    use_sim_time: bool
    nodes: List[NodeSpec]
    settings: Dict[str, Any] = field(default_factory=dict)    # profile-level extras (e.g. recording)
    lockstep: LockstepSettings = field(default_factory=LockstepSettings)
    lockstep_driver: str = ""       # the node that drives lockstep ("" = a bag player outside the graph)

    def node(self, name: str) -> NodeSpec:
        for spec in self.nodes:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def processes(self) -> List[NodeSpec]:
        """The nodes that get a process of their own (every node not hosted in a container)."""
        return [spec for spec in self.nodes if not spec.container]

    def hosted_by(self, name: str) -> List[NodeSpec]:
        """The nodes that run inside node `name`'s process."""
        return [spec for spec in self.nodes if spec.container == name]


def profile_path(profile: Union[str, Path]) -> Path:
    path = Path(profile)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    candidate = config_dir() / f"{profile}.yaml"
    if not candidate.exists():
        known = sorted(p.stem for p in config_dir().glob("*.yaml") if _is_profile(p))
        raise ProfileError(f"no profile {profile!r}: {candidate} does not exist (profiles: {', '.join(known)})")
    return candidate


def _is_profile(path: Path) -> bool:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and isinstance(data.get("nodes"), list)


def _deep_merge(base: Dict[str, Any], extra: Mapping[str, Any]) -> Dict[str, Any]:
    for key, value in extra.items():
        current = base.get(key)
        if isinstance(value, Mapping) and isinstance(current, dict):
            _deep_merge(current, value)
        elif isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
            base[key] = float(value)    # `rate=250` for a double parameter: ROS would refuse the int
        else:
            base[key] = copy.deepcopy(value)
    return base


def flatten(parameters: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    """Nested parameter dicts -> dotted names (how ROS 2 names nested parameters)."""
    out: Dict[str, Any] = {}
    for key, value in parameters.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def read_parameter_file(path: Path, node: NodeSpec) -> Dict[str, Any]:
    """ros__parameters that a ROS 2 params file gives this node (`/**`, name or full name)."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ProfileError(f"cannot read parameter file {path}: {err}") from err
    merged: Dict[str, Any] = {}
    for key in ("/**", node.name, node.full_name, node.full_name.lstrip("/")):
        section = data.get(key)
        if isinstance(section, Mapping):
            params = section.get("ros__parameters")
            if not isinstance(params, Mapping):
                raise ProfileError(f"{path}: section {key!r} has no ros__parameters mapping")
            _deep_merge(merged, params)
    return merged


def load_profile(profile: Union[str, Path], overrides: Optional[Mapping[str, Mapping[str, Any]]] = None,
                 separate_processes: bool = False) -> Profile:
    """Read a profile; `overrides` = {node name: {parameter: value}} applied last; with
    `separate_processes` every node gets its own process (`container` entries are ignored)."""
    path = profile_path(profile)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ProfileError(f"cannot read profile {path}: {err}") from err
    if not isinstance(data, Mapping) or not isinstance(data.get("nodes"), list):
        raise ProfileError(f"{path}: a profile needs a 'nodes' list")
    use_sim_time = bool(data.get("use_sim_time", False))
    default_ns = str(data.get("namespace", "") or "")
    lockstep, driver = _lockstep_of(path, data.get(LOCKSTEP_KEY), (overrides or {}).get(LOCKSTEP_KEY))
    nodes, seen = [], set()
    for entry in data["nodes"]:
        try:
            spec = NodeSpec(name=str(entry["name"]), package=str(entry["package"]),
                            executable=str(entry["executable"]),
                            namespace=str(entry.get("namespace", default_ns) or ""),
                            lifecycle=bool(entry.get("lifecycle", False)),
                            ends_run=bool(entry.get("ends_run", False)),
                            restart=bool(entry.get("restart", False)),
                            parameter_files=[str(f) for f in entry.get("parameter_files", [])],
                            remappings=[(str(a), str(b)) for a, b in (entry.get("remappings") or {}).items()],
                            container="" if separate_processes else str(entry.get("container", "") or ""),
                            component=str(entry.get("component", "") or ""))
        except (KeyError, TypeError, AttributeError) as err:
            raise ProfileError(f"{path}: node entry {entry!r} needs name, package, executable ({err})") from err
        if spec.full_name in seen:
            raise ProfileError(f"{path}: node {spec.full_name} is listed twice")
        seen.add(spec.full_name)
        params: Dict[str, Any] = {}
        for file_name in spec.parameter_files:
            file_path = Path(file_name) if Path(file_name).is_absolute() else path.parent / file_name
            _deep_merge(params, read_parameter_file(file_path, spec))
        _deep_merge(params, entry.get("parameters") or {})
        if spec.name == driver:
            _drive_lockstep(path, spec, params, lockstep)
        _resolve_file_parameters(params, path.parent)
        if overrides and spec.name in overrides:
            given = copy.deepcopy(dict(overrides[spec.name]))
            _resolve_file_parameters(given, Path.cwd())       # typed on a command line: from where it was typed
            _deep_merge(params, given)
        params["use_sim_time"] = use_sim_time
        spec.parameters = params
        nodes.append(spec)
    if driver and driver not in {spec.name for spec in nodes}:
        raise ProfileError(f"{path}: lockstep.driver {driver!r} is not a node of the profile")
    _check_containers(path, nodes)
    check_profile(nodes, lockstep, path)
    settings = {k: v for k, v in data.items() if k not in ("nodes", "use_sim_time", "namespace", LOCKSTEP_KEY)}
    return Profile(path.stem, path, use_sim_time, nodes, settings, lockstep, driver)


def _lockstep_of(path: Path, given: Any, override: Optional[Mapping[str, Any]]) -> Tuple[LockstepSettings, str]:
    """The profile's `lockstep:` key (with `--set lockstep.KEY=VALUE` applied) and its driver node."""
    merged = dict(given) if isinstance(given, Mapping) else ({} if given is None else given)
    if override and isinstance(merged, dict):
        merged.update(override)
    driver = str(merged.pop("driver", "") or "") if isinstance(merged, dict) else ""
    try:
        return LockstepSettings.from_mapping(merged if given is not None or override else None), driver
    except ValueError as err:
        raise ProfileError(f"{path}: {err}") from None


def _drive_lockstep(path: Path, spec: NodeSpec, params: Dict[str, Any], lockstep: LockstepSettings) -> None:
    """The driver's lockstep parameters come from the profile's one `lockstep:` key only."""
    driven = lockstep.simulator_parameters()
    written = sorted(set(driven) & set(params))
    if written:
        raise ProfileError(f"{path}: node {spec.name!r} sets {', '.join(written)}: set lockstep "
                           f"in the profile's `lockstep:` key (it drives {spec.name})")
    params.update(driven)


def _check_containers(path: Path, nodes: List[NodeSpec]) -> None:
    by_name = {spec.name: spec for spec in nodes}
    for spec in nodes:
        if not spec.container:
            continue
        host = by_name.get(spec.container)
        if host is None or host is spec:
            raise ProfileError(f"{path}: node {spec.name!r} names container {spec.container!r}, "
                               f"which is not another node of the profile")
        if host.container:
            raise ProfileError(f"{path}: node {spec.name!r}'s container {host.name!r} runs in a container itself")
        if spec.namespace != host.namespace:
            raise ProfileError(f"{path}: node {spec.name!r} and its container {host.name!r} need the same namespace")
        module, colon, class_name = spec.component.partition(":")
        if not (module and colon and class_name):
            raise ProfileError(f"{path}: node {spec.name!r} runs in {host.name!r}'s process: name its node class "
                               f"as `component: module:Class` (got {spec.component!r})")


def _resolve_file_parameters(params: Dict[str, Any], base: Path) -> None:
    """`*_file` parameters given relative (intents.yaml) name files under `base`: next to the profile for
    the profile's and its parameter files' values, the current directory for overrides (`--set`)."""
    for key, value in params.items():
        if key.endswith("_file") and isinstance(value, str) and value and \
                not value.startswith(("~", "$")) and not Path(value).is_absolute():
            params[key] = str(base / value)


def add_override(overrides: Dict[str, Dict[str, Any]], text: str) -> None:
    """Add 'node.param=value' to {node: params}; dotted names nest (gains.arm_elbow.p=240)."""
    node, param, value = parse_override(text)
    target = overrides.setdefault(node, {})
    *path, leaf = param.split(".")
    for key in path:
        target = target.setdefault(key, {})
    target[leaf] = value


def parse_override(text: str) -> Tuple[str, str, Any]:
    """'node.param=value' (value parsed as YAML) -> (node, param, value)."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise ProfileError(f"override {text!r} must look like node.parameter=value")
    target, raw = text.split("=", 1)
    node, param = target.split(".", 1)
    return node, param, yaml.safe_load(raw)
