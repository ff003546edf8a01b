"""Async store clients wait for a connection and close with their event loop
(docs/shared.md, "Coroutines"), on real servers: 300 concurrent ``awrite_block``
all land; past ``pool_max`` a coroutine waits for a free connection, and past
``timeout`` gets StoreUnavailableError; fifteen ``asyncio.run()`` loops leave the
server's client count (CLIENT LIST, pg_stat_activity) where it was. Also Redis's
``wait_timeout``, whose sub-millisecond values would have become ``WAIT n 0``
(wait forever)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import rampart
from rampart.errors import InvalidArgumentError, StoreUnavailableError
from rampart.stores import open_store
from redis_server import _wait_until
from test_shared import start_server, state


@pytest.fixture(params=["redis", "postgres"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    srv, stop = start_server(request.param, tmp_path)
    yield srv
    stop()


@pytest.fixture
def count(server: Any) -> Iterator[Callable[[], int]]:
    """How many clients the server has now (the counting one excluded)."""
    if "redis" in server.url:
        import redis

        raw = redis.Redis(port=server.port)
        yield lambda: len(raw.client_list()) - 1
        raw.close()
        return
    import psycopg

    conn = psycopg.connect(server.url, autocommit=True)

    def count() -> int:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
            "AND pid <> pg_backend_pid()"
        ).fetchone()
        assert row is not None
        return int(row[0])

    yield count
    conn.close()


def settled(count: Callable[[], int], at_most: int) -> int:
    """The client count once the server has seen the closed sockets go (it
    notices a disconnect on its next read: polled, never timed)."""
    try:
        _wait_until(f"at most {at_most} clients", lambda: count() <= at_most, timeout=30)
    except RuntimeError:
        pass
    return count()


def test_300_concurrent_async_writes_all_land(server: Any) -> None:
    url = server.url

    async def go() -> list[Any]:
        reg = await rampart.BlockRegistry.aopen(url, "agent", label=None)
        try:
            return await asyncio.gather(
                *(reg.awrite_block(f"note {k}", f"w{k}") for k in range(300)),
                return_exceptions=True,
            )
        finally:
            await reg.aclose()

    got = asyncio.run(go())
    failures = [g for g in got if isinstance(g, BaseException)]
    assert not failures, failures[:3]
    check = rampart.BlockRegistry.open(url, "agent", create=False)
    try:
        assert {check.get_by_id(i).content for i in got} == {f"note {k}" for k in range(300)}
    finally:
        check.close()


def test_loops_leave_no_connection_behind(server: Any, count: Callable[[], int]) -> None:
    reg = rampart.BlockRegistry.open(server.url, "agent", label=None)
    reg.write_block("warm", "w")
    baseline = count()

    async def one(k: int) -> None:
        await asyncio.gather(*(reg.awrite_block(f"loop {k} note {i}", "w") for i in range(30)))

    for k in range(15):
        asyncio.run(one(k))  # no aclose(): the loop's end closes what it opened
    store = reg._replica.store  # type: ignore[union-attr]
    # Redis: each loop's client closed with its loop, the sync client's remain.
    # PostgreSQL: coroutines use the store's one pool (from executor threads),
    # which never grows past pool_max, plus the follower's LISTEN connection.
    bound = baseline if "redis" in server.url else store.pool_max + 1
    after_loops = settled(count, bound)
    other = rampart.BlockRegistry.open(server.url, "agent", create=False)
    try:
        assert state(other) == state(reg)
    finally:
        other.close()
    reg.close()
    assert after_loops <= bound, (baseline, bound, after_loops)


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[Any]:
    srv, stop = start_server("redis", tmp_path)
    yield srv
    stop()


def test_a_small_pool_serves_many_coroutines_without_opening_more(redis: Any) -> None:
    import redis as redis_py

    raw = redis_py.Redis(port=redis.port)

    def count() -> int:
        return len(raw.client_list()) - 1

    url = redis.url + "?pool_max=2"
    reg = rampart.BlockRegistry.open(url, "agent", label=None)
    seen: list[int] = []

    async def go() -> None:
        async def write(k: int) -> str:
            seen.append(count())
            return await reg.awrite_block(f"note {k}", "w")

        ids = await asyncio.gather(*(write(k) for k in range(60)))
        assert len(set(ids)) == 60
        seen.append(count())

    sync_clients = count()
    asyncio.run(go())
    reg.close()
    raw.close()
    # The loop's client never held more than pool_max connections.
    assert max(seen) <= sync_clients + 2, (sync_clients, seen)


def test_no_free_connection_is_a_typed_error_after_the_pool_timeout(redis: Any) -> None:
    url = redis.url + "?pool_max=1&timeout=0.2"
    reg = rampart.BlockRegistry.open(url, "agent", label=None)
    store = reg._replica.store  # type: ignore[union-attr]

    async def go() -> None:
        client, _ = store._aclient()
        pool = client.connection_pool
        # redis-py before 5.3 requires a command name, later ones deprecate it.
        name = inspect.signature(pool.get_connection).parameters["command_name"]
        args = ("PING",) if name.default is inspect.Parameter.empty else ()
        held = await pool.get_connection(*args)  # the pool's one connection
        try:
            with pytest.raises(StoreUnavailableError, match=r"no free connection.*pool_max=1"):
                await reg.awrite_block("waits for a connection", "w")
        finally:
            await client.connection_pool.release(held)
        await reg.awrite_block("once it is free", "w")  # the same client serves again

    asyncio.run(go())
    assert [b.content for b in reg.list_blocks()][-1:] == ["once it is free"]
    assert "waits for a connection" not in {b.content for b in reg.list_blocks()}
    reg.close()


@pytest.mark.parametrize("value", ["0.0009", "0.0001", "0", "-1", "nan", "inf", "61"])
def test_wait_timeout_outside_its_range_is_refused_by_name(redis: Any, value: str) -> None:
    with pytest.raises(InvalidArgumentError, match="wait_timeout"):
        open_store(f"{redis.url}?wait=1&wait_timeout={value}")


def test_a_millisecond_wait_timeout_waits_and_reports(redis: Any) -> None:
    """WAIT 1 with no replica and a 1.5 ms timeout: WAIT answers (0 replicas)
    and the append says so, where ``WAIT 1 0`` would block until the socket
    timeout and fail as a lost connection."""
    url = redis.url + "?wait=1&wait_timeout=0.0015"
    store = open_store(url)
    seen: list[Any] = []
    real = store._r.pipeline

    def pipeline(*a: Any, **kw: Any) -> Any:
        pipe = real(*a, **kw)
        wait = pipe.wait

        def recorded(n: int, ms: int) -> Any:
            seen.append((n, ms))
            return wait(n, ms)

        pipe.wait = recorded
        return pipe

    store._r.pipeline = pipeline
    with pytest.raises(StoreUnavailableError, match="only 0 of 1 replicas"):
        store.create("agent", b"{}", [])
    assert seen and set(seen) == {(1, 2)}  # (twice when the script was not loaded yet)
    store.close()
