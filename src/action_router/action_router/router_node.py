"""Router lifecycle node: wires the plain ``Router`` to topics and parameters.

Lifecycle: configure (parameters -> Router, publishers, subscriptions), activate (control timer at
``control_hz`` in its own callback group, key and status timers), deactivate (control timer
stopped, zero effort published), cleanup. ``autostart: true`` configures and activates at start
for runs without a lifecycle manager.

Topics (relative names): subscribes ``joint_states``, ``imu``, ``odom``, ``gripper/wrench``,
``motor_temperature``, ``proximity``, ``zone``, ``vision_features``, ``decision``; publishes
``<controller_name>/commands`` (std_msgs/Float64MultiArray, in the order of ``joints``),
``motor_command`` (MotorCommand, every tick), ``router_status`` (RouterStatus, ``status_hz``),
``cmd_vel`` (Twist, on change and at least at 50 Hz), ``decision_request`` and ``sound``
(std_msgs/String).
"""
from __future__ import annotations

import math
import sys
import threading
import time
from typing import Any, Dict, List, Optional

import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, State, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy, HistoryPolicy, qos_profile_sensor_data
from rcl_interfaces.msg import ParameterDescriptor

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Twist, WrenchStamped
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Imu, JointState, Range, Temperature
from std_msgs.msg import Float32MultiArray, Float64MultiArray, String

from csr_llm_msgs.msg import Decision, IntentArgument, MotorCommand, RouterStatus

from .params import DEFAULTS, default_gain_params, make_config
from .router import Router

EXEC_STOPPED = MotorCommand.EXEC_STOPPED


def _yaw(q) -> float:
    return math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))


def decision_arguments(arguments) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for a in arguments:
        if a.type == IntentArgument.TYPE_FLOAT:
            out[a.name] = float(a.float_value)
        elif a.type == IntentArgument.TYPE_INT:
            out[a.name] = int(a.int_value)
        elif a.type == IntentArgument.TYPE_STRING:
            out[a.name] = str(a.string_value)
        elif a.type == IntentArgument.TYPE_BOOL:
            out[a.name] = bool(a.bool_value)
        else:
            out[a.name] = None  # unknown type: rejected by the router's validation
    return out


