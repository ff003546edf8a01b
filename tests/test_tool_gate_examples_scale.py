"""tests/data/tool_gate_examples_scale_a.json, the author examples of the ten public MCP
servers of the 400-tool evaluation: every tool of their tool lists has its own examples,
and they load into the tool schemas the gate embeds."""

import json
from collections import Counter
from pathlib import Path

import pytest
from rampart.tools import load_examples, with_examples

DATA = Path(__file__).parent / "data"
EXAMPLES = DATA / "tool_gate_examples_scale_a.json"
SERVERS = (
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
)
# The Wikipedia server lists each tool twice, with and without this prefix; both names
# carry the same list, so the twin is not a duplicate.
TWIN_PREFIX = "wikipedia_"


def _tools(server: str) -> list[dict]:
    data = json.loads((DATA / f"mcp_{server}_tools.json").read_text(encoding="utf-8"))
    return data["tools"] if "tools" in data else data["result"]["tools"]


@pytest.mark.parametrize("server", SERVERS)
def test_every_tool_has_its_own_examples(server: str) -> None:
    examples = load_examples(EXAMPLES)
    tools = _tools(server)
    names = {t["name"] for t in tools}
    schemas = with_examples(tools, {k: v for k, v in examples.items() if k in names})
    for schema in schemas:
        ex = schema.examples
        assert len(ex) >= 3, schema.name
        assert all(x.strip() and len(x) <= 200 for x in ex), schema.name
        assert len({x.strip().lower() for x in ex}) == len(ex), schema.name


def test_examples_name_only_listed_tools_and_never_repeat_across_tools() -> None:
    examples = load_examples(EXAMPLES)
    listed = {t["name"] for server in SERVERS for t in _tools(server)}
    assert set(examples) == listed
    seen: Counter[str] = Counter()
    for name, ex in examples.items():
        twin = name.removeprefix(TWIN_PREFIX)
        if twin != name and twin in examples:
            assert ex == examples[twin], name
            continue
        seen.update(x.strip().lower() for x in ex)
    assert [x for x, n in seen.items() if n > 1] == []
