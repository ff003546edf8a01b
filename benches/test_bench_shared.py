"""Shared registries (SPEC §7), each against its store's own raw round trip in the
same run:

- a shared write vs a raw redis-py ``XADD`` + ``XRANGE`` (loopback Redis) and vs a
  raw ``sqlite3`` insert + commit with the same ``synchronous`` setting;
- compile on a replica vs the same compile on a local registry;
- opening a replica of a 100 000-block registry (checkpoint + a tail of 1 000
  entries) vs ``BlockRegistry.load`` of the same registry from a file;
- replication lag (write returns in process A -> visible in process B) and the
  aggregate throughput of 4 writer processes, in ``extra_info`` (p50/p99, writes/s).

Redis benchmarks need ``redis-server`` on PATH (they start their own on a free port
with AOF, ``appendfsync always``).
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

from redis_server import RedisServer, redis_available  # noqa: E402

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
