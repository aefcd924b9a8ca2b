"""The bundled model loads and evaluates; bad model paths give one clear error naming the path."""
import subprocess
import sys

import pytest

from csr_llm_core.llama_server import server_command
from csr_llm_core.model import (DEFAULT_MODEL_SHA256, ModelFileError, cpu_has_amx, default_model_path,
                                ensure_default_model, extra_buffers_enabled, load_llama)


def test_bundled_model_is_verified_and_evaluates_tokens():
    path = ensure_default_model()
    assert path == default_model_path()
    marker = path.with_name(path.name + ".verified.json").read_text()
    assert DEFAULT_MODEL_SHA256 in marker
    llm = load_llama(path, n_ctx=256, n_threads=1)
    tokens = llm.tokenize(b"The robot stands in front of a door.", add_bos=True)
    assert len(tokens) > 5
    llm.eval(tokens)
    assert llm.n_tokens == len(tokens)
    next_token = int(llm.scores[llm.n_tokens - 1].argmax())
    assert 0 <= next_token < llm.n_vocab()


@pytest.mark.parametrize("case", ["missing", "directory", "not_gguf", "truncated"])
def test_bad_model_path_gives_one_clear_error_naming_the_path(tmp_path, case):
    bad = tmp_path / f"{case}.gguf"
    if case == "directory":
        bad.mkdir()
    elif case == "not_gguf":
        bad.write_bytes(b"this is not a model\n" * 100)
    elif case == "truncated":
        with open(ensure_default_model(), "rb") as real:
            bad.write_bytes(real.read(2 << 20))
    # In a child process: a C-level crash would show up as a signal, not take pytest down.
    probe = subprocess.run([sys.executable, "-m", "csr_llm_core.model", "--check", str(bad)],
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 1, probe.stderr
    errors = [line for line in probe.stderr.splitlines() if line.startswith("[model] error:")]
    assert len(errors) == 1 and str(bad) in errors[0], probe.stderr
    assert "Traceback" not in probe.stderr
    with pytest.raises(ModelFileError) as info:
        load_llama(bad, n_ctx=256)
    assert info.value.path == str(bad)


@pytest.mark.parametrize("options, message", [({"kv_cache_type": "q8_0"}, "needs flash_attn"),
                                              ({"kv_cache_type": "f32"}, "must be one of")])
def test_kv_cache_options_llama_cpp_cannot_run_are_refused_before_loading(options, message):
    with pytest.raises(ValueError, match=message):
        load_llama("/nonexistent.gguf", n_ctx=256, **options)


def test_extra_buffer_types_are_off_on_an_amx_cpu_for_both_engines(tmp_path, monkeypatch):
    amx, plain = tmp_path / "amx", tmp_path / "plain"
    amx.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile amx_int8\n")
    plain.write_text("processor\t: 0\nflags\t\t: fpu avx2 fma\n")
    assert cpu_has_amx(str(amx)) and not cpu_has_amx(str(plain)) and not cpu_has_amx(str(tmp_path / "none"))
    monkeypatch.setenv("CSR_LLM_EXTRA_BUFFERS", "0")
    assert not extra_buffers_enabled()
    assert "--no-repack" in server_command(port=1)
    monkeypatch.setenv("CSR_LLM_EXTRA_BUFFERS", "1")
    assert extra_buffers_enabled() and "--no-repack" not in server_command(port=1)
    monkeypatch.delenv("CSR_LLM_EXTRA_BUFFERS")
    assert extra_buffers_enabled() == (not cpu_has_amx())


def test_a_long_batch_evaluates_on_this_cpu():
    """Hundreds of tokens in one batch: the path that crashed in llama.cpp's AMX buffers."""
    llm = load_llama(ensure_default_model(), n_ctx=1024, n_threads=1, n_batch=512)
    tokens = llm.tokenize(b"[12.5s] joint_states: arm at rest, gripper open. " * 30, add_bos=True)
    assert len(tokens) > 300
    llm.eval(tokens)
    assert llm.n_tokens == len(tokens)
