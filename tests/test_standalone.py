"""The repository stands alone (docs/design.md, House rules, "The repository stands
alone"): no tracked file refers to a document or a path outside it, so a clone can
follow every citation. The behaviour contract is docs/specification.md and the house
rules are in docs/design.md; `python scripts/cite_spec.py` maps the old citations to
them one to one.

The names this test looks for are spelled in pieces, so that it does not find itself.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import ROOT

# What a clone cannot follow: the old contract and style guide kept beside the
# repository, the folder that held them, and absolute paths of one machine.
OUTSIDE = re.compile(
    r"\b"
    + "SP"
    + r"EC\b"  # the contract, cited as "<name> §N" or by name
    + "|"
    + re.escape("STYLE" + ".md")
    + "|"
    + re.escape("../" + "shared")
    + "|"
    + re.escape("/wo" + "rk/")
)

# Files that may hold such text, each with why. Only verbatim recordings: this one
# is what mcp-server-git returned for `git show` of the repository's own old commits
# (tests/data/README.md). Its text quotes the history as it was; rewriting it would
# falsify the recording, and it is data that tests read, not a citation to follow.
RECORDINGS = {
    "tests/data/mcp_tool_outputs.json",
    # the second needle set's recorded calls name the clone mcp-server-git ran on
    # (its repo_path argument, as the server saw it)
    "tests/data/needles2/tasks.json",
}


def _tracked() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:  # an sdist: no git history
        pytest.skip(f"not a git checkout: {exc}")
    return [p for p in out.decode().split("\0") if p]


def _outside_references(paths: list[str]) -> list[str]:
    found = []
    for rel in paths:
        if rel in RECORDINGS:
            continue
        try:
            text = (ROOT / rel).read_bytes().decode("utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary (a model delta, an image) or deleted in the work tree
        for n, line in enumerate(text.splitlines(), 1):
            m = OUTSIDE.search(line)
            if m is not None:
                found.append(f"{rel}:{n}: {m.group(0)!r} in {line.strip()[:100]!r}")
    return found


def test_no_tracked_file_refers_outside_the_repository() -> None:
    paths = _tracked()
    assert "docs/specification.md" in paths and len(paths) > 100  # really the checkout
    found = _outside_references(paths)
    assert found == [], (
        "files cite documents or paths outside the repository; "
        "`python scripts/cite_spec.py` maps the citations:\n" + "\n".join(found)
    )


def test_the_check_finds_each_kind_of_outside_reference() -> None:
    # The pattern must catch every form, or the test above could not fail.
    lines = [
        "see " + "SP" + "EC §9",
        "(" + "STYLE" + '.md, "Import costs nothing")',
        "read ../" + "shared/notes",
        "open /wo" + "rk/main/x",
        "the " + "SP" + "EC's hierarchy",
    ]
    for line in lines:
        assert OUTSIDE.search(line) is not None, line
    for fine in ("docs/specification.md §9", "_SPECIAL_LINE", "the shared/ package", "/repo"):
        assert OUTSIDE.search(fine) is None, fine


def test_every_cited_section_exists_in_the_specification() -> None:
    # A citation "docs/specification.md §N" (or a link to specification.md#sN) must
    # land on a section of that page: the numbers are the contract's anchors.
    spec = (ROOT / "docs" / "specification.md").read_text(encoding="utf-8")
    sections = set(re.findall(r"^## (\d+)\. .*\{#s\1\}$", spec, re.MULTILINE))
    assert sections == {str(n) for n in range(1, 10)}
    cited: dict[str, set[str]] = {}
    cite = re.compile(r"specification(?:\.md)? §(\d+)|specification\.md#s(\d+)")
    for rel in _tracked():
        if not rel.endswith((".py", ".pyi", ".rs", ".md", ".toml", ".yml", ".json")):
            continue
        try:
            text = (ROOT / rel).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        for m in cite.finditer(text):
            cited.setdefault(m.group(1) or m.group(2), set()).add(rel)
    missing = {n: sorted(files) for n, files in cited.items() if n not in sections}
    assert cited and missing == {}
