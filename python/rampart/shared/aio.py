"""The asyncio side of a registry: what a read needs, without blocking the loop.

A read that may need the model (a gated compile, a ranking) is one generator
(``rampart._ops``): ``compile`` drives it in the calling thread, ``acompile``
with ``_ops.adrive``, which answers each need here. A write's shared append is
the replica's (``Replica.asubmit``), through the store's :class:`AsyncStore`
side: its own async client, or :class:`OffLoopStore` over its blocking calls.

- **The model.** A model with ``aencode`` (``OnnxEmbedder``: its coalescer's
  rounds run on threads, never on the loop) is awaited; a model with only
  ``encode``/``encode_batch`` runs on the loop's default executor (a bounded
  pool shared by the process, not a thread per call).
- **Pending blocks.** One coroutine per registry and loop embeds them at a time
  (an ``asyncio.Lock``); the others wait for it and then find none, so 100
  coroutines gating at once embed a new block once.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rampart.block import InstructionBlock
from rampart.embeddings.base import encode_texts

if TYPE_CHECKING:
    from rampart._view import RegistryView
    from rampart.stores import Entries, Store

__all__ = [
    "AsyncStore",
    "OffLoopStore",
    "aembed_pending",
    "aencode_one",
    "aencode_texts",
    "async_store",
    "off_loop",
]


@runtime_checkable
class AsyncStore(Protocol):
    """The calls a coroutine makes on a store (docs/specification.md §7): the sync
    :class:`~rampart.stores.Store` methods of the same names, awaited on the
    caller's event loop (Redis: redis.asyncio; SQLite: its writer thread).
    PostgreSQL's store has none: :class:`OffLoopStore` serves it."""

    async def aappend(self, name: str, entry: bytes, after: int) -> tuple[int, Entries]:
        """``Store.append``, awaited."""
        ...

    async def aread(self, name: str, after: int, limit: int = 10_000) -> Entries:
        """``Store.read``, awaited."""
        ...

    async def alast_seq(self, name: str) -> int:
        """``Store.last_seq``, awaited."""
        ...

    async def aclose(self) -> None:
        """Close this loop's async client."""
        ...


class OffLoopStore:
    """An :class:`AsyncStore` for a store object with only blocking calls: each
    runs on the loop's default executor (a bounded pool), never on the loop."""

    __slots__ = ("store",)

    def __init__(self, store: Store) -> None:
        self.store = store

    async def aappend(self, name: str, entry: bytes, after: int) -> tuple[int, Entries]:
        """``store.append`` on the executor."""
        out: tuple[int, Entries] = await off_loop(lambda: self.store.append(name, entry, after))
        return out

    async def aread(self, name: str, after: int, limit: int = 10_000) -> Entries:
        """``store.read`` on the executor."""
        out: Entries = await off_loop(lambda: self.store.read(name, after, limit))
        return out

    async def alast_seq(self, name: str) -> int:
        """``store.last_seq`` on the executor."""
        out: int = await off_loop(lambda: self.store.last_seq(name))
        return out

    async def aclose(self) -> None:
        """Nothing to close (see below)."""
        # The store's connections belong to the follower thread, which closes
        # them itself when the replica closes: nothing of this loop's to close.
        return None


def async_store(store: Store) -> AsyncStore:
    """The store's async side: the store itself when it has one, else :class:`OffLoopStore`."""
    return store if isinstance(store, AsyncStore) else OffLoopStore(store)


# Per registry, per event loop: the lock that lets one coroutine embed at a time.
# A side table, so the registry's slots stay as they are; asyncio.Lock is bound
# to one loop, and a registry may be used from several (one asyncio.run each).
_LOCKS: weakref.WeakKeyDictionary[
    RegistryView, weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]
] = weakref.WeakKeyDictionary()


def _embed_lock(reg: RegistryView) -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    per_loop = _LOCKS.get(reg)
    if per_loop is None:
        per_loop = _LOCKS[reg] = weakref.WeakKeyDictionary()
    lock = per_loop.get(loop)
    if lock is None:
        lock = per_loop[loop] = asyncio.Lock()
    return lock


async def aencode_texts(model: Any, texts: list[str]) -> tuple[bytes, int, list[bool]]:
    """:func:`rampart.embeddings.base.encode_texts` for coroutines."""
    report = getattr(model, "aencode_batch_report", None)
    if report is not None:
        return encode_texts(_Computed(*await report(texts)), texts)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, encode_texts, model, texts)


class _Computed:
    """Vectors already computed, handed to encode_texts' one checking path."""

    def __init__(self, vectors: Any, truncated: list[bool]) -> None:
        self._out = (vectors, truncated)

    def encode_batch_report(self, texts: list[str]) -> tuple[Any, list[bool]]:
        return self._out


async def aencode_one(model: Any, text: str) -> Any:
    """A vector of ``text``: the model's own coroutine, or its run on the executor."""
    encode = getattr(model, "aencode", None)
    if encode is not None:
        return await encode(text)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, model.encode, text)


async def aembed_pending(reg: RegistryView) -> int:
    """``BlockRegistry.embed_pending`` for coroutines."""
    core = reg._core
    if not core.unembedded():  # one comparison while nothing changed
        return 0
    async with _embed_lock(reg):
        # A thread (the follower embedding what was just written) may be embedding
        # these very blocks: wait for it rather than run the model twice.
        while reg._embed_lock.locked():
            await asyncio.sleep(0.001)
        pending = core.unembedded()
        if not pending:
            return 0
        model = reg._model()
        texts = [InstructionBlock(b).gate_text for b in pending]
        matrix, dim, truncated = await aencode_texts(model, texts)
        # Blocks whose text changed meanwhile (or that went) are skipped by the core.
        n = int(core.attach_embeddings(pending, matrix, dim, truncated))
        if reg._replica is not None:
            reg._replica.publish_vectors(pending, matrix, dim, truncated)
        return n


async def off_loop(call: Any) -> Any:
    """``call()`` on the loop's default executor (a bounded pool)."""
    return await asyncio.get_running_loop().run_in_executor(None, call)
