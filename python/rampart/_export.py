"""Markdown export of a registry's blocks (``BlockRegistry.export_markdown``): a
seed file the ordinary parser reads back with the same names, contents,
priorities and tags, byte for byte, checked by parsing it before it is written.

A block is written the way a person writes one (front matter, then the content as
the Markdown body) when that form gives it back unchanged. Where the Markdown form
would change it (the parser trims names and bodies, turns ``\\r\\n`` and ``\\r``
into ``\\n``, and reads a ``---`` line followed by ``name:`` as the next block's
front matter), the front matter says ``exact: [name, content]`` (the fields
concerned): the name is then taken as written in YAML, outer spaces and all, and
the body is one JSON string holding the content."""

from __future__ import annotations

import datetime
import json
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rampart._labels import label_of
from rampart.block import InstructionBlock
from rampart.errors import InvalidArgumentError, ParseError
from rampart.seeds import EXACT_KEY, SeedBlock, parse_markdown, parse_markdown_text

__all__ = ["export_text"]


def _needs_exact(b: InstructionBlock) -> set[str]:
    """The fields the plain Markdown form would change, known without parsing
    (what else would change, such as a '---' line inside the content that reads
    as front matter, the round trip finds)."""
    out = set()
    if b.semantic_name.strip() != b.semantic_name:
        out.add("name")
    content = b.content
    if "\r" in content or content.strip() != content:
        out.add("content")
    return out


def _block_text(b: InstructionBlock, exact: set[str]) -> str:
    front: dict[str, Any] = {"name": b.semantic_name, "priority": b.priority}
    if b.tags:
        front["tags"] = list(b.tags)
    if not b.gated:
        front["gated"] = False
    if exact:
        front[EXACT_KEY] = sorted(exact)
    front["source"] = b.source
    if b.trajectory_id:
        front["trajectory"] = b.trajectory_id
    front["created"] = datetime.datetime.fromtimestamp(
        b.created_at, datetime.timezone.utc
    ).strftime("%Y-%m-%dT%H:%M:%SZ")
    author = label_of(b.author_id)
    front["author"] = author if author is not None else b.author_id
    for k, v in b.metadata.items():
        # The block fields and the exact key are the parser's; metadata of those
        # names (possible through write_block) would change the block read back.
        if k not in (EXACT_KEY, "gated"):
            front.setdefault(k, v)
    import yaml  # on first export: `import rampart` does not load PyYAML

    # libyaml's emitter where PyYAML has it: the pure-Python one took most of an export.
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    head = yaml.dump(front, Dumper=dumper, sort_keys=False, allow_unicode=True, width=10**9)
    body = json.dumps(b.content, ensure_ascii=False) if "content" in exact else b.content
    return f"---\n{head}---\n\n{body}\n"


def _parse_file(text: str, path: Path) -> list[SeedBlock]:
    """``text`` as the seed parser reads it from a file (BOM, line ends and all)."""
    with tempfile.TemporaryDirectory() as d:
        probe = Path(d) / "export.md"
        probe.write_bytes(text.encode("utf-8"))
        try:
            return parse_markdown(probe, default_priority=0.5)
        except ParseError as e:
            # Name the file being exported, not the probe copy.
            msg = str(e).replace(str(probe), str(path), 1)
            raise InvalidArgumentError(f"cannot export to {path}: {msg}") from None


def _same(got: SeedBlock, b: InstructionBlock) -> bool:
    return (
        got.name == b.semantic_name
        and got.content == b.content
        and got.priority == b.priority
        and list(got.tags) == list(b.tags)
        and got.gated == b.gated
    )


# A block after the one being tried: whatever of the tried block's body would
# reach into the next block (an unclosed code fence) shows as this one missing.
_NEXT = "---\nname: next\n---\n\nnext\n"


def _why_not_back(text: str, b: InstructionBlock, path: Path) -> str | None:
    """None when the parser reads ``text`` back as exactly ``b``, else why not."""
    try:
        back = parse_markdown_text(f"{text}\n{_NEXT}", path, default_priority=0.5)
    except ParseError as e:
        # The line is one of the probe text's: only the message means anything.
        return str(e).removeprefix(f"{path}:{e.line}: " if e.line is not None else f"{path}: ")
    if len(back) != 2 or (back[1].name, back[1].content) != ("next", "next"):
        return "it reaches into the next block"
    return None if _same(back[0], b) else "it reads back changed"


# A line the parser treats specially in a body: a '---' rule (it may open the
# next block's front matter) or a code fence (it may hide the next block's).
_SPECIAL_LINE = re.compile(r"^(?:---[ \t]*|\ {0,3}(?:`{3,}|~{3,}).*)$", re.MULTILINE)


def _inert(b: InstructionBlock, exact: set[str]) -> bool:
    """True when the form ``exact`` gives ``b`` is known to come back unchanged
    without parsing it: its body is a JSON string, or text with no outer blank
    space and no line the parser reads specially (most blocks)."""
    return "content" in exact or _SPECIAL_LINE.search(b.content) is None


def _checked(b: InstructionBlock, path: Path) -> str:
    text = _block_text(b, _needs_exact(b))
    if _why_not_back(text, b, path) is None:
        return text
    # Its body reads as something else (a '---' line with a name: mapping under
    # it, an unclosed code fence): both fields verbatim.
    text = _block_text(b, {"name", "content"})
    why = _why_not_back(text, b, path)
    if why is not None:
        raise InvalidArgumentError(
            f"cannot export block {b.semantic_name!r:.80} ({b.runtime_id}) to {path}: "
            f"the seed format cannot hold it ({why})"
        )
    return text


def export_text(blocks: Sequence[InstructionBlock], path: Path) -> str:
    """Seed-file text from which the parser reads back exactly ``blocks`` (names,
    contents, priorities, tags); InvalidArgumentError naming ``path`` and the
    block when even the exact form cannot hold one (e.g. metadata larger than
    the parser reads as front matter)."""
    parts = []
    for b in blocks:
        exact = _needs_exact(b)
        parts.append(_block_text(b, exact) if _inert(b, exact) else _checked(b, path))
    text = "\n".join(parts)
    # The whole file as a reader gets it.
    try:
        back = _parse_file(text, path)
    except InvalidArgumentError:
        back = []
    if len(back) != len(blocks) or not all(map(_same, back, blocks)):
        # A block thought inert was not (its front matter, say): try each one
        # through the parser, which names the block that cannot be held.
        text = "\n".join(_checked(b, path) for b in blocks)
        back = _parse_file(text, path)
        if len(back) != len(blocks) or not all(map(_same, back, blocks)):  # pragma: no cover
            raise InvalidArgumentError(f"cannot export to {path}: the seed format split a block")
    return text
