"""Fuzzers for the three parsers of untrusted input (seed files, saved registry
files and tool schemas) and for the seed format's round trip (export_markdown).
Each sees only the documented exception types; anything
else (a builtin error, a hang, a panic from the core) is a finding.

Each fuzzer runs for ``RAMPART_FUZZ_SECONDS`` seconds (default 3): rounds of
hypothesis examples, a fresh random seed per round, until the time is up. CI sets
it so that together they run over a minute.
"""

from __future__ import annotations

import json
import os
import struct
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import rampart
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rampart.errors import (
    InvalidArgumentError,
    ParseError,
    RegistryFileError,
    UnsupportedFormatError,
)
from rampart.seeds import parse_file, parse_skill_file

SECONDS = float(os.environ.get("RAMPART_FUZZ_SECONDS", "3"))
ROUND = settings(
    max_examples=150,
    deadline=None,
    database=None,  # every round explores afresh; a failure prints its example
    suppress_health_check=list(HealthCheck),
)


def run_for(seconds: float, fuzz: Callable[[], None]) -> int:
    """Run hypothesis rounds of ``fuzz`` until ``seconds`` have passed (at least one)."""
    end = time.monotonic() + seconds
    rounds = 0
    while True:
        fuzz()
        rounds += 1
        if time.monotonic() >= end:
            return rounds


# ---- seed files ---------------------------------------------------------------------------

_LINES = st.sampled_from(
    [
        "---",
        "--- ",
        "name: a",
        "name: b",
        "name: ''",
        "name: &n x",
        "name: *n",
        "priority: 0.7",
        "priority: 2",
        "priority: .nan",
        "priority: yes",
        "tags: [a, b]",
        "tags: [a, '']",
        "tags: a",
        "tags: [*x, *x]",
        "description: Use it.",
        "x: &x [1, 2, 3]",
        "y: &y [*x, *x, *x, *x]",
        "z: [*y, *y, *y, *y, *y]",
        "k: &k {a: *k}",
        "d: 2024-01-02",
        "2024-01-02: d",
        "b: !!binary aGVsbG8=",
        "s: !!set {a, b}",
        "m: {<<: *x}",
        "? [a, b]",
        ": v",
        "u: '\\ud800'",
        'u: "\\ud800"',
        "{",
        "[",
        "- item",
        "```",
        "~~~",
        "```yaml",
        "## Section",
        "### Sub [priority=0.9, tags=a b]",
        "## Bad [priority=x]",
        "## Bad [what=1]",
        "",
        "   ",
        "\t",
        "body text",
        "\ufeff",
        "\x00",
        "\u2028",
        "\x85",
        # Long runs: regex backtracking on one line is how parsers hang.
        "## x" + " " * 3000 + "y",
        "## x" + "#" * 3000,
        "### t [" + " " * 3000,
        "name:" + " " * 3000 + "x",
        " " * 3000,
        "`" * 3000,
        # Past the core's 64 KiB name limit: must be a ParseError with the line.
        "## " + "n" * 66_000,
        "name: " + "n" * 66_000,
    ]
)
_TEXT_LINE = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"]) | st.sampled_from(":-[]{}&*!#`'\""),
    max_size=30,
)


@st.composite
def seed_files(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(_LINES | _TEXT_LINE, max_size=40))
    eol = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    data = eol.join(lines).encode("utf-8")
    if draw(st.booleans()) and data:
        # A few raw bytes anywhere: invalid UTF-8, NULs, a BOM in the middle.
        at = draw(st.integers(0, len(data)))
        junk = draw(st.binary(min_size=1, max_size=4))
        data = data[:at] + junk + data[at:]
    return data


def fuzz_seed_parser(tmp: Path) -> None:
    md, skill = tmp / "fuzz.md", tmp / "SKILL.md"

    @ROUND
    @given(data=seed_files())
    def one(data: bytes) -> None:
        for p in (md, skill):
            p.write_bytes(data)
            try:
                blocks = parse_file(p) if p is md else parse_skill_file(p)
            except ParseError as e:
                assert e.path == str(p) and str(e).startswith(str(p))
                continue
            for b in blocks:
                b.metadata_json()  # storable as it is
            # What parsed must go into a registry: the core's own checks must
            # never be the first to refuse a block (they name no line).
            try:
                if p is md:
                    reg = rampart.BlockRegistry.from_files(p)
                else:
                    lib = rampart.SeedRegistry.from_skill_file(p)
                    reg = rampart.BlockRegistry.from_seed(lib, list(lib))
            except ParseError as e:
                assert "duplicate seed key" in str(e), e  # the only later refusal
                continue
            reg.compile()
            reg.release()

    one()


