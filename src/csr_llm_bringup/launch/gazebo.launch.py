"""ros2 launch csr_llm_bringup gazebo.launch.py [world:=...] [params_file:=...] [namespace:=...]

Gazebo (gz-sim) instead of our MuJoCo simulator: starts gz-sim with the world, the ros_gz_bridge
with config/gazebo/ros_gz_bridge.yaml, and the robot profile's nodes on sim time.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node


def generate_launch_description():
    share = get_package_share_directory("csr_llm_bringup")
    bridge_config = os.path.join(share, "config", "gazebo", "ros_gz_bridge.yaml")
    return LaunchDescription([
        DeclareLaunchArgument("world", description="gz-sim world file with the csr_robot model"),
        DeclareLaunchArgument("params_file", default_value=""),
        DeclareLaunchArgument("namespace", default_value=""),
        ExecuteProcess(cmd=["gz", "sim", "-r", LaunchConfiguration("world")], output="screen"),
        Node(package="ros_gz_bridge", executable="parameter_bridge", name="gz_bridge", output="screen",
             parameters=[{"config_file": bridge_config, "use_sim_time": True}]),
        IncludeLaunchDescription(
            PythonLaunchDescriptionSource(os.path.join(share, "launch", "robot.launch.py")),
            launch_arguments={"use_sim_time": "true", "params_file": LaunchConfiguration("params_file"),
                              "namespace": LaunchConfiguration("namespace"), "activate_router": "true"}.items()),
    ])
