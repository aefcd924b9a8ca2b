"""The reasoning node's CsrStatus from its parts' figures (message building only, no rclpy)."""
from __future__ import annotations

from typing import Any, Mapping

from csr_llm_msgs.msg import CsrStatus

from .decision_scheduler import DecisionScheduler

# Reasoner.status() keys that CsrStatus carries under the same name.
SAME_NAME = ("prefix_tokens", "static_tokens", "tau_mem", "chunk_count", "state_version", "reconciling",
             "primary_resource", "buffered_tokens", "seq_gaps", "evictions", "swaps", "evicted_chunks",
             "evicted_tokens", "rejected_chunks", "cached_tokens", "failovers", "refused_decisions")


def csr_status_message(reasoner_status: Mapping[str, Any], scheduler: DecisionScheduler, *,
                       dropped_chunks: int, last_decision_id: int) -> CsrStatus:
    """Every field but the header stamp (the node sets it from its clock)."""
    schedule = scheduler.counts()
    return CsrStatus(**{name: reasoner_status[name] for name in SAME_NAME},
                     last_chunk_seq=max(reasoner_status["last_chunk_seq"], 0),
                     down_resources=list(reasoner_status["down_resources"]), dropped_chunks=dropped_chunks,
                     backlog_chunks=scheduler.backlog(), skipped_periodic=schedule.skipped_periodic,
                     coalesced_events=schedule.coalesced_events, next_decision_due=scheduler.next_decision_due(),
                     last_decision_id=last_decision_id)
