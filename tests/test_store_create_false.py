"""``create=False`` creates nothing on any store (docs/shared.md, "Read-only
opening"): no SQLite file, tables or journal-mode switch; no PostgreSQL table or
function; no Redis key — and a missing registry is InvalidArgumentError naming the
store and the name, also for a PostgreSQL role without CREATE, which can read a
registry that exists (a real role on a real server)."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import rampart
from conftest import ROOT
from postgres_server import PostgresServer, skip_without_postgres
from rampart.errors import InvalidArgumentError
from rampart.stores import open_store
from redis_server import RedisServer, skip_without_redis
from test_shared import state


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rampart", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def refused(url: str, name: str, shown: str) -> None:
    """open(create=False) of a missing registry: InvalidArgumentError naming both."""
    with pytest.raises(InvalidArgumentError) as e:
        rampart.BlockRegistry.open(url, name, create=False)
    assert shown in str(e.value) and repr(name) in str(e.value), str(e.value)


# ---- SQLite --------------------------------------------------------------------------------


def test_sqlite_file_without_rampart_tables_is_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as c:  # someone else's database, rollback journal
        c.execute("CREATE TABLE notes(x)")
        c.execute("INSERT INTO notes VALUES (1)")
    c.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    url = f"sqlite:///{path}"
    refused(url, "agent", str(path))
    out = cli("store", "ls", url)
    assert out.returncode == 0 and "0 shared registries" in out.stdout, out
    assert cli("inspect", "--store", url, "--name", "agent").returncode == 2
    store = open_store(url, create=False)
    assert store.exists() is False and store.names() == [] and store.read("agent", 0) == []
    assert store.first_seq("agent") == 0 and store.checkpoint("agent") is None
    with pytest.raises(InvalidArgumentError, match="create=False"):
        store.create("agent", b"{}", [])
    store.close()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    with sqlite3.connect(path) as c:
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master")}
    c.close()
    assert tables == {"notes"}


def test_sqlite_missing_file_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "missing.db"
    url = f"sqlite:///{path}"
    refused(url, "agent", str(path))
    assert open_store(url, create=False).exists() is False
    assert cli("store", "ls", url).returncode == 2
    assert not any(tmp_path.iterdir())


# ---- Redis ---------------------------------------------------------------------------------


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    skip_without_redis()
    d = tmp_path / "redis"
    d.mkdir()
    server = RedisServer(d)
    server.start()
    yield server
    server.stop()


def test_redis_read_only_opening_writes_no_key(redis_server: RedisServer) -> None:
    import redis

    raw = redis.Redis(port=redis_server.port)
    url = redis_server.url
    refused(url, "agent", "127.0.0.1")
    assert cli("inspect", "--store", url, "--name", "agent").returncode == 2
    assert cli("store", "ls", url).returncode == 0
    assert raw.dbsize() == 0
    # A registry that exists, read through ?wait=1 (which fences what it reads):
    # no key is added to it.
    writer = rampart.BlockRegistry.open(url, "agent", label=None)
    writer.write_block("run the tests", "w")
    keys = set(raw.keys())
    reader_url = url + "?wait=1&wait_timeout=0.01"
    store = open_store(reader_url, create=False)
    assert store.exists() is True
    # No replica: the fence's WAIT finds 0 of 1 (the read is then refused, typed).
    with pytest.raises(rampart.errors.StoreUnavailableError, match="0 of 1 replicas"):
        store.read("agent", 0)
    assert set(raw.keys()) == keys
    store.close()
    writer.close()
    raw.close()


# ---- PostgreSQL ----------------------------------------------------------------------------

OURS = (
    "SELECT (SELECT count(*) FROM pg_class WHERE relname LIKE 'rampart%'), "
    "(SELECT count(*) FROM pg_proc WHERE proname LIKE 'rampart%')"
)


@pytest.fixture
def pg() -> Iterator[PostgresServer]:
    skip_without_postgres()
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


def make_reader(pg: PostgresServer) -> str:
    """A login role without CREATE anywhere (PostgreSQL 15 already gives PUBLIC
    none on schema public; revoked here too, for older servers); its URL."""
    import psycopg

    with psycopg.connect(pg.url, autocommit=True) as c:
        c.execute("CREATE ROLE reader LOGIN")
        c.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        c.execute("REVOKE CREATE ON DATABASE postgres FROM PUBLIC")
        assert c.execute("SELECT has_schema_privilege('reader', 'public', 'CREATE')").fetchone()
        assert not c.execute(
            "SELECT has_schema_privilege('reader', 'public', 'CREATE')"
        ).fetchone()[0]
    return f"postgresql://reader@127.0.0.1:{pg.port}/postgres"


def counts(pg: PostgresServer) -> tuple[int, int]:
    import psycopg

    with psycopg.connect(pg.url) as c:
        row = c.execute(OURS).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_postgres_read_only_opening_creates_no_table_or_function(pg: PostgresServer) -> None:
    refused(pg.url, "agent", f"127.0.0.1:{pg.port}")
    out = cli("store", "ls", pg.url)
    assert out.returncode == 0 and "0 shared registries" in out.stdout, out
    assert cli("inspect", "--store", pg.url, "--name", "agent").returncode == 2
    store = open_store(pg.url, create=False)
    assert store.exists() is False and store.names() == [] and store.last_seq("agent") == 0
    with pytest.raises(InvalidArgumentError, match="create=False"):
        store.create("agent", b"{}", [])
    store.close()
    assert counts(pg) == (0, 0)


def test_postgres_role_without_create_is_refused_by_name_then_reads(pg: PostgresServer) -> None:
    reader = make_reader(pg)
    # No tables yet: the promised InvalidArgumentError, not "permission denied".
    refused(reader, "agent", f"reader@127.0.0.1:{pg.port}")
    assert counts(pg) == (0, 0)
    # The owner creates the registry and lets the reader read it.
    writer = rampart.BlockRegistry.open(pg.url, "agent", label=None)
    for k in range(5):
        writer.write_block(f"lesson {k}: run the tests", "w")
    import psycopg

    with psycopg.connect(pg.url, autocommit=True) as c:
        c.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader")
    before = counts(pg)
    replica = rampart.BlockRegistry.open(reader, "agent", create=False)
    try:
        assert state(replica) == state(writer)
        writer.write_block("one more", "w")
        replica.sync()  # the follower reads what arrives later, as the reader
        assert state(replica) == state(writer)
    finally:
        replica.close()
    out = cli("inspect", "--store", reader, "--name", "agent")
    assert out.returncode == 0 and "6 blocks" in out.stdout, out
    out = cli("store", "ls", reader)
    assert out.returncode == 0 and "agent  " in out.stdout, out
    assert counts(pg) == before
    writer.close()
