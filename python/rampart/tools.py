"""Tool schemas as instruction blocks: parse, validate, render and convert them.

A tool definition arrives in one of four shapes, detected per entry:

* OpenAI Chat Completions: ``{"type": "function", "function": {"name", "description",
  "parameters", "strict"}}``
* OpenAI Responses (flat): ``{"type": "function", "name", "description", "parameters",
  "strict"}``
* Anthropic Messages: ``{"name", "description", "input_schema"}`` (``"type": "custom"``
  allowed)
* MCP ``tools/list``: ``{"name", "title", "description", "inputSchema", "outputSchema",
  "annotations"}``

Any of them may also carry example requests, rampart's extension for the relevance
gate (docs/tool-gate.md): ``"examples": ["stage src/parser.py", ...]`` (what a user
would ask for when this tool is the one to call) and Anthropic-style
``"input_examples": [{"path": "src/parser.py"}, ...]`` (example arguments). They are
kept with the schema (so in a tool block's metadata) and never sent to an API.

and a collection of them as a list, an MCP ``tools/list`` result ``{"tools": [...]}``,
a JSON-RPC response whose ``result`` is one, a single definition, or a path to a JSON
file holding any of these. Each becomes a :class:`ToolSchema`; :func:`render_tool`
turns it into the natural-language text that the prompt and the relevance gate see,
and ``to_openai`` / ``to_anthropic`` / ``to_mcp`` give it back in the shape an API's
``tools`` parameter wants.

Fields no other format has are dropped on conversion, because the APIs reject unknown
keys: OpenAI and Anthropic have no ``title``, ``annotations`` or ``outputSchema``;
MCP has no ``strict``. The Responses API requires ``strict`` on every function tool
(the SDK's ``FunctionToolParam``), so ``to_openai_responses`` sends ``false`` when the
source did not say. Keys outside the fields above (``cache_control``, vendor
extensions) are not kept.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from rampart._files import FileProblem, json_object, read_regular_file
from rampart.errors import InvalidArgumentError, UnsupportedFormatError
from rampart.providers import gemini

__all__ = [
    "FORMATS",
    "METADATA_KEY",
    "ToolSchema",
    "ToolsInput",
    "block_metadata_json",
    "example_texts",
    "load_examples",
    "parse_tools",
    "render_tool",
    "schema_from_metadata",
    "tool_gate_text",
    "with_examples",
]

#: Output formats of :meth:`ToolSchema.to_format` and ``CompileResult.tools``.
FORMATS = ("openai", "openai-responses", "anthropic", "mcp", "gemini")

#: The block-metadata key under which a tool block keeps its schema.
METADATA_KEY = "tool_schema"

# OpenAI and Anthropic both require ^[a-zA-Z0-9_-]{1,64}$. MCP allows more (dots, up
# to 128 characters), but a tool that an API would refuse is useless in a compiled
# context, so the intersection is the rule: better refused at load than at call time.
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

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


# Resource limits on untrusted tool definitions (docs/limits.md).
MAX_TOOLS_FILE_BYTES = 16 << 20
"""Largest tools JSON file read, in bytes."""
MAX_SCHEMA_DEPTH = 64
"""Deepest nesting of objects and arrays in a tool's schemas (real tools: under 20)."""
MAX_RENDERED_CHARS = 256 << 10
"""Longest text :func:`render_tool` produces for one tool."""
MAX_RENDER_STEPS = 100_000
"""Most schema nodes :func:`render_tool` visits for one tool (``$ref`` fan-out)."""
MAX_EXAMPLES = 64
"""Most example requests (and, separately, input examples) one tool keeps."""
MAX_EXAMPLE_CHARS = 1000
"""Longest example request kept, in characters (one request, not a document)."""


class _Invalid(Exception):
    """A problem with one value; the caller adds where it was found."""


