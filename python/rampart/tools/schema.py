"""One tool definition, independent of the format it came in (:class:`ToolSchema`),
its checks, and the output formats it converts to."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rampart.errors import InvalidArgumentError
from rampart.providers import anthropic, gemini, openai
from rampart.tools import limits

#: Output formats of :meth:`ToolSchema.to_format` and ``CompileResult.tools``.
FORMATS = ("openai", "openai-responses", "anthropic", "mcp", "gemini")

#: The block-metadata key under which a tool block keeps its schema.
METADATA_KEY = "tool_schema"

# OpenAI and Anthropic both require ^[a-zA-Z0-9_-]{1,64}$. MCP allows more (dots, up
# to 128 characters), but a tool that an API would refuse is useless in a compiled
# context, so the intersection is the rule: better refused at load than at call time.
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class _Invalid(Exception):
    """A problem with one value; the caller adds where it was found."""


def _check_depth(value: Any, what: str) -> None:
    """Refuse nesting deeper than MAX_SCHEMA_DEPTH, iteratively: json and the
    renderer recurse, and a RecursionError is no answer to a bad schema."""
    cap = limits.MAX_SCHEMA_DEPTH
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, Mapping):
            kids: Any = v.values()
        elif isinstance(v, (list, tuple)):
            kids = v
        else:
            continue
        if depth >= cap:
            raise _Invalid(f"{what} nests deeper than {cap} levels")
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
    if len(examples) > limits.MAX_EXAMPLES:
        raise _Invalid(f"has {len(examples)} examples; at most {limits.MAX_EXAMPLES} are kept")
    for i, ex in enumerate(examples):
        if not isinstance(ex, str) or not ex.strip():
            raise _Invalid(f"examples[{i}] must be a non-empty string, got {ex!r:.60}")
        if len(ex) > limits.MAX_EXAMPLE_CHARS:
            raise _Invalid(f"examples[{i}] is longer than {limits.MAX_EXAMPLE_CHARS} characters")
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
    if len(input_examples) > limits.MAX_EXAMPLES:
        raise _Invalid(f"has {len(input_examples)} input_examples; at most {limits.MAX_EXAMPLES}")


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
    if not TOOL_NAME.fullmatch(name):
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
        """Chat Completions shape: ``{"type": "function", "function": {...}}``
        (:mod:`rampart.providers.openai`)."""
        return openai.chat_function(self.name, self.description, self._params(), self.strict)

    def to_openai_responses(self) -> dict[str, Any]:
        """Responses API shape: ``{"type": "function", "name", ..., "parameters",
        "strict"}``; ``strict`` is always present (the API requires it), ``False``
        unless the source set it."""
        return openai.responses_function(self.name, self.description, self._params(), self.strict)

    def to_anthropic(self) -> dict[str, Any]:
        """Anthropic Messages shape: ``{"name", "description", "input_schema"}``, plus
        ``strict`` when the source set it (:mod:`rampart.providers.anthropic`)."""
        return anthropic.tool(self.name, self.description, self._params(), self.strict)

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
