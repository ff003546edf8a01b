"""The embedded store: one SQLite file in WAL mode, for processes on one host.

Layout: three tables shared by every registry of the file —
``rampart_registries`` (name, metadata, last sequence number),
``rampart_journal`` (name, seq, entry) and ``rampart_checkpoints`` (name, seq,
data). An append runs in ``BEGIN IMMEDIATE`` (SQLite's one writer lock, so
sequence numbers are dense and ordered), bumps ``last_seq``, inserts the entry
and reads back the tail the appender has not applied yet, all in one
transaction.

Durability: ``synchronous=FULL`` by default — a commit returns once the WAL is
on disk, so an acknowledged write survives ``kill -9`` *and* power loss.
``synchronous="NORMAL"`` (``sqlite:///x.db?synchronous=normal``) skips that
fsync: still safe against any process crash (the WAL is in the OS page cache),
but the last commits before a power cut or kernel panic can be lost. It roughly
halves append latency on a real disk.

Change notification: a follower polls ``PRAGMA data_version`` (a read of shared
memory, a few µs) every ``poll_interval`` seconds and reads only when another
connection committed.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import urllib.parse
import weakref
from pathlib import Path
from typing import Any

from rampart.errors import InvalidArgumentError, StoreUnavailableError
from rampart.stores.base import Entries

__all__ = ["SQLiteStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rampart_registries(
    name TEXT PRIMARY KEY, meta BLOB NOT NULL, last_seq INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS rampart_journal(
    name TEXT NOT NULL, seq INTEGER NOT NULL, entry BLOB NOT NULL,
    PRIMARY KEY(name, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rampart_checkpoints(
    name TEXT PRIMARY KEY, seq INTEGER NOT NULL, data BLOB NOT NULL);
"""


# SQLite's own mutexes must not be held by another thread at fork(): the child
# would wait on them forever. Every call into SQLite holds its store's gate, and
# fork() takes every gate first (os.register_at_fork below).
_STORES: weakref.WeakSet[SQLiteStore] = weakref.WeakSet()


def _before_fork() -> None:
    for store in list(_STORES):
        store._gate.acquire()


def _after_fork_in_parent() -> None:
    for store in list(_STORES):
        store._gate.release()


def _after_fork_in_child() -> None:
    for store in list(_STORES):
        store._gate = threading.Lock()
        store._local = threading.local()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)


def _path_of(url: str) -> tuple[Path, dict[str, str]]:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "sqlite":
        raise InvalidArgumentError(f"not a sqlite: URL: {url!r}")
    # sqlite:///abs/path.db -> /abs/path.db ; sqlite:rel/path.db -> rel/path.db
    raw = parsed.path if parsed.netloc == "" else parsed.netloc + parsed.path
    if url.startswith("sqlite://") and parsed.netloc:
        raise InvalidArgumentError(
            f"{url!r}: a sqlite URL names a file, sqlite:///abs/path.db or sqlite:rel/path.db"
        )
    if not raw:
        raise InvalidArgumentError(f"{url!r} names no file")
    query = dict(urllib.parse.parse_qsl(parsed.query))
    return Path(urllib.parse.unquote(raw)), query


