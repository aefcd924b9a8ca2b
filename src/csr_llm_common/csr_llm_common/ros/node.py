"""Run a node until Ctrl-C/SIGTERM and tear it down in the order rclpy needs.

SIGINT/SIGTERM only set an event: the executor spins in its own thread and no signal ever raises
inside a callback or inside rclpy's message conversion. On stop: ``before_stop`` (a lifecycle node
deactivates: zero effort while the context is still valid), executor.shutdown(), join the spin
thread, destroy the node (its last logs and saves), rclpy.shutdown(). rclpy's own handler would
invalidate the context before destroy_node runs. destroy_node is bounded too: once (seen in a test
run) rclpy's final node destruction never returned after every node step had finished, and the
runner had to SIGKILL the process.

The handlers are installed before the node is built, so a stop also reaches a long start (model
load, prefix rebuild): the constructor asks ``stop_requested()`` between its steps and raises
``StartCancelled``; run_node then exits 0 without a node. A constructor that does not get to ask
within START_STOP_S of the signal (a long native call) is left: one line says where it was and the
process exits 0 (it had nothing running yet, so nothing to save).
"""
from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, List, Optional

from csr_llm_common.stop_signal import (StartCancelled, catch_stop_signals, raise_if_stop_requested,  # noqa: F401
                                       request_stop, stop_requested, wait_for_stop)

import rclpy  # noqa: E402 - after stop_signal: a stop during rclpy's import is caught
from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

# Bound on each teardown step, so a stuck callback cannot keep a stopped node alive forever.
EXECUTOR_SHUTDOWN_S = 2.0
SPIN_JOIN_S = 5.0
# destroy_node (the node's own last steps, then rclpy's) gets what is left of this budget, counted
# from the stop, so the whole teardown ends inside the runner's 30 s grace however slow the steps
# before it were on a loaded machine
TEARDOWN_BUDGET_S = 24.0
MIN_DESTROY_S = 1.0
# A node still tearing down this long after the stop signal prints every thread's stack (then a
# supervisor's SIGKILL leaves a log that says where it hung); under the runner's 30 s grace.
TEARDOWN_DUMP_S = 25.0
# A node still inside its constructor this long after the stop signal exits without it.
START_STOP_S = 5.0

def _arm_teardown_dump() -> None:
    faulthandler.dump_traceback_later(TEARDOWN_DUMP_S, exit=False)


def _watch_the_start(built: threading.Event, starter: threading.Thread) -> None:
    """Once a stop arrives, give a constructor still running START_STOP_S to notice, then exit."""
    wait_for_stop()
    if built.wait(START_STOP_S):
        return
    print(f"stop requested during start-up; still starting {START_STOP_S:g} s later, in "
          f"{thread_where(starter)}: exiting without finishing the start (nothing ran yet, nothing to save)",
          file=sys.stderr, flush=True)
    os._exit(0)       # the interpreter's teardown would wait on (or free under) the constructor's native call


def _build(node_factory: Callable[[], Node]) -> Optional[Node]:
    """node_factory() watched for stops; None when the constructor gave up (StartCancelled)."""
    built = threading.Event()
    threading.Thread(target=_watch_the_start, args=(built, threading.current_thread()),
                     name="start-watch", daemon=True).start()
    try:
        raise_if_stop_requested("before the start")    # a stop during the imports
        return node_factory()
    except StartCancelled as cancelled:
        print(f"stop requested during start-up ({cancelled}): exiting before the node runs",
              file=sys.stderr, flush=True)
        return None
    finally:
        built.set()


def _single_threaded(_node: Node) -> Executor:
    # rclpy's MultiThreadedExecutor spins a core at 100 % whenever a ready callback waits for its
    # (mutually exclusive) group (measured: the simulator node starved the graph); our callbacks
    # are short and long work runs in the nodes' own threads
    return SingleThreadedExecutor()


