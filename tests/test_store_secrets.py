"""Secrets in store URLs are never printed (docs/shared.md, "Secrets"): a planted
password, in every form a URL or DSN carries one, is looked for in every output
channel — exception messages and reprs, store reprs, every log record at DEBUG
(psycopg's, psycopg.pool's and redis-py's included), and the stdout and stderr of
``rampart store ls`` and ``rampart inspect --store`` — against real servers that
require the password (Redis ``requirepass``, a Sentinel with its own password,
PostgreSQL with scram-sha-256), while they serve and while they refuse or are
down."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import rampart
from conftest import ROOT
from postgres_server import PostgresServer, skip_without_postgres
from rampart.errors import RampartError
from rampart.stores import open_store, redacted
from rampart.stores.redact import remember
from redis_server import RedisServer, _cli, _wait_until, skip_without_redis

# Fresh per run, so that no earlier run's remembered secret masks this one.
SECRET = "Pl4nted-" + uuid.uuid4().hex[:12]


# ---- the one redaction, every form -----------------------------------------------------------

FORMS = [
    "redis://:{s}@127.0.0.1:6379/0",
    "redis://agent:{s}@127.0.0.1:6379/0?wait=1",
    "rediss://agent:{s}@cache.example:6380/2",
    "redis://127.0.0.1:6379/0?password={s}&wait=1",
    "unix:///run/redis.sock?password={s}",
    "redis+sentinel://:{s}@h1:26379,h2:26379/mymaster",
    "redis+sentinel://h1:26379,h2:26379/mymaster?sentinel_password={s}&sentinel_username=x",
    "redis+cluster://agent:{s}@n1:7000,n2:7001?wait=1",
    "postgresql://agent:{s}@db.example:5432/agents",
    "postgres://agent@db.example/agents?password={s}&sslmode=require",
    "postgresql:///agents?host=/tmp&password={s}",
    "postgresql://agent@db.example/agents?sslpassword={s}",
    "host=db.example port=5432 password={s} dbname=agents",
    "host=db.example password = '{s}' dbname=agents",
    "{{'host': 'db.example', 'password': '{s}', 'db': 0}}",
    '{{"sentinel_password": "{s}"}}',
    "PGPASSWORD={s}",
]


@pytest.mark.parametrize("form", FORMS)
def test_every_form_of_a_secret_is_masked(form: str) -> None:
    secret = "Unit-" + uuid.uuid4().hex[:10]  # not remembered: structure alone masks it
    text = form.format(s=secret)
    out = redacted(f"store {text!r}: down")
    # The secret, and nothing else, is masked.
    assert out == f"store {text!r}: down".replace(secret, "***")


def test_encoded_and_oddly_quoted_secrets_are_masked_once_remembered() -> None:
    raw = "we ird'quo@te/" + uuid.uuid4().hex[:6]
    encoded = raw.replace("%", "%25").replace(" ", "%20").replace("'", "%27")
    encoded = encoded.replace("@", "%40").replace("/", "%2F")
    remember(f"postgresql://agent@db.example/agents?password={encoded}")
    # A driver that quotes the decoded value in a shape no pattern knows.
    for text in (f"libpq: bad value «{raw}»", f"encoded {encoded} here"):
        assert raw not in redacted(text) and encoded not in redacted(text)


def test_text_without_secrets_is_left_alone() -> None:
    for text in (
        "redis://127.0.0.1:6379/0",
        "postgresql://agent@db.example:5432/agents?sslmode=require",
        "sqlite:///tmp/agents.db",
        "shared registry 'agent': follower retrying: max_tokens=100",
    ):
        assert redacted(text) == text


# ---- channels ------------------------------------------------------------------------------


class Channels:
    """Collects every text a user could see: exceptions (str and repr), reprs,
    log records (message and traceback), and CLI output."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.caplog = caplog
        self.texts: list[tuple[str, str]] = []
        self.errors = 0

    def see(self, where: str, text: object) -> None:
        self.texts.append((where, str(text)))

    def attempt(self, what: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn``; a rampart error it raises is recorded, not propagated."""
        try:
            out = fn()
        except RampartError as e:
            self.errors += 1
            self.see(f"{what}: str", e)
            self.see(f"{what}: repr", repr(e))
            return None
        self.see(f"{what}: result", repr(out))
        return out

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        # The command line's own entry point, with every logger (the drivers'
        # included) printing at DEBUG to the same stderr.
        out = subprocess.run(
            [sys.executable, "-c", CLI_AT_DEBUG, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        self.see(f"rampart {' '.join(args)}: stdout", out.stdout)
        self.see(f"rampart {' '.join(args)}: stderr", out.stderr)
        return out

    def check(self, *secrets: str) -> None:
        for record in self.caplog.records:
            self.see(f"log {record.name}", record.getMessage())
            if record.exc_text:
                self.see(f"log {record.name} traceback", record.exc_text)
        self.see("caplog", self.caplog.text)
        leaks = [(w, t) for w, t in self.texts for s in secrets if s in t]
        assert not leaks, leaks
        # The channels were exercised: records from the drivers came in.
        assert self.caplog.records


CLI_AT_DEBUG = (
    "import logging, sys; logging.basicConfig(level=logging.DEBUG); "
    "from rampart.cli import main; sys.exit(main(sys.argv[1:]))"
)


def names_of(url: str) -> list[str]:
    store = open_store(url)
    try:
        return store.names()
    finally:
        store.close()


@pytest.fixture
def channels(caplog: pytest.LogCaptureFixture) -> Iterator[Channels]:
    caplog.set_level(logging.DEBUG)
    yield Channels(caplog)


def exercise(ch: Channels, url: str, name: str) -> None:
    """A registry's life on a working store: create, write, reopen, list, inspect."""
    reg = ch.attempt("open", lambda: rampart.BlockRegistry.open(url, name, label=None))
    assert reg is not None
    ch.see("repr(store)", repr(reg._replica.store))
    ch.see("repr(registry)", repr(reg))
    reg.write_block("run the tests before every commit", "w")

    async def twins() -> None:
        await reg.awrite_block("and the linter", "w")
        await reg.aclose()

    asyncio.run(twins())
    again = ch.attempt("reopen", lambda: rampart.BlockRegistry.open(url, name, create=False))
    assert again is not None and len(again) == 2
    again.close()
    ch.attempt("no such registry", lambda: rampart.BlockRegistry.open(url, "nope", create=False))
    store = open_store(url, create=False)
    ch.see("repr(open_store)", repr(store))
    ch.attempt("names", store.names)
    store.close()
    assert ch.cli("store", "ls", url).returncode == 0
    assert ch.cli("store", "ls", "--json", url).returncode == 0
    assert ch.cli("inspect", "--store", url, "--name", name).returncode == 0
    assert ch.cli("inspect", "--store", url, "--name", "nope").returncode == 2


def exercise_down(ch: Channels, url: str, name: str) -> None:
    """The same store refusing: the server down."""
    ch.attempt("open while down", lambda: rampart.BlockRegistry.open(url, name, label=None))
    ch.attempt("names while down", lambda: names_of(url))
    assert ch.cli("store", "ls", url).returncode == 2
    assert ch.cli("inspect", "--store", url, "--name", name).returncode == 2


# ---- Redis -----------------------------------------------------------------------------------


@pytest.fixture
def redis_with_password(tmp_path: Path) -> Iterator[RedisServer]:
    skip_without_redis()
    d = tmp_path / "redis"
    d.mkdir()
    server = RedisServer(d, "--requirepass", SECRET)
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("form", ["user", "query"])
def test_redis_password_is_never_printed(
    redis_with_password: RedisServer, channels: Channels, form: str
) -> None:
    port = redis_with_password.port
    url = (
        f"redis://:{SECRET}@127.0.0.1:{port}/0"
        if form == "user"
        else f"redis://127.0.0.1:{port}/0?password={SECRET}"
    )
    exercise(channels, url, "agent")
    wrong = url.replace(SECRET, SECRET[::-1])
    channels.attempt("wrong password", lambda: rampart.BlockRegistry.open(wrong, "agent"))
    redis_with_password.stop()
    exercise_down(channels, url, "agent")
    assert channels.errors >= 4
    channels.check(SECRET, SECRET[::-1])


def test_sentinel_password_is_never_printed(tmp_path: Path, channels: Channels) -> None:
    skip_without_redis()
    (tmp_path / "m").mkdir()
    master = RedisServer(tmp_path / "m")
    master.start()
    (tmp_path / "s").mkdir()
    sentinel = RedisServer(
        tmp_path / "s",
        sentinel=f"sentinel monitor m 127.0.0.1 {master.port} 1\nrequirepass {SECRET}\n",
    )
    sentinel.start()
    try:
        _wait_until(
            "the sentinel to know its master",
            lambda: (
                str(master.port)
                in _cli(sentinel.port, "-a", SECRET, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "m")
            ),
        )
        url = f"redis+sentinel://127.0.0.1:{sentinel.port}/m?sentinel_password={SECRET}"
        exercise(channels, url, "agent")
        wrong = url.replace(SECRET, SECRET[::-1])
        channels.attempt("wrong sentinel password", lambda: rampart.BlockRegistry.open(wrong, "a"))
        sentinel.stop()
        exercise_down(channels, url, "agent")
    finally:
        sentinel.stop()
        master.stop()
    assert channels.errors >= 3
    channels.check(SECRET, SECRET[::-1])


# ---- PostgreSQL --------------------------------------------------------------------------------


def require_password(pg: PostgresServer, role: str, password: str) -> None:
    """Give ``role`` a password and make the server ask for it (scram-sha-256)
    on its TCP connections, ahead of the template's trust rule."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(pg.url, autocommit=True) as c:
        c.execute(
            sql.SQL("CREATE ROLE {} LOGIN SUPERUSER PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
        hba = pg.data / "pg_hba.conf"
        rules = hba.read_text()
        # Written in place: the file stays the server user's.
        with open(hba, "r+") as f:
            f.write(f"host all {role} 127.0.0.1/32 scram-sha-256\n" + rules)
            f.truncate()
        c.execute("SELECT pg_reload_conf()")

    def asks() -> bool:
        try:
            psycopg.connect(f"postgresql://{role}@127.0.0.1:{pg.port}/postgres").close()
        except psycopg.OperationalError as e:
            return "password" in str(e)
        return False

    _wait_until("the server to ask for the password", asks, timeout=30)


@pytest.fixture
def pg_with_password() -> Iterator[PostgresServer]:
    skip_without_postgres()
    pg = PostgresServer()
    try:
        pg.start()
        require_password(pg, "agent", SECRET)
        yield pg
    finally:
        pg.close()


@pytest.mark.parametrize("form", ["user", "query", "keywords"])
def test_postgres_password_is_never_printed(
    pg_with_password: PostgresServer, channels: Channels, form: str
) -> None:
    port = pg_with_password.port
    url = {
        "user": f"postgresql://agent:{SECRET}@127.0.0.1:{port}/postgres",
        "query": f"postgresql://agent@127.0.0.1:{port}/postgres?password={SECRET}",
        "keywords": f"postgresql:///postgres?host=127.0.0.1&port={port}&user=agent"
        f"&password={SECRET}",
    }[form]
    exercise(channels, url, "agent")
    wrong = url.replace(SECRET, SECRET[::-1])
    channels.attempt("wrong password", lambda: names_of(wrong))
    # URLs libpq refuses, the password in them.
    sep = "&" if "?" in url else "?"
    channels.attempt("refused URL", lambda: names_of(url + sep + "port=notaport"))
    channels.attempt("refused URL", lambda: names_of(url + sep + "nosuchoption=1"))
    pg_with_password.stop()
    exercise_down(channels, url, "agent")
    # psycopg.pool's own warning ("error connecting in 'rampart …'") came in.
    assert any(r.name == "psycopg.pool" for r in channels.caplog.records)
    assert channels.errors >= 4
    channels.check(SECRET, SECRET[::-1])


def test_a_secret_in_a_driver_debug_record_is_masked(caplog: pytest.LogCaptureFixture) -> None:
    """The filter, not only the messages rampart builds: a record a driver logs
    with a conninfo in its arguments reaches handlers masked."""
    import psycopg_pool  # noqa: F401  (the drivers' loggers exist, as once a store is opened)
    import redis.connection  # noqa: F401
    from rampart.stores.redact import guard_loggers

    guard_loggers()
    caplog.set_level(logging.DEBUG)
    secret = "Drv-" + uuid.uuid4().hex[:10]
    logging.getLogger("psycopg").debug("connecting with %s", f"host=h password={secret}")
    logging.getLogger("psycopg.pool").warning("pool %r", f"postgresql://u:{secret}@h/db")
    try:
        raise ValueError(f"redis://:{secret}@h:6379/0 refused")
    except ValueError:
        logging.getLogger("redis.connection").exception("failed")
    assert caplog.records and secret not in caplog.text
    assert all(secret not in (r.exc_text or "") for r in caplog.records)


@pytest.mark.parametrize(
    "text",
    [
        "a." * 100_000,
        "password" * 25_000,
        "a-password-" * 20_000,
        "redis://" * 25_000,
        "redis://u:" * 20_000 + "@",
        "password='" * 20_000,
        "password" + " " * 200_000,
    ],
    ids=["dots", "keys", "key-runs", "schemes", "user-parts", "quotes", "spaces"],
)
def test_hostile_text_is_redacted_in_one_pass(text: str) -> None:
    """Shapes that made the first patterns backtrack quadratically (minutes for
    200 kB): now one linear pass each; the result still masks what it must."""
    out = redacted(text)
    assert len(out) <= len(text) + 3
    assert redacted(out) == out  # idempotent: nothing left to mask
