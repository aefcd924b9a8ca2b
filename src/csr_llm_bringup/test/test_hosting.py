"""Manual composition: a profile's `container:` entries, the runner's --component arguments and
their parsing in the host. The hosted router's closed loop runs in test_closed_loop.py (sim profile)
and its commands are checked against a router in its own process by test_golden_replay.py (the
golden bag is recorded hosted, replayed with the replay profile's separate router)."""
from pathlib import Path

import pytest
import yaml

from csr_llm_bringup.graph import ProfileError, load_profile
from csr_llm_bringup.runner import component_argument, node_command, write_params_file
from csr_llm_bringup.sim.hosting import (ComponentSpec, listener_wait_of, namespace_of, parse_components,
                                        resolve_component)


def test_the_sim_profile_runs_the_router_in_the_simulators_process(tmp_path):
    profile = load_profile("sim")
    assert profile.node("action_router").container == "simulator"
    assert [s.name for s in profile.hosted_by("simulator")] == ["action_router"]
    assert "action_router" not in [s.name for s in profile.processes]
    separate = load_profile("sim", separate_processes=True)
    assert [s.name for s in separate.processes] == [s.name for s in separate.nodes]
    # the runner hands the router's own params file to the simulator's process, before --ros-args
    router = profile.node("action_router")
    argv = node_command(profile.node("simulator"), write_params_file(profile.node("simulator"), tmp_path),
                        components=[component_argument(router, write_params_file(router, tmp_path))])
    (component,) = parse_components(argv[2:])
    assert argv.index("--component") < argv.index("--ros-args")
    assert (component.target, component.name) == ("action_router.router_node:RouterNode", "action_router")
    (params_file,) = component.params_files
    params = yaml.safe_load(params_file.read_text())["/**"]["ros__parameters"]
    assert params["tick_source"] == "joint_states" and params["use_sim_time"] is True


def test_component_arguments_and_bad_ones_are_clear_errors():
    assert parse_components(["--component", "a.b:C/c=/x.yaml", "--ros-args", "--component", "ignored"]) == \
        [ComponentSpec("a.b", "C", "c", (Path("/x.yaml"),))]
    # launch's params_file follows the profile's (both reach the hosted node, in that order)
    assert parse_components(["--component", "a.b:C/c=/x.yaml:/user.yaml"])[0].params_files == \
        (Path("/x.yaml"), Path("/user.yaml"))
    assert listener_wait_of(["--component", "a.b:C/c=/x.yaml", "--await-transition-listener", "10"]) == 10.0
    assert listener_wait_of(["--component", "a.b:C/c=/x.yaml"]) == 0.0          # the runner: no wait
    assert listener_wait_of(["--ros-args", "--await-transition-listener", "3"]) == 0.0
    with pytest.raises(ValueError, match="needs a number"):
        listener_wait_of(["--await-transition-listener", "soon"])
    assert parse_components(["--ros-args", "-r", "__node:=simulator"]) == []
    for bad in (["--component"], ["--component", "a/b/c=/x.yaml"], ["--component", "a:C/c"],
                ["--component", "a/c=/x.yaml"], ["--component", "a:/c=/x.yaml"]):
        with pytest.raises(ValueError, match="MODULE:CLASS/NAME=PARAMS_FILE"):
            parse_components(bad)
    assert namespace_of(["--ros-args", "-r", "__node:=simulator", "-r", "__ns:=/robot7"]) == "/robot7"
    assert namespace_of(["--ros-args"]) == "/"
    with pytest.raises(ValueError, match="cannot import"):
        resolve_component("no_such_module:Node")
    with pytest.raises(ValueError, match="has no class Nope"):
        resolve_component("csr_llm_bringup.sim.hosting:Nope")
    assert resolve_component("csr_llm_bringup.sim.hosting:HostedComponent").__name__ == "HostedComponent"


def _profile(tmp_path, nodes):
    path = tmp_path / "graph.yaml"
    path.write_text(yaml.safe_dump({"nodes": nodes}))
    return path


def test_containers_must_name_another_top_level_node_in_the_same_namespace(tmp_path):
    sim = {"name": "simulator", "package": "csr_llm_bringup", "executable": "simulator_node"}
    router = {"name": "action_router", "package": "action_router", "executable": "router_node",
              "component": "action_router.router_node:RouterNode"}
    with pytest.raises(ProfileError, match="container 'nope', which is not another node"):
        load_profile(_profile(tmp_path, [sim, dict(router, container="nope")]))
    with pytest.raises(ProfileError, match="not another node"):
        load_profile(_profile(tmp_path, [sim, dict(router, container="action_router")]))
    with pytest.raises(ProfileError, match="runs in a container itself"):
        load_profile(_profile(tmp_path, [dict(sim, container="action_router"), dict(router, container="simulator")]))
    with pytest.raises(ProfileError, match="same namespace"):
        load_profile(_profile(tmp_path, [sim, dict(router, container="simulator", namespace="robot7")]))
    loaded = load_profile(_profile(tmp_path, [sim, dict(router, container="simulator")]))
    assert [s.name for s in loaded.processes] == ["simulator"]


def test_a_hosted_node_names_its_class(tmp_path):
    sim = {"name": "simulator", "package": "csr_llm_bringup", "executable": "simulator_node"}
    router = {"name": "action_router", "package": "action_router", "executable": "router_node",
              "container": "simulator"}
    with pytest.raises(ProfileError, match="component: module:Class"):
        load_profile(_profile(tmp_path, [sim, router]))
    assert load_profile(_profile(tmp_path, [sim, router]), separate_processes=True).processes
