"""Event-loop lateness under shared writes (issue 26): 100 coroutines each append
``--ops`` journal entries to a real redis-server (``awrite_block`` on a shared
registry) while a ticker sleeps 1 ms at a time and records how late it wakes.
Baseline in the same process and on the same server: the same number of
coroutines doing the same number of ``XADD`` with redis.asyncio alone (what the
store's own client costs the loop). Alternated ``--rounds`` times; medians.

    .venv/bin/python benches/async_loop_lateness.py --ops 20 --rounds 3

Prints p50/p99/max lateness (ms) for each, and writes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import rampart
from redis_server import RedisServer


async def _ticker(stop: asyncio.Event, late: list[float]) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(0.001)
        late.append((time.perf_counter() - t0 - 0.001) * 1000)


async def _measure(work: Any) -> list[float]:
    stop, late = asyncio.Event(), []
    tick = asyncio.ensure_future(_ticker(stop, late))
    await asyncio.sleep(0.01)
    await work()
    stop.set()
    await tick
    return late


async def rampart_round(url: str, name: str, workers: int, ops: int) -> list[float]:
    reg = await rampart.BlockRegistry.aopen(url, name, label=None)
    try:

        async def one(k: int) -> None:
            for i in range(ops):
                await reg.awrite_block(f"note {k}.{i}", f"w{k}")

        async def work() -> None:
            await asyncio.gather(*(one(k) for k in range(workers)))

        return await _measure(work)
    finally:
        await reg.aclose()


async def redis_round(url: str, key: str, workers: int, ops: int) -> list[float]:
    import redis.asyncio as aredis

    pool = aredis.BlockingConnectionPool.from_url(url, max_connections=workers)
    client = aredis.Redis(connection_pool=pool)
    try:

        async def one(k: int) -> None:
            for i in range(ops):
                await client.xadd(key, {"e": f"note {k}.{i}" * 4})

        async def work() -> None:
            await asyncio.gather(*(one(k) for k in range(workers)))

        return await _measure(work)
    finally:
        await client.aclose()
        await pool.aclose()


def _summary(late: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(late, n=100)
    return statistics.median(late), q[98], max(late)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=100)
    p.add_argument("--ops", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        try:
            out: dict[str, list[tuple[float, float, float]]] = {"rampart": [], "redis.asyncio": []}
            for r in range(args.rounds):
                late = asyncio.run(rampart_round(server.url, f"lat{r}", args.workers, args.ops))
                out["rampart"].append(_summary(late))
                late = asyncio.run(redis_round(server.url, f"x{r}", args.workers, args.ops))
                out["redis.asyncio"].append(_summary(late))
        finally:
            server.stop()
    print(f"{args.workers} coroutines x {args.ops} appends, {args.rounds} alternated rounds")
    print(f"{'':14s} {'p50 ms':>8s} {'p99 ms':>8s} {'max ms':>8s}   (medians over rounds)")
    for name, rows in out.items():
        med = [statistics.median(col) for col in zip(*rows)]
        print(f"{name:14s} {med[0]:8.2f} {med[1]:8.2f} {med[2]:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
