"""What every CSR-LLM package shares, without llama.cpp: the intent catalogue, the robot
description, the fault log, configuration paths, real-time helpers, statistics and the ROS plumbing
(``ros``)."""
