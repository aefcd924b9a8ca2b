import pytest


@pytest.fixture(scope="session")
def engines():
    """Two real llama.cpp contexts on the bundled model, shared by the tests of a session."""
    from csr_llm_core.engine import LlamaEngine
    pair = [LlamaEngine(n_ctx=3072, n_threads=1, name="R1"), LlamaEngine(n_ctx=3072, n_threads=1, name="R2")]
    yield pair
    for engine in pair:
        engine.close()
