"""Property tests for the seed parser: round trips and robustness on arbitrary text."""

from __future__ import annotations

import string
import tempfile
from pathlib import Path

import rampart
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from rampart.seeds import parse_file

names = st.text(string.ascii_letters + string.digits + "_-", min_size=1, max_size=20)
tags = st.lists(st.text(string.ascii_lowercase, min_size=1, max_size=8), max_size=3)
priorities = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
body_lines = st.sampled_from(
    [
        "Run the tests before you commit.",
        "",
        "---",  # a Markdown rule: body text unless front matter follows
        "## A section",
        "- a list item with name: inside",
        "```yaml",
        "```",
        "name: inside a body",
        "Ünïcödé text, 世界, emoji 🚀",
        "| a | table |",
    ]
)


def _body(lines: list[str]) -> str:
    # A fence left open would swallow later blocks; close it, as a writer would.
    # (CommonMark: "```yaml" only opens; a bare "```" closes an open fence.)
    open_fence = False
    for ln in lines:
        if not open_fence and ln.startswith("```"):
            open_fence = True
        elif open_fence and ln == "```":
            open_fence = False
    if open_fence:
        lines = [*lines, "```"]
    return "\n".join(lines).strip()


def _section(name: str, priority: float, tag_list: list[str], body: str) -> str:
    front = yaml.safe_dump(
        {"name": name, "priority": priority, "tags": tag_list}, sort_keys=False
    ).strip()
    return f"---\n{front}\n---\n{body}\n"


blocks = st.lists(
    st.tuples(names, priorities, tags, st.lists(body_lines, max_size=8).map(_body)),
    min_size=1,
    max_size=6,
)


def _may_start_a_block(body: str) -> bool:
    """A rule line whose following text mentions ``name:`` at a line start may be
    front matter by docs/specification.md §2 (a boundary or a ParseError), outside code fences."""
    lines = body.split("\n")
    fence = False
    for k, ln in enumerate(lines):
        if ln.startswith("```"):
            fence = not fence if (not fence or ln == "```") else fence
            continue
        if not fence and ln == "---" and any(x.startswith("name:") for x in lines[k + 1 :]):
            return True
    return False


@settings(max_examples=200, deadline=None)
@given(blocks)
def test_written_seed_files_parse_back_exactly(
    spec: list[tuple[str, float, list[str], str]],
) -> None:
    assume(not any(_may_start_a_block(body) for *_, body in spec))
    text = "\n".join(_section(*b) for b in spec)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gen.md"
        path.write_text(text, encoding="utf-8")
        parsed = parse_file(path)
    got = [(b.name, b.priority, list(b.tags), b.content) for b in parsed]
    assert got == [(n, p, t, body) for n, p, t, body in spec]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(body_lines, st.text(max_size=30)), max_size=20))
def test_arbitrary_text_parses_or_raises_parse_error(lines: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "any.md"
        path.write_text("\n".join(lines), encoding="utf-8")
        try:
            parsed = parse_file(path)
        except rampart.ParseError as exc:
            assert exc.path == str(path) and exc.line is not None and exc.line >= 1
            return
    for b in parsed:
        assert b.name and isinstance(b.content, str) and 0.0 <= b.priority <= 1.0