class RouterNode(LifecycleNode):
    def __init__(self, node_name: str = "action_router", **kwargs):
        self._tick_on_state = False
        super().__init__(node_name, **kwargs)
        dyn = ParameterDescriptor(dynamic_typing=True)
        for name, default in DEFAULTS.items():
            self.declare_parameter(name, default, dyn)
        joints = [str(j) for j in self.get_parameter("joints").value]
        for name, default in default_gain_params(joints).items():
            self.declare_parameter(name, default, dyn)
        self.router: Optional[Router] = None
        self._lock = threading.Lock()
        self._active = False
        self._control_group = MutuallyExclusiveCallbackGroup()
        self._sensor_group = MutuallyExclusiveCallbackGroup()
        self._status_group = MutuallyExclusiveCallbackGroup()
        self._subs: List[Any] = []
        self._pubs: Dict[str, Any] = {}
        self._control_timer = None
        self._aux_timers: List[Any] = []
        self._cancelled_timers: List[Any] = []
        self._tick_times: List[float] = []
        self._loop_hz = 0.0
        self._loop_window_start = 0.0
        self._loop_window_ticks = 0
        self._last_twist = (math.nan, math.nan)
        self._last_twist_time = 0.0
        self._logged_inactive = False

    # ------------------------------------------------------------------ helpers
    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _params(self) -> Dict[str, Any]:
        out = {}
        for name, p in self._parameters.items():
            if name == "use_sim_time":
                continue
            out[name] = p.value
        return out

    def maybe_autostart(self) -> None:
        if bool(self.get_parameter("autostart").value):
            if self.trigger_configure() == TransitionCallbackReturn.SUCCESS:
                self.trigger_activate()

    # ------------------------------------------------------------------ lifecycle
    def on_configure(self, state: State) -> TransitionCallbackReturn:
        try:
            cfg = make_config(self._params())
            log = self.get_logger()
            self.router = Router(cfg, auto_key=False, fault_report=lambda kind, text: log.warning(text),
                                 info_report=lambda text: log.info(text))
        except (ValueError, OSError, KeyError) as exc:
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        r = self.router
        controller = str(cfg["controller_name"]).strip("/") or "arm_controller"
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
        self._pubs = {
            "effort": self.create_lifecycle_publisher(Float64MultiArray, f"{controller}/commands", reliable),
            "motor": self.create_lifecycle_publisher(MotorCommand, "motor_command", reliable),
            "status": self.create_lifecycle_publisher(RouterStatus, "router_status", reliable),
            "cmd_vel": self.create_lifecycle_publisher(Twist, "cmd_vel", reliable),
            "request": self.create_lifecycle_publisher(String, "decision_request", reliable),
            "sound": self.create_lifecycle_publisher(String, "sound", reliable),
        }
        g = self._sensor_group
        sensor_qos = QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT)
        latest = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT, history=HistoryPolicy.KEEP_LAST)
        self._subs = [
            # latest value only: a controller must never work through a backlog of old states
            self.create_subscription(JointState, "joint_states", self._on_joint_state, latest, callback_group=g),
            self.create_subscription(Imu, "imu", self._on_imu, qos_profile_sensor_data, callback_group=g),
            self.create_subscription(Odometry, "odom", self._on_odom, reliable, callback_group=g),
            self.create_subscription(WrenchStamped, "gripper/wrench", self._on_wrench, qos_profile_sensor_data,
                                     callback_group=g),
            self.create_subscription(Temperature, "motor_temperature", self._on_temperature, reliable,
                                     callback_group=g),
            self.create_subscription(Range, "proximity", self._on_proximity, qos_profile_sensor_data,
                                     callback_group=g),
            self.create_subscription(String, "zone", self._on_zone, reliable, callback_group=g),
            self.create_subscription(Float32MultiArray, "vision_features", self._on_vision, sensor_qos,
                                     callback_group=g),
            self.create_subscription(Decision, "decision", self._on_decision, reliable, callback_group=g),
        ]
        n = r.n
        self._effort_msg = Float64MultiArray()
        self._motor_msg = MotorCommand(joint_names=list(r.joints))
        self._no_reference = [math.nan] * len(r.joints)
        self.get_logger().info(
            f"configured: joints={r.joints}, control_hz={cfg['control_hz']}, zone={r.zone} "
            f"(threshold {r.threshold:.2f}), cache={'on' if r.cache_enabled else 'off'}, "
            f"{r.task_layer.count} seeded task-layer keys, commands on {controller}/commands")
        return super().on_configure(state)

    def on_activate(self, state: State) -> TransitionCallbackReturn:
        ret = super().on_activate(state)
        r = self.router
        hz = float(r.cfg["control_hz"])
        with self._lock:
            self._active = True
            self._loop_window_start = time.monotonic()
            self._loop_window_ticks = 0
        self._tick_on_state = str(r.cfg["tick_source"]) == "joint_states"
        if not self._tick_on_state:
            self._control_timer = self.create_timer(1.0 / hz, self._on_control, callback_group=self._control_group)
        self._aux_timers = [
            self.create_timer(1.0 / float(r.cfg["key_hz"]), self._on_key, callback_group=self._sensor_group),
            self.create_timer(1.0 / float(r.cfg["status_hz"]), self._on_status, callback_group=self._status_group),
        ]
        self.get_logger().info("active: control ticks on every joint_states message" if self._tick_on_state
                               else f"active: control loop at {hz:g} Hz")
        return ret

    def _stop_timers(self, destroy: bool = False) -> None:
        """Cancel the timers (destroyed only at cleanup/shutdown: the executor may still hold them)."""
        for t in [self._control_timer] + self._aux_timers:
            if t is not None:
                t.cancel()
                self._cancelled_timers.append(t)
        self._control_timer = None
        self._aux_timers = []
        if destroy:
            for t in self._cancelled_timers:
                self.destroy_timer(t)
            self._cancelled_timers = []

    def on_deactivate(self, state: State) -> TransitionCallbackReturn:
        with self._lock:
            self._active = False
        self._stop_timers()
        with self._lock:
            self._publish_zero()
        self.get_logger().info("inactive: control loop stopped, zero effort published")
        return super().on_deactivate(state)

    def on_cleanup(self, state: State) -> TransitionCallbackReturn:
        self._teardown()
        return super().on_cleanup(state)

    def on_shutdown(self, state: State) -> TransitionCallbackReturn:
        with self._lock:
            was_active = self._active
            self._active = False
        self._stop_timers()
        if was_active:
            with self._lock:
                self._publish_zero()
        self._teardown()
        return super().on_shutdown(state)

    def _teardown(self) -> None:
        self._stop_timers(destroy=True)
        for s in self._subs:
            self.destroy_subscription(s)
        self._subs = []
        for p in self._pubs.values():
            self.destroy_lifecycle_publisher(p)
        self._pubs = {}
        self.router = None

    # ------------------------------------------------------------------ control loop
    def _publish_zero(self) -> None:
        r = self.router
        if r is None or not self._pubs:
            return
        r.effort[:] = 0.0
        self._effort_msg.data = [0.0] * r.n
        self._pubs["effort"].publish(self._effort_msg)
        m = self._motor_msg
        m.header.stamp = self.get_clock().now().to_msg()
        m.effort = [0.0] * r.n
        m.effort_limit = r.effort_limit.tolist()
        m.clamped = [False] * r.n
        m.execution_state = EXEC_STOPPED
        m.source = MotorCommand.SOURCE_NONE
        m.sub_task = ""
        self._pubs["motor"].publish(m)
        self._pubs["cmd_vel"].publish(Twist())
        self._last_twist = (0.0, 0.0)

    def _on_control(self) -> None:
        with self._lock:
            if not self._active or self.router is None:
                return
            r = self.router
            now = self._now()
            r.tick(now)
            eff = r.effort.tolist()
            self._effort_msg.data = eff
            self._pubs["effort"].publish(self._effort_msg)
            m = self._motor_msg
            if str(r.cfg["command_stamp"]) == "state":
                m.header.stamp = Time(sec=r.state_stamp[0], nanosec=r.state_stamp[1])
            else:
                m.header.stamp = self.get_clock().now().to_msg()
            m.effort = eff
            m.effort_limit = r.effort_limit.tolist()
            m.clamped = r.clamped.tolist()
            m.reference_position = r.p_ref.tolist() if r.tracking else self._no_reference
            m.execution_state = int(r.execution_state)
            m.source = int(r.source)
            m.sub_task = r.active_sub_task
            self._pubs["motor"].publish(m)
            twist = (r.cmd_vx, r.cmd_wz)
            if twist != self._last_twist or now - self._last_twist_time >= 0.02:
                t = Twist()
                t.linear.x, t.angular.z = twist
                self._pubs["cmd_vel"].publish(t)
                self._last_twist = twist
                self._last_twist_time = now
            for reason in r.requests:
                self._pubs["request"].publish(String(data=reason))
            for sound in r.sounds:
                self._pubs["sound"].publish(String(data=sound))
            self._loop_window_ticks += 1
            mono = time.monotonic()
            if mono - self._loop_window_start >= 1.0:
                self._loop_hz = self._loop_window_ticks / (mono - self._loop_window_start)
                self._loop_window_start = mono
                self._loop_window_ticks = 0

    def _on_key(self) -> None:
        r = self.router
        if self._active and r is not None:
            r.update_key(self._now())

    def _on_status(self) -> None:
        r = self.router
        if not self._active or r is None:
            return
        s = r.status()
        msg = RouterStatus()
        msg.header.stamp = self.get_clock().now().to_msg()
        for k, v in s.items():
            setattr(msg, k, v)
        msg.loop_hz = float(self._loop_hz)
        self._pubs["status"].publish(msg)

    # ------------------------------------------------------------------ subscriptions
    def _on_joint_state(self, msg: JointState) -> None:
        r = self.router
        if r is not None:
            r.set_joint_state(msg.name, msg.position, msg.velocity, msg.effort, self._now(),
                              (msg.header.stamp.sec, msg.header.stamp.nanosec))
            if self._tick_on_state:     # state-driven control: each tick sees exactly this state
                self._on_control()

    def _on_imu(self, msg: Imu) -> None:
        r = self.router
        if r is not None:
            a, w = msg.linear_acceleration, msg.angular_velocity
            r.set_imu((a.x, a.y, a.z), (w.x, w.y, w.z), self._now())

    def _on_odom(self, msg: Odometry) -> None:
        r = self.router
        if r is not None:
            p = msg.pose.pose
            try:
                yaw = _yaw(p.orientation)
            except (ValueError, OverflowError):
                yaw = math.nan
            r.set_odom(p.position.x, p.position.y, yaw, msg.twist.twist.linear.x, msg.twist.twist.angular.z,
                       self._now())

    def _on_wrench(self, msg: WrenchStamped) -> None:
        r = self.router
        if r is not None:
            f = msg.wrench.force
            r.set_wrench((f.x, f.y, f.z), self._now())

    def _on_temperature(self, msg: Temperature) -> None:
        r = self.router
        if r is not None:
            r.set_temperature(msg.header.frame_id, msg.temperature, self._now())

    def _on_proximity(self, msg: Range) -> None:
        r = self.router
        if r is not None:
            r.set_proximity(msg.range, self._now())

    def _on_zone(self, msg: String) -> None:
        r = self.router
        if r is not None:
            r.set_zone(msg.data)

    def _on_vision(self, msg: Float32MultiArray) -> None:
        r = self.router
        if r is not None:
            r.set_vision(msg.data, self._now())

    def _on_decision(self, msg: Decision) -> None:
        r = self.router
        if r is None:
            return
        if not self._active:
            if not self._logged_inactive:
                self._logged_inactive = True
                self.get_logger().warning("decision received while inactive: ignored (activate the router first)")
            return
        r.submit_decision(msg.intent, decision_arguments(msg.arguments), msg.trigger, self._now())


