"""Google Gemini (the ``google-genai`` SDK's ``generate_content``): wire form,
request body, explicit context cache, limits and prices.

A body is ``{"model", "contents", "config"}``, the keyword arguments of
``client.models.generate_content(**body)``; ``config`` follows the SDK's
``GenerateContentConfig`` field names (snake_case, which the SDK accepts and
converts). The compiled prompt is ``config.system_instruction``; tools are one
``Tool`` of ``function_declarations``.

Tools are declared with ``parameters_json_schema`` (full JSON Schema), not
``parameters``: the latter is Gemini's OpenAPI subset, which refuses keywords MCP
servers use (``additionalProperties``, ``$schema``, ``const``), so a stranger's
schema would make the request fail. A declaration read back (``load_tools``) may
use either; ``parameters``' upper-case OpenAPI type names become JSON Schema's.

Caching: Gemini caches every request's prefix implicitly (2.5 models and later:
hits billed at 10 % of the input price, no write premium, no storage), and offers
an explicit cache (``client.caches.create``) that holds the system instruction
and tools for a TTL, billed per token-hour of storage. The explicit cache pays
only when its storage over the TTL costs less than what it saves over the
implicit cache's misses, so :func:`explicit_cache_pays` decides from the price
table; a body that uses a cache (``cached_content``) must not repeat what the
cache holds (the API refuses ``system_instruction``, ``tools`` and
``tool_config`` beside it).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from rampart.errors import InvalidArgumentError

__all__ = [
    "MIN_CACHE_TOKENS",
    "PRICES",
    "cache_payload",
    "declaration",
    "explicit_cache_pays",
    "generate_content",
    "is_declaration",
    "read_declaration",
]

SOURCE = (
    "https://ai.google.dev/gemini-api/docs/caching and https://ai.google.dev/gemini-api/docs/"
    "pricing (checked 2026-12): implicit caching on by default for Gemini 2.5 and later, "
    "cache hits at 10 % of the input price, no write premium; explicit caches default to a "
    "1 h TTL and bill storage per token-hour ($1.00 per 1M tokens-hour for 2.5 Flash, $4.50 "
    "for 2.5 Pro, against $0.30 and $1.25 per 1M input tokens); minimum cacheable prompt "
    "1024 tokens (Flash models), 4096 (Pro models)"
)

#: Smallest prefix either cache holds, by model family (the docs' table).
MIN_CACHE_TOKENS = {"flash": 1024, "pro": 4096}

#: Price rows for :mod:`rampart.caching` (``PriceTable`` fields): cached read per
#: uncached input token, write premium, entry lifetime, minimum size, and the
#: explicit cache's storage per token-hour in units of the input price.
PRICES: dict[str, dict[str, Any]] = {
    "gemini": {  # 2.5 Flash: the default
        "read": 0.1,
        "write": 1.0,
        "ttl_s": 3600.0,
        "min_tokens": MIN_CACHE_TOKENS["flash"],
        "storage_per_hour": 1.00 / 0.30,
        "source": SOURCE,
    },
    "gemini-pro": {
        "read": 0.1,
        "write": 1.0,
        "ttl_s": 3600.0,
        "min_tokens": MIN_CACHE_TOKENS["pro"],
        "storage_per_hour": 4.50 / 1.25,
        "source": SOURCE,
    },
}

_TOOL_CHOICES = ("gated", "all", "allowed")

# Gemini's OpenAPI type names, as JSON Schema spells them.
_TYPES = {
    "STRING": "string",
    "NUMBER": "number",
    "INTEGER": "integer",
    "BOOLEAN": "boolean",
    "ARRAY": "array",
    "OBJECT": "object",
    "NULL": "null",
}
_MAX_DEPTH = 64


# ---- tool declarations ------------------------------------------------------------------


def declaration(name: str, description: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """One ``FunctionDeclaration``: ``{"name", "description", "parameters_json_schema"}``
    (a fresh copy of ``schema``; ``description`` left out when empty)."""
    out: dict[str, Any] = {"name": name}
    if description:
        out["description"] = description
    out["parameters_json_schema"] = copy.deepcopy(dict(schema))
    return out


def is_declaration(entry: Mapping[str, Any]) -> bool:
    """Whether ``entry`` has the shape of a Gemini function declaration: a name and
    ``parameters`` or ``parameters_json_schema`` (either spelling), no ``type``."""
    if "type" in entry or not isinstance(entry.get("name"), str):
        return False
    return any(k in entry for k in ("parameters", "parameters_json_schema", "parametersJsonSchema"))


def read_declaration(entry: Mapping[str, Any]) -> tuple[str, str | None, Any]:
    """(name, description, JSON Schema of the arguments) of a declaration; a
    ``parameters`` schema in Gemini's OpenAPI subset is turned into JSON Schema
    (lower-case type names). InvalidArgumentError names what is wrong."""
    given = [
        k for k in ("parameters", "parameters_json_schema", "parametersJsonSchema") if k in entry
    ]
    if len(given) > 1:
        raise InvalidArgumentError(
            f"a Gemini function declaration has one of {' / '.join(given)}, not both"
        )
    key = given[0]
    schema = entry[key]
    if key == "parameters":
        schema = _json_schema(schema, 0)
    return entry["name"], entry.get("description"), schema


def _json_schema(value: Any, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise InvalidArgumentError(f"the declaration's parameters nest deeper than {_MAX_DEPTH}")
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if k == "type" and isinstance(v, str):
                out[k] = _TYPES.get(v, v)
            elif k == "nullable" and v is True and isinstance(value.get("type"), str):
                continue  # folded into the type list below
            else:
                out[k] = _json_schema(v, depth + 1)
        if value.get("nullable") is True and isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        return out
    if isinstance(value, list):
        return [_json_schema(v, depth + 1) for v in value]
    return value


def tool_names(declarations: Sequence[Mapping[str, Any]]) -> list[str]:
    """The names of function declarations, in order."""
    return [str(d["name"]) for d in declarations]


# ---- request bodies ---------------------------------------------------------------------


def _choice(tools: Any) -> str:
    if not isinstance(tools, str) or tools not in _TOOL_CHOICES:
        raise InvalidArgumentError(f"tools must be one of {_TOOL_CHOICES}, got {tools!r}")
    return tools


def _contents(contents: Any) -> list[Any]:
    if contents is None:
        return []
    if isinstance(contents, (str, bytes, Mapping)) or not isinstance(contents, Sequence):
        raise InvalidArgumentError(
            "contents must be a list of Gemini Content dicts "
            '({"role": "user"|"model", "parts": [...]}), got '
            f"{type(contents).__name__}"
        )
    out = []
    for i, c in enumerate(contents):
        dump = getattr(c, "model_dump", None)
        if dump is not None:  # a google.genai.types.Content from a response
            c = dump(exclude_none=True)
        if not isinstance(c, Mapping) or not isinstance(c.get("parts"), list):
            raise InvalidArgumentError(
                f"contents[{i}] is not a Gemini Content (a dict with a 'parts' list): {c!r:.80}"
            )
        if c.get("role") not in (None, "user", "model"):
            raise InvalidArgumentError(
                f"contents[{i}] has role {c.get('role')!r}; Gemini takes 'user' or 'model' "
                "(the compiled prompt goes to config.system_instruction)"
            )
        out.append(c)
    return out


def _tool_parts(
    gated: list[dict[str, Any]], every: list[dict[str, Any]], choice: str
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(``config.tools``, ``config.tool_config`` or None)."""
    sent = gated if choice == "gated" else every
    if not sent:
        return [], None
    tools = [{"function_declarations": sent}]
    if choice != "allowed" or len(gated) == len(sent):
        return tools, None  # restricting to every tool restricts nothing
    if not gated:
        return tools, {"function_calling_config": {"mode": "NONE"}}
    # VALIDATED: the model may answer in text or call a function, and a call is
    # constrained to the allowed names (ANY would force a call every turn).
    return tools, {
        "function_calling_config": {
            "mode": "VALIDATED",
            "allowed_function_names": tool_names(gated),
        }
    }


