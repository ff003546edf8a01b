"""Price tables and the prefix-cache cost model (docs/specification.md §8): what a request costs
when a provider bills the longest byte-identical prefix it has seen as cached.

:class:`PriceTable` (one provider's read/write multipliers, TTL and minimum),
:data:`PRICES` (built from the provider modules' rows), and
:class:`PrefixCacheModel`, which replays a stream of requests, given as chunks,
under a table. Costs are in *token-equivalents*: one uncached input token costs 1.
Nothing here knows blocks or registries: the conversation's policy, the context
map and :mod:`rampart.caching`'s sessions all price with it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace

from rampart.errors import InvalidArgumentError
from rampart.providers import provider_prices

__all__ = ["PRICES", "Chunk", "PrefixCacheModel", "PriceTable", "Usage", "price_table"]


@dataclass(frozen=True, slots=True)
class PriceTable:
    """How a provider bills (or a server spends) cached and uncached input tokens.

    ``read``: what a token served from the cache costs, per uncached token.
    ``write``: what a token costs when it is written into the cache (Anthropic's
    premium; 1.0 where caching is automatic and free). ``ttl_s``: seconds an entry
    lives after its last use (``None``: until newer prompts push it out).
    ``min_tokens``: prefixes shorter than this are never cached. ``granularity``:
    the cached length is a multiple of it (OpenAI caches in 128-token steps).
    ``explicit``: only prefixes ending at a ``cache_control`` breakpoint are written,
    and a hit is looked for at most ``lookback`` content blocks before each
    breakpoint (Anthropic); otherwise every prefix of every request is cached.
    ``scope``: ``"any"`` (any earlier request's prefix) or ``"last"`` (only the
    previous request's: llama-cpp-python, one llama.cpp server slot).
    ``storage_per_hour``: what keeping one token in an explicit cache costs per
    hour, per uncached input token (Gemini's explicit caches; 0 elsewhere).
    """

    name: str
    read: float
    write: float
    ttl_s: float | None
    min_tokens: int
    granularity: int = 1
    explicit: bool = False
    lookback: int = 20
    scope: str = "any"
    source: str = ""
    storage_per_hour: float = 0.0

    def __post_init__(self) -> None:
        for field in ("read", "write"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
                raise InvalidArgumentError(f"PriceTable.{field} must be a number >= 0, got {v!r}")
        if self.ttl_s is not None and not self.ttl_s > 0:
            raise InvalidArgumentError(f"PriceTable.ttl_s must be > 0 or None, got {self.ttl_s!r}")
        for field in ("min_tokens", "granularity", "lookback"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, int) or v < (field != "min_tokens"):
                raise InvalidArgumentError(f"PriceTable.{field} must be a positive int, got {v!r}")
        if self.scope not in ("any", "last"):
            raise InvalidArgumentError(
                f"PriceTable.scope must be 'any' or 'last', got {self.scope!r}"
            )

    def cost(self, cached: int, written: int, uncached: int) -> float:
        """Token-equivalents of one request's input: ``cached`` tokens read from the
        cache, ``written`` into it, ``uncached`` neither."""
        return self.read * cached + self.write * written + uncached

    def cacheable(self, tokens: int) -> int:
        """How much of a ``tokens``-long shared prefix the cache actually serves."""
        if tokens < self.min_tokens:
            return 0
        return tokens - tokens % self.granularity

    def ideal(self) -> PriceTable:
        """This table's floor: every prefix seen before is read at ``read``, nothing
        expires, there is no minimum and no write premium."""
        return replace(
            self,
            name=f"{self.name} (ideal)",
            write=1.0,
            ttl_s=None,
            min_tokens=0,
            granularity=1,
            explicit=False,
            scope="any",
        )


_LOCAL = (
    "llama-cpp-python (Llama.generate keeps the previous prompt's KV cache and evaluates "
    "only what follows the longest common token prefix); llama.cpp server: the same per slot "
    "(cache_prompt, on by default); the cost unit is one prefilled token, a reused one costs "
    "nothing"
)
_VLLM = (
    "vLLM automatic prefix caching (https://docs.vllm.ai/en/latest/design/prefix_caching.html) "
    "and SGLang RadixAttention: any earlier prefix, in KV blocks of 16 tokens, until evicted"
)

#: The built-in price tables by name (``price_table(name)``); cite ``.source``.
PRICES: dict[str, PriceTable] = {
    t.name: t
    for t in (
        *(PriceTable(name, **row) for name, row in provider_prices()),
        PriceTable("local", 0.0, 1.0, None, 0, scope="last", source=_LOCAL),
        PriceTable("local-vllm", 0.0, 1.0, None, 0, granularity=16, source=_VLLM),
    )
}


def price_table(table: str | PriceTable) -> PriceTable:
    """A :class:`PriceTable` by name (see :data:`PRICES`), or ``table`` itself."""
    if isinstance(table, PriceTable):
        return table
    try:
        return PRICES[table]
    except (KeyError, TypeError):
        raise InvalidArgumentError(
            f"unknown price table {table!r}; built in: {', '.join(PRICES)} (or pass a PriceTable)"
        ) from None


# ---- replaying a stream of requests -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Chunk:
    """One content block of a request as the cache sees it: ``key`` identifies its
    bytes (the text itself, or a digest), ``tokens`` its length, ``breakpoint``
    whether it carries a ``cache_control`` marker (explicit caches only)."""

    key: Hashable
    tokens: int
    breakpoint: bool = False


@dataclass(frozen=True, slots=True)
class Usage:
    """One request's input as billed: tokens read from the cache, written into it,
    and neither; ``cost`` in token-equivalents."""

    cached: int
    written: int
    uncached: int
    cost: float

    @property
    def total(self) -> int:
        return self.cached + self.written + self.uncached


class PrefixCacheModel:
    """A provider's prefix cache, replayed: feed it requests as :class:`Chunk` lists,
    in order, and it says what each one costs under ``table``.

    Explicit caches (Anthropic) write an entry at each breakpoint whose prefix is at
    least ``min_tokens`` long and look for the longest live entry at a chunk
    boundary up to ``lookback`` chunks before each breakpoint; everything between
    that hit and the last breakpoint is written, the rest is plain input. Automatic
    caches (OpenAI, local servers) serve the longest live prefix of any earlier
    request (``scope="any"``) or of the previous one (``"last"``), rounded down to
    ``granularity`` and only from ``min_tokens``; the rest is written. Entries live
    ``ttl_s`` after their last use. Chunk keys are compared, never hashed into fewer
    bits, so two different prefixes never collide. Not thread-safe: one stream.
    """

    def __init__(self, table: str | PriceTable, *, max_entries: int = 100_000) -> None:
        self.table = price_table(table)
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise InvalidArgumentError(f"max_entries must be an int >= 1, got {max_entries!r}")
        self.max_entries = max_entries
        # prefix (tuple of keys) -> expiry time (inf when ttl_s is None), oldest use first
        self._entries: dict[tuple[Hashable, ...], float] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def _alive(self, prefix: tuple[Hashable, ...], now: float) -> bool:
        expiry = self._entries.get(prefix)
        return expiry is not None and expiry >= now

    def _put(self, prefix: tuple[Hashable, ...], expiry: float) -> None:
        self._entries.pop(prefix, None)  # re-inserted: the most recent use goes last
        self._entries[prefix] = expiry
        while len(self._entries) > self.max_entries:  # bounded: forget the oldest
            del self._entries[next(iter(self._entries))]

    def request(self, chunks: Sequence[Chunk], now: float = 0.0) -> Usage:
        """Bill one request sent at time ``now`` (seconds) and update the cache."""
        return self._bill(chunks, now, True)

    def estimate(self, chunks: Sequence[Chunk], now: float = 0.0) -> Usage:
        """What :meth:`request` would bill, leaving the cache as it is."""
        return self._bill(chunks, now, False)

    def _bill(self, chunks: Sequence[Chunk], now: float, commit: bool) -> Usage:
        t = self.table
        keys = tuple(c.key for c in chunks)
        cum = [0]
        for c in chunks:
            if isinstance(c.tokens, bool) or not isinstance(c.tokens, int) or c.tokens < 0:
                raise InvalidArgumentError(f"Chunk.tokens must be an int >= 0, got {c.tokens!r}")
            cum.append(cum[-1] + c.tokens)
        total = cum[-1]
        expiry = math.inf if t.ttl_s is None else now + t.ttl_s
        if commit and t.ttl_s is not None:
            for k in [k for k, e in self._entries.items() if e < now]:
                del self._entries[k]
        if t.explicit:
            bps = [i + 1 for i, c in enumerate(chunks) if c.breakpoint]
            hit = 0
            for b in bps:
                for j in range(b, max(b - t.lookback, 0) - 1, -1):
                    if j > hit and self._alive(keys[:j], now):
                        hit = j
                        break
            cached = cum[hit]
            writable = [b for b in bps if cum[b] >= t.min_tokens]
            last = writable[-1] if writable else 0
            written = max(cum[last] - cached, 0)
            if commit:
                if hit:
                    self._put(keys[:hit], expiry)  # a hit refreshes the entry
                for b in writable:
                    self._put(keys[:b], expiry)
        else:
            # Every request enters all its prefixes with one expiry, so liveness falls
            # with length: a binary search finds the longest live one (exact until
            # max_entries starts forgetting, approximate after).
            lo, hi = 0, len(keys)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self._alive(keys[:mid], now):
                    lo = mid
                else:
                    hi = mid - 1
            hit = lo
            cached = t.cacheable(cum[hit])
            written = total - cached
            if commit:
                if t.scope == "last":
                    self._entries.clear()
                for n in range(1, len(keys) + 1):
                    self._put(keys[:n], expiry)
        uncached = total - cached - written
        return Usage(cached, written, uncached, t.cost(cached, written, uncached))
