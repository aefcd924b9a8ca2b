"""MuJoCo simulator of the mobile manipulator: plain modules (robot_model, thermal, scenario,
simulator, lockstep) and the thin ROS node (simulator_node)."""
