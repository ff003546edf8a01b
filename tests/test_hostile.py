"""Hostile inputs (issue 11): each finding and each class hunted beyond it has a
regression test here. Every one must end in a documented rampart error, fast and
small, never a hang, a traceback of a builtin error, or state left behind."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import rampart
import rampart.cli
from rampart import seeds
from rampart.errors import ParseError
from rampart.seeds import parse_file, parse_skill_file


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8", newline="")
    return p


def fails_at(exc: pytest.ExceptionInfo[ParseError], path: Path, line: int) -> None:
    """The error names the file and the line (``path:line: ...``)."""
    assert exc.value.path == str(path) and exc.value.line == line
    assert str(exc.value).startswith(f"{path}:{line}: ")


# ---- seed files: YAML alias bomb --------------------------------------------------------


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The 'billion laughs': each level lists the previous one ``width`` times, so
    ~450 bytes stand for width**levels (387 million) strings."""
    lines = ["---", "name: bomb", "a0: &a0 [" + ",".join(['"lol"'] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join([*lines, "---", "body", ""])


def test_yaml_alias_bomb_is_refused_with_path_and_line(tmp_path: Path) -> None:
    text = alias_bomb()
    assert len(text.encode()) < 500
    p = write(tmp_path, "bomb.md", text)
    with pytest.raises(ParseError, match="expands to more than 100000 YAML nodes") as exc:
        parse_file(p)
    assert exc.value.path == str(p) and exc.value.line is not None and 3 <= exc.value.line <= 11
    # One more level, the unbounded case, is refused the same way; so is the
    # registry constructor (nothing is created).
    p2 = write(tmp_path, "bomb2.md", alias_bomb(levels=12))
    with pytest.raises(ParseError, match="YAML nodes"):
        rampart.BlockRegistry.from_files(p2, label="bomb-victim")
    assert rampart.get_by_label("bomb-victim") is None


def test_aliases_within_the_bound_still_work(tmp_path: Path) -> None:
    p = write(tmp_path, "ok.md", "---\nname: x\nbase: &b {q: 1}\nmore: {<<: *b, r: 2}\n---\nbody\n")
    (b,) = parse_file(p)
    assert b.metadata == {"base": {"q": 1}, "more": {"q": 1, "r": 2}}


@pytest.mark.parametrize(
    "yaml_text",
    ["a: &a [*a]", "a: &a {b: *a}"],
    ids=["list", "mapping"],
)
def test_self_referencing_alias_is_refused(tmp_path: Path, yaml_text: str) -> None:
    p = write(tmp_path, "cycle.md", f"---\nname: x\n{yaml_text}\n---\nbody\n")
    with pytest.raises(ParseError, match="alias to itself") as exc:
        parse_file(p)
    fails_at(exc, p, 3)


def test_front_matter_size_and_depth_are_bounded(tmp_path: Path) -> None:
    big = "---\nname: x\nd: " + "y" * (seeds.MAX_FRONT_MATTER_BYTES + 1) + "\n---\nbody\n"
    p = write(tmp_path, "big.md", big)
    with pytest.raises(ParseError, match="front matter is larger than") as exc:
        parse_file(p)
    fails_at(exc, p, 2)
    deep = "---\nname: x\nk: " + "[" * 200 + "]" * 200 + "\n---\nbody\n"
    p = write(tmp_path, "deep.md", deep)
    with pytest.raises(ParseError, match="nests deeper than 64"):
        parse_file(p)
    indented = "---\nname: x\n" + "".join(" " * i + "k:\n" for i in range(300)) + "---\nb\n"
    p = write(tmp_path, "indented.md", indented)
    with pytest.raises(ParseError, match="nests deeper than 64"):
        parse_file(p)


# ---- seed files: values JSON has no form for, bad names and tags -------------------------


def test_yaml_date_keys_and_values_become_text(tmp_path: Path) -> None:
    p = write(tmp_path, "d.md", "---\nname: x\n2024-01-01: y\nwhen: 2024-02-03\n1.5: z\n---\nb\n")
    (b,) = parse_file(p)
    assert b.metadata == {"2024-01-01": "y", "when": "2024-02-03", "1.5": "z"}
    reg = rampart.BlockRegistry.from_files(p)
    assert reg.list_blocks()[0].metadata == b.metadata
    reg.release()


@pytest.mark.parametrize(
    ("yaml_text", "match"),
    [
        ("data: !!binary aGVsbG8=", "binary data"),
        ("s: !!set {a, b}", "set, which has no JSON form"),
        ("nested: {deep: [1, !!binary aGVsbG8=]}", "binary data"),
    ],
)
def test_values_without_a_json_form_are_a_parse_error(
    tmp_path: Path, yaml_text: str, match: str
) -> None:
    p = write(tmp_path, "v.md", f"---\nname: x\npriority: 0.5\n{yaml_text}\n---\nbody\n")
    with pytest.raises(ParseError, match=match) as exc:
        rampart.BlockRegistry.from_files(p)
    fails_at(exc, p, 4)


def test_binary_key_is_a_parse_error(tmp_path: Path) -> None:
    p = write(tmp_path, "k.md", "---\nname: x\n? !!binary aGVsbG8=\n: v\n---\nbody\n")
    with pytest.raises(ParseError, match="keys must be text") as exc:
        parse_file(p)
    assert exc.value.path == str(p) and exc.value.line is not None


@pytest.mark.parametrize(
    ("front", "line", "match"),
    [
        ("name: x\ntags: [a, '']", 3, "tag '' is empty"),
        ('name: x\ntags: ["a\\x1fb"]', 3, "U\\+001F"),
        ("name: " + "n" * 70000, 2, "name is 70000 bytes long"),
        ("name: x\ntags: [" + ",".join(["t" * 1000] * 70) + "]", 3, "tags take 70070 bytes"),
        ("name: x\nowner: 2024-13-45", 2, "month must be in 1..12"),
        ("name: x\npriority: .nan", 3, "priority must be in"),
        ("name: x\npriority: 1.0e+999", 3, "priority must be in"),
    ],
)
def test_bad_seed_values_name_path_and_line(
    tmp_path: Path, front: str, line: int, match: str
) -> None:
    p = write(tmp_path, "bad.md", f"---\n{front}\n---\nbody\n")
    with pytest.raises(ParseError, match=match) as exc:
        rampart.BlockRegistry.from_files(p)
    fails_at(exc, p, line)


def test_yaml_surrogate_escape_is_a_parse_error(tmp_path: Path) -> None:
    p = write(tmp_path, "s.md", '---\nname: x\nd: "\\udc00"\n---\nbody\n')
    with pytest.raises(ParseError) as exc:
        parse_file(p)
    fails_at(exc, p, 3)


def test_custom_parser_output_is_checked_like_front_matter(tmp_path: Path) -> None:
    def parser(path: Path) -> list[tuple[str, str, float, list[str]]]:
        return [("ok", "fine", 0.5, []), ("x" * 70000, "text", 0.5, [])]

    rampart.register_parser(".hostile", parser)
    p = write(tmp_path, "f.hostile", "")
    with pytest.raises(ParseError, match="name is 70000 bytes") as exc:
        rampart.BlockRegistry.from_files(p)
    fails_at(exc, p, 2)

    def surrogate(path: Path) -> list[tuple[str, str, float, list[str]]]:
        return [("n", "bad \udc00 text", 0.5, [])]

    rampart.register_parser(".hostile", surrogate)
    with pytest.raises(ParseError, match="lone surrogate"):
        rampart.BlockRegistry.from_files(p)


# ---- seed files: special files, odd paths, line endings, encodings -----------------------


def test_special_files_are_refused_without_reading(tmp_path: Path) -> None:
    link = tmp_path / "zero.md"
    link.symlink_to("/dev/zero")
    with pytest.raises(ParseError, match="not a regular file"):
        parse_file(link)
    with pytest.raises(ParseError, match="not a regular file"):
        parse_skill_file(link)
    d = tmp_path / "dir.md"
    d.mkdir()
    with pytest.raises(ParseError, match="is a directory"):
        parse_markdown_direct(d)
    with pytest.raises(ParseError, match=r"missing\.md: no such file or directory"):
        parse_file(tmp_path / "missing.md")
    with pytest.raises(ParseError, match="cannot open"):
        parse_file(str(tmp_path / "nul\0.md"))


def parse_markdown_direct(p: Path) -> object:
    return seeds.parse_markdown(p)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.md"
    os.mkfifo(fifo)
    # Opening a FIFO for reading blocks until a writer comes: this returns at once.
    with pytest.raises(ParseError, match="not a regular file"):
        parse_file(fifo)
    with pytest.raises(ParseError, match="not a regular file"):
        rampart.SeedRegistry.from_files([fifo])


def test_file_size_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seeds, "MAX_SEED_BYTES", 1000)
    p = write(tmp_path, "big.md", "x" * 1001)
    with pytest.raises(ParseError, match="1001 bytes; at most 1000"):
        parse_file(p)
    assert parse_file(write(tmp_path, "ok.md", "x" * 1000))[0].content == "x" * 1000


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_line_endings_parse_alike(tmp_path: Path, eol: str) -> None:
    text = eol.join(["---", "name: a", "tags: [t]", "---", "A body.", "", "---", "name: b", "---"])
    text += eol + "B body." + eol
    blocks = parse_file(write(tmp_path, "e.md", text))
    assert [(b.name, b.content, b.tags, b.line) for b in blocks] == [
        ("a", "A body.", ("t",), 1),
        ("b", "B body.", (), 7),
    ]


def test_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    p = write(tmp_path, "u.md", b"---\nname: x\n---\nline\n\xff\xfe bad\n")
    with pytest.raises(ParseError, match="not valid UTF-8") as exc:
        parse_file(p)
    fails_at(exc, p, 5)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file names")
def test_odd_file_names_are_read(tmp_path: Path) -> None:
    p = write(tmp_path, "we ird\t-name -- ü.md", "just text\n")
    (b,) = parse_file(p)
    assert b.name == "we_ird_name_ü" and b.content == "just text"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file names are bytes")
def test_file_names_that_are_not_utf8_load_with_escaped_stems(tmp_path: Path) -> None:
    # Python holds the byte 0xff of a file name as the lone surrogate U+DCFF,
    # which no block name can hold: the stem shows it as an escape instead.
    folder = tmp_path / "seeds"
    folder.mkdir()
    raw = os.path.join(os.fsencode(folder), b"caf\xe9 \xff-rules.md")
    with open(raw, "wb") as f:
        f.write(b"No front matter: named after the file.\n")
    with open(os.path.join(os.fsencode(folder), b"named\xff.md"), "wb") as f:
        f.write(b"---\nname: kept\n---\nA name of its own.\n")
    reg = rampart.BlockRegistry.from_files([folder])
    assert sorted(b.semantic_name for b in reg) == ["caf\\xe9_\\xff_rules", "kept"]
    lib = rampart.SeedRegistry.from_files([folder])
    assert len(lib) == 2
    # The CLI lists them too (no UnicodeEncodeError on the way out).
    assert rampart.cli.main(["inspect", str(folder), "--json"]) == 0


def test_missing_paths_say_so_whatever_their_extension(tmp_path: Path) -> None:
    for missing in ("missing/", str(tmp_path / "nope"), str(tmp_path / "nope.md")):
        with pytest.raises(ParseError, match="no such file or directory") as err:
            rampart.BlockRegistry.from_files([missing])
        assert err.value.path == missing
    dangling = tmp_path / "dangling.md"
    dangling.symlink_to(tmp_path / "gone.md")
    with pytest.raises(ParseError, match="broken symbolic link"):
        rampart.BlockRegistry.from_files([dangling])
    # An existing file of an unknown format is still that error.
    write(tmp_path, "notes.unknownfmt", "x")
    with pytest.raises(rampart.UnsupportedFormatError, match=r"extension '\.unknownfmt'"):
        rampart.BlockRegistry.from_files([tmp_path / "notes.unknownfmt"])


# ---- tool schemas: $ref fan-out and depth -------------------------------------------------


def fan_out_tool(levels: int = 5, width: int = 12) -> dict[str, object]:
    """Every property of definition D<i> refers to D<i+1>: rendered naively, the text
    grows as width**levels (this one: ~5 KB of JSON, tens of MB of text)."""
    defs: dict[str, object] = {}
    for i in range(levels):
        if i + 1 < levels:
            prop: dict[str, object] = {"$ref": f"#/$defs/D{i + 1}", "description": "see below"}
        else:
            prop = {"type": "string", "description": "a leaf value"}
        defs[f"D{i}"] = {"type": "object", "properties": {f"p{j}": prop for j in range(width)}}
    root = {f"r{j}": {"$ref": "#/$defs/D0"} for j in range(width)}
    schema = {"type": "object", "properties": root, "$defs": defs}
    return {"name": "fan", "description": "Fan-out.", "inputSchema": schema}


def test_ref_fan_out_renders_each_definition_once() -> None:
    import json

    tool = fan_out_tool()
    assert len(json.dumps(tool)) < 6000
    (schema,) = rampart.parse_tools([tool])
    text = rampart.render_tool(schema)
    assert len(text) < 20_000
    assert text.count("- (fields of D0 as listed above)") == 11  # r1..r11
    assert "  - p0 (object, optional): see below" in text
    reg = rampart.BlockRegistry(default_max_tokens=None)
    (rid,) = reg.load_tools([tool])
    assert reg.get_by_id(rid).content == text
    reg.release()


def test_union_fan_out_is_refused_with_unsupported_format() -> None:
    defs: dict[str, object] = {
        f"D{i}": {"anyOf": [{"$ref": f"#/$defs/D{i + 1}"}, {"$ref": f"#/$defs/E{i + 1}"}] * 15}
        for i in range(6)
    }
    defs.update({f"E{i}": {"$ref": f"#/$defs/D{i}"} for i in range(1, 7)})
    defs["D6"] = {"type": "string"}
    tool = {
        "name": "union",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/D0"}},
            "$defs": defs,
        },
    }
    (schema,) = rampart.parse_tools([tool])
    with pytest.raises(rampart.UnsupportedFormatError, match="tool 'union' cannot be rendered"):
        rampart.render_tool(schema)
    reg = rampart.BlockRegistry(default_max_tokens=None)
    with pytest.raises(rampart.UnsupportedFormatError):
        reg.load_tools([tool])
    assert len(reg) == 0
    reg.release()


