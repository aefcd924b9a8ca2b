"""The reasoning node's parameters as one typed dataclass (plain module, no rclpy).

The node declares every field as a ROS parameter with the default written here; parameter files
hold only what differs. ``reasoner`` (ReasonerConfig) fields are declared under their own names.
Each resource (R1, R2) is declared under ``r1.`` / ``r2.`` with RemoteResource's fields; an empty
``url`` means an embedded llama.cpp context in this process. `make_resources` builds them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .csr_state import session_archive_path
from .decision_scheduler import DECISION_TRIGGERS, RUNNING_SOURCES
from .engine import LlamaEngine
from .http_backend import HttpBackend, RemoteResource
from .model import default_cache_dir
from csr_llm_common.paths import expand_path
from .reasoner import ReasonerConfig

FALLBACKS = ("none", "embedded")
RESOURCE_NAMES = ("R1", "R2")


@dataclass
class ReasoningNodeConfig:
    reasoner: ReasonerConfig = field(default_factory=ReasonerConfig)
    model_path: str = ""             # any GGUF; "" = the bundled Gemma 3 270M
    n_ctx: int = 0                   # per context; 0 = 1.5 * tau_mem + 256
    n_threads_primary: int = 1       # llama.cpp threads per context: never more than free cores
    n_threads_secondary: int = 1
    # false: a sliding-window model's (Gemma 3's) local layers cache only their window, so TTFT
    # hardly grows with the prefix (docs/architecture.md, "Threads"); true: llama.cpp's full-size
    # cache, which the bundled intent adapter is fitted on (it warns on the other kind)
    swa_full: bool = True
    cpu_affinity: str = ""           # CPUs for this node's threads (llama.cpp's too), taskset syntax; "" = any
    intents_file: str = ""           # required: the intent catalogue (config/intents.yaml)
    prompt_file: str = ""            # required: the prompt layout (config/prompt.yaml)
    archive_path: str = ""           # "" = a new <cache>/archive/<session>.jsonl per session
    archive_keep: int = 20           # session archives kept in the default folder (oldest deleted)
    state_dir: str = ""              # saved KV + CSR state for warm restarts; "" = off
    # with state_dir: the logical state saved this often (survives kill -9); 0 = at shutdown only
    checkpoint_period_s: float = 10.0
    decision_hz: float = 2.0         # periodic decisions; event chunks decide at once
    decision_trigger: str = "clock"  # clock: node clock; chunks: the chunk stream's stamps (replay)
    decide_on_request: bool = True   # answer decision_request (the router after a level-1 miss)
    # what the suffix calls the running task: router_status (the router's newest report; it
    # arrives at a timing-dependent point), router_status_at_stamp (the router's newest report
    # stamped before the decision's stamp: with a router stamping by state, lockstepped runs decide
    # the same) or decisions (this node's own last decision: a function of the chunk stream alone)
    running_source: str = "router_status"
    status_hz: float = 2.0
    # when R1/R2 are servers: "embedded" keeps an embedded llama.cpp context (same model) ready to
    # take decisions over when every server is down; probes of a down server back off up to the max
    fallback: str = "none"
    health_first_retry_s: float = 0.5
    health_max_retry_s: float = 30.0

    def validated(self) -> "ReasoningNodeConfig":
        if self.decision_trigger not in DECISION_TRIGGERS:
            raise ValueError(f"decision_trigger must be one of {DECISION_TRIGGERS}, got {self.decision_trigger!r}")
        if self.running_source not in RUNNING_SOURCES:
            raise ValueError(f"running_source must be one of {RUNNING_SOURCES}, got {self.running_source!r}")
        if self.reasoner.mode not in ("asr", "sync"):
            raise ValueError(f"mode must be 'asr' or 'sync', got {self.reasoner.mode!r}")
        if self.fallback not in FALLBACKS:
            raise ValueError(f"fallback must be one of {FALLBACKS}, got {self.fallback!r}")
        if self.status_hz <= 0 or self.decision_hz < 0:
            raise ValueError("status_hz must be > 0 and decision_hz >= 0")
        if self.reasoner.append_threads < 1:
            raise ValueError(f"append_threads must be >= 1, got {self.reasoner.append_threads}")
        return self

    def clamp_append_threads(self, cpus: int) -> str:
        """append_threads within the CPUs this process may run on; the log line when it was cut."""
        wanted, allowed = self.reasoner.append_threads, max(1, cpus)
        if wanted <= allowed:
            return ""
        self.reasoner.append_threads = allowed
        return f"append_threads {wanted} > the {allowed} CPU(s) this node may run on: {allowed}"

    def pause_rebuild_without_a_core(self, cpus: int, remote: Dict[str, RemoteResource]) -> str:
        """rebuild_pause off runs R2's rebuild beside R1's decisions on its own core(s); with fewer
        CPUs than both embedded contexts' threads it would slow every decision in a rebuild
        window instead: pause it then. The log line when it was set."""
        embedded = [name for name in resource_names(self.reasoner.mode) if not getattr(remote.get(name), "url", "")]
        needed = self.n_threads_primary + self.n_threads_secondary
        if self.reasoner.rebuild_pause or len(embedded) < 2 or cpus >= needed:
            return ""
        self.reasoner.rebuild_pause = True
        return (f"rebuild_pause false needs {needed} CPUs for R1 and R2, this node may run on {cpus}: "
                "the rebuild pauses while R1 decides")

    @property
    def context_size(self) -> int:
        return self.n_ctx or int(self.reasoner.tau_mem * 1.5) + 256

    def archive_file(self, session: str) -> Path:
        """archive_path, or this session's own file in the default folder (older ones rotated out)."""
        text = expand_path(self.archive_path)
        return Path(text) if text else session_archive_path(default_cache_dir() / "archive", session,
                                                            self.archive_keep)



def resource_names(mode: str) -> Tuple[str, ...]:
    return RESOURCE_NAMES if mode == "asr" else RESOURCE_NAMES[:1]


def make_resources(cfg: ReasoningNodeConfig, remote: Dict[str, RemoteResource],
                   model_path: Optional[str] = None) -> Tuple[List, Optional[LlamaEngine]]:
    """(R1[, R2], fallback): a server where the resource has a url, else an embedded context.

    BackendUnavailable when a server does not answer at start (its n_ctx is read from it)."""
    threads = (cfg.n_threads_primary, cfg.n_threads_secondary)
    engines: List = []
    for index, name in enumerate(resource_names(cfg.reasoner.mode)):
        resource = remote.get(name)
        if resource is not None and resource.url:
            engines.append(HttpBackend(resource, name=name))
        else:
            engines.append(LlamaEngine(model_path or None, n_ctx=cfg.context_size, n_threads=int(threads[index]),
                                       name=name, swa_full=cfg.swa_full))
    fallback = None
    if cfg.fallback == "embedded" and any(not e.is_local for e in engines):
        fallback = LlamaEngine(model_path or None, n_ctx=cfg.context_size, n_threads=int(threads[0]),
                               name="embedded", swa_full=cfg.swa_full)
    return engines, fallback


def add_swa_full_argument(parser) -> None:
    """`--swa-full true|false` for offline tools that must decide on the reasoning node's kind of context."""
    parser.add_argument("--swa-full", choices=("true", "false"), default=str(ReasoningNodeConfig.swa_full).lower(),
                        help="the contexts' sliding-window cache, as the reasoning node's swa_full (its default)")
