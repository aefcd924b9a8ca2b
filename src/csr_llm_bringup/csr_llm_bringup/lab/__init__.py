"""Benchmarks and training runs over the whole graph (decision quality, real-time factor, scene
keys, generated training scenarios). The runtime nodes and the runner never import these."""
