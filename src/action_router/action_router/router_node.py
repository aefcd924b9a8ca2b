"""Router lifecycle node: wires the plain ``Router`` to topics and parameters.

Lifecycle: configure (parameters -> Router, publishers, subscriptions), activate (control timer at
``control_hz`` in its own callback group, key and status timers), deactivate (control timer
stopped, zero effort published), cleanup. ``autostart: true`` configures and activates at start
for runs without a lifecycle manager.

Topics (relative names): subscribes ``joint_states``, ``imu``, ``odom``, ``gripper/wrench``,
``motor_temperature``, ``proximity``, ``zone``, ``decision``, ``detected_objects`` (DetectedObjects,
the scene pick_object checks), and per ``vision_source``: ``camera/depth/image_raw``
(sensor_msgs/Image 32FC1 or 16UC1, REP 118; camera_features.py runs the depth CNN on it in a
child process) or ``vision_features`` (std_msgs/Float32MultiArray, features computed elsewhere); publishes
``<controller_name>/commands`` (std_msgs/Float64MultiArray, in the order of ``joints``),
``motor_command`` (MotorCommand, every tick), ``router_status`` (RouterStatus, ``status_hz``, on
each decision received and on the tick the task state changes; stamped with the tick's state under
``command_stamp: state``),
``cmd_vel`` (Twist, on change and at least at 50 Hz), ``decision_request`` and ``sound``
(std_msgs/String).
"""
from __future__ import annotations

import gc
import math
import sys
import threading
import time
from typing import Any, Dict, List, Optional

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.executors import Executor, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, State, TransitionCallbackReturn

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Twist
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, Header, String

from csr_llm_common.ros import qos
from csr_llm_common.ros.intent_args import arguments_to_dict
from csr_llm_common.ros.node import run_lifecycle_node, stamp_or_now
from csr_llm_common.realtime import pin_threads, raise_priority
from csr_llm_common.ros.params import declare_all, parameter_values
from csr_llm_common.ros.spin import take_waiting
from csr_llm_common.ros.stamps import stamp_to_sec
from csr_llm_msgs.msg import Decision, MotorCommand, RouterStatus

from .camera_features import CameraFeatures
from .outputs import Command, task_state
from .params import DEFAULTS, description_defaults, make_config, robot_description
from .router import Router
from .router_messages import motor_command_message, router_status_message
from .router_sensors import RouterSensors
from .zones import DEFAULT_ZONES, PREFIX as ZONE_PREFIX


def declare_extra_zones(node: LifecycleNode) -> None:
    """Declare zones.<zone>.threshold/.goal for zones named in ``zone_names`` beyond the defaults
    (the nav2 plugin pattern: a list of names, then parameters per name), so a zone added in a
    params file is read and checked. Without a value they stay unset and configure names them."""
    names = [str(n) for n in node.declare_parameter("zone_names", list(DEFAULT_ZONES)).value]
    declare_all(node, {f"{ZONE_PREFIX}{zone}.{key}": None for zone in names if zone not in DEFAULT_ZONES
                       for key in ("threshold", "goal")})


