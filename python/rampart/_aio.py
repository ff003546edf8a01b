"""The asyncio side of a registry: embedding without blocking the event loop.

The ``a``-methods of :class:`~rampart.registry.BlockRegistry` call the sync
method where it never waits (every read, compile without a new task, and any
write to a local registry: microseconds). What can wait goes here or to
``_replica`` (a shared registry's append):

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
from typing import TYPE_CHECKING, Any

from rampart import _args
from rampart._embedding import encode_texts
from rampart.block import InstructionBlock

if TYPE_CHECKING:
    from rampart.registry import BlockRegistry

__all__ = ["aembed_pending", "aencode_texts", "aquery"]

_QUERY_CACHE = 64  # as BlockRegistry._query

# Per registry, per event loop: the lock that lets one coroutine embed at a time.
# A side table, so the registry's slots stay as they are; asyncio.Lock is bound
# to one loop, and a registry may be used from several (one asyncio.run each).
_LOCKS: weakref.WeakKeyDictionary[
    BlockRegistry, weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]
] = weakref.WeakKeyDictionary()


def _embed_lock(reg: BlockRegistry) -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    per_loop = _LOCKS.get(reg)
    if per_loop is None:
        per_loop = _LOCKS[reg] = weakref.WeakKeyDictionary()
    lock = per_loop.get(loop)
    if lock is None:
        lock = per_loop[loop] = asyncio.Lock()
    return lock


async def aencode_texts(model: Any, texts: list[str]) -> tuple[bytes, int, list[bool]]:
    """:func:`rampart._embedding.encode_texts` for coroutines."""
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


async def _aencode_one(model: Any, text: str) -> Any:
    encode = getattr(model, "aencode", None)
    if encode is not None:
        return await encode(text)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, model.encode, text)


async def aquery(reg: BlockRegistry, task_text: str | None, task_embedding: Any) -> bytes:
    """``BlockRegistry._query`` for coroutines (the same per-registry cache)."""
    if task_embedding is not None:
        return _args.vector(task_embedding, "task_embedding")
    model = reg._model()
    text = _args.text(task_text, "task_text")
    key = (id(model), text)
    q = reg._queries.get(key)
    if q is None:
        q = _args.vector(await _aencode_one(model, text), "query embedding")
        if len(reg._queries) >= _QUERY_CACHE:
            reg._queries.clear()
        reg._queries[key] = q
    return q


async def aembed_pending(reg: BlockRegistry) -> int:
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


async def with_vectors(reg: BlockRegistry, run: Any) -> Any:
    """``BlockRegistry._with_vectors`` for coroutines: embed, then run the cosine
    call until it finds every block with a vector."""
    from rampart.errors import RampartError

    for _ in range(100):
        await aembed_pending(reg)
        out = run()
        if out is not None:
            return out
    raise RampartError(
        f"registry {reg.label!r}: blocks kept arriving faster than they could be embedded"
    )
