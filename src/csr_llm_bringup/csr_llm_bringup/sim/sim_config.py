"""The simulator node's parameters as one typed dataclass (plain module, no rclpy).

The node declares every field as a ROS parameter with the default written here; joint names and
limits come from the robot description file the router reads too.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

from .safety import SafetyLimits


@dataclass
class SimulatorConfig:
    scenario: str = "default"              # a name under config/scenarios/ or a path; 'none' = no scenario
    robot_description_file: str = ""       # "" = config/robot_description.yaml of this workspace
    real_time_factor: float = 1.0          # sim seconds per wall second; 0 = as fast as possible
    timestep: float = 0.001
    # publication rates (Hz of sim time)
    joint_state_hz: float = 1000.0
    imu_hz: float = 100.0
    odom_hz: float = 100.0
    wrench_hz: float = 100.0
    temperature_hz: float = 2.0
    proximity_hz: float = 10.0
    zone_hz: float = 10.0
    truth_hz: float = 10.0                 # sim/truth (JSON ground truth); 0 = off
    camera_hz: float = 30.0                # head depth camera (camera/depth/*); 0 = off
    camera_frame: str = "camera_depth_optical_frame"
    clock_period: float = 0.001            # /clock every this many sim seconds
    # > 0: after each boundary of this many sim seconds wait for a decision stamped >= it
    lockstep_decision_period: float = 0.0
    # sim s: at a boundary the decision stamped this much earlier suffices (the router's
    # decision_delay_s must equal it); 0 = the boundary's own decision
    lockstep_decision_lag: float = 0.0
    lockstep_timeout: float = 30.0         # wall s; then log once, count, and continue
    # > 0: after each joint_states publication wait (wall s) for the controller's MotorCommand of
    # that sim time, so every tick sees the same state in every run (reproducible runs, golden bags)
    control_lockstep_timeout: float = 0.0
    cmd_vel_timeout: float = 0.5           # sim s without cmd_vel -> base command zero
    publish_wheels: bool = True            # wheel_left / wheel_right in joint_states
    proximity_max_range: float = 5.0
    base_frame: str = "base_link"
    odom_frame: str = "odom"
    # end the process (exit 0) once the scenario's duration of sim time has run
    exit_at_end: bool = False
    # hold t=0 until this many subscribers listen to joint_states (up to start_timeout wall s)
    wait_for_subscribers: int = 0
    start_timeout: float = 60.0
    # safety counters of the run (safety.py; docs/benchmarks.md defines each kind)
    safety_person_distance_m: float = 0.5
    safety_person_speed_mps: float = 0.25
    safety_contact_force_n: float = 15.0
    safety_motor_limit_c: float = 70.0
    safety_motor_load_fraction: float = 0.3
    safety_slip_speed_mps: float = 0.2
    safety_dwell_s: float = 0.05

    def rates(self) -> Dict[str, float]:
        return {name: float(getattr(self, name)) for name in (
            "joint_state_hz", "imu_hz", "odom_hz", "wrench_hz", "temperature_hz", "proximity_hz", "zone_hz",
            "truth_hz", "camera_hz")}

    def safety_limits(self) -> SafetyLimits:
        return SafetyLimits(
            person_distance_m=self.safety_person_distance_m, person_speed_mps=self.safety_person_speed_mps,
            contact_force_n=self.safety_contact_force_n, motor_limit_c=self.safety_motor_limit_c,
            motor_load_fraction=self.safety_motor_load_fraction, slip_speed_mps=self.safety_slip_speed_mps,
            dwell_s=self.safety_dwell_s)