def test_rendered_size_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    from rampart import tools

    monkeypatch.setattr(tools, "MAX_RENDERED_CHARS", 500)
    props = {f"p{i}": {"type": "string", "description": "d" * 50} for i in range(20)}
    (schema,) = rampart.parse_tools(
        [{"name": "wide", "inputSchema": {"type": "object", "properties": props}}]
    )
    with pytest.raises(rampart.UnsupportedFormatError, match="longer than 500 characters"):
        rampart.render_tool(schema)


def nested(n: int) -> dict[str, object]:
    x: dict[str, object] = {"type": "object"}
    for _ in range(n):
        x = {"type": "object", "properties": {"a": x}}
    return x


@pytest.mark.parametrize("depth", [40, 5000])
def test_deeply_nested_schema_is_refused_not_recursion_error(depth: int) -> None:
    tool = {"name": "deep", "inputSchema": nested(depth)}
    with pytest.raises(rampart.UnsupportedFormatError, match="nests deeper than 64 levels"):
        rampart.parse_tools([tool])
    with pytest.raises(rampart.InvalidArgumentError, match="nests deeper"):
        rampart.ToolSchema("deep", input_schema=nested(depth))


def test_real_depth_still_loads() -> None:
    (schema,) = rampart.parse_tools([{"name": "ok", "inputSchema": nested(25)}])
    assert "- a (object, optional)" in rampart.render_tool(schema)


