"""Paths: parameters with ``~`` and environment variables expanded (so ``~/.cache/...`` in a parameter
file means the user's home, never a literal ``./~`` folder), and where the suite's config/ lives."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Union


def expand_path(value: Union[str, Path]) -> str:
    """'' stays '' (meaning "not set"); anything else gets ~ and $VARS expanded."""
    text = str(value)
    return os.path.expandvars(os.path.expanduser(text)) if text else ""


def required_file(value: Union[str, Path], parameter: str) -> Path:
    """An existing file named by a parameter, or ValueError with one clear line."""
    text = expand_path(value)
    if not text:
        raise ValueError(f"parameter {parameter} is not set (the launch files and csr-llm set it to the "
                         f"workspace's config/; pass --ros-args -p {parameter}:=PATH when running alone)")
    path = Path(text)
    if not path.is_file():
        raise ValueError(f"parameter {parameter}: no such file {path}")
    return path


_SOURCE_CONFIG = Path(__file__).resolve().parents[3] / "config"


def config_dir() -> Path:
    """The suite's config/: $CSR_LLM_CONFIG_DIR, the source checkout, or csr_llm_bringup's share."""
    if os.environ.get("CSR_LLM_CONFIG_DIR"):
        return Path(os.environ["CSR_LLM_CONFIG_DIR"])
    if (_SOURCE_CONFIG / "intents.yaml").is_file():
        return _SOURCE_CONFIG
    try:  # installed by colcon: config/ is shipped in csr_llm_bringup's share directory
        from ament_index_python.packages import get_package_share_directory
        return Path(get_package_share_directory("csr_llm_bringup")) / "config"
    except (ImportError, LookupError, ValueError):
        return _SOURCE_CONFIG


def config_file(name: str) -> Path:
    return config_dir() / name


_SOURCE_MSGS = Path(__file__).resolve().parents[2] / "msgs" / "msg"


def msg_dir() -> Path:
    """csr_llm_msgs' .msg files: the installed share directory (AMENT_PREFIX_PATH), else the source tree."""
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        candidate = Path(prefix) / "share" / "csr_llm_msgs" / "msg"
        if prefix and candidate.is_dir():
            return candidate
    return _SOURCE_MSGS
