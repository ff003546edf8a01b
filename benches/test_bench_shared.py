"""Shared registries (docs/specification.md §7), each against its store's own raw round trip in the
same run:

- a shared write vs a raw redis-py ``XADD`` + ``XRANGE`` (loopback Redis) and vs a
  raw ``sqlite3`` insert + commit with the same ``synchronous`` setting;
- compile on a replica vs the same compile on a local registry;
- opening a replica of a 100 000-block registry (checkpoint + a tail of 1 000
  entries) vs ``BlockRegistry.load`` of the same registry from a file;
- replication lag (write returns in process A -> visible in process B) and the
  aggregate throughput of 4 writer processes, in ``extra_info`` (p50/p99, writes/s);
- PostgreSQL: a shared write vs a raw psycopg insert + commit (``synchronous_commit``
  on, ``fsync`` on), and the replication lag (LISTEN/NOTIFY);
- Redis with replicas (master + 2 replicas + 3 sentinels): a ``wait=1`` write vs a
  raw ``XADD`` + ``WAIT 1`` pipelined on one connection;
- failover (Sentinel and Cluster, ``wait=0`` and ``wait=1``): kill -9 of the master
  under 3 writer processes; seconds until a write succeeds again, acknowledged
  writes lost, and whether replicas still agree, in ``extra_info``.

Redis benchmarks need ``redis-server`` on PATH (they start their own on free ports
with AOF, ``appendfsync always``); PostgreSQL ones the server binaries (Debian's
``postgresql`` package) and psycopg.
"""

from __future__ import annotations

import sqlite3
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rampart

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from postgres_server import PostgresServer, postgres_available  # noqa: E402
from redis_server import (  # noqa: E402
    ClusterSet,
    RedisServer,
    SentinelSet,
    redis_available,
)

SEEDS = ROOT / "seeds"


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not redis_available():
        pytest.skip("redis-server / redis-py not installed")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server.url
    server.stop()


# ---- one write ------------------------------------------------------------------------


@pytest.mark.benchmark(group="shared-write-redis")
def test_raw_redis_xadd_xrange(benchmark: Any, redis_url: str) -> None:
    import redis

    r = redis.Redis.from_url(redis_url)
    r.delete("raw:log")
    entry = b"x" * 120  # about the size of a coordination write's entry
    last = [b"0-0"]

    def once() -> None:
        sid = r.xadd("raw:log", {"e": entry})
        r.xrange("raw:log", b"(" + last[0], "+")
        last[0] = sid

    benchmark(once)


@pytest.mark.benchmark(group="shared-write-redis")
def test_shared_write_redis(benchmark: Any, redis_url: str) -> None:
    reg = rampart.BlockRegistry.open(redis_url, "bench-write", label=None)
    other = rampart.BlockRegistry(label=None)
    benchmark(reg.write_block, "Fix only tests/test_api.py.", "plan", author=other)
    reg.close()


@pytest.mark.benchmark(group="shared-write-sqlite")
def test_raw_sqlite_insert_commit(benchmark: Any, tmp_path: Path) -> None:
    c = sqlite3.connect(tmp_path / "raw.db", isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA synchronous=FULL")
    c.execute("CREATE TABLE log(seq INTEGER PRIMARY KEY, entry BLOB)")
    entry = b"x" * 120

    def once() -> None:
        c.execute("BEGIN IMMEDIATE")
        c.execute("INSERT INTO log(entry) VALUES (?)", (entry,))
        c.execute("COMMIT")

    benchmark(once)


@pytest.mark.benchmark(group="shared-write-sqlite")
def test_shared_write_sqlite(benchmark: Any, tmp_path: Path) -> None:
    reg = rampart.BlockRegistry.open(f"sqlite:///{tmp_path / 's.db'}", "bench", label=None)
    other = rampart.BlockRegistry(label=None)
    benchmark(reg.write_block, "Fix only tests/test_api.py.", "plan", author=other)
    reg.close()


# ---- compile on a replica -----------------------------------------------------------------


@pytest.fixture(scope="module")
def replica_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('c') / 'c.db'}"
    shared = rampart.BlockRegistry.open(url, "compile", seeds=[SEEDS], label=None)
    local = rampart.BlockRegistry.from_files([SEEDS], label=None)
    yield shared, local
    shared.close()


