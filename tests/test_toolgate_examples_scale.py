"""The author examples of the scale servers (issue 17): every tool has enough, sane ones.

Data only: the gate's use of them is tested in test_toolgate.py. Reads nothing outside tests/data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
EXAMPLES_B = DATA / "tool_gate_examples_scale_b.json"
# Workspace's create_sheet collides with the Excel server's tool and loads under this name.
RENAMES = {"mcp_workspace_tools.json": {"create_sheet": "workspace_create_sheet"}}


def _tool_names(file_name: str) -> list[str]:
    doc: dict[str, Any] = json.loads((DATA / file_name).read_text(encoding="utf-8"))
    tools = doc["tools"] if "tools" in doc else doc["result"]["tools"]
    rename = RENAMES.get(file_name, {})
    return [rename.get(t["name"], t["name"]) for t in tools]


def test_scale_b_examples_cover_every_atlassian_and_workspace_tool() -> None:
    doc = json.loads(EXAMPLES_B.read_text(encoding="utf-8"))
    assert doc["licence"].startswith("Apache-2.0")
    examples: dict[str, list[str]] = doc["examples"]
    names = _tool_names("mcp_atlassian_tools.json") + _tool_names("mcp_workspace_tools.json")
    assert len(names) == len(set(names)) == 217
    assert sorted(examples) == sorted(names)
    seen: dict[str, str] = {}
    for name, texts in examples.items():
        assert 3 <= len(texts) <= 6, name
        for text in texts:
            assert text == text.strip() and 0 < len(text) <= 200, (name, text)
            # an example that names its tool would teach the gate nothing about real requests
            assert name not in text, (name, text)
            # one request, one tool: a text under two tools would make both examples ambiguous
            assert text.lower() not in seen, (name, seen.get(text.lower()), text)
            seen[text.lower()] = name
