"""ROS 2 node `simulator`: wires the plain MuJoCo simulator (simulator.py) to topics and parameters.

Subscribes (relative names): ``<controller_name>/commands`` (std_msgs/Float64MultiArray, efforts in
the order of the ``joints`` parameter), ``cmd_vel`` (geometry_msgs/Twist), ``decision``
(csr_llm_msgs/Decision, lockstep only).
Publishes: ``joint_states``, ``imu``, ``odom``, ``gripper/wrench``, ``motor_temperature`` (one
message per joint, header.frame_id = joint), ``proximity`` (sensor_msgs/Range), ``zone``,
``events`` (std_msgs/String), ``sim/truth`` (JSON, optional), ``scenario/expectations`` (JSON per
fired event, reliable + transient local: the decision-scoring timeline) and ``/clock``. Every
stamp is sim time. ``detected_objects`` (csr_llm_msgs/DetectedObjects, with the zone): the placed
objects in the base frame, as a perception node would report them.

The physics runs in its own thread (not a timer): step, publish what is due, pace to
``real_time_factor`` (0 = as fast as possible); with ``lockstep_decision_period`` > 0 it stops at
each period boundary until a decision stamped at or after the boundary arrives (or
``lockstep_timeout`` wall seconds pass). The node never uses its own ROS clock (it is the clock).
"""
from __future__ import annotations

import array
import json
import os
import signal
import math
import threading
import time
from typing import List, Optional

import numpy as np
import rclpy
from rclpy.node import Node
from rclpy.parameter import Parameter

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Pose, Twist, WrenchStamped
from nav_msgs.msg import Odometry
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Imu, JointState, Range, Temperature
from std_msgs.msg import Float64MultiArray, String

from csr_llm_msgs.msg import Decision, DetectedObjects, MotorCommand
from csr_llm_core.faults import FaultLog
from csr_llm_core.ros import qos
from csr_llm_core.paths import expand_path
from csr_llm_core.robot_description import load_robot_description
from csr_llm_core.ros.node import run_node
from csr_llm_core.ros.params import declare_dataclass
from csr_llm_core.ros.stamps import NS_PER_S, sec_to_ns, stamp_to_sec

from ..paths import config_dir
from .lockstep import Lockstep, Pacer
from .robot_model import JOINTS
from .scenario import ExpectationFeed, ScenarioError, load_scenario
from .sim_config import SimulatorConfig
from .simulator import Simulator

RELIABLE = qos.COMMANDS
EVENTS_QOS = qos.SCENARIO_EVENTS
CLOCK_QOS = qos.CLOCK


def _every(hz: float, dt: float) -> int:
    """Steps between publications at `hz` (0 or less: never)."""
    return 0 if hz <= 0 else max(1, int(round(1.0 / (hz * dt))))