class RouterNode(LifecycleNode):
    def __init__(self, node_name: str = "action_router", **kwargs):
        self._tick_on_state = self._timer_fills_gaps = self._stamp_with_state = self._take_before_tick = False
        self._period, self._last_tick = 0.001, 0.0
        super().__init__(node_name, **kwargs)
        declare_all(self, DEFAULTS)
        # joints, limits and gains default to the robot description (the simulator's too)
        declare_all(self, description_defaults(robot_description(
            {"robot_description_file": self.get_parameter("robot_description_file").value})))
        declare_extra_zones(self)
        # before the spin thread and the camera's child process exist: they inherit the CPUs
        placed = pin_threads(str(self.get_parameter("cpu_affinity").value))
        if placed:
            self.get_logger().info(placed)
        self._priority_pending = int(self.get_parameter("control_priority").value)
        self.router: Optional[Router] = None
        self._lock = threading.Lock()
        self._active = False
        self._control_group = MutuallyExclusiveCallbackGroup()
        self._sensor_group = MutuallyExclusiveCallbackGroup()
        self._status_group = MutuallyExclusiveCallbackGroup()
        self._subs: List[Any] = []
        self._samples: List[Any] = []
        self._pubs: Dict[str, Any] = {}
        self._control_timer = None
        self._aux_timers: List[Any] = []
        self._cancelled_timers: List[Any] = []
        self._loop_hz = 0.0
        self._last_decision_id = -1
        self._last_command_stamp: Optional[Time] = None
        self._reported_task: Optional[tuple] = None     # the task state the last status reported
        self._key_period, self._next_key_time, self._last_state_tick = 0.02, -math.inf, -math.inf
        self._loop_window_start = 0.0
        self._loop_window_ticks = 0
        self._last_twist = (math.nan, math.nan)
        self._last_twist_time = 0.0
        self._logged_inactive = False
        self._camera: Optional[CameraFeatures] = None
        # the newest tick's command and its state time: a simulator hosting this node in its process
        # (graph `container:`) applies it directly instead of waiting for it over DDS
        self.last_command: Optional[Command] = None
        self.last_tick_time = -math.inf
        self._sensors = RouterSensors(lambda: self.router, lambda: self._camera, self._sensor_time, self._now)

    # ------------------------------------------------------------------ helpers
    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _sensor_time(self, header: Header) -> float:
        """With ``command_stamp: state`` the router runs on the sensors' own stamps (ticks, IMU
        integration, staleness), so a lockstepped sim or replay computes every tick alike whatever
        the /clock message's arrival; otherwise, and for an unstamped message, on the node clock."""
        return stamp_or_now(self, header if self._stamp_with_state else None)

    def maybe_autostart(self) -> None:
        if bool(self.get_parameter("autostart").value):
            if self.trigger_configure() == TransitionCallbackReturn.SUCCESS:
                self.trigger_activate()

    def deactivate_if_active(self) -> None:
        """On the way out: zero effort while the context is still valid."""
        if self._active:
            self.trigger_deactivate()

    @property
    def control_active(self) -> bool:
        """Whether the control loop runs (the node is active)."""
        return self._active

    @property
    def last_decision_id(self) -> int:
        """The newest decision id received (-1: none yet)."""
        return self._last_decision_id

    # ------------------------------------------------------------------ lifecycle
    def on_configure(self, state: State) -> TransitionCallbackReturn:
        try:
            cfg = make_config(parameter_values(self))
            log = self.get_logger()
            self.router = Router(cfg, auto_key=False, fault_report=lambda line: log.warning(line),
                                 info_report=lambda text: log.info(text), namespace=self.get_namespace())
            source = str(cfg["vision_source"])
            if source not in ("camera", "features", "none"):
                raise ValueError(f"vision_source must be camera, features or none, got {source!r}")
            router = self.router
            self._camera = CameraFeatures(lambda f, t: router.set_vision(f, t), str(cfg["depth_cnn_weights_file"]),
                                          inline=str(cfg["command_stamp"]) == "state") \
                if source == "camera" else None
        except (ValueError, OSError, KeyError) as exc:
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        r = self.router
        self._stamp_with_state = str(cfg["command_stamp"]) == "state"
        controller = str(cfg["controller_name"]).strip("/") or "arm_controller"
        reliable = qos.COMMANDS
        self._pubs = {
            "effort": self.create_lifecycle_publisher(Float64MultiArray, f"{controller}/commands", reliable,
                                                      event_callbacks=qos.quiet_publisher()),
            "motor": self.create_lifecycle_publisher(MotorCommand, "motor_command", reliable,
                                                     event_callbacks=qos.quiet_publisher()),
            "status": self.create_lifecycle_publisher(RouterStatus, "router_status", qos.ROUTER_STATUS,
                                                      event_callbacks=qos.quiet_publisher()),
            "cmd_vel": self.create_lifecycle_publisher(Twist, "cmd_vel", reliable,
                                                       event_callbacks=qos.quiet_publisher()),
            "request": self.create_lifecycle_publisher(String, "decision_request", reliable,
                                                       event_callbacks=qos.quiet_publisher()),
            "sound": self.create_lifecycle_publisher(String, "sound", reliable, event_callbacks=qos.quiet_publisher()),
        }
        self._subs = self._sensors.subscribe(self, self._sensor_group, source, str(cfg["camera_topic"]),
                                             self._on_decision)
        # created last: a state that is ready together with other sensors' samples or a decision
        # (one executor wait) ticks after them, as it does when they arrived first
        self._samples = [s for s in self._subs if s.msg_type is not Decision]   # taken before a lockstepped tick
        self._subs.append(self.create_subscription(JointState, "joint_states", self._on_joint_state, qos.LATEST,
                                                   callback_group=self._sensor_group))
        self._effort_msg = Float64MultiArray()
        self._motor_msg = MotorCommand(joint_names=list(r.joints))
        self.get_logger().info(
            f"configured: joints={r.joints}, control_hz={cfg['control_hz']}, zone={r.zone} "
            f"(threshold {r.threshold:.2f}), cache={'on' if r.cache_enabled else 'off'}, "
            f"{r.level1.task_layer.count} seeded task-layer keys, robot {r.robot_id}, vision {source}, "
            f"task store {cfg['task_store'] or 'off'}, commands on {controller}/commands")
        return super().on_configure(state)

    def on_activate(self, state: State) -> TransitionCallbackReturn:
        ret = super().on_activate(state)
        r = self.router
        hz = float(r.cfg["control_hz"])
        with self._lock:
            self._active = True
            self._loop_window_start = time.monotonic()
            self._loop_window_ticks = 0
        source = str(r.cfg["tick_source"])
        self._tick_on_state, self._timer_fills_gaps = source != "timer", source == "state_or_timer"
        # one tick per state, the same in every run (lockstep): a tick first takes every sample sent
        # before its state; where the timer may tick too, no run repeats another and the tick is not held
        self._take_before_tick = source == "joint_states"
        self._period = 1.0 / hz
        # what exists now lives as long as the node: out of the collector's reach (a full collection ~7 ms -> us)
        gc.collect()
        gc.freeze()
        if source != "joint_states":
            self._control_timer = self.create_timer(self._period, self._on_control_timer,
                                                    callback_group=self._control_group)
        self._key_period, self._next_key_time = 1.0 / float(r.cfg["key_hz"]), -math.inf
        self._last_state_tick = -math.inf
        self._last_command_stamp, self._reported_task = None, None
        self._aux_timers = [self.create_timer(1.0 / float(r.cfg["status_hz"]), self._on_status,
                                              callback_group=self._status_group)]
        if not self._stamp_with_state:      # on the state's time base the ticks update the key
            self._aux_timers.append(self.create_timer(self._key_period, self._on_key,
                                                      callback_group=self._sensor_group))
        how = {"joint_states": "", "state_or_timer": ": a tick on every joint_states message, the timer's where none "
                                                      "came for a period"}.get(source, "")
        self.get_logger().info(f"active: control loop at {hz:g} Hz{how}" if source != "joint_states"
                               else "active: control ticks on every joint_states message")
        self._on_status()   # said at once: a lockstepped simulator or player waits for this before its first state
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
        camera, self._camera = self._camera, None
        if camera is not None:
            camera.close()
            self.get_logger().info(f"camera: {camera.frames} depth frames, CNN {camera.cnn_ms_mean:.2f} ms per frame, "
                                   f"{camera.dropped} replaced while waiting")
        if self.router is not None:
            self.router.close()
        for s in self._subs:
            self.destroy_subscription(s)
        self._subs, self._samples = [], []
        for p in self._pubs.values():
            self.destroy_lifecycle_publisher(p)
        self._pubs = {}
        self.router = None

    # ------------------------------------------------------------------ control loop
    def _publish_zero(self) -> None:
        r = self.router
        if r is None or not self._pubs:
            return
        r.zero_output()
        self._effort_msg.data = [0.0] * r.n
        self._pubs["effort"].publish(self._effort_msg)
        m = self._motor_msg
        m.header.stamp = self.get_clock().now().to_msg()
        m.effort = [0.0] * r.n
        m.effort_limit = r.command.effort_limit.tolist()
        m.clamped = [False] * r.n
        m.execution_state = MotorCommand.EXEC_STOPPED
        m.source = MotorCommand.SOURCE_NONE
        m.sub_task = ""
        self._pubs["motor"].publish(m)
        self._pubs["cmd_vel"].publish(Twist())
        self._last_twist = (0.0, 0.0)

    def _on_control_timer(self) -> None:   # state_or_timer: only gaps (a state timeout still ramps to a stop)
        if self._timer_fills_gaps and time.monotonic() - self._last_tick < self._period:
            return
        self._on_control()

    def _on_control(self, state_time: Optional[float] = None) -> None:
        if self._priority_pending:      # in the thread that runs the loop: the executor's
            self.get_logger().info(raise_priority(self._priority_pending, "router control thread"))
            self._priority_pending = 0
        with self._lock:
            if not self._active or self.router is None:
                return
            r = self.router
            now = self._now() if state_time is None else state_time
            self._last_tick = time.monotonic()
            cmd = r.tick(now)
            self.last_command, self.last_tick_time = cmd, now
            self._effort_msg.data = cmd.effort.tolist()
            self._pubs["effort"].publish(self._effort_msg)
            if self._stamp_with_state:
                stamp = Time(sec=cmd.state_stamp[0], nanosec=cmd.state_stamp[1])
            else:
                stamp = self.get_clock().now().to_msg()
            self._last_command_stamp = stamp
            task = task_state(r)
            if task != self._reported_task:     # on the tick it changes, before the command it explains
                self._reported_task = task
                self._on_status()
            self._pubs["motor"].publish(motor_command_message(cmd, self._motor_msg, stamp))
            twist = (cmd.base_vx, cmd.base_wz)
            if twist != self._last_twist or now - self._last_twist_time >= 0.02:
                t = Twist()
                t.linear.x, t.angular.z = twist
                self._pubs["cmd_vel"].publish(t)
                self._last_twist, self._last_twist_time = twist, now
            for reason in cmd.requests:
                self._pubs["request"].publish(String(data=reason))
            for sound in cmd.sounds:
                self._pubs["sound"].publish(String(data=sound))
            if self._stamp_with_state and now >= self._next_key_time:     # after the command: off its latency
                r.update_key(now)
                # on a fixed grid of state time, not from the first tick: the same ticks update it in every run
                self._next_key_time = (math.floor(now / self._key_period + 1e-6) + 1) * self._key_period
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
        # on the state's time base, stamped with the last tick's state: a reader can tell which
        # ticks a report covers (router_status_at_stamp), whenever it arrives
        stamp = self._last_command_stamp if self._stamp_with_state and self._last_command_stamp is not None \
            else self.get_clock().now().to_msg()
        self._pubs["status"].publish(router_status_message(r.status(), stamp, self._loop_hz, self._last_decision_id))

    # ------------------------------------------------------------------ subscriptions
    def _on_joint_state(self, msg: JointState) -> None:
        r = self.router
        if r is not None:
            t = self._sensor_time(msg.header)
            r.set_joint_state(msg.name, msg.position, msg.velocity, msg.effort, t,
                              (msg.header.stamp.sec, msg.header.stamp.nanosec))
            if not self._tick_on_state:
                return
            if self._stamp_with_state:
                if t <= self._last_state_tick:   # re-sent (a sim paused at a boundary) or older: no new period
                    return
                self._last_state_tick = t
                if self._take_before_tick:
                    take_waiting(self._samples)  # every sample sent before this state, in every run
            self._on_control(t if self._stamp_with_state else None)   # each tick sees exactly this state
            if self._timer_fills_gaps and self._control_timer is not None:
                self._control_timer.reset()     # re-armed: fires only after a period without a state

    def _on_decision(self, msg: Decision) -> None:
        r = self.router
        if r is None:
            return
        if not self._active:
            if not self._logged_inactive:
                self._logged_inactive = True
                self.get_logger().warning("decision received while inactive: ignored (activate the router first)")
            return
        r.submit_decision(msg.intent, arguments_to_dict(msg.arguments), msg.trigger, self._now(),
                          stamp_to_sec(msg.header.stamp))
        # said at once: a lockstepped simulator or player holds the next state until the router has it
        self._last_decision_id = max(self._last_decision_id, int(msg.decision_id))
        self._on_status()


def _executor(node: RouterNode) -> Executor:
    # Python callbacks share the GIL, so extra executor threads add dispatch cost, not parallelism;
    # the control timer keeps its own callback group either way.
    if str(node.get_parameter("executor").value) == "multi":
        return MultiThreadedExecutor(num_threads=3)
    return SingleThreadedExecutor()


def main(args: Optional[List[str]] = None) -> int:
    """Run the router; SIGINT/SIGTERM deactivate it (zero effort) before shutting down in order."""
    return run_lifecycle_node(RouterNode, args, executor_factory=_executor)


if __name__ == "__main__":
    sys.exit(main())
