"""The asyncio twins (``a``-methods) against real stores: a SQLite file, a real
redis-server and PostgreSQL. Same outcomes and typed errors as the sync methods,
concurrent coroutines, cancellation mid-write, and no blocking call on the event
loop's thread. The last is checked by cause, never by time: every blocking entry
point (the store's sync methods, the model's runs, a blocking acquire of the
replica's locks) records the thread that ran it, and the loop's thread must be
none of them, also while another thread holds the replica's lock for seconds.
(Loop lateness itself is measured in benches/async_loop_lateness.py.)"""

from __future__ import annotations

import asyncio
import inspect
import logging
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import rampart
from conftest import SEEDS, needs_model
from rampart.embeddings.coalesce import Coalescer
from rampart.errors import (
    BlockNotFoundError,
    BlockPermissionError,
    EvictionError,
    InvalidArgumentError,
    RampartError,
    StoreUnavailableError,
)
from redis_server import RedisServer, skip_without_redis
from test_shared import start_server, state

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the project's test suite.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
]


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """(url, server or None)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}", None
        return
    server, stop = start_server(request.param, tmp_path)
    yield server.url, server
    stop()


class Watch:
    """Records the threads that ran blocking calls; the loop's thread must be none."""

    def __init__(self) -> None:
        self.threads: dict[str, set[int]] = {}

    def wrap(self, obj: Any, name: str) -> None:
        fn = getattr(obj, name)

        def spy(*a: Any, **kw: Any) -> Any:
            self.threads.setdefault(name, set()).add(threading.get_ident())
            return fn(*a, **kw)

        setattr(obj, name, spy)

    def store(self, reg: rampart.BlockRegistry) -> None:
        st = reg._replica.store  # type: ignore[union-attr]
        for name in ("append", "read", "last_seq", "wait", "meta", "checkpoint"):
            self.wrap(st, name)

    def on(self, ident: int) -> list[str]:
        return sorted(n for n, ts in self.threads.items() if ident in ts)


HOLD = 1.5  # seconds the cancellation test keeps the store from appending


def run(coro_fn: Callable[[], Awaitable[Any]], caplog: pytest.LogCaptureFixture) -> Any:
    """Run the coroutine; asyncio's own errors (a task destroyed while pending, a
    callback that raised) fail the test. Nothing here reads the clock: which
    thread ran a blocking call is checked by the tests themselves (``Watch``)."""
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        out = asyncio.run(coro_fn())
    errors = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert not errors, errors
    return out


class SpyLock:
    """A lock that records each thread that acquired it *blocking* (a coroutine
    may only ever try it without blocking)."""

    def __init__(self, lock: Any) -> None:
        self._lock = lock
        self.blocking: set[int] = set()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if blocking:
            self.blocking.add(threading.get_ident())
        return bool(self._lock.acquire(blocking, timeout))

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return bool(self._lock.locked()) if hasattr(self._lock, "locked") else False

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# ---- the same semantics as the sync methods -----------------------------------------------


