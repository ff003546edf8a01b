"""Markdown export of a registry's blocks (``BlockRegistry.export_markdown``): a
seed file the ordinary parser reads back with the same names, contents,
priorities and tags, checked by parsing it before it is written."""

from __future__ import annotations

import datetime
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from rampart._labels import label_of
from rampart.block import InstructionBlock
from rampart.errors import InvalidArgumentError, ParseError
from rampart.seeds import parse_markdown

__all__ = ["check_round_trip", "seed_text"]


def seed_text(blocks: Sequence[InstructionBlock]) -> str:
    parts = []
    for b in blocks:
        front: dict[str, Any] = {"name": b.semantic_name, "priority": b.priority}
        if b.tags:
            front["tags"] = list(b.tags)
        if not b.gated:
            front["gated"] = False
        front["source"] = b.source
        if b.trajectory_id:
            front["trajectory"] = b.trajectory_id
        front["created"] = datetime.datetime.fromtimestamp(
            b.created_at, datetime.timezone.utc
        ).strftime("%Y-%m-%dT%H:%M:%SZ")
        author = label_of(b.author_id)
        front["author"] = author if author is not None else b.author_id
        for k, v in b.metadata.items():
            front.setdefault(k, v)
        head = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, width=10**9)
        parts.append(f"---\n{head}---\n\n{b.content.strip()}\n")
    return "\n".join(parts)


def check_round_trip(text: str, blocks: Sequence[InstructionBlock], path: Path) -> None:
    """Parse ``text`` with the seed parser and make sure every block comes back."""
    with tempfile.TemporaryDirectory() as d:
        probe = Path(d) / (path.stem + ".md")
        probe.write_text(text, encoding="utf-8")
        try:
            back = parse_markdown(probe, default_priority=0.5)
        except ParseError as e:
            raise InvalidArgumentError(f"cannot export to {path}: {e}") from None
    for i, b in enumerate(blocks):
        got = back[i] if i < len(back) else None
        if (
            got is None
            or got.name != b.semantic_name
            or got.content != b.content.strip()
            or got.priority != b.priority
            or list(got.tags) != list(b.tags)
            or got.gated != b.gated
        ):
            raise InvalidArgumentError(
                f"cannot export block {b.semantic_name!r} ({b.runtime_id}) to {path}: its "
                "text does not survive the seed format (a line '---' followed by a "
                "'name:' mapping starts a new block)"
            )
    if len(back) != len(blocks):
        raise InvalidArgumentError(f"cannot export to {path}: the seed format split a block")
