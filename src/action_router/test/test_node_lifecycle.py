"""Router lifecycle node in-process: configure / activate / deactivate / cleanup, bad parameters."""
import time

from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy

from std_msgs.msg import Float64MultiArray
from csr_llm_common.ros.spin import spinning
from action_router.router_node import RouterNode
import pytest

pytestmark = pytest.mark.dds   # real nodes over Fast DDS (loopback)

OK = TransitionCallbackReturn.SUCCESS


def test_lifecycle_transitions_in_process():
    with spinning(num_threads=3) as sp:
        node = sp.create(RouterNode, "router_lc", parameter_overrides=[
            Parameter("control_hz", value=200.0), Parameter("controller_name", value="test_ctrl")])
        peer = sp.create(Node, "router_lc_peer")
        got = []
        peer.create_subscription(Float64MultiArray, "test_ctrl/commands", lambda m: got.append(list(m.data)),
                                 QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE))
        assert node.router is None
        assert node.trigger_configure() == OK and node.router is not None
        time.sleep(0.5)
        assert got == []                                  # configured but inactive: silent
        assert node.trigger_activate() == OK
        end = time.monotonic() + 10
        while len(got) < 20 and time.monotonic() < end:
            time.sleep(0.05)
        assert len(got) >= 20 and all(len(g) == 5 for g in got)
        assert node.trigger_deactivate() == OK
        time.sleep(0.3)
        n = len(got)
        assert got[-1] == [0.0] * 5
        time.sleep(0.3)
        assert len(got) == n
        assert node.trigger_cleanup() == OK and node.router is None
        assert node.trigger_configure() == OK          # and again


def test_bad_parameters_fail_configure_with_a_clear_error():
    with spinning(num_threads=2) as sp:
        node = sp.create(RouterNode, "router_bad", parameter_overrides=[
            Parameter("effort_max", value=[1.0, 2.0])])          # 5 joints, 2 limits
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert node.router is None
        node2 = sp.create(RouterNode, "router_bad_gain", parameter_overrides=[
            Parameter("gains.arm_elbow.antiwindup_strategy", value="magic")])
        assert node2.trigger_configure() == TransitionCallbackReturn.FAILURE


def test_a_zone_added_in_parameters_is_read_and_an_incomplete_one_refused():
    with spinning() as sp:
        node = sp.create(RouterNode, "router_zones", parameter_overrides=[
            Parameter("zone_names", value=["corridor", "warehouse", "door", "kitchen"]),
            Parameter("zones.kitchen.threshold", value=0.8)])   # a level-1 zone no decision drives to
        assert node.trigger_configure() == OK
        assert node.router.cfg.zones["kitchen"].threshold == 0.8 and node.router.cfg.zones["kitchen"].goal is None
        incomplete = sp.create(RouterNode, "router_zones_bad", parameter_overrides=[
            Parameter("zone_names", value=["corridor", "warehouse", "door", "attic"]),
            Parameter("zones.attic.goal", value=[1.0, 1.0])])
        assert incomplete.trigger_configure() == TransitionCallbackReturn.FAILURE


def test_state_or_timer_ticks_on_each_state_and_the_timer_only_fills_gaps():
    from sensor_msgs.msg import JointState
    with spinning() as sp:
        node = sp.create(RouterNode, "router_state_tick", parameter_overrides=[
            Parameter("tick_source", value="state_or_timer"), Parameter("control_hz", value=2.0),
            Parameter("command_stamp", value="state"),
            Parameter("vision_source", value="none")])   # a slow timer: the test calls it by hand
        assert node.trigger_configure() == OK and node.trigger_activate() == OK
        r = node.router
        state = JointState(name=list(r.joints), position=[0.1] * r.n, velocity=[0.0] * r.n)
        state.header.stamp.sec, state.header.stamp.nanosec = 12, 345
        ticks = node.loop_rate.ticks
        node._on_joint_state(state)                       # a state: a tick at once, on that state
        assert node.loop_rate.ticks == ticks + 1
        stamp = node.outputs.motor_stamp
        assert (stamp.sec, stamp.nanosec) == (12, 345)   # the command carries that state's stamp
        node._on_control_timer()                          # the timer right after: the state covered it
        assert node.loop_rate.ticks == ticks + 1
        node.schedule.ticked(time.monotonic() - 1.0)      # no state for longer than a period: the timer ticks
        node._on_control_timer()
        assert node.loop_rate.ticks == ticks + 2
        assert node.trigger_deactivate() == OK


def test_a_pid_gain_applies_live_and_a_read_only_parameter_is_refused_with_a_reason():
    from rcl_interfaces.msg import Parameter as ParameterMsg, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters
    with spinning(num_threads=2) as sp:
        node = sp.create(RouterNode, "router_live", parameter_overrides=[
            Parameter("control_hz", value=200.0), Parameter("vision_source", value="none")])
        peer = sp.create(Node, "router_live_peer")
        client = peer.create_client(SetParameters, "/router_live/set_parameters")
        assert client.wait_for_service(timeout_sec=30)

        def set_one(name, value):        # as `ros2 param set /router_live NAME VALUE` does
            kind = ParameterType.PARAMETER_DOUBLE if isinstance(value, float) else ParameterType.PARAMETER_STRING
            v = ParameterValue(type=kind, double_value=value) if isinstance(value, float) else \
                ParameterValue(type=kind, string_value=value)
            future = client.call_async(SetParameters.Request(parameters=[ParameterMsg(name=name, value=v)]))
            end = time.monotonic() + 10
            while not future.done() and time.monotonic() < end:
                time.sleep(0.01)
            return future.result().results[0]

        assert node.trigger_configure() == OK and node.trigger_activate() == OK
        r = node.router
        elbow = r.joint_index["arm_elbow"]
        assert r.level3.pid.p[elbow] != 12.0
        result = set_one("gains.arm_elbow.p", 12.0)
        assert result.successful, result.reason
        assert node.get_parameter("gains.arm_elbow.p").value == 12.0
        end = time.monotonic() + 10                       # the running PID has it from its next tick
        while r.level3.pid.p[elbow] != 12.0 and time.monotonic() < end:
            time.sleep(0.02)
        assert r.level3.pid.p[elbow] == 12.0
        assert r.execution.derated.gains[elbow].p == pytest.approx(12.0 * 0.6)   # derated set follows
        # refused with a reason, the running PID unchanged
        for name, value, why in (("gains.arm_elbow.i_clamp_min", 9.0, "i_clamp_min > i_clamp_max"),
                                 ("gains.arm_elbow.d", float("nan"), "finite"),
                                 ("gains.arm_elbow.antiwindup_strategy", "magic", "antiwindup_strategy"),
                                 ("control_hz", 500.0, "read-only"),
                                 ("blend_s", 0.3, "read-only")):
            result = set_one(name, value)
            assert not result.successful and why in result.reason, (name, result.reason)
        assert r.level3.pid.p[elbow] == 12.0 and r.level3.pid.i_min[elbow] == -5.0
        assert node.get_parameter("control_hz").value == 200.0
        # a change while unconfigured is what the next configure builds
        assert node.trigger_deactivate() == OK and node.trigger_cleanup() == OK
        assert set_one("gains.arm_elbow.p", 15.0).successful
        assert node.trigger_configure() == OK
        assert node.router.execution.nominal.gains[elbow].p == 15.0
