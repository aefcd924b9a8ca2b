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

The physics runs in its own thread (physics_loop.py), lockstepped with the decision loop and the
router when the profile's `lockstep:` key sets the ``lockstep_*`` parameters (lockstep.py). The
node never uses its own ROS clock (it is the clock).

Hosting (``--component MODULE:CLASS/NAME=PARAMS_FILE``, graph ``container: simulator``): the
hosted node runs in this process and its callbacks run in the physics thread (hosting.py,
control_link.py): each joint state is ticked there and its command applied directly.
"""
from __future__ import annotations

import csr_llm_common.stop_signal  # noqa: F401 - first: a Ctrl-C during the slow imports below is caught

import json
import os
import signal
import threading
import time
from typing import Optional, Sequence, Tuple

import rclpy
from rclpy.node import Node
from rclpy.parameter import Parameter

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Twist
from rosgraph_msgs.msg import Clock
from std_msgs.msg import Float64MultiArray, String

from csr_llm_msgs.msg import CsrStatus, Decision, MotorCommand, RouterStatus
from csr_llm_common.faults import FaultLog
from csr_llm_common.paths import config_dir, expand_path
from csr_llm_common.robot_description import RobotDescription, load_robot_description
from csr_llm_common.ros import qos
from csr_llm_common.ros.params import declare_dataclass
from csr_llm_common.ros.stamps import NS_PER_S, sec_to_ns, stamp_to_sec

from ..lockstep import CommandWait, DecisionHandover, Lockstep, Pacer
from .control_link import CommandIntake, HostedControl, RemoteControl
from .hosting import HostedComponent, run_hosting
from .physics_loop import LoopOptions, PhysicsLoop
from .robot_model import JOINTS
from .scenario import ExpectationFeed, ScenarioError, load_scenario
from .sensor_publishers import SensorPublishers
from .sim_config import SimulatorConfig
from .simulator import Simulator

RELIABLE = qos.COMMANDS
EVENTS_QOS = qos.SCENARIO_EVENTS
CLOCK_QOS = qos.CLOCK


def build_simulator(cfg: SimulatorConfig, description: RobotDescription) -> Simulator:
    """The simulator for these parameters and this robot description (limits in JOINTS order)."""
    joints = description.joint_names
    if sorted(joints) != sorted(JOINTS):
        raise ValueError(f"the robot description must list the simulated joints {JOINTS} (any order), "
                         f"got {joints}")
    limits = {k: [v[joints.index(j)] for j in JOINTS] if len(v) == len(JOINTS) else v
              for k, v in description.limits().items()}
    scenario = None
    if cfg.scenario and cfg.scenario.lower() not in ("none", "''"):
        try:
            scenario = load_scenario(cfg.scenario)
        except ScenarioError as exc:
            raise ValueError(f"scenario: {exc}") from None
    return Simulator(limits=limits, scenario=scenario, timestep=cfg.timestep,
                     base_max_linear=description.base_max_linear, base_max_angular=description.base_max_angular,
                     cmd_vel_timeout=cfg.cmd_vel_timeout, safety=cfg.safety_limits())


class SimulatorNode(Node):
    def __init__(self, hosted: Optional[HostedComponent] = None, **kwargs):
        super().__init__("simulator", **kwargs)
        self.hosted = hosted
        if self.get_parameter("use_sim_time").value:
            # this node is the clock: following its own /clock would only add a 1 kHz callback
            self.set_parameters([Parameter("use_sim_time", Parameter.Type.BOOL, False)])
            self.get_logger().info("use_sim_time ignored: the simulator publishes /clock and stamps with sim time")
        cfg, description = self._read_parameters()
        self.cfg = cfg
        try:
            self.sim = build_simulator(cfg, description)
        except ValueError as err:       # a bad scenario file: one line, not a traceback
            self.get_logger().fatal(f"cannot start: {err}")
            raise SystemExit(2) from err
        self.faults = FaultLog(self.get_logger().warning, counted_in="the run summary (input faults)")
        self.intake = CommandIntake(self.sim, description.joint_names, self.faults)
        self.lockstep = Lockstep(cfg.lockstep_decision_period, self.sim.dt, cfg.lockstep_timeout,
                                 lag=cfg.lockstep_decision_lag)
        self.handover = DecisionHandover(cfg.control_lockstep_timeout)
        self.commands = CommandWait(cfg.control_lockstep_timeout)
        self.link = RemoteControl(self.handover, self.commands) if hosted is None else \
            HostedControl(hosted, self.handover, self.intake, cfg.control_lockstep_timeout)
        self.stop_event = threading.Event()
        self._expectation_feed = (ExpectationFeed(self.sim.scenario, self.sim.robot_outcome)
                                  if self.sim.scenario is not None else None)
        self._scenario_errors_logged = 0
        self._create_publishers(description.joint_names)
        controller = description.controller_name.strip("/") or "arm_controller"
        self._create_subscriptions(controller)
        self.loop = PhysicsLoop(self.sim, self.lockstep, self.link, self.intake, self,
                                LoopOptions(cfg.rates(), cfg.clock_period, cfg.control_lockstep_timeout > 0,
                                            cfg.exit_at_end),
                                Pacer(cfg.real_time_factor), self.stop_event)
        scenario = self.sim.scenario
        self.get_logger().info(
            f"simulator: scenario={scenario.name if scenario else 'none'}, real_time_factor={cfg.real_time_factor}, "
            f"dt={self.sim.dt}, lockstep_decision_period={cfg.lockstep_decision_period} "
            f"(lag {cfg.lockstep_decision_lag:g} s), commands on {controller}/commands"
            f"{f' ({hosted.name} hosted in this process)' if hosted else ''}, "
            f"handle at {tuple(round(v, 3) for v in self.sim.handle_pos)}")
        self._thread = threading.Thread(target=self._run, name="sim-physics", daemon=True)
        self._thread.start()

    def _read_parameters(self) -> Tuple[SimulatorConfig, RobotDescription]:
        try:
            cfg = declare_dataclass(self, SimulatorConfig())
            if not 0.0 <= cfg.lockstep_decision_lag < float("inf"):
                raise ValueError(f"lockstep_decision_lag must be >= 0 sim s, got {cfg.lockstep_decision_lag!r}")
            description = load_robot_description(
                expand_path(cfg.robot_description_file) or config_dir() / "robot_description.yaml")
        except ValueError as err:
            self.get_logger().fatal(f"cannot start: {err}")
            raise SystemExit(2) from err
        return cfg, description

    def _create_publishers(self, joints: Sequence[str]) -> None:
        """Preallocated messages; every header holds the one `stamp` (sensor_publishers.py)."""
        cfg = self.cfg
        quiet = qos.quiet_publisher
        self.pub_expectations = self.create_publisher(String, "scenario/expectations", EVENTS_QOS,
                                                      event_callbacks=quiet())
        self.stamp = Time()
        self.pub_clock = self.create_publisher(Clock, "/clock", CLOCK_QOS, event_callbacks=quiet())
        self.msg_clock = Clock()
        self.msg_clock.clock = self.stamp
        self.sensors = SensorPublishers(self, self.sim, joints, self.stamp, cfg.base_frame, cfg.odom_frame,
                                        cfg.proximity_max_range, cfg.publish_wheels, cfg.camera_frame)
        self.pub_events = self.create_publisher(String, "events", EVENTS_QOS, event_callbacks=quiet())
        self.pub_truth = self.create_publisher(String, "sim/truth", RELIABLE, event_callbacks=quiet())
        self.msg_event = String()
        self.msg_truth = String()

    def _create_subscriptions(self, controller: str) -> None:
        def subscribe(msg_type, topic, callback, qos_profile) -> None:
            self.create_subscription(msg_type, topic, callback, qos_profile,
                                     event_callbacks=qos.quiet_subscription())
        control = self.cfg.control_lockstep_timeout > 0
        if self.hosted is None:      # hosted: the controller's command is applied on its tick
            subscribe(Float64MultiArray, f"{controller}/commands", lambda m: self.intake.take_efforts(m.data),
                      RELIABLE)
            subscribe(Twist, "cmd_vel", lambda m: self.intake.take_twist(m.linear.x, m.angular.z), RELIABLE)
        subscribe(Decision, "decision", self._on_decision, RELIABLE)
        if self.lockstep.enabled:
            subscribe(CsrStatus, "csr_status", self._on_csr_status, 10)
        if control and self.hosted is None:
            subscribe(MotorCommand, "motor_command",
                      lambda m: self.commands.on_command(stamp_to_sec(m.header.stamp)), RELIABLE)
        if control:
            subscribe(RouterStatus, "router_status", lambda m: self.handover.on_router_status(m.last_decision_id),
                      qos.ROUTER_STATUS)

    # ------------------------------------------------------------------ callbacks
    def _on_csr_status(self, msg: CsrStatus) -> None:
        self.handover.on_decision(msg.last_decision_id)     # the status may overtake the decision itself
        self.lockstep.on_schedule(msg.next_decision_due)

    def _on_decision(self, msg: Decision) -> None:
        self.handover.on_decision(msg.decision_id)
        if msg.trigger == Decision.TRIGGER_EVENT:
            self.loop.events.on_decided()
        self.lockstep.on_decision(stamp_to_sec(msg.header.stamp))

    # ------------------------------------------------------------------ physics thread
    def _run(self) -> None:
        try:
            self._wait_for_graph()
            self.loop.run()
        except Exception as exc:  # keep the process up so the failure is visible in the log
            if rclpy.ok(context=self.context):
                self.get_logger().error(f"physics thread stopped: {exc!r}")
                raise

    def _wait_for_graph(self) -> None:
        """Hold t=0 until `wait_for_subscribers` listen to joint_states (up to start_timeout)."""
        wanted, timeout = self.cfg.wait_for_subscribers, self.cfg.start_timeout
        if wanted <= 0:
            return
        deadline = time.monotonic() + timeout
        pub_js = self.sensors.pub_js
        while pub_js.get_subscription_count() < wanted and not self.stop_event.is_set():
            if time.monotonic() > deadline:
                self.get_logger().warning(f"starting with {pub_js.get_subscription_count()} joint_states "
                                          f"subscriber(s), expected {wanted} within {timeout:g} s")
                return
            time.sleep(0.05)
        time.sleep(0.5)     # let the new subscriptions' discovery settle on both sides
        self.link.start(max(0.0, deadline - time.monotonic()), self.stop_event, self.get_logger().warning)

    # ------------------------------------------------------------------ outputs of the physics loop
    def stamp_at(self, steps: int) -> None:
        # integer steps * dt in integer nanoseconds: the same stamp for the same step in every run
        self.stamp.sec, self.stamp.nanosec = divmod(sec_to_ns(steps * self.sim.dt), NS_PER_S)

    def publish_clock(self) -> None:
        self.pub_clock.publish(self.msg_clock)

    def publish_truth(self, truth: dict) -> None:
        self.msg_truth.data = json.dumps(truth)
        self.pub_truth.publish(self.msg_truth)

    def publish_events(self, events: Sequence[Tuple[float, str]]) -> None:
        for t, text in events:
            self.msg_event.data = text
            self.pub_events.publish(self.msg_event)
            self.get_logger().info(f"[t={t:.2f}] event: {text}")
        sc = self.sim.scenario
        if sc is not None:
            while self._scenario_errors_logged < len(sc.errors):
                self.get_logger().warning(f"scenario: {sc.errors[self._scenario_errors_logged]}")
                self._scenario_errors_logged += 1

    def publish_expectations(self) -> None:
        if self._expectation_feed is None:
            return
        for record in self._expectation_feed.poll(self.sim.time):
            self.pub_expectations.publish(String(data=json.dumps(record)))

    def warn(self, text: str) -> None:
        self.get_logger().warning(text)

    def end_run(self) -> None:
        self.get_logger().info(f"scenario {self.sim.scenario.name!r} finished at t={self.sim.time:.2f} s: exiting")
        os.kill(os.getpid(), signal.SIGINT)   # the main thread shuts the node down cleanly

    # ------------------------------------------------------------------ shutdown
    def destroy_node(self):
        self.stop_event.set()
        self.lockstep.event.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        if self.hosted is not None and not self._thread.is_alive():
            self.hosted.close()      # after the physics thread: it spins the hosted node's executor
        lock = self.lockstep
        self.get_logger().info(
            f"simulator stopped at t={self.sim.time:.3f} s sim; lockstep waits={lock.waits}, "
            f"timeouts={lock.timeouts}; control lockstep waits={self.link.waits}, "
            f"timeouts={self.link.timeouts}; decision handover timeouts={self.handover.timeouts}; "
            f"input faults={self.faults.total}; {self.loop.profile.format()}")
        return super().destroy_node()


def main(args=None) -> int:
    return run_hosting(SimulatorNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
