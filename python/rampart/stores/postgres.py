"""The PostgreSQL store: journals in three tables of a database you already run.

Layout, as in the SQLite store and shared by every registry of the database:
``rampart_registries`` (name, metadata, last sequence number),
``rampart_journal`` (name, seq, entry) and ``rampart_checkpoints`` (name, seq,
data), in the first schema of the connection's ``search_path``. The first store
to connect creates them (under an advisory lock, so racing processes create them
once), with the functions below (``rampart_append_v3``, ``rampart_visible_v3``).

Append: one statement, ``SELECT … FROM rampart_append_v3(name, entry, after)``,
run in its own transaction. The function locks the registry row (the lock
orders appenders of one registry and leaves other registries alone), picks the
entry's seq by the SQLite store's rules (``last_seq + 1``, or past entries a
foreign client put ahead of it, sealing the numbers skipped with empty entries),
sets ``last_seq``, inserts the entry, reads the tail the appender has not
applied (a new snapshot, so it sees every entry committed before it took the
lock) and queues a ``NOTIFY``. One round trip.

Garbage: the database is shared with any client that can write to the tables,
so every value read back is checked (stores/base.py, docs/shared.md "Garbage in
the store"), by the same rules as the SQLite store: the columns are typed and
``NOT NULL``, so the damage a foreign client can do is a number out of range (a
``seq`` or ``last_seq`` outside ``[0, 2**53 - 1]``), empty or garbage bytes,
holes, rows ahead of the counter, rows under other names. How far readers read
is ``rampart_visible_v3(name)``, evaluated in the reading statement's snapshot.

Durability: ``synchronous_commit``. By default the store makes sure it is at
least ``on`` for its sessions (a commit returns once the WAL is flushed on the
server, so an acknowledged write survives ``kill -9`` of the server and power
loss); a stronger setting the server or role already has (``remote_write``,
``remote_apply``, for synchronous standbys) is kept. ``?synchronous_commit=off``
trades the last few hundred milliseconds of acknowledged writes on a server crash
for latency; any value in the URL is used as given.

Change notification: followers ``LISTEN`` on one channel per registry
(``rampart_`` + a hash of its name) on a connection of their own and sleep in
``select()`` on its socket: no polling. A notification wakes them; they read.

Connections: a ``psycopg_pool.ConnectionPool`` per store object (and process: a
forked child opens its own), autocommit, with TCP keepalives and a user timeout
so a dead host is noticed. A pooled connection whose socket has anything to read
while idle (the server closed it: a restart, a failover) is dropped before use,
without a round trip.
"""

from __future__ import annotations

import hashlib
import os
import select
import threading
import time
import urllib.parse
import weakref
from typing import Any

from rampart.errors import InvalidArgumentError, RegistryFileError, StoreUnavailableError
from rampart.stores.base import (
    SEQ_MAX,
    Entries,
    checked_checkpoint,
    journal_entries,
)
from rampart.stores.postgres_schema import (
    _APPEND_FN,
    _CHAIN_FN,
    _LOW_FN,
    _SCHEMA,
    _SCHEMA_READY,
    _VISIBLE_FN,
)
from rampart.stores.redact import guard_loggers, redacted, remember

__all__ = ["PostgresStore"]


def _ready(conn: Any) -> bool:
    return bool(conn.execute(_SCHEMA_READY).fetchone()[0])


def _some_table(conn: Any) -> bool:
    return bool(conn.execute("SELECT to_regclass('rampart_registries') IS NOT NULL").fetchone()[0])


# Any constant: the advisory lock that serialises schema creation across processes.
_SCHEMA_LOCK = 0x72616D7061727431  # "rampart1"

_SYNC_VALUES = ("on", "off", "local", "remote_write", "remote_apply")

# Our options, taken out of the URL before libpq sees it.
_OPTIONS = ("synchronous_commit", "pool_max", "timeout")

# libpq parameters the store sets unless the URL does: a dead server host is
# noticed in seconds instead of the kernel's ~15 minutes.
_LIBPQ_DEFAULTS = {
    "connect_timeout": "5",
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}