def generate_content(
    prompt: str,
    gated: list[dict[str, Any]],
    every: list[dict[str, Any]],
    contents: Any,
    *,
    model: str,
    tools: str = "gated",
    cached_content: str | None = None,
    opening: Sequence[Mapping[str, Any]] = (),
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The body from a compile's parts: ``prompt`` (the system instruction), the
    gated and every tool declaration (registry order), the conversation
    ``contents``. With ``cached_content`` (a cache made from
    :func:`cache_payload`'s payload) the system instruction and tools are the
    cache's and are left out of the body; ``opening`` contents go first."""
    if not isinstance(model, str) or not model:
        raise InvalidArgumentError(f"model must be a non-empty string, got {model!r}")
    choice = _choice(tools)
    config: dict[str, Any] = {}
    if cached_content is not None:
        if not isinstance(cached_content, str) or not cached_content.startswith("cachedContents/"):
            raise InvalidArgumentError(
                "cached_content must be a cache name ('cachedContents/...', what "
                f"client.caches.create returned), got {cached_content!r}"
            )
        if choice == "gated":
            raise InvalidArgumentError(
                "a cached body holds the tools of its cache, which must not depend on the "
                "task: use tools='all' or 'allowed' with cached_content"
            )
        config["cached_content"] = cached_content
        _, tool_config = _tool_parts(gated, every, choice)
        if tool_config is not None:
            raise InvalidArgumentError(
                "tools='allowed' restricts the call with tool_config, which a cached body "
                "cannot carry (the API refuses it beside cached_content): use tools='all'"
            )
    else:
        if prompt:
            config["system_instruction"] = prompt
        sent, tool_config = _tool_parts(gated, every, choice)
        if sent:
            config["tools"] = sent
        if tool_config is not None:
            config["tool_config"] = tool_config
    for k, v in (extra or {}).items():
        if k in config or k in ("system_instruction", "tools", "tool_config", "cached_content"):
            raise InvalidArgumentError(
                f"{k} cannot be passed as an extra config key: the adapter builds it from the "
                "compile result"
            )
        config[k] = v
    return {"model": model, "contents": [*opening, *_contents(contents)], "config": config}


def cache_payload(
    prompt: str,
    every: list[dict[str, Any]],
    *,
    model: str,
    ttl_s: int = 3600,
    display_name: str | None = None,
) -> dict[str, Any]:
    """``client.caches.create(**payload)``'s arguments for an explicit cache of the
    task-independent head: the system instruction (pass the stable part) and
    every tool, in registry order."""
    if not isinstance(model, str) or not model:
        raise InvalidArgumentError(f"model must be a non-empty string, got {model!r}")
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s <= 0:
        raise InvalidArgumentError(f"ttl_s must be a positive number of seconds, got {ttl_s!r}")
    config: dict[str, Any] = {"ttl": f"{ttl_s}s"}
    if display_name is not None:
        config["display_name"] = display_name
    if prompt:
        config["system_instruction"] = prompt
    if every:
        config["tools"] = [{"function_declarations": every}]
    return {"model": model, "config": config}


def explicit_cache_pays(
    prefix_tokens: int,
    calls_per_hour: float,
    *,
    prices: str = "gemini",
    implicit_hit_rate: float = 0.0,
) -> bool:
    """Whether an explicit cache of ``prefix_tokens`` beats the implicit cache for
    ``calls_per_hour`` calls that reuse it: each call saves ``(1 - read)`` of the
    prefix on the calls the implicit cache misses, storage costs
    ``storage_per_hour`` per token; below the minimum size nothing is cached."""
    row = PRICES[prices]
    if prefix_tokens < row["min_tokens"] or calls_per_hour <= 0:
        return False
    miss = 1.0 - min(max(implicit_hit_rate, 0.0), 1.0)
    saved = calls_per_hour * miss * (1.0 - row["read"]) * prefix_tokens
    stored = row["storage_per_hour"] * prefix_tokens
    return bool(saved > stored)
