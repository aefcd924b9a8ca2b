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

Parameters (router_parameters.py): ``RouterParams`` and the robot description's, read-only; the PID
gains ``gains.<joint>.*`` change while the node runs (``ros2 param set``), applied from the next tick.
"""
from __future__ import annotations

import csr_llm_common.stop_signal  # noqa: F401 - first: a Ctrl-C during the slow imports below is caught

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
from sensor_msgs.msg import JointState
from std_msgs.msg import Header

from csr_llm_common.ros import qos
from csr_llm_common.ros.intent_args import arguments_to_dict
from csr_llm_common.ros.node import run_lifecycle_node, stamp_or_now
from csr_llm_common.realtime import pin_threads, raise_priority
from csr_llm_common.ros.params import parameter_values
from csr_llm_common.ros.spin import take_waiting
from csr_llm_common.ros.stamps import stamp_to_sec
from csr_llm_msgs.msg import Decision

from .camera_features import CameraFeatures
from .outputs import Command, task_state
from .params import make_config
from .pid import Gains
from .router import Router
from .router_messages import router_status_message
from .router_parameters import RouterParameters
from .router_publishers import RouterPublishers
from .router_sensors import RouterSensors
from .tick_schedule import LoopRate, TickSchedule

VISION_SOURCES = ("camera", "features", "none")


class RouterNode(LifecycleNode):
    def __init__(self, node_name: str = "action_router", **kwargs):
        super().__init__(node_name, **kwargs)
        self._lock = threading.Lock()
        self.router: Optional[Router] = None
        self.parameters = RouterParameters(self, self._apply_gains)
        settings = self.parameters.values.node
        self._stamp_with_state = settings.command_stamp == "state"
        # before the spin thread and the camera's child process exist: they inherit the CPUs
        placed = pin_threads(settings.cpu_affinity)
        if placed:
            self.get_logger().info(placed)
        self._priority_pending = settings.control_priority
        self._active = False
        self._control_group = MutuallyExclusiveCallbackGroup()
        self._sensor_group = MutuallyExclusiveCallbackGroup()
        self._status_group = MutuallyExclusiveCallbackGroup()
        self._subs: List[Any] = []
        self._samples: List[Any] = []
        self.outputs: Optional[RouterPublishers] = None
        self._control_timer = None
        self._aux_timers: List[Any] = []
        self._cancelled_timers: List[Any] = []
        self.schedule: Optional[TickSchedule] = None     # set at activate (configure checks its rates)
        self.loop_rate = LoopRate(time.monotonic())
        self._last_decision_id = -1
        self._last_command_stamp: Optional[Time] = None
        self._reported_task: Optional[tuple] = None     # the task state the last status reported
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

    def _apply_gains(self, gains: Dict[str, Gains]) -> None:
        """A live change of gains.<joint>.*: the running PID takes it from its next tick."""
        with self._lock:
            if self.router is not None:
                self.router.execution.set_nominal_gains([gains[j] for j in self.router.joints])
        self.get_logger().info("PID gains changed")

    def maybe_autostart(self) -> None:
        if self.parameters.values.node.autostart:
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
        settings = self.parameters.values.node
        try:
            if settings.vision_source not in VISION_SOURCES:
                raise ValueError(f"vision_source must be camera, features or none, got {settings.vision_source!r}")
            cfg = make_config(parameter_values(self))
            log = self.get_logger()
            self.router = router = Router(cfg, auto_key=False, fault_report=lambda line: log.warning(line),
                                          info_report=lambda text: log.info(text), namespace=self.get_namespace())
            self._camera = CameraFeatures(lambda f, t: router.set_vision(f, t), settings.depth_cnn_weights_file,
                                          inline=self._stamp_with_state) \
                if settings.vision_source == "camera" else None
        except (ValueError, OSError, KeyError) as exc:
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        controller = str(cfg["controller_name"]).strip("/") or "arm_controller"
        self.outputs = RouterPublishers(self, controller, router.joints)
        self._subs = self._sensors.subscribe(self, self._sensor_group, settings.vision_source,
                                             settings.camera_topic, self._on_decision)
        # created last: a state that is ready together with other sensors' samples or a decision
        # (one executor wait) ticks after them, as it does when they arrived first
        self._samples = [s for s in self._subs if s.msg_type is not Decision]   # taken before a lockstepped tick
        self._subs.append(self.create_subscription(JointState, "joint_states", self._on_joint_state, qos.LATEST,
                                                   callback_group=self._sensor_group))
        r = router
        self.get_logger().info(
            f"configured: joints={r.joints}, control_hz={settings.control_hz}, zone={r.zone} "
            f"(threshold {r.threshold:.2f}), cache={'on' if r.cache_enabled else 'off'}, "
            f"{r.level1.task_layer.count} seeded task-layer keys, robot {r.robot_id}, vision {settings.vision_source}, "
            f"task store {self.parameters.values.task_layer.task_store or 'off'}, commands on {controller}/commands")
        return super().on_configure(state)

    def on_activate(self, state: State) -> TransitionCallbackReturn:
        ret = super().on_activate(state)
        settings = self.parameters.values.node
        with self._lock:
            self._active = True
            self.loop_rate.restart(time.monotonic())
        self.schedule = schedule = TickSchedule(settings.tick_source, settings.control_hz, settings.key_hz)
        # what exists now lives as long as the node: out of the collector's reach, so no full
        # collection walks it during a tick
        gc.collect()
        gc.freeze()
        if schedule.uses_timer:
            self._control_timer = self.create_timer(schedule.period, self._on_control_timer,
                                                    callback_group=self._control_group)
        self._last_command_stamp, self._reported_task = None, None
        self._aux_timers = [self.create_timer(1.0 / settings.status_hz, self._on_status,
                                              callback_group=self._status_group)]
        if not self._stamp_with_state:      # on the state's time base the ticks update the key
            self._aux_timers.append(self.create_timer(schedule.key_period, self._on_key,
                                                      callback_group=self._sensor_group))
        self.get_logger().info(f"active: {schedule.describe()}")
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
        if self.outputs is not None:
            self.outputs.destroy(self)
        self.outputs = None
        self.router = None

    # ------------------------------------------------------------------ control loop
    def _publish_zero(self) -> None:
        r, out = self.router, self.outputs
        if r is None or out is None:
            return
        r.zero_output()
        out.zero(r.command.effort_limit.tolist(), self.get_clock().now().to_msg())

    def _on_control_timer(self) -> None:   # state_or_timer: only gaps (a state timeout still ramps to a stop)
        schedule = self.schedule
        if schedule is not None and schedule.timer_due(time.monotonic()):
            self._on_control()

    def _on_control(self, state_time: Optional[float] = None) -> None:
        if self._priority_pending:      # in the thread that runs the loop: the executor's
            self.get_logger().info(raise_priority(self._priority_pending, "router control thread"))
            self._priority_pending = 0
        with self._lock:
            r, out, schedule = self.router, self.outputs, self.schedule
            if not self._active or r is None or out is None or schedule is None:
                return
            now = self._now() if state_time is None else state_time
            schedule.ticked(time.monotonic())
            cmd = r.tick(now)
            self.last_command, self.last_tick_time = cmd, now
            out.effort(cmd)
            if self._stamp_with_state:
                stamp = Time(sec=cmd.state_stamp[0], nanosec=cmd.state_stamp[1])
            else:
                stamp = self.get_clock().now().to_msg()
            self._last_command_stamp = stamp
            task = task_state(r)
            if task != self._reported_task:     # on the tick it changes, before the command it explains
                self._reported_task = task
                self._on_status()
            out.rest_of_command(cmd, stamp, now)
            if self._stamp_with_state and schedule.key_due(now):     # after the command: off its latency
                r.update_key(now)
            self.loop_rate.tick(time.monotonic())

    def _on_key(self) -> None:
        r = self.router
        if self._active and r is not None:
            r.update_key(self._now())

    def _on_status(self) -> None:
        r, out = self.router, self.outputs
        if not self._active or r is None or out is None:
            return
        # on the state's time base, stamped with the last tick's state: a reader can tell which
        # ticks a report covers (router_status_at_stamp), whenever it arrives
        stamp = self._last_command_stamp if self._stamp_with_state and self._last_command_stamp is not None \
            else self.get_clock().now().to_msg()
        out.status(router_status_message(r.status(), stamp, self.loop_rate.hz, self._last_decision_id))

    # ------------------------------------------------------------------ subscriptions
    def _on_joint_state(self, msg: JointState) -> None:
        r = self.router
        if r is None:
            return
        t = self._sensor_time(msg.header)
        r.set_joint_state(msg.name, msg.position, msg.velocity, msg.effort, t,
                          (msg.header.stamp.sec, msg.header.stamp.nanosec))
        schedule = self.schedule
        if schedule is None or not schedule.tick_on_state:
            return
        if self._stamp_with_state:
            if not schedule.new_state(t):   # re-sent (a sim paused at a boundary) or older: no new period
                return
            if schedule.take_before_tick:
                take_waiting(self._samples)  # every sample sent before this state, in every run
        self._on_control(t if self._stamp_with_state else None)   # each tick sees exactly this state
        if schedule.timer_fills_gaps and self._control_timer is not None:
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
    if node.parameters.values.node.executor == "multi":
        return MultiThreadedExecutor(num_threads=3)
    return SingleThreadedExecutor()


def main(args: Optional[List[str]] = None) -> int:
    """Run the router; SIGINT/SIGTERM deactivate it (zero effort) before shutting down in order."""
    return run_lifecycle_node(RouterNode, args, executor_factory=_executor)


if __name__ == "__main__":
    sys.exit(main())