class SQLiteStore:
    """Journals in one SQLite file (see the module doc for the trade-offs).

    ``SQLiteStore("sqlite:///var/lib/agents.db")``; options in the URL query:
    ``synchronous`` (``full``, default, or ``normal``), ``timeout`` (seconds to
    wait for the writer lock, default 10), ``poll`` (follower poll interval in
    seconds, default 0.002).
    """

    def __init__(self, url: str) -> None:
        self.path, query = _path_of(url)
        self.url = url
        sync = query.pop("synchronous", "full").upper()
        if sync not in ("FULL", "NORMAL", "EXTRA"):
            raise InvalidArgumentError(f"{url!r}: synchronous must be full, normal or extra")
        self.synchronous = sync
        try:
            self.timeout = float(query.pop("timeout", "10"))
            self.poll_interval = float(query.pop("poll", "0.002"))
        except ValueError:
            raise InvalidArgumentError(f"{url!r}: timeout and poll are numbers") from None
        if query:
            raise InvalidArgumentError(f"{url!r}: unknown options {sorted(query)}")
        self._local = threading.local()
        self._schema_ready = False
        self._gate = threading.Lock()
        _STORES.add(self)

    # ---- connections: one per thread and process ------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        # A connection must not cross fork(): the child opens its own.
        if conn is not None and self._local.pid == os.getpid():
            return conn
        try:
            with self._gate:
                return self._connect()
        except sqlite3.Error as e:
            raise StoreUnavailableError(f"cannot open SQLite store {self.path}: {e}") from None

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=self.timeout, isolation_level=None, check_same_thread=True
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        if not self._schema_ready:
            conn.executescript(_SCHEMA)
            self._schema_ready = True
        self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def _run(self, fn: Any) -> Any:
        """Run ``fn(conn)``; SQLite failures become StoreUnavailableError."""
        conn = self._conn()
        try:
            with self._gate:
                return fn(conn)
        except sqlite3.Error as e:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise StoreUnavailableError(f"SQLite store {self.path}: {e}") from None

    # ---- the Store protocol ---------------------------------------------------------

    def meta(self, name: str) -> bytes | None:
        row = self._run(
            lambda c: c.execute(
                "SELECT meta FROM rampart_registries WHERE name=?", (name,)
            ).fetchone()
        )
        return None if row is None else bytes(row[0])

    def create(self, name: str, meta: bytes, entries: list[bytes]) -> bool:
        def go(c: sqlite3.Connection) -> bool:
            c.execute("BEGIN IMMEDIATE")
            if c.execute("SELECT 1 FROM rampart_registries WHERE name=?", (name,)).fetchone():
                c.execute("ROLLBACK")
                return False
            c.execute(
                "INSERT INTO rampart_registries(name, meta, last_seq) VALUES (?, ?, ?)",
                (name, meta, len(entries)),
            )
            c.executemany(
                "INSERT INTO rampart_journal(name, seq, entry) VALUES (?, ?, ?)",
                [(name, k + 1, e) for k, e in enumerate(entries)],
            )
            c.execute("COMMIT")
            return True

        return bool(self._run(go))

    def append(self, name: str, entry: bytes, after: int) -> tuple[int, Entries]:
        def go(c: sqlite3.Connection) -> tuple[int, Entries]:
            c.execute("BEGIN IMMEDIATE")
            row = c.execute(
                "UPDATE rampart_registries SET last_seq = last_seq + 1 WHERE name=? "
                "RETURNING last_seq",
                (name,),
            ).fetchone()
            if row is None:
                c.execute("ROLLBACK")
                raise InvalidArgumentError(f"store {self.url} holds no registry {name!r}")
            seq = int(row[0])
            c.execute(
                "INSERT INTO rampart_journal(name, seq, entry) VALUES (?, ?, ?)",
                (name, seq, entry),
            )
            tail = c.execute(
                "SELECT seq, entry FROM rampart_journal WHERE name=? AND seq>? ORDER BY seq",
                (name, after),
            ).fetchall()
            c.execute("COMMIT")
            return seq, [(int(s), bytes(e)) for s, e in tail]

        result: tuple[int, Entries] = self._run(go)
        return result

    def read(self, name: str, after: int, limit: int = 10_000) -> Entries:
        rows = self._run(
            lambda c: c.execute(
                "SELECT seq, entry FROM rampart_journal WHERE name=? AND seq>? "
                "ORDER BY seq LIMIT ?",
                (name, after, limit),
            ).fetchall()
        )
        return [(int(s), bytes(e)) for s, e in rows]

    def wait(
        self, name: str, after: int, timeout: float, stop: threading.Event | None = None
    ) -> Entries:
        c = self._conn()
        deadline = time.monotonic() + timeout
        entries = self.read(name, after)
        while not entries:
            try:
                version = self._data_version(c)
                while self._data_version(c) == version:
                    if time.monotonic() >= deadline or (stop is not None and stop.is_set()):
                        return []
                    time.sleep(self.poll_interval)
            except sqlite3.Error as e:
                raise StoreUnavailableError(f"SQLite store {self.path}: {e}") from None
            entries = self.read(name, after)
        return entries

    def _data_version(self, c: sqlite3.Connection) -> int:
        with self._gate:
            return int(c.execute("PRAGMA data_version").fetchone()[0])

    def first_seq(self, name: str) -> int:
        row = self._run(
            lambda c: c.execute(
                "SELECT MIN(seq) FROM rampart_journal WHERE name=?", (name,)
            ).fetchone()
        )
        return int(row[0] or 0)

    def last_seq(self, name: str) -> int:
        row = self._run(
            lambda c: c.execute(
                "SELECT last_seq FROM rampart_registries WHERE name=?", (name,)
            ).fetchone()
        )
        return 0 if row is None else int(row[0])

    def put_checkpoint(self, name: str, seq: int, data: bytes) -> None:
        self._run(
            lambda c: c.execute(
                "INSERT INTO rampart_checkpoints(name, seq, data) VALUES (?, ?, ?) "
                "ON CONFLICT(name) DO UPDATE SET seq=excluded.seq, data=excluded.data "
                "WHERE excluded.seq > rampart_checkpoints.seq",
                (name, seq, data),
            )
        )

    def checkpoint(self, name: str) -> tuple[int, bytes] | None:
        row = self._run(
            lambda c: c.execute(
                "SELECT seq, data FROM rampart_checkpoints WHERE name=?", (name,)
            ).fetchone()
        )
        return None if row is None else (int(row[0]), bytes(row[1]))

    def compact(self, name: str, upto: int) -> int:
        def go(c: sqlite3.Connection) -> int:
            ckpt = c.execute("SELECT seq FROM rampart_checkpoints WHERE name=?", (name,)).fetchone()
            # Never drop what no checkpoint covers: a new replica could not rebuild it.
            limit = min(upto, int(ckpt[0]) if ckpt else 0)
            cur = c.execute("DELETE FROM rampart_journal WHERE name=? AND seq<=?", (name, limit))
            return int(cur.rowcount)

        return int(self._run(go))

    def names(self) -> list[str]:
        rows = self._run(
            lambda c: c.execute("SELECT name FROM rampart_registries ORDER BY name").fetchall()
        )
        return [str(r[0]) for r in rows]

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            conn.close()
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.url!r})"