def test_twins_give_the_sync_outcomes_and_errors(
    store: tuple[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    url, _ = store

    async def go() -> None:
        a = await rampart.BlockRegistry.aopen(url, "agent", seeds=[SEEDS], label=None)
        b = await rampart.BlockRegistry.aopen(url, "agent", label=None)
        watch = Watch()
        watch.store(a)
        loop_thread = threading.get_ident()
        try:
            assert a.shared and len(a) == len(b)
            rid = await a.awrite_agent_block("Run `make lint` first.", "run-1")
            assert isinstance(rid, str) and rid in a
            assert await a.apromote(rid, to_front=True) == 0
            assert await a.ademote(rid, 2) == 2
            assert await a.apromote_to_front(rid) == 0
            last = await a.ademote_to_back(rid)
            assert last == len(a) - 1
            seed = a.runtime_ids()[0]
            before = state(a)
            with pytest.raises(EvictionError):
                await b.aevict(seed)
            with pytest.raises(BlockPermissionError):
                await b.aevict(seed, force=True, by=rampart.BlockRegistry())
            with pytest.raises(BlockNotFoundError):
                await a.aupdate_priority("00000000-0000-4000-8000-000000000000", 0.5)
            with pytest.raises(InvalidArgumentError):  # checked before anything is encoded
                await a.aupdate_priority(rid, 2.0)
            await a.sync_async()
            assert state(a) == before
            gone = await b.aevict(seed, force=True)
            assert isinstance(gone, rampart.InstructionBlock) and gone.runtime_id == seed
            await a.aupdate_block_content(rid, "Run `make lint` before committing.")
            await a.aset_wrap(rid, "<critical>", "</critical>")
            await a.aupdate_priority(rid, 0.9)
            await a.aset_gated(rid, False)
            ids = a.runtime_ids()[:3]
            assert await a.areorder(list(reversed(ids))) is None
            assert await a.apromote_group(ids, to_position=2) == 2
            snap = a.snapshot()
            tools = await a.aload_tools(TOOLS)
            assert [x.semantic_name for x in map(a.get_by_id, tools)] == ["run_tests"]
            n1 = await a.awrite_agent_block("temporary note", "run-2")
            assert await a.arollback_trajectory("run-2") == 1 and n1 not in a
            assert await a.arestore(snap) is None
            assert "run_tests" not in {x.semantic_name for x in a.list_blocks()}
            note = a.get_by_name("agent_note_run-1")[0]  # the restore gave it a new id
            assert note.wrap_prefix == "<critical>"
            assert await a.aevict_by_policy(1) == [note.runtime_id]  # the only evictable one
            result = await a.acompile(max_tokens=300)
            assert result.total_tokens <= 300
            await a.sync_async()
            await b.sync_async()
            await a.sync_async()
            assert state(a) == state(b)
            assert b.get_by_name("agent_note_run-1") == []
            assert watch.on(loop_thread) == []  # no blocking store call on the loop
        finally:
            await a.aclose()
            await b.aclose()
        with pytest.raises(RampartError, match="closed"):
            await a.awrite_block("after close", "late")
        assert len(a) > 0  # readable after close

    run(go, caplog)


def _parameters(fn: Any) -> list[tuple[str, Any, Any, Any]]:
    sig = inspect.signature(fn)
    return [(p.name, p.kind, p.default, p.annotation) for p in sig.parameters.values()]


#: Every coroutine twin and its sync method (``sync_async``: ``a`` + ``sync`` is
#: the keyword ``async``).
_TWINS = {"sync_async": "sync"}


def test_every_twin_has_its_sync_methods_signature() -> None:
    """Parameter names, kinds, defaults and annotations of every ``aX`` equal
    ``X``'s: the write twins come from the same declaration (rampart._ops), so
    none can drift (aopen once refused create=, aload_tools took **kwargs)."""
    B = rampart.BlockRegistry
    twins = {
        n: _TWINS.get(n, n[1:])
        for n in dir(B)
        if inspect.iscoroutinefunction(getattr(B, n)) and not n.startswith("_")
    }
    writes = {
        "add_from_seed", "write_block", "write_agent_block", "update_block_content",
        "update_priority", "set_gated", "set_wrap", "promote", "demote", "promote_to_front",
        "demote_to_back", "reorder", "promote_group", "evict", "evict_by_policy",
        "rollback_trajectory", "restore", "load_tools",
    }  # fmt: skip
    assert {f"a{w}" for w in writes} | {"aopen", "acompile", "afind_relevant"} <= set(twins)
    for twin, sync in twins.items():
        assert hasattr(B, sync), f"{twin} has no sync method {sync}"
        assert _parameters(getattr(B, twin)) == _parameters(getattr(B, sync)), twin
        ret = inspect.signature(getattr(B, twin)).return_annotation
        assert ret == inspect.signature(getattr(B, sync)).return_annotation, twin
        assert "PendingEntry" not in str(ret), twin  # the core's value never leaks out


def test_aopen_takes_create_false(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nowhere.db'}"

    async def go() -> None:
        with pytest.raises(InvalidArgumentError, match="no such file"):
            await rampart.BlockRegistry.aopen(url, "agent", create=False, label=None)
        assert not (tmp_path / "nowhere.db").exists()
        a = await rampart.BlockRegistry.aopen(url, "agent", label=None)
        rid = await a.awrite_block("joined", "n")
        b = await rampart.BlockRegistry.aopen(url, "agent", create=False, label=None)
        try:
            assert rid in b
            with pytest.raises(InvalidArgumentError, match="holds no registry 'other'"):
                await rampart.BlockRegistry.aopen(url, "other", create=False, label=None)
        finally:
            await a.aclose()
            await b.aclose()

    asyncio.run(go())


def test_local_registry_twins_are_the_sync_methods(caplog: pytest.LogCaptureFixture) -> None:
    async def go() -> None:
        reg = rampart.BlockRegistry.from_files([SEEDS])
        rid = await reg.awrite_block("note", "n", priority=0.8, tags=["x"])
        assert reg.get_by_id(rid).tags == ("x",)
        assert await reg.apromote(rid, before=reg.runtime_ids()[0]) == 0
        gone = await reg.aevict(rid)
        assert gone.runtime_id == rid
        with pytest.raises(EvictionError):
            await reg.aevict(reg.runtime_ids()[0])
        await reg.sync_async()  # nothing to do locally
        await reg.aclose()
        out = await reg.acompile(max_tokens=100)
        assert out.prompt == reg.compile(max_tokens=100).prompt
        reg.release()

    run(go, caplog)


# ---- concurrency, cancellation, outages ------------------------------------------------------


def test_many_coroutines_write_at_once(
    store: tuple[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    url, _ = store

    async def go() -> None:
        a = await rampart.BlockRegistry.aopen(url, "agent", label=None)
        b = await rampart.BlockRegistry.aopen(url, "agent", label=None)
        try:

            async def writer(k: int) -> list[str]:
                return [await a.awrite_block(f"note {k}.{i}", f"w{k}") for i in range(5)]

            got = await asyncio.gather(*(writer(k) for k in range(40)))
            ids = [i for ids in got for i in ids]
            assert len(set(ids)) == 200 and all(i in a for i in ids)
            for k, mine in enumerate(got):  # each coroutine's writes in its own order
                assert [a.get_by_id(i).content for i in mine] == [f"note {k}.{i}" for i in range(5)]
            await b.sync_async()
            assert state(a) == state(b)
        finally:
            await a.aclose()
            await b.aclose()

    run(go, caplog)


def _hold_the_store(url: str, server: Any) -> tuple[Callable[[], None], Callable[[], None]]:
    """(hold, release): make the store's next append wait server-side."""
    if server is None:
        path = url[len("sqlite:///") :]
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

        def hold() -> None:
            conn.execute("BEGIN IMMEDIATE")  # SQLite's one writer lock

        def release() -> None:
            conn.execute("COMMIT")
            conn.close()

        return hold, release
    if url.startswith("postgresql:"):
        import psycopg

        pg = psycopg.connect(url, autocommit=True)

        def phold() -> None:  # appends lock their registry's row first
            pg.execute("BEGIN")
            pg.execute("SELECT 1 FROM rampart_registries FOR UPDATE")

        def prelease() -> None:
            pg.execute("COMMIT")
            pg.close()

        return phold, prelease
    import redis

    r = redis.Redis.from_url(url)

    def rhold() -> None:
        r.execute_command("CLIENT", "PAUSE", "10000", "WRITE")

    def rrelease() -> None:
        r.execute_command("CLIENT", "UNPAUSE")
        r.close()

    return rhold, rrelease


def test_cancelled_writes_land_everywhere_or_nowhere(
    store: tuple[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    url, server = store

    async def go() -> None:
        a = await rampart.BlockRegistry.aopen(url, "agent", label=None)
        b = await rampart.BlockRegistry.aopen(url, "agent", label=None)
        try:
            # Cancelled before it ran: nothing was encoded or appended.
            early = asyncio.ensure_future(a.awrite_block("never", "early"))
            early.cancel()
            # Cancelled while its append waits in the store: the append and the
            # apply go on without the caller, so it lands in every replica.
            watch = Watch()
            watch.store(a)
            hold, release = _hold_the_store(url, server)
            hold()
            try:
                mid = asyncio.ensure_future(a.awrite_block("in flight", "mid"))
                # Let it reach the store and wait there (the loop goes on meanwhile).
                for _ in range(int(HOLD / 0.05)):
                    await asyncio.sleep(0.05)
                assert not mid.done()
                mid.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await mid
            finally:
                release()
            with pytest.raises(asyncio.CancelledError):
                await early
            assert watch.on(threading.get_ident()) == []  # no store call on the loop
            await a.sync_async()  # waits for the write whose caller left
            await b.sync_async()
            assert [x.content for x in a.get_by_name("mid")] == ["in flight"]
            assert a.get_by_name("early") == []
            assert state(a) == state(b)
            c = await rampart.BlockRegistry.aopen(url, "agent", label=None)
            assert state(c) == state(a)
            await c.aclose()
        finally:
            await a.aclose()
            await b.aclose()

    run(go, caplog)


def test_the_loop_never_waits_for_a_thread_holding_the_replica_lock(
    store: tuple[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A thread holds the replica's lock for seconds (as the follower does while it
    applies a long tail, or a sync write during its round trip). Coroutines write
    and compile meanwhile: none of their steps blocks on a lock or calls the store
    synchronously, the loop keeps running (a heartbeat ticks while the lock is
    held), and every write lands once the lock is free."""
    url, _ = store

    async def go() -> None:
        a = await rampart.BlockRegistry.aopen(url, "agent", label=None)
        b = await rampart.BlockRegistry.aopen(url, "agent", label=None)
        rep = a._replica
        assert rep is not None
        try:
            watch = Watch()
            watch.store(a)
            lock, olock = SpyLock(rep._lock), SpyLock(rep._olock)
            rep._lock, rep._olock = lock, olock  # type: ignore[assignment]
            held, free = threading.Event(), threading.Event()

            def holder() -> None:
                with lock:
                    held.set()
                    free.wait(10)

            t = threading.Thread(target=holder)
            t.start()
            await asyncio.get_running_loop().run_in_executor(None, held.wait)
            ticks = 0

            async def heartbeat() -> None:
                nonlocal ticks
                while not free.is_set():
                    ticks += 1
                    await asyncio.sleep(0.01)

            beat = asyncio.ensure_future(heartbeat())
            writes = [asyncio.ensure_future(a.awrite_block(f"n{i}", f"w{i}")) for i in range(20)]
            compiled = await a.acompile(max_tokens=500)  # never waits: the core only
            for _ in range(50):  # the writes' appends are done; their applies wait
                await asyncio.sleep(0.01)
            assert ticks > 0 and not all(w.done() for w in writes)
            free.set()  # the thread lets go
            ids = await asyncio.gather(*writes)
            await beat
            await asyncio.get_running_loop().run_in_executor(None, t.join)
            loop_thread = threading.get_ident()
            assert loop_thread not in lock.blocking and loop_thread not in olock.blocking
            assert watch.on(loop_thread) == []
            assert all(i in a for i in ids) and compiled.total_tokens >= 0
            await b.sync_async()
            assert state(a) == state(b)
        finally:
            await a.aclose()
            await b.aclose()

    run(go, caplog)


def test_redis_down_raises_store_unavailable_and_changes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    skip_without_redis()
    server = RedisServer(tmp_path)
    server.start()
    try:

        async def go() -> None:
            a = await rampart.BlockRegistry.aopen(server.url, "agent", label=None)
            rid = await a.awrite_block("kept", "k")
            before = state(a)
            server.stop()
            with pytest.raises(StoreUnavailableError):
                await a.awrite_block("lost", "l")
            with pytest.raises(StoreUnavailableError):
                await a.aevict(rid)
            assert state(a) == before
            assert (await a.acompile(max_tokens=50)).included == ["k"]  # compile still works
            server.start()
            await a.awrite_block("after", "after")
            await a.sync_async()
            assert [x.semantic_name for x in a.list_blocks()] == ["k", "after"]
            await a.aclose()

        # The follower logs its retries while Redis is down: only asyncio's log counts.
        run(go, caplog)
    finally:
        server.stop()


# ---- the model, off the loop -------------------------------------------------------------------


class ThreadModel:
    """An embedding model with no async method: a hash of words, recording the
    threads it ran on (the loop's default executor, never the loop)."""

    def __init__(self) -> None:
        self.threads: set[int] = set()

    def encode(self, text: str) -> list[float]:
        import zlib

        self.threads.add(threading.get_ident())
        v = [0.0] * 64
        for w in text.lower().split():
            v[zlib.crc32(w.encode()) % 64] += 1.0  # not hash(): that changes per process
        return v if any(v) else [1.0] + [0.0] * 63


def test_gated_compile_with_a_plain_model_runs_it_off_the_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = ThreadModel()

    async def go() -> None:
        reg = rampart.BlockRegistry.from_files([SEEDS], model)
        model.threads.clear()  # from_files embedded the seeds here, before any loop work
        await reg.awrite_block("always run the linter before committing", "lint")
        got = await asyncio.gather(
            *(reg.acompile(task_text=f"task {k} linter", top_k=3) for k in range(10))
        )
        ranked = await reg.afind_relevant("always run the linter before committing", top_k=2)
        assert model.threads and threading.get_ident() not in model.threads
        assert ranked[0][0].semantic_name == "lint"
        for k, res in enumerate(got):  # the sync method's selection (run here, on purpose)
            assert res.included == reg.compile(task_text=f"task {k} linter", top_k=3).included
        reg.release()

    run(go, caplog)


@needs_model
def test_gated_compiles_share_the_coalescer_and_never_run_the_model_on_the_loop(
    store: tuple[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    url, _ = store
    emb = rampart.default_embedder()
    watch = Watch()
    for name in ("_run", "encode", "encode_batch_report"):
        watch.wrap(emb, name)
    try:

        async def go() -> None:
            a = await rampart.BlockRegistry.aopen(url, "agent", "default", label=None)
            watch.store(a)
            ident = threading.get_ident()
            try:

                async def worker(k: int) -> list[str]:
                    await a.awrite_agent_block(f"lesson {k}: check the {k}th fixture", f"r{k}")
                    res = await a.acompile(task_text=f"fix fixture number {k}", top_k=4)
                    return res.included

                got = await asyncio.gather(*(worker(k) for k in range(12)))
                for included in got:  # up to 4: the notes that had landed by then
                    assert 1 <= len(included) <= 4
                # The same selection as the sync method gives for the same state.
                res = await a.acompile(task_text="fix fixture number 3", top_k=4)
                assert res.included == a.compile(task_text="fix fixture number 3", top_k=4).included
                assert await a.aembed_pending() == 0
                assert watch.on(ident) == []
            finally:
                await a.aclose()

        run(go, caplog)
    finally:
        for name in ("_run", "encode", "encode_batch_report"):
            emb.__dict__.pop(name, None)


# ---- the coalescer ------------------------------------------------------------------------------


def test_coalescer_serves_threads_and_coroutines_in_shared_rounds() -> None:
    rounds: list[list[int]] = []
    ran_on: set[int] = set()
    gate = threading.Event()

    def work(items: list[int]) -> list[int]:
        ran_on.add(threading.get_ident())
        rounds.append(list(items))
        gate.wait(5)
        return [x * 10 for x in items]

    co: Coalescer[int, int] = Coalescer(work, limit=64)

    async def main() -> tuple[list[int], int]:
        loop_ident = threading.get_ident()
        first = asyncio.ensure_future(co.asubmit(0))  # leads on a worker thread, held
        await asyncio.sleep(0.05)
        threads = [threading.Thread(target=lambda k=k: co.submit(100 + k)) for k in range(3)]
        for t in threads:
            t.start()
        later = [asyncio.ensure_future(co.asubmit(k)) for k in range(1, 9)]
        gone = asyncio.ensure_future(co.asubmit(99))
        await asyncio.sleep(0.05)
        gone.cancel()  # withdrawn before its round: never run
        with pytest.raises(asyncio.CancelledError):
            await gone  # (the withdrawal runs in the cancelled task itself)
        gate.set()
        out = [await first] + list(await asyncio.gather(*later))
        for t in threads:
            t.join(5)
        return out, loop_ident

    out, loop_ident = asyncio.run(main())
    assert out == [k * 10 for k in range(9)]
    assert loop_ident not in ran_on
    assert rounds[0] == [0] and len(rounds) == 2  # everyone who waited shared one round
    assert sorted(rounds[1]) == sorted([*range(1, 9), 100, 101, 102])
    assert 99 not in rounds[1]


@needs_model
def test_aencode_gives_the_sync_vectors() -> None:
    import numpy as np

    emb = rampart.default_embedder()
    texts = ["run the linter", "a much longer text about fixtures " * 80, "x"]

    async def main() -> tuple[list[Any], Any]:
        one = await asyncio.gather(*(emb.aencode(t) for t in texts))
        return list(one), await emb.aencode_batch_report(texts)

    one, (batch, truncated) = asyncio.run(main())
    want, want_truncated = emb.encode_batch_report(texts)
    for v, w in zip(one, want):
        np.testing.assert_allclose(v, w, atol=1e-5)
    np.testing.assert_allclose(batch, want, atol=1e-5)
    assert truncated == want_truncated == [False, True, False]


# ---- the SQLite writer thread -------------------------------------------------------------------


def test_sqlite_appends_through_the_writer_thread_stay_dense_and_fail_alone(
    tmp_path: Path,
) -> None:
    from rampart.stores import SQLiteStore

    st = SQLiteStore(f"sqlite:///{tmp_path / 's.db'}")
    assert st.create("r", b"{}", [])

    async def main() -> list[Any]:
        jobs = [st.aappend("r", f"e{k}".encode(), 0) for k in range(30)]
        jobs.insert(7, st.aappend("missing", b"x", 0))
        out = await asyncio.gather(*jobs, return_exceptions=True)
        await st.aclose()
        return out

    out = asyncio.run(main())
    bad = out.pop(7)
    assert isinstance(bad, InvalidArgumentError) and "missing" in str(bad)
    seqs = [o[0] for o in out]
    assert sorted(seqs) == list(range(1, 31))  # dense, each once
    for seq, tail in out:  # each reply: every entry after 0 up to at least its own
        assert [s for s, _ in tail][:seq] == list(range(1, seq + 1))
    assert [e for _, e in st.read("r", 0)] == [f"e{k}".encode() for k in range(30)]
    st.close()


# ---- users of the twins: the agent -----------------------------------------------------------


def test_agent_arun_on_a_shared_registry_keeps_store_calls_off_the_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from rampart.agent import Agent
    from rampart.integrations.mcp_client import session_classes
    from rampart.llm import OpenAIBackend

    from tests import fake_openai as fake

    session_classes()  # Agent() imports the MCP SDK (seconds, once): not the twins' doing

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    turns: list[Any] = [
        ("", [("remember", {"rule": "Tag releases as vYYYY.MM."})]),
        ("Tagged.", []),
    ]
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        backend = OpenAIBackend(server.base_url, "fake-model", timeout=10)

        async def go() -> Any:
            reg = await rampart.BlockRegistry.aopen(url, "agent", seeds=[SEEDS], label=None)
            watch = Watch()
            watch.store(reg)
            try:
                agent = Agent(reg, backend, memory_tools=True, learn=False)
                out = await agent.arun("Tag the release.")
                assert watch.on(threading.get_ident()) == []
                return out
            finally:
                await reg.aclose()

        try:
            run_ = run(go, caplog)
        finally:
            backend.close()
    assert run_.answer == "Tagged." and run_.memory_writes
    other = rampart.BlockRegistry.open(url, "agent", label=None)
    assert [b.content for b in other.find_by_tag("lesson")] == ["Tag releases as vYYYY.MM."]
    other.close()


def test_tool_example_gating_gives_the_sync_selection(caplog: pytest.LogCaptureFixture) -> None:
    model = ThreadModel()
    tools = [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": desc,
                "parameters": {"type": "object", "properties": {}},
            },
            "examples": examples,
        }
        for name, desc, examples in [
            ("run_tests", "Run the test suite.", ["are the tests green", "check the build"]),
            ("tag_release", "Tag a release.", ["cut version two", "publish the release"]),
        ]
    ]

    async def go() -> None:
        reg = rampart.BlockRegistry(model)
        await reg.aload_tools(tools)
        model.threads.clear()
        got = await reg.acompile(task_text="publish the release now", top_k=1)
        ranked = await reg.afind_relevant("are the tests green")
        assert await reg.aadd_tool_example("run_tests", "is main broken") is not None
        assert threading.get_ident() not in model.threads
        assert got.included == ["tag_release"]
        assert got.included == reg.compile(task_text="publish the release now", top_k=1).included
        assert ranked[0][0].semantic_name == "run_tests"
        reg.release()

    run(go, caplog)