def _check_depth(value: Any, what: str) -> None:
    """Refuse nesting deeper than MAX_SCHEMA_DEPTH, iteratively: json and the
    renderer recurse, and a RecursionError is no answer to a bad schema."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, Mapping):
            kids: Any = v.values()
        elif isinstance(v, (list, tuple)):
            kids = v
        else:
            continue
        if depth >= MAX_SCHEMA_DEPTH:
            raise _Invalid(f"{what} nests deeper than {MAX_SCHEMA_DEPTH} levels")
        stack.extend((k, depth + 1) for k in kids)


def _json_copy(value: Any, what: str) -> Any:
    """A private, plain-JSON copy (tuples become lists); refuses what JSON cannot hold."""
    _check_depth(value, what)
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")  # a lone surrogate is not text the core can hold
        return json.loads(text)
    except (TypeError, ValueError, RecursionError) as exc:
        raise _Invalid(f"{what} is not plain JSON ({exc})") from None


def _check_object_schema(schema: Any, what: str) -> None:
    if not isinstance(schema, Mapping):
        raise _Invalid(f"{what} must be a JSON Schema object, got {type(schema).__name__}")
    if schema.get("type") != "object":
        raise _Invalid(
            f'{what} must have "type": "object" (tool arguments are a JSON object), '
            f"got type {schema.get('type')!r}"
        )
    props = schema.get("properties")
    if props is not None and not (
        isinstance(props, Mapping) and all(isinstance(v, (Mapping, bool)) for v in props.values())
    ):
        raise _Invalid(f"{what}.properties must map names to schemas")
    required = schema.get("required")
    if required is not None and not (
        isinstance(required, list) and all(isinstance(r, str) for r in required)
    ):
        raise _Invalid(f"{what}.required must be a list of strings")


def _check_examples(examples: Any, input_examples: Any) -> None:
    if not isinstance(examples, tuple):
        raise _Invalid(f"examples must be a list of strings, got {type(examples).__name__}")
    if len(examples) > MAX_EXAMPLES:
        raise _Invalid(f"has {len(examples)} examples; at most {MAX_EXAMPLES} are kept")
    for i, ex in enumerate(examples):
        if not isinstance(ex, str) or not ex.strip():
            raise _Invalid(f"examples[{i}] must be a non-empty string, got {ex!r:.60}")
        if len(ex) > MAX_EXAMPLE_CHARS:
            raise _Invalid(f"examples[{i}] is longer than {MAX_EXAMPLE_CHARS} characters")
        try:
            ex.encode("utf-8")
        except UnicodeEncodeError:
            raise _Invalid(f"examples[{i}] holds a lone surrogate, which is not text") from None
    if input_examples is None:
        return
    if not isinstance(input_examples, list) or not all(
        isinstance(x, Mapping) for x in input_examples
    ):
        raise _Invalid("input_examples must be a list of argument objects")
    if len(input_examples) > MAX_EXAMPLES:
        raise _Invalid(f"has {len(input_examples)} input_examples; at most {MAX_EXAMPLES}")


def _example_tuple(value: Any) -> tuple[Any, ...]:
    """``examples`` as given in JSON (a list) or Python (any sequence but a string)."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise _Invalid(f"examples must be a list of strings, got {_json_kind(value)}")
    return tuple(value)


