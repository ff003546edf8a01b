"""Stores that keep the journals of shared registries (docs/specification.md §7).

A store keeps, per registry name, an ordered log of opaque entries (the Rust
core encodes and applies them), a metadata record written once at creation, and
the latest checkpoint. Ordering and durability are the store's job: rampart adds
no replication or consensus protocol of its own.

- ``sqlite:///abs/path.db`` or ``sqlite:rel/path.db``: :class:`SQLiteStore`, the
  embedded default for processes on one host (WAL mode, synchronous commits).
- ``redis://host:port/db``, ``rediss://…``, ``unix:///path/redis.sock``:
  :class:`RedisStore` (Redis ≥ 7; ``pip install "rampart-registry[redis]"``), for
  processes on many hosts.
- ``redis+sentinel://h1:p1,h2:p2/MASTER[/db]`` and ``redis+cluster://h1:p1[,h2:p2]``:
  the same store on Redis that fails over (Sentinel, Cluster); ``?wait=N`` makes
  each append wait until N replicas have it.
- ``postgresql://user@host:port/db`` (or ``postgres://``): :class:`PostgresStore`
  (``pip install "rampart-registry[postgres]"``), for teams that run PostgreSQL.

Example::

    from rampart.stores import open_store
    store = open_store("sqlite:///tmp/agents.db")
    store.names()          # registries held in this store
"""

from __future__ import annotations

import contextlib
import importlib
import re
import threading
from collections.abc import Iterator
from typing import Protocol

from rampart.errors import InvalidArgumentError
from rampart.stores.base import (
    AHEAD_LIMIT,
    SEQ_MAX,
    Damaged,
    Entries,
    checked_checkpoint,
    checked_seq,
    journal_entries,
)
from rampart.stores.redact import redacted
from rampart.stores.sqlite import SQLiteStore

__all__ = [
    "AHEAD_LIMIT",
    "SEQ_MAX",
    "Damaged",
    "Entries",
    "PostgresStore",
    "RedisStore",
    "SQLiteStore",
    "Store",
    "check_name",
    "checked_checkpoint",
    "checked_seq",
    "journal_entries",
    "open_store",
    "opened_for",
    "redacted",
    "valid_name",
]


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def valid_name(name: object) -> bool:
    """Whether ``name`` is a registry name (what ``names()`` may list: a store
    can hold foreign rows and keys under other names)."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def check_name(name: object) -> str:
    """A registry name: 1–200 characters of letters, digits, ``.``, ``_``, ``-``
    (it becomes part of SQLite rows and Redis keys, so nothing else is allowed)."""
    if not isinstance(name, str) or not valid_name(name):
        raise InvalidArgumentError(
            "a shared registry's name is 1-200 characters of letters, digits, '.', '_' and "
            f"'-', starting with a letter or digit; got {name!r}"
        )
    return name


class Store(Protocol):
    """What a shared registry needs from a store. Every method raises
    :class:`~rampart.errors.StoreUnavailableError` when the store cannot be reached,
    and :class:`~rampart.errors.RegistryFileError` when what it holds for the
    registry is damaged beyond skipping (a metadata record or checkpoint of the
    wrong type, a journal key that is not a journal).

    Nothing read from a store is trusted: every read path passes its raw values
    through :func:`journal_entries` / :func:`checked_seq` /
    :func:`checked_checkpoint` (stores/base.py), so the entries a replica sees
    are ``(seq, bytes | Damaged)`` in order, a run of missing numbers between
    two entries as one Damaged (a hole), never past the last entry there is
    (docs/shared.md, "Garbage in the store"), with the low-water mark, the
    chain values and the store's chain value at the reader's position beside
    them (:class:`Entries`; docs/shared.md, "No divergence"). An append lands after any entry a
    foreign client put just ahead of the counter (within ``AHEAD_LIMIT``) and
    never fails because of one."""

    url: str

    def exists(self) -> bool:
        """Whether the store holds its own layout (SQLite: the file and its
        tables; PostgreSQL: the tables and functions; Redis: the server answers,
        since its keys are made per registry). Creates nothing on a store opened
        with ``create=False``. Optional for store objects passed in: callers use
        ``getattr(store, "exists", None)``."""

    def meta(self, name: str) -> bytes | None:
        """The registry's metadata record, or None when it does not exist."""

    def create(self, name: str, meta: bytes, entries: list[bytes]) -> bool:
        """Atomically: when ``name`` does not exist, store ``meta`` and append
        ``entries`` as its first journal entries and return True; else False."""

    def append(self, name: str, entry: bytes, after: int) -> tuple[int, Entries]:
        """Append one entry at ``max(counter, entries just ahead of it) + 1``
        and set the counter there, atomically; return its sequence number and
        every entry after ``after`` up to and including it (one round trip)."""

    def read(self, name: str, after: int, limit: int = 10_000) -> Entries:
        """Entries after ``after`` up to the counter, in order, holes and damaged
        values as :class:`Damaged` (at most ``limit`` rows read)."""

    def wait(
        self, name: str, after: int, timeout: float, stop: threading.Event | None = None
    ) -> Entries:
        """Like ``read``, but wait up to ``timeout`` seconds for an entry to arrive
        (or until ``stop`` is set, where the store can notice it)."""

    def first_seq(self, name: str) -> int:
        """Sequence number of the oldest entry still kept (0: none kept)."""

    def last_seq(self, name: str) -> int:
        """Sequence number of the newest entry there is, up to the counter (0:
        none yet, or all compacted): what ``sync`` waits for."""

    def put_checkpoint(self, name: str, seq: int, data: bytes, chain: bytes | None = None) -> bool:
        """Keep ``data`` as the registry's state after entry ``seq`` (if newer,
        and if ``chain`` is the store's chain value of entry ``seq``, where it
        keeps one: no checkpoint of a fork); whether it was kept."""

    def checkpoint(self, name: str) -> tuple[int, bytes] | None:
        """The latest checkpoint, or None (RegistryFileError: one is there but
        damaged; the next ``put_checkpoint`` replaces it)."""

    def compact(self, name: str, upto: int) -> int:
        """Drop entries up to ``upto`` (a checkpoint covers them) and move the
        low-water mark there, atomically; returns how many."""

    def low_seq(self, name: str) -> int:
        """Compaction's low-water mark: every entry up to it may have been
        dropped (a read after a position below it starts with a compacted
        marker: the replica reloads the checkpoint)."""

    def names(self) -> list[str]:
        """Registries held in this store."""

    def close(self) -> None:
        """Release connections (the store object can be reopened by using it)."""

    # Optional, for the registry's asyncio twins: ``async def aappend(name, entry,
    # after)``, ``aread(name, after, limit)``, ``alast_seq(name)`` and ``aclose()``,
    # the same as their sync namesakes but awaited on the caller's event loop
    # (Redis: redis.asyncio; SQLite: a writer thread). A store without them has
    # its sync methods run on the loop's default executor.


