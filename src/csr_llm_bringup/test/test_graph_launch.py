"""One description per profile: the launch files and the runner derive the same graph from it."""
import sys
import types
from pathlib import Path

import pytest
import yaml

from csr_llm_bringup.graph import ProfileError, load_profile, parse_override
from csr_llm_bringup.launch_graph import generate_launch_description
from csr_llm_bringup.runner import component_argument, node_command, resolve_entry_point, write_params_file


class _Recorded:
    """Stand-in for a launch action class: records its constructor arguments."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


class _Created(list):
    """The actions the fake launch classes created, and what launch's logger was told."""


@pytest.fixture
def fake_launch(monkeypatch, request):
    """launch/launch_ros are not installable here: stub the classes our launch files use."""
    created = _Created()

    def recorder(kind):
        return type(kind, (_Recorded,), {"__init__": lambda self, *a, **k: (created.append((kind, k)),
                                                                            _Recorded.__init__(self, *a, **k))[1]})

    class LaunchConfiguration:
        def __init__(self, name):
            self.name = name

        def perform(self, context):
            return context.launch_configurations.get(self.name, "")

    launch_log = types.SimpleNamespace(lines=[])
    launch_log.error = launch_log.lines.append
    modules = {
        "launch": types.SimpleNamespace(LaunchDescription=lambda actions: list(actions)),
        "launch.logging": types.SimpleNamespace(get_logger=lambda name: launch_log),
        "launch.actions": types.SimpleNamespace(DeclareLaunchArgument=recorder("DeclareLaunchArgument"),
                                                OpaqueFunction=recorder("OpaqueFunction"),
                                                Shutdown=recorder("Shutdown"), EmitEvent=recorder("EmitEvent"),
                                                RegisterEventHandler=recorder("RegisterEventHandler"),
                                                TimerAction=recorder("TimerAction"),
                                                ExecuteProcess=recorder("ExecuteProcess"),
                                                IncludeLaunchDescription=recorder("IncludeLaunchDescription")),
        "launch.launch_description_sources": types.SimpleNamespace(
            PythonLaunchDescriptionSource=recorder("PythonLaunchDescriptionSource")),
        "launch.event_handlers": types.SimpleNamespace(OnProcessStart=recorder("OnProcessStart")),
        "launch.events": types.SimpleNamespace(matches_action=lambda action: ("matches", action)),
        "launch.substitutions": types.SimpleNamespace(LaunchConfiguration=LaunchConfiguration),
        "launch_ros": types.SimpleNamespace(),
        "launch_ros.actions": types.SimpleNamespace(Node=recorder("Node"), LifecycleNode=recorder("LifecycleNode")),
        "launch_ros.event_handlers": types.SimpleNamespace(OnStateTransition=recorder("OnStateTransition")),
        "launch_ros.events": types.SimpleNamespace(),
        "launch_ros.events.lifecycle": types.SimpleNamespace(ChangeState=recorder("ChangeState")),
    }
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    created.launch_log = launch_log.lines
    # the launch file blocks SIGINT while its nodes start and releases it on their start events,
    # which never come here: released when the test ends
    from csr_llm_common.stop_signal import hold_stop_signals
    request.addfinalizer(lambda: hold_stop_signals(False))
    return created



def is_node(action) -> bool:
    return type(action).__name__ in ("Node", "LifecycleNode")


def launch_nodes(fake_launch, profile, **configurations):
    description = generate_launch_description(profile)
    declared = {a.kwargs.get("name") or a.args[0] for a in description if type(a).__name__ == "DeclareLaunchArgument"}
    assert {"params_file", "namespace", "use_sim_time"} <= declared
    (opaque,) = [a for a in description if type(a).__name__ == "OpaqueFunction"]
    context = types.SimpleNamespace(launch_configurations=configurations)
    return opaque.kwargs["function"](context)


