"""Anthropic (Messages): the limits, message keys, cache-control rules and
prompt-cache prices of its wire, with their sources. The request body is built
by :func:`rampart.adapters.anthropic_messages` from a compile result; the tool
wire form is :meth:`rampart.tools.ToolSchema.to_anthropic`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "CACHEABLE",
    "CACHE_TTLS",
    "CONTEXT_BETA",
    "GOLDEN_BODY",
    "MAX_BREAKPOINTS",
    "MESSAGE_KEYS",
    "MIN_CACHE_TOKENS",
    "PRICES",
    "SOURCE",
    "is_tool",
    "read_tool",
    "tool",
]

SOURCE = (
    "https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching (checked 2026-12): "
    "5-minute cache writes 1.25x base input, 1-hour writes 2x, cache hits 0.1x; the TTL is "
    "refreshed on each hit; at most 4 breakpoints, hits looked for up to ~20 content blocks "
    "before a breakpoint; minimum cacheable prompt 1024 tokens (Claude Sonnet 4.x, Opus 4.1 "
    "and earlier), 2048 (Haiku 3.x), 4096 (Opus 4.5+, Haiku 4.5)"
)

#: The shortest prefix Anthropic caches for most models (Claude Sonnet 4.x, Opus 4.1
#: and earlier); Claude Haiku 3.x needs 2048, Claude Opus 4.5+ and Haiku 4.5 4096.
#: A breakpoint before a shorter prefix caches nothing, so none is placed there.
MIN_CACHE_TOKENS = 1024
#: ``cache_control`` breakpoints one request may hold.
MAX_BREAKPOINTS = 4
#: The ``ttl`` values a breakpoint may ask for (None: the default, 5 minutes).
CACHE_TTLS = (None, "5m", "1h")
#: Content blocks that take ``cache_control`` (thinking blocks do not).
CACHEABLE = frozenset({"text", "image", "document", "tool_use", "tool_result", "search_result"})
#: What a request message may hold (a response also has id, model, usage, …).
MESSAGE_KEYS = frozenset({"role", "content"})
#: The beta that ``context_management`` edits need (the body carries it as
#: ``betas``: send it with ``client.beta.messages.create(**body)``).
CONTEXT_BETA = "context-management-2025-06-27"
#: The adapter whose body the pytest plugin's golden files snapshot by default.
GOLDEN_BODY = "anthropic_messages"

#: Price rows for :mod:`rampart.caching` (``PriceTable`` fields; see gemini's).
PRICES: dict[str, dict[str, Any]] = {
    "anthropic": {
        "read": 0.1,
        "write": 1.25,
        "ttl_s": 300.0,
        "min_tokens": MIN_CACHE_TOKENS,
        "explicit": True,
        "source": SOURCE,
    },
    "anthropic-1h": {
        "read": 0.1,
        "write": 2.0,
        "ttl_s": 3600.0,
        "min_tokens": MIN_CACHE_TOKENS,
        "explicit": True,
        "source": SOURCE,
    },
}


# ---- the tool wire form -----------------------------------------------------------------


def tool(name: str, description: str, input_schema: Any, strict: bool | None) -> dict[str, Any]:
    """A Messages API tool: ``{"name", "description", "input_schema"}``, plus
    ``strict`` when the source set it (``ToolParam`` has it too)."""
    out: dict[str, Any] = {"name": name}
    if description:
        out["description"] = description
    out["input_schema"] = input_schema
    if strict is not None:
        out["strict"] = strict
    return out


def is_tool(entry: Mapping[str, Any]) -> bool:
    """Whether ``entry`` is an Anthropic custom tool (``input_schema``, and a
    ``type`` absent or ``"custom"``)."""
    return "input_schema" in entry and entry.get("type") in (None, "custom")


def read_tool(entry: Mapping[str, Any]) -> tuple[Any, Any, Any, Any]:
    """``(name, description, input_schema, strict)`` of an Anthropic tool."""
    return entry.get("name"), entry.get("description"), entry["input_schema"], entry.get("strict")
