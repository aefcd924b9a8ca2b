"""Reasoning node: StateChunk stream -> CSR token store (+ ASR) -> Decision at decision_hz and on events."""
from __future__ import annotations

# first: a stop (Ctrl-C) during the slow imports below is caught, not a KeyboardInterrupt
from csr_llm_common.stop_signal import StartCancelled, raise_if_stop_requested, stop_requested

import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable, ContextManager, Dict, Optional, Tuple

from rclpy.node import Node

from std_msgs.msg import String

from csr_llm_msgs.msg import CsrStatus, Decision, RouterStatus, StateChunk

from .backend import BackendUnavailable, DecisionRefused, NoResourceAvailable
from csr_llm_common.catalogue import IntentCatalogue, PausedTask
from .csr_state import ChunkRejected, new_session_id
from .decision_rounds import DecisionRounds
from .decision_scheduler import ChunkHeader, DecisionScheduler, RunningTaskSource, SchedulePolicy, Trigger
from .engine import StateFileError
from .failover import ResourceHealth
from csr_llm_common.faults import FaultLog
from .http_backend import RemoteResource
from .model import ModelFileError
from csr_llm_common.paths import expand_path, required_file
from .prompt import PromptTemplate
from .reasoner import Reasoner
from csr_llm_common.realtime import pin_threads
from .reasoning_config import ReasoningNodeConfig, make_resources, resource_names
from .running_task import RunningTask
from .status_message import csr_status_message
from csr_llm_common.ros import qos
from csr_llm_common.ros.intent_args import arguments_to_dict, dict_to_arguments
from csr_llm_common.backoff import Backoff
from csr_llm_common.ros.node import run_node, thread_where
from csr_llm_common.ros.params import declare_dataclass
from csr_llm_common.ros.spin import take_waiting
from csr_llm_common.ros.stamps import set_stamp, stamp_to_sec

# At stop the decision thread finishes its decision (one took over 10 s on a slow AVX2-only machine);
# with the steps after it, inside the 22 s destroy_node bound (ros/node.py) under the runner's 30 s grace.
DECISION_JOIN_S = 16.0
# then a pending rebuild gets this long to finish before the state is saved without its KV cache
# (a slow machine's rebuild can take longer than the whole teardown bound)
RECONCILE_AT_STOP_S = 3.0