@pytest.mark.benchmark(group="shared-compile")
def test_compile_local(benchmark: Any, replica_pair: tuple[Any, Any]) -> None:
    benchmark(replica_pair[1].compile, max_tokens=2048)


@pytest.mark.benchmark(group="shared-compile")
def test_compile_replica(benchmark: Any, replica_pair: tuple[Any, Any]) -> None:
    benchmark(replica_pair[0].compile, max_tokens=2048)


# ---- opening a large replica -----------------------------------------------------------------

N_OPEN = 100_000


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    d = tmp_path_factory.mktemp("big")
    url = f"sqlite:///{d / 'big.db'}"
    reg = rampart.BlockRegistry.open(url, "big", label=None)
    rows = [
        (f"b{i}", f"block {i}: keep the tests green.", 0.5, [], None, 12) for i in range(N_OPEN)
    ]
    reg._insert_many(rows, "seed", False, None)
    assert reg._replica is not None
    reg._replica.checkpoint()
    for i in range(1000):
        reg.write_block(f"tail {i}", f"t{i}")
    reg.save(d / "big.rampart")
    reg.close()
    return url, d / "big.rampart"


@pytest.mark.benchmark(group="shared-open-100k")
def test_load_from_file(benchmark: Any, big_store: tuple[str, Path]) -> None:
    benchmark.pedantic(
        lambda: rampart.BlockRegistry.load(big_store[1], label=None), rounds=5, iterations=1
    )


@pytest.mark.benchmark(group="shared-open-100k")
def test_open_replica(benchmark: Any, big_store: tuple[str, Path]) -> None:
    def once() -> None:
        reg = rampart.BlockRegistry.open(big_store[0], "big", label=None)
        assert len(reg) == N_OPEN + 1000
        reg.close()

    benchmark.pedantic(once, rounds=5, iterations=1)


# ---- lag and throughput across processes ----------------------------------------------------

FOLLOWER = textwrap.dedent(
    """
    import sys, time, rampart
    reg = rampart.BlockRegistry.open(sys.argv[1], "lag", label=None)
    print("ready", flush=True)
    for line in sys.stdin:            # the writer names the id it just wrote
        rid = line.strip()
        while rid not in reg:
            time.sleep(0)
        print(time.perf_counter_ns(), flush=True)
    reg.close()
    """
)


