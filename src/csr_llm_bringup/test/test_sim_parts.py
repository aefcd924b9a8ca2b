"""The simulator's parts on their own (plain modules, no ROS): commands, clock, traction, zones, the
scripted drive, the person and the MuJoCo world."""
import math

import numpy as np
import pytest

from csr_llm_bringup.sim.commands import ArmEfforts, CmdVel, SimClock
from csr_llm_bringup.sim.mujoco_world import MujocoWorld, named_pose
from csr_llm_bringup.sim.readouts import ZoneMap
from csr_llm_bringup.sim.robot_model import APPROACH_HANDLE_POSE, DEFAULT_WORLD, default_limits, world_config
from csr_llm_bringup.sim.traction import BaseTraction
from csr_llm_bringup.sim.world_actions import Person, ScriptedDrive

LIMITS = {"effort_max": [10.0, 20.0, 10.0, 5.0, 25.0], "velocity_max": [1.0, 1.0, 1.0, 2.0, 0.1]}


def test_the_clock_counts_steps():
    clock = SimClock(0.001)
    for _ in range(250):
        clock.tick()
    assert clock.steps == 250 and clock.time == 250 * 0.001


def test_arm_efforts_are_clipped_and_reduced_above_the_velocity_limit():
    arm = ArmEfforts(LIMITS)
    assert arm.set([50.0, -50.0, 1.0, 1.0, 1.0]) is None
    assert list(arm.command) == [10.0, -20.0, 1.0, 1.0, 1.0]
    assert arm.set([1.0]) == "effort_length" and arm.command[0] == 10.0
    applied = arm.apply(np.array([1.125, 0.0, -1.125, 0.0, 0.0]))   # joints 0 and 2 an eighth too fast
    assert applied[0] == pytest.approx(5.0)         # pushing further: halved
    assert applied[2] == 1.0                        # braking: untouched
    assert list(ArmEfforts(LIMITS, velocity_limit=False).apply(np.full(5, 9.0))) == [0.0] * 5
    with pytest.raises(ValueError):
        ArmEfforts({**LIMITS, "effort_max": [0.0] * 5})


def test_cmd_vel_is_clipped_and_times_out():
    cmd = CmdVel(0.5, 1.0, 0.5)
    assert cmd.current(0.0) == (0.0, 0.0)
    assert cmd.set(2.0, -3.0, now=1.0) is None
    assert cmd.current(1.5) == (0.5, -1.0) and cmd.current(1.51) == (0.0, 0.0)
    assert cmd.set(math.nan, 0.0, now=2.0) == "cmd_vel_nonfinite" and cmd.current(2.0) == (0.0, 0.0)


def test_traction_slips_on_a_patch_and_odometry_follows_the_wheels():
    traction = BaseTraction(world_config(), robot_mass=30.0, dt=0.001)
    traction.base_forces((-1.5, 0.0, 0.0), (0.0, 0.0, 0.0), (0.4, 0.0))
    assert traction.on_slip
    traction.base_forces((0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.4, 0.0))
    assert not traction.on_slip
    fx, fy, tz = traction.base_forces((0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.4, 0.0))
    assert fx > 0.0 and fy == pytest.approx(0.0) and tz == pytest.approx(0.0)
    traction.integrate_odometry()
    assert traction.odom()[0] > 0.0 and traction.odom()[3] > 0.0
    traction.reset(1.0, 2.0, 0.5)
    assert traction.odom() == [1.0, 2.0, 0.5, 0.0, 0.0] and traction.wheel_states()[2] == [0.0, 0.0]


def test_zones_first_match_else_the_default():
    zones = ZoneMap(DEFAULT_WORLD["zones"], DEFAULT_WORLD["default_zone"])
    assert zones.at(0.0, 0.0) == "door" and zones.at(1.2, 0.0) == "warehouse" and zones.at(-3.0, 0.0) == "corridor"
    assert zones.at(0.0, 5.0) == "corridor"


def test_a_scripted_drive_steers_to_x_then_brakes_then_hands_back():
    drive = ScriptedDrive()
    assert not drive.active
    drive.start(0.0, (0.0, 0.0, 0.1), 0.3, to_x=1.0, brake=0.5)
    vx, wz = drive.command()
    assert vx == pytest.approx(0.3) and wz == pytest.approx(-0.2)
    drive.update(1.0, (0.995, 0.0, 0.0))             # reached: hold the wheels still for 0.5 s
    assert drive.active and drive.command() == (0.0, 0.0)
    drive.update(1.5, (1.0, 0.0, 0.0))
    assert not drive.active


@pytest.fixture(scope="module")
def world():
    return MujocoWorld(default_limits(), world_config(), 0.001)


def test_the_person_walks_up_to_a_clearance_and_home_again(world):
    person = Person(world, (3.0, 0.0), radius=0.15, base_radius=0.32)
    assert person.clearance((0.0, 0.0, 0.0)) == pytest.approx(3.0 - 0.47)
    person.approach(0.5, speed=1.0)
    for _ in range(400):
        person.update(0.01, (0.0, 0.0, 0.0))
    assert person.clearance((0.0, 0.0, 0.0)) == pytest.approx(0.5)
    person.leave(speed=1.0)
    for _ in range(400):
        person.update(0.01, (0.0, 0.0, 0.0))
    assert person.position == pytest.approx([3.0, 0.0])


def test_the_world_places_the_handle_at_the_grip_centre_of_the_approach_pose(world):
    grip, _ = world.grip_point("approach_handle", (0.0, 0.0, 0.0))
    assert grip == pytest.approx(world.handle_pos)
    assert named_pose(APPROACH_HANDLE_POSE) is APPROACH_HANDLE_POSE
    with pytest.raises(ValueError):
        named_pose("no_such_pose")
    world.place_base(1.0, -0.5, 0.3)
    assert world.base_pose() == pytest.approx((1.0, -0.5, 0.3)) and world.base_velocity_world() == (0.0, 0.0, 0.0)
    world.put_object((1.0, 2.0, 0.5), (1.0, 0.0, 0.0, 0.0))
    assert world.object_position() == (1.0, 2.0, 0.5)
    world.park_object()
    assert world.object_position()[1] == 30.0
