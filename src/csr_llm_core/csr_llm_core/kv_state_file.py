"""A LlamaEngine's saved KV state file (plain module, no rclpy).

The file holds llama.cpp's state data behind a header stamped with the model checksum, the CSR
state version and the token list the cache holds; a load refuses it unless all of them match.
Layout: STATE_MAGIC, lengths (header, tokens, data), JSON header, int32 tokens, state data.
"""
from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import BinaryIO, List, Optional, Sequence, Tuple, Union

import numpy as np

from .model import model_checksum

STATE_MAGIC = b"CSRKV001"


class StateFileError(RuntimeError):
    """A saved KV state file is unreadable, truncated, or does not match this engine/state."""


def tokens_digest(tokens: Sequence[int]) -> str:
    return hashlib.sha256(np.asarray(tokens, dtype=np.int32).tobytes()).hexdigest()


def write_state_file(path: Union[str, Path], data: memoryview, *, model_path: Path, tokens: Sequence[int],
                     n_ctx: int, n_swa: int, state_version: int) -> dict:
    """Write `data` (llama.cpp's state) with its stamp, atomically; returns the stamp."""
    stamp = {"model_sha256": model_checksum(model_path), "state_version": int(state_version),
             "n_tokens": len(tokens), "tokens_sha256": tokens_digest(tokens), "n_ctx": n_ctx,
             "swa_window": n_swa, "data_sha256": hashlib.sha256(data).hexdigest()}
    header = json.dumps(stamp).encode()
    token_bytes = np.asarray(tokens, dtype=np.int32).tobytes()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    with open(partial, "wb") as handle:
        handle.write(STATE_MAGIC + struct.pack("<IIQ", len(header), len(token_bytes), len(data)))
        handle.write(header)
        handle.write(token_bytes)
        handle.write(data)
    partial.replace(path)
    return stamp


def read_state_stamp(path: Union[str, Path]) -> dict:
    with open(path, "rb") as handle:
        return _read_header(handle, path)[0]


def read_state_file(path: Union[str, Path], *, model_path: Path, state_version: int, n_ctx: int, n_swa: int,
                    expected_tokens: Optional[Sequence[int]] = None) -> Tuple[dict, List[int], bytes]:
    """(stamp, tokens, state data) of a file that matches this engine and state; StateFileError else."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            stamp, token_len, data_len = _read_header(handle, path)
            token_bytes = handle.read(token_len)
            data = handle.read(data_len)
    except OSError as err:
        raise StateFileError(f"saved state {path}: cannot be read ({err.strerror})") from err
    if len(token_bytes) != token_len or len(data) != data_len:
        raise StateFileError(f"saved state {path}: truncated ({len(data)} of {data_len} state bytes)")
    tokens = np.frombuffer(token_bytes, dtype=np.int32).tolist()
    problems = []
    if stamp.get("model_sha256") != model_checksum(model_path):
        problems.append("it was saved with another model")
    if stamp.get("state_version") != state_version:
        problems.append(f"it covers state version {stamp.get('state_version')}, expected {state_version}")
    if stamp.get("n_tokens") != len(tokens) or stamp.get("tokens_sha256") != tokens_digest(tokens):
        problems.append("its token list is inconsistent")
    if expected_tokens is not None and list(expected_tokens) != tokens:
        problems.append(f"it covers {len(tokens)} tokens that differ from the {len(expected_tokens)} expected")
    if len(tokens) > n_ctx:
        problems.append(f"it holds {len(tokens)} tokens, more than n_ctx={n_ctx}")
    if stamp.get("swa_window", 0) != n_swa:    # llama.cpp loads it, and then decides on garbage
        problems.append(f"its sliding-window cache keeps {stamp.get('swa_window', 0) or 'all'} positions, "
                        f"this context {n_swa or 'all'} (swa_full differs)")
    if stamp.get("data_sha256") != hashlib.sha256(data).hexdigest():
        problems.append("its KV data does not match its checksum (corrupt, or saved without one)")
    if problems:
        raise StateFileError(f"saved state {path} refused: " + "; ".join(problems))
    return stamp, tokens, data


def _read_header(handle: BinaryIO, path: Union[str, Path]) -> Tuple[dict, int, int]:
    head = handle.read(len(STATE_MAGIC) + 16)
    if len(head) < len(STATE_MAGIC) + 16 or not head.startswith(STATE_MAGIC):
        raise StateFileError(f"saved state {path}: not a CSR-LLM KV state file")
    header_len, token_len, data_len = struct.unpack("<IIQ", head[len(STATE_MAGIC):])
    raw = handle.read(header_len)
    try:
        stamp = json.loads(raw)
    except ValueError as err:
        raise StateFileError(f"saved state {path}: corrupt header") from err
    return stamp, token_len, data_len
