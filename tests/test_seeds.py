"""Seed files (docs/specification.md §2): front matter, bodies, skills, errors, format registry."""

from __future__ import annotations

from pathlib import Path

import pytest
import rampart
from rampart.seeds import parse_file, parse_skill_file

from tests.conftest import SEEDS, SKILLS

SKILL_FILES = sorted(SKILLS.glob("*/SKILL.md"))
assert SKILL_FILES, f"{SKILLS} holds no SKILL.md files (tests/data is part of the repository)"


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8")
    return p


MULTI = """---
name: first
priority: 0.8
tags: [rules, git]
owner: platform
---
First body.

---
name: second
---
Second body, line one.

---

A markdown rule above is body text.

```yaml
---
name: not_a_block
---
```
"""


def test_multi_block_file(tmp_path: Path) -> None:
    blocks = parse_file(write(tmp_path, "rules.md", MULTI))
    assert [b.name for b in blocks] == ["first", "second"]
    first, second = blocks
    assert (first.priority, first.tags, first.content) == (0.8, ("rules", "git"), "First body.")
    assert first.metadata == {"owner": "platform"}
    assert second.priority == 0.5 and second.tags == ()
    assert "---\n\nA markdown rule above is body text." in second.content
    assert "name: not_a_block" in second.content, "fenced code is never a boundary"
    assert second.line == 9  # its opening '---'


def test_first_section_without_name_takes_the_stem(tmp_path: Path) -> None:
    p = write(tmp_path, "my rules-file.md", "---\nglobs: ['*.py']\n---\nUse ruff.\n")
    [b] = parse_file(p)
    assert b.name == "my_rules_file" and b.content == "Use ruff."
    assert b.metadata == {"globs": ["*.py"]}


def test_no_front_matter_is_one_anonymous_block(tmp_path: Path) -> None:
    text = "# Project notes\n\n---\n\nSome text\n\n## More\n\nname: inline\n"
    [b] = parse_file(write(tmp_path, "CLAUDE  notes-v2.md", text))
    assert b.name == "CLAUDE_notes_v2"
    assert b.content == text.strip()


def test_bom_and_crlf(tmp_path: Path) -> None:
    raw = "\ufeff---\r\nname: win\r\n---\r\nline one\r\nline two\r\n".encode()
    [b] = parse_file(write(tmp_path, "w.md", raw))
    assert (b.name, b.content) == ("win", "line one\nline two")


def test_rule_followed_by_text_mentioning_name(tmp_path: Path) -> None:
    text = "---\nname: a\n---\nbody\n\n---\nThe name: field is required.\n---\nmore\n"
    [b] = parse_file(write(tmp_path, "a.md", text))
    assert "The name: field is required." in b.content


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("---\nname: a\npriority: [1\n---\nbody\n", 3, "malformed YAML"),
        ("---\nname: 12\n---\nbody\n", 2, "name must be a non-empty string"),
        ("---\nname: a\npriority: 1.5\n---\nbody\n", 3, r"priority must be in \[0, 1\]"),
        ("---\nname: a\npriority: true\n---\nbody\n", 3, "priority must be a number"),
        ("---\nname: a\npriority: high\n---\nbody\n", 3, "priority must be a number"),
        ("---\nname: a\ntags: solo\n---\nbody\n", 3, "tags must be a list of strings"),
        ("---\nname: a\ntags: [1, 2]\n---\nbody\n", 3, "tags must be a list of strings"),
        ("---\nname: a\nbody without a closing line\n", 1, "unclosed front matter"),
        ("---\n- a\n- b\n---\nbody\n", 2, "must be a YAML mapping"),
        ("---\nname: a\n---\nbody\n---\nname: b\npriority: 2\n---\nx\n", 7, "priority"),
        ("---\nname: a\n---\nbody\n\n---\nname: [b\n---\nx\n", 7, "malformed YAML"),
        ("---\nname: a\n---\nbody\n\n---\nname: b\n", 6, "unclosed front matter"),
    ],
)
def test_parse_errors_name_file_and_line(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    p = write(tmp_path, "bad.md", text)
    with pytest.raises(rampart.ParseError, match=message) as info:
        parse_file(p)
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.path, err.line) == (str(p), line)
    assert f"{p}:{line}:" in str(err)


def test_undecodable_bytes(tmp_path: Path) -> None:
    p = write(tmp_path, "bin.md", b"---\nname: a\n---\nok\n\xff\xfe bad\n")
    with pytest.raises(rampart.ParseError, match="UTF-8") as info:
        parse_file(p)
    assert info.value.line == 5


