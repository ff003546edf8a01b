"""Example requests, rampart's extension for the relevance gate
(docs/tool-gate.md): the texts embedded per tool, and examples read from a file
or a mapping and attached to parsed tools."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from rampart.errors import InvalidArgumentError, UnsupportedFormatError
from rampart.tools import limits
from rampart.tools.parse import ToolsInput, _clip, _read_json, parse_tools
from rampart.tools.render import _name_words, _one_line
from rampart.tools.schema import ToolSchema, _check_examples, _example_tuple, _Invalid, _json_kind


def _argument_words(args: Mapping[str, Any]) -> str:
    """An input example as text: ``{"path": "a.py", "head": 5}`` -> ``path: a.py; head: 5``."""
    parts = []
    for key, value in args.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{_name_words(str(key))}: {_one_line(shown)}")
    return _clip("; ".join(parts), limits.MAX_EXAMPLE_CHARS)


def example_texts(schema: ToolSchema) -> list[str]:
    """The texts the gate embeds for a tool besides its :func:`tool_gate_text`: its
    example requests, then its input examples as ``argument: value`` text; no
    duplicates, in order."""
    if not isinstance(schema, ToolSchema):
        raise InvalidArgumentError(f"example_texts takes a ToolSchema, got {type(schema).__name__}")
    texts = [_one_line(e) for e in schema.examples]
    texts += [_argument_words(a) for a in schema.input_examples or ()]
    return [t for t in dict.fromkeys(texts) if t]


def load_examples(source: str | os.PathLike[str] | Mapping[str, Any]) -> dict[str, list[str]]:
    """Example requests per tool name from a mapping or a JSON file holding one:
    ``{"git_add": ["stage src/parser.py", ...]}``, optionally wrapped as
    ``{"examples": {...}}`` (the shape of tests/data/tool_gate_examples.json)."""
    where = ""
    data: Any = source
    if isinstance(source, (str, os.PathLike)):
        where = f"{os.fspath(source)}: "
        data = _read_json(source)
    if isinstance(data, Mapping) and isinstance(data.get("examples"), Mapping):
        data = data["examples"]
    if not isinstance(data, Mapping):
        raise UnsupportedFormatError(
            f"{where}examples must map tool names to lists of requests, got {_json_kind(data)}"
        )
    out: dict[str, list[str]] = {}
    for name, examples in data.items():
        try:
            ex = _example_tuple(examples)
            _check_examples(ex, None)
        except _Invalid as exc:
            raise UnsupportedFormatError(f"{where}tool {name!r}: {exc}") from None
        out[str(name)] = list(ex)
    return out


def with_examples(
    tools: ToolsInput, examples: str | os.PathLike[str] | Mapping[str, Any]
) -> list[ToolSchema]:
    """``tools`` parsed (:func:`parse_tools`), each given the example requests that
    ``examples`` (see :func:`load_examples`) lists under its name, after any it
    already has. A name in ``examples`` that no tool has is an error (a typo would
    otherwise silently leave a tool without its examples).

    Example:
        >>> reg.load_tools(with_examples("git_tools.json", {"git_add": ["stage a.py"]}))
    """
    schemas = parse_tools(tools)
    table = load_examples(examples)
    unknown = sorted(set(table) - {s.name for s in schemas})
    if unknown:
        raise InvalidArgumentError(f"examples name tools that are not in the list: {unknown}")
    out = []
    for s in schemas:
        extra = table.get(s.name)
        if extra:
            merged = tuple(dict.fromkeys([*s.examples, *extra]))
            try:
                out.append(dataclasses.replace(s, examples=merged))
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"{exc} (after adding examples)") from None
        else:
            out.append(s)
    return out
