"""The one home of the suite's ROS plumbing, shared by every node of every package.

``node`` (run a node or a lifecycle node until Ctrl-C/SIGTERM, in the order rclpy needs),
``spin`` (a background spinner for tests, benchmarks and tools), ``qos`` (the QoS profiles of our
topics), ``stamps`` (header stamp <-> seconds), ``geometry`` (yaw from a quaternion),
``intent_args`` (csr_llm_msgs/IntentArgument <-> dict), ``params`` (declared parameters as a dict),
``dds_env`` (loopback-only discovery, a private domain). Only ``node``, ``spin``, ``qos`` and
``params`` import rclpy; the others use message classes only. Plain logic modules import none
of these.
"""
