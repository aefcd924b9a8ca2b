"""Router config against the intent catalogue: every intent has a sub-task sequence, every argument is
bound or explicitly listed as unused (logged once at start); what a bound argument points at (zone
goals, reach targets) exists; anything else is a clear load error."""
import pytest
import yaml

from action_router.params import make_config
from csr_llm_common.paths import config_dir
from action_router.router import Router

DEFAULT = yaml.safe_load((config_dir() / "router_subtasks.yaml").read_text())


def config_with(tmp_path, edit):
    data = yaml.safe_load(yaml.safe_dump(DEFAULT))
    edit(data)
    path = tmp_path / "router_subtasks.yaml"
    path.write_text(yaml.safe_dump(data))
    return {"subtasks_file": str(path)}


def test_every_catalogue_argument_is_bound_by_default():
    cfg = make_config()
    assert cfg.unused_arguments == {}
    assert cfg.argument_bindings == {"move_to": {"zone": "base_goal", "speed": "base_speed"},
                                     "pick_object": {"object": "reach_object"},
                                     "back_off": {"distance": "base_distance"}}
    infos = []
    Router(cfg, info_report=infos.append)
    assert not [line for line in infos if "accepted but not used" in line]


def test_unused_arguments_are_logged_once_at_start(tmp_path):
    def unbind_object(d):
        d["argument_bindings"].pop("pick_object")
        d["unused_arguments"] = {"pick_object": ["object"]}
    infos = []
    Router(make_config(config_with(tmp_path, unbind_object)), info_report=infos.append)
    unused = [line for line in infos if "accepted but not used" in line]
    assert unused == ["argument pick_object.object is accepted but not used by the router"]


@pytest.mark.parametrize("intent, argument", [("pick_object", "object"), ("move_to", "zone"), ("move_to", "speed"),
                                              ("back_off", "distance")])
def test_an_argument_neither_bound_nor_listed_is_a_load_error(tmp_path, intent, argument):
    overrides = config_with(tmp_path, lambda d: d["argument_bindings"][intent].pop(argument))
    with pytest.raises(ValueError, match=rf"{intent}\.{argument} is neither bound .* nor listed under unused_"):
        make_config(overrides)


def test_a_catalogue_intent_without_a_sequence_is_a_load_error(tmp_path):
    overrides = config_with(tmp_path, lambda d: d["intents"].pop("back_off"))
    with pytest.raises(ValueError, match=r"without a sub-task sequence.*back_off"):
        make_config(overrides)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["argument_bindings"].update(move_to={"speed": "warp"}), "binds to unknown fields"),
    (lambda d: d["unused_arguments"].update(back_off=["distance"]), "both bound and listed as unused"),
    (lambda d: d["unused_arguments"].update(stop=["force"]), "does not declare"),
    (lambda d: d["unused_arguments"].update(dance=["style"]), "not a catalogue intent"),
])
def test_bindings_and_unused_lists_must_name_real_arguments(tmp_path, edit, message):
    with pytest.raises(ValueError, match=message):
        make_config(config_with(tmp_path, edit))


def test_the_catalogue_comes_from_the_intents_file():
    cfg = make_config()
    assert set(cfg.catalogue.names) <= set(cfg.intent_sequences)
    assert cfg.catalogue["back_off"].argument("distance").maximum == 1.0


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["reach_targets"].clear(), "binds to reach_object but no reach_targets exist"),
    (lambda d: d["reach_targets"]["shelf_front_right"].update(object_at=[0.7, 0.0]), r"object_at: \[x, y, z\]"),
    (lambda d: d["reach_targets"]["shelf_front_right"].update(subtasks=["reach_moon"]), "unknown or no sub-tasks"),
    (lambda d: d["argument_bindings"].update(move_to={"zone": "base_speed", "speed": "base_goal"}), "string enum"),
    (lambda d: d["argument_bindings"]["move_to"].pop("zone") and d["unused_arguments"].update(move_to=["zone"]),
     "runs zone_reached sub-tasks .* binds no argument to base_goal"),
])
def test_what_a_bound_argument_points_at_must_exist(tmp_path, edit, message):
    with pytest.raises(ValueError, match=message):
        make_config(config_with(tmp_path, edit))


def test_a_zone_move_to_can_name_without_a_goal_is_a_load_error():
    with pytest.raises(ValueError, match=r"can name zones without a goal: \['door'\]"):
        make_config({"zones": {"corridor": {"threshold": 0.85, "goal": [-2.5, 0.0]},
                               "warehouse": {"threshold": 0.72, "goal": [2.3, 0.0]},
                               "door": {"threshold": 0.80}}})


@pytest.mark.parametrize("overrides, message", [
    ({"zones.kitchen.goal": [5.0, 5.0], "zones.kitchen.threshold": 0.8},
     r"goal set for zones no decision can name: \['kitchen'\]"),
    ({"zones.kitchen.goal": [5.0, 5.0]}, r"zone 'kitchen' has no threshold"),
    ({"zones.door.goal": [1.0]}, r"zones\.door\.goal must be \[x, y\] or \[x, y, yaw\]"),
    ({"zones.door.goal": [0.0, float("nan")]}, r"zones\.door\.goal must be"),
    ({"zones.door.threshold": 1.5}, r"zones\.door\.threshold must be in \(0, 1\]"),
    ({"zones.door.speed": 0.2}, r"expected zones\.<zone>\.threshold or zones\.<zone>\.goal"),
])
def test_zone_configuration_errors_are_clear(overrides, message):
    with pytest.raises(ValueError, match=message):
        make_config(overrides)