def _optional(value: Any, kind: type, what: str) -> Any:
    if value is not None and not isinstance(value, kind):
        raise _Invalid(f"{what} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def _validated(
    name: Any,
    description: Any,
    input_schema: Any,
    title: Any,
    annotations: Any,
    output_schema: Any,
    strict: Any,
    source_format: Any,
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]:
    """Check every field; return private JSON copies of the three dicts."""
    if not isinstance(name, str):
        raise _Invalid(f"name must be a string, got {type(name).__name__}")
    if not _NAME.fullmatch(name):
        raise _Invalid(
            f"name {name!r} is not a valid tool name: 1-64 characters from A-Z a-z 0-9 _ - "
            "(the rule OpenAI and Anthropic enforce)"
        )
    if not isinstance(description, str):
        raise _Invalid(f"description must be a string, got {type(description).__name__}")
    for text, what in ((description, "description"), (title, "title")):
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise _Invalid(f"{what} holds a lone surrogate, which is not text") from None
    _check_object_schema(input_schema, "input schema")
    _optional(title, str, "title")
    _optional(annotations, Mapping, "annotations")
    if output_schema is not None:
        _check_object_schema(output_schema, "output schema")
    _optional(strict, bool, "strict")
    if source_format is not None and source_format not in FORMATS:
        raise _Invalid(f"source_format must be one of {FORMATS} or None, got {source_format!r}")
    return (
        _json_copy(input_schema, "input schema"),
        None if annotations is None else _json_copy(annotations, "annotations"),
        None if output_schema is None else _json_copy(output_schema, "output schema"),
    )


