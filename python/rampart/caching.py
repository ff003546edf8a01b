"""Prompt caching: price tables, a prefix-cache cost model, and sessions that keep a
conversation's cache warm.

Providers and local servers reuse the work done on a prompt's longest byte-identical
prefix (tools first, then the system prompt, then the messages). A gated compile puts
the task-dependent blocks after the ungated head (``gated=False`` blocks), so the head
is served from the cache on every task; a :class:`CacheSession` goes further within
one conversation: when the task changes it may keep the blocks the previous prompt
already had in place and append the newly relevant ones after them, so the whole
previous prompt stays a cached prefix. Whether that pays is decided by an explicit
cost model over a :class:`PriceTable`; :class:`PrefixCacheModel` replays a stream of
requests under a table (what ``benches/cache_bench.py`` uses to price layouts).

Costs are in *token-equivalents*: one uncached input token costs 1. See
docs/caching.md for when gating pays under caching and when it does not.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rampart.block import CompileResult, InstructionBlock
from rampart.errors import InvalidArgumentError

# The tables and the cost model live below blocks (the conversation's policy and
# the context map price with them too); their names stay importable from here.
from rampart.pricing import PRICES, Chunk, PrefixCacheModel, PriceTable, Usage, price_table

if TYPE_CHECKING:
    from rampart._view import GateFn, RegistryView

__all__ = [
    "PRICES",
    "CacheSession",
    "Chunk",
    "PrefixCacheModel",
    "PriceTable",
    "SessionResult",
    "Usage",
    "price_table",
]


# ---- sessions --------------------------------------------------------------------------------


def _render(b: InstructionBlock) -> str:
    # What compile renders for a block: prefix + content + suffix, nothing between.
    return f"{b.wrap_prefix}{b.content}{b.wrap_suffix}"


@dataclass(frozen=True, slots=True)
class _Kept:
    """One block of the previous prompt: its id, rendered text and cost."""

    runtime_id: str
    name: str
    text: str
    cost: int


class SessionResult:
    """One :meth:`CacheSession.compile`: the prompt to send and what the cost model
    predicted for it.

    ``prompt`` is the session's prompt: the fresh compile's (``decision ==
    "fresh"``) or the previous prompt's blocks with the newly relevant ones appended
    (``"extend"``). ``compile`` is the fresh compile of this task (its report says
    why each block is in or out of the *fresh* selection). ``cached_tokens`` /
    ``uncached_tokens`` / ``cost`` are the predicted first call of this prompt under
    the session's price table (system prompt only: tools and messages are not the
    session's to count); ``cost`` is the predicted cost of the session's
    ``calls_per_task`` calls with it, in token-equivalents, and ``alternative_cost``
    what the cheapest other choice would have cost by the same model (``None`` when
    there was none). Adapters take it like a
    :class:`~rampart.block.CompileResult`.
    """

    __slots__ = (
        "_blocks",
        "alternative_cost",
        "appended",
        "cache_points",
        "cached_tokens",
        "compile",
        "cost",
        "decision",
        "dropped",
        "kept",
        "prices",
        "prompt",
        "total_tokens",
        "uncached_tokens",
    )

    def __init__(
        self,
        *,
        prompt: str,
        compile: CompileResult,
        blocks: list[_Kept],
        decision: str,
        kept: list[str],
        appended: list[str],
        dropped: list[str],
        total_tokens: int,
        cache_points: list[tuple[int, int]],
        cached_tokens: int,
        cost: float,
        alternative_cost: float | None,
        prices: PriceTable,
    ) -> None:
        self.prompt = prompt
        self.compile = compile
        self._blocks = blocks
        self.decision = decision
        self.kept = kept
        self.appended = appended
        self.dropped = dropped
        self.total_tokens = total_tokens
        self.cache_points = cache_points
        self.cached_tokens = cached_tokens
        self.uncached_tokens = total_tokens - cached_tokens
        self.cost = cost
        self.alternative_cost = alternative_cost
        self.prices = prices

    @property
    def included(self) -> list[str]:
        """Names of the blocks in the prompt, in prompt order."""
        return [b.name for b in self._blocks]

    @property
    def included_ids(self) -> list[str]:
        """Runtime ids of the blocks in the prompt, in prompt order."""
        return [b.runtime_id for b in self._blocks]

    @property
    def stable_prefix_tokens(self) -> int:
        """Tokens of the task-independent head (as :attr:`CompileResult.stable_prefix_tokens`)."""
        return self.compile.stable_prefix_tokens

    @property
    def stable_prefix_chars(self) -> int:
        """Characters of the head in ``prompt`` (the same for every task)."""
        return self.compile.stable_prefix_chars

    @property
    def cache_notes(self) -> list[str]:
        """The fresh compile's notes on where the stable prefix is interrupted."""
        return self.compile.cache_notes

    def tools(self, format: str = "openai") -> list[dict[str, Any]]:
        """The tools of the blocks in this prompt (kept ones included), in prompt
        order, then the fresh compile's tools-only ones (``tools_in_prompt=False``)."""
        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        reg_tools = {_tool_name(t): t for t in self.compile.registry_tools(format)}
        for b in self._blocks:
            t = reg_tools.get(b.name)
            if t is not None and b.name not in seen:
                seen.add(b.name)
                out.append(t)
        for t in self.compile.tools(format):
            name = _tool_name(t)
            if name not in seen:
                seen.add(name)
                out.append(t)
        return out

    def registry_tools(self, format: str = "openai") -> list[dict[str, Any]]:
        """Every tool block of the registry, as :meth:`CompileResult.registry_tools`."""
        return self.compile.registry_tools(format)

    def __str__(self) -> str:
        return self.prompt

    def __repr__(self) -> str:
        return (
            f"<SessionResult {self.decision} {len(self._blocks)} blocks, {self.total_tokens} "
            f"tokens, {self.cached_tokens} predicted cached, cost {self.cost:.1f}>"
        )