def _chain_of(prev: bytes, seq: int, entry: bytes) -> bytes:
    """The chain value ``rampart_append_v3`` gives entry ``seq``, for the
    entries a registry is created with."""
    return hashlib.sha256(prev + seq.to_bytes(8, "big", signed=True) + entry).digest()[:16]


def channel(name: str) -> str:
    """The ``NOTIFY`` channel of registry ``name`` (a channel is an identifier of
    at most 63 bytes; a name may have 200 characters)."""
    return "rampart_" + hashlib.sha256(name.encode()).hexdigest()[:24]


# Stores of this process: a forked child must not touch its parent's pool or
# connections (their sockets are shared with the parent, their threads are gone).
_STORES: weakref.WeakSet[PostgresStore] = weakref.WeakSet()
# What a child inherited: kept referenced so that no finaliser ever runs on it in
# the child (a pool's would wait for threads that do not exist there).
_INHERITED: list[Any] = []


def _after_fork_in_child() -> None:
    for store in list(_STORES):
        _INHERITED.append((store._pool, store._listener))
        store._pool = None
        store._listener = None
        store._channels = set()
        store._lock = threading.Lock()
        store._listen_lock = threading.Lock()
        store._pid = os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)


class PostgresStore:
    """Journals in PostgreSQL ≥ 12 (``postgresql://`` or ``postgres://`` URLs as
    libpq reads them). Needs the ``postgres`` extra (psycopg 3 with its binary and
    pool packages).

    Options in the URL query, besides libpq's own (``sslmode``,
    ``application_name``, ``options=-csearch_path=…``, …):
    ``synchronous_commit`` (see the module doc; default: at least ``on``),
    ``pool_max`` (connections per store object, default 4; a follower holds one
    more for ``LISTEN``) and ``timeout`` (seconds a call waits for a connection,
    default 5).

    ``create=False``: never create the tables or functions. A database without
    them holds no registries (reads find nothing, ``create`` is refused), so a
    role without ``CREATE`` can open and read, and a read-only command leaves the
    database as it was.
    """

    def __init__(self, url: str, *, create: bool = True) -> None:
        remember(url)  # before anything can quote it
        try:
            import psycopg
            import psycopg_pool
        except ImportError as exc:
            # psycopg and psycopg-pool are two packages: the message names the one
            # missing (psycopg without its libpq says so too), and the extra that
            # brings both.
            missing = exc.name or "psycopg"
            raise InvalidArgumentError(
                f"store {redacted(url)!r} needs {missing.replace('_', '-')}, which cannot be "
                f'imported ({exc}): pip install "rampart-registry[postgres]"'
            ) from None
        guard_loggers()
        self.url = url
        self.create_missing = create
        self._where = redacted(url)
        self._psycopg = psycopg
        self._psycopg_pool = psycopg_pool
        self._conninfo, options = self._parse(url)
        sync = options.get("synchronous_commit")
        sync = None if sync is None else sync.lower()
        if sync is not None and sync not in _SYNC_VALUES:
            raise InvalidArgumentError(
                f"{self._where!r}: synchronous_commit must be one of {', '.join(_SYNC_VALUES)}"
            )
        self.synchronous_commit = sync
        try:
            self.pool_max = int(options.get("pool_max", "4"))
            self.timeout = float(options.get("timeout", "5"))
        except ValueError:
            raise InvalidArgumentError(
                f"{self._where!r}: pool_max is a whole number, timeout a number of seconds"
            ) from None
        if not 1 <= self.pool_max <= 1000 or not 0 < self.timeout <= 3600:
            raise InvalidArgumentError(
                f"{self._where!r}: pool_max is 1-1000 and timeout 0-3600 seconds"
            )
        self._pool: Any = None
        self._listener: Any = None
        self._channels: set[str] = set()
        self._schema_ready = False
        self._connect_error: str | None = None
        self._connect_failures = 0  # failed connection attempts so far
        self._lock = threading.Lock()
        self._listen_lock = threading.Lock()
        self._pid = os.getpid()
        _STORES.add(self)

    def _parse(self, url: str) -> tuple[str, dict[str, str]]:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        scheme = url.split("://", 1)[0]
        if scheme not in ("postgresql", "postgres"):
            raise InvalidArgumentError(f"not a postgresql:// URL: {self._where!r}")
        parts = urllib.parse.urlsplit(url)
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in query if k in _OPTIONS}
        rest = urllib.parse.urlencode([(k, v) for k, v in query if k not in _OPTIONS])
        # Not urlunsplit: it drops the "//" of a URL without a host
        # ("postgresql:///db?host=/run/pg"), which libpq then refuses.
        libpq_url = url.split("?", 1)[0].split("#", 1)[0] + ("?" + rest if rest else "")
        try:
            params = conninfo_to_dict(libpq_url)
        except self._psycopg.ProgrammingError as e:
            raise InvalidArgumentError(
                redacted(f"bad PostgreSQL URL {self._where!r}: {e}")
            ) from None
        for k, v in _LIBPQ_DEFAULTS.items():
            params.setdefault(k, v)
        return make_conninfo("", **params), ours

    # ---- connections ------------------------------------------------------------------

    def _configure(self, conn: Any) -> None:
        # Runs once per new pooled connection: the durability the URL asked for,
        # or at least "on" (see the module doc).
        if self.synchronous_commit is not None:
            conn.execute("SELECT set_config('synchronous_commit', %s, false)",
                         (self.synchronous_commit,))  # fmt: skip
        else:
            conn.execute(
                "SELECT CASE WHEN current_setting('synchronous_commit') IN ('off', 'local') "
                "THEN set_config('synchronous_commit', 'on', false) END"
            )

    def _connection_class(self) -> Any:
        """psycopg's Connection, remembering whether the last connection attempt
        failed and counting failures: a call that sees an attempt fail while it
        waits fails with that error instead of waiting ``timeout`` for a pool that
        cannot grow."""
        store = weakref.ref(self)

        class Connection(self._psycopg.Connection):  # type: ignore[misc,name-defined]
            @classmethod
            def connect(cls, *args: Any, **kwargs: Any) -> Any:
                try:
                    conn = super().connect(*args, **kwargs)
                except Exception as e:
                    if (s := store()) is not None:
                        s._connect_error = redacted(str(e).strip())
                        s._connect_failures += 1
                    raise
                if (s := store()) is not None:
                    s._connect_error = None
                return conn

        return Connection

    def _get_pool(self) -> Any:
        pool = self._pool
        if pool is not None:
            return pool
        with self._lock:
            if self._pool is None:
                pool = self._psycopg_pool.ConnectionPool(
                    self._conninfo,
                    connection_class=self._connection_class(),
                    kwargs={"autocommit": True},
                    min_size=1,
                    max_size=self.pool_max,
                    timeout=self.timeout,
                    # The pool's own reconnection backs off (1 s, 2 s, 4 s…): give
                    # it up after a second; the next call starts a fresh attempt at
                    # once, so a server that comes back is used within ~1 s.
                    reconnect_timeout=1.0,
                    configure=self._configure,
                    num_workers=1,
                    name=f"rampart {self._where}",
                    open=False,
                )
                # Not waiting here: the first call's _getconn fails at once with
                # libpq's error when the server refuses (a wrong password, down).
                pool.open(wait=False)
                self._pool = pool
                if not self._schema_ready:
                    try:
                        self._ensure_schema()
                    except BaseException:
                        # No half-opened store: the next call starts over.
                        self._pool = None
                        pool.close()
                        raise
            return self._pool

    def _idle_and_alive(self, conn: Any) -> bool:
        """An idle pooled connection has nothing to read; if its socket does, the
        server closed it (or sent an error before doing so): do not use it."""
        if conn.closed or conn.broken:
            return False
        try:
            readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
        except (OSError, ValueError, self._psycopg.Error):
            return False
        return not readable

    def _getconn(self) -> tuple[Any, Any]:
        """A live connection and the pool it belongs to."""
        pool = self._get_pool()
        deadline = time.monotonic() + self.timeout
        failures = self._connect_failures
        dropped = 0
        while True:
            try:
                # In slices: a server found down meanwhile ends the wait.
                conn = pool.getconn(timeout=max(0.001, min(0.1, deadline - time.monotonic())))
            except self._psycopg_pool.PoolTimeout:
                error = self._connect_error
                # Only an attempt that failed during this wait says the server is
                # down *now*: an error left from an outage that has ended would fail
                # the first calls after it while the pool's next attempt (within
                # ~1 s, or at once when it had given up) is about to succeed.
                if error is not None and (
                    self._connect_failures != failures or time.monotonic() >= deadline
                ):
                    raise StoreUnavailableError(
                        f"PostgreSQL store {self._where}: cannot connect: {error}"
                    ) from None
                if time.monotonic() >= deadline:
                    raise StoreUnavailableError(
                        f"PostgreSQL store {self._where}: no free connection within "
                        f"{self.timeout} s (pool_max={self.pool_max})"
                    ) from None
                continue
            except self._psycopg_pool.PoolClosed:
                raise StoreUnavailableError(
                    f"PostgreSQL store {self._where}: closed while in use"
                ) from None
            if self._idle_and_alive(conn):
                return pool, conn
            # Closed by the server (a restart): drop it without waiting (the
            # pool's own check loop would sleep a second between attempts).
            conn.close()
            pool.putconn(conn)
            dropped += 1
            if dropped > self.pool_max:
                raise StoreUnavailableError(
                    f"PostgreSQL store {self._where}: every pooled connection was closed "
                    "by the server"
                )

    def _run(self, fn: Any, *, retry: bool = True) -> Any:
        """``fn(conn)`` on a pooled connection; failures become StoreUnavailableError.
        ``retry``: run once more on a fresh connection when the connection broke
        (only for calls that may safely run twice: never an append)."""
        psycopg = self._psycopg
        for attempt in (0, 1):
            pool, conn = self._getconn()
            try:
                return fn(conn)
            except psycopg.OperationalError as e:
                if retry and attempt == 0 and conn.broken:
                    continue
                raise StoreUnavailableError(
                    redacted(f"PostgreSQL store {self._where}: {e}")
                ) from None
            except psycopg.Error as e:
                # The server is there but refuses: read-only (a standby), out of
                # disk, the tables dropped under us, a permission. Typed, named.
                raise StoreUnavailableError(
                    redacted(f"PostgreSQL store {self._where}: {type(e).__name__}: {e}")
                ) from None
            finally:
                # A broken connection is replaced; one from a pool closed meanwhile
                # is closed.
                pool.putconn(conn)
        raise AssertionError("unreachable")  # pragma: no cover

    def _ensure_schema(self) -> None:
        def create(conn: Any) -> None:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                if not _ready(conn):
                    conn.execute(_SCHEMA)

        if not self._run(_ready):
            if not self.create_missing:
                return  # create=False: found by _tables(), never created here
            self._run(create)
        self._schema_ready = True

    def _tables(self) -> bool:
        """Whether rampart's tables and functions are in the database. Always
        after the first call of a store that creates them; with ``create=False``,
        looked for again on each call until another store has created them (a
        database without them holds no registries)."""
        if not self._schema_ready:
            self._get_pool()
        if not self._schema_ready and self._run(_ready):
            self._schema_ready = True
        if not self._schema_ready and self._run(_some_table):
            raise StoreUnavailableError(
                f"PostgreSQL store {self._where}: rampart's tables are there but not its "
                f"functions ({_APPEND_FN}, {_VISIBLE_FN}: an older rampart created them); "
                "open it once without create=False, as a role with CREATE, to add them"
            )
        return self._schema_ready

    def exists(self) -> bool:
        """Whether the database holds rampart's tables (creates nothing when the
        store was opened with ``create=False``)."""
        return self._tables()

    # ---- reading rows -----------------------------------------------------------------

    def _read_on(self, conn: Any, name: str, after: int, limit: int) -> Entries:
        """The journal entries after ``after`` (at most ``limit``), as every
        replica takes them: the counter and the rows from one statement, so one
        snapshot; only rows up to where readers read (``rampart_visible_v2``)."""
        rows = conn.execute(
            f"SELECT v.last, v.low, v.anchor, v.gone, j.seq, j.entry, j.chain FROM (SELECT "
            f"{_VISIBLE_FN}(%s) AS last, {_LOW_FN}(%s) AS low, {_CHAIN_FN}(%s, %s) AS anchor, "
            "NOT EXISTS (SELECT 1 FROM rampart_journal WHERE name = %s AND seq = %s) AS gone) v "
            "LEFT JOIN LATERAL (SELECT seq, entry, chain FROM rampart_journal WHERE name = %s "
            "AND seq > %s AND seq <= v.last ORDER BY seq LIMIT %s) j ON true",
            (name, name, name, after, name, after, name, after, limit),
        ).fetchall()
        if not rows or rows[0][0] is None:  # no such registry
            return Entries()
        last = min(int(rows[0][0]), SEQ_MAX)
        low, anchor, gone = int(rows[0][1]), rows[0][2], bool(rows[0][3]) and after > 0
        got = [(s, e, ch) for _, _, _, _, s, e, ch in rows if s is not None]
        return journal_entries(
            got, after, None if len(got) >= limit else last, low=low, anchor=anchor, gone=gone
        )

    # ---- the Store protocol -------------------------------------------------------------

    def meta(self, name: str) -> bytes | None:
        if not self._tables():
            return None
        row = self._run(
            lambda c: c.execute(
                "SELECT meta FROM rampart_registries WHERE name = %s", (name,)
            ).fetchone()
        )
        if row is None:
            return None
        if not row[0]:
            # BYTEA NOT NULL: the only damage a foreign client can do is an empty one.
            raise RegistryFileError(
                f"store {self._where}: registry {name!r} has a damaged metadata record (empty)"
            )
        return bytes(row[0])

    def create(self, name: str, meta: bytes, entries: list[bytes]) -> bool:
        if not self._tables():
            raise InvalidArgumentError(
                f"store {self._where} was opened with create=False and has no rampart "
                f"tables: registry {name!r} is not created"
            )

        def go(c: Any) -> bool:
            with c.transaction():
                # Racing creators: the loser waits for the winner's commit, then
                # conflicts and inserts nothing.
                won = c.execute(
                    "INSERT INTO rampart_registries(name, meta, last_seq) VALUES (%s, %s, %s) "
                    "ON CONFLICT (name) DO NOTHING RETURNING 1",
                    (name, meta, len(entries)),
                ).fetchone()
                if won is None:
                    return False
                # Rows under a name no registry holds are a foreign client's: a
                # new registry starts its journal afresh.
                c.execute("DELETE FROM rampart_journal WHERE name = %s", (name,))
                c.execute("DELETE FROM rampart_checkpoints WHERE name = %s", (name,))
                if entries:
                    chains, prev = [], b""
                    for k, e in enumerate(entries):
                        prev = _chain_of(prev, k + 1, e)
                        chains.append(prev)
                    c.execute(
                        "INSERT INTO rampart_journal(name, seq, entry, chain) SELECT %s, k, e, h "
                        "FROM unnest(%s::bytea[], %s::bytea[]) WITH ORDINALITY AS t(e, h, k)",
                        (name, entries, chains),
                    )
                    c.execute("SELECT pg_notify(%s, %s)", (channel(name), name))
                return True

        # Safe to run twice: a creation that committed before the reply was lost
        # reads as "another process created it", and the caller joins it.
        return bool(self._run(go))

    def append(self, name: str, entry: bytes, after: int) -> tuple[int, Entries]:
        row = self._run(
            lambda c: c.execute(
                "SELECT own, counter, seqs, entries, chains, low, anchor "
                f"FROM {_APPEND_FN}(%s, %s, %s)",
                (name, entry, after),
            ).fetchone(),
            retry=False,  # it may have committed: only the journal can say
        )
        if row is None or row[0] is None:
            raise InvalidArgumentError(f"store {self._where} holds no registry {name!r}")
        own, counter, seqs, entries, chains, low, anchor = row
        if own < 0:
            raise RegistryFileError(
                f"store {self._where}: registry {name!r}: no free sequence number after "
                f"{counter} (the journal's counter is far behind its entries: damaged)"
            )
        rows = zip(seqs or [], entries or [], chains or [None] * len(seqs or []), strict=False)
        return int(own), journal_entries(rows, after, int(own), low=int(low), anchor=anchor)

    def read(self, name: str, after: int, limit: int = 10_000) -> Entries:
        if not self._tables():
            return Entries()
        result: Entries = self._run(lambda c: self._read_on(c, name, after, limit))
        return result

    def wait(
        self, name: str, after: int, timeout: float, stop: threading.Event | None = None
    ) -> Entries:
        deadline = time.monotonic() + timeout
        with self._listen_lock:
            self._listen(name)
            entries = self._read_listening(name, after)
            # Listening began before that read: a commit after it notifies us.
            while not entries:
                left = deadline - time.monotonic()
                if left <= 0 or (stop is not None and stop.is_set()):
                    return Entries()
                # Slices of at most 0.1 s: a closing replica does not wait long.
                if self._notified(name, min(left, 0.1)):
                    entries = self._read_listening(name, after)
        return entries

    def _read_listening(self, name: str, after: int) -> Entries:
        """``read`` on the listener's own connection: its backend is the one the
        notification just woke, so no second server process has to be scheduled
        (on a busy host that is what the tail of the replication lag is made of). Notifications
        arriving meanwhile wait in psycopg's backlog for the next ``notifies()``."""
        conn = self._listener
        assert conn is not None
        try:
            return self._read_on(conn, name, after, 10_000)
        except self._psycopg.Error as e:
            self._drop_listener()
            raise StoreUnavailableError(redacted(f"PostgreSQL store {self._where}: {e}")) from None

    def _listen(self, name: str) -> None:
        """Make sure the listener connection is up and listening on ``name``."""
        psycopg = self._psycopg
        ch = channel(name)
        conn = self._listener
        if conn is not None and (conn.closed or conn.broken):
            self._drop_listener()
            conn = None
        try:
            if conn is None:
                conn = psycopg.Connection.connect(self._conninfo, autocommit=True)
                self._listener = conn
                self._channels = set()
            if ch not in self._channels:
                conn.execute(f'LISTEN "{ch}"')
                self._channels.add(ch)
        except psycopg.Error as e:
            self._drop_listener()
            raise StoreUnavailableError(
                redacted(f"PostgreSQL store {self._where}: cannot listen: {e}")
            ) from None

    def _notified(self, name: str, timeout: float) -> bool:
        """Wait up to ``timeout`` for a notification about ``name``."""
        conn = self._listener
        assert conn is not None
        got = False
        try:
            for n in conn.notifies(timeout=timeout, stop_after=1):
                got = got or n.payload == name
        except self._psycopg.Error as e:
            self._drop_listener()
            raise StoreUnavailableError(
                redacted(f"PostgreSQL store {self._where}: listener lost: {e}")
            ) from None
        return got

    def _drop_listener(self) -> None:
        conn, self._listener = self._listener, None
        self._channels = set()
        if conn is not None:
            conn.close()

    def first_seq(self, name: str) -> int:
        if not self._tables():
            return 0
        row = self._run(
            lambda c: c.execute(
                "SELECT min(seq) FROM rampart_journal WHERE name = %s AND seq BETWEEN 1 AND %s",
                (name, SEQ_MAX),
            ).fetchone()
        )
        return int(row[0] or 0)

    def last_seq(self, name: str) -> int:
        # The last entry there is up to where readers read: what sync() waits
        # for (a counter set forward names an entry that may never come).
        if not self._tables():
            return 0
        row = self._run(
            lambda c: c.execute(
                f"SELECT GREATEST(max(seq), {_LOW_FN}(%s)) FROM rampart_journal WHERE name = %s "
                f"AND seq BETWEEN 1 AND COALESCE({_VISIBLE_FN}(%s), 0)",
                (name, name, name),
            ).fetchone()
        )
        # At least the low-water mark: a replica reaches it by the checkpoint.
        return int(row[0] or 0)

    def put_checkpoint(self, name: str, seq: int, data: bytes, chain: bytes | None = None) -> bool:
        # A damaged checkpoint row (a seq outside [0, SEQ_MAX], empty data) is
        # replaced whatever its seq. A checkpoint of another history than the
        # store's (a replica that kept a fork: its chain value at seq is not the
        # store's) is refused.
        return bool(
            self._run(
                lambda c: (
                    c.execute(
                        "INSERT INTO rampart_checkpoints(name, seq, data) SELECT %s, %s, %s "
                        f"WHERE COALESCE({_CHAIN_FN}(%s, %s) = %s, {_CHAIN_FN}(%s, %s) IS NULL) "
                        "ON CONFLICT (name) DO UPDATE SET seq = excluded.seq, data = excluded.data "
                        "WHERE excluded.seq > rampart_checkpoints.seq "
                        "OR rampart_checkpoints.seq NOT BETWEEN 0 AND %s "
                        "OR length(rampart_checkpoints.data) = 0",
                        (name, seq, data, name, seq, chain, name, seq, SEQ_MAX),
                    ).rowcount
                )
            )
        )

    def checkpoint(self, name: str) -> tuple[int, bytes] | None:
        if not self._tables():
            return None
        row = self._run(
            lambda c: c.execute(
                "SELECT seq, data FROM rampart_checkpoints WHERE name = %s", (name,)
            ).fetchone()
        )
        if row is None:
            return None
        ck = checked_checkpoint(row[0], row[1])
        if ck is None:
            raise RegistryFileError(
                f"store {self._where}: registry {name!r} has a damaged checkpoint row"
            )
        return ck

    def compact(self, name: str, upto: int) -> int:
        # Never drop what no valid checkpoint covers: a new replica could not
        # rebuild it (a foreign checkpoint row with a huge seq covers nothing).
        # The low-water mark moves in the same transaction as the entries go,
        # under the registry row's lock (appends queue on it).
        def go(c: Any) -> int:
            with c.transaction():
                c.execute("SELECT 1 FROM rampart_registries WHERE name = %s FOR UPDATE", (name,))
                limit, low = c.execute(
                    "SELECT LEAST(%s, COALESCE((SELECT seq FROM rampart_checkpoints "
                    "WHERE name = %s AND seq BETWEEN 0 AND %s AND length(data) > 0), 0)), "
                    f"{_LOW_FN}(%s)",
                    (upto, name, SEQ_MAX, name),
                ).fetchone()
                if limit <= low:
                    return 0
                c.execute(
                    f"UPDATE rampart_registries SET low_chain = {_CHAIN_FN}(%s, %s) "
                    "WHERE name = %s",
                    (name, limit, name),
                )
                n = c.execute(
                    "DELETE FROM rampart_journal WHERE name = %s AND seq <= %s", (name, limit)
                ).rowcount
                c.execute(
                    "UPDATE rampart_registries SET low_seq = %s WHERE name = %s", (limit, name)
                )
                return int(n)

        return int(self._run(go))

    def low_seq(self, name: str) -> int:
        """Compaction's low-water mark: every entry up to it may have been
        dropped (a replica that needs one reloads the checkpoint)."""
        row = self._run(lambda c: c.execute(f"SELECT {_LOW_FN}(%s)", (name,)).fetchone())
        return int(row[0] or 0)

    def names(self) -> list[str]:
        if not self._tables():
            return []
        rows = self._run(
            lambda c: c.execute("SELECT name FROM rampart_registries ORDER BY name").fetchall()
        )
        from rampart.stores import valid_name

        return [str(r[0]) for r in rows if valid_name(r[0])]

    def close(self) -> None:
        with self._listen_lock:
            self._drop_listener()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self._where!r})"