def test_zones_are_a_nested_map_flattened_like_ros_parameters():
    nested = make_config({"zones": {"corridor": {"threshold": 0.85, "goal": [-2.5, 0.0]},
                                    "warehouse": {"threshold": 0.72, "goal": [2.3, 0.0, 0.0]},
                                    "door": {"threshold": 0.8, "goal": [0.0, 0.0, 0.0]}}})
    assert nested.zones["warehouse"].goal.x == 2.3 and nested.zones["corridor"].goal.yaw is None
    flat = make_config({"zones.warehouse.goal": [2.3, 0.0, 0.0]})      # what a params file gives the node
    assert flat.zones["warehouse"].goal == nested.zones["warehouse"].goal
    assert flat.threshold("warehouse") == 0.72 and flat.threshold("mars") is None


def test_derivative_filter_default_reaches_every_joint_and_a_joint_can_override_it():
    from action_router.params import make_config
    cfg = make_config()
    assert cfg["derivative_filter_time_constant"] > 0
    assert all(g.derivative_filter_time_constant == cfg["derivative_filter_time_constant"] for g in cfg.gains.values())
    joint = cfg.joints[0]
    cfg = make_config({"derivative_filter_time_constant": 0.0, f"gains.{joint}.derivative_filter_time_constant": 0.02})
    assert cfg.gains[joint].derivative_filter_time_constant == 0.02
    assert all(cfg.gains[j].derivative_filter_time_constant == 0.0 for j in cfg.joints[1:])


def test_an_unknown_tick_source_is_refused():
    import pytest
    from action_router.params import make_config
    with pytest.raises(ValueError, match="tick_source"):
        make_config({"tick_source": "sometimes"})
    assert make_config({"tick_source": "state_or_timer"})["tick_source"] == "state_or_timer"


def test_router_params_hold_one_default_per_flat_parameter_name():
    import dataclasses
    from action_router.params import RouterParams, default_parameters, flat_parameters

    def leaves(params):
        for f in dataclasses.fields(params):
            value = getattr(params, f.name)
            yield from leaves(value) if dataclasses.is_dataclass(value) else [f.name]
    names = list(leaves(RouterParams()))
    assert len(names) == len(set(names))               # nested groups flatten without collisions
    flat = flat_parameters(RouterParams())
    assert sorted(flat) == sorted(names)
    cfg = make_config()
    assert all(cfg[name] == value for name, value in default_parameters().items())
    assert cfg["blend_s"] == 0.15


def test_the_shipped_parameter_file_keeps_the_code_defaults_of_the_decision_watchdog_and_filters():
    shipped = yaml.safe_load((config_dir() / "action_router.yaml").read_text())["/**"]["ros__parameters"]
    cfg = make_config()
    assert cfg["decision_timeout_s"] == 5.0 and "decision_timeout_s" not in shipped
    assert "derivative_filter_time_constant" not in shipped


def test_every_joint_gets_every_control_toolbox_gain_name():
    from action_router.params import gain_parameters
    from action_router.pid import PARAM_NAMES
    cfg = make_config({"joints": ["arm_elbow", "extra"], "position_min": [-1.0, -1.0],
                       "position_max": [1.0, 1.0], "velocity_max": [1.0, 1.0], "effort_max": [1.0, 1.0]})
    gains = gain_parameters(cfg.joints, {"gains.arm_elbow.p": 7.0, "gains.other.p": 1.0}, cfg.params)
    assert sorted(gains) == sorted(f"gains.{j}.{k}" for j in ("arm_elbow", "extra") for k in PARAM_NAMES)
    assert gains["gains.arm_elbow.p"] == 7.0 and gains["gains.extra.p"] == 50.0      # description, GAIN_DEFAULTS
    assert gains["gains.extra.u_clamp_max"] == float("inf")                          # control_toolbox's
    assert gains["gains.extra.derivative_filter_time_constant"] == cfg["derivative_filter_time_constant"]


@pytest.mark.parametrize("changes, why", [
    ({"gains.arm_elbow.p": float("nan")}, "finite"),
    ({"gains.arm_elbow.i_clamp_min": 9.0}, "i_clamp_min > i_clamp_max"),
    ({"gains.arm_elbow.u_clamp_min": 1.0, "gains.arm_elbow.u_clamp_max": -1.0}, "u_clamp_min > u_clamp_max"),
    ({"gains.arm_elbow.p": "stiff"}, "must be a number"),
    ({"gains.arm_elbow.p": True}, "must be a number"),
    ({"gains.arm_elbow.antiwindup_strategy": "magic"}, "antiwindup_strategy"),
    ({"gains.nobody.p": 1.0}, "only gains"),
    ({"control_hz": 10.0}, "only gains"),
])
def test_a_live_gain_change_is_refused_with_the_reason(changes, why):
    from action_router.params import updated_gains
    cfg = make_config()
    with pytest.raises(ValueError, match=why):
        updated_gains(cfg.joints, cfg.params, changes)


def test_a_live_gain_change_gives_the_gains_of_every_joint():
    from action_router.params import updated_gains
    cfg = make_config()
    gains = updated_gains(cfg.joints, cfg.params, {"gains.arm_elbow.p": 12, "gains.arm_elbow.i_clamp_max": 2.0})
    assert gains["arm_elbow"].p == 12.0 and gains["arm_elbow"].i_clamp_max == 2.0
    assert gains["arm_elbow"].d == cfg.gains["arm_elbow"].d
    assert {j: g for j, g in gains.items() if j != "arm_elbow"} == \
        {j: g for j, g in cfg.gains.items() if j != "arm_elbow"}
