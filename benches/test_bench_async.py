"""The asyncio twins under load (issue 18): W coroutines each do N rounds of one
shared write (Redis, AOF ``appendfsync always``) and one gated compile of a task
never seen before (MiniLM: the task is embedded, and so is the block just
written), while a ticker coroutine sleeps 1 ms at a time and records how late it
wakes — the event loop's stall. Baseline, in the same run: the same work on W
threads with the sync methods.

    python -m pytest benches/test_bench_async.py --benchmark-only -s -p no:cacheprovider

``RAMPART_BENCH_ASYNC_WORKERS`` (100) and ``RAMPART_BENCH_ASYNC_OPS`` (100) set W
and N. Results in ``extra_info``: ops/s (one op = a write + a gated compile),
stall p50/p99/max in ms, and the async/threads throughput ratio (printed).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rampart
import rampart.embeddings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from redis_server import RedisServer, redis_available  # noqa: E402

SEEDS = ROOT / "seeds"
WORKERS = int(os.environ.get("RAMPART_BENCH_ASYNC_WORKERS", "100"))
OPS = int(os.environ.get("RAMPART_BENCH_ASYNC_OPS", "100"))
_RESULTS: dict[str, float] = {}


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not redis_available():
        pytest.skip("redis-server / redis-py not installed")
    if not rampart.embeddings.model_info().get("installed"):
        pytest.skip("the MiniLM model is not installed")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server.url
    server.stop()


def _note(k: int, i: int) -> tuple[str, str]:
    return (
        f"Worker {k} learned in step {i}: check fixture {k * OPS + i} before the suite.",
        f"worker {k} step {i}: repair the flaky fixture number {k * OPS + i}",
    )


def _percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else 0.0


async def _async_run(url: str) -> dict[str, float]:
    reg = await rampart.BlockRegistry.aopen(
        url, f"bench-{uuid.uuid4().hex[:8]}", "default", seeds=[SEEDS], label=None
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    late: list[float] = []

    async def ticker() -> None:
        while not stop.is_set():
            t = loop.time()
            await asyncio.sleep(0.001)
            late.append(loop.time() - t - 0.001)

    async def worker(k: int) -> None:
        for i in range(OPS):
            text, task = _note(k, i)
            await reg.awrite_agent_block(text, f"run-{k}")
            await reg.acompile(task_text=task, top_k=8, max_tokens=1024)

    tick = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.05)
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(WORKERS)))
    wall = time.perf_counter() - t0
    stop.set()
    await tick
    await reg.aclose()
    assert len(reg) >= WORKERS * OPS
    return {
        "ops_per_s": WORKERS * OPS / wall,
        "wall_s": wall,
        "stall_p50_ms": statistics.median(late) * 1e3,
        "stall_p99_ms": _percentile(late, 0.99) * 1e3,
        "stall_max_ms": max(late) * 1e3,
    }


def _thread_run(url: str) -> dict[str, float]:
    reg = rampart.BlockRegistry.open(
        url, f"bench-{uuid.uuid4().hex[:8]}", "default", seeds=[SEEDS], label=None
    )
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for i in range(OPS):
                text, task = _note(k, i)
                reg.write_agent_block(text, f"run-{k}")
                reg.compile(task_text=task, top_k=8, max_tokens=1024)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(WORKERS)]

    async def watch() -> tuple[float, list[float]]:
        # The same ticker on an idle loop beside the threads: how late a loop
        # wakes on this machine under this work when it runs none of it itself.
        loop = asyncio.get_running_loop()
        late: list[float] = []
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            t = loop.time()
            await asyncio.sleep(0.001)
            late.append(loop.time() - t - 0.001)
        return time.perf_counter() - t0, late

    wall, late = asyncio.run(watch())
    for t in threads:
        t.join()
    reg.close()
    assert not errors, errors[:3]
    return {
        "ops_per_s": WORKERS * OPS / wall,
        "wall_s": wall,
        "idle_loop_stall_p50_ms": statistics.median(late) * 1e3,
        "idle_loop_stall_p99_ms": _percentile(late, 0.99) * 1e3,
    }


@pytest.mark.benchmark(group="async-load")
def test_threads_baseline(benchmark: Any, redis_url: str) -> None:
    out = benchmark.pedantic(_thread_run, args=(redis_url,), rounds=1, iterations=1)
    benchmark.extra_info.update(out, workers=WORKERS, ops=OPS)
    _RESULTS["threads"] = out["ops_per_s"]
    print(
        f"\nthreads: {WORKERS}x{OPS}: {out['ops_per_s']:.0f} ops/s in {out['wall_s']:.1f} s; "
        f"an idle loop beside them: stall p50 {out['idle_loop_stall_p50_ms']:.2f} ms, "
        f"p99 {out['idle_loop_stall_p99_ms']:.2f} ms"
    )


@pytest.mark.benchmark(group="async-load")
def test_coroutines(benchmark: Any, redis_url: str) -> None:
    out = benchmark.pedantic(lambda: asyncio.run(_async_run(redis_url)), rounds=1, iterations=1)
    benchmark.extra_info.update(out, workers=WORKERS, ops=OPS)
    line = (
        f"\ncoroutines: {WORKERS}x{OPS}: {out['ops_per_s']:.0f} ops/s in {out['wall_s']:.1f} s; "
        f"loop stall p50 {out['stall_p50_ms']:.2f} ms, p99 {out['stall_p99_ms']:.2f} ms, "
        f"max {out['stall_max_ms']:.1f} ms"
    )
    if "threads" in _RESULTS:
        ratio = out["ops_per_s"] / _RESULTS["threads"]
        benchmark.extra_info["vs_threads"] = ratio
        line += f"; throughput {ratio:.2f}x the threads'"
    print(line)
