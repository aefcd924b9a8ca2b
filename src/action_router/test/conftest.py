# Every test run keeps DDS on loopback, in a domain of its own.
from csr_llm_core.ros.dds_env import localhost_dds_env

localhost_dds_env()

# Test helpers (router_rig.py) import by name under --import-mode=importlib.
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent))
