"""Benchmarks, evaluation and training of the reasoning side (plain modules and command-line tools).

Nothing here is imported by the runtime nodes; these modules import the runtime, never the reverse.
"""