def main(args: Optional[List[str]] = None) -> int:
    """Run the router; SIGINT/SIGTERM deactivate it (zero effort) before shutting down in order."""
    import signal

    from rclpy.signals import SignalHandlerOptions

    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    node = RouterNode()
    # Python callbacks share the GIL, so extra executor threads add dispatch cost, not parallelism;
    # the control timer keeps its own callback group either way.
    if str(node.get_parameter("executor").value) == "multi":
        executor = MultiThreadedExecutor(num_threads=3)
    else:
        executor = SingleThreadedExecutor()
    executor.add_node(node)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

    def spin() -> None:
        try:
            executor.spin()
        except (ExternalShutdownException, Exception):  # noqa: BLE001 - torn down during shutdown
            if not stop.is_set():
                stop.set()

    thread = threading.Thread(target=spin, name="router-spin", daemon=True)
    thread.start()
    node.maybe_autostart()
    try:
        while not stop.wait(0.2):
            pass
    finally:
        try:
            if node._active:
                node.trigger_deactivate()  # zero effort while the context is still valid
        except Exception as exc:  # noqa: BLE001 - best effort on the way out
            print(f"action_router: deactivate on exit failed: {exc}", file=sys.stderr)
        executor.shutdown(timeout_sec=2.0)
        thread.join(timeout=5.0)
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
