"""Tool definitions in, :class:`ToolSchema` out: the shape of each entry detected
from its keys, collections and JSON files unwrapped (:func:`parse_tools`)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Union

from rampart._files import FileProblem, read_regular_file
from rampart.errors import InvalidArgumentError, UnsupportedFormatError
from rampart.providers import anthropic, gemini, openai
from rampart.tools import limits
from rampart.tools.schema import (
    ToolSchema,
    _check_examples,
    _example_tuple,
    _Invalid,
    _json_copy,
    _json_kind,
    _validated,
)

ToolsInput = Union[
    str, "os.PathLike[str]", Sequence[Union[Mapping[str, Any], "ToolSchema"]], Mapping[str, Any]
]

_EXPECTED = (
    'expected an OpenAI ({"type": "function", "function": {"name", "parameters", ...}}), '
    'OpenAI Responses ({"type": "function", "name", "parameters", ...}), '
    'Anthropic ({"name", "description", "input_schema"}), '
    'MCP ({"name", "inputSchema", ...}) or '
    'Gemini ({"name", "description", "parameters" or "parameters_json_schema"}) tool definition'
)


def _entry_name(entry: Any) -> str | None:
    if isinstance(entry, ToolSchema):
        return entry.name
    if not isinstance(entry, Mapping):
        return None
    name = entry.get("name")
    fn = entry.get("function")
    if name is None and isinstance(fn, Mapping):
        name = fn.get("name")
    return name if isinstance(name, str) else None


def _parse_entry(entry: Any) -> ToolSchema:
    """One definition, shape detected from its keys; raises _Invalid."""
    if isinstance(entry, ToolSchema):
        return entry
    if not isinstance(entry, Mapping):
        raise _Invalid(f"{_EXPECTED}; got a JSON {_json_kind(entry)}")
    kind = entry.get("type")
    if openai.is_function(entry):
        fn = entry.get("function")
        if fn is not None and not isinstance(fn, Mapping):
            raise _Invalid(f'"function" must be an object, got {_json_kind(fn)}')
        try:
            fname, fdesc, params, strict, fmt = openai.read_function(entry)
        except InvalidArgumentError as exc:
            raise _Invalid(str(exc)) from None
        fields: tuple[Any, ...] = (fname, fdesc, params, None, None, None)
    elif "inputSchema" in entry and "input_schema" in entry:
        raise _Invalid('has both "inputSchema" (MCP) and "input_schema" (Anthropic); pick one')
    elif "inputSchema" in entry:
        fmt, strict = "mcp", None
        fields = (
            entry.get("name"),
            entry.get("description"),
            entry["inputSchema"],
            entry.get("title"),
            entry.get("annotations"),
            entry.get("outputSchema"),
        )
    elif anthropic.is_tool(entry):
        aname, adesc, aschema, strict = anthropic.read_tool(entry)
        fmt, fields = "anthropic", (aname, adesc, aschema, None, None, None)
    elif isinstance(kind, str):
        raise _Invalid(
            f"tool type {kind!r} is not supported: only function tools that carry a JSON "
            f"Schema are (built-in and server tools have none); {_EXPECTED}"
        )
    elif gemini.is_declaration(entry):
        # Also what a bare OpenAI function ({"name", "parameters"}) looks like: the
        # same fields mean the same thing, so it is read the same way.
        fmt, strict = "gemini", None
        try:
            gname, gdesc, gschema = gemini.read_declaration(entry)
        except InvalidArgumentError as exc:
            raise _Invalid(str(exc)) from None
        fields = (gname, gdesc, gschema, None, None, None)
    else:
        raise _Invalid(f"{_EXPECTED}; got an object with keys {sorted(map(str, entry))}")
    name, description, schema, title, annotations, output = fields
    if name is None:
        raise _Invalid("tool definition without a name")
    description = "" if description is None else description
    # Validated here first so that a problem is reported with where it was found.
    _validated(name, description, schema, title, annotations, output, strict, fmt)
    examples = _example_tuple(entry.get("examples"))
    inputs = entry.get("input_examples")
    _check_examples(examples, inputs)
    if inputs is not None:  # here, not in ToolSchema(): the error names the entry
        _json_copy(inputs, "input_examples")
    return ToolSchema(
        name, description, schema, title, annotations, output, strict, fmt, examples, inputs
    )


def _entries(obj: Any, where: str) -> tuple[Sequence[Any], str]:
    """The list of definitions inside ``obj`` and how to name it in messages."""
    if isinstance(obj, Mapping):
        # A loop, not recursion: responses nested in responses cannot exhaust the stack.
        while "jsonrpc" in obj:
            if "error" in obj:
                raise UnsupportedFormatError(
                    f"{where}a JSON-RPC error response, not a tools/list result: "
                    f"{_clip(repr(obj['error']))}"
                )
            result = obj.get("result")
            if not isinstance(result, Mapping):
                raise UnsupportedFormatError(
                    f'{where}a JSON-RPC response without a "result" object; {_EXPECTED}'
                )
            obj = result
        declared = _gemini_declarations(obj, where)
        if declared is not None:
            return declared, "function_declarations"
        if "tools" in obj:
            tools = obj["tools"]
            if not isinstance(tools, (list, tuple)):
                raise UnsupportedFormatError(
                    f'{where}"tools" must be an array of tool definitions, got {_json_kind(tools)}'
                )
            return tools, "tools"
        return [obj], "tools"  # a single definition
    if isinstance(obj, (list, tuple)):
        if any(isinstance(t, Mapping) and _gemini_declarations(t, where) for t in obj):
            # Gemini's tools list: Tool objects, each holding function declarations.
            flat: list[Any] = []
            for t in obj:
                inner = _gemini_declarations(t, where) if isinstance(t, Mapping) else None
                flat.extend(inner if inner is not None else [t])
            return flat, "function_declarations"
        return obj, "tools"
    raise UnsupportedFormatError(
        f"{where}tools must be a list of tool definitions, an MCP tools/list result or a "
        f"path to a JSON file holding one; got {type(obj).__name__}"
    )


def _gemini_declarations(obj: Mapping[str, Any], where: str) -> list[Any] | None:
    """The declarations of a Gemini ``Tool`` (``{"function_declarations": [...]}``,
    either spelling), or None when ``obj`` is not one."""
    for key in ("function_declarations", "functionDeclarations"):
        if key in obj:
            decls = obj[key]
            if not isinstance(decls, (list, tuple)):
                raise UnsupportedFormatError(
                    f'{where}"{key}" must be an array of function declarations, got '
                    f"{_json_kind(decls)}"
                )
            return list(decls)
    return None


def _clip(text: str, n: int = 200) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def _read_json(path: str | os.PathLike[str]) -> Any:
    p = Path(path)
    try:
        raw = read_regular_file(p, limits.MAX_TOOLS_FILE_BYTES)
    except FileProblem as exc:
        if str(exc) == "file not found":
            raise UnsupportedFormatError(f"{p}: no such tools file") from None
        raise UnsupportedFormatError(f"{p}: cannot read tools file: {exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UnsupportedFormatError(f"{p}: cannot read tools file: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnsupportedFormatError(
            f"{p}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}"
        ) from None
    except RecursionError:
        raise UnsupportedFormatError(
            f"{p}: not usable JSON: nested too deeply (at most {limits.MAX_SCHEMA_DEPTH} levels "
            "are accepted in a schema)"
        ) from None


def parse_tools(tools: ToolsInput) -> list[ToolSchema]:
    """Every tool definition in ``tools``, validated, in order.

    ``tools`` is a list of definitions (shapes may be mixed; a :class:`ToolSchema`
    is taken as it is), an MCP ``tools/list``
    result ``{"tools": [...]}`` or the JSON-RPC response around one, a single
    definition, or a ``str``/``PathLike`` path to a UTF-8 JSON file holding any of
    these. All or nothing: the first bad entry raises
    :class:`~rampart.errors.UnsupportedFormatError` naming the file, the entry's
    index (``tools[3]``) and name, and what was expected. Two tools with one name
    are an error too (an API would refuse the list).
    """
    where = ""
    if isinstance(tools, (str, os.PathLike)):
        where = f"{os.fspath(tools)}: "
        tools = _read_json(tools)
    entries, label = _entries(tools, where)
    out: list[ToolSchema] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        name = _entry_name(entry)
        loc = f"{where}{label}[{i}]" + (f" ({name!r})" if name is not None else "")
        try:
            schema = _parse_entry(entry)
        except _Invalid as exc:
            raise UnsupportedFormatError(f"{loc}: {exc}") from None
        except InvalidArgumentError as exc:  # a check only ToolSchema() makes
            raise UnsupportedFormatError(f"{loc}: {exc}") from None
        if schema.name in seen:
            raise UnsupportedFormatError(
                f"{loc}: duplicate tool name {schema.name!r} (also {label}[{seen[schema.name]}])"
            )
        seen[schema.name] = i
        out.append(schema)
    return out
