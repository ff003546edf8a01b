"""pytest-benchmark suite: rampart vs the pure-Python OrderedDict model (tests/pymodel.py).

    python -m pytest benches --benchmark-only -p no:cacheprovider -q

Every benchmark runs in pedantic mode with a fixed (calibrated once, untimed)
number of rounds and iterations, so the whole run stays around a couple of minutes
on a shared 2-core machine. Same-semantics checks happen in setup, never in the
timed part.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from typing import Any

import _corpus
import pytest
import rampart

BUDGETS = (4096, None)  # None = unlimited (registry built with default_max_tokens=None)

# ~60 cl100k tokens of instruction text, for write/count benchmarks
NOTE = _corpus.blocks(1)[0][1]


def _plan(fn: Callable[[], Any], target_s: float, max_rounds: int = 200) -> tuple[int, int]:
    """(rounds, iterations) so one round takes >= ~1 ms and all rounds ~target_s."""
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    iterations = max(1, min(1000, int(1e-3 / once)))
    rounds = max(3, min(max_rounds, int(target_s / (once * iterations))))
    return rounds, iterations


def _run(benchmark: Any, fn: Callable[[], Any], target_s: float = 0.6, **kw: Any) -> Any:
    rounds, iterations = _plan(fn, target_s, **kw)
    return benchmark.pedantic(fn, rounds=rounds, iterations=iterations, warmup_rounds=1)


def _budget_id(budget: int | None) -> str:
    return "unlimited" if budget is None else str(budget)


# ---- compile: rampart compile / dry-run vs pure-Python baseline ----------------------------

CASES = [(n, b) for n in _corpus.SIZES for b in BUDGETS]
IMPLS = ["rampart-compile", "rampart-dry-run", "rampart-compile+names", "pure-python"]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(("n", "budget"), CASES, ids=[f"N{n}-{_budget_id(b)}" for n, b in CASES])
def test_compile(
    benchmark: Any, compile_fixture: Any, n: int, budget: int | None, impl: str
) -> None:
    fx = compile_fixture(n)
    fx.check(budget)  # same semantics: prompt, included, excluded, total (untimed)
    benchmark.group = f"compile N={n} budget={_budget_id(budget)}"
    reg, model, sep, sep_tokens = fx.reg, fx.model, fx.sep, fx.sep_tokens

    if impl == "rampart-compile":

        def fn() -> Any:
            return reg.compile(max_tokens=budget)
    elif impl == "rampart-dry-run":

        def fn() -> Any:
            return reg.compile_dry_run(max_tokens=budget)
    elif impl == "rampart-compile+names":
        # like-for-like with the baseline, which always materialises both name lists
        def fn() -> Any:
            r = reg.compile(max_tokens=budget)
            return r.prompt, r.included, r.excluded, r.total_tokens
    else:

        def fn() -> Any:
            return model.compile(budget, sep_tokens, sep, count_access=True)

    # the 100k-unlimited case builds a ~30 MB prompt per call: few rounds
    big = n >= 100_000 and budget is None
    _run(benchmark, fn, target_s=1.0 if big else 0.6, max_rounds=8 if big else 200)


# ---- writes, promote, snapshot -----------------------------------------------------------


def test_write_agent_block(benchmark: Any, fresh_registry: Any) -> None:
    """Append one ~60-token agent block to a 200-block registry; the previous write is
    evicted in (untimed) setup so the registry stays at 200/201 blocks. (Its token
    count is left to the first compile that reaches it.)"""
    benchmark.group = "write_agent_block N=200"
    reg = fresh_registry(200)
    last: list[str] = []

    def setup() -> tuple[tuple[()], dict[str, Any]]:
        if last:
            reg.evict(last.pop())
        return (), {}

    def write() -> None:
        last.append(reg.write_agent_block(NOTE, "traj-bench", semantic_name="agent_note"))

    benchmark.pedantic(write, setup=setup, rounds=2000, warmup_rounds=10)
    assert len(reg) == 201


@pytest.mark.parametrize("n", [200, 100_000])
def test_promote_to_front(benchmark: Any, fresh_registry: Any, n: int) -> None:
    """Move a (seeded) random block to the front, over and over."""
    benchmark.group = f"promote_to_front N={n}"
    reg = fresh_registry(n)
    ids = reg.runtime_ids()
    random.Random(7).shuffle(ids)
    it = itertools.cycle(ids)

    def promote() -> int:
        return reg.promote_to_front(next(it))

    _run(benchmark, promote, target_s=0.5)


@pytest.mark.parametrize("n", [200, 100_000])
def test_snapshot(benchmark: Any, fresh_registry: Any, n: int) -> None:
    benchmark.group = f"snapshot N={n}"
    reg = fresh_registry(n)
    snap = reg.snapshot()
    assert len(snap) == n
    _run(benchmark, reg.snapshot, target_s=0.4)


@pytest.mark.parametrize("n", [200, 100_000])
def test_first_write_after_snapshot(benchmark: Any, fresh_registry: Any, n: int) -> None:
    """The copy-on-write price: the first promote after a snapshot (or while any
    CompileResult is alive) copies the order (n pointers + n refcount bumps).
    Setup takes a fresh snapshot and drops the previous one (untimed)."""
    benchmark.group = f"promote_to_front after snapshot N={n}"
    reg = fresh_registry(n)
    ids = reg.runtime_ids()
    random.Random(7).shuffle(ids)
    it = itertools.cycle(ids)
    held: list[Any] = []

    def setup() -> tuple[tuple[()], dict[str, Any]]:
        held.clear()
        held.append(reg.snapshot())
        return (), {}

    def promote() -> int:
        return reg.promote_to_front(next(it))

    benchmark.pedantic(promote, setup=setup, rounds=300 if n < 10_000 else 100, warmup_rounds=2)


# ---- cold start, token counting ------------------------------------------------------------


def test_from_files_cold_start(benchmark: Any) -> None:
    benchmark.group = "from_files(seeds) cold start"
    seeds = str(_corpus.SEEDS)
    reg = rampart.BlockRegistry.from_files([seeds])
    assert len(reg) == 31
    _run(benchmark, lambda: rampart.BlockRegistry.from_files([seeds]), target_s=0.8, max_rounds=60)


def test_count_tokens(benchmark: Any) -> None:
    benchmark.group = "count_tokens (~60 tokens)"
    assert 55 <= rampart.count_tokens(NOTE) <= 80
    _run(benchmark, lambda: rampart.count_tokens(NOTE), target_s=0.4)
