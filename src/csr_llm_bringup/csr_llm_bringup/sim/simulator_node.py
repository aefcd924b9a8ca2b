"""ROS 2 node `simulator`: wires the plain MuJoCo simulator (simulator.py) to topics and parameters.

Subscribes (relative names): ``<controller_name>/commands`` (std_msgs/Float64MultiArray, efforts in
the order of the ``joints`` parameter), ``cmd_vel`` (geometry_msgs/Twist), ``decision``
(csr_llm_msgs/Decision, lockstep only).
Publishes: ``joint_states``, ``imu``, ``odom``, ``gripper/wrench``, ``motor_temperature`` (one
message per joint, header.frame_id = joint), ``proximity`` (sensor_msgs/Range), ``zone``,
``events`` (std_msgs/String), ``sim/truth`` (JSON, optional), ``scenario/expectations`` (JSON per
fired event, reliable + transient local: the decision-scoring timeline) and ``/clock``. Every
stamp is sim time. ``detected_objects`` (csr_llm_msgs/DetectedObjects, with the zone): the placed
objects in the base frame, as a perception node would report them. ``camera/depth/image_raw`` and
``camera/depth/camera_info`` (``camera_hz``): the head depth camera (depth_camera.py). The sensor
topics' publishers and preallocated messages are in sensor_publishers.py.

The physics runs in its own thread (not a timer): step, publish what is due, pace to
``real_time_factor`` (0 = as fast as possible); with ``lockstep_decision_period`` > 0 it stops at
each period boundary until a decision stamped at or after the boundary minus
``lockstep_decision_lag`` arrives (or ``lockstep_timeout`` wall seconds pass), and it announces
scenario events on `events` only mid-period (a fired event waits up to one period, then for its
decision), so a run and its replay see the same chunk stream. The node never uses its own ROS clock (it is the clock).

Hosting (``--component action_router/router_node/NAME=PARAMS_FILE``, graph ``container: simulator``):
the router node runs in this process and its callbacks run in the physics thread (hosting.py):
each joint state is ticked there and its command applied directly, without the DDS round trip.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Optional

import numpy as np
import rclpy
from rclpy.node import Node
from rclpy.parameter import Parameter

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Twist
from rosgraph_msgs.msg import Clock
from std_msgs.msg import Float64MultiArray, String

from csr_llm_msgs.msg import CsrStatus, Decision, MotorCommand, RouterStatus
from csr_llm_common.faults import FaultLog
from csr_llm_common.ros import qos
from csr_llm_common.paths import expand_path
from csr_llm_common.robot_description import load_robot_description
from csr_llm_common.ros.params import declare_dataclass
from csr_llm_common.ros.stamps import NS_PER_S, sec_to_ns, stamp_to_sec

from csr_llm_common.paths import config_dir
from .hosting import HostedRouter, run_hosting_router
from .lockstep import DecisionHandover, Lockstep, Pacer, WallProfile
from .robot_model import JOINTS
from .scenario import ExpectationFeed, ScenarioError, load_scenario
from .sensor_publishers import SensorPublishers
from .sim_config import SimulatorConfig
from .simulator import Simulator

RELIABLE = qos.COMMANDS
EVENTS_QOS = qos.SCENARIO_EVENTS
CLOCK_QOS = qos.CLOCK


def _every(hz: float, dt: float) -> int:
    """Steps between publications at `hz` (0 or less: never)."""
    return 0 if hz <= 0 else max(1, int(round(1.0 / (hz * dt))))


class SimulatorNode(Node):
    def __init__(self, hosted_router: Optional[HostedRouter] = None, **kwargs):
        super().__init__("simulator", **kwargs)
        self.hosted = hosted_router
        if self.get_parameter("use_sim_time").value:
            # this node is the clock: following its own /clock would only add a 1 kHz callback
            self.set_parameters([Parameter("use_sim_time", Parameter.Type.BOOL, False)])
            self.get_logger().info("use_sim_time ignored: the simulator publishes /clock and stamps with sim time")
        try:
            cfg = declare_dataclass(self, SimulatorConfig())
            if not 0.0 <= cfg.lockstep_decision_lag < float("inf"):
                raise ValueError(f"lockstep_decision_lag must be >= 0 sim s, got {cfg.lockstep_decision_lag!r}")
            description = load_robot_description(
                expand_path(cfg.robot_description_file) or config_dir() / "robot_description.yaml")
        except ValueError as err:
            self.get_logger().fatal(f"cannot start: {err}")
            raise SystemExit(2) from err
        scenario_name = cfg.scenario
        self.rtf = cfg.real_time_factor
        timestep = cfg.timestep
        rates = cfg.rates()
        clock_period = cfg.clock_period
        lock_period = cfg.lockstep_decision_period
        lock_timeout = cfg.lockstep_timeout
        controller = description.controller_name.strip("/") or "arm_controller"
        joints = description.joint_names
        limits = description.limits()
        base_lin, base_ang = description.base_max_linear, description.base_max_angular
        cmd_timeout = cfg.cmd_vel_timeout
        self.publish_wheels = cfg.publish_wheels
        self.max_range = cfg.proximity_max_range
        self.base_frame = cfg.base_frame
        self.odom_frame = cfg.odom_frame
        self.exit_at_end = cfg.exit_at_end
        self.control_lockstep_timeout = cfg.control_lockstep_timeout
        self.wait_for_subscribers = cfg.wait_for_subscribers
        self.start_timeout = cfg.start_timeout
        self._command_stamp = -1.0
        self._command_event = threading.Event()
        self.control_waits = self.control_timeouts = 0
        self.wall_profile = WallProfile()     # where the physics thread's wall time goes
        self._events_announced = self._event_decisions = 0

        if sorted(joints) != sorted(JOINTS):
            raise ValueError(f"the robot description must list the simulated joints {JOINTS} (any order), "
                             f"got {joints}")
        # limits are given in the order of `joints`; the simulator wants JOINTS order
        self._cmd_index = np.array([joints.index(j) for j in JOINTS])
        limits = {k: [v[joints.index(j)] for j in JOINTS] if len(v) == len(JOINTS) else v
                  for k, v in limits.items()}
        self.joints = joints
        scenario = None
        if scenario_name and scenario_name.lower() not in ("none", "''"):
            try:
                scenario = load_scenario(scenario_name)
            except ScenarioError as exc:
                raise ValueError(f"scenario: {exc}") from None
        self.sim = Simulator(limits=limits, scenario=scenario, timestep=timestep, base_max_linear=base_lin,
                             base_max_angular=base_ang, cmd_vel_timeout=cmd_timeout)
        dt = self.sim.dt
        self.faults = FaultLog(self.get_logger().warning, counted_in="the run summary (input faults)")
        self.lockstep = Lockstep(lock_period, dt, lock_timeout, lag=cfg.lockstep_decision_lag)
        self.handover = DecisionHandover(self.control_lockstep_timeout)
        self.pacer = Pacer(self.rtf)
        self._every = {k: _every(v, dt) for k, v in rates.items()}
        self._every["clock"] = max(1, int(round(clock_period / dt))) if clock_period > 0 else 1
        self._pending_effort: Optional[np.ndarray] = None
        self._timeout_logged = False
        self._scenario_errors_logged = 0
        self._scenario_done_logged = scenario is None
        self.stop_event = threading.Event()

        # ------------------------------------------------------------- decision scoring timeline
        self._expectation_feed = ExpectationFeed(scenario) if scenario is not None else None
        self.pub_expectations = self.create_publisher(String, "scenario/expectations", EVENTS_QOS,
                                                      event_callbacks=qos.quiet_publisher())

        # ------------------------------------------------------------- publishers (preallocated)
        self.stamp = Time()
        self.pub_clock = self.create_publisher(Clock, "/clock", CLOCK_QOS, event_callbacks=qos.quiet_publisher())
        self.msg_clock = Clock()
        self.msg_clock.clock = self.stamp
        self.sensors = SensorPublishers(self, self.sim, joints, self.stamp, self.base_frame, self.odom_frame,
                                        self.max_range, self.publish_wheels, cfg.camera_frame)
        self.pub_events = self.create_publisher(String, "events", EVENTS_QOS, event_callbacks=qos.quiet_publisher())
        self.pub_truth = self.create_publisher(String, "sim/truth", RELIABLE, event_callbacks=qos.quiet_publisher())
        self.msg_event = String()
        self.msg_truth = String()

        # ------------------------------------------------------------- subscriptions
        if self.hosted is None:      # hosted: the router's command is applied on its tick
            self.create_subscription(Float64MultiArray, f"{controller}/commands", self._on_effort, RELIABLE,
                                     event_callbacks=qos.quiet_subscription())
            self.create_subscription(Twist, "cmd_vel", self._on_cmd_vel, RELIABLE,
                                     event_callbacks=qos.quiet_subscription())
        self.create_subscription(Decision, "decision", self._on_decision, RELIABLE,
                                 event_callbacks=qos.quiet_subscription())
        if self.lockstep.enabled:
            self.create_subscription(CsrStatus, "csr_status", self._on_csr_status, 10,
                                     event_callbacks=qos.quiet_subscription())
        if self.control_lockstep_timeout > 0 and self.hosted is None:
            self.create_subscription(MotorCommand, "motor_command", self._on_motor_command, RELIABLE,
                                     event_callbacks=qos.quiet_subscription())
        if self.control_lockstep_timeout > 0:
            self.create_subscription(RouterStatus, "router_status",
                                     lambda m: self.handover.on_router_status(m.last_decision_id),
                                     qos.ROUTER_STATUS, event_callbacks=qos.quiet_subscription())

        self.get_logger().info(
            f"simulator: scenario={scenario.name if scenario else 'none'}, real_time_factor={self.rtf}, "
            f"dt={dt}, lockstep_decision_period={lock_period} (lag {cfg.lockstep_decision_lag:g} s), "
            f"commands on {controller}/commands"
            f"{f' (router {self.hosted.name} hosted in this process)' if self.hosted else ''}, "
            f"handle at {tuple(round(v, 3) for v in self.sim.handle_pos)}")
        self._thread = threading.Thread(target=self._run, name="sim-physics", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ callbacks
    def _on_effort(self, msg: Float64MultiArray) -> None:
        self._take_efforts(msg.data)

    def _take_efforts(self, data) -> None:
        if len(data) != len(JOINTS):
            self.faults.record("effort_length", f"effort command with {len(data)} values, expected "
                               f"{len(JOINTS)} ({', '.join(self.joints)}): ignored, previous efforts kept")
            return
        arr, fault = self.sim.check_efforts(np.asarray(data, dtype=float)[self._cmd_index])
        if fault is not None:
            self.faults.record(fault, f"effort command rejected ({fault}): ignored, previous efforts kept")
            return
        self._pending_effort = arr   # reference swap: the physics thread picks it up next step

    def _on_cmd_vel(self, msg: Twist) -> None:
        self._take_twist(msg.linear.x, msg.angular.z)

    def _take_twist(self, vx: float, wz: float) -> None:
        fault = self.sim.set_cmd_vel(vx, wz)
        if fault is not None:
            self.faults.record(fault, "cmd_vel with a non-finite value: ignored")

    def _on_motor_command(self, msg: MotorCommand) -> None:
        self._command_stamp = max(self._command_stamp, stamp_to_sec(msg.header.stamp))
        self._command_event.set()

    def _idle(self, event: threading.Event, timeout: float) -> None:
        """A wait in the physics thread: the hosted router's callbacks run meanwhile."""
        if self.hosted is not None:
            return self.hosted.spin(timeout)
        event.wait(timeout)
        event.clear()

    def _wait_for_command(self, t: float) -> None:
        """Control lockstep: once a router reported active, wait for its tick at time t."""
        if self.hosted is not None:     # its tick of the state at t, applied at once
            if self.hosted.active:
                self.control_waits += 1
                command = self.hosted.tick(t, self.control_lockstep_timeout, self.stop_event)
                if command is None:
                    self.control_timeouts += 1
                    return
                self._take_efforts(command.effort)
                self._take_twist(command.base_vx, command.base_wz)
            return
        if not self.handover.router_reports:
            return
        self.control_waits += 1
        deadline = time.monotonic() + self.control_lockstep_timeout
        while self._command_stamp < t - 1e-9 and not self.stop_event.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.control_timeouts += 1
                return
            self._command_event.wait(min(remaining, 0.005))
            self._command_event.clear()

    def _on_csr_status(self, msg: CsrStatus) -> None:
        self.handover.on_decision(msg.last_decision_id)     # the status may overtake the decision itself
        self.lockstep.on_schedule(msg.next_decision_due)

    def _on_decision(self, msg: Decision) -> None:
        self.handover.on_decision(msg.decision_id)
        self.lockstep.on_decision(stamp_to_sec(msg.header.stamp))
        if msg.trigger == Decision.TRIGGER_EVENT:
            self._event_decisions += 1
            self.lockstep.event.set()

    def _wait_event_decisions(self) -> None:
        """In lockstep, an announced event's decision arrives before the world moves on, so the
        router starts it at the same tick in every run (and in the replay, which waits alike)."""
        deadline = time.monotonic() + self.lockstep.timeout
        while self._event_decisions < self._events_announced and not self.stop_event.is_set() \
                and time.monotonic() < deadline:
            self._idle(self.lockstep.event, 0.005)

    def _wait_last_decisions(self, steps: int) -> None:
        """At the end of a lagged run, the decisions still being computed (up to the lockstep timeout)."""
        deadline = time.monotonic() + self.lockstep.timeout
        while not self.lockstep.decided_before(steps) and not self.stop_event.is_set() \
                and time.monotonic() < deadline:
            self._idle(self.lockstep.event, 0.005)

    # ------------------------------------------------------------------ physics thread
    def _set_stamp(self) -> None:
        steps = self.sim.steps
        # integer steps * dt in integer nanoseconds: the same stamp for the same step in every run
        self.stamp.sec, self.stamp.nanosec = divmod(sec_to_ns(steps * self.sim.dt), NS_PER_S)

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # keep the process up so the failure is visible in the log
            if rclpy.ok(context=self.context):
                self.get_logger().error(f"physics thread stopped: {exc!r}")
                raise

    def _wait_for_graph(self) -> None:
        if self.wait_for_subscribers <= 0:
            return
        deadline = time.monotonic() + self.start_timeout
        pub_js = self.sensors.pub_js
        while pub_js.get_subscription_count() < self.wait_for_subscribers and not self.stop_event.is_set():
            if time.monotonic() > deadline:
                self.get_logger().warning(
                    f"starting with {pub_js.get_subscription_count()} joint_states subscriber(s), "
                    f"expected {self.wait_for_subscribers} within {self.start_timeout:g} s")
                return
            time.sleep(0.05)
        time.sleep(0.5)     # let the new subscriptions' discovery settle on both sides
        if self.hosted is not None:
            self.hosted.report_to(self.handover, self.get_logger())
        elif self.control_lockstep_timeout > 0 and not self.handover.wait_for_router(
                max(0.0, deadline - time.monotonic()), self.stop_event):
            self.get_logger().warning(f"no router_status within {self.start_timeout:g} s: starting without "
                                      f"control lockstep until a router reports")

    def _loop(self) -> None:
        self._wait_for_graph()
        sim, lock, pacer, every, sensors = self.sim, self.lockstep, self.pacer, self._every, self.sensors
        e_clock, e_js = every["clock"], every["joint_state_hz"]
        e_imu, e_odom, e_wrench = every["imu_hz"], every["odom_hz"], every["wrench_hz"]
        e_temp, e_range, e_zone, e_truth = (every["temperature_hz"], every["proximity_hz"], every["zone_hz"],
                                            every["truth_hz"])
        e_camera = every["camera_hz"]
        self._set_stamp()
        self.pub_clock.publish(self.msg_clock)
        # no sensor message at t = 0: a zero header stamp reads as "unstamped" (the player then
        # places it by its bag time, the router by its clock), so a replay ticked it at a time that
        # depended on when the recorder received it; the first samples follow at their rates
        stop = self.stop_event
        last_clock_wall = last_state_wall = 0.0
        profile = self.wall_profile
        while not stop.is_set():
            if lock.blocked(sim.steps):
                mark = profile.now()
                # paused at a lockstep boundary: keep re-sending the boundary's clock (best effort)
                # and, once the pause is long, the sensor state once a second for late joiners
                # (rarely: every copy lands in the bag, and a replay's burst of them once overflowed
                # a reader's queue, so the first window's chunks differed)
                now = time.monotonic()
                if now - last_clock_wall > 0.05:
                    last_clock_wall = now
                    self.pub_clock.publish(self.msg_clock)
                    paused_since = lock.waiting_since if lock.waiting_since is not None else now
                    if now - paused_since > 1.0 and now - last_state_wall > 1.0:
                        last_state_wall = now
                        sensors.publish_state()
                self._idle(lock.event, 0.005)
                pacer.reset(sim.time)
                profile.add("decision lockstep", mark)
                continue
            if lock.timeouts and not self._timeout_logged:
                self._timeout_logged = True
                self.get_logger().warning(
                    f"lockstep: no decision stamped >= {lock.boundary_time() - lock.period_steps * sim.dt:.3f} s "
                    f"within {lock.timeout} s: continuing without it (further timeouts are counted)")
            pending = self._pending_effort
            if pending is not None:
                self._pending_effort = None
                sim.effort_command[:] = pending
            mark = profile.now()
            sim.step()
            profile.add("physics", mark)
            k = sim.steps
            self._set_stamp()
            at_boundary = lock.enabled and k >= lock.next_boundary
            js_due = e_js and k % e_js == 0
            if js_due:
                if self.control_lockstep_timeout > 0 and lock.enabled:
                    mark = profile.now()
                    # the router holds every decision before the state
                    self.handover.wait(stop, None if self.hosted is None else self.hosted.idle_for(self.handover))
                    profile.add("decision handover", mark)
                sensors.publish_joint_states()      # before the clock: a tick at t sees the state at t
            if k % e_clock == 0 or at_boundary or (js_due and self.control_lockstep_timeout > 0):
                self.pub_clock.publish(self.msg_clock)
            if js_due and self.control_lockstep_timeout > 0:
                mark = profile.now()
                self._wait_for_command(sim.time)
                profile.add("control round trip", mark)
            if e_imu and k % e_imu == 0:
                sensors.publish_imu()
            if e_odom and k % e_odom == 0:
                sensors.publish_odom()
            if e_wrench and k % e_wrench == 0:
                sensors.publish_wrench()
            if e_temp and k % e_temp == 0:
                sensors.publish_temperatures()
            if e_range and k % e_range == 0:
                sensors.publish_proximity()
            if e_zone and k % e_zone == 0:
                sensors.publish_zone()
                sensors.publish_objects()
            if e_camera and k % e_camera == 0:
                sensors.publish_depth()
            if e_truth and k % e_truth == 0:
                truth = sim.truth()
                truth["lockstep_waits"], truth["lockstep_timeouts"] = lock.waits, lock.timeouts
                truth["wall_s"] = profile.report()
                self.msg_truth.data = json.dumps(truth)
                self.pub_truth.publish(self.msg_truth)
            if sim.events and lock.announces(k):
                self._publish_events()
                if lock.enabled:
                    mark = profile.now()
                    self._wait_event_decisions()
                    pacer.reset(sim.time)
                    profile.add("event decisions", mark)
            if self._expectation_feed is not None:
                self._publish_expectations()
            if self.exit_at_end and sim.scenario is not None and sim.time >= sim.scenario.duration:
                self._publish_events()                # whatever is still held for the next announcement
                self._wait_last_decisions(k)
                self.get_logger().info(f"scenario {sim.scenario.name!r} finished at t={sim.time:.2f} s: exiting")
                os.kill(os.getpid(), signal.SIGINT)   # the main thread shuts the node down cleanly
                return
            mark = profile.now()
            pacer.pace(sim.time)
            profile.add("pacing", mark)

    def _publish_events(self) -> None:
        for t, text in self.sim.pop_events():
            self._events_announced += 1
            self.msg_event.data = text
            self.pub_events.publish(self.msg_event)
            self.get_logger().info(f"[t={t:.2f}] event: {text}")
        sc = self.sim.scenario
        if sc is not None:
            while self._scenario_errors_logged < len(sc.errors):
                self.get_logger().warning(f"scenario: {sc.errors[self._scenario_errors_logged]}")
                self._scenario_errors_logged += 1

    def _publish_expectations(self) -> None:
        for record in self._expectation_feed.poll(self.sim.time):
            self.pub_expectations.publish(String(data=json.dumps(record)))

    # ------------------------------------------------------------------ shutdown
    def destroy_node(self):
        self.stop_event.set()
        self.lockstep.event.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        if self.hosted is not None and not self._thread.is_alive():
            self.hosted.close()      # after the physics thread: it spins the router's executor
        lock = self.lockstep
        self.get_logger().info(
            f"simulator stopped at t={self.sim.time:.3f} s sim; lockstep waits={lock.waits}, "
            f"timeouts={lock.timeouts}; control lockstep waits={self.control_waits}, "
            f"timeouts={self.control_timeouts}; decision handover timeouts={self.handover.timeouts}; "
            f"input faults={self.faults.total}; {self.wall_profile.format()}")
        return super().destroy_node()


def main(args=None) -> int:
    return run_hosting_router(SimulatorNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
