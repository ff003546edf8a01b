"""pytest-benchmark: one shared-registry coordination write (docs/specification.md §3,
target <= 2 µs).

    python -m pytest benches/test_bench_coordination.py --benchmark-only -p no:cacheprovider -q

``receiver.write_block(text, "plan", source="orchestrator", evictable=False,
position=0, author=planner)`` into a 200-block registry: argument checks, a fresh
UUID4 from the OS CSPRNG, the insert at the front and the provenance record. The
cl100k token count of a short text (<= 4 KB) is not part of the write: the
receiver's first compile that reaches the block counts it (~1.4 µs for 12 tokens,
~6 µs for 60), so the writer's call returns sooner and a block evicted unseen never
pays. Two texts: a one-line directive (12 tokens) and a ~60-token plan. Beside
each, in the same group: the same write into the registry's own blocks (no
``author``), and the pure-Python model (tests/pymodel.py) doing the same insert
with its token count computed at write time. The previous write is evicted by its
author in (untimed) setup, so every round writes into a 200-block registry.
"""

from __future__ import annotations

import uuid
from typing import Any

import _corpus
import pytest
import rampart

TEXTS = {
    "12-tokens": "Stop after step 2 and wait for the reviewer's verdict.",
    "60-tokens": _corpus.blocks(1)[0][1],
}
ROUNDS = 3000


@pytest.fixture
def receiver(fresh_registry: Any) -> Any:
    reg = fresh_registry(200)
    yield reg
    reg.release()


def _group(text: str) -> str:
    return f"coordination write_block(author=) N=200 text={rampart.count_tokens(text)} tokens"


@pytest.mark.parametrize("kind", list(TEXTS))
def test_coordination_write(benchmark: Any, receiver: Any, kind: str) -> None:
    text = TEXTS[kind]
    benchmark.group = _group(text)
    planner = rampart.BlockRegistry(label="bench-planner")
    last: list[str] = []

    def setup() -> tuple[tuple[()], dict[str, Any]]:
        if last:
            receiver.evict(last.pop(), force=True, by=planner)
        return (), {}

    def write() -> None:
        last.append(
            receiver.write_block(
                text, "plan", source="orchestrator", evictable=False, position=0, author=planner
            )
        )

    benchmark.pedantic(write, setup=setup, rounds=ROUNDS, warmup_rounds=20)
    (plan,) = receiver.get_by_name("plan")
    assert receiver.index_of(plan.runtime_id) == 0 and len(receiver) == 201
    assert plan.author_id == planner.registry_id and not plan.evictable
    planner.release()


@pytest.mark.parametrize("kind", list(TEXTS))
def test_own_orchestrator_write(benchmark: Any, receiver: Any, kind: str) -> None:
    """The same write without ``author=``: what the cross-registry reference costs."""
    text = TEXTS[kind]
    benchmark.group = _group(text)
    last: list[str] = []

    def setup() -> tuple[tuple[()], dict[str, Any]]:
        if last:
            receiver.evict(last.pop(), force=True)
        return (), {}

    def write() -> None:
        last.append(
            receiver.write_block(text, "plan", source="orchestrator", evictable=False, position=0)
        )

    benchmark.pedantic(write, setup=setup, rounds=ROUNDS, warmup_rounds=20)
    assert len(receiver) == 201


@pytest.mark.parametrize("kind", list(TEXTS))
def test_pure_python_write(benchmark: Any, receiver: Any, kind: str) -> None:
    text = TEXTS[kind]
    benchmark.group = _group(text)
    pm = _corpus.load_pymodel()
    model = _corpus.baseline_from(receiver)
    planner_id = str(uuid.uuid4())
    last: list[str] = []

    def setup() -> tuple[tuple[()], dict[str, Any]]:
        if last:
            model.evict(last.pop(), force=True, actor=planner_id)
        return (), {}

    def write() -> None:
        block = pm.ModelBlock(
            runtime_id=str(uuid.uuid4()),
            name="plan",
            content=text,
            tokens=rampart.count_tokens(text),
            source="orchestrator",
            author=planner_id,
            evictable=False,
        )
        last.append(model.write(block, position=0))

    benchmark.pedantic(write, setup=setup, rounds=ROUNDS, warmup_rounds=20)
    assert len(model.blocks) == 201 and model.ids()[0] == last[0]
