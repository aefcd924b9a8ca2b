# Every test run keeps DDS on loopback, in a domain of its own.
from csr_llm_core.dds_env import localhost_dds_env

localhost_dds_env()