def test_unknown_extension_and_register_parser(tmp_path: Path) -> None:
    p = write(tmp_path, "rules.txt", "alpha: first rule\nbeta: second rule\n")
    with pytest.raises(rampart.UnsupportedFormatError, match=r"\.txt") as info:
        rampart.BlockRegistry.from_files([p])
    assert isinstance(info.value, ValueError)

    def parse_txt(path: Path) -> list[tuple[str, str, float, list[str]]]:
        rows = []
        for line in path.read_text().splitlines():
            name, _, content = line.partition(":")
            rows.append((name, content.strip(), 0.6, ["txt"]))
        return rows

    rampart.register_parser(".txt", parse_txt)
    r = rampart.BlockRegistry.from_files([p])
    assert [b.semantic_name for b in r.list_blocks()] == ["alpha", "beta"]
    assert r.list_blocks()[0].tags == ("txt",) and r.list_blocks()[0].priority == 0.6

    rampart.register_parser(".txt", lambda path: [("x", "y", 7, [])])
    with pytest.raises(rampart.ParseError, match="priority"):
        rampart.BlockRegistry.from_files([p])
    with pytest.raises(ValueError, match="extension"):
        rampart.register_parser("txt", parse_txt)


def test_from_files_keeps_file_then_section_order_and_marks_seed(tmp_path: Path) -> None:
    a = write(tmp_path, "a.md", "---\nname: a1\n---\nx\n---\nname: a2\n---\ny\n")
    b = write(tmp_path, "b.md", "---\nname: b1\n---\nz\n")
    r = rampart.BlockRegistry.from_files([b, str(a)])
    blocks = r.list_blocks()
    assert [x.semantic_name for x in blocks] == ["b1", "a1", "a2"]
    assert {(x.source, x.evictable, x.author_id) for x in blocks} == {
        ("seed", False, r.registry_id)
    }
    assert len({x.runtime_id for x in blocks}) == 3


def test_failed_load_is_all_or_nothing(tmp_path: Path) -> None:
    good = write(tmp_path, "good.md", "---\nname: g\n---\nfine\n")
    bad = write(tmp_path, "bad.md", "---\nname: b\npriority: 9\n---\nno\n")
    with pytest.raises(rampart.ParseError):
        rampart.BlockRegistry.from_files([good, bad], label="all-or-nothing")
    assert rampart.get_by_label("all-or-nothing") is None, "no registry was created"
    r = rampart.BlockRegistry.from_files([good], label="all-or-nothing")
    assert len(r) == 1


def test_block_source_selects_names(tmp_path: Path) -> None:
    p = write(
        tmp_path, "s.md", "---\nname: a\n---\nA\n---\nname: b\n---\nB\n---\nname: c\n---\nC\n"
    )
    r = rampart.BlockRegistry.from_files([rampart.BlockSource(p, names=["c", "a"])])
    assert [b.semantic_name for b in r.list_blocks()] == ["c", "a"]
    with pytest.raises(rampart.BlockNotFoundError, match="'zz'"):
        rampart.BlockRegistry.from_files([rampart.BlockSource(p, names=["a", "zz"])])
    r = rampart.BlockRegistry.from_files(
        [rampart.BlockSource(p, names=["a", "zz"], must_match=False)]
    )
    assert [b.semantic_name for b in r.list_blocks()] == ["a"]


def test_directory_expands_to_seed_files_sorted_skipping_readme() -> None:
    r = rampart.BlockRegistry.from_files([SEEDS])
    assert len(r) == 31
    names = [b.semantic_name for b in r.list_blocks()]
    assert "release-notes" in names and names[0] == "read_before_edit"
    assert r.find_by_tag("tool") and all(b.source == "seed" for b in r.list_blocks())


@pytest.mark.parametrize("path", SKILL_FILES, ids=lambda p: p.parent.name)
def test_real_skill_files_import_unchanged(path: Path) -> None:
    raw = path.read_text(encoding="utf-8")
    _, front, body = raw.split("---\n", 2)
    for parse in (parse_file, parse_skill_file):
        [block] = parse(path)
        assert block.name == path.parent.name, "named by its front matter"
        assert block.content == body.strip(), "the whole body, --- rules included"
        assert block.description and block.description in front
        assert block.metadata.get("license")
    assert parse_skill_file(path)[0].priority == 0.9
    seeds = rampart.SeedRegistry.from_skill_file(path)
    assert seeds.list_names() == [f"{path.parent.name}.{path.parent.name}"]


def test_all_real_skills_load_into_one_registry() -> None:
    r = rampart.BlockRegistry.from_files(SKILL_FILES)
    assert [b.semantic_name for b in r.list_blocks()] == [p.parent.name for p in SKILL_FILES]
    b = r.list_blocks()[0]
    assert b.description is not None and b.gate_text.startswith(b.description)


