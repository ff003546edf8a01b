"""OpenAI (Chat Completions and Responses): the limits, message keys and
prompt-cache prices of its wire, with their sources. The request bodies are
built by :func:`rampart.adapters.openai_chat` and
:func:`rampart.adapters.openai_responses` from a compile result; the tool wire
forms are :meth:`rampart.tools.ToolSchema.to_openai` / ``to_openai_responses``."""

from __future__ import annotations

from typing import Any

__all__ = [
    "GOLDEN_BODY",
    "MESSAGE_KEYS",
    "MIN_CACHE_TOKENS",
    "PRICES",
    "SOURCE",
    "SYSTEM_ROLES",
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