@dataclass(frozen=True)
class ToolSchema:
    """One tool definition, independent of the format it came in.

    ``input_schema`` is the JSON Schema of the arguments (``"type": "object"``).
    ``title``, ``annotations`` and ``output_schema`` come from MCP, ``strict`` from
    OpenAI, ``input_examples`` from Anthropic; ``examples`` are example requests
    (rampart's extension, for the relevance gate); ``source_format`` records the
    shape it was parsed from (``None`` when built directly) and takes no part in
    equality. The dicts are private copies made
    at construction, and every ``to_*`` method returns fresh dicts, so changing a
    result never changes the schema.
    """

    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}, hash=False
    )
    title: str | None = None
    annotations: dict[str, Any] | None = field(default=None, hash=False)
    output_schema: dict[str, Any] | None = field(default=None, hash=False)
    strict: bool | None = None
    source_format: str | None = field(default=None, compare=False)
    #: Example requests this tool serves (author-written; rampart's extension).
    examples: tuple[str, ...] = ()
    #: Anthropic-style example argument objects.
    input_examples: list[dict[str, Any]] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        try:
            examples = _example_tuple(self.examples)
            _check_examples(examples, self.input_examples)
            object.__setattr__(self, "examples", examples)
            if self.input_examples is not None:
                object.__setattr__(
                    self, "input_examples", _json_copy(self.input_examples, "input_examples")
                )
            copies = _validated(
                self.name,
                self.description,
                self.input_schema,
                self.title,
                self.annotations,
                self.output_schema,
                self.strict,
                self.source_format,
            )
        except _Invalid as exc:
            raise InvalidArgumentError(f"tool {self.name!r}: {exc}") from None
        for attr, value in zip(("input_schema", "annotations", "output_schema"), copies):
            object.__setattr__(self, attr, value)

    # ---- conversions -------------------------------------------------------------

    def _params(self) -> dict[str, Any]:
        return _json_copy(self.input_schema, "input schema")  # type: ignore[no-any-return]

    def to_openai(self) -> dict[str, Any]:
        """Chat Completions shape: ``{"type": "function", "function": {...}}``."""
        fn: dict[str, Any] = {"name": self.name}
        if self.description:
            fn["description"] = self.description
        fn["parameters"] = self._params()
        if self.strict is not None:
            fn["strict"] = self.strict
        return {"type": "function", "function": fn}

    def to_openai_responses(self) -> dict[str, Any]:
        """Responses API shape: ``{"type": "function", "name", ..., "parameters",
        "strict"}``; ``strict`` is always present (the API requires it), ``False``
        unless the source set it."""
        out = {"type": "function", **self.to_openai()["function"]}
        out["strict"] = bool(self.strict)
        return out

    def to_anthropic(self) -> dict[str, Any]:
        """Anthropic Messages shape: ``{"name", "description", "input_schema"}``, plus
        ``strict`` when the source set it (Anthropic's ``ToolParam`` has it too)."""
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out["input_schema"] = self._params()
        if self.strict is not None:
            out["strict"] = self.strict
        return out

    def to_gemini(self) -> dict[str, Any]:
        """A Gemini ``FunctionDeclaration``: ``{"name", "description",
        "parameters_json_schema"}`` (see :mod:`rampart.providers.gemini`)."""
        return gemini.declaration(self.name, self.description, self._params())

    def to_mcp(self) -> dict[str, Any]:
        """An MCP ``Tool`` object, as in a ``tools/list`` result."""
        out: dict[str, Any] = {"name": self.name}
        if self.title is not None:
            out["title"] = self.title
        if self.description:
            out["description"] = self.description
        out["inputSchema"] = self._params()
        if self.output_schema is not None:
            out["outputSchema"] = _json_copy(self.output_schema, "output schema")
        if self.annotations is not None:
            out["annotations"] = _json_copy(self.annotations, "annotations")
        return out

    def to_format(self, fmt: str) -> dict[str, Any]:
        """The definition in ``fmt``: one of :data:`FORMATS`."""
        return _CONVERTERS[check_format(fmt)](self)

    # ---- storage -----------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """rampart's lossless form: every field, ``None`` ones left out."""
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "input_schema": self._params(),
        }
        for key in ("title", "annotations", "output_schema", "strict", "source_format"):
            value = getattr(self, key)
            if value is not None:
                out[key] = _json_copy(value, key)
        if self.examples:
            out["examples"] = list(self.examples)
        if self.input_examples is not None:
            out["input_examples"] = _json_copy(self.input_examples, "input_examples")
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolSchema:
        """Inverse of :meth:`to_dict` (unknown keys are ignored, for forward compatibility)."""
        if not isinstance(data, Mapping):
            raise InvalidArgumentError(f"a stored tool schema must be a dict, got {data!r}")
        if "name" not in data or "input_schema" not in data:
            raise InvalidArgumentError(
                f"a stored tool schema needs 'name' and 'input_schema', got keys {sorted(data)}"
            )
        return cls(
            name=data["name"],
            description=data.get("description") or "",
            input_schema=data["input_schema"],
            title=data.get("title"),
            annotations=data.get("annotations"),
            output_schema=data.get("output_schema"),
            strict=data.get("strict"),
            source_format=data.get("source_format"),
            examples=data.get("examples") or (),
            input_examples=data.get("input_examples"),
        )

    def to_json(self) -> str:
        """:meth:`to_dict` as compact JSON (what a tool block keeps in its metadata)."""
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ToolSchema:
        """The schema :meth:`to_json` wrote; :class:`UnsupportedFormatError` if ``text``
        is not one."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidArgumentError(f"not a stored tool schema: {exc}") from None
        return cls.from_dict(data)


_CONVERTERS = {
    "openai": ToolSchema.to_openai,
    "openai-responses": ToolSchema.to_openai_responses,
    "anthropic": ToolSchema.to_anthropic,
    "mcp": ToolSchema.to_mcp,
    "gemini": ToolSchema.to_gemini,
}


def check_format(fmt: Any) -> str:
    """``fmt`` if it names an output format, else InvalidArgumentError listing them."""
    if not isinstance(fmt, str) or fmt not in _CONVERTERS:
        raise InvalidArgumentError(f"tool format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    return fmt


# ---- parsing ---------------------------------------------------------------------------


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
    if kind == "function":
        fn = entry.get("function")
        if fn is not None:
            if not isinstance(fn, Mapping):
                raise _Invalid(f'"function" must be an object, got {_json_kind(fn)}')
            fmt = "openai"
        else:
            fn, fmt = entry, "openai-responses"
        if "name" not in fn:
            raise _Invalid("OpenAI function definition without a name")
        # "parameters" may be omitted for a function without arguments (OpenAI documents it).
        params = fn.get("parameters", {"type": "object", "properties": {}})
        fields: tuple[Any, ...] = (fn["name"], fn.get("description"), params, None, None, None)
        strict = fn.get("strict")
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
    elif "input_schema" in entry and kind in (None, "custom"):
        fmt, strict = "anthropic", entry.get("strict")  # Anthropic's ToolParam has strict
        fields = (entry.get("name"), entry.get("description"), entry["input_schema"])
        fields += (None, None, None)
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


def _json_kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return type(value).__name__


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
        raw = read_regular_file(p, MAX_TOOLS_FILE_BYTES)
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
            f"{p}: not usable JSON: nested too deeply (at most {MAX_SCHEMA_DEPTH} levels "
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


# ---- blocks ----------------------------------------------------------------------------


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


# ---- rendering -------------------------------------------------------------------------

# Nesting shown in the rendered text; deeper objects are named by type only. Four
# levels cover real tools (edit lists, option objects) and keep a pathological
# schema from costing a page of prompt.
_MAX_DEPTH = 4


def _one_line(text: Any) -> str:
    return " ".join(text.split()) if isinstance(text, str) else ""


def _literal(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


class _TooLarge(Exception):
    """The rendered text would pass MAX_RENDERED_CHARS or MAX_RENDER_STEPS."""


class _Renderer:
    """Walks a JSON Schema into bullet lines. Local ``$ref``s (``#/$defs/X``,
    ``#/definitions/X``) are followed once per path, so recursive models terminate,
    and a definition's fields are listed once per tool: a later reference says
    where they are instead of repeating them (many properties sharing one
    definition would otherwise multiply the text at every level)."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.listed: set[str] = set()  # definitions whose fields are already shown
        self.steps = 0
        self.chars = 0

    def step(self) -> None:
        self.steps += 1
        if self.steps > MAX_RENDER_STEPS:
            raise _TooLarge(f"its schema takes more than {MAX_RENDER_STEPS} steps to describe")

    def emit(self, lines: list[str], line: str) -> None:
        self.chars += len(line) + 1
        if self.chars > MAX_RENDERED_CHARS:
            raise _TooLarge(f"its description would be longer than {MAX_RENDERED_CHARS} characters")
        lines.append(line)

    def resolve(self, schema: Any, seen: frozenset[str]) -> tuple[Any, frozenset[str]]:
        self.step()
        while isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str):
            ref = schema["$ref"]
            target: Any = self.root if ref.startswith("#/") else None
            for part in ref[2:].split("/"):
                part = part.replace("~1", "/").replace("~0", "~")
                target = target.get(part) if isinstance(target, Mapping) else None
            if target is None:  # remote or dangling: nothing to say about it
                return {}, seen
            if ref in seen:  # a cycle: name the type, list nothing below it
                kind = target.get("type") if isinstance(target, Mapping) else None
                return ({"type": kind} if isinstance(kind, str) else {}), seen
            seen = seen | {ref}
            # Keywords beside the $ref (a description, a default) win over the target's.
            extra = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**target, **extra} if isinstance(target, Mapping) else target
        return schema, seen

    def options(self, schema: Mapping[str, Any]) -> list[Any] | None:
        for key in ("anyOf", "oneOf"):
            opts = schema.get(key)
            if isinstance(opts, list) and opts:
                return opts
        return None

    def type_of(self, schema: Any, seen: frozenset[str], depth: int = 0) -> str:
        self.step()
        schema, seen = self.resolve(schema, seen)
        if schema is True or schema == {}:
            return "any"
        if schema is False:
            return "nothing"
        if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
            return "any"
        kind = schema.get("type")
        if isinstance(kind, list):
            names = [self.type_of({**schema, "type": k}, seen, depth + 1) for k in kind]
            return " or ".join(dict.fromkeys(names))
        if kind == "array":
            items = schema.get("items")
            if isinstance(items, (Mapping, bool)):
                return f"array of {self.type_of(items, seen, depth + 1)}"
            return "array"
        if kind == "object":
            props = schema.get("properties")
            extra = schema.get("additionalProperties")
            if not props and isinstance(extra, Mapping):
                return f"object of {self.type_of(extra, seen, depth + 1)}"
            return "object"
        if isinstance(kind, str):
            fmt = schema.get("format")
            return f"{fmt} {kind}" if isinstance(fmt, str) else kind  # "date-time string"
        opts = self.options(schema)
        if opts is not None:
            return " or ".join(dict.fromkeys(self.type_of(o, seen, depth + 1) for o in opts))
        if "const" in schema:
            return _value_type(schema["const"])
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return " or ".join(dict.fromkeys(_value_type(v) for v in enum))
        if "properties" in schema:
            return "object"
        return "any"

    def notes(self, schema: Any) -> list[str]:
        if not isinstance(schema, Mapping):
            return []
        out = []
        if "const" in schema:
            out.append(f"always {_literal(schema['const'])}")
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            out.append("one of " + ", ".join(_literal(v) for v in enum))
        for key, word in (
            ("minimum", "min"),
            ("maximum", "max"),
            ("exclusiveMinimum", "above"),
            ("exclusiveMaximum", "below"),
            ("minLength", "min length"),
            ("maxLength", "max length"),
            ("minItems", "min items"),
            ("maxItems", "max items"),
            ("pattern", "pattern"),
        ):
            value = schema.get(key)
            if value is not None and not isinstance(value, bool):
                out.append(f"{word} {_literal(value) if key == 'pattern' else value}")
        if "default" in schema:
            out.append(f"default {_literal(schema['default'])}")
        return out

    def children(self, schema: Any, seen: frozenset[str]) -> tuple[Any, frozenset[str]]:
        """The object whose properties are listed under a parameter: the parameter
        itself, its array items, or the one non-null option of an anyOf/oneOf."""
        for _ in range(4):
            schema, seen = self.resolve(schema, seen)
            if not isinstance(schema, Mapping):
                return None, seen
            if isinstance(schema.get("properties"), Mapping) and schema["properties"]:
                return schema, seen
            if schema.get("type") == "array" or "items" in schema:
                schema = schema.get("items")
                continue
            opts = self.options(schema)
            real = [
                o for o in opts or [] if not (isinstance(o, Mapping) and o.get("type") == "null")
            ]
            if len(real) != 1:
                return None, seen
            schema = real[0]
        return None, seen

    def params(self, schema: Any, seen: frozenset[str], depth: int) -> list[str]:
        obj, inner_seen = self.children(schema, seen)
        if obj is None or depth >= _MAX_DEPTH:
            return []
        indent = "  " * depth
        entered = sorted(inner_seen - seen)
        if entered and depth > 0:
            shown = [ref for ref in entered if ref in self.listed]
            if shown:
                name = shown[0].rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
                return [f"{indent}- (fields of {name} as listed above)"]
            self.listed.update(entered)
        seen = inner_seen
        required = obj.get("required") if isinstance(obj.get("required"), list) else []
        lines: list[str] = []
        for name, prop in obj["properties"].items():
            resolved, _ = self.resolve(prop, seen)
            parts = [self.type_of(prop, seen), "required" if name in required else "optional"]
            head = ", ".join(parts)
            notes = self.notes(resolved)
            if notes:
                head += "; " + "; ".join(notes)
            desc = _one_line(resolved.get("description")) if isinstance(resolved, Mapping) else ""
            self.emit(lines, f"{indent}- {name} ({head})" + (f": {desc}" if desc else ""))
            lines.extend(self.params(prop, seen, depth + 1))
        return lines