def test_skill_file_without_front_matter_splits_on_headers(tmp_path: Path) -> None:
    text = """# Deploy skill

Intro text.

## Build the image [priority=0.95, tags=docker build]

Run docker build.

```bash
## not a header inside a fence
```

### Push

Push it.

## Push
Again.
"""
    p = write(tmp_path, "deploy/SKILL.md", text)
    blocks = parse_skill_file(p)
    assert [b.name for b in blocks] == ["SKILL", "build_the_image", "push", "push_2"]
    build = blocks[1]
    assert build.priority == 0.95 and build.tags == ("docker", "build")
    assert build.content.startswith("## Build the image\n") and "not a header" in build.content
    assert blocks[2].priority == 0.9, "SKILL.md defaults to 0.9"
    seeds = rampart.SeedRegistry.from_skill_file(p)
    assert "deploy.build_the_image" in seeds and seeds.get("push_2").name == "push_2"
    other = write(tmp_path, "notes.md", "## A\nx\n## B\ny\n")
    assert [b.priority for b in parse_skill_file(other)] == [0.5, 0.5]
    with pytest.raises(rampart.ParseError, match="hint"):
        parse_skill_file(write(tmp_path, "h.md", "## T [priority=0.5, colour=red]\nx\n"))


def test_skill_file_splitter_and_plain(tmp_path: Path) -> None:
    p = write(tmp_path, "plain.md", "just one paragraph\n")
    [b] = parse_skill_file(p, default_priority=0.3)
    assert (b.name, b.priority) == ("plain", 0.3)
    q = write(tmp_path, "split.md", "a|b|c")

    def splitter(text: str) -> list[tuple[str, str]]:
        return [(f"part{i}", t) for i, t in enumerate(text.split("|"))]

    seeds = rampart.SeedRegistry.from_skill_file(q, namespace="ns", splitter=splitter)
    assert seeds.list_names() == ["ns.part0", "ns.part1", "ns.part2"]


def test_seed_registry_and_working_registries(tmp_path: Path) -> None:
    seeds = rampart.SeedRegistry.from_files([SEEDS])
    assert len(seeds) == 31
    assert "core_rules.read_before_edit" in seeds and "read_before_edit" in seeds
    assert seeds.get("read_before_edit") is seeds.get("core_rules.read_before_edit")
    assert "release-notes.release-notes" in seeds
    tools = seeds.list_names(tags=["tool"])
    assert len(tools) == 10 and all(k.startswith("tools.") for k in tools)
    with pytest.raises(KeyError):
        seeds.get("nope")

    r = rampart.BlockRegistry.from_seed(seeds, ["tool_shell", "core_rules.minimal_diffs"])
    assert [b.semantic_name for b in r.list_blocks()] == ["tool_shell", "minimal_diffs"]
    with pytest.raises(rampart.BlockNotFoundError, match="nope"):
        rampart.BlockRegistry.from_seed(seeds, ["tool_shell", "nope"])
    loose = rampart.BlockRegistry.from_seed(seeds, ["tool_shell", "nope"], must_match=False)
    assert len(loose) == 1
    rid = r.add_from_seed(seeds, "secrets_handling")
    assert r.get_by_id(rid).source == "seed" and r.index_of(rid) == 2

    dup = write(tmp_path, "x/core_rules.md", "---\nname: read_before_edit\n---\nagain\n")
    with pytest.raises(rampart.ParseError, match="duplicate seed key"):
        seeds.merged(rampart.SeedRegistry.from_files([dup]))


def test_header_splitting_and_block_boundaries_read_fences_alike(tmp_path: Path) -> None:
    # "```yaml" inside an open fence is text, not a closing fence (CommonMark).
    text = "## A\n```\n```yaml\n## not a header\n```\n## B\nb\n"
    blocks = parse_skill_file(write(tmp_path, "f.md", text))
    assert [b.name for b in blocks] == ["a", "b"]
    assert "## not a header" in blocks[0].content


def test_seed_files_with_exact_fields(tmp_path: Path) -> None:
    good = tmp_path / "good.md"
    good.write_text(
        "---\nname: '  spaced '\nexact: [name, content]\n---\n\n\"a\\r\\nb\\n\"\n",
        encoding="utf-8",
    )
    (b,) = rampart.BlockRegistry.from_files([good])
    assert (b.semantic_name, b.content, b.metadata) == ("  spaced ", "a\r\nb\n", {})
    bad = {
        "exact: yes": "exact must list the fields written verbatim",
        "exact: [name, tags]": "exact must list the fields written verbatim",
        "exact: []": "exact must list the fields written verbatim",
    }
    for line, message in bad.items():
        f = tmp_path / "bad.md"
        f.write_text(f"---\nname: x\n{line}\n---\n\nbody\n", encoding="utf-8")
        with pytest.raises(rampart.ParseError, match=message) as err:
            rampart.BlockRegistry.from_files([f])
        assert err.value.path == str(f) and err.value.line == 3
    f = tmp_path / "body.md"
    for body in ("not json", '"unterminated', '"two" "strings"', "[1]", '"\\ud800"'):
        f.write_text(f"---\nname: x\nexact: [content]\n---\n\n{body}\n", encoding="utf-8")
        with pytest.raises(
            rampart.ParseError, match=r"body must be one JSON string|lone surrogate"
        ):
            rampart.BlockRegistry.from_files([f])
    f.write_text("---\nname: ' '\nexact: [name]\n---\n\nx\n", encoding="utf-8")
    with pytest.raises(rampart.ParseError, match="visible character"):
        rampart.BlockRegistry.from_files([f])