def test_fuzz_seed_parser(tmp_path: Path) -> None:
    assert run_for(SECONDS, lambda: fuzz_seed_parser(tmp_path)) >= 1


# ---- export_markdown round trip ------------------------------------------------------------

_NAMES = st.sampled_from(
    [" a ", "\x1c", "a\nb", "---", "name: x", "\ttab", "x\r", "'q'", '"', "#", "- item"]
) | st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=20
).filter(lambda s: not s.isspace())


@st.composite
def block_texts(draw: st.DrawFn) -> str:
    """Contents built from the seed parser's own hostile lines (front-matter
    look-alikes, fences, rules), any line ends, outer blank space."""
    lines = draw(st.lists(_LINES | _TEXT_LINE, max_size=12))
    eol = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    pad = st.sampled_from(["", "", " ", "\n", "\n\n", "\r\n", "\t", " \n "])
    return draw(pad) + eol.join(lines) + draw(pad)


def fuzz_export_round_trip(tmp: Path) -> None:
    out = tmp / "export.md"

    # Smaller rounds: an example writes and reads two files (the time is in SECONDS).
    @settings(ROUND, max_examples=50)
    @given(
        blocks=st.lists(
            st.tuples(
                block_texts(),
                _NAMES,
                st.floats(0, 1),
                st.lists(st.text("ab -", min_size=1, max_size=3), max_size=2),
            ),
            max_size=6,
        )
    )
    def one(blocks: list[tuple[str, str, float, list[str]]]) -> None:
        reg = rampart.BlockRegistry(label=None)
        for content, name, priority, tags in blocks:
            reg.write_block(content, name, "agent", priority, "run-f", tags)
        # Every block is exported (nothing refused) and read back byte for byte.
        assert reg.export_markdown(out, source=None) == len(blocks)
        back = rampart.BlockRegistry.from_files([out]) if blocks else rampart.BlockRegistry()
        assert [(b.semantic_name, b.content, b.priority, list(b.tags)) for b in back] == [
            (name, content, priority, tags) for content, name, priority, tags in blocks
        ]
        reg.release()
        back.release()

    one()


def test_fuzz_export_round_trip(tmp_path: Path) -> None:
    assert run_for(SECONDS, lambda: fuzz_export_round_trip(tmp_path)) >= 1


# ---- saved registry files -----------------------------------------------------------------


def _frame(payload: bytes, version: int = 1) -> bytes:
    head = b"RAMPART\0" + struct.pack("<IQ", version, len(payload))
    return head + payload + struct.pack("<I", zlib.crc32(payload))


