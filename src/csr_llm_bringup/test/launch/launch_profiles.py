"""The real launch test, for a ROS 2 machine with `launch_testing` (launch and launch_ros are not
installable where `make test` runs, so the suite checks our launch descriptions against a strict
stand-in in test_graph_launch.py; this file checks them against the real libraries):

    source /opt/ros/<distro>/setup.bash && source install/setup.bash
    export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
    launch_test src/csr_llm_bringup/test/launch/launch_profiles.py

For each profile (robot, sim) it includes the profile's launch file the way a user's launch file
would, and asserts: the including file's OnStateTransition handler sees the router's four
transitions (robot: launch drives configure + activate, so the volatile events are not missed; sim:
the router is hosted in the simulator's process and launch relays its events); every process the
profile launches is running; after launch shuts the graph down (while the reasoning node may still
be loading the model or rebuilding its prefix), every process exited 0 within its grace (no
SIGKILL, no second Shutdown, no SIGTERM inside a report). The name does not start with test_ so
pytest does not collect it.
"""
import unittest

import launch
import launch_testing
import launch_testing.actions
import launch_testing.asserts
import pytest
from launch.actions import IncludeLaunchDescription, OpaqueFunction, RegisterEventHandler
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import PathJoinSubstitution
from launch_ros.event_handlers import OnStateTransition
from launch_ros.substitutions import FindPackageShare

from csr_llm_bringup.graph import load_profile

PROFILES = ("robot", "sim")
# launch names a process after its executable (router_node-3), not after the ROS node it runs; a
# node hosted in another's process (sim's router) has no process of its own
EXECUTABLES = {profile: [spec.executable for spec in load_profile(profile).processes] for profile in PROFILES}
# (start state, goal state) of every transition event the including file saw, per test run
SEEN = []


@pytest.mark.launch_test
@launch_testing.parametrize("profile", PROFILES)
# the graph up to the router's activation: launch_testing's default 15 s is short on a loaded
# 2-core machine (the simulator's start alone took more once)
@launch_testing.ready_to_test_action_timeout(90)
def generate_test_description(profile):
    include = IncludeLaunchDescription(PythonLaunchDescriptionSource(
        PathJoinSubstitution([FindPackageShare("csr_llm_bringup"), "launch", f"{profile}.launch.py"])),
        launch_arguments={"activate_router": "true"}.items())
    # the tests start only once the router's transition to active reached this including file
    router_active = RegisterEventHandler(OnStateTransition(goal_state="active",
                                                           entities=[launch_testing.actions.ReadyToTest()]))
    SEEN.clear()
    seen = RegisterEventHandler(OnStateTransition(entities=[OpaqueFunction(function=lambda context: SEEN.append(
        (context.locals.event.start_state, context.locals.event.goal_state)))]))
    return launch.LaunchDescription([seen, router_active, include]), {"profile": profile}


class TestRunning(unittest.TestCase):
    def test_every_node_of_the_profile_is_running(self, proc_info, profile):
        names = " ".join(str(name) for name in proc_info.process_names())
        for executable in EXECUTABLES[profile]:
            self.assertIn(executable, names)

    def test_the_router_reports_active(self, proc_output):
        proc_output.assertWaitFor("active: control", timeout=30, stream="stderr")

    def test_the_including_file_saw_the_routers_four_transitions(self):
        self.assertEqual(SEEN, [("unconfigured", "configuring"), ("configuring", "inactive"),
                                ("inactive", "activating"), ("activating", "active")])


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):
    def test_every_process_exits_cleanly(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=[0])
