"""The go-to-pose base controller alone, on a kinematic unicycle: it reaches every configured zone goal
from anywhere in the world, never commands above the base limits or the decided speed, slows down
near the goal and stops on non-finite input."""
import math

import numpy as np
import pytest

from action_router.go_to_pose import BaseGoal, BaseTwist, GoToPoseConfig, go_to_pose, wrap_angle
from action_router.params import make_config

CFG = make_config()
LIMITS = GoToPoseConfig(max_linear=float(CFG["base_max_linear"]), max_angular=float(CFG["base_max_angular"]))
DT = 0.01


def drive(start, goal, speed, cfg=LIMITS, max_s=60.0):
    """Integrate the unicycle under the controller; every twist it sent, and the final pose."""
    x, y, yaw = start
    twists = []
    for _ in range(int(max_s / DT)):
        twist = go_to_pose((x, y, yaw), goal, speed, cfg)
        twists.append(twist)
        if twist.reached:
            break
        x += twist.vx * math.cos(yaw) * DT
        y += twist.vx * math.sin(yaw) * DT
        yaw = wrap_angle(yaw + twist.wz * DT)
    return twists, (x, y, yaw)


@pytest.mark.parametrize("zone", sorted(CFG.zones))
@pytest.mark.parametrize("start", [(0.0, 0.0, 0.0), (-4.0, 1.0, 2.0), (5.0, -2.0, -3.0), (1.5, 0.5, math.pi / 2)])
def test_reaches_each_zone_goal_within_tolerance_and_limits(zone, start):
    goal = CFG.zones[zone].goal
    twists, (x, y, yaw) = drive(start, goal, 0.3)
    assert twists[-1].reached, f"{zone} from {start}: stopped at {(x, y, yaw)}"
    assert math.hypot(goal.x - x, goal.y - y) <= LIMITS.position_tolerance
    if goal.yaw is not None:
        assert abs(wrap_angle(goal.yaw - yaw)) <= LIMITS.yaw_tolerance
    assert all(0.0 <= t.vx <= 0.3 + 1e-12 for t in twists)            # forward only, never above the speed
    assert all(abs(t.wz) <= LIMITS.max_angular + 1e-12 for t in twists)
    assert twists[-1].vx == 0.0 and twists[-1].wz == 0.0


def test_the_speed_is_capped_by_the_base_limit():
    twists, _ = drive((0.0, 0.0, 0.0), BaseGoal(20.0, 0.0), speed=5.0, max_s=5.0)
    assert max(t.vx for t in twists) == pytest.approx(LIMITS.max_linear)
    assert all(t.vx <= LIMITS.max_linear for t in twists)


def test_slows_down_inside_the_slow_radius_and_turns_in_place_when_facing_away():
    far = go_to_pose((0.0, 0.0, 0.0), BaseGoal(3.0, 0.0), 0.4, LIMITS)
    near = go_to_pose((2.7, 0.0, 0.0), BaseGoal(3.0, 0.0), 0.4, LIMITS)
    assert far.vx == pytest.approx(0.4) and near.vx == pytest.approx(0.4 * 0.3 / LIMITS.slow_radius)
    behind = go_to_pose((0.0, 0.0, 0.0), BaseGoal(-3.0, 0.0), 0.4, LIMITS)
    assert behind.vx == 0.0 and abs(behind.wz) == pytest.approx(LIMITS.max_angular)


def test_at_the_goal_position_it_turns_to_the_goal_yaw_then_reports_reached():
    turning = go_to_pose((1.0, 1.0, 0.0), BaseGoal(1.0, 1.0, 1.0), 0.3, LIMITS)
    assert turning == BaseTwist(0.0, LIMITS.max_angular, False, 0.0)
    assert go_to_pose((1.0, 1.0, 0.95), BaseGoal(1.0, 1.0, 1.0), 0.3, LIMITS).reached
    assert go_to_pose((1.05, 1.0, 2.0), BaseGoal(1.0, 1.0), 0.3, LIMITS).reached     # no yaw: any heading


@pytest.mark.parametrize("pose, speed", [((math.nan, 0.0, 0.0), 0.3), ((0.0, 0.0, math.inf), 0.3),
                                         ((0.0, 0.0, 0.0), math.nan)])
def test_non_finite_input_stops_the_base(pose, speed):
    assert go_to_pose(pose, BaseGoal(1.0, 0.0), speed, LIMITS) == BaseTwist(0.0, 0.0)


def test_random_poses_goals_and_speeds_never_exceed_the_limits():
    rng = np.random.default_rng(3)
    for _ in range(2000):
        pose = rng.uniform(-10, 10, 3)
        goal = BaseGoal(*rng.uniform(-10, 10, 2), yaw=float(rng.uniform(-4, 4)) if rng.random() < 0.5 else None)
        twist = go_to_pose(pose, goal, float(rng.uniform(-1, 3)), LIMITS)
        assert 0.0 <= twist.vx <= LIMITS.max_linear and abs(twist.wz) <= LIMITS.max_angular
