"""Path parameters: ``~`` and environment variables expanded, so ``~/.cache/...`` in a parameter
file means the user's home and never a literal ``./~`` folder."""
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
