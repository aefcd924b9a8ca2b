"""Launch descriptions built from a profile (for machines with `ros2 launch`).

A node hosted in another's process (`container:`) has no action of its own: its parameters go to a
params file named in the container's `--component` argument, as the runner does, followed by the
launch's `params_file` (it reaches every node, hosted ones included). A hosted lifecycle node
activates itself in its container (its `autostart`) once launch listens to its transition events
(`--await-transition-listener`), and launch relays those events as `StateTransition` events, so an
including launch file's `OnStateTransition` handler sees its four transitions as for any router.

`node_actions_kwargs` is plain (no launch import) so the equivalence with the runner can be
tested where launch is not installed; `generate_launch_description` wraps it in launch_ros
actions, resolving the `params_file`, `namespace` and `use_sim_time` arguments at launch time.
"""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from csr_llm_common.stop_signal import STOP_WITH_PARENT_ENV, hold_stop_signals

from .graph import load_profile
from .runner import RESTART_DELAY_S, STOP_GRACE_S, component_argument, write_params_file

# how long a container holds a hosted lifecycle node's self-activation until launch's subscription
# to its transition events is matched (discovery on loopback takes well under a second)
TRANSITION_LISTENER_WAIT_S = 10.0
STOP_HOLD_MAX_S = 5.0      # SIGINT stays blocked in launch's thread at most this long while our nodes start
SERVICE_POLL_S = 0.2       # how often launch looks for a lifecycle node's change_state service before configuring it


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
        node_namespace = (namespace or spec.namespace).strip("/")
        arguments: List[str] = []
        hosted_lifecycle: List[str] = []
        for hosted in loaded.hosted_by(spec.name):     # it activates itself (its autostart), relayed below
            hosted.parameters = parameters_of(hosted)
            folder = Path(tempfile.mkdtemp(prefix="csr_llm_launch_"))
            component = component_argument(hosted, write_params_file(hosted, folder))
            arguments += ["--component", os.pathsep.join([component] + ([params_file] if params_file else []))]
            if hosted.lifecycle:
                hosted_lifecycle.append(f"/{node_namespace}/{hosted.name}" if node_namespace else f"/{hosted.name}")
                if _as_bool(hosted.parameters.get("autostart", False)):
                    arguments += ["--await-transition-listener", f"{TRANSITION_LISTENER_WAIT_S:g}"]
        kwargs = {"package": spec.package, "executable": spec.executable, "name": spec.name,
                  "arguments": arguments,
                  "namespace": node_namespace,
                  "parameters": [parameters] + ([params_file] if params_file else []),
                  "remappings": list(spec.remappings), "output": "screen", "lifecycle": spec.lifecycle,
                  "hosted_lifecycle": hosted_lifecycle,
                  "ends_run": spec.ends_run, "respawn": spec.restart, "respawn_delay": RESTART_DELAY_S,
                  # launch's default (5 s) SIGTERMs a node still writing its report or saving state
                  "sigterm_timeout": str(STOP_GRACE_S), "sigkill_timeout": "5.0",
                  # a node launch started while it was shutting down stops when launch exits
                  "additional_env": {STOP_WITH_PARENT_ENV: "1"}}
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


def stop_report(name: str, returncode: Optional[int], shutting_down: bool) -> Optional[str]:
    """The line that says a node did not stop by itself when launch stopped the graph (it had to be
    killed, or died of a signal other than the SIGINT/SIGTERM it was sent); None for a clean stop."""
    if not shutting_down or returncode in (0, None, -signal.SIGINT, -signal.SIGTERM):
        return None
    if returncode == -signal.SIGKILL:
        return (f"{name} was killed (SIGKILL): it did not stop within its {STOP_GRACE_S:g} s grace; "
                "what it had not saved is lost")
    return f"{name} exited with code {returncode} while the launch was stopping"


def _ros_package_installed(name: str) -> bool:
    from ament_index_python.packages import PackageNotFoundError, get_package_prefix
    try:
        get_package_prefix(name)
        return True
    except PackageNotFoundError:
        return False


def gazebo_missing(which: Callable[[str], Optional[str]] = shutil.which,
                   installed: Callable[[str], bool] = _ros_package_installed) -> Optional[str]:
    """One line saying what gazebo.launch.py needs and does not find (`gz`, ros_gz_bridge), or None."""
    missing = []
    if which("gz") is None:
        missing.append("`gz` is not on PATH (gz-sim: ros-<distro>-ros-gz-sim)")
    if not installed("ros_gz_bridge"):
        missing.append("ROS package 'ros_gz_bridge' is not installed (ros-<distro>-ros-gz-bridge)")
    if not missing:
        return None
    return ("gazebo.launch.py needs Gazebo: " + "; ".join(missing)
            + ". Without Gazebo use the MuJoCo simulator: ros2 launch csr_llm_bringup sim.launch.py")


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


_change_state_probes: Dict[str, Any] = {}


def change_state_served(context, node_name: str) -> bool:
    """Whether a client of the lifecycle node's change_state service on launch's own node is matched
    with the server (launch_ros's client, made earlier, then is too); False while launch stops."""
    from launch_ros.ros_adapters import get_ros_node
    from lifecycle_msgs.srv import ChangeState as ChangeStateService
    service = node_name.rstrip("/") + "/change_state"
    try:
        probe = _change_state_probes.get(service)
        if probe is None:
            probe = _change_state_probes[service] = get_ros_node(context).create_client(ChangeStateService, service)
        return bool(probe.service_is_ready())
    except Exception:      # launch's own node is being destroyed: shutting down
        return False


