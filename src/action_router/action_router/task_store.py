"""The task layer shared across robots: a file-backed SQLite store (plain module, no rclpy).

Why SQLite and not a ROS service: level 1 matches in the 1 kHz tick, which must never wait on a
network round trip, so every router keeps its task layer in memory and the store only carries
what is learned (confirmed scenes, map entries of unknown scenes) between robots and runs.
``sqlite3`` ships with Python, is safe for several processes on one file (WAL journal, busy
timeout), and keeps the map across restarts. Robots on different machines would share the file
over a network file system or replace this class with a service; the router only sees
``put`` / ``take_new``.

Threads: ``put`` only queues (the tick calls it); one background thread writes the queue and
polls for rows other processes wrote (every ``poll_s``), which ``take_new`` hands to the tick.
Each row carries its robot ID; isolation is the task layer's (keys of another robot carry
another ID block and never match while isolation is on).
"""
from __future__ import annotations

import collections
import contextlib
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Deque, List, Optional

import numpy as np

BUSY_TIMEOUT_S = 5.0
SCHEMA = """CREATE TABLE IF NOT EXISTS task_entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    writer TEXT NOT NULL, robot TEXT NOT NULL, intent TEXT NOT NULL, variant TEXT NOT NULL,
    kind TEXT NOT NULL, key BLOB NOT NULL, x REAL, y REAL, yaw REAL, zone TEXT, t REAL)"""


@dataclass(frozen=True)
class StoredEntry:
    robot: str
    intent: str
    variant: str              # "" for a map entry (unknown scene, no sequence yet)
    kind: str                 # "map" | "learned"
    key: np.ndarray
    pose: tuple
    zone: str
    t: float


class TaskStore:
    def __init__(self, path: str, poll_s: float = 0.5, on_error=None):
        self.path = path
        self.poll_s = float(poll_s)
        self.writer = uuid.uuid4().hex
        self.on_error = on_error or (lambda text: None)
        self._outbox: Deque[StoredEntry] = collections.deque()
        self._inbox: Deque[StoredEntry] = collections.deque()
        self._last_id = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        # one writer/reader at a time: a sync() must not return while the background thread holds
        # rows it took from the outbox but has not committed yet (or read the same rows twice)
        self._io = threading.Lock()
        self.written = 0
        self.read = 0
        self._create()
        self._load(initial=True)
        self._thread = threading.Thread(target=self._run, name="task-store", daemon=True)
        self._thread.start()

    def _create(self) -> None:
        """Switch the file to WAL (kept in the file) and create the table. SQLite's busy handler
        does not cover a journal-mode switch: robots starting together on a new file get
        'database is locked' at once, so the switch is retried until the busy timeout."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                with self._connect() as db:
                    db.execute("PRAGMA journal_mode=WAL")
                    with db:
                        db.execute(SCHEMA)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def _connect(self) -> contextlib.closing[sqlite3.Connection]:
        return contextlib.closing(sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S))

    # -- tick side -----------------------------------------------------------------------------
    def put(self, entry: StoredEntry) -> None:
        self._outbox.append(entry)
        self._wake.set()

    def take_new(self) -> List[StoredEntry]:
        out = []
        while self._inbox:
            out.append(self._inbox.popleft())
        return out

    # -- background thread ---------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.poll_s)
            self._wake.clear()
            try:
                with self._io:
                    self._flush()
                    self._load()
            except sqlite3.Error as exc:    # keep running: the in-memory layer still works
                self.on_error(f"task store {self.path}: {exc}")

    def _flush(self) -> None:
        if not self._outbox:
            return
        rows = []
        while self._outbox:
            e = self._outbox.popleft()
            rows.append((self.writer, e.robot, e.intent, e.variant, e.kind, np.asarray(e.key, dtype="<f8").tobytes(),
                         *[float(v) for v in e.pose], e.zone, float(e.t)))
        with self._connect() as db, db:
            db.executemany("INSERT INTO task_entries (writer, robot, intent, variant, kind, key, x, y, yaw, zone, t) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        self.written += len(rows)

    def _load(self, initial: bool = False) -> None:
        with self._connect() as db:
            rows = db.execute("SELECT id, writer, robot, intent, variant, kind, key, x, y, yaw, zone, t "
                              "FROM task_entries WHERE id > ? ORDER BY id", (self._last_id,)).fetchall()
        for row in rows:
            self._last_id = int(row[0])
            if row[1] == self.writer and not initial:
                continue        # this process's own rows are in its layer already
            self._inbox.append(StoredEntry(str(row[2]), str(row[3]), str(row[4]), str(row[5]),
                                           np.frombuffer(row[6], dtype="<f8").copy(),
                                           (row[7] or 0.0, row[8] or 0.0, row[9] or 0.0), str(row[10] or ""),
                                           float(row[11] or 0.0)))
            self.read += 1

    def sync(self) -> None:
        """Write what is queued and read what is new now (tests, shutdown)."""
        with self._io:
            self._flush()
            self._load()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5.0)
        try:
            with self._io:
                self._flush()
        except sqlite3.Error as exc:
            self.on_error(f"task store {self.path}: {exc}")


def open_store(path: str, poll_s: float, on_error=None) -> Optional[TaskStore]:
    """The store at path ("" = none); a file SQLite cannot open is an OSError naming it."""
    if not path:
        return None
    try:
        return TaskStore(path, poll_s, on_error)
    except sqlite3.Error as exc:
        raise OSError(f"task store {path}: {exc}") from exc