def run_node(node_factory: Callable[[], Node], args: Optional[List[str]] = None, *,
             executor_factory: Callable[[Node], Executor] = _single_threaded,
             after_start: Optional[Callable[[Node], None]] = None,
             before_stop: Optional[Callable[[Node], None]] = None) -> int:
    # a native crash (SIGSEGV, SIGABRT) prints every thread's Python stack to stderr, which the
    # runner keeps in the node's log: the exit code alone does not say where a node died
    faulthandler.enable(all_threads=True)
    # SIGUSR1 prints every thread's stack from C, so it works even when a hung call holds the GIL
    # and no Python signal handler can run (the runner sends it before SIGKILL)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    catch_stop_signals(on_stop=_arm_teardown_dump)
    if stop_requested():     # caught during the imports (stop_signal.py)
        _arm_teardown_dump()
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    node: Optional[Node] = None
    executor: Optional[Executor] = None
    thread: Optional[threading.Thread] = None
    try:
        node = _build(node_factory)
        if node is None:
            return 0
        executor = executor_factory(node)
        executor.add_node(node)

        def spin() -> None:
            try:
                executor.spin()
            except ExternalShutdownException:
                pass
            finally:
                request_stop()   # the context went away (or spin failed): end the process too

        thread = threading.Thread(target=spin, name=f"{node.get_name()}-spin", daemon=True)
        thread.start()
        if after_start is not None:
            after_start(node)
        while not wait_for_stop(0.2):
            pass
    finally:
        stopping_since = time.monotonic()
        if node is not None and before_stop is not None and rclpy.ok():
            try:
                before_stop(node)
            except Exception as exc:  # noqa: BLE001 - best effort on the way out, then tear down
                print(f"{node.get_name()}: stop step failed: {exc}", file=sys.stderr)
        if executor is not None:
            executor.shutdown(timeout_sec=EXECUTOR_SHUTDOWN_S)
        if thread is not None:
            thread.join(timeout=SPIN_JOIN_S)
            if thread.is_alive():     # rclpy does not support destroying a node its executor still runs
                print(f"{thread.name}: still in a callback {SPIN_JOIN_S:g} s after the stop, in "
                      f"{thread_where(thread)}; destroying the node anyway", file=sys.stderr, flush=True)
        if node is not None:
            _destroy_within_bound(node, max(MIN_DESTROY_S, TEARDOWN_BUDGET_S - (time.monotonic() - stopping_since)))
        if rclpy.ok():
            rclpy.shutdown()
        faulthandler.cancel_dump_traceback_later()
        # the stop is done: a late SIGINT (Ctrl-C reaches every process of the terminal's group and
        # launch sends its own) must not hit the interpreter's exit, which restores the default
        # handlers (exit code -2 after a clean stop)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        if node is not None and getattr(node, "exit_without_teardown", False):
            # a thread of the node is still inside native code (a decode): the interpreter's teardown
            # frees what it uses under it (SIGSEGV at exit)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
    return 0


def _destroy_within_bound(node: Node, bound_s: float) -> None:
    """node.destroy_node(), in a helper thread so a stuck DDS teardown cannot hold the process: past
    bound_s one line says where it is, and the process exits (its own steps are logged by then)."""
    errors: List[BaseException] = []

    def destroy() -> None:
        try:
            node.destroy_node()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(exc)

    name = node.get_name()
    worker = threading.Thread(target=destroy, name=f"{name}-destroy", daemon=True)
    worker.start()
    worker.join(bound_s)
    if worker.is_alive():
        print(f"{name}: destroy_node still running after {bound_s:.1f} s, in {thread_where(worker)}; "
              "exiting without it", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(0)          # interpreter teardown would wait on (or free under) the stuck call
    if errors:
        raise errors[0]


def thread_where(thread: threading.Thread) -> str:
    """The innermost frames a thread is in now (for a stop that has to leave it behind)."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return "?"
    return " <- ".join(f"{f.name} ({Path(f.filename).name}:{f.lineno})"
                       for f in reversed(traceback.extract_stack(frame)[-4:]))


def run_lifecycle_node(node_factory: Callable[[], Node], args: Optional[List[str]] = None, *,
                       executor_factory: Callable[[Node], Executor] = _single_threaded) -> int:
    """run_node for a lifecycle node with ``maybe_autostart()`` and ``deactivate_if_active()``."""
    return run_node(node_factory, args, executor_factory=executor_factory,
                    after_start=lambda node: node.maybe_autostart(),
                    before_stop=lambda node: node.deactivate_if_active())


def stamp_or_now(node: Node, header=None) -> float:
    """The header stamp in seconds, or the node clock (sim time when enabled) if the stamp is zero."""
    from .stamps import is_zero, stamp_to_sec
    if header is not None and not is_zero(header.stamp):
        return stamp_to_sec(header.stamp)
    return node.get_clock().now().nanoseconds * 1e-9
