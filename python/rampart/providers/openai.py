"""OpenAI (Chat Completions and Responses): the limits, message keys and
prompt-cache prices of its wire, with their sources. The request bodies are
built by :func:`rampart.adapters.openai_chat` and
:func:`rampart.adapters.openai_responses` from a compile result; the tool wire
forms are :meth:`rampart.tools.ToolSchema.to_openai` / ``to_openai_responses``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rampart.errors import InvalidArgumentError

__all__ = [
    "GOLDEN_BODY",
    "MESSAGE_KEYS",
    "MIN_CACHE_TOKENS",
    "PRICES",
    "SOURCE",
    "SYSTEM_ROLES",
    "chat_function",
    "is_function",
    "read_function",
    "responses_function",
]

SOURCE = (
    "https://platform.openai.com/docs/guides/prompt-caching and https://openai.com/api/pricing "
    "(checked 2026-12): automatic for prompts of 1024 tokens or more, hits in 128-token "
    "increments, no write premium; cached input at {pct} of the input price for {models}; "
    "entries kept 5-10 minutes of inactivity (up to an hour; 24 h with "
    "prompt_cache_retention='24h')"
)

#: Automatic prompt caching starts at this many prompt tokens; hits come in steps of 128.
MIN_CACHE_TOKENS = 1024
_GRANULARITY = 128

#: Price rows for :mod:`rampart.caching` (``PriceTable`` fields; see gemini's).
PRICES: dict[str, dict[str, Any]] = {
    "openai": {
        "read": 0.1,
        "write": 1.0,
        "ttl_s": 300.0,
        "min_tokens": MIN_CACHE_TOKENS,
        "granularity": _GRANULARITY,
        "source": SOURCE.format(pct="10 %", models="the GPT-5 family"),
    },
    "openai-gpt-4.1": {
        "read": 0.25,
        "write": 1.0,
        "ttl_s": 300.0,
        "min_tokens": MIN_CACHE_TOKENS,
        "granularity": _GRANULARITY,
        "source": SOURCE.format(pct="25 %", models="GPT-4.1"),
    },
    "openai-gpt-4o": {
        "read": 0.5,
        "write": 1.0,
        "ttl_s": 300.0,
        "min_tokens": MIN_CACHE_TOKENS,
        "granularity": _GRANULARITY,
        "source": SOURCE.format(pct="50 %", models="GPT-4o"),
    },
}

#: Roles whose messages are system instructions (the compiled prompt joins them).
SYSTEM_ROLES = ("system", "developer")
#: What a request message may hold; a response object also has response-only
#: fields (annotations, …), left out when it goes back into ``messages``.
MESSAGE_KEYS = frozenset(
    {"role", "content", "name", "tool_calls", "tool_call_id", "refusal", "function_call", "audio"}
)
#: The adapter whose body the pytest plugin's golden files snapshot by default.
GOLDEN_BODY = "openai_chat"


# ---- the tool wire form -----------------------------------------------------------------


def chat_function(
    name: str, description: str, parameters: Any, strict: bool | None
) -> dict[str, Any]:
    """A Chat Completions tool: ``{"type": "function", "function": {...}}``."""
    fn: dict[str, Any] = {"name": name}
    if description:
        fn["description"] = description
    fn["parameters"] = parameters
    if strict is not None:
        fn["strict"] = strict
    return {"type": "function", "function": fn}


def responses_function(
    name: str, description: str, parameters: Any, strict: bool | None
) -> dict[str, Any]:
    """A Responses API tool: ``{"type": "function", "name", ..., "parameters",
    "strict"}``; ``strict`` is always present (the API requires it), ``False``
    unless the source set it."""
    out = {"type": "function", **chat_function(name, description, parameters, strict)["function"]}
    out["strict"] = bool(strict)
    return out


def is_function(entry: Mapping[str, Any]) -> bool:
    """Whether ``entry`` is an OpenAI function tool (either API's shape)."""
    return entry.get("type") == "function"


def read_function(entry: Mapping[str, Any]) -> tuple[str, Any, Any, Any, str]:
    """``(name, description, parameters, strict, format)`` of a function tool in
    either API's shape; InvalidArgumentError when it is malformed."""
    fn = entry.get("function")
    if fn is not None:
        if not isinstance(fn, Mapping):
            raise InvalidArgumentError(f'"function" must be an object, got {type(fn).__name__}')
        fmt = "openai"
    else:
        fn, fmt = entry, "openai-responses"
    if "name" not in fn:
        raise InvalidArgumentError("OpenAI function definition without a name")
    # "parameters" may be omitted for a function without arguments (OpenAI documents it).
    params = fn.get("parameters", {"type": "object", "properties": {}})
    return fn["name"], fn.get("description"), params, fn.get("strict"), fmt