def test_deep_json_file_and_nested_rpc_are_refused(tmp_path: Path) -> None:
    p = write(tmp_path, "tools.json", "[" * 100_000 + "]" * 100_000)
    with pytest.raises(rampart.UnsupportedFormatError, match="nested too deeply"):
        rampart.parse_tools(p)
    rpc: dict[str, object] = {"tools": []}
    for _ in range(5000):
        rpc = {"jsonrpc": "2.0", "result": rpc}
    assert rampart.parse_tools(rpc) == []
    cyclic: list[object] = []
    cyclic.append(cyclic)
    with pytest.raises(rampart.UnsupportedFormatError):
        rampart.parse_tools([{"name": "c", "inputSchema": {"type": "object", "x": cyclic}}])


def test_tools_file_special_files_and_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rampart import tools

    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(rampart.UnsupportedFormatError, match="not a regular file"):
        rampart.parse_tools(link)
    monkeypatch.setattr(tools, "MAX_TOOLS_FILE_BYTES", 10)
    with pytest.raises(rampart.UnsupportedFormatError, match="at most 10"):
        rampart.parse_tools(write(tmp_path, "t.json", "[" + " " * 20 + "]"))


def test_tool_text_with_lone_surrogate_is_refused() -> None:
    bad = {"name": "s", "description": "bad \ud800", "inputSchema": {"type": "object"}}
    with pytest.raises(rampart.UnsupportedFormatError, match="lone surrogate"):
        rampart.parse_tools([bad])
    prop = {"type": "object", "properties": {"\udc00": {"type": "string"}}}
    with pytest.raises(rampart.UnsupportedFormatError, match="not plain JSON"):
        rampart.parse_tools([{"name": "s", "inputSchema": prop}])


