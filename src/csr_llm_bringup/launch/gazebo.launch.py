"""ros2 launch csr_llm_bringup gazebo.launch.py world:=... [params_file:=...] [namespace:=...]
    [use_sim_time:=true] [activate_router:=true]

Gazebo (gz-sim) instead of our MuJoCo simulator: starts gz-sim with the world, the ros_gz_bridge
with config/gazebo/ros_gz_bridge.yaml, and the robot profile's nodes (on Gazebo's /clock unless
use_sim_time:=false). Without `gz` or ros_gz_bridge it stops at once with one line saying which.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, IncludeLaunchDescription, OpaqueFunction
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from csr_llm_bringup.launch_graph import gazebo_missing


def gazebo_actions(context, *args, **kwargs):
    missing = gazebo_missing()
    if missing:
        raise RuntimeError(missing)     # launch logs it as one line and exits 1
    share = get_package_share_directory("csr_llm_bringup")
    bridge_config = os.path.join(share, "config", "gazebo", "ros_gz_bridge.yaml")
    use_sim_time = LaunchConfiguration("use_sim_time").perform(context).strip().lower() in ("1", "true", "yes", "on")
    return [
        ExecuteProcess(cmd=["gz", "sim", "-r", LaunchConfiguration("world")], output="screen"),
        Node(package="ros_gz_bridge", executable="parameter_bridge", name="gz_bridge", output="screen",
             parameters=[{"config_file": bridge_config, "use_sim_time": use_sim_time}]),
        IncludeLaunchDescription(
            PythonLaunchDescriptionSource(os.path.join(share, "launch", "robot.launch.py")),
            launch_arguments={"use_sim_time": LaunchConfiguration("use_sim_time"),
                              "params_file": LaunchConfiguration("params_file"),
                              "namespace": LaunchConfiguration("namespace"),
                              "activate_router": LaunchConfiguration("activate_router")}.items()),
    ]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("world", description="gz-sim world file with the csr_robot model"),
        DeclareLaunchArgument("params_file", default_value="", description="extra ROS 2 params file for every node"),
        DeclareLaunchArgument("namespace", default_value="", description="namespace for every node"),
        DeclareLaunchArgument("use_sim_time", default_value="true",
                              description="the bridge and the nodes on Gazebo's /clock"),
        DeclareLaunchArgument("activate_router", default_value="true",
                              description="true/false: launch brings the router up (false: a lifecycle manager does)"),
        OpaqueFunction(function=gazebo_actions),
    ])
