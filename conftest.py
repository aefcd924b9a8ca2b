"""Shared test set-up for every package: DDS on loopback in a private domain, repository paths,
the intent catalogue and prompt layout. Helpers live in csr_llm_common.ros.testing."""
from pathlib import Path

import pytest

from csr_llm_common.ros.dds_env import localhost_dds_env

localhost_dds_env()

REPO = Path(__file__).resolve().parent
CONFIG = REPO / "config"


@pytest.fixture(scope="session")
def config_dir() -> Path:
    return CONFIG


@pytest.fixture(scope="session")
def catalogue():
    from csr_llm_common.catalogue import IntentCatalogue
    return IntentCatalogue.from_file(CONFIG / "intents.yaml")


@pytest.fixture(scope="session")
def template():
    from csr_llm_core.prompt import PromptTemplate
    return PromptTemplate.from_file(CONFIG / "prompt.yaml")