# ---- saved registry files: valid checksum, hostile contents ------------------------------


def reframe(payload: bytes) -> bytes:
    """A registry file around ``payload``: header and a correct checksum."""
    import struct
    import zlib

    head = b"RAMPART\0" + struct.pack("<IQ", 1, len(payload))
    return head + payload + struct.pack("<I", zlib.crc32(payload))


def swap_str(data: bytes, old: bytes, new: bytes) -> bytes:
    """Replace one length-prefixed string of a saved registry, checksum redone."""
    import struct

    payload = data[20:-4]
    framed = struct.pack("<I", len(old)) + old
    assert payload.count(framed) == 1
    return reframe(payload.replace(framed, struct.pack("<I", len(new)) + new))


@pytest.fixture
def saved(tmp_path: Path) -> tuple[bytes, bytes, bytes]:
    """A saved registry with one block carrying metadata, and its settings and
    metadata strings as stored."""
    seed = write(tmp_path, "s.md", "---\nname: a\nowner: platform\n---\nbody\n")
    reg = rampart.BlockRegistry.from_files(seed)
    reg.save(tmp_path / "good")
    data = (tmp_path / "good").read_bytes()
    settings = reg._settings().encode()
    meta = reg.list_blocks()[0]._b.metadata_json.encode()
    reg.release()
    return data, settings, meta


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    ("which", "new", "match"),
    [
        ("meta", b'{"owner"= "platform"}', "metadata of block #0 \\('a'\\) is not valid JSON"),
        ("meta", b"[]", "must be a JSON object, got list"),
        ("meta", DEEP, "is not valid JSON \\(RecursionError"),
        ("meta", b'{"x": ' + b"[" * 200 + b"]" * 200 + b"}", "nests deeper than 128"),
        ("meta", b'{"tool_schema": {"name": 5}}', "malformed tool schema"),
        ("settings", b"[]", "must be a JSON object, got list"),
        ("settings", b"null", "must be a JSON object, got NoneType"),
        ("settings", DEEP, "settings is not valid JSON"),
        ("settings", b"{nope", "settings is not valid JSON"),
        ("settings", b'{"tokeniser": 5}', "no tokeniser"),
        ("settings", b'{"tokeniser": "cl100k_base", "default_max_tokens": -1}', "default_max"),
        ("settings", b'{"tokeniser": "cl100k_base", "default_max_tokens": true}', "default_max"),
        ("settings", b'{"tokeniser": "cl100k_base", "embedding_model": [1]}', "embedding_model"),
    ],
)
def test_damaged_contents_with_valid_checksum_raise_only_registry_file_error(
    tmp_path: Path, saved: tuple[bytes, bytes, bytes], which: str, new: bytes, match: str
) -> None:
    data, settings, meta = saved
    bad = swap_str(data, meta if which == "meta" else settings, new)
    p = write(tmp_path, "bad.rampart", bad)
    with pytest.raises(rampart.RegistryFileError, match=match) as exc:
        rampart.BlockRegistry.load(p, label="must-stay-free")
    assert str(p) in str(exc.value)
    assert rampart.get_by_label("must-stay-free") is None
    # The same bytes through pickle's path.
    with pytest.raises(rampart.RegistryFileError):
        rampart.BlockRegistry._from_bytes(bad, "x", None, None, "must-stay-free", {})
    assert rampart.get_by_label("must-stay-free") is None


