# One entry point for set-up, the main job, tests, lint and benchmarks; the README
# and .ci/run call these targets.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TASK ?= Write release notes for the changes since the last tag, then commit them
MAX_TOKENS ?= 2048

.PHONY: setup compile test test-rust test-py lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Dependencies, then the extension built in release mode into the venv (editable).
setup: $(BIN)/python
	$(BIN)/python -m pip install -q "maturin>=1.7,<2" -e ".[dev]" --no-build-isolation 2>/dev/null \
	  || $(BIN)/python -m pip install -q "maturin>=1.7,<2" "pytest>=8" "hypothesis>=6.100" \
	     "tokenizers>=0.15" "mypy>=1.10" "pytest-benchmark>=4" "ruff>=0.5" types-PyYAML "PyYAML>=6"
	$(BIN)/maturin develop --release -q

# The main job: compile the example seed set against a task.
compile: setup
	$(BIN)/rampart compile seeds/ --task "$(TASK)" --max-tokens $(MAX_TOKENS)

test-rust:
	cargo test --release

test-py: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider
	$(BIN)/python -m mypy.stubtest rampart._core

lint: setup
	cargo fmt --check
	cargo clippy -q --all-targets -- -D warnings
	cargo clippy -q --all-targets --features python -- -D warnings
	$(BIN)/ruff check python tests benches
	$(BIN)/ruff format --check python tests benches
	$(BIN)/mypy

# Everything CI checks.
test: setup test-rust test-py lint

bench: setup
	$(BIN)/python -m pytest benches --benchmark-only -p no:cacheprovider -q
	$(BIN)/python benches/compare.py

clean:
	rm -rf $(VENV) target