def _lags(url: str, n: int = 300) -> dict[str, float]:
    writer = rampart.BlockRegistry.open(url, "lag", label=None)
    p = subprocess.Popen(
        [sys.executable, "-c", FOLLOWER, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert p.stdin is not None and p.stdout is not None
    assert p.stdout.readline().strip() == "ready"
    lags = []
    for i in range(n):
        rid = writer.write_block(f"note {i}", f"n{i}")
        done = time.perf_counter_ns()  # the write has returned in process A
        p.stdin.write(rid + "\n")
        p.stdin.flush()
        seen = int(p.stdout.readline())
        lags.append(max(0, seen - done) / 1e6)
        time.sleep(0.002)
    p.stdin.close()
    p.wait(timeout=30)
    p.stdout.close()
    writer.close()
    q = statistics.quantiles(lags, n=100)
    return {"lag_p50_ms": statistics.median(lags), "lag_p99_ms": q[98]}


def test_replication_lag_redis(benchmark: Any, redis_url: str) -> None:
    stats = _lags(redis_url)
    benchmark.extra_info.update(stats)
    print(f"\nredis replication lag: {stats}")
    benchmark.pedantic(lambda: None, rounds=1)


def test_replication_lag_sqlite(benchmark: Any, tmp_path: Path) -> None:
    stats = _lags(f"sqlite:///{tmp_path / 'lag.db'}")
    benchmark.extra_info.update(stats)
    print(f"\nsqlite replication lag: {stats}")
    benchmark.pedantic(lambda: None, rounds=1)


WRITER = textwrap.dedent(
    """
    import sys, time, rampart
    reg = rampart.BlockRegistry.open(sys.argv[1], "tput", label=None)
    n = int(sys.argv[2])
    start = time.time()
    for i in range(n):
        reg.write_block(f"note {i}", "n")
    print(start, time.time(), flush=True)
    reg.close()
    """
)


def test_throughput_4_writers_redis(benchmark: Any, redis_url: str) -> None:
    rampart.BlockRegistry.open(redis_url, "tput", label=None).close()
    n = 2000
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, redis_url, str(n)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    spans = [tuple(map(float, p.communicate(timeout=300)[0].split())) for p in procs]
    # From the first write of any writer to the last write of any (wall clock).
    wall = max(e for _, e in spans) - min(s for s, _ in spans)
    benchmark.extra_info["writes_per_s"] = 4 * n / wall
    print(f"\n4 writer processes on one Redis: {4 * n / wall:.0f} writes/s")
    benchmark.pedantic(lambda: None, rounds=1)


# ---- PostgreSQL ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    if not postgres_available():
        pytest.skip("PostgreSQL server binaries / psycopg not installed")
    server = PostgresServer()
    server.start()
    yield server.url
    server.close()


@pytest.mark.benchmark(group="shared-write-postgres")
def test_raw_psycopg_insert_commit(benchmark: Any, pg_url: str) -> None:
    import psycopg

    with psycopg.connect(pg_url) as c:
        c.execute("CREATE TABLE raw_log(seq BIGSERIAL PRIMARY KEY, entry BYTEA NOT NULL)")
        c.commit()
        entry = b"x" * 120

        def once() -> None:
            c.execute("INSERT INTO raw_log(entry) VALUES (%s)", (entry,))
            c.commit()

        benchmark(once)


@pytest.mark.benchmark(group="shared-write-postgres")
def test_shared_write_postgres(benchmark: Any, pg_url: str) -> None:
    reg = rampart.BlockRegistry.open(pg_url, "bench-write", label=None)
    other = rampart.BlockRegistry(label=None)
    benchmark(reg.write_block, "Fix only tests/test_api.py.", "plan", author=other)
    reg.close()


def test_replication_lag_postgres(benchmark: Any, pg_url: str) -> None:
    stats = _lags(pg_url)
    benchmark.extra_info.update(stats)
    print(f"\npostgres replication lag: {stats}")
    benchmark.pedantic(lambda: None, rounds=1)


# ---- Redis with replicas: wait=1, failover ----------------------------------------------------


@pytest.fixture(scope="module")
def sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSet]:
    if not redis_available():
        pytest.skip("redis-server / redis-py not installed")
    s = SentinelSet(tmp_path_factory.mktemp("sentinel"))
    try:
        s.start()
        yield s
    finally:
        s.stop()


@pytest.mark.benchmark(group="shared-write-redis-wait1")
def test_raw_redis_xadd_wait(benchmark: Any, sentinels: SentinelSet) -> None:
    """The raw round trip a wait=1 append stands on: XADD and WAIT 1, pipelined
    on one connection to the master (WAIT counts that connection's writes)."""
    import redis

    r = redis.Redis(port=sentinels.master_port())
    entry = b"x" * 120

    def once() -> None:
        pipe = r.pipeline(transaction=False)
        pipe.xadd("raw:log", {"e": entry})
        pipe.wait(1, 1000)
        assert pipe.execute()[1] >= 1

    benchmark(once)
    r.close()


@pytest.mark.benchmark(group="shared-write-redis-wait1")
def test_shared_write_redis_wait1(benchmark: Any, sentinels: SentinelSet) -> None:
    reg = rampart.BlockRegistry.open(sentinels.url(wait=1), "bench-write", label=None)
    other = rampart.BlockRegistry(label=None)
    benchmark(reg.write_block, "Fix only tests/test_api.py.", "plan", author=other)
    reg.close()


FAILOVER_WRITER = textwrap.dedent(
    """
    import sys, time, rampart
    from rampart.errors import StoreUnavailableError
    url, n = sys.argv[1], int(sys.argv[2])
    reg = rampart.BlockRegistry.open(url, "agent", label=None)
    deadline = time.monotonic() + 120
    done = 0
    while done < n and time.monotonic() < deadline:
        try:
            rid = reg.write_block(f"note {done}", "n")
        except StoreUnavailableError:
            time.sleep(0.01)
            continue
        done += 1
        print(rid, flush=True)
    reg.close()
    """
)


def _failover(kind: str, wait: int, directory: Path) -> dict[str, Any]:
    """kill -9 of the master under 3 writer processes: seconds until a write
    succeeds again (probed every 10 ms from this process), acknowledged writes
    lost, and whether this process's replica still agrees with a fresh one."""
    import threading

    setup: Any = SentinelSet(directory) if kind == "sentinel" else ClusterSet(directory)
    key = "rampart:{agent}:log"
    setup.start()
    try:
        url = setup.url(wait)
        reg = rampart.BlockRegistry.open(url, "agent", label=None)
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", FAILOVER_WRITER, url, "300"],
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(3)
        ]
        acked: list[list[str]] = [[] for _ in procs]
        started = [threading.Event() for _ in procs]

        def read(k: int) -> None:
            assert procs[k].stdout is not None
            for line in procs[k].stdout:
                acked[k].append(line.strip())
                if len(acked[k]) >= 30:
                    started[k].set()
            started[k].set()

        readers = [threading.Thread(target=read, args=(k,)) for k in range(len(procs))]
        for t in readers:
            t.start()
        for e in started:
            e.wait(120)
        t0 = time.monotonic()
        old = setup.kill_master() if kind == "sentinel" else setup.kill_master_of(key)
        restarted = kind == "sentinel" or wait == 0
        back = None
        while time.monotonic() - t0 < 120:
            if not restarted:
                try:
                    if setup.master_of(key) != old:  # a promoted shard needs a replica
                        next(n for n in setup.nodes if n.port == old).start()
                        restarted = True
                except RuntimeError:
                    pass
            try:
                reg.write_block("probe", "probe")
            except rampart.StoreUnavailableError:
                time.sleep(0.01)
                continue
            back = time.monotonic() - t0
            break
        for p, t in zip(procs, readers):
            p.wait(timeout=180)
            t.join()
            assert p.stdout is not None
            p.stdout.close()
        every = [x for ids in acked for x in ids]
        try:
            reg.sync(timeout=30)
            late = rampart.BlockRegistry.open(url, "agent", label=None)
            held = set(late.runtime_ids())
            agree = late.runtime_ids() == reg.runtime_ids()
            late.close()
        finally:
            reg.close()
        lost = [x for x in every if x not in held]
        return {
            "writes_back_s": back,
            "acked": len(every),
            "lost_acked": len(lost),
            "replicas_agree": agree,
        }
    finally:
        setup.stop()


@pytest.mark.parametrize("kind", ["sentinel", "cluster"])
@pytest.mark.parametrize("wait", [0, 1])
def test_failover(benchmark: Any, tmp_path: Path, kind: str, wait: int) -> None:
    if not redis_available():
        pytest.skip("redis-server / redis-py not installed")
    stats = _failover(kind, wait, tmp_path)
    benchmark.extra_info.update(stats)
    print(f"\n{kind} failover, wait={wait}: {stats}")
    benchmark.pedantic(lambda: None, rounds=1)