def test_unchanged_file_still_loads(tmp_path: Path, saved: tuple[bytes, bytes, bytes]) -> None:
    data, _, meta = saved
    back = rampart.BlockRegistry.load(write(tmp_path, "ok.rampart", swap_str(data, meta, meta)))
    assert back.list_blocks()[0].metadata == {"owner": "platform"}
    back.release()


def test_registry_header_is_checked_before_reading(tmp_path: Path) -> None:
    import struct

    huge = b"RAMPART\0" + struct.pack("<IQ", 1, 2**62) + b"tiny"
    p = write(tmp_path, "huge.rampart", huge)
    with pytest.raises(rampart.RegistryFileError, match="header says 4611686018427387904"):
        rampart.BlockRegistry.load(p)
    link = tmp_path / "zero.rampart"
    link.symlink_to("/dev/zero")
    with pytest.raises(rampart.RegistryFileError, match="not a regular file"):
        rampart.BlockRegistry.load(link)
    with pytest.raises(rampart.RegistryFileError, match="is a directory"):
        rampart.BlockRegistry.load(tmp_path)
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "pipe.rampart"
        os.mkfifo(fifo)
        with pytest.raises(rampart.RegistryFileError, match="not a regular file"):
            rampart.BlockRegistry.load(fifo)
    with pytest.raises(FileNotFoundError):
        rampart.BlockRegistry.load(tmp_path / "missing.rampart")


# ---- a failed cold start leaves nothing behind ---------------------------------------------


class BrokenModel:
    """An embedding model that fails the way a real one can (file gone, OOM)."""

    def encode(self, text: str) -> list[float]:
        raise RuntimeError("model file vanished")


def test_failed_from_files_frees_its_label(tmp_path: Path) -> None:
    seed = write(tmp_path, "s.md", "---\nname: a\n---\nbody\n")
    with pytest.raises(RuntimeError, match="vanished") as exc:
        rampart.BlockRegistry.from_files(seed, BrokenModel(), label="retry-me")
    assert exc.value is not None  # the traceback is still alive here
    assert rampart.get_by_label("retry-me") is None
    reg = rampart.BlockRegistry.from_files(seed, label="retry-me")
    assert rampart.get_by_label("retry-me") is reg
    reg.release()


def test_failed_from_seed_and_core_failure_free_the_label(tmp_path: Path) -> None:
    seed = write(tmp_path, "s.md", "---\nname: a\n---\nbody\n")
    lib = rampart.SeedRegistry.from_files(seed)
    with pytest.raises(RuntimeError):
        rampart.BlockRegistry.from_seed(lib, ["a"], embedding_model=BrokenModel(), label="again")
    assert rampart.get_by_label("again") is None

    # A tokeniser that fails after the registry exists (during the block inserts).
    with pytest.raises(rampart.InvalidArgumentError, match="expected an int"):
        rampart.BlockRegistry.from_files(seed, tokeniser=lambda t: 2**40, label="again")
    assert rampart.get_by_label("again") is None
    # A block the core refuses (a SeedRegistry built by hand skips the parser's checks).
    bad = rampart.SeedRegistry([("x.bad", rampart.SeedBlock("bad", "body", tags=("",)))])
    with pytest.raises(rampart.InvalidArgumentError, match="tag"):
        rampart.BlockRegistry.from_seed(bad, ["bad"], label="again")
    assert rampart.get_by_label("again") is None
    reg = rampart.BlockRegistry.from_seed(lib, ["a"], label="again")
    reg.release()


