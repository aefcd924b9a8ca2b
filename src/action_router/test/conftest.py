"""Test helpers of this package (router_rig.py) import by name under --import-mode=importlib;
the shared set-up (loopback DDS, paths, catalogue) is the repository's root conftest.py."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
