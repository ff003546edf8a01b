"""Hostile inputs (issue 11): each finding and each class hunted beyond it has a
regression test here. Every one must end in a documented rampart error, fast and
small, never a hang, a traceback of a builtin error, or state left behind."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import rampart
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
    with pytest.raises(ParseError, match="file not found"):
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
