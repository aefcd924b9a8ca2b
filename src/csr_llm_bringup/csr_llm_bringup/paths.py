"""Where the suite's configuration lives: $CSR_LLM_CONFIG_DIR, the source tree, or the install share.

Only the bringup package looks it up (it installs config/ into its own share directory); the nodes
of the lower packages receive file paths as parameters, which profiles give relative to their folder.
"""
from __future__ import annotations

import os
from pathlib import Path

_SOURCE_CONFIG = Path(__file__).resolve().parents[3] / "config"


def config_dir() -> Path:
    if os.environ.get("CSR_LLM_CONFIG_DIR"):
        return Path(os.environ["CSR_LLM_CONFIG_DIR"])
    if (_SOURCE_CONFIG / "intents.yaml").is_file():
        return _SOURCE_CONFIG
    try:  # installed by colcon: config/ is shipped in this package's share directory
        from ament_index_python.packages import get_package_share_directory
        return Path(get_package_share_directory("csr_llm_bringup")) / "config"
    except (ImportError, LookupError, ValueError):
        return _SOURCE_CONFIG


def config_file(name: str) -> Path:
    return config_dir() / name
