"""The real launch test, for a ROS 2 machine with `launch_testing` (launch and launch_ros are not
installable where `make test` runs, so the suite checks our launch descriptions against a strict
stand-in in test_graph_launch.py; this file checks them against the real libraries):

    source /opt/ros/<distro>/setup.bash && source install/setup.bash
    export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
    launch_test src/csr_llm_bringup/test/launch/launch_profiles.py

For each profile (robot, sim) it includes the profile's launch file the way a user's launch file
would, and asserts: the including file's OnStateTransition handler sees the router become active
(launch drives configure + activate, so the volatile transition events are not missed); every node
is running; after launch shuts the graph down, every process exited 0 (no second Shutdown, no
SIGTERM inside a report). The name does not start with test_ so pytest does not collect it.
"""
import unittest

import launch
import launch_testing
import launch_testing.actions
import launch_testing.asserts
import pytest
from launch.actions import IncludeLaunchDescription, RegisterEventHandler
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import PathJoinSubstitution
from launch_ros.event_handlers import OnStateTransition
from launch_ros.substitutions import FindPackageShare

from csr_llm_bringup.graph import load_profile

# launch names a process after its executable (router_node-3), not after the ROS node it runs
EXECUTABLES = {profile: [spec.executable for spec in load_profile(profile).nodes] for profile in ("robot", "sim")}


@pytest.mark.launch_test
@launch_testing.parametrize("profile", ["robot", "sim"])
def generate_test_description(profile):
    include = IncludeLaunchDescription(PythonLaunchDescriptionSource(
        PathJoinSubstitution([FindPackageShare("csr_llm_bringup"), "launch", f"{profile}.launch.py"])),
        launch_arguments={"activate_router": "true"}.items())
    # the tests start only once the router's transition to active reached this including file
    router_active = RegisterEventHandler(OnStateTransition(goal_state="active",
                                                           entities=[launch_testing.actions.ReadyToTest()]))
    return launch.LaunchDescription([router_active, include]), {"profile": profile}


class TestRunning(unittest.TestCase):
    def test_every_node_of_the_profile_is_running(self, proc_info, profile):
        names = " ".join(str(name) for name in proc_info.process_names())
        for executable in EXECUTABLES[profile]:
            self.assertIn(executable, names)

    def test_the_router_reports_active(self, proc_output):
        proc_output.assertWaitFor("active: control", timeout=30, stream="stderr")


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):
    def test_every_process_exits_cleanly(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=[0])