@pytest.fixture(scope="module")
def saved_registry(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A small saved registry holding every kind of field: metadata, a tool, a wrap,
    tags, a trajectory, an orchestrator author and vectors."""
    d = tmp_path_factory.mktemp("fuzz-registry")
    seed = d / "s.md"
    seed.write_text("---\nname: a\nowner: x\ntags: [t]\n---\nAlpha.\n", encoding="utf-8")
    reg = rampart.BlockRegistry.from_files(seed)
    boss = rampart.BlockRegistry()
    reg.write_agent_block("Beta.", "run-1", "b", 0.7, ["u", "v"], embedding=[1.0, 0.0])
    reg.write_block("Gamma.", "c", "orchestrator", author=boss, evictable=False)
    reg.set_wrap(reg.runtime_ids()[1], "<w>", "</w>")
    reg.load_tools(
        [{"name": "ls", "description": "List.", "inputSchema": {"type": "object"}}],
    )
    reg.save(d / "r")
    reg.release()
    boss.release()
    return (d / "r").read_bytes()


@st.composite
def damaged(draw: st.DrawFn, good: bytes) -> bytes:
    payload = bytearray(good[20:-4])
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete"]))
        at = draw(st.integers(0, max(len(payload) - 1, 0)))
        if op == "flip" and payload:
            payload[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and payload:
            payload[at] = draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF, ord("{"), ord("[")]))
        elif op == "cut":
            del payload[at:]
        elif op == "insert":
            payload[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del payload[at : at + draw(st.integers(1, 8))]
    # Most mutations keep a valid checksum (the interesting case: the decoder's
    # own checks), some do not, some also damage the header.
    how = draw(st.sampled_from(["reframe", "reframe", "reframe", "raw", "version"]))
    if how == "reframe":
        return _frame(bytes(payload))
    if how == "version":
        return _frame(bytes(payload), draw(st.sampled_from([0, 2, 2**32 - 1])))
    return good[:20] + bytes(payload) + good[-4:]


def _use(reg: rampart.BlockRegistry, tmp: Path) -> None:
    """Everything a loaded registry offers must work on what the file held."""
    for b in reg.list_blocks():
        _ = (b.metadata, b.tool_schema, b.gate_text, b.tags, b.cost)
    reg.compile()
    reg.compile(tools_in_prompt=False).tools()
    reg.snapshot()
    try:
        reg.export_markdown(tmp / "out.md", source=None)
    except InvalidArgumentError as e:
        # Only what the seed parser's limits refuse (a front matter too large).
        assert "cannot export" in str(e)
    reg.save(tmp / "again")


def fuzz_registry_decoder(good: bytes, tmp: Path) -> None:
    path = tmp / "fuzz.rampart"

    @ROUND
    @given(data=damaged(good))
    def one(data: bytes) -> None:
        path.write_bytes(data)
        try:
            reg = rampart.BlockRegistry.load(path, label="fuzz-target")
        except RegistryFileError as e:
            assert str(path) in str(e)
            assert rampart.get_by_label("fuzz-target") is None
            return
        except InvalidArgumentError as e:
            # A damaged tokeniser name reads as a request for another tokeniser.
            assert "was saved with tokeniser" in str(e), e
            return
        try:
            _use(reg, tmp)
        finally:
            reg.release()

    one()


def test_fuzz_registry_decoder(saved_registry: bytes, tmp_path: Path) -> None:
    assert run_for(SECONDS, lambda: fuzz_registry_decoder(saved_registry, tmp_path)) >= 1


# ---- tool schemas ---------------------------------------------------------------------------

_KEYS = st.sampled_from(
    [
        "type",
        "properties",
        "items",
        "required",
        "anyOf",
        "oneOf",
        "$ref",
        "$defs",
        "definitions",
        "enum",
        "const",
        "default",
        "description",
        "title",
        "format",
        "minimum",
        "maxLength",
        "pattern",
        "additionalProperties",
        "name",
        "inputSchema",
        "input_schema",
        "outputSchema",
        "annotations",
        "readOnlyHint",
        "function",
        "parameters",
        "strict",
        "tools",
        "jsonrpc",
        "result",
        "error",
        "A",
        "B",
    ]
)
_SCALARS = (
    st.sampled_from(
        [
            "object",
            "array",
            "string",
            "integer",
            "null",
            "function",
            "custom",
            "#/$defs/A",
            "#/$defs/B",
            "#/definitions/A",
            "#/properties/A",
            "#",
            "#/$defs/~1x",
            "http://example.com/s.json",
            "tool_a",
            "bad name!",
            "",
            "\ud800",
            "2.0",
        ]
    )
    | st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
)

json_like = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_KEYS, inner, max_size=6),
    max_leaves=60,
)


@st.composite
def tool_entries(draw: st.DrawFn) -> Any:
    """Mostly near-valid definitions (so the renderer is reached), some anything."""
    schema = draw(st.dictionaries(_KEYS, json_like, max_size=6))
    schema.setdefault("type", "object")
    if draw(st.booleans()):
        schema["$defs"] = draw(st.dictionaries(st.sampled_from(["A", "B"]), json_like))
    shape = draw(st.sampled_from(["mcp", "anthropic", "openai", "any"]))
    name = draw(st.sampled_from(["t1", "t2", "bad name", "x" * 70]))
    if shape == "mcp":
        entry: Any = {"name": name, "inputSchema": schema}
    elif shape == "anthropic":
        entry = {"name": name, "input_schema": schema}
    elif shape == "openai":
        entry = {"type": "function", "function": {"name": name, "parameters": schema}}
    else:
        entry = draw(json_like)
    if draw(st.booleans()) and isinstance(entry, dict):
        entry["description"] = draw(_SCALARS)
    return entry


def fuzz_tool_loader(tmp: Path) -> None:
    file = tmp / "tools.json"

    @ROUND
    @given(entries=st.lists(tool_entries(), max_size=3), via_file=st.booleans())
    def one(entries: list[Any], via_file: bool) -> None:
        tools: Any = entries
        if via_file:
            try:
                file.write_text(json.dumps(entries), encoding="utf-8", errors="surrogatepass")
            except (ValueError, UnicodeEncodeError):
                return  # not representable as a file; the in-memory path covers it
            tools = file
        try:
            schemas = rampart.parse_tools(tools)
        except UnsupportedFormatError:
            return
        reg = rampart.BlockRegistry(default_max_tokens=None)
        try:
            for s in schemas:
                try:
                    rampart.render_tool(s)
                except UnsupportedFormatError as e:
                    assert s.name in str(e)
                for fmt in rampart.tools.FORMATS:
                    s.to_format(fmt)
                assert rampart.ToolSchema.from_json(s.to_json()) == s
            try:
                ids = reg.load_tools(schemas_source(schemas))
            except UnsupportedFormatError:
                return
            assert [reg.get_by_id(i).tool_schema for i in ids] == schemas
            reg.compile(tools_in_prompt=False).tools()
        finally:
            reg.release()

    one()


def schemas_source(schemas: list[rampart.ToolSchema]) -> list[dict[str, Any]]:
    return [s.to_mcp() for s in schemas]


def test_fuzz_tool_loader(tmp_path: Path) -> None:
    assert run_for(SECONDS, lambda: fuzz_tool_loader(tmp_path)) >= 1


# ---- tool calls a text-mode model writes into its reply ------------------------------------

_REPLY_PARTS = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "{",
        "{{",
        "}",
        "}}}",
        "[" * 3000,
        '{"name": "t1", "arguments": ',
        '{"name": "t2", "parameters": ',
        '{"name": "rm", "arguments": {}}',
        "```json\n",
        "```",
        "\n",
        " I will call it. ",
        "\ud800",
    ]
)


def fuzz_text_tool_calls() -> None:
    from rampart.llm import parse_text_tool_calls

    known = ["t1", "t2"]

    @ROUND
    @given(
        parts=st.lists(
            st.one_of(_REPLY_PARTS, json_like.map(lambda v: json.dumps(v)), st.text(max_size=8)),
            max_size=12,
        ),
        calls=st.lists(
            st.tuples(st.sampled_from(known), st.dictionaries(_KEYS, json_like, max_size=3)),
            max_size=3,
        ),
    )
    def one(parts: list[str], calls: list[tuple[str, dict[str, Any]]]) -> None:
        # Anything a model writes: no exception, only known names, arguments that parse.
        _, got = parse_text_tool_calls("".join(parts), known)
        for c in got:
            assert c.name in known and isinstance(json.loads(c.arguments), dict)
        # Calls in the template's tags come back exactly, in order, and leave the
        # prose (NaN and infinities are not JSON arguments: such a call stays text).
        for _, a in calls:
            try:
                json.dumps(a, allow_nan=False)
            except ValueError:
                return
        tagged = "".join(
            f'<tool_call>{{"name": {json.dumps(n)}, "arguments": {json.dumps(a)}}}</tool_call>'
            for n, a in calls
        )
        text, got = parse_text_tool_calls("Let me look." + tagged, known)
        assert [(c.name, json.loads(c.arguments)) for c in got] == calls
        assert text == ("Let me look." if calls else "Let me look." + tagged)

    one()


def test_fuzz_text_tool_calls() -> None:
    assert run_for(SECONDS, fuzz_text_tool_calls) >= 1
