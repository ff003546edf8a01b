"""``ContextPolicy``: what a compile may do to a conversation that grows past its
window, and when (docs/specification.md §9; docs/conversation.md explains the defaults)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import rampart._args as _args
from rampart.errors import InvalidArgumentError

__all__ = ["PROVIDERS", "ContextPolicy"]

#: Providers a policy can target: the price table of §8 each is priced with, the
#: counter's default scale before any usage was observed, and whether it takes
#: native context edits (Anthropic ``context_management``; OpenAI compaction).
PROVIDERS: dict[str, tuple[str, float]] = {
    "openai": ("openai", 1.0),
    "anthropic": ("anthropic", 1.2),
    "gemini": ("gemini", 1.1),
    "local": ("local", 1.0),
}

_NATIVE = (False, "anthropic", "openai")


def _nonneg_int(v: Any, name: str) -> int:
    """An int >= 0: a Python int or what ``operator.index`` takes (numpy's
    integers); bool, float and the rest refused."""
    try:
        return _args.int_arg(v, name, minimum=0)
    except InvalidArgumentError:
        raise InvalidArgumentError(f"ContextPolicy.{name} must be an int >= 0, got {v!r}") from None


@dataclass(frozen=True)
class ContextPolicy:
    """How a compile keeps a conversation inside its window.

    Steps, in this order and oldest first, each only as far as needed (and never
    splitting a tool call from its result, never reordering):

    1. ``clear_tool_results`` (default True): replace old tool results by a stub
       naming the tool, the call id, the tokens removed and the ``recall`` tool;
       the last ``keep_tool_results`` (default 3) results, error results
       (``keep_errors``) and those of ``exclude_tools`` stay;
       ``clear_tool_inputs`` also stubs the call's arguments.
       ``relevance`` (default True): the least relevant results to the current
       step go first (the latest user message and the step's tool calls, or the
       compile's ``task_text``, scored against each result's passages: BM25, fused
       with the registry's embedder when it has one), and the ``keep_relevant``
       (default 2) most relevant stay while they pass the relevance floor; a
       relevant result longer than twice ``excerpt_tokens`` (default 600) that
       must go keeps its best passages as an excerpt (``excerpts``). False: by
       age alone, oldest first (the behaviour before relevance).
       ``recall`` (default True): a result the step needs that an earlier compile
       cleared is sent at the tail (before the latest user message, which the
       model reads last, after everything sent before it; everything
       recalled in one compile, headers included, at most ``recall_max_tokens``,
       default 2 000), not restored in place, so the cached prefix stays; it is
       kept while its question stands.
    2. ``compact`` (default None): a callable ``(items) -> str`` or a rampart LLM
       backend (``.chat``) that summarises the oldest span into one summary item
       (the last ``compact_keep_recent`` items, default 8, stay as they are).
    3. ``drop_oldest`` (default True): drop the oldest unpinned turns.

    A step rewrites the body from its first changed item on, which costs the
    provider's cache of everything after it, so it runs only when the window
    forces it, or when the price table of ``provider`` says the saving over the
    next ``horizon_calls`` calls (default 10) pays for the rewrite; and it removes
    at least ``clear_at_least`` tokens (default 2 048) or does not run (unless the
    window forces it). ``dry_run``: report what would be done, record nothing.
    ``native``: ``"anthropic"`` leaves clearing to Anthropic's
    ``context_management`` edit (``clear_tool_uses_20250919``), ``"openai"``
    leaves compaction to the Responses API's (the adapters emit the request's
    settings); the client then only drops turns the window cannot hold.
    ``prices``: a §8 price table (name or :class:`~rampart.pricing.PriceTable`)
    instead of the provider's.
    """

    clear_tool_results: bool = True
    keep_tool_results: int = 3
    exclude_tools: Sequence[str] = ()
    clear_tool_inputs: bool = False
    clear_at_least: int = 2048
    compact: Callable[..., Any] | Any | None = None
    compact_keep_recent: int = 8
    drop_oldest: bool = True
    provider: str = "openai"
    dry_run: bool = False
    horizon_calls: int = 10
    native: str | bool = False
    prices: Any = None
    compact_max_tokens: int = 1024
    relevance: bool = True
    keep_relevant: int = 2
    recall: bool = True
    recall_max_tokens: int = 2000
    excerpts: bool = True
    excerpt_tokens: int = 600
    keep_errors: bool = True

    def __post_init__(self) -> None:
        for name in (
            "keep_tool_results",
            "clear_at_least",
            "compact_keep_recent",
            "keep_relevant",
            "recall_max_tokens",
            "excerpt_tokens",
        ):
            # stored as a Python int: a numpy integer would follow into the
            # budget arithmetic and the JSON of every report
            object.__setattr__(self, name, _nonneg_int(getattr(self, name), name))
        for name in (
            "clear_tool_results",
            "clear_tool_inputs",
            "drop_oldest",
            "dry_run",
            "relevance",
            "recall",
            "excerpts",
            "keep_errors",
        ):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgumentError(
                    f"ContextPolicy.{name} must be True or False, got {getattr(self, name)!r}"
                )
        for name in ("horizon_calls", "compact_max_tokens"):
            object.__setattr__(self, name, _nonneg_int(getattr(self, name), name))
            if getattr(self, name) < 1:
                raise InvalidArgumentError(f"ContextPolicy.{name} must be >= 1")
        ex = self.exclude_tools
        if (
            isinstance(ex, (str, bytes, Mapping))
            or not isinstance(ex, Iterable)
            or not all(isinstance(t, str) for t in ex)
        ):
            raise InvalidArgumentError(
                f"ContextPolicy.exclude_tools must be a sequence of tool names, "
                f"got {self.exclude_tools!r}"
            )
        object.__setattr__(self, "exclude_tools", tuple(self.exclude_tools))
        if not isinstance(self.provider, str) or self.provider not in PROVIDERS:
            raise InvalidArgumentError(
                f"ContextPolicy.provider must be one of {sorted(PROVIDERS)}, got {self.provider!r}"
            )
        if self.native not in _NATIVE:
            raise InvalidArgumentError(
                f"ContextPolicy.native must be False, 'anthropic' or 'openai', got {self.native!r}"
            )
        c = self.compact
        if c is not None and not callable(c) and not callable(getattr(c, "chat", None)):
            raise InvalidArgumentError(
                "ContextPolicy.compact must be None, a callable (items) -> str or a rampart "
                f"LLM backend, got {c!r}"
            )
        from rampart.pricing import price_table

        object.__setattr__(self, "prices", price_table(self.prices or PROVIDERS[self.provider][0]))

    @property
    def default_scale(self) -> float:
        """The count scale used before any usage of this provider was observed."""
        return PROVIDERS[self.provider][1]

    def pays(self, removed: int, after: int, cold: bool) -> bool:
        """Whether removing ``removed`` tokens, which rewrites the ``after`` tokens
        that follow the first changed item, is cheaper over the next
        ``horizon_calls`` calls than keeping the body (and its cache) as it is.

        Kept: each call reads the ``after`` tokens from the cache (``read`` each).
        Rewritten: the first call writes ``after - removed`` (``write`` each), the
        later ones read them. The difference is ``read*after + (n-1)*read*removed
        - write*(after - removed)``. A cold cache (TTL passed) is rewritten anyway:
        then any saving pays."""
        if removed <= 0:
            return False
        if cold:
            return True
        t = self.prices
        n = self.horizon_calls
        gain = t.read * after + (n - 1) * t.read * removed - t.write * (after - removed)
        return bool(gain > 0 and math.isfinite(gain))
