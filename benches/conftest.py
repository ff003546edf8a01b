"""Fixtures for the pytest-benchmark suite.

These benchmarks live only in benches/ (pyproject's ``testpaths`` is ``["tests"]``),
so the normal test run never collects them. Run them with::

    python -m pytest benches --benchmark-only -p no:cacheprovider -q

Every benchmark item also carries the ``bench`` marker, so ``-m "not bench"``
deselects them if benches/ is ever passed explicitly.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _corpus
import rampart


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "bench: pytest-benchmark benchmark (benches/ only)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.bench)


class Fixture:
    """One registry of ``n`` blocks and its pure-Python twin (same ids, order, counts)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.reg = _corpus.build_registry(n, default_max_tokens=None)
        self.sep = rampart.DEFAULT_SEPARATOR
        self.sep_tokens = self.reg.count_tokens(self.sep)
        self.model = _corpus.baseline_from(self.reg)

    def check(self, budget: int | None) -> None:
        _corpus.check_same(self.reg, self.model, budget, self.sep, self.sep_tokens)


_FIXTURES: dict[int, Fixture] = {}


@pytest.fixture(scope="session")
def compile_fixture() -> Any:
    """``compile_fixture(n)``: the shared (read-only apart from access counts) registry."""

    def get(n: int) -> Fixture:
        if n not in _FIXTURES:
            _FIXTURES[n] = Fixture(n)
        return _FIXTURES[n]

    yield get
    _FIXTURES.clear()


@pytest.fixture
def fresh_registry() -> Any:
    """``fresh_registry(n)``: a new registry of ``n`` blocks, for benchmarks that mutate."""
    made: list[Any] = []

    def get(n: int) -> Any:
        reg = _corpus.build_registry(n, default_max_tokens=None)
        made.append(reg)
        return reg

    yield get
    made.clear()
