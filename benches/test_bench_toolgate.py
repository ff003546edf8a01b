"""pytest-benchmark: what tool gating adds to a compile.

A registry of the 40 tool blocks of tests/data/tool_gate_eval.json plus 8
instruction blocks, with the default model. In one group:

* ``ungated``: compile with no task (the baseline every gated compile pays too);
* ``gate-new-task``: compile(task, top_k=5) for a task never seen before: the task
  is embedded by the model, then the matrix is scanned (what an agent pays per new
  request);
* ``gate-repeated-task``: the same compile for a task the registry has seen (its
  vector is cached): the scan, the ordering and the budget only;
* ``hybrid-gate``: :class:`rampart.toolgate.HybridGate` (dense + BM25) for a
  repeated task;
* ``examples-new-task`` / ``examples-repeated-task``: the same compile on a twin
  registry whose tool blocks carry the author examples of
  tests/data/tool_gate_examples.json, so the registry gates with
  :class:`rampart.toolgate.ExampleGate` (best of description and examples + BM25).

The gate's added latency per compile is gate-* minus ungated.

    python -m pytest benches/test_bench_toolgate.py --benchmark-only -p no:cacheprovider -q
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rampart
from rampart.toolgate import HybridGate
from rampart.tools import load_examples, parse_tools, with_examples

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
EVAL = json.loads((DATA / "tool_gate_eval.json").read_text(encoding="utf-8"))
TASKS = [r["request"] for r in EVAL["requests"]]
RULES = [
    "Explain the plan before changing files.",
    "Never commit directly to main.",
    "Dates are ISO 8601.",
    "Ask before deleting anything.",
    "Keep answers under 200 words.",
    "Quote file paths relative to the project root.",
    "Prefer read-only tools when unsure.",
    "Summarise tool results, do not paste them whole.",
]


def _model_ready() -> bool:
    try:
        rampart.default_embedder()
    except (ImportError, rampart.RampartError):
        return False
    return True


pytestmark = pytest.mark.skipif(not _model_ready(), reason="default embedding model missing")


@pytest.fixture(scope="module")
def reg() -> Iterator[rampart.BlockRegistry]:
    r = rampart.BlockRegistry(embedding_model="default")
    for i, rule in enumerate(RULES):
        r.write_block(rule, f"rule-{i}", "seed")
    for f in EVAL["tool_files"]:
        r.load_tools(DATA / f)
    r.embed_pending()
    yield r
    r.release()


@pytest.fixture(scope="module")
def reg_examples() -> Iterator[rampart.BlockRegistry]:
    r = rampart.BlockRegistry(embedding_model="default")
    for i, rule in enumerate(RULES):
        r.write_block(rule, f"rule-{i}", "seed")
    tools = [t for f in EVAL["tool_files"] for t in parse_tools(DATA / f)]
    r.load_tools(with_examples(tools, load_examples(DATA / "tool_gate_examples.json")))
    r.embed_pending()
    r.find_relevant("warm up: build the example vectors")
    yield r
    r.release()


def _fresh_tasks() -> Iterator[str]:
    # A new text every call: the registry's query cache and the embedder's vector
    # cache both miss, so the model runs as it would for a new request.
    for n in itertools.count():
        yield f"{TASKS[n % len(TASKS)]} (request {n})"


@pytest.mark.benchmark(group="toolgate")
def test_ungated(benchmark: Any, reg: rampart.BlockRegistry) -> None:
    result = benchmark(reg.compile, tools_in_prompt=False)
    assert len(result.tools()) == 40


@pytest.mark.benchmark(group="toolgate")
def test_gate_new_task(benchmark: Any, reg: rampart.BlockRegistry) -> None:
    tasks = _fresh_tasks()
    result = benchmark(lambda: reg.compile(task_text=next(tasks), top_k=5, tools_in_prompt=False))
    assert len(result.included) + len(result.tools()) == 5


@pytest.mark.benchmark(group="toolgate")
def test_gate_repeated_task(benchmark: Any, reg: rampart.BlockRegistry) -> None:
    task = "Switch to the develop branch"
    result = benchmark(reg.compile, task_text=task, top_k=5, tools_in_prompt=False)
    assert "git_checkout" in [t["function"]["name"] for t in result.tools()]


@pytest.mark.benchmark(group="toolgate")
def test_hybrid_gate_repeated_task(benchmark: Any, reg: rampart.BlockRegistry) -> None:
    gate = HybridGate(reg, 0.1)
    task = TASKS[0]
    result = benchmark(reg.compile, task_text=task, top_k=5, gate=gate, tools_in_prompt=False)
    assert len(result.included) + len(result.tools()) == 5


@pytest.mark.benchmark(group="toolgate")
def test_examples_new_task(benchmark: Any, reg_examples: rampart.BlockRegistry) -> None:
    tasks = _fresh_tasks()
    result = benchmark(
        lambda: reg_examples.compile(task_text=next(tasks), top_k=5, tools_in_prompt=False)
    )
    assert len(result.included) + len(result.tools()) == 5


@pytest.mark.benchmark(group="toolgate")
def test_examples_repeated_task(benchmark: Any, reg_examples: rampart.BlockRegistry) -> None:
    task = "Switch to the develop branch"
    result = benchmark(reg_examples.compile, task_text=task, top_k=5, tools_in_prompt=False)
    assert "git_checkout" in [t["function"]["name"] for t in result.tools()]
