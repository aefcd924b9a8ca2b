"""Warm restart for the reasoner: save and restore the logical state and, on an embedded
primary, its KV cache (a server keeps its own cache; only the logical state is ours)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Optional, Union

from .engine import StateFileError


class WarmRestartMixin:
    """Reasoner methods (the attributes are Reasoner's)."""
    primary: Any
    state: Any
    log: Any
    last_seq: Optional[int]
    seq_gaps: int
    sequence_epoch: int
    _engine_lock: Any
    _lock: Any
    _primary_idle: Any
    _reconciling: bool
    _primary_view: list
    _primary_last_seq: int
    wait_reconciled: Callable[..., bool]

    def _sync_primary(self) -> None: ...

    def _set_primary_view(self, tokens: list, version: int) -> None: ...

    def start_sequence(self, epoch: int, first_seq: int) -> None:
        """A restarted aggregator: its sequence (under a newer epoch) continues this state."""
        with self._lock:
            self.sequence_epoch = int(epoch)
            self.last_seq = int(first_seq) - 1

    def _logical_snapshot(self) -> dict:
        """The state and sequence a restart continues from (call holding self._lock)."""
        return dict(self.state.snapshot(), last_seq=self.last_seq, seq_gaps=self.seq_gaps,
                    sequence_epoch=self.sequence_epoch)

    def save(self, directory: Union[str, Path]) -> Optional[dict]:
        """Save the logical state and an embedded primary's KV cache (skipped while reconciling).

        A server primary is not touched (it may be down): the logical state alone is saved."""
        directory = Path(directory)
        with self._engine_lock:
            self._primary_idle.clear()
            try:
                local = self.primary.is_local
                if local:
                    self._sync_primary()
                with self._lock:
                    if local and (self._reconciling or self._primary_view != self.state.tokens()):
                        self.log.warning("state not saved: reconciliation in progress")
                        return None
                    snapshot = self._logical_snapshot()
                directory.mkdir(parents=True, exist_ok=True)
                stamp = {"state_version": self.state.version, "kv": f"kept by {self.primary.name}'s server"}
                if local:     # a server keeps its own cache: only the logical state is ours
                    stamp = self.primary.save_state(directory / "kv_state.bin", state_version=self.state.version)
                _write_atomically(directory / "csr_state.json", json.dumps(snapshot))
                return stamp
            finally:
                self._primary_idle.set()

    def save_at_stop(self, directory: Union[str, Path], wait_s: float) -> dict:
        """The shutdown save: the state with its KV cache when a pending reconciliation ends within
        wait_s, else the logical state alone (a restart recomputes the prefix), so a stop never waits
        on a slow rebuild and never loses an accepted chunk. Returns {"chunks", "kv_saved"}."""
        if self.wait_reconciled(timeout=wait_s):
            stamp = self.save(directory)
            if stamp is not None:
                with self._lock:
                    return {"chunks": len(self.state.chunks), "kv_saved": bool(self.primary.is_local)}
        return {"chunks": self.checkpoint(directory), "kv_saved": False}

    def checkpoint(self, directory: Union[str, Path]) -> int:
        """Save the logical state alone (live chunks, sequence), so a crash (kill -9) loses at most
        what arrived since; returns the chunks saved. Cheap, and never takes the engine: decisions
        go on. A KV file of an earlier state is removed (a restore then recomputes the prefix)."""
        directory = Path(directory)
        with self._lock:
            snapshot = self._logical_snapshot()
            chunks = len(self.state.chunks)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "kv_state.bin").unlink(missing_ok=True)
        _write_atomically(directory / "csr_state.json", json.dumps(snapshot))
        return chunks

    def restore(self, directory: Union[str, Path]) -> dict:
        """Restore a saved state: the live chunks, and the KV cache when it matches exactly.

        Returns {"chunks", "kv_restored", "tokens"}; raises StateFileError when nothing usable is there.
        """
        directory = Path(directory)
        try:
            snapshot = json.loads((directory / "csr_state.json").read_text())
        except (OSError, ValueError) as err:
            raise StateFileError(f"saved CSR state {directory / 'csr_state.json'}: unreadable ({err})") from err
        with self._engine_lock, self._lock:
            empty = self.state.snapshot()      # what a refused file leaves: the state as it was
            try:
                self.state.restore(snapshot)
                _check_vocabulary(self.state, getattr(self.primary, "n_vocab", None))
            except (KeyError, TypeError, ValueError) as err:
                self.state.restore(empty)
                raise StateFileError(f"saved CSR state in {directory} refused: {err}") from err
            self.last_seq = snapshot.get("last_seq")
            self.seq_gaps = int(snapshot.get("seq_gaps", 0))
            self.sequence_epoch = int(snapshot.get("sequence_epoch", 0))
            self._set_primary_view(self.state.tokens(), self.state.version)
            self._primary_last_seq = -1 if self.last_seq is None else self.last_seq
            kv_restored = False
            try:
                if self.primary.is_local and not (directory / "kv_state.bin").exists():
                    self.log.info("no saved KV cache with this state (a checkpoint): the prefix is recomputed")
                elif self.primary.is_local:
                    self.primary.load_state(directory / "kv_state.bin", state_version=self.state.version,
                                            expected_tokens=self._primary_view)
                    kv_restored = True
            except StateFileError as err:
                self.log.error("%s; the prefix will be recomputed", err)
                self.primary.clear()
            return {"chunks": len(self.state.chunks), "kv_restored": kv_restored, "tokens": len(self._primary_view)}


def _write_atomically(path: Path, text: str) -> None:
    """A reader (or a restart after kill -9) sees the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _check_vocabulary(state: Any, n_vocab: Optional[int]) -> None:
    """ValueError when a restored chunk holds a token id outside the model's vocabulary (a corrupt
    or foreign file): every decision on such a prefix would fail in llama_decode."""
    if not n_vocab:
        return
    for chunk in state.chunks:
        bad = [t for t in chunk.tokens if not 0 <= int(t) < n_vocab]
        if bad:
            raise ValueError(f"chunk {chunk.seq} holds token ids outside the vocabulary (e.g. {bad[0]}; "
                             f"n_vocab={n_vocab})")