def hosted_parameters(arguments):
    """{PACKAGE/EXECUTABLE/NAME: its parameters} from the --component arguments before --ros-args."""
    arguments = list(arguments)[:list(arguments).index("--ros-args")] if "--ros-args" in arguments else arguments
    out = {}
    for flag, value in zip(arguments, arguments[1:]):
        if flag == "--component":
            target, _, path = value.partition("=")
            out[target] = yaml.safe_load(open(path))["/**"]["ros__parameters"]
    return out


def parse_runner_command(argv):
    ros_args = argv[argv.index("--ros-args") + 1:]
    remaps, params_file = [], None
    for flag, value in zip(ros_args[::2], ros_args[1::2]):
        if flag == "-r":
            remaps.append(tuple(value.split(":=", 1)))
        elif flag == "--params-file":
            params_file = value
    return remaps, params_file


@pytest.mark.parametrize("profile", ["sim", "robot", "replay", "robot_remote"])
def test_launch_and_runner_derive_the_same_nodes_parameters_and_remaps(fake_launch, tmp_path, profile):
    actions = [a for a in launch_nodes(fake_launch, profile) if is_node(a)]
    loaded = load_profile(profile)
    assert len(actions) == len(loaded.processes)
    for action, spec in zip(actions, loaded.processes):
        kwargs = action.kwargs
        assert type(action).__name__ == ("LifecycleNode" if spec.lifecycle else "Node")
        assert callable(kwargs["on_exit"])                 # every node's exit is handled (see below)
        components = [component_argument(h, write_params_file(h, tmp_path)) for h in loaded.hosted_by(spec.name)]
        argv = node_command(spec, write_params_file(spec, tmp_path), components=components)
        # the nodes hosted in its process get the same parameters (a hosted router activates itself)
        assert hosted_parameters(kwargs["arguments"]) == hosted_parameters(argv)
        remaps, params_file = parse_runner_command(argv)
        runner_params = yaml.safe_load(open(params_file))["/**"]["ros__parameters"]
        if spec.lifecycle and runner_params.get("autostart"):
            runner_params["autostart"] = False             # under launch, launch brings it up (below)
        assert (kwargs["package"], kwargs["executable"]) == (spec.package, spec.executable)
        assert kwargs["respawn"] == spec.restart                      # `restart` nodes respawn under launch
        assert ("__node", kwargs["name"]) in remaps
        node_remaps = [r for r in remaps if not r[0].startswith("__")]
        assert node_remaps == list(kwargs["remappings"])
        assert kwargs["parameters"] == [runner_params]
        assert runner_params["use_sim_time"] == loaded.use_sim_time
        module, func = resolve_entry_point(spec.package, spec.executable)
        assert module.startswith(spec.package)


class StrictLaunchContext:
    """Like launch_ros: a Shutdown emitted after the launch is already shutting down is an error."""

    def __init__(self):
        self.is_shutdown = False

    def emit(self, actions):
        for action in actions:
            assert type(action).__name__ == "Shutdown"
            if self.is_shutdown:
                raise RuntimeError("Cannot shutdown a ROS adapter that is not running")
            self.is_shutdown = True
        return [a.kwargs["reason"] for a in actions]


def test_node_exits_end_the_launch_once_and_never_during_shutdown(fake_launch):
    actions = {a.kwargs["name"]: a for a in launch_nodes(fake_launch, "sim") if "name" in a.kwargs}
    exited = types.SimpleNamespace

    # Ctrl-C: launch is shutting down, the simulator (ends_run) exits 0 and the aggregator -2: no second Shutdown
    context = StrictLaunchContext()
    context.is_shutdown = True
    for name, code in (("simulator", 0), ("aggregator", -2), ("reasoning", 0)):
        assert context.emit(actions[name].kwargs["on_exit"](exited(returncode=code), context)) == []

    # the scenario ends: the simulator's clean exit ends the run, once; the others' exits then add nothing
    context = StrictLaunchContext()
    assert context.emit(actions["simulator"].kwargs["on_exit"](exited(returncode=0), context)) == \
        ["simulator finished"]
    assert context.emit(actions["recorder"].kwargs["on_exit"](exited(returncode=0), context)) == []

    # a crash anywhere ends the graph with a reason instead of going unnoticed
    context = StrictLaunchContext()
    assert context.emit(actions["reasoning"].kwargs["on_exit"](exited(returncode=1), context)) == \
        ["reasoning exited unexpectedly with code 1"]


