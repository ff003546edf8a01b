"""Shared registries (docs/specification.md §7; docs/shared.md): one registry's replicas in many
processes, coordinated through a journal in a store.

- :mod:`~rampart.shared.replica`: a process's replica (append, apply, fork);
- :mod:`~rampart.shared.follower`: the thread that applies other processes' entries;
- :mod:`~rampart.shared.open`: creating and joining a registry in a store;
- :mod:`~rampart.shared.aio`: the asyncio side (work off the loop, the
  :class:`~rampart.shared.aio.AsyncStore` protocol and the off-loop adapter for
  stores without an async client);
- :class:`SharedRegistry`: the registry's methods for all of this, mixed into
  :class:`~rampart.registry.BlockRegistry`.

The stores themselves and their URL-scheme table are :mod:`rampart.stores`.
Importing this package costs nothing: each module loads when a registry opens.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from rampart._ops import offloaded
from rampart.embeddings.base import EmbeddingModel
from rampart.errors import InvalidArgumentError
from rampart.seeds import BlockSource, PathLike

if TYPE_CHECKING:
    import rampart._core as _core
    from rampart.shared.replica import Replica

_R = TypeVar("_R", bound="SharedRegistry")

__all__ = ["SharedRegistry"]


def _prepare_async(reg: SharedRegistry) -> None:
    # e.g. the async store client's import: on aopen's executor thread rather
    # than on the loop at the first write.
    prepare = getattr(reg._replica.store if reg._replica else None, "aprepare", None)
    if prepare is not None:
        prepare()


class SharedRegistry:
    """The shared-registry methods of :class:`~rampart.registry.BlockRegistry` (mixed in)."""

    __slots__ = ()

    # Provided by BlockRegistry.
    _replica: Replica | None
    _core: _core.Registry

    if TYPE_CHECKING:

        @property
        def label(self) -> str: ...

    @classmethod
    def open(
        cls: type[_R],
        store: Any,
        name: str,
        embedding_model: EmbeddingModel | str | None = None,
        tokeniser: Any = None,
        *,
        label: str | None = None,
        seeds: Iterable[PathLike | BlockSource] | None = None,
        create: bool = True,
        **kwargs: Any,
    ) -> _R:
        """Open (or create) the shared registry ``name`` in ``store``.

        ``store``: ``"sqlite:///abs/path.db"`` / ``"sqlite:rel/path.db"`` (processes
        on one host), ``"redis://host:port/db"`` (also ``rediss://``, ``unix://``;
        many hosts), or a store object from :mod:`rampart.stores`. Every process
        that opens the same (store, name) holds a replica of one registry: its
        mutations are appended to the store's journal and applied in journal
        order everywhere; compile stays local and never waits on the store.
        ``seeds`` (paths, as for :meth:`from_files`) are loaded only by the
        opener that creates the registry. ``create=False`` only joins: a
        registry (or SQLite file) that does not exist is
        :class:`~rampart.errors.InvalidArgumentError`, and nothing is created.
        Example::

            reg = rampart.BlockRegistry.open("sqlite:///tmp/agents.db", "planner",
                                             seeds=["seeds/"])
            reg.write_agent_block("Run the linter first.", "run-7")  # durable, shared
            reg.sync()                       # see every write appended before this
            reg.close()
        """
        from rampart.shared.open import open_shared

        reg: _R = open_shared(
            cls, store, name, embedding_model, tokeniser, label, seeds, kwargs, create
        )
        return reg

    @property
    def shared(self) -> bool:
        """Whether this registry is a replica of a shared registry (``open``)."""
        return self._replica is not None

    @property
    def name(self) -> str | None:
        """The shared registry's name in its store (None for a local registry)."""
        return None if self._replica is None else self._replica.name

    @property
    def store_url(self) -> str | None:
        """The store's URL (None for a local registry)."""
        return None if self._replica is None else self._replica.store.url

    @property
    def position(self) -> int | None:
        """How far into the journal this replica has applied (None: local)."""
        return None if self._replica is None else self._replica.position

    def sync(self, timeout: float = 10.0) -> None:
        """Publish this replica's access counts and vectors, then apply every
        entry appended before the call. A local registry has nothing to do."""
        if self._replica is not None:
            self._replica.sync(timeout)

    def checkpoint(self) -> int:
        """Write a checkpoint of this shared replica's state to the store now
        (new replicas start from the latest one; ``compact`` drops what it
        covers); returns the journal position it covers. Local registries have
        no journal: InvalidArgumentError (use :meth:`save`)."""
        if self._replica is None:
            raise InvalidArgumentError(
                f"registry {self.label!r} is not shared: it has no journal to checkpoint "
                "(save() writes a local registry to a file)"
            )
        return self._replica.checkpoint()

    def compact(self) -> tuple[int, int]:
        """Checkpoint this shared replica (as :meth:`checkpoint`) and drop the
        journal entries the store's checkpoint covers (``rampart store
        compact``); returns the position checkpointed and how many entries were
        dropped. Replicas that still need them reload the checkpoint."""
        if self._replica is None:
            raise InvalidArgumentError(
                f"registry {self.label!r} is not shared: it has no journal to compact"
            )
        return self._replica.compact()

    def close(self) -> None:
        """Flush and stop following the store; the registry stays readable (and
        compiles) but refuses mutations. A local registry has nothing to close."""
        if self._replica is not None:
            self._replica.close()

    # Opening reads a checkpoint, replays the journal tail and may embed seeds
    # (CPU work and store I/O once per registry): the sync open, off the loop.
    aopen = classmethod(
        offloaded(open.__func__, name="aopen", then=_prepare_async)  # type: ignore[attr-defined]
    )

    async def aclose(self) -> None:
        """:meth:`close` for coroutines (the flush and the follower's stop run off the loop)."""
        if self._replica is not None:
            await self._replica.aclose()

    async def sync_async(self, timeout: float = 10.0) -> None:
        """:meth:`sync` for coroutines (``a`` + ``sync`` is the keyword ``async``,
        hence this name): publish this replica's access counts and vectors, then
        apply every entry appended before the call."""
        if self._replica is not None:
            await self._replica.sync_async(timeout)
