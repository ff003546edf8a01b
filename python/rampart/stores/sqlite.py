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

Garbage: the file is shared with any client that can open it, so every value
read back is checked (stores/base.py): a journal row counts only with an
INTEGER ``seq`` in ``(0, last_seq]``; an entry that is not a BLOB is skipped by
every replica; an append lands after any row a foreign client put ahead of
``last_seq`` (within ``AHEAD_LIMIT``) and fills the sequence numbers it skips
with empty entries, so nothing can be slipped in below ``last_seq`` later.

Coroutines (the registry's ``a``-methods) reach the file through one writer
thread per store and process: it runs their calls (the same methods as below)
in order, resolving each coroutine's future on its loop. The event loop never
waits on SQLite's lock or an fsync, and no thread is started per call.

Change notification: a follower polls ``PRAGMA data_version`` (a read of shared
memory, a few µs) every ``poll_interval`` seconds and reads only when another
connection committed.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import queue
import sqlite3
import threading
import time
import urllib.parse
import weakref
from pathlib import Path
from typing import Any

from rampart._sqlite import retry_busy
from rampart.errors import InvalidArgumentError, RegistryFileError, StoreUnavailableError
from rampart.stores.base import (
    AHEAD_LIMIT,
    SEQ_MAX,
    Entries,
    checked_chain,
    checked_checkpoint,
    checked_seq,
    journal_entries,
)
from rampart.stores.redact import redacted

__all__ = ["SQLiteStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rampart_registries(
    name TEXT PRIMARY KEY, meta BLOB NOT NULL, last_seq INTEGER NOT NULL DEFAULT 0,
    low_seq INTEGER NOT NULL DEFAULT 0, low_chain BLOB);
CREATE TABLE IF NOT EXISTS rampart_journal(
    name TEXT NOT NULL, seq INTEGER NOT NULL, entry BLOB NOT NULL, chain BLOB,
    PRIMARY KEY(name, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rampart_checkpoints(
    name TEXT PRIMARY KEY, seq INTEGER NOT NULL, data BLOB NOT NULL);
"""

# A file written by a version without the low-water mark and the chain: the
# columns are added (writes upgrade it; read-only opens read it as it is), and
# each registry's mark is where its journal's first real entry shows
# compaction stopped (never past its checkpoint, which covers what was dropped).
_UPGRADE = (
    "ALTER TABLE rampart_registries ADD COLUMN low_seq INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE rampart_registries ADD COLUMN low_chain BLOB",
    "ALTER TABLE rampart_journal ADD COLUMN chain BLOB",
    "UPDATE rampart_registries SET low_seq = MAX(0, MIN("
    "COALESCE((SELECT c.seq FROM rampart_checkpoints c WHERE c.name = rampart_registries.name "
    "AND typeof(c.seq) = 'integer' AND c.seq BETWEEN 0 AND 9007199254740991), 0), "
    "COALESCE((SELECT MIN(j.seq) FROM rampart_journal j WHERE j.name = rampart_registries.name "
    "AND typeof(j.seq) = 'integer' AND j.seq >= 1 AND typeof(j.entry) = 'blob' "
    "AND length(j.entry) > 0) - 1, 9007199254740991)))",
)


def chain_of(prev: bytes | None, seq: int, entry: bytes) -> bytes:
    """The chain value of entry ``seq``: a hash of its predecessor's chain value
    (none for the first entry, or after one without a chain), its number and
    its bytes — so two histories that differ anywhere up to it differ here."""
    h = hashlib.blake2b(prev or b"", digest_size=16)
    h.update(seq.to_bytes(8, "big"))
    h.update(entry)
    return h.digest()


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
    where = redacted(url)  # a query can hold anything, a password given by mistake too
    if parsed.scheme != "sqlite":
        raise InvalidArgumentError(f"not a sqlite: URL: {where!r}")
    # sqlite:///abs/path.db -> /abs/path.db ; sqlite:rel/path.db -> rel/path.db
    raw = parsed.path if parsed.netloc == "" else parsed.netloc + parsed.path
    if url.startswith("sqlite://") and parsed.netloc:
        raise InvalidArgumentError(
            f"{where!r}: a sqlite URL names a file, sqlite:///abs/path.db or sqlite:rel/path.db"
        )
    if not raw:
        raise InvalidArgumentError(f"{where!r} names no file")
    query = dict(urllib.parse.parse_qsl(parsed.query))
    return Path(urllib.parse.unquote(raw)), query


def _checked(row: Any) -> tuple[int, bytes] | None:
    # SQLite keeps the types it was given: a seq stored as TEXT is damage.
    if row is None or not isinstance(row[0], int):
        return None
    return checked_checkpoint(row[0], row[1])


class SQLiteStore:
    """Journals in one SQLite file (see the module doc for the trade-offs).

    ``SQLiteStore("sqlite:///var/lib/agents.db")``; options in the URL query:
    ``synchronous`` (``full``, default, or ``normal``), ``timeout`` (seconds to
    wait for the writer lock, default 10), ``poll`` (follower poll interval in
    seconds, default 0.002). ``create=False``: never create the file or the
    tables, nor switch the file's journal mode (a missing file is
    StoreUnavailableError; a file without rampart's tables holds no registries)
    — for commands that only read.
    """

    def __init__(self, url: str, *, create: bool = True) -> None:
        self.path, query = _path_of(url)
        self.url = url
        self.create_missing = create
        where = redacted(url)
        sync = query.pop("synchronous", "full").upper()
        if sync not in ("FULL", "NORMAL", "EXTRA"):
            raise InvalidArgumentError(f"{where!r}: synchronous must be full, normal or extra")
        self.synchronous = sync
        try:
            self.timeout = float(query.pop("timeout", "10"))
            self.poll_interval = float(query.pop("poll", "0.002"))
        except ValueError:
            raise InvalidArgumentError(f"{where!r}: timeout and poll are numbers") from None
        if query:
            raise InvalidArgumentError(f"{where!r}: unknown options {sorted(query)}")
        self._local = threading.local()
        self._schema_ready = False
        self._has_schema = True
        self._chained = True
        self._gate = threading.Lock()
        self._writer: _Writer | None = None
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
        if self.create_missing:
            conn = sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=True
            )
        else:
            # mode=rw: open an existing file, never create one.
            uri = self.path.resolve().as_uri() + "?mode=rw"
            conn = sqlite3.connect(
                uri, timeout=self.timeout, isolation_level=None, check_same_thread=True, uri=True
            )
        try:
            deadline = time.monotonic() + self.timeout
            # Switching a fresh file to WAL takes an exclusive lock, and SQLite
            # answers BUSY at once there instead of calling its busy handler:
            # workers that start together (uvicorn --workers, a fork pool) would
            # fail to open. Retried here, within the same timeout.
            if self.create_missing:
                # Read-only openers leave the mode as it is: a file rampart made is
                # in WAL mode already, and switching a foreign one would write it.
                retry_busy(lambda: conn.execute("PRAGMA journal_mode=WAL"), deadline)
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            if not self._schema_ready:
                if self.create_missing:
                    retry_busy(lambda: conn.executescript(_SCHEMA), deadline)
                    if not self._columns(conn):
                        retry_busy(lambda: self._upgrade(conn), deadline)
                else:
                    found = conn.execute(
                        "SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN "
                        "('rampart_registries', 'rampart_journal', 'rampart_checkpoints')"
                    ).fetchone()
                    self._has_schema = found[0] == 3
                self._chained = self._has_schema and self._columns(conn)
                self._schema_ready = True
        except BaseException:
            conn.close()  # a half-set-up connection must not stay open
            raise
        self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    @staticmethod
    def _columns(conn: sqlite3.Connection) -> bool:
        """Whether the file has the low-water mark and chain columns."""
        cols = {r[1] for r in conn.execute("PRAGMA table_info(rampart_journal)")}
        cols |= {r[1] for r in conn.execute("PRAGMA table_info(rampart_registries)")}
        return {"chain", "low_seq", "low_chain"} <= cols

    @staticmethod
    def _upgrade(conn: sqlite3.Connection) -> None:
        """Add the columns to a file an older version wrote (once, whoever wins)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            if not SQLiteStore._columns(conn):
                for statement in _UPGRADE:
                    conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _writable(self, c: sqlite3.Connection) -> None:
        """A write to a file opened read-only (``create=False``) that an older
        version wrote: upgrade it first (writes need the new columns)."""
        if not self._chained:
            self._upgrade(c)
            self._chained = True

    def _low(self, c: sqlite3.Connection, name: str) -> tuple[int | None, bytes | None]:
        """The registry's low-water mark and the chain value of the entry at it.
        Compaction never sets it past the checkpoint, so a mark past the valid
        checkpoint (a foreign write) counts only up to it. None: a file without
        the column (opened read-only), where compaction is told by the oldest
        entry kept, as older versions did."""
        if not self._chained:
            return None, None
        row = c.execute(
            "SELECT low_seq, low_chain FROM rampart_registries WHERE name=?", (name,)
        ).fetchone()
        if row is None:
            return 0, None
        ck = _checked(
            c.execute("SELECT seq, data FROM rampart_checkpoints WHERE name=?", (name,)).fetchone()
        )
        low = checked_seq(row[0] if isinstance(row[0], int) else None) or 0
        top = ck[0] if ck else 0
        return min(low, top), checked_chain(row[1]) if low <= top else None

    def _chain_at(self, c: sqlite3.Connection, name: str, seq: int, low: int | None) -> Any:
        """The chain value the store holds for entry ``seq`` (None: none)."""
        if not self._chained or seq <= 0 or (low is not None and seq < low):
            return None
        if low is not None and seq == low:
            return c.execute(
                "SELECT low_chain FROM rampart_registries WHERE name=?", (name,)
            ).fetchone()[0]
        row = c.execute(
            "SELECT chain FROM rampart_journal WHERE name=? AND seq=?", (name, seq)
        ).fetchone()
        return None if row is None else row[0]

    def _gone(self, c: sqlite3.Connection, name: str, seq: int) -> bool:
        """Whether the journal holds no row ``seq`` (journal_entries only
        counts it above the low-water mark)."""
        if not self._chained or seq <= 0:
            return False
        return (
            c.execute(
                "SELECT 1 FROM rampart_journal WHERE name=? AND seq=?", (name, seq)
            ).fetchone()
            is None
        )

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
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _counter(self, c: sqlite3.Connection, name: str, *, appending: bool = False) -> int | None:
        """The registry's last sequence number (None: no such registry). A
        damaged ``last_seq`` (not an integer in range: a foreign write) is 0 for
        readers — they read only rows that run on from entry 1 without a gap,
        never a row a foreign client put past one — and, for an appender, the
        largest row or checkpoint there is, so the append lands past anything
        a reader may have passed (and repairs the counter)."""
        row = c.execute("SELECT last_seq FROM rampart_registries WHERE name=?", (name,)).fetchone()
        if row is None:
            return None
        n = checked_seq(row[0] if isinstance(row[0], int) else None)
        if n is None:
            n = 0
            if appending:
                top = c.execute(
                    "SELECT MAX(seq) FROM rampart_journal WHERE name=? AND "
                    "typeof(seq)='integer' AND seq BETWEEN 1 AND ?",
                    (name, SEQ_MAX - AHEAD_LIMIT),
                ).fetchone()[0]
                ck = _checked(
                    c.execute(
                        "SELECT seq, data FROM rampart_checkpoints WHERE name=?", (name,)
                    ).fetchone()
                )
                n = max(int(top or 0), ck[0] if ck else 0)
        return n

    def _visible(self, c: sqlite3.Connection, name: str) -> int | None:
        """How far every reader reads: the counter, extended through rows that
        follow it without a gap (a counter set back by a foreign write must not
        hide entries replicas have applied; an append fills every gap below its
        entry, so rows run on without one up to the real end). A row past a gap
        is not read until an append seals the gap."""
        last = self._counter(c, name)
        if last is None:
            return None
        return self._run_end(c, name, max(last, self._low(c, name)[0] or 0))

    def _run_end(self, c: sqlite3.Connection, name: str, last: int) -> int:
        """``last`` extended through the rows that follow it without a gap
        (boundedly: 64 windows of AHEAD_LIMIT)."""
        for _ in range(64):
            run = c.execute(
                "SELECT seq FROM rampart_journal WHERE name=? AND typeof(seq)='integer' "
                "AND seq>? AND seq<=? ORDER BY seq",
                (name, last, last + AHEAD_LIMIT),
            ).fetchall()
            start = last
            for (seq,) in run:
                if seq != last + 1:
                    return last
                last = seq
            if last < start + AHEAD_LIMIT:
                return last
        return last

    def _rows(self, c: sqlite3.Connection, name: str, after: int, upto: int, limit: int) -> Any:
        chain = "chain" if self._chained else "NULL"
        return c.execute(
            f"SELECT seq, entry, {chain} FROM rampart_journal WHERE name=? AND "
            "typeof(seq)='integer' AND seq>? AND seq<=? ORDER BY seq LIMIT ?",
            (name, after, upto, limit),
        ).fetchall()

    # ---- the Store protocol ---------------------------------------------------------

    def _tables(self) -> bool:
        """Whether the file has rampart's tables (always, unless ``create=False``
        found a file without them)."""
        self._conn()
        return self._has_schema

    def exists(self) -> bool:
        """Whether the file is there with rampart's tables (creates nothing when
        the store was opened with ``create=False``)."""
        return self.path.exists() and self._tables()

    def meta(self, name: str) -> bytes | None:
        def go(c: sqlite3.Connection) -> Any:
            if not self._has_schema:
                return None
            return c.execute("SELECT meta FROM rampart_registries WHERE name=?", (name,)).fetchone()

        row = self._run(go)
        if row is None:
            return None
        if not isinstance(row[0], bytes) or not row[0]:
            raise RegistryFileError(
                f"store {self.url}: registry {name!r} has a damaged metadata record "
                f"(a {type(row[0]).__name__}, not a BLOB)"
            )
        return bytes(row[0])

    def create(self, name: str, meta: bytes, entries: list[bytes]) -> bool:
        def go(c: sqlite3.Connection) -> bool:
            if not self._has_schema:
                raise InvalidArgumentError(
                    f"store {self.url} was opened with create=False and has no rampart "
                    f"tables: registry {name!r} is not created"
                )
            self._writable(c)
            c.execute("BEGIN IMMEDIATE")
            if c.execute("SELECT 1 FROM rampart_registries WHERE name=?", (name,)).fetchone():
                c.execute("ROLLBACK")
                return False
            # Rows under a name no registry holds are a foreign client's: a new
            # registry starts its journal afresh.
            c.execute("DELETE FROM rampart_journal WHERE name=?", (name,))
            c.execute("DELETE FROM rampart_checkpoints WHERE name=?", (name,))
            c.execute(
                "INSERT INTO rampart_registries(name, meta, last_seq) VALUES (?, ?, ?)",
                (name, meta, len(entries)),
            )
            rows, prev = [], None
            for k, e in enumerate(entries):
                prev = chain_of(prev, k + 1, e)
                rows.append((name, k + 1, e, prev))
            c.executemany(
                "INSERT INTO rampart_journal(name, seq, entry, chain) VALUES (?, ?, ?, ?)", rows
            )
            c.execute("COMMIT")
            return True

        return bool(self._run(go))

    def append(self, name: str, entry: bytes, after: int) -> tuple[int, Entries]:
        def go(c: sqlite3.Connection) -> tuple[int, Entries]:
            self._writable(c)
            c.execute("BEGIN IMMEDIATE")
            last = self._counter(c, name, appending=True)
            if last is None:
                c.execute("ROLLBACK")
                raise InvalidArgumentError(f"store {self.url} holds no registry {name!r}")
            # Land after whatever a foreign client put just ahead of the counter
            # (a row there would otherwise collide with this append forever).
            ahead = c.execute(
                "SELECT MAX(seq) FROM rampart_journal WHERE name=? AND typeof(seq)='integer' "
                "AND seq>? AND seq<=?",
                (name, last, last + AHEAD_LIMIT),
            ).fetchone()[0]
            seq = max(last, int(ahead or 0)) + 1
            # A run of rows reaching past the window (a counter set back by a
            # foreign write): jump a window at a time, boundedly.
            for _ in range(64):
                if (
                    seq > SEQ_MAX
                    or not c.execute(
                        "SELECT 1 FROM rampart_journal WHERE name=? AND seq=?", (name, seq)
                    ).fetchone()
                ):
                    break
                top = c.execute(
                    "SELECT MAX(seq) FROM rampart_journal WHERE name=? AND "
                    "typeof(seq)='integer' AND seq BETWEEN ? AND ?",
                    (name, seq, seq + AHEAD_LIMIT),
                ).fetchone()[0]
                seq = int(top) + 1
            else:
                seq = SEQ_MAX + 1
            if seq > SEQ_MAX:
                c.execute("ROLLBACK")
                raise RegistryFileError(
                    f"store {self.url}: registry {name!r}: no free sequence number after "
                    f"{last} (the journal's counter is far behind its entries: damaged)"
                )
            end = c.execute(
                "SELECT MAX(seq) FROM rampart_journal WHERE name=? AND typeof(seq)='integer' "
                "AND seq BETWEEN 1 AND ?",
                (name, last),
            ).fetchone()[0]
            low, _ = self._low(c, name)
            end = max(int(end or 0), last - AHEAD_LIMIT)
            # Where readers can have got to: the rows that run on from the
            # counter (or, when it is damaged, from the low-water mark) without
            # a gap. Nothing is sealed at or below the mark: compaction dropped
            # those entries, and a replica that needs them reloads the checkpoint.
            end = min(end, self._run_end(c, name, max(self._counter(c, name) or 0, low or 0)))
            end = max(end, seq - 1 - 64 * AHEAD_LIMIT, low or 0)
            if seq > end + 1:
                # Seal the numbers skipped over with empty entries (every replica
                # skips them), so that no row can be slipped in below the counter.
                c.execute(
                    "WITH RECURSIVE s(x) AS (SELECT ? UNION ALL SELECT x+1 FROM s WHERE x<?) "
                    "INSERT OR IGNORE INTO rampart_journal(name, seq, entry) "
                    "SELECT ?, x, X'' FROM s",
                    (end + 1, seq - 1, name),
                )
            c.execute(
                "UPDATE rampart_registries SET last_seq=? WHERE name=?",
                (seq, name),
            )
            prev = checked_chain(self._chain_at(c, name, seq - 1, low))
            c.execute(
                "INSERT INTO rampart_journal(name, seq, entry, chain) VALUES (?, ?, ?, ?)",
                (name, seq, entry, chain_of(prev, seq, entry)),
            )
            tail = self._rows(c, name, after, seq, -1)
            anchor = self._chain_at(c, name, after, low)
            gone = self._gone(c, name, after)
            c.execute("COMMIT")
            return seq, journal_entries(tail, after, seq, low=low, anchor=anchor, gone=gone)

        result: tuple[int, Entries] = self._run(go)
        return result

    def read(self, name: str, after: int, limit: int = 10_000) -> Entries:
        def go(c: sqlite3.Connection) -> tuple[int | None, Any, int | None, Any, bool]:
            if not self._has_schema:
                return None, [], None, None, False
            # One read transaction: the counter, the mark, the rows and the
            # chain from one snapshot.
            c.execute("BEGIN")
            last = self._visible(c, name)
            rows = [] if last is None else self._rows(c, name, after, last, limit)
            low, _ = self._low(c, name)
            anchor = self._chain_at(c, name, after, low)
            gone = self._gone(c, name, after)
            c.execute("COMMIT")
            return last, rows, low, anchor, gone

        last, rows, low, anchor, gone = self._run(go)
        if last is None:
            return Entries()
        return journal_entries(
            rows, after, None if len(rows) >= limit else last, low=low, anchor=anchor, gone=gone
        )

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
                        return Entries()
                    time.sleep(self.poll_interval)
            except sqlite3.Error as e:
                raise StoreUnavailableError(f"SQLite store {self.path}: {e}") from None
            entries = self.read(name, after)
        return entries

    def _data_version(self, c: sqlite3.Connection) -> int:
        with self._gate:
            return int(c.execute("PRAGMA data_version").fetchone()[0])

    def first_seq(self, name: str) -> int:
        if not self._tables():
            return 0
        row = self._run(
            lambda c: c.execute(
                "SELECT MIN(seq) FROM rampart_journal WHERE name=? AND typeof(seq)='integer' "
                "AND seq BETWEEN 1 AND ?",
                (name, SEQ_MAX),
            ).fetchone()
        )
        return int(row[0] or 0)

    def last_seq(self, name: str) -> int:
        def go(c: sqlite3.Connection) -> int:
            if not self._has_schema:
                return 0
            c.execute("BEGIN")
            upto = self._visible(c, name)
            row = c.execute(
                "SELECT MAX(seq) FROM rampart_journal WHERE name=? AND typeof(seq)='integer' "
                "AND seq BETWEEN 1 AND ?",
                (name, upto or 0),
            ).fetchone()
            low, _ = self._low(c, name)
            c.execute("COMMIT")
            # The last entry there is: what sync() waits for (a checkpoint's seq
            # is not: a foreign one could name an entry that never comes); at
            # least the low-water mark, which a replica reaches by the checkpoint.
            return max(int(row[0] or 0), low or 0)

        return int(self._run(go))

    def put_checkpoint(self, name: str, seq: int, data: bytes, chain: bytes | None = None) -> bool:
        # A damaged checkpoint row (a seq that is not an integer or out of range,
        # data that is not a BLOB or empty) is replaced: SQLite orders an INTEGER
        # below any TEXT, and a foreign seq past SEQ_MAX would otherwise win forever.
        # A checkpoint of another history than the store's (a replica that kept
        # a fork: its chain value at ``seq`` is not the store's) is refused.
        def go(c: sqlite3.Connection) -> bool:
            self._writable(c)
            c.execute("BEGIN IMMEDIATE")
            low, _ = self._low(c, name)
            theirs = checked_chain(self._chain_at(c, name, seq, low))
            if theirs is not None and chain != theirs:
                c.execute("ROLLBACK")
                return False
            c.execute(
                "INSERT INTO rampart_checkpoints(name, seq, data) VALUES (?, ?, ?) "
                "ON CONFLICT(name) DO UPDATE SET seq=excluded.seq, data=excluded.data "
                "WHERE excluded.seq > rampart_checkpoints.seq "
                "OR typeof(rampart_checkpoints.seq) != 'integer' "
                "OR rampart_checkpoints.seq NOT BETWEEN 0 AND ? "
                "OR typeof(rampart_checkpoints.data) != 'blob' "
                "OR length(rampart_checkpoints.data) = 0",
                (name, seq, data, SEQ_MAX),
            )
            c.execute("COMMIT")
            return True

        return bool(self._run(go))

    def checkpoint(self, name: str) -> tuple[int, bytes] | None:
        if not self._tables():
            return None
        row = self._run(
            lambda c: c.execute(
                "SELECT seq, data FROM rampart_checkpoints WHERE name=?", (name,)
            ).fetchone()
        )
        if row is None:
            return None
        ck = _checked(row)
        if ck is None:
            raise RegistryFileError(
                f"store {self.url}: registry {name!r} has a damaged checkpoint row"
            )
        return ck

    def compact(self, name: str, upto: int) -> int:
        def go(c: sqlite3.Connection) -> int:
            self._writable(c)
            c.execute("BEGIN IMMEDIATE")
            row = c.execute(
                "SELECT seq, data FROM rampart_checkpoints WHERE name=?", (name,)
            ).fetchone()
            ck = _checked(row)
            # Never drop what no checkpoint covers: a new replica could not rebuild it.
            limit = min(upto, ck[0] if ck else 0)
            low, _ = self._low(c, name)
            if limit <= (low or 0):
                c.execute("ROLLBACK")
                return 0
            # The mark moves in the same transaction as the entries go: a reader
            # sees either the entries or the mark that says where they went.
            chain = self._chain_at(c, name, limit, low)
            cur = c.execute("DELETE FROM rampart_journal WHERE name=? AND seq<=?", (name, limit))
            c.execute(
                "UPDATE rampart_registries SET low_seq=?, low_chain=? WHERE name=?",
                (limit, checked_chain(chain), name),
            )
            c.execute("COMMIT")
            return int(cur.rowcount)

        return int(self._run(go))

    def low_seq(self, name: str) -> int:
        """Compaction's low-water mark: every entry up to it may have been
        dropped (a replica that needs one reloads the checkpoint)."""
        return int(self._run(lambda c: self._low(c, name)[0] or 0))

    def names(self) -> list[str]:
        from rampart.stores import valid_name

        def go(c: sqlite3.Connection) -> Any:
            if not self._has_schema:
                return []
            return c.execute("SELECT name FROM rampart_registries ORDER BY name").fetchall()

        return [r[0] for r in self._run(go) if valid_name(r[0])]

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            conn.close()
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"SQLiteStore({redacted(self.url)!r})"

    # ---- asyncio: one writer thread per store -----------------------------------------

    def _awriter(self) -> _Writer:
        w = self._writer
        if w is None or w.pid != os.getpid():  # a forked child starts its own
            w = self._writer = _Writer(self)
        return w

    async def aappend(self, name: str, entry: bytes, after: int) -> tuple[int, Entries]:
        """:meth:`append` for coroutines, on the store's writer thread."""
        result: tuple[int, Entries] = await self._awriter().call(self.append, (name, entry, after))
        return result

    async def aread(self, name: str, after: int, limit: int = 10_000) -> Entries:
        """:meth:`read` for coroutines, on the store's writer thread."""
        result: Entries = await self._awriter().call(self.read, (name, after, limit))
        return result

    async def alast_seq(self, name: str) -> int:
        """:meth:`last_seq` for coroutines, on the store's writer thread."""
        return int(await self._awriter().call(self.last_seq, (name,)))

    async def aclose(self) -> None:
        """Stop the writer thread (it closes its connection); a later call starts
        a new one."""
        w, self._writer = self._writer, None
        if w is not None and w.pid == os.getpid():
            await w.call(None, ())


def _settle(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.done():  # the caller was cancelled: its result is dropped
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


class _Writer:
    """The thread that runs a store's calls for coroutines, in arrival order."""

    def __init__(self, store: SQLiteStore) -> None:
        self.pid = os.getpid()
        self._store = weakref.ref(store)
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="rampart-sqlite-writer", daemon=True).start()

    async def call(self, fn: Any, args: tuple[Any, ...]) -> Any:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._jobs.put((fn, args, loop, fut))
        return await fut

    @staticmethod
    def _reply(job: Any, result: Any, error: BaseException | None) -> None:
        _, _, loop, fut = job
        try:
            loop.call_soon_threadsafe(_settle, fut, result, error)
        except RuntimeError:  # the loop is closed: nobody is waiting
            pass

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            store = self._store()  # not kept between jobs: the store may go away
            if store is None or job[0] is None:
                conn = getattr(store._local, "conn", None) if store is not None else None
                if conn is not None:  # this thread's connection, not the others'
                    conn.close()
                    store._local.conn = None  # type: ignore[union-attr]
                if job[0] is None:
                    self._reply(job, None, None)
                return
            del store
            try:
                result = job[0](*job[1])
            except BaseException as e:  # handed to the caller
                self._reply(job, None, e)
            else:
                self._reply(job, result, None)
