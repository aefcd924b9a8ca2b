"""Launch descriptions built from a profile (for machines with `ros2 launch`).

A node hosted in another's process (`container:`) has no action of its own: its parameters go to a
params file named in the container's `--component` argument, as the runner does.

`node_actions_kwargs` is plain (no launch import) so the equivalence with the runner can be
tested where launch is not installed; `generate_launch_description` wraps it in launch_ros
actions, resolving the `params_file`, `namespace` and `use_sim_time` arguments at launch time.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

from .graph import load_profile
from .runner import RESTART_DELAY_S, STOP_GRACE_S, component_argument, write_params_file


def _as_bool(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def node_actions_kwargs(profile: str, params_file: str = "", namespace: str = "",
                        use_sim_time: Optional[str] = None, activate_router: str = "") -> List[Dict[str, Any]]:
    """Keyword arguments of one launch_ros Node/LifecycleNode per profile node."""
    loaded = load_profile(profile)
    out = []

    def parameters_of(spec) -> Dict[str, Any]:
        parameters: Dict[str, Any] = dict(spec.parameters)
        if use_sim_time not in (None, ""):
            parameters["use_sim_time"] = _as_bool(use_sim_time)
        if spec.lifecycle and activate_router != "":
            parameters["autostart"] = _as_bool(activate_router)
        return parameters

    for spec in loaded.processes:
        parameters = parameters_of(spec)
        arguments: List[str] = []
        for hosted in loaded.hosted_by(spec.name):     # it activates itself (its autostart): no launch events
            hosted.parameters = parameters_of(hosted)
            folder = Path(tempfile.mkdtemp(prefix="csr_llm_launch_"))
            arguments += ["--component", component_argument(hosted, write_params_file(hosted, folder))]
        kwargs = {"package": spec.package, "executable": spec.executable, "name": spec.name,
                  "arguments": arguments,
                  "namespace": (namespace or spec.namespace).strip("/"),
                  "parameters": [parameters] + ([params_file] if params_file else []),
                  "remappings": list(spec.remappings), "output": "screen", "lifecycle": spec.lifecycle,
                  "ends_run": spec.ends_run, "respawn": spec.restart, "respawn_delay": RESTART_DELAY_S,
                  # launch's default (5 s) SIGTERMs a node still writing its report or saving state
                  "sigterm_timeout": str(STOP_GRACE_S), "sigkill_timeout": "5.0"}
        out.append(kwargs)
    return out


def exit_reason(name: str, returncode: Optional[int], ends_run: bool, shutting_down: bool,
                respawn: bool = False) -> Optional[str]:
    """Why a node's exit ends the launch, or None when it must not emit a Shutdown.

    Once the launch is shutting down (Ctrl-C, another node's Shutdown) a second Shutdown makes
    launch_ros raise "Cannot shutdown a ROS adapter that is not running" and `ros2 launch` exit 1;
    otherwise any node that exits ends the graph (as the runner does): an `ends_run` node that
    finished cleanly is the normal end, anything else is a crash that must not go unnoticed.
    """
    if shutting_down or (respawn and returncode != 0):   # launch_ros respawns a crashed `restart` node
        return None
    if ends_run and returncode == 0:
        return f"{name} finished"
    return f"{name} exited unexpectedly with code {returncode}"


def launch_drives_lifecycle(node_kwargs: Dict[str, Any]) -> bool:
    """Whether launch must bring this node up (configure, then activate) instead of the node's own
    ``autostart``: a node that activates itself does so before launch's subscription to its
    (volatile) ``transition_event`` is matched, so an ``OnStateTransition`` handler in a launch file
    that includes ours could miss it. Clears ``autostart`` in the node's parameters when it does."""
    if not node_kwargs.get("lifecycle"):
        return False
    parameters = node_kwargs["parameters"][0]
    if not _as_bool(parameters.get("autostart", False)):
        return False
    parameters["autostart"] = False
    return True


def generate_launch_description(profile: str):
    from launch import LaunchDescription
    from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler, Shutdown
    from launch.event_handlers import OnProcessStart
    from launch.events import matches_action
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import LifecycleNode, Node
    from launch_ros.event_handlers import OnStateTransition
    from launch_ros.events.lifecycle import ChangeState
    from lifecycle_msgs.msg import Transition

    def bring_up(node) -> list:
        """configure once the process runs, activate once it reached inactive (driven by launch)."""
        def change(transition_id):
            return EmitEvent(event=ChangeState(lifecycle_node_matcher=matches_action(node),
                                               transition_id=transition_id))
        return [RegisterEventHandler(OnProcessStart(target_action=node,
                                                    on_start=[change(Transition.TRANSITION_CONFIGURE)])),
                RegisterEventHandler(OnStateTransition(target_lifecycle_node=node, start_state="configuring",
                                                       goal_state="inactive",
                                                       entities=[change(Transition.TRANSITION_ACTIVATE)]))]

    def make_nodes(context, *args, **kwargs):
        def arg(name):
            return LaunchConfiguration(name).perform(context)
        actions = []
        for node_kwargs in node_actions_kwargs(profile, arg("params_file"), arg("namespace"), arg("use_sim_time"),
                                               arg("activate_router")):
            driven = launch_drives_lifecycle(node_kwargs)
            cls = LifecycleNode if node_kwargs.pop("lifecycle") else Node
            ends_run = node_kwargs.pop("ends_run")

            def on_exit(event, exit_context, name=node_kwargs["name"], ends_run=ends_run,
                        respawn=node_kwargs["respawn"]):
                reason = exit_reason(name, event.returncode, ends_run, exit_context.is_shutdown, respawn)
                return [Shutdown(reason=reason)] if reason else []
            node_kwargs["on_exit"] = on_exit
            node = cls(**node_kwargs)
            actions.append(node)
            if driven:
                actions.extend(bring_up(node))
        return actions

    return LaunchDescription([
        DeclareLaunchArgument("params_file", default_value="", description="extra ROS 2 params file for every node"),
        DeclareLaunchArgument("namespace", default_value="", description="namespace for every node"),
        DeclareLaunchArgument("use_sim_time", default_value="", description="override the profile's use_sim_time"),
        DeclareLaunchArgument("activate_router", default_value="",
                              description="true/false: bring the router up (launch drives configure + activate)"),
        OpaqueFunction(function=make_nodes),
    ])
