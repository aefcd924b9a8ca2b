"""ros2 launch csr_llm_bringup robot_remote.launch.py [params_file:=...] [namespace:=...] [use_sim_time:=...]

Nodes, parameters and remaps come from config/robot_remote.yaml (the same description the runner uses).
"""
from csr_llm_bringup.launch_graph import generate_launch_description as _generate


def generate_launch_description():
    return _generate("robot_remote")
