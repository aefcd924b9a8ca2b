"""MuJoCo simulator of the mobile manipulator: plain modules (robot_model, thermal, scenario_format,
scenario, world_actions, readouts, simulator, lockstep) and the thin ROS node (simulator_node, with
its sensor_publishers)."""