# ---- numbers: NaN, infinities, huge ints, numpy scalars ------------------------------------


@pytest.fixture
def vreg() -> object:
    reg = rampart.BlockRegistry(tokeniser=lambda t: len(t.split()), default_max_tokens=None)
    for i, vec in enumerate(([1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [0.0, 0.0, 1.0])):
        reg.write_block(f"block {i}", f"b{i}", embedding=vec)
    yield reg
    reg.release()


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_nan_and_infinite_thresholds_are_refused(vreg: rampart.BlockRegistry, bad: float) -> None:
    q = [1.0, 0.0, 0.0]
    with pytest.raises(rampart.InvalidArgumentError, match="relevance_threshold must be a finite"):
        vreg.compile(task_embedding=q, relevance_threshold=bad)
    with pytest.raises(rampart.InvalidArgumentError, match="relevance_threshold"):
        vreg.compile_dry_run(task_embedding=q, relevance_threshold=bad)
    with pytest.raises(rampart.InvalidArgumentError, match="threshold must be a finite"):
        vreg.find_relevant(None, threshold=bad, task_embedding=q)
    with pytest.raises(rampart.InvalidArgumentError, match="threshold must be a finite"):
        vreg.evict_by_policy(threshold=bad)
    assert len(vreg) == 3  # nothing was gated out or evicted silently


@pytest.mark.parametrize("big", [2**63, 2**64, 10**30])
def test_huge_ints_are_invalid_arguments_not_overflow(
    vreg: rampart.BlockRegistry, big: int
) -> None:
    q = [1.0, 0.0, 0.0]
    with pytest.raises(rampart.InvalidArgumentError, match="max_tokens"):
        vreg.compile(max_tokens=big)
    with pytest.raises(rampart.InvalidArgumentError, match="max_tokens"):
        vreg.compile(max_tokens=big, task_embedding=q, top_k=1)
    with pytest.raises(rampart.InvalidArgumentError, match="max_tokens"):
        vreg.compile_dry_run(max_tokens=big)
    with pytest.raises(rampart.InvalidArgumentError, match="top_k"):
        vreg.compile(task_embedding=q, top_k=big)
    with pytest.raises(rampart.InvalidArgumentError, match="top_k"):
        vreg.find_relevant(None, top_k=big, task_embedding=q)
    with pytest.raises(rampart.InvalidArgumentError, match="n must be"):
        vreg.evict_by_policy(big)
    with pytest.raises(rampart.InvalidArgumentError, match="default_max_tokens"):
        rampart.BlockRegistry(default_max_tokens=big)
    # Positions and steps clamp (docs/specification.md §3): any int is fine there.
    rid = vreg.runtime_ids()[0]
    assert vreg.promote(rid, to_position=big) == 2
    assert vreg.promote(rid, steps=big) == 0
    assert vreg.demote(rid, big) == 2


def test_numpy_scalars_are_accepted(vreg: rampart.BlockRegistry) -> None:
    np = pytest.importorskip("numpy")
    q = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    rid = vreg.write_block("np", "np", priority=np.float32(0.25), position=np.int64(0), embedding=q)
    assert vreg.index_of(rid) == 0 and vreg.get_by_id(rid).priority == 0.25
    vreg.update_priority(rid, np.float64(0.75))
    assert vreg.promote(rid, steps=np.int64(-1)) == 1
    assert vreg.promote(rid, to_position=np.int32(0)) == 0
    assert vreg.demote(rid, np.int16(2)) == 2
    top = vreg.find_relevant(None, top_k=np.int64(2), threshold=np.float32(0.5), task_embedding=q)
    assert len(top) == 2
    res = vreg.compile(max_tokens=np.int64(4), task_embedding=q, top_k=np.uint8(2))
    assert res.prompt and len(res.included_blocks) <= 2
    res = vreg.compile(task_embedding=q, relevance_threshold=np.float32(0.9))
    assert len(res.included_blocks) == 2
    assert vreg.compile(max_tokens=np.int64(2)).prompt
    assert vreg.compile_dry_run(max_tokens=np.int32(100)).max_tokens == 100
    gated = vreg.compile(
        task_text="t", top_k=np.int64(1), gate=lambda t, bs: [np.float32(i) for i in range(len(bs))]
    )
    assert len(gated.included_blocks) == 1
    assert vreg.evict_by_policy(np.int64(1), threshold=np.float32(0.0)) != []
    ids = vreg.load_tools(
        [{"name": "t", "inputSchema": {"type": "object"}}], priority=np.float16(1)
    )
    assert vreg.get_by_id(ids[0]).priority == 1.0
    r = rampart.BlockRegistry(default_max_tokens=np.int64(10))
    assert r.default_max_tokens == 10 and type(r.default_max_tokens) is int
    r.release()


@pytest.mark.parametrize("bad", [True, "numpy-bool", "1", 1.5])
def test_bool_and_non_integers_stay_refused(vreg: rampart.BlockRegistry, bad: object) -> None:
    if bad == "numpy-bool":
        np = pytest.importorskip("numpy")
        bad = np.bool_(True)
    q = [1.0, 0.0, 0.0]
    with pytest.raises(rampart.InvalidArgumentError):
        vreg.compile(task_embedding=q, top_k=bad)  # type: ignore[arg-type]
    with pytest.raises(rampart.InvalidArgumentError):
        vreg.compile(max_tokens=bad)  # type: ignore[arg-type]
    with pytest.raises(rampart.InvalidArgumentError):
        vreg.write_block("x", "x", priority=bad)  # type: ignore[arg-type]


def test_gate_scores_nan_still_refused_numpy_nan_too(vreg: rampart.BlockRegistry) -> None:
    np = pytest.importorskip("numpy")
    for nan in (NAN, np.float32("nan"), "0.5", True):
        with pytest.raises(rampart.InvalidArgumentError, match="expected a number"):
            vreg.compile(task_text="t", top_k=1, gate=lambda t, bs, v=nan: [v] * len(bs))


# ---- odd paths and arguments of the seed loaders -------------------------------------------


def test_odd_paths_give_documented_errors(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="cannot open"):
        rampart.BlockRegistry.from_files([str(tmp_path / ("a" * 5000 + ".md"))])
    loop = tmp_path / "SKILL.md"
    loop.symlink_to(loop)
    with pytest.raises(ParseError, match="cannot open"):
        rampart.SeedRegistry.from_files([loop])
    for bad in (5, None, b"/tmp/x.md"):
        with pytest.raises(rampart.InvalidArgumentError, match="path"):
            rampart.BlockRegistry.from_files(bad)  # type: ignore[arg-type]
        with pytest.raises(rampart.InvalidArgumentError, match="path"):
            rampart.BlockRegistry.from_files([bad])  # type: ignore[list-item]
    with pytest.raises(rampart.InvalidArgumentError, match="names apply to a file"):
        rampart.BlockRegistry.from_files([rampart.BlockSource(tmp_path, names=["x"])])


def test_skill_file_root_and_splitter_errors(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    f = write(tmp_path, "a/SKILL.md", "Just text.\n")
    with pytest.raises(rampart.InvalidArgumentError, match="not inside root"):
        rampart.SeedRegistry.from_skill_file(f, root=tmp_path / "elsewhere")
    with pytest.raises(ParseError, match="splitter") as exc:
        rampart.SeedRegistry.from_skill_file(f, splitter=lambda text: 5)  # type: ignore[arg-type,return-value]
    assert exc.value.path == str(f)


# ---- strings that are not text ---------------------------------------------------------------


def test_lone_surrogates_are_invalid_arguments(vreg: rampart.BlockRegistry) -> None:
    bad = "model said \ud800"
    rid = vreg.runtime_ids()[0]
    with pytest.raises(rampart.InvalidArgumentError, match="content holds a lone surrogate"):
        vreg.write_block(bad, "n")
    with pytest.raises(rampart.InvalidArgumentError, match="semantic_name holds"):
        vreg.write_block("ok", "\udfff")
    with pytest.raises(rampart.InvalidArgumentError, match="trajectory_id holds"):
        vreg.write_agent_block("ok", "run-\ud800", "note")
    with pytest.raises(rampart.InvalidArgumentError, match=r"tags\[1\] holds"):
        vreg.write_block("ok", "n", tags=["t", "\ud800"])
    with pytest.raises(rampart.InvalidArgumentError, match="content holds"):
        vreg.update_block_content(rid, bad)
    with pytest.raises(rampart.InvalidArgumentError, match="prefix holds"):
        vreg.set_wrap(rid, bad)
    with pytest.raises(rampart.InvalidArgumentError, match="separator holds"):
        vreg.compile(separator="\n\ud800\n")
    with pytest.raises(rampart.InvalidArgumentError, match="trajectory_id holds"):
        vreg.rollback_trajectory(bad)
    with pytest.raises(rampart.InvalidArgumentError, match="label holds"):
        rampart.BlockRegistry(label=bad)
    assert len(vreg) == 3 and "\ud800" not in vreg.compile().prompt
    # Text outside the BMP and ordinary non-ASCII text are fine.
    vreg.write_block("emoji 🙂 and ü", "ok\u00e9")


def test_lone_surrogate_separator_is_an_invalid_argument_on_every_compile_path() -> None:
    # A fresh default registry: the separator's token count is not cached yet,
    # so the check must come before the tokeniser sees it.
    reg = rampart.BlockRegistry()
    reg.write_block("one", "a")
    reg.write_block("two", "b")
    calls = [
        lambda s: reg.compile(separator=s),
        lambda s: reg.compile(max_tokens=100, separator=s),
        lambda s: reg.compile(separator=s, tools_in_prompt=False),
        lambda s: reg.compile_dry_run(separator=s),
    ]
    for sep in ("\ud800", "x\udc80y", "\n\udfff"):
        for call in calls:
            with pytest.raises(rampart.InvalidArgumentError, match="separator holds a lone"):
                call(sep)
    assert [b.access_count for b in reg] == [0, 0]  # nothing was compiled
    assert reg.compile(separator=" | ").prompt == "one | two"


@pytest.mark.parametrize("score", [None, "high", NAN, [1.0]])
def test_eviction_policy_returning_a_non_number_is_an_invalid_argument(score: object) -> None:
    reg = rampart.BlockRegistry(eviction_policy=lambda b: score, default_max_tokens=None)
    reg.write_block("x", "x")
    with pytest.raises(rampart.InvalidArgumentError, match="eviction policy returned"):
        reg.evict_by_policy()
    assert len(reg) == 1
    reg.release()


def test_eviction_policy_may_return_numpy_scalars() -> None:
    np = pytest.importorskip("numpy")
    reg = rampart.BlockRegistry(eviction_policy=lambda b: np.float32(b.priority))
    low, high = reg.write_block("x", "x", priority=0.1), reg.write_block("y", "y", priority=0.9)
    assert reg.evict_by_policy(1) == [high] and low in reg
    reg.release()


# ---- skill files: headers cost linear time ---------------------------------------------------


def test_header_lines_of_blank_space_parse_in_linear_time(tmp_path: Path) -> None:
    # The former one-regex header form backtracked cubically: 2 000 spaces took
    # 12 s, these would take hours (a hang, not a timed assertion, is the failure).
    text = "## x" + " " * 20_000 + "y\nbody\n## z" + "#" * 20_000 + "\n## w [" + " " * 20_000 + "\n"
    text += "## t" + " " * 20_000 + "[priority=0.9]\nend\n"
    blocks = parse_skill_file(write(tmp_path, "SKILL.md", text))
    assert [b.name for b in blocks] == ["x_y", "z", "w", "t"]
    assert blocks[3].priority == 0.9 and blocks[3].content == "## t\nend"


def test_header_closing_hashes_and_hints_keep_their_meaning(tmp_path: Path) -> None:
    text = "## Deploy ##\nA\n### Rules [priority=0.8, tags=a b] ###\nB\n#### Deep\nC\n"
    blocks = parse_skill_file(write(tmp_path, "SKILL.md", text))
    assert [(b.name, b.priority, b.tags) for b in blocks] == [
        ("deploy", 0.9, ()),
        ("rules", 0.8, ("a", "b")),
    ]
    assert blocks[0].content == "## Deploy\nA" and blocks[1].content.endswith("#### Deep\nC")


def test_many_front_matter_keys_report_their_own_lines(tmp_path: Path) -> None:
    # One pass indexes every key's line (a scan per key took 55 s at 20 000 keys).
    keys = "".join(f"k{i}: v\n" for i in range(20_000))
    p = write(tmp_path, "k.md", f"---\nname: x\n{keys}bad: !!binary aGVsbG8=\n---\nbody\n")
    with pytest.raises(ParseError, match="binary data") as exc:
        parse_file(p)
    fails_at(exc, p, 20_003)
    (b,) = parse_file(write(tmp_path, "ok.md", f"---\nname: x\n{keys}---\nbody\n"))
    assert len(b.metadata) == 20_000


def test_skill_header_names_and_hint_tags_are_checked_with_the_line(tmp_path: Path) -> None:
    p = write(tmp_path, "SKILL.md", "## ok\nA\n## " + "n" * 70_000 + "\nB\n")
    with pytest.raises(ParseError, match="name is 70000 bytes") as exc:
        rampart.SeedRegistry.from_skill_file(p)
    fails_at(exc, p, 3)
    tags = " ".join(["t" * 1000] * 70)
    p = write(tmp_path, "SKILL.md", f"## ok [tags={tags}]\nA\n")
    with pytest.raises(ParseError, match="tags take") as exc:
        parse_skill_file(p)
    fails_at(exc, p, 1)
