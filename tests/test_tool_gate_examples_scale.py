"""The author examples of the twelve MCP servers of the 400-tool evaluation (issue 17):
tests/data/tool_gate_examples_scale_a.json (ten servers) and _b.json (Atlassian, Google
Workspace). Every tool of their tool lists has its own sane examples, and they load into
the tool schemas the gate embeds. Data only: the gate's use of them is tested in
test_toolgate.py and measured by benches/tool_gate_scale.py."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from rampart.tools import load_examples, with_examples

DATA = Path(__file__).parent / "data"
FILES = {
    "tool_gate_examples_scale_a.json": (
        "excel",
        "chroma",
        "redis",
        "arxiv",
        "wikipedia",
        "elasticsearch",
        "opensearch",
        "obsidian",
        "tree_sitter",
        "zotero",
    ),
    "tool_gate_examples_scale_b.json": ("atlassian", "workspace"),
}
# Workspace's create_sheet collides with the Excel server's tool and loads under this name
# (as in tool_gate_scale.json's "renamed" table).
RENAMES = {"workspace": {"create_sheet": "workspace_create_sheet"}}
# The Wikipedia server lists each tool twice, with and without this prefix; both names
# carry the same list, so the twin is not a duplicate.
TWIN_PREFIX = "wikipedia_"


def _tools(server: str) -> list[dict[str, Any]]:
    data = json.loads((DATA / f"mcp_{server}_tools.json").read_text(encoding="utf-8"))
    tools = data["tools"] if "tools" in data else data["result"]["tools"]
    rename = RENAMES.get(server, {})
    return [dict(t, name=rename.get(t["name"], t["name"])) for t in tools]


@pytest.mark.parametrize("file", sorted(FILES))
def test_examples_name_exactly_the_listed_tools(file: str) -> None:
    doc = json.loads((DATA / file).read_text(encoding="utf-8"))
    assert doc["licence"].startswith("Apache-2.0")
    listed = [t["name"] for server in FILES[file] for t in _tools(server)]
    assert len(listed) == len(set(listed))
    assert set(load_examples(DATA / file)) == set(listed)


@pytest.mark.parametrize("server", [s for servers in FILES.values() for s in servers])
def test_every_tool_has_its_own_examples(server: str) -> None:
    file = next(f for f, servers in FILES.items() if server in servers)
    examples = load_examples(DATA / file)
    tools = _tools(server)
    for schema in with_examples(tools, {t["name"]: examples[t["name"]] for t in tools}):
        ex = schema.examples
        assert 3 <= len(ex) <= 6, schema.name
        for text in ex:
            assert text == text.strip() and 0 < len(text) <= 200, (schema.name, text)
        assert len({x.lower() for x in ex}) == len(ex), schema.name


def test_no_example_serves_two_tools() -> None:
    # One request, one tool: a text under two tools would make both examples ambiguous.
    examples: dict[str, list[str]] = {}
    for file in FILES:
        examples.update(load_examples(DATA / file))
    seen: Counter[str] = Counter()
    for name, ex in examples.items():
        twin = name.removeprefix(TWIN_PREFIX)
        if twin != name and twin in examples:
            assert ex == examples[twin], name
            continue
        seen.update(x.strip().lower() for x in ex)
    assert [x for x, n in seen.items() if n > 1] == []