def bring_up(node) -> list:
    """configure once the process runs, activate once it reached inactive (driven by launch)."""
    from launch.actions import EmitEvent, OpaqueFunction, RegisterEventHandler, TimerAction
    from launch.event_handlers import OnProcessStart
    from launch.events import matches_action
    from launch_ros.event_handlers import OnStateTransition
    from launch_ros.events.lifecycle import ChangeState
    from lifecycle_msgs.msg import Transition

    def change(transition_id):
        def unless_stopping(context):
            # a state change sent while launch shuts down hits launch_ros's destroyed service
            # client ("cannot use Destroyable") and makes `ros2 launch` exit 1
            if context.is_shutdown:
                return []
            return [EmitEvent(event=ChangeState(lifecycle_node_matcher=matches_action(node),
                                                transition_id=transition_id))]
        return OpaqueFunction(function=unless_stopping)

    def configure_when_served(context):
        # launch_ros waits for the service in 1 s polls that raise when launch shuts down
        # meanwhile ("cannot use Destroyable", exit 1): ask only once the service answers
        if context.is_shutdown:
            return []
        if not change_state_served(context, node.node_name):
            return [TimerAction(period=SERVICE_POLL_S, actions=[OpaqueFunction(function=configure_when_served)])]
        return [change(Transition.TRANSITION_CONFIGURE)]
    return [RegisterEventHandler(OnProcessStart(target_action=node,
                                                on_start=[OpaqueFunction(function=configure_when_served)])),
            RegisterEventHandler(OnStateTransition(target_lifecycle_node=node, start_state="configuring",
                                                   goal_state="inactive",
                                                   entities=[change(Transition.TRANSITION_ACTIVATE)]))]


def relay_transitions(container, node_name: str):
    """StateTransition events from a node hosted in `container`'s process, as a LifecycleNode
    action emits them for its own process (OnStateTransition handlers without a target see them)."""
    from launch.actions import OpaqueFunction

    def subscribe(context):
        from launch_ros.events.lifecycle import StateTransition
        from launch_ros.ros_adapters import get_ros_node
        from lifecycle_msgs.msg import TransitionEvent

        def on_event(msg):
            event = StateTransition(action=container, msg=msg)
            context.asyncio_loop.call_soon_threadsafe(lambda: context.emit_event_sync(event))
        get_ros_node(context).create_subscription(TransitionEvent, f"{node_name}/transition_event", on_event, 10)
    return OpaqueFunction(function=subscribe)


def hold_stop_signals_while_starting(nodes) -> list:
    """Our node processes start with SIGINT blocked (their first import unblocks it, handled), so a
    Ctrl-C in an interpreter's own start-up is not a -2 exit; released once all have started."""
    from launch.actions import OpaqueFunction, RegisterEventHandler, TimerAction
    from launch.event_handlers import OnProcessStart
    waiting = set(id(node) for node in nodes)

    def started(node):
        def release(context):
            waiting.discard(id(node))
            if not waiting:
                hold_stop_signals(False)
            return []
        return OpaqueFunction(function=release)

    def release_all(context):
        waiting.clear()
        hold_stop_signals(False)
        return []
    hold_stop_signals(True)
    return ([RegisterEventHandler(OnProcessStart(target_action=node, on_start=[started(node)])) for node in nodes]
            + [TimerAction(period=STOP_HOLD_MAX_S, actions=[OpaqueFunction(function=release_all)])])


def generate_launch_description(profile: str):
    from launch import LaunchDescription
    from launch.actions import DeclareLaunchArgument, OpaqueFunction, Shutdown
    from launch.logging import get_logger
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import LifecycleNode, Node

    def make_nodes(context, *args, **kwargs):
        def arg(name):
            return LaunchConfiguration(name).perform(context)
        actions = []
        for node_kwargs in node_actions_kwargs(profile, arg("params_file"), arg("namespace"), arg("use_sim_time"),
                                               arg("activate_router")):
            driven = launch_drives_lifecycle(node_kwargs)
            cls = LifecycleNode if node_kwargs.pop("lifecycle") else Node
            ends_run = node_kwargs.pop("ends_run")
            hosted_lifecycle = node_kwargs.pop("hosted_lifecycle")

            def on_exit(event, exit_context, name=node_kwargs["name"], ends_run=ends_run,
                        respawn=node_kwargs["respawn"]):
                report = stop_report(name, event.returncode, exit_context.is_shutdown)
                if report:
                    get_logger("launch").error(report)
                reason = exit_reason(name, event.returncode, ends_run, exit_context.is_shutdown, respawn)
                return [Shutdown(reason=reason)] if reason else []
            node_kwargs["on_exit"] = on_exit
            node = cls(**node_kwargs)
            actions.extend(relay_transitions(node, name) for name in hosted_lifecycle)   # subscribed before it starts
            actions.append(node)
            if driven:
                actions.extend(bring_up(node))
        nodes = [action for action in actions if isinstance(action, (Node, LifecycleNode))]
        return hold_stop_signals_while_starting(nodes) + actions

    return LaunchDescription([
        DeclareLaunchArgument("params_file", default_value="", description="extra ROS 2 params file for every node"),
        DeclareLaunchArgument("namespace", default_value="", description="namespace for every node"),
        DeclareLaunchArgument("use_sim_time", default_value="", description="override the profile's use_sim_time"),
        DeclareLaunchArgument("activate_router", default_value="",
                              description="true/false: bring the router up (launch drives configure + activate)"),
        OpaqueFunction(function=make_nodes),
    ])
