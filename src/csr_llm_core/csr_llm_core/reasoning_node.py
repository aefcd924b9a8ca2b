"""Reasoning node: StateChunk stream -> CSR token store (+ ASR) -> Decision at decision_hz and on events."""
from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Optional

from rclpy.node import Node

from std_msgs.msg import String

from csr_llm_msgs.msg import CsrStatus, Decision, RouterStatus, StateChunk

from .backend import BackendUnavailable, DecisionRefused, NoResourceAvailable
from csr_llm_common.catalogue import IntentCatalogue, PausedTask
from .csr_state import ChunkRejected, new_session_id
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
from .running_task import RunningTask, RunningTaskHistory
from csr_llm_common.ros import qos
from csr_llm_common.ros.intent_args import arguments_to_dict, dict_to_arguments
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
        try:
            cfg = declare_dataclass(self, ReasoningNodeConfig()).validated()
            remote = {name: declare_dataclass(self, RemoteResource(url=""), prefix=f"{name.lower()}.")
                      for name in resource_names(cfg.reasoner.mode)}
            intents_file = required_file(cfg.intents_file, "intents_file")
            prompt_file = required_file(cfg.prompt_file, "prompt_file")
        except ValueError as err:
            log.fatal(f"cannot start: {err}")
            raise SystemExit(2) from err
        config, mode, tau_mem, n_ctx = cfg.reasoner, cfg.reasoner.mode, cfg.reasoner.tau_mem, cfg.context_size
        placed = pin_threads(cfg.cpu_affinity)   # before llama.cpp starts its threads: they inherit it
        if placed:
            log.info(placed)
        cpus = len(os.sched_getaffinity(0))
        for clamped in (cfg.clamp_append_threads(cpus), cfg.pause_rebuild_without_a_core(cpus, remote)):
            if clamped:
                log.warning(clamped)
        model_path = expand_path(cfg.model_path)
        session = new_session_id()
        archive_path = str(cfg.archive_file(session))
        self.state_dir = expand_path(cfg.state_dir)
        self.checkpoint_period = float(cfg.checkpoint_period_s) if self.state_dir else 0.0
        self._checkpointed_seq: Optional[int] = None
        self._next_checkpoint = time.monotonic() + self.checkpoint_period
        self.decision_hz = cfg.decision_hz
        self.period = 1.0 / self.decision_hz if self.decision_hz > 0 else None
        # clock: periodic decisions on the node clock; chunks: on the chunks' own stamps, so the
        # decisions are a function of the chunk stream alone (bag replay regression runs)
        self.trigger_mode = cfg.decision_trigger
        self.decide_on_request = cfg.decide_on_request
        self.status_hz = cfg.status_hz
        self.running_from_decisions = cfg.running_source == "decisions"
        self.running_at_stamp = cfg.running_source == "router_status_at_stamp"
        self.router_reports = RunningTaskHistory()
        try:
            catalogue = IntentCatalogue.from_file(intents_file)
            template = PromptTemplate.from_file(prompt_file)
            self.engines, self.fallback = make_resources(cfg, remote, model_path)
            health = ResourceHealth(_RosLogAdapter(log), first_retry_s=cfg.health_first_retry_s,
                                    max_retry_s=cfg.health_max_retry_s)
            self.reasoner = Reasoner(self.engines, catalogue, template, config, archive_path=archive_path,
                                     logger=_RosLogAdapter(log), fallback=self.fallback, health=health,
                                     session=session)
        except (ModelFileError, ValueError, OSError, BackendUnavailable, NoResourceAvailable) as err:
            log.fatal(f"cannot start: {err}")
            raise SystemExit(2) from err
        # a refused or impossible decision is never published: first of a kind logged, the rest counted
        self.decision_faults = FaultLog(log.warning, {
            "refused_decision": "a resource answered with something that is not a catalogued decision",
            "no_resource": "every reasoning resource is down; decisions resume when one answers"},
            counted_in="csr_status")
        if self.state_dir and (Path(self.state_dir) / "csr_state.json").exists():
            try:
                info = self.reasoner.restore(self.state_dir)
                log.info(f"warm restart from {self.state_dir}: {info['chunks']} chunks, {info['tokens']} tokens, "
                         f"KV {'restored' if info['kv_restored'] else 'recomputed'}")
            except StateFileError as err:
                log.error(f"{err}; starting with an empty state")
        # dropped chunks: the first of each kind is logged, the rest counted
        self.chunk_faults = FaultLog(log.info, {
            "duplicate_chunk": "a chunk already in the state was dropped (the aggregator's history after a "
                               "restart, or a duplicate)",
            "stale_epoch": "a chunk from an aggregator older than the one now publishing was dropped"},
            counted_in="csr_status dropped_chunks")
        self.running_intent = ""
        self.interrupt_depth = 0
        self.paused: Optional[PausedTask] = None     # the paused task (router status, or own decisions)
        self._running_args: dict = {}
        self.decision_id = 0
        self._wake = threading.Condition()
        self._chunks = deque()
        self._pending_request = False
        self._stopping = False
        self._preempted = False         # the last pump stopped for a due decision: resume it
        if self.reasoner.primary.is_local:     # the head (and a restored state) in the KV cache before
            started = time.monotonic()         # the first chunk: the first decision does not pay for it
            self.reasoner.pump()
            log.info(f"prefix evaluated on {self.reasoner.primary.name}: {self.reasoner.status()['prefix_tokens']} "
                     f"tokens in {time.monotonic() - started:.1f} s")
        self.decision_pub = self.create_publisher(Decision, "decision", qos.DECISIONS,
                                                  event_callbacks=qos.quiet_publisher())
        self.status_pub = self.create_publisher(CsrStatus, "csr_status", 10, event_callbacks=qos.quiet_publisher())
        self._status_sub = self.create_subscription(RouterStatus, "router_status", self._on_router_status, 10)
        self.create_subscription(StateChunk, "state_chunks", self._on_chunk, qos.CHUNK_STREAM)
        self.create_subscription(String, "decision_request", self._on_request, 10)
        self.create_timer(1.0 / self.status_hz, self._publish_status)
        self._next_due = None
        self._thread = threading.Thread(target=self._decision_loop, name="decision-loop", daemon=True)
        self._thread.start()
        where = ", ".join(f"{e.name} on {getattr(e, 'server', 'this machine')}"
                          + (f", sliding-window cache {e.n_swa} positions" if getattr(e, "n_swa", 0) else "")
                          for e in self.engines)
        log.info(f"reasoning ({where}): mode={mode} tau_mem={tau_mem} n_ctx={n_ctx} "
                 f"decision_hz={self.decision_hz} archive={archive_path}")

    # --- callbacks -------------------------------------------------------------------------
    def _on_chunk(self, msg: StateChunk) -> None:
        # Chunks are applied by the decision thread, in order, so a decision's prefix is exactly
        # the chunks up to the one that triggered it (not whatever arrived while it waited).
        if self.running_at_stamp:   # the router's reports sent before this chunk, even if their reader is behind
            take_waiting([self._status_sub])
        with self._wake:
            self._chunks.append(msg)
            self._wake.notify()

    def _on_request(self, msg: String) -> None:
        if not self.decide_on_request:
            return
        self.get_logger().info(f"decision requested: {msg.data or '(no reason given)'}")
        with self._wake:
            self._pending_request = True
            self._wake.notify()

    def _on_router_status(self, msg: RouterStatus) -> None:
        if self.running_from_decisions:
            return
        task = RunningTask(msg.active_intent, int(msg.interrupt_depth),
                           PausedTask(msg.paused_intent, arguments_to_dict(msg.paused_arguments))
                           if msg.paused_intent else None)
        if self.running_at_stamp:
            self.router_reports.report(stamp_to_sec(msg.header.stamp), task)
        else:
            self.running_intent, self.interrupt_depth, self.paused = task.intent, task.interrupt_depth, task.paused

    # --- decision thread -------------------------------------------------------------------
    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _clock_due(self) -> bool:
        if self.trigger_mode != "clock" or self.period is None:
            return False
        now = self._now()
        if self._next_due is None:
            self._next_due = now + self.period
        return now >= self._next_due

    def _decision_loop(self) -> None:
        self.reasoner.warm_secondary()     # in the background: the first eviction then rebuilds the live chunks only
        while True:
            with self._wake:
                while not (self._stopping or self._chunks or self._pending_request or self._clock_due()
                           or (self._preempted and not self._decision_waiting()) or self._checkpoint_due()):
                    self._wake.wait(timeout=0.01)
                if self._stopping:
                    return
                chunks, self._chunks = list(self._chunks), deque()
                request, self._pending_request = self._pending_request, False
            decided = False
            for msg in chunks:      # one failing chunk or decision must not drop the chunks behind it
                try:
                    decided |= self._apply_chunk(msg)
                except Exception as err:  # noqa: BLE001 - keep the node up; logged once per kind
                    self.decision_faults.record(f"failed:{type(err).__name__}",
                                                f"chunk {msg.seq} or its decision failed: {err}")
            try:
                if request:
                    self._decide(Decision.TRIGGER_REQUEST)
                    decided = True
                if self._clock_due():
                    self._next_due = max(self._next_due + self.period, self._now())
                    self._decide(Decision.TRIGGER_PERIODIC)
                    decided = True
                if ((chunks and not decided) or self._preempted or self.reasoner.uncached_tokens) \
                        and not self._decision_waiting():
                    # a decision due meanwhile stops the append at a batch boundary; resumed next round
                    self._preempted = not self.reasoner.pump(preempt=self._decision_waiting)
                elif chunks or self.reasoner.uncached_tokens:
                    self._preempted = True       # appended once the decision that is due has run
            except Exception as err:  # noqa: BLE001 - keep the node up; the next trigger retries
                self.decision_faults.record(f"failed:{type(err).__name__}", f"a decision failed: {err}")
                time.sleep(0.1)
            self._maybe_checkpoint()

    def _checkpoint_due(self) -> bool:
        return self.checkpoint_period > 0 and time.monotonic() >= self._next_checkpoint \
            and self.reasoner.last_seq != self._checkpointed_seq

    def _maybe_checkpoint(self) -> None:
        """Every checkpoint_period_s, the logical state if it changed (no engine work, no stall)."""
        if not self._checkpoint_due():
            return
        self._next_checkpoint = time.monotonic() + self.checkpoint_period
        try:
            self.reasoner.checkpoint(self.state_dir)
            self._checkpointed_seq = self.reasoner.last_seq
        except OSError as err:
            self.decision_faults.record("checkpoint", f"could not checkpoint to {self.state_dir}: {err}")

    def _decision_waiting(self) -> bool:
        """Something the decision thread must handle before appending more: a queued chunk (it may
        trigger a decision), a request, the clock's due time within the next batch, or shutdown."""
        with self._wake:
            if self._stopping or self._chunks or self._pending_request:
                return True
            if self.trigger_mode != "clock" or self.period is None or self._next_due is None:
                return False
            return self.reasoner.pump_should_stop(self._next_due - self._now())

    def _apply_chunk(self, msg: StateChunk, decide: bool = True) -> bool:
        """Apply one chunk in stream order, deciding where it triggers; returns whether it decided.

        In 'chunks' mode a chunk or watermark stamped at or after the next due time (a multiple of
        1/decision_hz) first triggers the periodic decision on the chunks before it, stamped with
        that due time; an event chunk then triggers one on the chunks up to and including it.
        """
        stamp = stamp_to_sec(msg.header.stamp)
        epoch, current = int(msg.epoch), self.reasoner.sequence_epoch
        if epoch and epoch > current:
            if current:
                self.get_logger().info(f"the aggregator restarted (sequence epoch {epoch}): its chunks from "
                                       f"seq {msg.seq} on continue the state")
            self.reasoner.start_sequence(epoch, msg.seq)
        elif epoch and epoch < current:
            self.chunk_faults.record("stale_epoch", f"seq {msg.seq} of epoch {epoch}, now {current}")
            return False
        last = self.reasoner.last_seq
        if last is not None and msg.seq <= last:
            # already in the state: the aggregator's history after a (warm) restart, or a duplicate;
            # a watermark carries the next chunk's seq, so old ones are dropped here too
            if msg.kind != StateChunk.KIND_WATERMARK:
                self.chunk_faults.record("duplicate_chunk", f"seq {msg.seq} (newest in the state: {last})")
            return False
        decided = False
        if self.trigger_mode == "chunks" and self.period is not None:
            if self._next_due is None:
                self._next_due = (math.floor(stamp / self.period + 1e-9) + 1) * self.period
                self._publish_status()      # a lockstepped sim need not wait for a decision before it
            elif stamp >= self._next_due - 1e-9:
                # advanced only once the due decision is out: CsrStatus.next_decision_due tells a
                # lockstepped peer that no decision before it will come, so it must not run ahead of one
                try:
                    if decide:
                        self._decide(Decision.TRIGGER_PERIODIC, stamp=self._next_due)
                        decided = True
                finally:
                    while self._next_due <= stamp + 1e-9:
                        self._next_due += self.period
        if msg.kind == StateChunk.KIND_WATERMARK:
            return decided
        try:
            self.reasoner.add_chunk(msg.seq, msg.text, source=msg.source_topic, kind=msg.kind, stamp=stamp)
        except ChunkRejected as err:
            self.get_logger().warning(str(err))
            return decided
        if msg.kind == StateChunk.KIND_EVENT and decide:
            self._decide(Decision.TRIGGER_EVENT, stamp=stamp if self.trigger_mode == "chunks" else None)
            decided = True
        return decided

    def _decide(self, trigger: int, stamp: Optional[float] = None) -> None:
        if self.running_at_stamp:
            task = self.router_reports.before(stamp) if stamp is not None else self.router_reports.latest()
            self.running_intent, self.interrupt_depth, self.paused = task.intent, task.interrupt_depth, task.paused
        try:
            decision = self.reasoner.decide(running=self.running_intent, interrupts=self.interrupt_depth,
                                            paused=self.paused)
        except DecisionRefused as err:
            self.decision_faults.record("refused_decision", str(err))
            return
        except NoResourceAvailable as err:
            self.decision_faults.record("no_resource", str(err))
            return
        if self.running_from_decisions:      # the router's rule, on what this node decided
            new = decision.result.decision
            ran = PausedTask(self.running_intent, self._running_args) if self.running_intent else None
            self.paused = self.reasoner.catalogue.paused_after(ran, self.paused, new.intent)
            self.running_intent, self._running_args = new.intent, dict(new.arguments)
        result = decision.result
        msg = Decision(decision_id=self.decision_id, intent=result.decision.intent,
                       arguments=dict_to_arguments(result.decision.arguments), trigger=trigger,
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

    def _publish_status(self) -> None:
        s = self.reasoner.status()
        msg = CsrStatus(prefix_tokens=s["prefix_tokens"], static_tokens=s["static_tokens"], tau_mem=s["tau_mem"],
                        chunk_count=s["chunk_count"], state_version=s["state_version"],
                        reconciling=s["reconciling"], primary_resource=s["primary_resource"],
                        buffered_tokens=s["buffered_tokens"], last_chunk_seq=max(s["last_chunk_seq"], 0),
                        seq_gaps=s["seq_gaps"], evictions=s["evictions"], swaps=s["swaps"],
                        evicted_chunks=s["evicted_chunks"], evicted_tokens=s["evicted_tokens"],
                        rejected_chunks=s["rejected_chunks"], cached_tokens=s["cached_tokens"],
                        failovers=s["failovers"], refused_decisions=s["refused_decisions"],
                        down_resources=list(s["down_resources"]), dropped_chunks=self.chunk_faults.total,
                        backlog_chunks=len(self._chunks),
                        next_decision_due=float(self._next_due or 0.0) if self.trigger_mode == "chunks" else 0.0,
                        last_decision_id=self.decision_id - 1)
        msg.header.stamp = self.get_clock().now().to_msg()
        self.status_pub.publish(msg)

    def _join_decision_thread(self) -> bool:
        """True when the decision thread ended in time; else one line saying where it is and what is left.
        It may be inside llama.cpp: applying, saving or freeing the contexts under it crashes the process."""
        self._thread.join(timeout=DECISION_JOIN_S)
        if not self._thread.is_alive():
            return True
        where = thread_where(self._thread)
        self.get_logger().error(f"decision thread still busy after {DECISION_JOIN_S:g} s, in {where}; "
                                "stopping without it: the contexts stay open until the process exits: state not "
                                f"saved, {len(self._chunks)} queued chunks not applied")
        return False

    def destroy_node(self):
        if not hasattr(self, "_thread"):       # the start failed (logged): nothing runs, nothing to save
            return super().destroy_node()
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self.reasoner.begin_stop()
        if not self._join_decision_thread():
            self.exit_without_teardown = True    # the interpreter's teardown would free them under the call
            return super().destroy_node()
        with self._wake:
            pending, self._chunks = list(self._chunks), deque()
        for msg in pending:          # accepted chunks are kept (and saved), not dropped at shutdown
            self._apply_chunk(msg, decide=False)
        if self.state_dir:
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
        if not self.reasoner.close():         # a rebuild still inside llama.cpp: its engines stay open
            self.exit_without_teardown = True
            return super().destroy_node()
        for engine in self.engines + ([self.fallback] if self.fallback else []):
            engine.close()
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