def test_launch_arguments_namespace_params_file_and_sim_time(fake_launch):
    actions = launch_nodes(fake_launch, "robot", namespace="robot7", params_file="/tmp/extra.yaml",
                           use_sim_time="true", activate_router="true")
    for action in (a for a in actions if is_node(a)):
        assert action.kwargs["namespace"] == "robot7"
        assert action.kwargs["parameters"][-1] == "/tmp/extra.yaml"
        assert action.kwargs["parameters"][0]["use_sim_time"] is True
    (router,) = [a for a in actions if type(a).__name__ == "LifecycleNode"]
    assert router.kwargs["parameters"][0]["autostart"] is False     # launch drives it (see below)
    assert any(type(a).__name__ == "RegisterEventHandler" and type(a.args[0]).__name__ == "OnStateTransition"
               for a in actions)
    off = launch_nodes(fake_launch, "robot", activate_router="false")
    assert not any(type(a).__name__ == "RegisterEventHandler" and type(a.args[0]).__name__ == "OnStateTransition"
                   for a in off)


class VolatileLifecycle:
    """Like a lifecycle node under launch_ros: transition events are volatile, so one published
    before launch's subscription is matched is lost; a transition happens on a change_state request
    (ChangeState event) or, with autostart, by itself at start, i.e. before that subscription."""

    def __init__(self, autostart):
        self.autostart, self.state, self.delivered = autostart, "unconfigured", []

    def transition(self, transition_id, subscribed):
        from lifecycle_msgs.msg import Transition
        steps = {Transition.TRANSITION_CONFIGURE: ("unconfigured", "configuring", "inactive"),
                 Transition.TRANSITION_ACTIVATE: ("inactive", "activating", "active")}
        start, via, goal = steps[transition_id]
        assert self.state == start, f"transition {transition_id} requested in state {self.state}"
        self.state = goal
        if subscribed:
            self.delivered.append((via, goal))


def test_launch_brings_the_router_up_so_that_no_transition_event_is_missed(fake_launch, monkeypatch):
    from lifecycle_msgs.msg import Transition
    from csr_llm_bringup import launch_graph
    asked = []        # the router's change_state service answers from the second look on
    monkeypatch.setattr(launch_graph, "change_state_served", lambda context, name: asked.append(name) or len(asked) > 1)
    actions = launch_nodes(fake_launch, "robot", activate_router="true")
    (router,) = [a for a in actions if type(a).__name__ == "LifecycleNode"]
    router.node_name = "/" + router.kwargs["name"]      # launch_ros's, once the action ran
    handlers = [a.args[0] if a.args else a.kwargs["event_handler"] for a in actions
                if type(a).__name__ == "RegisterEventHandler"]
    node = VolatileLifecycle(router.kwargs["parameters"][0]["autostart"])
    if node.autostart:   # would transition before launch listens: the include's handler never fires
        node.transition(Transition.TRANSITION_CONFIGURE, subscribed=False)
    # the process starts (launch has subscribed by then): run the handlers as launch would
    pending = [e for h in handlers if type(h).__name__ == "OnProcessStart" and h.kwargs["target_action"] is router
               for e in h.kwargs["on_start"]]
    while pending:
        step = pending.pop(0).kwargs["function"]      # nothing is sent while launch is shutting down
        assert step(types.SimpleNamespace(is_shutdown=True)) == []
        out = step(types.SimpleNamespace(is_shutdown=False))
        if not out:
            continue                                  # the start's SIGINT hold, released
        (action,) = out
        if type(action).__name__ == "TimerAction":    # the service does not answer yet: look again
            pending += action.kwargs["actions"]
            continue
        if type(action).__name__ == "OpaqueFunction":
            pending.append(action)
            continue
        change = action.kwargs["event"].kwargs
        assert change["lifecycle_node_matcher"] == ("matches", router)
        node.transition(change["transition_id"], subscribed=True)
        via, goal = node.delivered[-1]
        pending += [e for h in handlers if type(h).__name__ == "OnStateTransition"
                    and h.kwargs["target_lifecycle_node"] is router
                    and (h.kwargs["start_state"], h.kwargs["goal_state"]) == (via, goal) for e in h.kwargs["entities"]]
    assert node.state == "active" and node.delivered == [("configuring", "inactive"), ("activating", "active")]
    assert asked == ["/action_router", "/action_router"]     # configured only once its service answered


