"""Tool schemas in block metadata: how a tool block stores its schema, reads it
back, and checks it before a registry is built; one name, one schema."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from rampart._files import FileProblem, json_object
from rampart.tools.schema import METADATA_KEY, ToolSchema


def tool_name_clash(
    declared: Iterable[tuple[ToolSchema, str]], blocks: Iterable[Any]
) -> str | None:
    """Why the tools ``declared`` (``(schema, where it comes from)`` pairs) cannot
    join ``blocks`` (a registry's blocks), else None. A request's ``tools`` names
    each tool once, so two blocks with one name and different schemas (two servers'
    ``search``) would collapse into whichever comes first, and ``tools="allowed"``
    could send the schema of the one the gate dropped: a name stands for one
    schema in a registry (the same schema twice is harmless). Load the second
    server's tool under a qualified name (``jira_search``)."""
    held = {t.name: (t, b) for b in blocks if (t := b.tool_schema) is not None}
    seen: dict[str, tuple[ToolSchema, str]] = {}
    for schema, where in declared:
        if schema.name in held and held[schema.name][0] != schema:
            b = held[schema.name][1]
            return (
                f"{where}: the registry already holds tool {schema.name!r} with another "
                f"schema (block {b.semantic_name!r}, {b.runtime_id}): evict it first, or load "
                "this one under a qualified name"
            )
        if schema.name in seen and seen[schema.name][0] != schema:
            return (
                f"{where}: tool {schema.name!r} is declared twice with different schemas "
                f"(also {seen[schema.name][1]}): give one a qualified name"
            )
        seen.setdefault(schema.name, (schema, where))
    return None


def block_metadata_json(schema: ToolSchema) -> str:
    """The metadata a tool block is stored with: ``{"tool_schema": schema.to_dict()}``."""
    return json.dumps({METADATA_KEY: schema.to_dict()}, ensure_ascii=False, separators=(",", ":"))


def schema_from_metadata(metadata: Mapping[str, Any]) -> ToolSchema | None:
    """The schema a block's metadata holds, or None when it holds none."""
    data = metadata.get(METADATA_KEY)
    return None if data is None else ToolSchema.from_dict(data)


def check_block_metadata(rows: Any) -> None:
    """Every block's metadata is a JSON object of bounded depth, and a tool
    block's schema is valid: what reading ``metadata`` or ``tool_schema`` later
    would otherwise raise as JSONDecodeError or RecursionError. ``rows``:
    ``(index, name, metadata JSON)`` of the blocks that have metadata, as
    ``SavedRegistry.block_metadata()`` gives them before any registry exists."""
    for k, name, raw in rows:
        meta = json_object(raw, f"the metadata of block #{k} ({name!r:.80})")
        if METADATA_KEY in meta:
            try:
                schema_from_metadata(meta)
            except ValueError as exc:
                raise FileProblem(
                    f"block #{k} ({name!r:.80}) holds a malformed tool schema: {exc}"
                ) from None
