"""CSR token store, ASR reconciler, llama.cpp engine, sensor aggregator and reasoning nodes."""