def _value_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "null"


_HINTS = (
    ("readOnlyHint", "read-only"),
    ("destructiveHint", "destructive"),
    ("idempotentHint", "idempotent"),
    ("openWorldHint", "open-world"),
)


def render_tool(schema: ToolSchema) -> str:
    """The tool in plain language, as the prompt and the relevance gate see it.

    One header line (name, MCP title, description), the MCP behaviour hints that are
    set to true, then one bullet per parameter with its type (array item types,
    ``or`` for unions), required/optional, enum values, bounds and default, and its
    description collapsed to one line; nested objects (also inside arrays and
    optional wrappers) are indented below their parameter, up to four levels.
    Parameters keep the schema's order. The same schema always gives the same text.
    The output schema is not rendered: it tells the client, not the model, what
    comes back.
    """
    if not isinstance(schema, ToolSchema):
        raise InvalidArgumentError(f"render_tool takes a ToolSchema, got {type(schema).__name__}")
    head = f"Tool `{schema.name}`"
    title = _one_line(schema.title)
    # An MCP title that only respells the name ("Read File" for read_file) costs
    # tokens and says nothing.
    if title and re.sub(r"[\s_-]+", "", title).lower() != re.sub(r"[_-]+", "", schema.name).lower():
        head += f" ({title})"
    description = schema.description.strip()
    lines = [f"{head}: {description}" if description else f"{head}."]
    notes = schema.annotations or {}
    hints = [word for key, word in _HINTS if notes.get(key) is True]
    if hints:
        lines.append("Hints: " + ", ".join(hints) + ".")
    try:
        params = _Renderer(schema.input_schema).params(schema.input_schema, frozenset(), 0)
    except _TooLarge as exc:
        raise UnsupportedFormatError(
            f"tool {schema.name!r} cannot be rendered: {exc} (see docs/limits.md)"
        ) from None
    lines.append("Parameters:" if params else "Parameters: none.")
    lines.extend(params)
    return "\n".join(lines)


