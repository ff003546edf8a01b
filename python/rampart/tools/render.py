"""A tool in plain language: the prompt's text (:func:`render_tool`) and what the
relevance gate embeds for it (:func:`tool_gate_text`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from rampart.errors import InvalidArgumentError, UnsupportedFormatError
from rampart.tools import limits
from rampart.tools.schema import ToolSchema

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
        # The limits as they are now (read once per tool, not once per node).
        self.max_steps = limits.MAX_RENDER_STEPS
        self.max_chars = limits.MAX_RENDERED_CHARS

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.max_steps:
            raise _TooLarge(f"its schema takes more than {self.max_steps} steps to describe")

    def emit(self, lines: list[str], line: str) -> None:
        self.chars += len(line) + 1
        if self.chars > self.max_chars:
            raise _TooLarge(f"its description would be longer than {self.max_chars} characters")
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
