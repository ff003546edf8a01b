"""Tool schemas: shape detection, validation, conversion, rendering, and tool blocks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import rampart
from hypothesis import given, settings
from hypothesis import strategies as st
from rampart import ToolSchema, parse_tools, render_tool
from rampart.tools import FORMATS, tool_gate_text

from tests.conftest import words

DATA = Path(__file__).resolve().parent / "data"
FS = DATA / "mcp_filesystem_tools.json"
GIT = DATA / "mcp_git_tools.json"
OPENAI = DATA / "openai_tools.json"
ANTHROPIC = DATA / "anthropic_tools.json"

OBJ = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def names(schemas: list[ToolSchema]) -> list[str]:
    return [s.name for s in schemas]


# ---- shape detection --------------------------------------------------------------------


def test_each_data_file_is_detected() -> None:
    fs = parse_tools(FS)  # a JSON-RPC response around a tools/list result
    assert names(fs)[:4] == ["read_text_file", "read_multiple_files", "write_file", "edit_file"]
    assert {s.source_format for s in fs} == {"mcp"}
    git = parse_tools(str(GIT))  # a bare {"tools": [...]} result, path as str
    assert "git_commit" in names(git) and {s.source_format for s in git} == {"mcp"}
    oa = parse_tools(OPENAI)
    assert [s.source_format for s in oa] == ["openai"] * 3 + ["openai-responses"]
    an = parse_tools(ANTHROPIC)
    assert {s.source_format for s in an} == {"anthropic"}  # "type": "custom" included


def test_mcp_fields_are_kept() -> None:
    info = next(s for s in parse_tools(FS) if s.name == "get_file_info")
    assert info.title == "Get File Info"
    assert info.annotations == {"readOnlyHint": True}
    assert info.output_schema is not None and info.output_schema["required"] == [
        "size",
        "isDirectory",
    ]
    weather = parse_tools(OPENAI)[0]
    assert weather.strict is True


def test_mixed_shapes_in_one_list_and_other_containers() -> None:
    mixed = [
        {"type": "function", "function": {"name": "a", "parameters": OBJ}},
        {"type": "function", "name": "b", "parameters": OBJ},
        {"name": "c", "input_schema": OBJ},
        {"name": "d", "inputSchema": OBJ},
    ]
    got = parse_tools(mixed)
    assert names(got) == ["a", "b", "c", "d"]
    assert [s.source_format for s in got] == ["openai", "openai-responses", "anthropic", "mcp"]
    assert names(parse_tools({"tools": mixed})) == ["a", "b", "c", "d"]
    assert names(parse_tools({"jsonrpc": "2.0", "id": 1, "result": {"tools": mixed}})) == list(
        "abcd"
    )
    assert names(parse_tools(tuple(mixed))) == list("abcd")
    assert names(parse_tools(mixed[2])) == ["c"]  # a single definition
    assert parse_tools([]) == []


def test_openai_function_without_parameters_takes_no_arguments() -> None:
    (t,) = parse_tools([{"type": "function", "function": {"name": "now"}}])
    assert t.input_schema == {"type": "object", "properties": {}}
    assert t.description == ""


# ---- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"name": "x", "params": {}}, r"tools\[1\] \('x'\): expected an OpenAI .* keys \['name'"),
        ("read_file", r"tools\[1\]: expected .*got a JSON string"),
        ({"type": "web_search_preview"}, r"tools\[1\]: tool type 'web_search_preview'"),
        ({"type": "bash_20250124", "name": "bash"}, r"\('bash'\): tool type 'bash_20250124'"),
        ({"name": "x", "inputSchema": OBJ, "input_schema": OBJ}, r"both \"inputSchema\""),
        ({"inputSchema": OBJ}, r"tools\[1\]: tool definition without a name"),
        ({"type": "function", "function": {"parameters": OBJ}}, r"without a name"),
        ({"type": "function", "function": "x"}, r'"function" must be an object'),
        ({"name": "read file", "inputSchema": OBJ}, r"'read file' is not a valid tool name"),
        ({"name": "a" * 65, "inputSchema": OBJ}, r"not a valid tool name: 1-64"),
        ({"name": "fs.read", "inputSchema": OBJ}, r"not a valid tool name"),
        ({"name": 7, "inputSchema": OBJ}, r"name must be a string"),
        ({"name": "x", "inputSchema": {"type": "array"}}, r'"type": "object"'),
        ({"name": "x", "inputSchema": {"properties": {}}}, r'"type": "object"'),
        ({"name": "x", "inputSchema": []}, r"must be a JSON Schema object, got list"),
        ({"name": "x", "inputSchema": {"type": "object", "properties": []}}, r"properties"),
        ({"name": "x", "inputSchema": {"type": "object", "required": "a"}}, r"required"),
        ({"name": "x", "description": 3, "inputSchema": OBJ}, r"description must be a str"),
        ({"name": "x", "title": 3, "inputSchema": OBJ}, r"title must be a str"),
        ({"name": "x", "annotations": [], "inputSchema": OBJ}, r"annotations must be"),
        ({"name": "x", "outputSchema": {"type": "string"}, "inputSchema": OBJ}, r"output"),
        (
            {"type": "function", "function": {"name": "x", "parameters": OBJ, "strict": "y"}},
            r"strict must be a bool",
        ),
        ({"name": "x", "inputSchema": {**OBJ, "default": float("nan")}}, r"not plain JSON"),
        ({"name": "x", "inputSchema": {**OBJ, "default": {1, 2}}}, r"not plain JSON"),
        ({"name": "ok", "inputSchema": OBJ}, r"tools\[1\] \('ok'\): duplicate tool name 'ok' \(al"),
    ],
)
def test_bad_entries_name_index_and_tool(entry: Any, match: str) -> None:
    good = {"name": "ok", "inputSchema": OBJ}
    with pytest.raises(rampart.UnsupportedFormatError, match=match) as info:
        parse_tools([good, entry])
    assert isinstance(info.value, ValueError) and isinstance(info.value, rampart.RampartError)


def test_errors_name_the_file(tmp_path: Path) -> None:
    f = tmp_path / "tools.json"
    f.write_text(json.dumps({"tools": [{"name": "ok", "inputSchema": OBJ}, {"name": "bad"}]}))
    with pytest.raises(rampart.UnsupportedFormatError, match=rf"{f}: tools\[1\] \('bad'\)"):
        parse_tools(f)
    f.write_text('{"tools": [\n  {"name": "x",}\n]}')
    with pytest.raises(rampart.UnsupportedFormatError, match=rf"{f}:2:\d+: not valid JSON"):
        parse_tools(f)
    with pytest.raises(rampart.UnsupportedFormatError, match="no such tools file"):
        parse_tools(tmp_path / "missing.json")
    f.write_bytes(b'\xef\xbb\xbf[{"name": "bom", "input_schema": {"type": "object"}}]')
    assert names(parse_tools(f)) == ["bom"]  # a UTF-8 BOM is fine
    f.write_bytes(b"\xff\xfe[]")
    with pytest.raises(rampart.UnsupportedFormatError, match="cannot read"):
        parse_tools(f)


@pytest.mark.parametrize(
    ("obj", "match"),
    [
        (42, "got int"),
        ({"tools": {"name": "x"}}, r'"tools" must be an array'),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": -32601}}, "JSON-RPC error response"),
        ({"jsonrpc": "2.0", "id": 1, "result": []}, 'without a "result" object'),
        ({"name": "x"}, r"tools\[0\] \('x'\): expected"),
    ],
)
def test_bad_containers(obj: Any, match: str) -> None:
    with pytest.raises(rampart.UnsupportedFormatError, match=match):
        parse_tools(obj)


# ---- ToolSchema -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [FS, GIT, OPENAI, ANTHROPIC])
def test_round_trips_preserve_name_description_schema(path: Path) -> None:
    for original in parse_tools(path):
        for fmt in FORMATS:
            (back,) = parse_tools([original.to_format(fmt)])
            assert back.source_format == fmt
            assert (back.name, back.description, back.input_schema) == (
                original.name,
                original.description,
                original.input_schema,
            )
        # MCP keeps everything but OpenAI's strict; the stored form keeps everything.
        (via_mcp,) = parse_tools([original.to_mcp()])
        assert (via_mcp.title, via_mcp.annotations, via_mcp.output_schema) == (
            original.title,
            original.annotations,
            original.output_schema,
        )
        stored = ToolSchema.from_json(original.to_json())
        assert stored == original and stored.source_format == original.source_format


def test_conversion_shapes() -> None:
    t = ToolSchema("find", "Find things.", OBJ, title="Find", annotations={"readOnlyHint": True})
    assert t.to_openai() == {
        "type": "function",
        "function": {"name": "find", "description": "Find things.", "parameters": OBJ},
    }
    assert t.to_openai_responses() == {
        "type": "function",
        "name": "find",
        "description": "Find things.",
        "parameters": OBJ,
        "strict": False,  # the Responses API requires the key
    }
    assert t.to_anthropic() == {"name": "find", "description": "Find things.", "input_schema": OBJ}
    assert t.to_mcp() == {
        "name": "find",
        "title": "Find",
        "description": "Find things.",
        "inputSchema": OBJ,
        "annotations": {"readOnlyHint": True},
    }
    assert t.to_format("anthropic") == t.to_anthropic()
    strict = ToolSchema("s", input_schema=OBJ, strict=False)
    assert strict.to_openai()["function"]["strict"] is False
    assert strict.to_anthropic()["strict"] is False  # Anthropic's ToolParam has strict too
    assert "description" not in strict.to_anthropic()
    assert ToolSchema("s", input_schema=OBJ, strict=True).to_openai_responses()["strict"] is True


def test_unknown_format_is_an_invalid_argument() -> None:
    t = ToolSchema("x")
    for bad in ("vertex", "OpenAI", None, 3):
        with pytest.raises(rampart.InvalidArgumentError, match="openai, openai-responses"):
            t.to_format(bad)  # type: ignore[arg-type]


def test_schema_is_frozen_private_and_hashable() -> None:
    src = {"type": "object", "properties": {"a": {"type": "string"}}}
    t = ToolSchema("x", input_schema=src)
    src["properties"]["b"] = {"type": "string"}  # the caller's dict is not the schema's
    assert list(t.input_schema["properties"]) == ["a"]
    t.to_openai()["function"]["parameters"]["properties"].clear()  # results are copies
    t.to_mcp()["inputSchema"]["type"] = "array"
    assert t.input_schema == {"type": "object", "properties": {"a": {"type": "string"}}}
    with pytest.raises(AttributeError):
        t.name = "y"  # type: ignore[misc]
    same = ToolSchema("x", input_schema=t.input_schema, source_format="mcp")
    assert same == t and hash(same) == hash(t) and len({t, same}) == 1
    assert ToolSchema("x", "other", t.input_schema) != t


def test_direct_construction_is_validated() -> None:
    with pytest.raises(rampart.InvalidArgumentError, match="not a valid tool name"):
        ToolSchema("")
    with pytest.raises(rampart.InvalidArgumentError, match='"type": "object"'):
        ToolSchema("x", input_schema={"type": "string"})
    with pytest.raises(rampart.InvalidArgumentError, match="source_format"):
        ToolSchema("x", source_format="yaml")
    with pytest.raises(rampart.InvalidArgumentError):
        ToolSchema.from_json("{not json")
    with pytest.raises(rampart.InvalidArgumentError, match="needs 'name' and 'input_schema'"):
        ToolSchema.from_dict({"name": "x"})


# ---- rendering ----------------------------------------------------------------------------------


def tool(name: str, path: Path = FS) -> ToolSchema:
    return next(s for s in parse_tools(path) if s.name == name)


def test_render_required_optional_defaults_and_nested_arrays() -> None:
    assert render_tool(tool("edit_file")) == (
        "Tool `edit_file`: Make line-based edits to a text file. Each edit replaces an exact "
        "sequence of lines with new text. Returns a git-style diff of the changes.\n"
        "Hints: destructive.\n"
        "Parameters:\n"
        "- path (string, required): Path of the file to edit.\n"
        "- edits (array of object, required): Edits to apply in order.\n"
        "  - oldText (string, required): Text to search for; must match exactly.\n"
        "  - newText (string, required): Text to replace it with.\n"
        "- dryRun (boolean, optional; default false): Preview the changes as a diff without "
        "writing them."
    )


def test_render_enums_refs_nullable_objects_and_bounds() -> None:
    text = render_tool(tool("git_log", GIT))
    assert text.splitlines() == [
        "Tool `git_log`: Shows the commit logs",
        "Hints: read-only.",
        "Parameters:",
        "- repo_path (string, required)",
        "- max_count (integer, optional; min 1; default 10)",
        '- order (string, optional; one of "date", "author-date", "topo"; default "date"): '
        "How commits are ordered.",
        "- dates (object or null, optional; default null): Restrict the log to a date range.",
        "  - since (string, required): Only commits after this date, e.g. '2 weeks ago' or "
        "'2024-01-15'.",
        "  - until (string or null, optional; default null)",
    ]
    cal = render_tool(tool("create_calendar_event", OPENAI))
    assert "- start (date-time string, required): Start time" in cal
    assert "- duration_minutes (integer, optional; min 5; max 480; default 30)" in cal
    assert "  - email (email string, required)" in cal
    assert '  - method (string, required; one of "email", "popup")' in cal
    weather = render_tool(tool("get_weather", OPENAI))
    assert '- units (string or null, required; one of "celsius", "fahrenheit", null)' in weather
    cust = render_tool(tool("get_customer", ANTHROPIC))
    assert '- include (array of string, optional; default ["orders"])' in cust


def test_render_header_title_hints_and_no_parameters() -> None:
    # a title that only respells the name is left out; a real one is kept
    assert render_tool(tool("list_allowed_directories")) == (
        "Tool `list_allowed_directories`: List the directories this server is allowed to "
        "access.\nHints: read-only.\nParameters: none."
    )
    t = ToolSchema("ls", "List.", title="List directory", annotations={"openWorldHint": True})
    assert render_tool(t).splitlines()[:2] == [
        "Tool `ls` (List directory): List.",
        "Hints: open-world.",
    ]
    assert render_tool(ToolSchema("ping")) == "Tool `ping`.\nParameters: none."


def test_render_survives_odd_schemas() -> None:
    recursive = {
        "type": "object",
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"child": {"$ref": "#/$defs/Node"}, "label": {"type": "string"}},
            }
        },
        "properties": {
            "root": {"$ref": "#/$defs/Node", "description": "The tree.\n  Multi-line."},
            "dangling": {"$ref": "#/$defs/Missing"},
            "remote": {"$ref": "https://example.com/schema.json"},
            "anything": {},
            "yes": True,
            "tuple": {"type": "array", "prefixItems": [{"type": "string"}]},
            "map": {"type": "object", "additionalProperties": {"type": "integer"}},
            "choice": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "fixed": {"const": "v1"},
            "level": {"enum": [1, 2, 3]},
            "deep": {"type": "object", "properties": {"a": {"type": "object", "properties": {
                "b": {"type": "object", "properties": {"c": {"type": "object", "properties": {
                    "d": {"type": "object", "properties": {"e": {"type": "string"}}}}}}}}}}},
        },
    }  # fmt: skip
    text = render_tool(ToolSchema("odd", input_schema=recursive))
    assert text == render_tool(ToolSchema("odd", input_schema=recursive))  # deterministic
    lines = text.splitlines()
    assert "- root (object, optional): The tree. Multi-line." in lines
    assert "  - child (object, optional)" in lines  # the cycle stops after one round
    assert "  - label (string, optional)" in lines
    assert "- dangling (any, optional)" in lines and "- remote (any, optional)" in lines
    assert "- anything (any, optional)" in lines and "- yes (any, optional)" in lines
    assert "- tuple (array, optional)" in lines
    assert "- map (object of integer, optional)" in lines
    assert "- choice (string or integer, optional)" in lines
    assert '- fixed (string, optional; always "v1")' in lines
    assert "- level (integer, optional; one of 1, 2, 3)" in lines
    assert "      - c (object, optional)" in lines  # four levels shown, no deeper
    assert not any(line.strip().startswith("- d ") for line in lines)
    with pytest.raises(rampart.InvalidArgumentError):
        render_tool({"name": "x"})  # type: ignore[arg-type]


# ---- hypothesis: random tools round-trip through every format --------------------------------

_prop_names = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)
_leaf = st.fixed_dictionaries(
    {"type": st.sampled_from(["string", "integer", "number", "boolean", "null"])},
    optional={
        "description": st.text(max_size=30),
        "default": st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        "enum": st.lists(st.text(max_size=5), min_size=1, max_size=3),
    },
)


def _object(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    def build(props: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "object", "properties": props}
        req = data.draw(st.lists(st.sampled_from(sorted(props)), unique=True)) if props else []
        if req:
            out["required"] = req
        return out

    return st.builds(build, st.dictionaries(_prop_names, children, max_size=4), st.data())


_schema = st.recursive(
    _leaf,
    lambda kids: _object(kids) | st.builds(lambda i: {"type": "array", "items": i}, kids),
    max_leaves=12,
)
_tool = st.builds(
    ToolSchema,
    name=st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True),
    description=st.text(max_size=60),
    input_schema=_object(_schema),
    title=st.none() | st.text(max_size=20),
    annotations=st.none() | st.dictionaries(st.sampled_from(["readOnlyHint", "x"]), st.booleans()),
    output_schema=st.none() | _object(_leaf),
    strict=st.none() | st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(_tool)
def test_random_tools_round_trip_through_every_format(t: ToolSchema) -> None:
    for fmt in FORMATS:
        (back,) = parse_tools(json.loads(json.dumps([t.to_format(fmt)])))
        assert (back.name, back.description, back.input_schema) == (
            t.name,
            t.description,
            t.input_schema,
        )
    (mcp,) = parse_tools([t.to_mcp()])
    assert mcp == ToolSchema(
        t.name, t.description, t.input_schema, t.title, t.annotations, t.output_schema
    )
    assert ToolSchema.from_json(t.to_json()) == t
    text = render_tool(t)
    assert text == render_tool(mcp) and text.startswith(f"Tool `{t.name}`")
    for prop in t.input_schema["properties"]:
        assert f"\n- {prop} (" in text


# ---- tool blocks in a registry --------------------------------------------------------------


@pytest.fixture
def treg() -> Any:
    r = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None, label="tools-under-test")
    yield r
    r.release()


def test_load_tools_makes_tagged_seed_blocks_that_keep_their_schema(treg: Any) -> None:
    treg.write_block("Always explain the plan first.", "rule")
    ids = treg.load_tools(GIT, priority=0.7, tags=["git", "tool"])
    schemas = parse_tools(GIT)
    assert len(ids) == len(schemas) == 11 and treg.runtime_ids()[1:] == ids
    for rid, schema in zip(ids, schemas):
        b = treg.get_by_id(rid)
        assert b.semantic_name == schema.name
        assert b.tags == ("tool", "git")
        assert (b.source, b.evictable, b.author_id) == ("seed", True, treg.registry_id)
        assert b.priority == 0.7
        assert b.content == render_tool(schema)
        assert b.gate_text == tool_gate_text(schema)  # the gate embeds words, not markup
        assert b.tool_schema == schema and b.tool_schema.source_format == "mcp"
        assert b.token_count == words(b.content)
    assert treg.get_by_name("rule")[0].tool_schema is None
    assert [b.semantic_name for b in treg.find_by_tag("tool")] == names(schemas)
    with pytest.raises(rampart.SeedMutationError):
        treg.update_block_content(ids[0], "Tool `git_status`: deletes everything")


def test_compile_lists_included_tools_in_compile_order(treg: Any) -> None:
    ids = treg.load_tools(FS)
    treg.write_block("Work only inside the project directory.", "scope")
    treg.promote(ids[8], to_front=True)  # search_files first
    treg.promote(ids[0], to_back=True)  # read_text_file last
    result = treg.compile()
    expected = [n for n in result.included if n != "scope"]
    assert expected[0] == "search_files" and expected[-1] == "read_text_file"
    assert [t["function"]["name"] for t in result.tools()] == expected
    assert [t["name"] for t in result.tools("anthropic")] == expected
    assert [t["name"] for t in result.tools("mcp")] == expected
    assert [t["name"] for t in result.tools("openai-responses")] == expected
    assert result.tools("mcp")[-1] == parse_tools(FS)[0].to_mcp()
    with pytest.raises(rampart.InvalidArgumentError):
        result.tools("xml")


def test_evicted_tool_is_absent_from_prompt_and_tools(treg: Any) -> None:
    ids = dict(zip(names(parse_tools(GIT)), treg.load_tools(GIT)))
    before = treg.compile()
    assert "git_reset" in before.prompt
    treg.evict(ids["git_reset"])  # evictable: no force needed
    after = treg.compile()
    assert after.prompt.count("git_reset") == 0
    assert "git_reset" not in [t["function"]["name"] for t in after.tools()]
    assert len(after.tools()) == len(before.tools()) - 1
    # the result compiled earlier still describes what it compiled
    assert "git_reset" in [t["function"]["name"] for t in before.tools()]


def test_policy_eviction_can_drop_tools_and_pinned_tools_stay(treg: Any) -> None:
    treg.load_tools(ANTHROPIC, priority=0.1)
    pinned = treg.load_tools(GIT, evictable=False)
    removed = treg.evict_by_policy()
    assert len(removed) == 4 and treg.runtime_ids() == pinned
    with pytest.raises(rampart.EvictionError):
        treg.evict(pinned[0])
    other = rampart.BlockRegistry(tokeniser=words)
    with pytest.raises(PermissionError):
        treg.evict(pinned[0], force=True, by=other)
    treg.evict(pinned[0], force=True)  # the loading registry is the author
    assert pinned[0] not in treg


def test_budget_and_gate_exclude_tools(treg: Any) -> None:
    ids = treg.load_tools(ANTHROPIC)
    costs = [treg.get_by_id(i).token_count for i in ids]
    sep = treg.count_tokens(rampart.DEFAULT_SEPARATOR)
    result = treg.compile(max_tokens=costs[0] + sep + costs[1])
    assert [t["name"] for t in result.tools("anthropic")] == ["lookup_order", "issue_refund"]
    assert "get_customer" in result.excluded

    def refunds_only(task: str, blocks: Any) -> list[float]:
        return [1.0 if "refund" in b.semantic_name else 0.0 for b in blocks]

    gated = treg.compile(task_text="refund", relevance_threshold=0.5, gate=refunds_only)
    assert [t["name"] for t in gated.tools("anthropic")] == ["issue_refund"]
    assert gated.prompt.count("lookup_order") == 0


def test_load_is_all_or_nothing(treg: Any, tmp_path: Path) -> None:
    treg.write_block("x", "x")
    good = [{"name": "a", "inputSchema": OBJ}, {"name": "b", "inputSchema": OBJ}]
    with pytest.raises(rampart.UnsupportedFormatError, match=r"tools\[2\]"):
        treg.load_tools([*good, {"name": "c"}])
    assert len(treg) == 1
    with pytest.raises(rampart.InvalidArgumentError, match="priority"):
        treg.load_tools(good, priority=1.5)
    with pytest.raises(rampart.InvalidArgumentError):
        treg.load_tools(good, tags=["ok", ""])  # rejected by the core: still nothing written
    with pytest.raises(rampart.InvalidArgumentError):
        treg.load_tools(good, tags="tool")
    assert len(treg) == 1
    first = treg.load_tools(good)
    with pytest.raises(rampart.InvalidArgumentError, match=r"already holds tool 'b' \(block "):
        treg.load_tools([{"name": "z", "inputSchema": OBJ}, good[1]])
    assert len(treg) == 3
    treg.evict(first[1])
    assert len(treg.load_tools([good[1]])) == 1  # evicted, so it may come back


def test_load_from_path_kinds(treg: Any) -> None:
    assert len(treg.load_tools(str(OPENAI))) == 4
    assert len(treg.load_tools(ANTHROPIC)) == 4
    assert len(treg.load_tools(json.loads(FS.read_text()))) == 11


def test_snapshot_restore_keeps_tool_schemas(treg: Any) -> None:
    treg.load_tools(OPENAI)
    snap = treg.snapshot()
    treg.evict(treg.runtime_ids()[0])
    treg.restore(snap)
    assert [b.tool_schema for b in treg.list_blocks()] == parse_tools(OPENAI)
    assert treg.compile().tools() == [t.to_openai() for t in parse_tools(OPENAI)]


def test_seed_files_may_declare_tools(tmp_path: Path) -> None:
    seed = tmp_path / "tools.md"
    schema = {"name": "ping", "description": "Ping a host.", "input_schema": OBJ}
    seed.write_text(
        "---\nname: ping_tool\ntool_schema: " + json.dumps(schema) + "\n---\nPing it.\n"
        "---\nname: ping_again\ntool_schema: " + json.dumps(schema) + "\n---\nAgain.\n"
        "---\nname: broken\ntool_schema: {name: 3}\n---\nBroken.\n"
    )
    reg = rampart.BlockRegistry.from_files([seed], tokeniser=words)
    ping, again, broken = reg.list_blocks()
    assert ping.tool_schema == ToolSchema("ping", "Ping a host.", OBJ)
    with pytest.raises(rampart.UnsupportedFormatError, match=r"'broken' \("):
        _ = broken.tool_schema
    reg.evict(broken.runtime_id, force=True)
    # two blocks for one tool: the API gets it once, the first in compile order
    assert reg.compile().tools("anthropic") == [
        ToolSchema("ping", "Ping a host.", OBJ).to_anthropic()
    ]
    with pytest.raises(rampart.InvalidArgumentError, match="already holds tool 'ping'"):
        reg.load_tools([schema])


def test_tools_in_prompt_false_sends_tools_only_in_the_tools_list(treg: Any) -> None:
    treg.write_block("Explain the plan first.", "rule")
    ids = treg.load_tools(ANTHROPIC)
    treg.write_block("Answer in English.", "lang")
    full = treg.compile()
    lean = treg.compile(tools_in_prompt=False)
    assert lean.included == ["rule", "lang"]
    assert "lookup_order" not in lean.prompt and "lookup_order" in full.prompt
    assert lean.tools("anthropic") == full.tools("anthropic")
    assert lean.total_tokens < full.total_tokens
    reasons = {r.name: r.reason for r in lean.report}
    assert reasons["lookup_order"] == "tools" and reasons["rule"] is None
    # Tools cost no budget: a budget that fits only the two rules still lists them.
    fits = treg.get_by_name("rule")[0].cost + treg.get_by_name("lang")[0].cost
    fits += treg.count_tokens(rampart.DEFAULT_SEPARATOR)
    tight = treg.compile(max_tokens=fits, tools_in_prompt=False)
    assert tight.included == ["rule", "lang"] and len(tight.tools("anthropic")) == len(ids)
    # The walk stopping early does not drop later tools from the list.
    stopped = treg.compile(max_tokens=0, tools_in_prompt=False)
    assert stopped.included == [] and len(stopped.tools("anthropic")) == len(ids)
    # Gated out or evicted: absent from both.
    gated = treg.compile(
        task_text="refund",
        relevance_threshold=0.5,
        gate=lambda t, bs: [1.0 if "refund" in b.semantic_name else 0.0 for b in bs],
        tools_in_prompt=False,
    )
    assert [t["name"] for t in gated.tools("anthropic")] == ["issue_refund"]
    assert gated.included == []
    treg.evict(treg.get_by_name("issue_refund")[0].runtime_id)
    assert "issue_refund" not in [
        t["name"] for t in treg.compile(tools_in_prompt=False).tools("anthropic")
    ]
    dry = treg.compile_dry_run(tools_in_prompt=False)
    assert [n for n, _ in dry.included] == ["rule", "lang"]
    # Emitted as tools counts as an access.
    assert treg.get_by_name("lookup_order")[0].access_count >= 3


def test_saved_tool_blocks_stay_tools(treg: Any, tmp_path: Path) -> None:
    treg.write_block("Explain the plan first.", "rule")
    treg.load_tools(GIT)
    treg.save(tmp_path / "t.rampart")
    back = rampart.BlockRegistry.load(tmp_path / "t.rampart", tokeniser=words)
    lean = back.compile(tools_in_prompt=False)
    assert lean.included == ["rule"]
    assert lean.tools("mcp") == [t.to_mcp() for t in parse_tools(GIT)]


def test_a_tool_seed_can_carry_example_requests(tmp_path: Path) -> None:
    """``examples:`` beside ``tool_schema:`` in a seed's front matter, or inside the
    schema: either way the gate scores the tool by them (rampart.toolgate)."""
    from rampart.toolgate import block_examples

    from tests.test_gate import HashingEmbedder

    seed = tmp_path / "tools.md"
    ping = {"name": "ping", "description": "Ping a host.", "input_schema": OBJ}
    dig = {**ping, "name": "dig", "description": "Resolve a name.", "examples": ["mx of x.org"]}
    seed.write_text(
        "---\nname: ping_tool\ntool_schema: " + json.dumps(ping) + "\n"
        'examples: ["is the build box up", "reachable: 10.0.0.7"]\n---\nPing it.\n'
        "---\nname: dig_tool\ntool_schema: " + json.dumps(dig) + "\n---\nDig it.\n"
        "---\nname: rule\n---\nBe brief.\n"
    )
    reg = rampart.BlockRegistry.from_files([seed], HashingEmbedder())
    p, d, rule = reg.list_blocks()
    assert block_examples(p) == ["is the build box up", "reachable: 10.0.0.7"]
    assert block_examples(d) == ["mx of x.org"] and block_examples(rule) == []
    top = reg.find_relevant("is the build box up?", top_k=1)
    assert [b.semantic_name for b, _ in top] == ["ping_tool"]
    result = reg.compile(task_text="mx of x.org", top_k=1, tools_in_prompt=False)
    assert [t["function"]["name"] for t in result.tools()] == ["dig"]
    assert "example 'mx of x.org'" in next(r for r in result.report if r.name == "dig_tool").detail
    reg.release()