def _tool_name(t: dict[str, Any]) -> str:
    fn = t.get("function")
    return str(fn["name"] if isinstance(fn, dict) else t["name"])


class CacheSession:
    """One conversation's compiles, laid out to keep its prompt cache warm.

    Made by :meth:`BlockRegistry.session`. Each :meth:`compile` runs the ordinary
    gated compile for the task (the *fresh* prompt: ungated head, then the relevant
    gated blocks in registry order) and compares it with the previous prompt of this
    session. Options: keep the first ``k`` blocks of the previous prompt in place
    (at least its head, at most every block still unchanged in the registry) and
    append the fresh prompt's other blocks after them, in compile order; ``k`` equal
    to the blocks both prompts start with is the fresh prompt itself. Each option is
    priced for ``calls_per_task`` model calls under ``prices`` by a
    :class:`PrefixCacheModel` replaying this session's own system prompts (block by
    block; an explicit cache with breakpoints where the adapter puts them: after
    the head, after the kept prefix, at the end): the first call reads what the
    cache still holds (TTL, minimum length and, for a local server, only the
    previous prompt taken into account) and writes the rest; each later call reads
    the whole prompt. The cheapest option that fits the token budget wins; ties go
    to the shorter keep (the fresh layout). The cost model looks one task ahead
    only and knows only this session's requests (another conversation warming the
    same head is a bonus it does not count). It never drops a block the fresh
    compile selected, and never moves the ungated head: a changed head starts a
    fresh prefix.

    Thread-safe (one lock around a compile); deterministic for the same registry
    states, tasks and ``clock`` readings; works on shared registries (it only
    compiles and reads blocks).
    """

    def __init__(
        self,
        registry: RegistryView,
        *,
        max_tokens: int | None = None,
        top_k: int | None = None,
        relevance_threshold: float | None = None,
        separator: str | None = None,
        gate: GateFn | None = None,
        tools_in_prompt: bool = True,
        prices: str | PriceTable = "anthropic",
        calls_per_task: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from rampart._view import DEFAULT_SEPARATOR, check_view

        check_view(registry, "CacheSession")
        if top_k is None and relevance_threshold is None:
            raise InvalidArgumentError(
                "a CacheSession needs a gate (top_k and/or relevance_threshold): without one "
                "every compile is the same prompt and an ordinary compile keeps the cache"
            )
        if isinstance(calls_per_task, bool) or not isinstance(calls_per_task, int):
            raise InvalidArgumentError(
                f"calls_per_task must be an int >= 1, got {calls_per_task!r}"
            )
        if calls_per_task < 1:
            raise InvalidArgumentError(
                f"calls_per_task must be an int >= 1, got {calls_per_task!r}"
            )
        if not callable(clock):
            raise InvalidArgumentError(f"clock must be a callable returning seconds, got {clock!r}")
        self.registry = registry
        self.max_tokens = max_tokens
        self.top_k = top_k
        self.relevance_threshold = relevance_threshold
        self.separator = DEFAULT_SEPARATOR if separator is None else separator
        if not isinstance(self.separator, str):
            raise InvalidArgumentError(f"separator must be a str, got {separator!r}")
        self.gate = gate
        self.tools_in_prompt = bool(tools_in_prompt)
        self.prices = price_table(prices)
        self.calls_per_task = calls_per_task
        self._clock = clock
        self._lock = threading.Lock()
        # The previous prompt's blocks, and the cache as this session's prompts left it.
        self._prev: list[_Kept] = []
        self._prev_breaks: set[int] = set()
        self._cache = PrefixCacheModel(self.prices, max_entries=_SESSION_ENTRIES)

    def reset(self) -> None:
        """Forget the previous prompt: the next compile starts a fresh prefix."""
        with self._lock:
            self._prev, self._prev_breaks = [], set()
            self._cache = PrefixCacheModel(self.prices, max_entries=_SESSION_ENTRIES)

    def compile(self, task_text: str | None = None, *, task_embedding: Any = None) -> SessionResult:
        """The prompt for this task (see the class docstring)."""
        fresh = self.registry.compile(
            self.max_tokens,
            task_text,
            self.relevance_threshold,
            self.top_k,
            self.separator,
            task_embedding=task_embedding,
            gate=self.gate,
            tools_in_prompt=self.tools_in_prompt,
        )
        with self._lock:
            out = self._decide(fresh)
        return out

    # ---- the cost model -----------------------------------------------------------------

    def _decide(self, fresh: CompileResult) -> SessionResult:
        sep = self.separator
        sep_tokens = self.registry.count_tokens(sep) if sep else 0
        new = [
            _Kept(b.runtime_id, b.semantic_name, _render(b), c)
            for b, c in zip(fresh.included_blocks, _own_costs(fresh.costs, sep_tokens))
        ]
        head = _head_count(new, fresh.stable_prefix_chars, len(sep))
        now = float(self._clock())
        prev = self._prev
        # c: the blocks both prompts start with; valid: the previous blocks still
        # unchanged in the registry, from the front.
        c = 0
        while c < min(len(prev), len(new)) and prev[c] == new[c]:
            c += 1
        valid = c
        if c >= head:
            while valid < len(prev) and self._unchanged(prev[valid]):
                valid += 1
        budget = fresh.max_tokens
        # (cost, k, layout, chunks, first call's usage, breakpoints)
        options: list[tuple[float, int, list[_Kept], list[Chunk], Usage, set[int]]] = []
        layouts: dict[tuple[str, ...], tuple[int, list[_Kept]]] = {}
        # Keeps worth pricing: none beyond what both share (fresh), all that is valid,
        # each cut just after a kept block the fresh compile wants again, and the
        # previous prompt's breakpoints (any other cut only drops blocks for
        # nothing). At most top-k + 4 options.
        fresh_ids = {b.runtime_id for b in new}
        cuts = {c, valid} | {j + 1 for j in range(c, valid) if prev[j].runtime_id in fresh_ids}
        cuts |= {p for p in self._prev_breaks if c <= p <= valid}  # explicit caches hit there
        for k in sorted(cuts):
            kept_ids = {b.runtime_id for b in prev[:k]}
            layout = [*prev[:k], *(b for b in new if b.runtime_id not in kept_ids)]
            # Two keeps can give one prompt (the appended block was next anyway):
            # it counts once, as the longer keep.
            layouts[tuple(b.runtime_id for b in layout)] = (k, layout)
        for k, layout in layouts.values():
            total = _tokens(layout, sep_tokens)
            if budget is not None and total > budget and k != c:
                continue
            breaks = {head, k if k > c else 0, len(layout)} - {0}
            chunks = _chunks(layout, sep_tokens, breaks)
            usage = self._cache.estimate(chunks, now)
            options.append((self._price(usage, total), k, layout, chunks, usage, breaks))
        cost, k, layout, chunks, usage, breaks = min(options, key=lambda o: (o[0], o[1]))
        others = [o[0] for o in options if o[1] != k]
        self._cache.request(chunks, now)
        decision = "extend" if k > c else "fresh"
        prompt = fresh.prompt if decision == "fresh" else sep.join(b.text for b in layout)
        total = _tokens(layout, sep_tokens)
        points: list[tuple[int, int]] = []
        head_chars = fresh.stable_prefix_chars
        if 0 < head_chars < len(prompt):
            points.append((head_chars, fresh.stable_prefix_tokens))
        if decision == "extend":
            kept_chars = sum(len(b.text) for b in layout[:k]) + len(sep) * (k - 1)
            if head_chars < kept_chars < len(prompt):
                points.append((kept_chars, _tokens(layout[:k], sep_tokens)))
        layout_ids = {b.runtime_id for b in layout}
        extend = decision == "extend"
        result = SessionResult(
            prompt=prompt,
            compile=fresh,
            blocks=layout,
            decision=decision,
            kept=[b.name for b in layout[head:k] if b.runtime_id not in fresh_ids]
            if extend
            else [],
            appended=[b.name for b in layout[k:]] if extend else [],
            dropped=[b.name for b in prev if b.runtime_id not in layout_ids],
            total_tokens=total,
            cache_points=points,
            cached_tokens=usage.cached,
            cost=cost,
            alternative_cost=min(others) if others else None,
            prices=self.prices,
        )
        self._prev, self._prev_breaks = layout, breaks
        return result

    def _unchanged(self, kept: _Kept) -> bool:
        from rampart.errors import BlockNotFoundError

        try:
            b = self.registry.get_by_id(kept.runtime_id)
        except BlockNotFoundError:
            return False
        return _render(b) == kept.text

    def _price(self, first: Usage, total: int) -> float:
        """``calls_per_task`` model calls with this prompt: the first as the cache
        model billed it, each later one reading what the cache holds of it."""
        t = self.prices
        held = t.cacheable(total)
        return first.cost + (self.calls_per_task - 1) * t.cost(held, 0, total - held)


# Entries one session's cache model keeps (its prompts' prefixes, block by block).
_SESSION_ENTRIES = 4096


def _chunks(layout: Sequence[_Kept], sep_tokens: int, breakpoints: set[int]) -> list[Chunk]:
    """The system prompt as the cache sees it: one chunk per block (separator
    included), breakpoints after the blocks counted in ``breakpoints``."""
    return [
        Chunk((b.runtime_id, b.text), b.cost + (sep_tokens if i else 0), i + 1 in breakpoints)
        for i, b in enumerate(layout)
    ]


def _own_costs(costs: list[int], sep_tokens: int) -> list[int]:
    """Per-block costs without the separator (compile charges it to every block
    after the first)."""
    return [c if i == 0 else c - sep_tokens for i, c in enumerate(costs)]


def _tokens(blocks: Sequence[_Kept], sep_tokens: int) -> int:
    return sum(b.cost for b in blocks) + sep_tokens * max(len(blocks) - 1, 0)


def _head_count(blocks: list[_Kept], head_chars: int, sep_len: int) -> int:
    """How many blocks make up the first ``head_chars`` characters of the prompt."""
    at = 0
    for i, b in enumerate(blocks):
        at += len(b.text) + (sep_len if i else 0)
        if at > head_chars:
            return i
    return len(blocks)
