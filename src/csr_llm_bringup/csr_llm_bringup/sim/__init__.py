"""MuJoCo simulator of the mobile manipulator: plain modules (robot_model, mujoco_world, commands,
traction, thermal, world_actions, readouts, simulator (the facade over them), scenario_format,
scenario, physics_loop, control_link) and the thin ROS node (simulator_node, with its
sensor_publishers; hosting runs a component the profile names in the simulator's process)."""
