"""The pytest entry point of rampart's plugin (``rampart.pytest_plugin``).

pytest loads every ``pytest11`` entry point in every session, and importing
``rampart.pytest_plugin`` would import the ``rampart`` package first: the core, the
registry, the stores' code. This module, outside the package, holds what pytest
needs at start-up (the option, the ini settings, the marker, the summary) and the
two fixtures, which import ``rampart`` only when a test asks for one. A session
whose tests never use them never imports rampart. The fixtures' work is in
:mod:`rampart.pytest_plugin` (see docs/pytest-plugin.md).

PYTEST_DONT_REWRITE: no asserts here, and ``-p rampart.pytest_plugin`` imports this
module before pytest registers it (pytest would warn that it cannot rewrite it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from rampart.pytest_plugin import RampartGolden, RampartLatency

from rampart_pytest._state import DEFAULT_DIR, DEFAULT_RATIO
from rampart_pytest._state import SESSION as _SESSION
from rampart_pytest._state import Session as _Session


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--rampart-update`` and the ``rampart_dir`` / ``rampart_latency_ratio`` ini options."""
    group = parser.getgroup("rampart", "rampart golden prompts and compile latency")
    group.addoption(
        "--rampart-update",
        action="store_true",
        default=False,
        help="write or refresh rampart golden files and latency baselines instead of "
        "comparing with them",
    )
    parser.addini(
        "rampart_dir",
        "folder, next to each test file, for rampart golden files and latency baselines",
        default=DEFAULT_DIR,
    )
    parser.addini(
        "rampart_latency_ratio",
        "rampart_latency fails when the median exceeds this multiple of the baseline's",
        default=str(DEFAULT_RATIO),
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``rampart_latency`` marker and this session's state."""
    config.addinivalue_line(
        "markers",
        "rampart_latency(ratio): the slowdown against the saved baseline that "
        "fails the rampart_latency check in this test",
    )
    config.stash[_SESSION] = _Session(update=bool(config.getoption("rampart_update")))


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    """List the golden files and baselines ``--rampart-update`` wrote."""
    st = config.stash.get(_SESSION, None)
    if st is None or not (st.written or st.latency):
        return
    terminalreporter.section("rampart")
    for line in st.latency:
        terminalreporter.write_line(line)
    for path in st.written:
        terminalreporter.write_line(f"wrote {_relative(path, config.rootpath)}")


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


@pytest.fixture
def rampart_golden(request: pytest.FixtureRequest) -> RampartGolden:
    """Snapshot a compile's prompt and request bodies to a golden file; see
    :class:`rampart.pytest_plugin.RampartGolden`."""
    from rampart.pytest_plugin import RampartGolden

    return RampartGolden(request)


@pytest.fixture
def rampart_latency(request: pytest.FixtureRequest) -> Iterator[RampartLatency]:
    """Benchmark a compile and compare its median with a saved baseline; see
    :class:`rampart.pytest_plugin.RampartLatency`."""
    from rampart.pytest_plugin import RampartLatency

    yield RampartLatency(request)