class ReasoningNode(Node):
    def __init__(self, **kwargs):
        super().__init__("reasoning", **kwargs)
        log = self.get_logger()
        cfg, remote, intents_file, prompt_file = self._read_parameters()
        self._place_threads(cfg, remote)
        model_path = expand_path(cfg.model_path)
        session = new_session_id()
        archive_path = str(cfg.archive_file(session))
        self.state_dir = expand_path(cfg.state_dir)
        self.decision_hz = cfg.decision_hz
        self.scheduler: DecisionScheduler[StateChunk] = DecisionScheduler(
            SchedulePolicy(decision_hz=cfg.decision_hz, trigger=cfg.decision_trigger,
                           decide_on_request=cfg.decide_on_request,
                           checkpoint_period_s=float(cfg.checkpoint_period_s) if self.state_dir else 0.0),
            clock=self._now, append_stops=lambda seconds: self.reasoner.pump_should_stop(seconds))
        self.rounds: DecisionRounds[StateChunk] = DecisionRounds(self.scheduler, self)
        try:
            catalogue = IntentCatalogue.from_file(intents_file)
            template = PromptTemplate.from_file(prompt_file)
            self.engines, self.fallback = self._make_resources_once_up(cfg, remote, model_path)
            health = ResourceHealth(_RosLogAdapter(log), first_retry_s=cfg.health_first_retry_s,
                                    max_retry_s=cfg.health_max_retry_s)
            self.reasoner = Reasoner(self.engines, catalogue, template, cfg.reasoner, archive_path=archive_path,
                                     logger=_RosLogAdapter(log), fallback=self.fallback, health=health,
                                     session=session)
        except (ModelFileError, ValueError, OSError, BackendUnavailable, NoResourceAvailable) as err:
            log.fatal(f"cannot start: {err}")
            raise SystemExit(2) from err
        self.running = RunningTaskSource(cfg.running_source, self.reasoner.catalogue.paused_after)
        self._create_fault_logs()
        try:    # a stop during the long steps (model load, prefix rebuild) gives the start up
            raise_if_stop_requested("model loaded")
            self._restore_state()
            self.decision_id = 0
            self._evaluate_prefix()
        except StartCancelled:
            self._close_engines()
            raise
        self._wire(cfg.status_hz)
        where = ", ".join(f"{e.name} on {getattr(e, 'server', 'this machine')}"
                          + (f", sliding-window cache {e.n_swa} positions" if getattr(e, "n_swa", 0) else "")
                          for e in self.engines)
        log.info(f"reasoning ({where}): mode={cfg.reasoner.mode} tau_mem={cfg.reasoner.tau_mem} "
                 f"n_ctx={cfg.context_size} decision_hz={self.decision_hz} archive={archive_path}")

    # --- start -----------------------------------------------------------------------------
    def _read_parameters(self) -> Tuple[ReasoningNodeConfig, Dict[str, RemoteResource], Path, Path]:
        """Every parameter is read-only (set in the parameter file): none is safe to change under a
        running reasoner, so `ros2 param set` is refused with the reason."""
        try:
            cfg = declare_dataclass(self, ReasoningNodeConfig()).validated()
            remote = {name: declare_dataclass(self, RemoteResource(url=""), prefix=f"{name.lower()}.")
                      for name in resource_names(cfg.reasoner.mode)}
            return cfg, remote, required_file(cfg.intents_file, "intents_file"), \
                required_file(cfg.prompt_file, "prompt_file")
        except ValueError as err:
            self.get_logger().fatal(f"cannot start: {err}")
            raise SystemExit(2) from err

    def _make_resources_once_up(self, cfg: ReasoningNodeConfig, remote: Dict[str, RemoteResource],
                                model_path: str) -> Tuple[list, object]:
        """make_resources, waiting with back-off while a server does not answer (one line per change
        of state, not a crash and a respawn per try); a stop signal ends the wait."""
        log = self.get_logger()
        backoff = Backoff("the reasoning servers", first_s=1.0, max_s=cfg.health_max_retry_s)
        while True:
            try:
                resources = make_resources(cfg, remote, model_path)
            except BackendUnavailable as err:
                line = backoff.failed(str(err))
                if line:
                    log.warning(line)
                if not backoff.sleep(stop_requested):
                    raise StartCancelled("waiting for the reasoning servers") from None
                continue
            line = backoff.succeeded()
            if line:
                log.info(line)
            return resources

    def _close_engines(self) -> None:
        for engine in self.engines + ([self.fallback] if self.fallback else []):
            engine.close()

    def _place_threads(self, cfg: ReasoningNodeConfig, remote: Dict[str, RemoteResource]) -> None:
        log = self.get_logger()
        placed = pin_threads(cfg.cpu_affinity)   # before llama.cpp starts its threads: they inherit it
        if placed:
            log.info(placed)
        cpus = len(os.sched_getaffinity(0))
        for clamped in (cfg.clamp_append_threads(cpus), cfg.pause_rebuild_without_a_core(cpus, remote)):
            if clamped:
                log.warning(clamped)

    def _create_fault_logs(self) -> None:
        log = self.get_logger()
        # a refused or impossible decision is never published: first of a kind logged, the rest counted
        self.decision_faults = FaultLog(log.warning, {
            "refused_decision": "a resource answered with something that is not a catalogued decision",
            "no_resource": "every reasoning resource is down; decisions resume when one answers"},
            counted_in="csr_status")
        # dropped chunks: the first of each kind is logged, the rest counted
        self.chunk_faults = FaultLog(log.info, {
            "duplicate_chunk": "a chunk already in the state was dropped (the aggregator's history after a "
                               "restart, or a duplicate)",
            "stale_epoch": "a chunk from an aggregator older than the one now publishing was dropped"},
            counted_in="csr_status dropped_chunks")

    def _restore_state(self) -> None:
        if not (self.state_dir and (Path(self.state_dir) / "csr_state.json").exists()):
            return
        try:
            info = self.reasoner.restore(self.state_dir)
            self.get_logger().info(f"warm restart from {self.state_dir}: {info['chunks']} chunks, "
                                   f"{info['tokens']} tokens, KV {'restored' if info['kv_restored'] else 'recomputed'}")
        except StateFileError as err:
            self.get_logger().error(f"{err}; starting with an empty state")

    def _evaluate_prefix(self) -> None:
        """The head (and a restored state) in the KV cache before the first chunk: the first decision
        does not pay for it."""
        if not self.reasoner.primary.is_local:
            return
        started = time.monotonic()
        if not self.reasoner.pump(preempt=stop_requested):    # stops between rebuild batches
            raise StartCancelled(f"prefix rebuild, {self.reasoner.uncached_tokens} tokens left")
        self.get_logger().info(f"prefix evaluated on {self.reasoner.primary.name}: "
                               f"{self.reasoner.status()['prefix_tokens']} tokens in "
                               f"{time.monotonic() - started:.1f} s")

    def _wire(self, status_hz: float) -> None:
        self.decision_pub = self.create_publisher(Decision, "decision", qos.DECISIONS,
                                                  event_callbacks=qos.quiet_publisher())
        self.status_pub = self.create_publisher(CsrStatus, "csr_status", 10, event_callbacks=qos.quiet_publisher())
        self._status_sub = self.create_subscription(RouterStatus, "router_status", self._on_router_status, 10)
        self.create_subscription(StateChunk, "state_chunks", self._on_chunk, qos.CHUNK_STREAM)
        self.create_subscription(String, "decision_request", self._on_request, 10)
        self.create_timer(1.0 / status_hz, self.publish_status)
        self._thread = threading.Thread(target=self._decision_loop, name="decision-loop", daemon=True)
        self._thread.start()

    # --- callbacks -------------------------------------------------------------------------
    def _on_chunk(self, msg: StateChunk) -> None:
        # Chunks are applied by the decision thread, in order, so a decision's prefix is exactly
        # the chunks up to the one that triggered it (not whatever arrived while it waited).
        if self.running.reads_reports_by_stamp:   # the router's reports sent before this chunk, even if
            take_waiting([self._status_sub])     # their reader is behind
        self.scheduler.submit_chunk(msg)

    def _on_request(self, msg: String) -> None:
        if not self.scheduler.accepts_requests:
            return
        self.get_logger().info(f"decision requested: {msg.data or '(no reason given)'}")
        self.scheduler.request()

    def _on_router_status(self, msg: RouterStatus) -> None:
        task = RunningTask(msg.active_intent, int(msg.interrupt_depth),
                           PausedTask(msg.paused_intent, arguments_to_dict(msg.paused_arguments))
                           if msg.paused_intent else None)
        self.running.router_reported(stamp_to_sec(msg.header.stamp), task)

    # --- decision thread -------------------------------------------------------------------
    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _decision_loop(self) -> None:
        self.reasoner.warm_secondary()     # in the background: the first eviction then rebuilds the live chunks only
        while (work := self.scheduler.wait_for_work(self.reasoner.last_seq)) is not None:
            self.rounds.run(work)
            self._maybe_checkpoint()

    def _maybe_checkpoint(self) -> None:
        """Every checkpoint_period_s, the logical state if it changed (no engine work, no stall)."""
        if not self.scheduler.take_checkpoint_due(self.reasoner.last_seq):
            return
        try:
            self.reasoner.checkpoint(self.state_dir)
            self.scheduler.checkpointed(self.reasoner.last_seq)
        except OSError as err:
            self.decision_faults.record("checkpoint", f"could not checkpoint to {self.state_dir}: {err}")

    # --- what a round does (decision_rounds.RoundActions) -------------------------------------
    def chunk_header(self, msg: StateChunk) -> ChunkHeader:
        return ChunkHeader(int(msg.seq), int(msg.kind), stamp_to_sec(msg.header.stamp), int(msg.epoch))

    def state_sequence(self) -> Tuple[int, Optional[int]]:
        return self.reasoner.sequence_epoch, self.reasoner.last_seq

    def start_sequence(self, epoch: int, seq: int) -> None:
        if self.reasoner.sequence_epoch:
            self.get_logger().info(f"the aggregator restarted (sequence epoch {epoch}): its chunks from "
                                   f"seq {seq} on continue the state")
        self.reasoner.start_sequence(epoch, seq)

    def chunk_dropped(self, fault: str, detail: str) -> None:
        self.chunk_faults.record(fault, detail)

    def add_chunk(self, msg: StateChunk, stamp: float) -> bool:
        try:
            self.reasoner.add_chunk(msg.seq, msg.text, source=msg.source_topic, kind=msg.kind, stamp=stamp)
            return True
        except ChunkRejected as err:
            self.get_logger().warning(str(err))
            return False

    def pump(self, preempt: Callable[[], bool]) -> bool:
        return self.reasoner.pump(preempt=preempt)

    def uncached_tokens(self) -> int:
        return self.reasoner.uncached_tokens

    def round_failed(self, kind: str, detail: str) -> None:
        self.decision_faults.record(kind, detail)

    def hold_rebuild(self) -> ContextManager[None]:
        return self.reasoner.decision_due()

    def decide(self, trigger: Trigger, stamp: Optional[float] = None) -> None:
        running = self.running.for_decision(stamp)
        try:
            decision = self.reasoner.decide(running=running.intent, interrupts=running.interrupt_depth,
                                            paused=running.paused)
        except DecisionRefused as err:
            self.decision_faults.record("refused_decision", str(err))
            return
        except NoResourceAvailable as err:
            self.decision_faults.record("no_resource", str(err))
            return
        result = decision.result
        self.running.decided(result.decision.intent, result.decision.arguments)
        msg = Decision(decision_id=self.decision_id, intent=result.decision.intent,
                       arguments=dict_to_arguments(result.decision.arguments), trigger=int(trigger),
                       state_version=decision.state_version, prefix_tokens=decision.prefix_tokens,
                       last_chunk_seq=max(decision.last_chunk_seq, 0), ttft_ms=result.ttft_ms,
                       total_ms=decision.catchup_ms + result.total_ms, resource=decision.resource,
                       raw_output=result.text, reused=decision.reused)
        if stamp is None:
            msg.header.stamp = self.get_clock().now().to_msg()
        else:   # the logical time the decision belongs to (reproducible under replay)
            set_stamp(msg.header.stamp, stamp)
        self.decision_id += 1
        self.decision_pub.publish(msg)

    def publish_status(self) -> None:
        msg = csr_status_message(self.reasoner.status(), self.scheduler, dropped_chunks=self.chunk_faults.total,
                                 last_decision_id=self.decision_id - 1)
        msg.header.stamp = self.get_clock().now().to_msg()
        self.status_pub.publish(msg)
        counts = self.scheduler.counts_report()    # and a line now and then for whoever reads the log
        if counts:
            self.get_logger().info(counts)

    def _join_decision_thread(self) -> bool:
        """True when the decision thread ended in time; else one line saying where it is and what is left.
        It may be inside llama.cpp: applying, saving or freeing the contexts under it crashes the process."""
        self._thread.join(timeout=DECISION_JOIN_S)
        if not self._thread.is_alive():
            return True
        where = thread_where(self._thread)
        self.get_logger().error(f"decision thread still busy after {DECISION_JOIN_S:g} s, in {where}; "
                                "stopping without it: the contexts stay open until the process exits: state not "
                                f"saved, {self.scheduler.backlog()} queued chunks not applied")
        return False

    def _save_state_at_stop(self) -> None:
        try:
            saved = self.reasoner.save_at_stop(self.state_dir, wait_s=RECONCILE_AT_STOP_S)
            if saved["kv_saved"] or not self.reasoner.primary.is_local:
                self.get_logger().info(f"saved CSR state to {self.state_dir}")
            else:
                self.get_logger().warning(
                    f"reconciliation still running after {RECONCILE_AT_STOP_S:g} s: saved CSR state "
                    f"({saved['chunks']} chunks) to {self.state_dir} without its KV cache; a restart "
                    "recomputes the prefix")
        except OSError as err:
            self.get_logger().error(f"could not save state to {self.state_dir}: {err}")

    def destroy_node(self):
        if not hasattr(self, "_thread"):       # the start failed (logged): nothing runs, nothing to save
            return super().destroy_node()
        self.scheduler.stop()
        self.reasoner.begin_stop()
        if not self._join_decision_thread():
            self.exit_without_teardown = True    # the interpreter's teardown would free them under the call
            return super().destroy_node()
        # accepted chunks are kept (and saved), not dropped at shutdown
        self.rounds.apply_at_stop(self.scheduler.drain())
        if self.state_dir:
            self._save_state_at_stop()
        if not self.reasoner.close():         # a rebuild still inside llama.cpp: its engines stay open
            self.exit_without_teardown = True
            return super().destroy_node()
        self._close_engines()
        return super().destroy_node()


class _RosLogAdapter:
    """Lets the plain reasoner log through the node's rclpy logger (%-style arguments)."""

    def __init__(self, logger):
        self._logger = logger

    def info(self, message, *args):
        self._logger.info(message % args if args else message)

    def warning(self, message, *args):
        self._logger.warning(message % args if args else message)

    def error(self, message, *args):
        self._logger.error(message % args if args else message)


def main(args=None) -> int:
    return run_node(ReasoningNode, args)


if __name__ == "__main__":
    sys.exit(main())
