"""The tool definition of a Python callable (:func:`tool_schema`): the name, the
docstring's summary as description, and a JSON Schema of the parameters from
their type hints and the docstring's ``Args:`` (or ``:param x:``) lines."""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Union

from rampart.errors import InvalidArgumentError
from rampart.tools.schema import TOOL_NAME, ToolSchema

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _json_type(hint: Any) -> dict[str, Any]:
    """A JSON Schema for a type hint; {} (any value) for what it cannot express."""
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    if hint is type(None):
        return {"type": "null"}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _json_type(rest[0])
        return {"anyOf": [_json_type(a) for a in args]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if hint in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset, Sequence):
        # tuple[int, str] has positional item types a single "items" cannot say
        homogeneous = origin is not tuple or (len(args) == 2 and args[1] is Ellipsis)
        item = _json_type(args[0]) if args and homogeneous else {}
        return {"type": "array", "items": item} if item else {"type": "array"}
    if hint is dict or origin in (dict, Mapping):
        return {"type": "object"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    return {}


_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params)\s*:\s*$", re.IGNORECASE)
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_REST_PARAM = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The summary (first paragraph) and per-parameter descriptions of a Google-style
    (``Args:``) or reST-style (``:param x:``) docstring."""
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line) or line.lstrip().startswith(":"):
            break
        summary.append(line.strip())
    params: dict[str, str] = {}
    in_args, current = False, None
    for line in lines:
        rest = _REST_PARAM.match(line)
        if rest:
            current = rest.group(1)
            params[current] = rest.group(2).strip()
            continue
        if _SECTION.match(line):
            in_args, current = True, None
            continue
        if in_args:
            if not line.strip():
                continue
            if re.match(r"^\S", line) and line.rstrip().endswith(":"):
                in_args = False  # the next section (Returns:, Raises:)
                continue
            m = _ARG_LINE.match(line)
            if m and line[: len(line) - len(line.lstrip())].count(" ") <= 4:
                current = m.group(1).lstrip("*")
                params[current] = m.group(2).strip()
            elif current:
                params[current] = (params[current] + " " + line.strip()).strip()
    return " ".join(summary), params


def tool_schema(fn: Callable[..., Any], name: str | None = None) -> ToolSchema:
    """The tool definition of a Python callable: its name, the docstring's summary as
    description, and a JSON Schema of its parameters from their type hints (parameters
    without a default are required; docstring ``Args:`` lines describe them)."""
    if not callable(fn):
        raise InvalidArgumentError(f"a tool must be callable, got {type(fn).__name__}")
    tool_name = str(name or getattr(fn, "__name__", ""))
    if not TOOL_NAME.fullmatch(tool_name):
        raise InvalidArgumentError(
            f"tool name {tool_name!r} must match [A-Za-z0-9_-]{{1,64}} (what the APIs accept)"
        )
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(
            f"tool {tool_name!r}: no signature to build a schema ({exc})"
        ) from None
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable forward references: fall back to untyped
        hints = {}
    summary, docs = _parse_docstring(inspect.getdoc(fn) or "")
    props: dict[str, Any] = {}
    required: list[str] = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue  # *args/**kwargs have no name a model could pass
        if p.kind is p.POSITIONAL_ONLY:
            raise InvalidArgumentError(
                f"tool {tool_name!r}: parameter {p.name!r} is positional-only; tools are "
                "called with keyword arguments"
            )
        prop = _json_type(hints.get(p.name, Any))
        if docs.get(p.name):
            prop["description"] = docs[p.name]
        if p.default is p.empty:
            required.append(p.name)
        elif p.default is None or isinstance(p.default, (str, int, float, bool)):
            prop["default"] = p.default
        props[p.name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return ToolSchema(name=tool_name, description=summary, input_schema=schema)