class SimulatorNode(Node):
    def __init__(self, **kwargs):
        super().__init__("simulator", **kwargs)
        if self.get_parameter("use_sim_time").value:
            # this node is the clock: following its own /clock would only add a 1 kHz callback
            self.set_parameters([Parameter("use_sim_time", Parameter.Type.BOOL, False)])
            self.get_logger().info("use_sim_time ignored: the simulator publishes /clock and stamps with sim time")
        try:
            cfg = declare_dataclass(self, SimulatorConfig())
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
        self.lockstep = Lockstep(lock_period, dt, lock_timeout)
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
        self.pub_expectations = self.create_publisher(String, "scenario/expectations", EVENTS_QOS)

        # ------------------------------------------------------------- publishers (preallocated)
        self.stamp = Time()
        self.pub_clock = self.create_publisher(Clock, "/clock", CLOCK_QOS)
        self.pub_js = self.create_publisher(JointState, "joint_states", RELIABLE)
        self.pub_imu = self.create_publisher(Imu, "imu", RELIABLE)
        self.pub_odom = self.create_publisher(Odometry, "odom", RELIABLE)
        self.pub_wrench = self.create_publisher(WrenchStamped, "gripper/wrench", RELIABLE)
        self.pub_temp = self.create_publisher(Temperature, "motor_temperature", RELIABLE)
        self.pub_range = self.create_publisher(Range, "proximity", RELIABLE)
        self.pub_zone = self.create_publisher(String, "zone", RELIABLE)
        self.pub_events = self.create_publisher(String, "events", EVENTS_QOS)
        self.pub_truth = self.create_publisher(String, "sim/truth", RELIABLE)
        self.pub_objects = self.create_publisher(DetectedObjects, "detected_objects", RELIABLE)

        self.msg_clock = Clock()
        self.msg_clock.clock = self.stamp
        names = list(joints) + (list(self.sim.wheel_states()[0]) if self.publish_wheels else [])
        n = len(names)
        self.msg_js = JointState()
        self.msg_js.header.stamp = self.stamp
        self.msg_js.name = names
        self.msg_js.position, self.msg_js.velocity, self.msg_js.effort = (array.array("d", [0.0] * n) for _ in range(3))
        # numpy views on the message's own buffers (the setter copies; the getter returns the buffer)
        self._js_views = [np.frombuffer(a, dtype=np.float64)
                          for a in (self.msg_js.position, self.msg_js.velocity, self.msg_js.effort)]
        self._order = np.array([JOINTS.index(j) for j in joints])   # JOINTS -> published order
        self.msg_imu = Imu()
        self.msg_imu.header.stamp = self.stamp
        self.msg_imu.header.frame_id = self.base_frame
        self.msg_odom = Odometry()
        self.msg_odom.header.stamp = self.stamp
        self.msg_odom.header.frame_id = self.odom_frame
        self.msg_odom.child_frame_id = self.base_frame
        self.msg_wrench = WrenchStamped()
        self.msg_wrench.header.stamp = self.stamp
        self.msg_wrench.header.frame_id = "gripper"
        self.msg_temps: List[Temperature] = []
        for j in joints:
            t = Temperature()
            t.header.stamp = self.stamp
            t.header.frame_id = j
            self.msg_temps.append(t)
        self.msg_range = Range()
        self.msg_range.header.stamp = self.stamp
        self.msg_range.header.frame_id = self.base_frame
        self.msg_range.radiation_type = Range.INFRARED
        self.msg_range.field_of_view = 2.0 * math.pi
        self.msg_range.min_range = 0.0
        self.msg_range.max_range = self.max_range
        self.msg_zone = String()
        self.msg_event = String()
        self.msg_truth = String()

        # ------------------------------------------------------------- subscriptions
        self.create_subscription(Float64MultiArray, f"{controller}/commands", self._on_effort, RELIABLE)
        self.create_subscription(Twist, "cmd_vel", self._on_cmd_vel, RELIABLE)
        self.create_subscription(Decision, "decision", self._on_decision, RELIABLE)
        if self.control_lockstep_timeout > 0:
            self.create_subscription(MotorCommand, "motor_command", self._on_motor_command, RELIABLE)

        self.get_logger().info(
            f"simulator: scenario={scenario.name if scenario else 'none'}, real_time_factor={self.rtf}, "
            f"dt={dt}, lockstep_decision_period={lock_period}, commands on {controller}/commands, "
            f"handle at {tuple(round(v, 3) for v in self.sim.handle_pos)}")
        self._thread = threading.Thread(target=self._run, name="sim-physics", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ callbacks
    def _on_effort(self, msg: Float64MultiArray) -> None:
        data = msg.data
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
        fault = self.sim.set_cmd_vel(msg.linear.x, msg.angular.z)
        if fault is not None:
            self.faults.record(fault, "cmd_vel with a non-finite value: ignored")

    def _on_motor_command(self, msg: MotorCommand) -> None:
        self._command_stamp = max(self._command_stamp, stamp_to_sec(msg.header.stamp))
        self._command_event.set()

    def _wait_for_command(self, t: float) -> None:
        """Control lockstep: once a controller is commanding, wait for its tick at time t."""
        if self._command_stamp < 0:
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

    def _on_decision(self, msg: Decision) -> None:
        self.lockstep.on_decision(stamp_to_sec(msg.header.stamp))

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
        while self.pub_js.get_subscription_count() < self.wait_for_subscribers and not self.stop_event.is_set():
            if time.monotonic() > deadline:
                self.get_logger().warning(
                    f"starting with {self.pub_js.get_subscription_count()} joint_states subscriber(s), "
                    f"expected {self.wait_for_subscribers} within {self.start_timeout:g} s")
                return
            time.sleep(0.05)
        time.sleep(0.5)     # let the new subscriptions' discovery settle on both sides

    def _loop(self) -> None:
        self._wait_for_graph()
        sim, lock, pacer, every = self.sim, self.lockstep, self.pacer, self._every
        e_clock, e_js = every["clock"], every["joint_state_hz"]
        e_imu, e_odom, e_wrench = every["imu_hz"], every["odom_hz"], every["wrench_hz"]
        e_temp, e_range, e_zone, e_truth = (every["temperature_hz"], every["proximity_hz"], every["zone_hz"],
                                            every["truth_hz"])
        self._set_stamp()
        self.pub_clock.publish(self.msg_clock)
        self._publish_state()
        stop = self.stop_event
        last_clock_wall = last_state_wall = 0.0
        while not stop.is_set():
            if lock.blocked(sim.steps):
                # paused at a lockstep boundary: keep re-sending the boundary's clock (best effort)
                # and, less often, the sensor state at the boundary (for late joiners)
                now = time.monotonic()
                if now - last_clock_wall > 0.05:
                    last_clock_wall = now
                    self.pub_clock.publish(self.msg_clock)
                    if now - last_state_wall > 0.2:
                        last_state_wall = now
                        self._publish_state()
                lock.event.wait(0.005)
                lock.event.clear()
                pacer.reset(sim.time)
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
            sim.step()
            k = sim.steps
            self._set_stamp()
            at_boundary = lock.enabled and k >= lock.next_boundary
            js_due = e_js and k % e_js == 0
            if js_due:
                self._publish_joint_states()      # before the clock: a tick at t sees the state at t
            if k % e_clock == 0 or at_boundary or (js_due and self.control_lockstep_timeout > 0):
                self.pub_clock.publish(self.msg_clock)
            if js_due and self.control_lockstep_timeout > 0:
                self._wait_for_command(sim.time)
            if e_imu and k % e_imu == 0:
                self._publish_imu()
            if e_odom and k % e_odom == 0:
                self._publish_odom()
            if e_wrench and k % e_wrench == 0:
                self._publish_wrench()
            if e_temp and k % e_temp == 0:
                self._publish_temperatures()
            if e_range and k % e_range == 0:
                self._publish_proximity()
            if e_zone and k % e_zone == 0:
                self._publish_zone()
                self._publish_objects()
            if e_truth and k % e_truth == 0:
                truth = sim.truth()
                truth["lockstep_waits"], truth["lockstep_timeouts"] = lock.waits, lock.timeouts
                self.msg_truth.data = json.dumps(truth)
                self.pub_truth.publish(self.msg_truth)
            if sim.events:
                self._publish_events()
            if self._expectation_feed is not None:
                self._publish_expectations()
            if self.exit_at_end and sim.scenario is not None and sim.time >= sim.scenario.duration:
                self.get_logger().info(f"scenario {sim.scenario.name!r} finished at t={sim.time:.2f} s: exiting")
                os.kill(os.getpid(), signal.SIGINT)   # the main thread shuts the node down cleanly
                return
            pacer.pace(sim.time)

    def _publish_state(self) -> None:
        """Every sensor message once, at the current stamp."""
        self._publish_joint_states()
        self._publish_imu()
        self._publish_odom()
        self._publish_wrench()
        self._publish_temperatures()
        self._publish_proximity()
        self._publish_zone()
        self._publish_objects()

    def _publish_wrench(self) -> None:
        self.msg_wrench.wrench.force.z = self.sim.grip_force()
        self.pub_wrench.publish(self.msg_wrench)

    def _publish_temperatures(self) -> None:
        temps = self.sim.temperatures()
        for msg, j in zip(self.msg_temps, self._order):
            msg.temperature = float(temps[j])
            self.pub_temp.publish(msg)

    def _publish_proximity(self) -> None:
        d = self.sim.person_distance()
        self.msg_range.range = d if d <= self.max_range else math.inf
        self.pub_range.publish(self.msg_range)

    def _publish_zone(self) -> None:
        self.msg_zone.data = self.sim.zone()
        self.pub_zone.publish(self.msg_zone)

    def _publish_objects(self) -> None:
        msg = DetectedObjects()
        msg.header.stamp = self.stamp
        msg.header.frame_id = self.base_frame
        for name, (x, y, z), (w, qx, qy, qz) in self.sim.detected_objects():
            pose = Pose()
            pose.position.x, pose.position.y, pose.position.z = x, y, z
            pose.orientation.w, pose.orientation.x, pose.orientation.y, pose.orientation.z = w, qx, qy, qz
            msg.names.append(name)
            msg.poses.append(pose)
        self.pub_objects.publish(msg)

    def _publish_joint_states(self) -> None:
        sim = self.sim
        pos, vel, eff = self._js_views
        order = self._order
        n = len(order)
        pos[:n] = sim.joint_positions()[order]
        vel[:n] = sim.joint_velocities()[order]
        eff[:n] = sim.joint_efforts()[order]
        if self.publish_wheels:
            _, angle, speed, torque = sim.wheel_states()
            pos[n], pos[n + 1] = angle
            vel[n], vel[n + 1] = speed
            eff[n], eff[n + 1] = torque
        self.pub_js.publish(self.msg_js)

    def _publish_imu(self) -> None:
        acc, gyro, quat = self.sim.imu()
        m = self.msg_imu
        m.linear_acceleration.x, m.linear_acceleration.y, m.linear_acceleration.z = (float(v) for v in acc)
        m.angular_velocity.x, m.angular_velocity.y, m.angular_velocity.z = (float(v) for v in gyro)
        o = m.orientation
        o.w, o.x, o.y, o.z = (float(v) for v in quat)
        self.pub_imu.publish(m)

    def _publish_odom(self) -> None:
        x, y, yaw, v, w = self.sim.odom()
        m = self.msg_odom
        p = m.pose.pose
        p.position.x, p.position.y = float(x), float(y)
        p.orientation.z, p.orientation.w = math.sin(0.5 * yaw), math.cos(0.5 * yaw)
        m.twist.twist.linear.x, m.twist.twist.angular.z = float(v), float(w)
        self.pub_odom.publish(m)

    def _publish_events(self) -> None:
        for t, text in self.sim.pop_events():
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
        lock = self.lockstep
        self.get_logger().info(
            f"simulator stopped at t={self.sim.time:.3f} s sim; lockstep waits={lock.waits}, "
            f"timeouts={lock.timeouts}; control lockstep waits={self.control_waits}, "
            f"timeouts={self.control_timeouts}; input faults={self.faults.total}")
        return super().destroy_node()


def main(args=None) -> int:
    return run_node(SimulatorNode, args=args)


if __name__ == "__main__":
    raise SystemExit(main())
