"""A reasoning-like CPU load for benchmarks: the bundled model answering over a cached prefix, back
to back, the way the reasoning node keeps a core busy while it decides at its fastest; with
``--rebuild``, a second context meanwhile re-evaluates the prefix from scratch again and again, as
ASR's background rebuild does on the secondary (both contexts in the CPUs given).

    python -m csr_llm_core.lab.decision_load --seconds 20 [--cpu 0] [--threads 1] [--rebuild]

Prints ``[decision-load] ready`` once deciding, then ``decisions <n> in <s> s (<rate>/s)`` (and
``rebuilds <n> ...``) when the time is up or on SIGINT/SIGTERM.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import List, Optional

from ..engine import LlamaEngine
from csr_llm_common.realtime import pin_threads
from .synthetic import chunk_text


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--cpu", default="", help="CPUs to run on (taskset syntax; default: any)")
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads")
    ap.add_argument("--prefix-chunks", type=int, default=40, help="chunks in the cached prefix (~25 tokens each)")
    ap.add_argument("--rebuild", action="store_true", help="a second context rebuilds the prefix meanwhile")
    args = ap.parse_args(argv)
    placed = pin_threads(args.cpu)
    if placed:
        print(f"[decision-load] {placed}", flush=True)
    stop = [False]
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.__setitem__(0, True))
    engine = LlamaEngine(n_ctx=4096, n_threads=args.threads, name="load")
    prefix = [t for seq in range(args.prefix_chunks) for t in engine.tokenize(chunk_text(seq) + "\n")]
    engine.sync(prefix, by_line=True)
    suffix = engine.tokenize("Which action? ")
    rebuilds = [0]
    secondary = LlamaEngine(n_ctx=4096, n_threads=args.threads, name="load-R2") if args.rebuild else None

    def rebuild(engine_r2: LlamaEngine) -> None:     # llama.cpp releases the GIL while it evaluates
        while not stop[0]:
            engine_r2.clear()
            engine_r2.sync(prefix, by_line=True)
            rebuilds[0] += 1

    rebuilder = threading.Thread(target=rebuild, args=(secondary,), name="load-rebuild", daemon=True)
    if secondary is not None:
        rebuilder.start()
    print("[decision-load] ready", flush=True)
    count, start = 0, time.monotonic()
    while not stop[0] and time.monotonic() - start < args.seconds:
        engine.logits_after(suffix)      # one decision's suffix evaluation over the cached prefix
        count += 1
    elapsed = time.monotonic() - start
    stop[0] = True
    if secondary is not None:
        rebuilder.join()
    print(f"decisions {count} in {elapsed:.1f} s ({count / max(elapsed, 1e-9):.2f}/s)", flush=True)
    if secondary is not None:
        print(f"rebuilds {rebuilds[0]} in {elapsed:.1f} s ({rebuilds[0] / max(elapsed, 1e-9):.2f}/s, "
              f"{len(prefix)} tokens each)", flush=True)
        secondary.close()
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
