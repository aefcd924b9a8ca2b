"""Warm restart for the reasoner: save and restore the logical state and, on an embedded primary,
its KV cache; a server keeps its own cache, so only the logical state is ours (plain module, no rclpy).

A directory holds `csr_state.json` (the live chunks and the chunk sequence, written atomically)
and, after a full save, `kv_state.bin` (the primary's KV cache, engine.py/kv_state_file.py).
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Optional, Union

from .asr_rebuilder import AsrRebuilder
from .kv_state_file import StateFileError
from .reasoner_primary import PrimaryView
from .resource_roles import ResourceRoles

STATE_FILE = "csr_state.json"
KV_FILE = "kv_state.bin"


class Checkpointer:
    def __init__(self, view: PrimaryView, roles: ResourceRoles, rebuilder: AsrRebuilder, log: logging.Logger):
        self.view = view
        self.roles = roles
        self.rebuilder = rebuilder
        self.log = log

    def save(self, directory: Union[str, Path], *, local: bool) -> Optional[dict]:
        """Save the logical state and, `local` (an embedded primary, synced to its view by the
        caller), its KV cache: None while a rebuild is pending (the cache is not the state then)."""
        directory = Path(directory)
        with self.view.locked():
            if local and (self.rebuilder.reconciling or not self.view.holds_state()):
                self.log.warning("state not saved: reconciliation in progress")
                return None
            snapshot = self.view.logical_snapshot()
        primary: Any = self.roles.primary     # an embedded one saves its KV cache (not in the protocol)
        version = self.view.state.version
        directory.mkdir(parents=True, exist_ok=True)
        stamp = {"state_version": version, "kv": f"kept by {primary.name}'s server"}
        if local:
            stamp = primary.save_state(directory / KV_FILE, state_version=version)
        _write_atomically(directory / STATE_FILE, json.dumps(snapshot))
        return stamp

    def checkpoint(self, directory: Union[str, Path]) -> int:
        """Save the logical state alone (live chunks, sequence), so a crash (kill -9) loses at most
        what arrived since; returns the chunks saved. Cheap, and never takes the engine: decisions
        go on. A KV file of an earlier state is removed (a restore then recomputes the prefix)."""
        directory = Path(directory)
        with self.view.locked():
            snapshot = self.view.logical_snapshot()
            chunks = len(self.view.state.chunks)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / KV_FILE).unlink(missing_ok=True)
        _write_atomically(directory / STATE_FILE, json.dumps(snapshot))
        return chunks

    def restore(self, directory: Union[str, Path]) -> dict:
        """Restore a saved state: the live chunks, and the KV cache when it matches exactly.

        Returns {"chunks", "kv_restored", "tokens"}; raises StateFileError when nothing usable is there.
        """
        directory = Path(directory)
        try:
            snapshot = json.loads((directory / STATE_FILE).read_text())
        except (OSError, ValueError) as err:
            raise StateFileError(f"saved CSR state {directory / STATE_FILE}: unreadable ({err})") from err
        with self.view.locked():
            primary: Any = self.roles.primary
            try:
                self.view.restore(snapshot, getattr(primary, "n_vocab", None))
            except (KeyError, TypeError, ValueError) as err:
                raise StateFileError(f"saved CSR state in {directory} refused: {err}") from err
            target = self.view.snapshot()
            kv_restored = False
            try:
                if primary.is_local and not (directory / KV_FILE).exists():
                    self.log.info("no saved KV cache with this state (a checkpoint): the prefix is recomputed")
                elif primary.is_local:
                    primary.load_state(directory / KV_FILE, state_version=self.view.state.version,
                                       expected_tokens=target.tokens)
                    kv_restored = True
            except StateFileError as err:
                self.log.error("%s; the prefix will be recomputed", err)
                primary.clear()
            return {"chunks": len(self.view.state.chunks), "kv_restored": kv_restored, "tokens": target.length}


def _write_atomically(path: Path, text: str) -> None:
    """A reader (or a restart after kill -9) sees the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
