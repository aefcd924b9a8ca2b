"""Node graph, launch files, runner, MuJoCo simulator and bag record/replay for CSR-LLM."""