def test_profile_parameters_merge_files_then_inline_then_overrides():
    profile = load_profile("sim", {"reasoning": {"tau_mem": 1234}})
    reasoning = profile.node("reasoning")
    assert reasoning.parameters["tau_mem"] == 1234                   # override beats inline 2048
    assert reasoning.parameters["rebuild_batch"] == 32               # from config/reasoning.yaml
    assert reasoning.parameters["append_threads"] == 2               # inline in the profile
    assert reasoning.parameters["rebuild_pause"] is False            # from config/reasoning.yaml
    # *_file parameters name files next to the profile, resolved to absolute paths
    assert reasoning.parameters["intents_file"] == str(profile.path.parent / "intents.yaml")
    assert "evict_ratio" not in reasoning.parameters                 # the code default applies
    router = profile.node("action_router")
    assert router.lifecycle and router.parameters["autostart"] is True
    # joints, limits and gains come from the robot description the simulator reads too
    assert router.parameters["robot_description_file"] == str(profile.path.parent / "robot_description.yaml")
    assert profile.node("simulator").parameters["robot_description_file"] == \
        router.parameters["robot_description_file"]
    # an override's relative *_file is a path typed on a command line: from the current directory
    mine = load_profile("sim", {"reasoning": {"prompt_file": "build/my_prompt.yaml"}}).node("reasoning")
    assert mine.parameters["prompt_file"] == str(Path.cwd() / "build" / "my_prompt.yaml")
    assert mine.parameters["intents_file"] == reasoning.parameters["intents_file"]
    overridden = load_profile("sim", {"action_router": {"gains": {"arm_elbow": {"p": 99.0}}}})
    assert overridden.node("action_router").parameters["gains"]["arm_elbow"]["p"] == 99.0   # nested gains kept


def test_bad_profiles_and_overrides_are_clear_errors(tmp_path):
    with pytest.raises(ProfileError, match="no profile 'nope'"):
        load_profile("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes:\n  - {name: x}\n")
    with pytest.raises(ProfileError, match="needs name, package, executable"):
        load_profile(bad)
    with pytest.raises(ProfileError, match="node.parameter=value"):
        parse_override("tau_mem=5")
    assert parse_override("reasoning.tau_mem=5") == ("reasoning", "tau_mem", 5)


def test_params_file_reaches_every_node_hosted_ones_included(fake_launch, tmp_path):
    """sim: the router hosted in the simulator's process kept the profile's state_timeout_s although
    params_file:= says "every node": it follows the profile's file in the --component argument."""
    user = tmp_path / "mine.yaml"
    user.write_text(yaml.safe_dump({"/**": {"ros__parameters": {"state_timeout_s": 0.9}}}))
    actions = launch_nodes(fake_launch, "sim", params_file=str(user))
    (simulator,) = [a for a in actions if is_node(a) and a.kwargs["name"] == "simulator"]
    arguments = simulator.kwargs["arguments"]
    from csr_llm_bringup.sim.hosting import parse_components
    (component,) = parse_components(arguments)
    assert component.params_files[-1] == user and len(component.params_files) == 2


