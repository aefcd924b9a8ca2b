"""The bundled model loads and evaluates; bad model paths give one clear error naming the path."""
import subprocess
import sys

import pytest

from csr_llm_core.model import (DEFAULT_MODEL_SHA256, ModelFileError, default_model_path,
                                ensure_default_model, load_llama)


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