#: URL scheme prefixes -> (module, class) of the store that serves them: adding a
#: store is one module and one row. Modules are imported on first use (Redis and
#: PostgreSQL need optional extras).
STORES: dict[tuple[str, ...], tuple[str, str]] = {
    ("sqlite:",): ("rampart.stores.sqlite", "SQLiteStore"),
    ("redis://", "rediss://", "unix://", "redis+sentinel://", "redis+cluster://"): (
        "rampart.stores.redis",
        "RedisStore",
    ),
    ("postgresql://", "postgres://"): ("rampart.stores.postgres", "PostgresStore"),
}


def open_store(url: str | Store, *, create: bool = True) -> Store:
    """A store from its URL (or the store object itself). ``create=False``: the
    store creates nothing of its own — no SQLite file or tables, no PostgreSQL
    tables or functions (Redis has none) — and a store without them holds no
    registries; for commands that only read."""
    if not isinstance(url, str):
        if callable(getattr(url, "append", None)) and callable(getattr(url, "create", None)):
            return url
        raise InvalidArgumentError(f"store must be a URL or a store object, got {url!r}")
    for prefixes, (module, cls) in STORES.items():
        if url.startswith(prefixes):
            store: Store = getattr(importlib.import_module(module), cls)(url, create=create)
            return store
    raise InvalidArgumentError(
        f"unknown store URL {redacted(url)!r}: use sqlite:///abs/path.db, "
        "sqlite:rel/path.db, redis://host:port/db, rediss://…, unix:///path/to/redis.sock, "
        "redis+sentinel://h1:p1,h2:p2/MASTER, redis+cluster://h1:p1,h2:p2 or "
        "postgresql://user@host:port/db"
    )


@contextlib.contextmanager
def opened_for(url: str | Store, *, create: bool = True) -> Iterator[Store]:
    """:func:`open_store` for an open that hands the store on (a registry's
    replica, a conversation's journal): when the block raises, a store made here
    from a URL is closed again, so a failed open leaves no connection behind; a
    store object the caller passed stays theirs, open. The block's own error is
    the one raised, not one from closing."""
    st = open_store(url, create=create)
    try:
        yield st
    except BaseException:
        if isinstance(url, str):
            with contextlib.suppress(Exception):
                st.close()
        raise


def __getattr__(name: str) -> object:
    # RedisStore and PostgresStore import optional extras: only when asked for.
    if name == "RedisStore":
        from rampart.stores.redis import RedisStore

        return RedisStore
    if name == "PostgresStore":
        from rampart.stores.postgres import PostgresStore

        return PostgresStore
    raise AttributeError(name)