def test_a_hosted_lifecycle_node_reports_its_transitions_to_launch(fake_launch):
    """sim: the router lives in the simulator's process, so no LifecycleNode action sees its
    transitions: launch subscribes to them (before the container starts) and the container holds
    the router's self-activation until that subscription is matched (they are volatile)."""
    from csr_llm_bringup.sim.hosting import listener_wait_of
    actions = launch_nodes(fake_launch, "sim", activate_router="true")
    names = [type(a).__name__ for a in actions]
    simulator_at = [i for i, a in enumerate(actions) if is_node(a) and a.kwargs["name"] == "simulator"][0]
    assert "OpaqueFunction" in names[:simulator_at]                     # the relay, before its container
    assert listener_wait_of(actions[simulator_at].kwargs["arguments"]) > 0
    assert not any(type(a).__name__ == "LifecycleNode" for a in actions)
    # without it the router would activate unseen: the runner's command has no wait
    profile = load_profile("sim")
    router = profile.node("action_router")
    assert listener_wait_of(node_command(profile.node("simulator"), Path("/p.yaml"),
                                         components=[component_argument(router, Path("/r.yaml"))])) == 0.0


def test_a_node_launch_had_to_kill_is_reported(fake_launch):
    """launch SIGKILLs a node still running STOP_GRACE_S + 5 s after its SIGINT (a reasoning node
    rebuilding its prefix did): the exit code was -9 and `ros2 launch` said nothing more."""
    actions = {a.kwargs["name"]: a for a in launch_nodes(fake_launch, "robot") if is_node(a)}
    context = StrictLaunchContext()
    context.is_shutdown = True
    on_exit = actions["reasoning"].kwargs["on_exit"]
    assert context.emit(on_exit(types.SimpleNamespace(returncode=0), context)) == []
    assert fake_launch.launch_log == []
    assert context.emit(on_exit(types.SimpleNamespace(returncode=-9), context)) == []
    (line,) = fake_launch.launch_log
    assert line.startswith("reasoning was killed (SIGKILL)")


def _gazebo_launch_file(fake_launch):
    import importlib.util
    path = Path(__file__).resolve().parents[1] / "launch" / "gazebo.launch.py"
    spec = importlib.util.spec_from_file_location("gazebo_launch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gazebo_without_gazebo_stops_with_one_line(fake_launch, monkeypatch):
    """Without gz-sim it ended in a FileNotFoundError traceback, then "package 'ros_gz_bridge' not found"."""
    from csr_llm_bringup.launch_graph import gazebo_missing
    line = gazebo_missing(which=lambda name: None, installed=lambda name: False)
    assert "\n" not in line and "`gz` is not on PATH" in line and "'ros_gz_bridge' is not installed" in line
    assert gazebo_missing(which=lambda name: "/usr/bin/gz", installed=lambda name: True) is None
    module = _gazebo_launch_file(fake_launch)
    monkeypatch.setattr(module, "gazebo_missing", lambda: "gazebo.launch.py needs Gazebo: ...")
    (opaque,) = [a for a in module.generate_launch_description() if type(a).__name__ == "OpaqueFunction"]
    with pytest.raises(RuntimeError, match="needs Gazebo"):
        opaque.kwargs["function"](types.SimpleNamespace(launch_configurations={}))


def test_gazebo_honours_its_use_sim_time_and_activate_router_arguments(fake_launch, monkeypatch):
    module = _gazebo_launch_file(fake_launch)
    monkeypatch.setattr(module, "gazebo_missing", lambda: None)
    monkeypatch.setattr(module, "get_package_share_directory", lambda package: "/opt/share/" + package)
    description = module.generate_launch_description()
    declared = {a.args[0] for a in description if type(a).__name__ == "DeclareLaunchArgument"}
    assert {"world", "params_file", "namespace", "use_sim_time", "activate_router"} <= declared
    (opaque,) = [a for a in description if type(a).__name__ == "OpaqueFunction"]
    context = types.SimpleNamespace(launch_configurations={"use_sim_time": "false", "activate_router": "false"})
    actions = opaque.kwargs["function"](context)
    (bridge,) = [a for a in actions if type(a).__name__ == "Node"]
    assert bridge.kwargs["parameters"][0]["use_sim_time"] is False
    (include,) = [a for a in actions if type(a).__name__ == "IncludeLaunchDescription"]
    passed = {name: value.perform(context) for name, value in include.kwargs["launch_arguments"]}
    assert passed["use_sim_time"] == "false" and passed["activate_router"] == "false"
