# Every test run keeps DDS on loopback, in a domain of its own.
from csr_llm_core.dds_env import localhost_dds_env

localhost_dds_env()

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def catalogue():
    from csr_llm_core.catalogue import IntentCatalogue
    return IntentCatalogue.from_file(REPO / "config" / "intents.yaml")


@pytest.fixture(scope="session")
def template():
    from csr_llm_core.prompt import PromptTemplate
    return PromptTemplate.from_file(REPO / "config" / "prompt.yaml")


@pytest.fixture(scope="session")
def engines():
    """Two real llama.cpp contexts on the bundled model, shared by the tests of a session."""
    from csr_llm_core.engine import LlamaEngine
    pair = [LlamaEngine(n_ctx=3072, n_threads=1, name="R1"), LlamaEngine(n_ctx=3072, n_threads=1, name="R2")]
    yield pair
    for engine in pair:
        engine.close()
