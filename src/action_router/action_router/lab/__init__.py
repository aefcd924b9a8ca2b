"""The router's benchmarks (in-process closed loop and over DDS). Runtime modules never import these."""
