"""Cross-node rules of a profile (profile_rules.py) and its one lockstep key (plain, no ROS)."""
import pytest
import yaml

from csr_llm_bringup.graph import ProfileError, load_profile
from csr_llm_bringup.lockstep import LockstepSettings

SIM = {"name": "simulator", "package": "csr_llm_bringup", "executable": "simulator_node",
       "parameters": {"joint_state_hz": 250.0}}
ROUTER = {"name": "action_router", "package": "action_router", "executable": "router_node"}
REASONING = {"name": "reasoning", "package": "csr_llm_core", "executable": "reasoning_node"}
AGGREGATOR = {"name": "aggregator", "package": "csr_llm_core", "executable": "aggregator_node"}
LOCKED_ROUTER = dict(ROUTER, parameters={"decision_delay_s": 0.5, "tick_source": "joint_states",
                                         "command_stamp": "state", "control_hz": 250.0})


def _profile(tmp_path, nodes, **extra):
    path = tmp_path / "graph.yaml"
    path.write_text(yaml.safe_dump(dict(extra, nodes=nodes)))
    return path


def test_the_shipped_profiles_keep_every_rule():
    for name in ("sim", "replay", "robot", "robot_remote"):
        load_profile(name)
    sim, replay = load_profile("sim"), load_profile("replay")
    assert sim.lockstep == replay.lockstep == LockstepSettings(period=0.5, lag=0.5, control_timeout=2.0)
    assert sim.lockstep_driver == "simulator" and replay.lockstep_driver == ""
    assert sim.node("simulator").parameters["lockstep_decision_lag"] == 0.5
    assert sim.node("simulator").parameters["control_lockstep_timeout"] == 2.0


def test_a_replay_sees_the_nodes_as_the_sim_run_that_recorded_its_bag():
    sim, replay = load_profile("sim"), load_profile("replay")
    for node, params in {"reasoning": ("n_ctx", "swap_after_decisions", "decision_trigger"),
                         "aggregator": ("reliable_sensors", "warmup_windows", "watermark_period"),
                         "action_router": ("control_hz", "tick_source", "command_stamp", "decision_delay_s")}.items():
        for param in params:
            assert sim.node(node).parameters[param] == replay.node(node).parameters[param], (node, param)


def test_the_router_delay_must_equal_the_lockstep_lag(tmp_path):
    lockstep = {"driver": "simulator", "period": 0.5, "lag": 0.5, "control_timeout": 2.0}
    load_profile(_profile(tmp_path, [SIM, LOCKED_ROUTER], lockstep=lockstep))
    bad = dict(LOCKED_ROUTER, parameters=dict(LOCKED_ROUTER["parameters"], decision_delay_s=0.0))
    with pytest.raises(ProfileError, match=r"lockstep.lag \(0.5\) must equal action_router.decision_delay_s"):
        load_profile(_profile(tmp_path, [SIM, bad], lockstep=lockstep))
    # --set lockstep.lag=0 with the router's delay set alike
    load_profile(_profile(tmp_path, [SIM, bad], lockstep=lockstep), {"lockstep": {"lag": 0.0}})


def test_control_lockstep_needs_a_router_ticked_by_each_state(tmp_path):
    lockstep = {"period": 0.5, "lag": 0.5, "control_timeout": 2.0}
    timer = dict(LOCKED_ROUTER, parameters=dict(LOCKED_ROUTER["parameters"], tick_source="timer"))
    with pytest.raises(ProfileError, match=r"lockstep.control_timeout \(2\) needs action_router.tick_source"):
        load_profile(_profile(tmp_path, [timer], lockstep=lockstep))
    load_profile(_profile(tmp_path, [timer], lockstep=dict(lockstep, control_timeout=0.0)))


def test_the_router_ticks_at_the_joint_state_rate(tmp_path):
    sim = dict(SIM, parameters={"joint_state_hz": 500.0})
    with pytest.raises(ProfileError, match=r"action_router.control_hz \(250.0\) must equal simulator.joint_state_hz"):
        load_profile(_profile(tmp_path, [sim, LOCKED_ROUTER]))


def test_watermarks_mark_the_due_decisions(tmp_path):
    reasoning = dict(REASONING, parameters={"decision_hz": 4.0})
    with pytest.raises(ProfileError, match=r"aggregator.watermark_period \(0.5\) must be 1 / reasoning.decision_hz"):
        load_profile(_profile(tmp_path, [AGGREGATOR, reasoning]))
    load_profile(_profile(tmp_path, [dict(AGGREGATOR, parameters={"watermark_period": 0.25}), reasoning]))


def test_the_context_is_larger_than_tau_mem(tmp_path):
    reasoning = dict(REASONING, parameters={"tau_mem": 4096, "n_ctx": 4096})
    with pytest.raises(ProfileError, match=r"reasoning.n_ctx \(4096\) must be larger than reasoning.tau_mem"):
        load_profile(_profile(tmp_path, [reasoning]))
    load_profile(_profile(tmp_path, [dict(REASONING, parameters={"tau_mem": 4096, "n_ctx": 0})]))


def test_two_slots_of_one_server_pause_the_rebuild(tmp_path):
    servers = {"r1": {"url": "http://127.0.0.1:8080", "slot": 0}, "r2": {"url": "http://127.0.0.1:8080", "slot": 1}}
    with pytest.raises(ProfileError, match="rebuild_pause must be true"):
        load_profile(_profile(tmp_path, [dict(REASONING, parameters=dict(servers, rebuild_pause=False))]))
    load_profile(_profile(tmp_path, [dict(REASONING, parameters=dict(servers, rebuild_pause=True))]))


def test_the_lockstep_key_is_the_one_switch(tmp_path):
    with pytest.raises(ProfileError, match="set lockstep in the profile's `lockstep:` key"):
        load_profile(_profile(tmp_path, [dict(SIM, parameters={"lockstep_decision_period": 0.5})],
                              lockstep={"driver": "simulator", "period": 0.5}))
    with pytest.raises(ProfileError, match="lockstep.driver 'sim' is not a node"):
        load_profile(_profile(tmp_path, [SIM], lockstep={"driver": "sim", "period": 0.5}))
    with pytest.raises(ProfileError, match="unknown key"):
        load_profile(_profile(tmp_path, [SIM], lockstep={"periode": 0.5}))
    with pytest.raises(ProfileError, match="lockstep.lag must be >= 0"):
        load_profile(_profile(tmp_path, [SIM], lockstep={"lag": -1}))
    off = load_profile("sim", {"lockstep": {"period": 0}})
    assert not off.lockstep.enabled and off.node("simulator").parameters["lockstep_decision_period"] == 0.0
