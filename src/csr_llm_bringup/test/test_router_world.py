"""The router's zone goals and reach targets agree with the simulated world: each zone's goal lies in
that zone's rectangle, the warehouse goal puts the default shelf at the shelf reach, and an object the
simulator places "in reach" is published (detected_objects) where the router's reach target expects it."""
import math
import time

import pytest

from action_router.params import make_config
from action_router.router_node import RouterNode
from action_router.scene import SceneFrames, choose_reach
from csr_llm_bringup.sim.robot_model import DEFAULT_WORLD
from csr_llm_bringup.sim.simulator import Simulator
from csr_llm_common.ros.spin import spinning
from csr_llm_common.ros.testing import wait_for

CFG = make_config()
TARGET = CFG.reach_targets[0]


@pytest.mark.parametrize("zone", sorted(CFG.zones))
def test_each_zone_goal_lies_in_its_simulated_zone(zone):
    sim = Simulator()
    goal = CFG.zones[zone].goal
    sim.set_base_pose(goal.x, goal.y, goal.yaw or 0.0)
    assert sim.zone() == zone


def test_the_shelf_reach_target_is_where_the_simulator_places_an_object_in_reach():
    sim = Simulator()
    for x, y, yaw in [(0.0, 0.0, 0.0), (1.8, 0.0, 0.0), (2.0, 1.0, 2.0)]:
        sim.set_base_pose(x, y, yaw)
        sim.place_object("tool", in_reach="reach_shelf")
        ((name, position, _),) = sim.detected_objects()
        assert name == "tool" and math.dist(position, TARGET.object_at) < 0.01


def test_at_the_warehouse_goal_the_default_shelf_is_in_reach():
    goal = CFG.zones["warehouse"].goal
    sim = Simulator()
    sim.set_base_pose(goal.x, goal.y, goal.yaw)
    sx, sy, _ = DEFAULT_WORLD["shelf_default"]
    sim.place_object("box", position=(sx, sy))
    ((_, position, _),) = sim.detected_objects()
    assert math.dist(position, TARGET.object_at) <= TARGET.tolerance
    sim.remove_object()
    assert sim.detected_objects() == []


@pytest.mark.dds
def test_the_simulator_publishes_the_scene_the_router_reaches_into():
    from csr_llm_bringup.sim.simulator_node import SimulatorNode
    from rclpy.parameter import Parameter
    with spinning() as spinner:
        sim_node = spinner.create(SimulatorNode, parameter_overrides=[
            Parameter("scenario", value="none"), Parameter("lockstep_decision_period", value=0.5),
            Parameter("real_time_factor", value=0.0)])
        router_node = spinner.create(RouterNode, parameter_overrides=[])
        router_node.trigger_configure()
        assert wait_for(lambda: sim_node.sim.time >= 0.5, 30)      # paused at the lockstep boundary
        sim_node.sim.place_object("box", in_reach="reach_shelf")
        frames = SceneFrames("base_link", "odom", 1e9)
        chosen = lambda: choose_reach("box", router_node.router.inputs.scene, time.time(), CFG.reach_targets,  # noqa: E731
                                      frames, (0.0, 0.0, 0.0)).target
        assert wait_for(lambda: router_node.router.inputs.scene.objects and chosen() == TARGET, 20)
        assert router_node.router.inputs.scene.frame == "base_link"
        router_node.trigger_cleanup()