# ---- gate text ----------------------------------------------------------------------

_WORD_SPLIT = re.compile(r"[_\-.\s]+|(?<=[a-z0-9])(?=[A-Z])")


def _name_words(name: str) -> str:
    """``read_text_file`` -> ``read text file``; ``entityType`` -> ``entity type``."""
    return " ".join(w.lower() for w in _WORD_SPLIT.split(name) if w)


def tool_gate_text(schema: ToolSchema) -> str:
    """What the relevance gate embeds for a tool block (its prompt text stays
    :func:`render_tool`'s).

    The tool's name as words (and its MCP title, or ``annotations.title``, when
    that says more than the name), its description, then one line per top-level
    parameter: its name as words and its description. Example requests are not part of it: the gate
    embeds each of them on its own (:func:`example_texts`, docs/tool-gate.md).
    Types, required flags, bounds and JSON punctuation are left out: they are the
    same few words in every tool, so they pull all tool vectors together and away
    from how people ask.
    Chosen on the tune half of tests/data/tool_gate_eval.json (docs/tool-gate.md):
    top-3 79 % vs 74 % for the rendered text, on the held-out half 78 % vs 73 %.
    """
    if not isinstance(schema, ToolSchema):
        raise InvalidArgumentError(
            f"tool_gate_text takes a ToolSchema, got {type(schema).__name__}"
        )
    description = _one_line(schema.description)
    head = _name_words(schema.name)
    title = _one_line(schema.title)
    if not title and isinstance(schema.annotations, Mapping):
        # MCP's older place for a display name (annotations.title), where a server
        # sets no top-level title.
        title = _one_line(schema.annotations.get("title"))
    if title and _name_words(title) != head:
        head += f" ({title})"
    lines = [f"{head}: {description}" if description else head]
    props = schema.input_schema.get("properties")
    for name, prop in props.items() if isinstance(props, Mapping) else ():
        desc = _one_line(prop.get("description")) if isinstance(prop, Mapping) else ""
        lines.append(f"- {_name_words(name)}: {desc}" if desc else f"- {_name_words(name)}")
    return "\n".join(lines)


# ---- examples --------------------------------------------------------------------------


def _argument_words(args: Mapping[str, Any]) -> str:
    """An input example as text: ``{"path": "a.py", "head": 5}`` -> ``path: a.py; head: 5``."""
    parts = []
    for key, value in args.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{_name_words(str(key))}: {_one_line(shown)}")
    return _clip("; ".join(parts), MAX_EXAMPLE_CHARS)


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
