"""The process's stop request (SIGINT/SIGTERM), caught from the first import on (plain module, no rclpy).

A node process (its command line has ``--ros-args``, as launch and the runner start it) catches
SIGINT and SIGTERM as soon as this module is imported, before the slow imports (rclpy, llama.cpp)
that come after it: a Ctrl-C then never meets Python's default handler (a KeyboardInterrupt
traceback, exit code -2). The signal only sets an event; run_node (ros/node.py) acts on it, and a
long start asks ``stop_requested()`` between its steps. Other processes (tests, tools) keep their
own handlers until run_node installs these.

A process started with SIGINT blocked (``ros2 launch`` starts our nodes so: a Ctrl-C in the
interpreter's own start-up, before any of our code runs, would otherwise end it with -2) gets the
signal, held pending meanwhile, once the handlers are in place: installing them unblocks it.
With ``CSR_LLM_STOP_WITH_PARENT=1`` in its environment (our launch files set it) the process is also
asked to stop when the process that started it exits: launch ending while it was still starting a
node (a Ctrl-C in that instant) leaves no node running on its own.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from typing import Callable, List, Optional, Sequence

STOP_WITH_PARENT_ENV = "CSR_LLM_STOP_WITH_PARENT"
PR_SET_PDEATHSIG = 1      # linux/prctl.h

_STOP = threading.Event()
_on_stop: List[Callable[[], None]] = []


class StartCancelled(Exception):
    """Raised by a node's constructor that saw stop_requested(): the start is given up, not failed."""


def stop_requested() -> bool:
    """True once this process was asked to stop (SIGINT/SIGTERM)."""
    return _STOP.is_set()


def raise_if_stop_requested(step: str) -> None:
    """StartCancelled (naming the start step reached) when a stop signal arrived."""
    if _STOP.is_set():
        raise StartCancelled(step)


def wait_for_stop(timeout: Optional[float] = None) -> bool:
    return _STOP.wait(timeout)


def request_stop() -> None:
    _STOP.set()
    for hook in list(_on_stop):
        hook()


def catch_stop_signals(on_stop: Optional[Callable[[], None]] = None) -> None:
    """SIGINT and SIGTERM set the stop request (and run on_stop); main thread only."""
    if on_stop is not None and on_stop not in _on_stop:
        _on_stop.append(on_stop)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: request_stop())
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def hold_stop_signals(hold: bool) -> None:
    """Block (True) or unblock SIGINT in this thread; a child started meanwhile inherits the block
    over exec, so a Ctrl-C reaching it before its handler exists waits for catch_stop_signals."""
    signal.pthread_sigmask(signal.SIG_BLOCK if hold else signal.SIG_UNBLOCK, {signal.SIGINT})


def is_node_process(argv: Sequence[str]) -> bool:
    return "--ros-args" in argv


def stop_with_parent() -> bool:
    """SIGTERM (a stop request) once the parent exits; a stop at once if it already has. Linux only:
    False where prctl is missing."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    if prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        return False
    if os.getppid() == 1:           # the parent exited before the request was in place
        request_stop()
    return True


if is_node_process(sys.argv) and threading.current_thread() is threading.main_thread():
    catch_stop_signals()
    if os.environ.get(STOP_WITH_PARENT_ENV) == "1":
        stop_with_parent()
