"""Shared, durable registries (docs/specification.md §7) against real stores and real processes:
SQLite files, a real redis-server (tests/redis_server.py), a real PostgreSQL
server (tests/postgres_server.py), kill -9 of writers and of the servers, garbage
entries, racing creators, and hypothesis driving several replicas against the
pure-Python model."""

from __future__ import annotations

import itertools
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
import rampart
from conftest import ROOT, SEEDS, needs_model, writer_lock_held
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres_server import PostgresServer, skip_without_postgres
from pymodel import ModelBlock, ModelRegistry
from rampart.errors import (
    BlockPermissionError,
    EvictionError,
    InvalidArgumentError,
    StoreUnavailableError,
)
from rampart.shared.replica import CHECKPOINT_EVERY
from rampart.stores import open_store
from redis_server import RedisServer, skip_without_redis

N_SEEDS = len(rampart.BlockRegistry.from_files([SEEDS]))


def state(reg: rampart.BlockRegistry) -> list[tuple[Any, ...]]:
    """Everything a replica must agree on: ids, order, provenance, counts, vectors."""
    out = []
    for b in reg.list_blocks():
        vec = reg.embedding(b.runtime_id) if reg.embedding_model is not None else None
        out.append(
            (
                b.runtime_id,
                b.semantic_name,
                b.content,
                b.priority,
                b.source,
                b.author_id,
                b.evictable,
                b.trajectory_id,
                b.tags,
                b.created_at,
                b.access_count,
                b.wrap_prefix,
                b.wrap_suffix,
                b.gated,
                None if vec is None else vec.tobytes(),
            )
        )
    return out


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'shared.db'}"


class Server(Protocol):
    """What the failure tests do to a store's server (Redis or PostgreSQL)."""

    @property
    def url(self) -> str: ...

    def start(self) -> None: ...

    def kill(self) -> None: ...


def start_server(kind: str, tmp_path: Path) -> tuple[Server, Callable[[], None]]:
    """A started server of ``kind`` and what stops it."""
    if kind == "redis":
        skip_without_redis()
        d = tmp_path / "redis"
        d.mkdir(exist_ok=True)
        redis = RedisServer(d)
        redis.start()
        return redis, redis.stop
    skip_without_postgres()
    pg = PostgresServer()
    try:
        pg.start()
    except BaseException:
        pg.close()
        raise
    return pg, pg.close


@pytest.fixture(params=["redis", "postgres"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    srv, stop = start_server(request.param, tmp_path)
    yield srv
    stop()


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    srv, stop = start_server(request.param, tmp_path)
    yield srv.url
    stop()


def opened(url: str, name: str = "agent", **kw: Any) -> rampart.BlockRegistry:
    kw.setdefault("label", None)
    return rampart.BlockRegistry.open(url, name, **kw)


# ---- semantics ------------------------------------------------------------------------


def test_replicas_share_ids_outcomes_and_errors(store_url: str) -> None:
    a = opened(store_url, seeds=[SEEDS])
    b = opened(store_url)
    try:
        assert a.shared and b.shared and not rampart.BlockRegistry().shared
        assert (a.name, a.store_url) == ("agent", store_url)
        assert len(a) == len(b) == N_SEEDS
        assert a.registry_id == b.registry_id
        rid = a.write_agent_block("Run `make lint` before committing.", "run-1")
        b.sync()
        assert b.get_by_id(rid).content == "Run `make lint` before committing."
        assert a.promote(rid, to_front=True) == 0
        seed = a.runtime_ids()[1]
        # Refused in the journal: the same typed error, no replica changes.
        before = state(a)
        with pytest.raises(EvictionError):
            b.evict(seed)
        with pytest.raises(BlockPermissionError):
            b.evict(seed, force=True, by=rampart.BlockRegistry())
        a.sync()
        b.sync()
        assert state(a) == state(b) == before
        # The author (the shared registry itself, in any process) may force it.
        b.evict(seed, force=True)
        a.update_block_content(rid, "Run `make lint` first.")
        a.set_wrap(rid, "<critical>", "</critical>")
        a.update_priority(rid, 0.9)
        a.compile(max_tokens=400)
        b.compile(max_tokens=400)
        a.sync()
        b.sync()
        a.sync()
        assert state(a) == state(b)
        assert b.get_by_id(rid).wrap_prefix == "<critical>"
        assert a.position == b.position
    finally:
        a.close()
        b.close()


def test_coordination_across_registries(sqlite_url: str) -> None:
    planner = opened(sqlite_url, "planner")
    worker = opened(sqlite_url, "worker", seeds=[SEEDS])
    worker2 = opened(sqlite_url, "worker")
    try:
        rid = worker.write_block(
            "Fix only tests/test_api.py.",
            "plan",
            source="orchestrator",
            evictable=False,
            author=planner,
        )
        worker2.sync()
        assert worker2.runtime_ids()[0] == rid
        assert worker2.get_by_id(rid).author_id == planner.registry_id
        with pytest.raises(BlockPermissionError):
            worker2.evict(rid, force=True)
        worker2.evict(rid, force=True, by=planner)
        worker.sync()
        assert rid not in worker
    finally:
        for r in (planner, worker, worker2):
            r.close()


def test_restore_and_rollback_replay_everywhere(sqlite_url: str) -> None:
    a = opened(sqlite_url, seeds=[SEEDS])
    b = opened(sqlite_url)
    try:
        snap = a.snapshot()
        a.write_agent_block("lesson one", "run-7")
        a.write_agent_block("lesson two", "run-7")
        assert a.rollback_trajectory("run-7") == 2
        a.write_agent_block("lesson three", "run-8")
        a.restore(snap)
        b.sync()
        assert len(a) == N_SEEDS
        assert state(a) == state(b)
        assert not set(a.runtime_ids()) & {x.runtime_id for x in snap.blocks()}
    finally:
        a.close()
        b.close()


def test_custom_policy_evictions_are_journaled_as_decided(sqlite_url: str) -> None:
    a = opened(sqlite_url, eviction_policy=lambda blk: blk.priority)
    b = opened(sqlite_url)
    try:
        for p in (0.1, 0.9, 0.5):
            a.write_block(f"p{p}", f"b{p}", priority=p)
        assert len(a.evict_by_policy(1)) == 1  # the highest score: priority 0.9
        b.sync()
        assert sorted(x.priority for x in b.list_blocks()) == [0.1, 0.5]
    finally:
        a.close()
        b.close()


def test_settings_must_match(sqlite_url: str) -> None:
    a = opened(sqlite_url)
    try:
        with pytest.raises(InvalidArgumentError, match="tokeniser"):
            opened(sqlite_url, tokeniser=lambda s: len(s.split()))
        with pytest.raises(InvalidArgumentError, match="name"):
            opened(sqlite_url, "bad name!")
        with pytest.raises(InvalidArgumentError, match="store URL"):
            rampart.BlockRegistry.open("ftp://x", "a")
    finally:
        a.close()


def test_closed_registry_stays_readable(sqlite_url: str) -> None:
    a = opened(sqlite_url, seeds=[SEEDS])
    a.close()
    assert a.compile(max_tokens=300).included
    with pytest.raises(rampart.RampartError, match="closed"):
        a.write_agent_block("x", "run")


def test_checkpoint_compaction_and_a_late_replica(store_url: str) -> None:
    a = opened(store_url)
    try:
        ids = [a.write_block(f"note {i}", f"n{i}") for i in range(CHECKPOINT_EVERY + 5)]
        a.sync()
        store = open_store(store_url)
        deadline = time.monotonic() + 10
        while store.checkpoint("agent") is None and time.monotonic() < deadline:
            time.sleep(0.01)  # the follower writes it off the write path
        ck = store.checkpoint("agent")
        # The state after whatever entry the follower had applied when it got
        # to it: at or just past the 1 000th.
        assert ck is not None and CHECKPOINT_EVERY <= ck[0] <= CHECKPOINT_EVERY + 5
        assert store.compact("agent", 10**9) == ck[0]
        assert store.first_seq("agent") == (ck[0] + 1 if ck[0] < CHECKPOINT_EVERY + 5 else 0)
        late = opened(store_url)
        assert late.runtime_ids() == ids == a.runtime_ids()
        assert state(late) == state(a)
        late.close()
    finally:
        a.close()


# ---- processes ---------------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys, rampart
    url, name, tag, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    reg = rampart.BlockRegistry.open(url, name, label=None)
    for i in range(n):
        rid = reg.write_block(f"{tag} {i}", f"{tag}{i}", priority=(i % 10) / 10)
        if i % 3 == 0:
            reg.promote(rid, to_front=True)
        print(rid, flush=True)   # printed = acknowledged
    reg.sync()
    reg.close()
    """
)


def run_writer(url: str, tag: str, n: int, name: str = "agent") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, url, name, tag, str(n)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def test_processes_writing_at_once_converge(store_url: str) -> None:
    reg = opened(store_url, seeds=[SEEDS])
    try:
        procs = [run_writer(store_url, f"w{k}", 40) for k in range(3)]
        acked = []
        for p in procs:
            out, _ = p.communicate(timeout=120)
            assert p.returncode == 0
            acked += out.split()
        reg.sync()
        other = opened(store_url)
        assert set(acked) <= set(reg.runtime_ids())
        assert len(reg) == N_SEEDS + 120
        assert state(other) == state(reg)
        other.close()
    finally:
        reg.close()


def test_kill_9_of_a_writer_loses_no_acknowledged_write(store_url: str) -> None:
    opened(store_url).close()
    p = run_writer(store_url, "k", 100_000)
    assert p.stdout is not None
    acked = [p.stdout.readline().strip() for _ in range(50)]
    os.kill(p.pid, signal.SIGKILL)
    rest, _ = p.communicate()
    acked += rest.split()
    reg = opened(store_url)
    try:
        assert set(acked) <= set(reg.runtime_ids())
    finally:
        reg.close()


def test_racing_creators_seed_once(store_url: str) -> None:
    script = textwrap.dedent(
        """
        import sys, rampart
        reg = rampart.BlockRegistry.open(sys.argv[1], "race", seeds=[sys.argv[2]], label=None)
        print(len(reg), reg.registry_id)
        reg.close()
        """
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, store_url, str(SEEDS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert {o[1] for o in outs} != set() and len({o[1] for o in outs}) == 1
    reg = opened(store_url, "race")
    try:
        assert len(reg) == N_SEEDS
    finally:
        reg.close()


def test_a_forked_child_writes_through_its_own_follower(store_url: str) -> None:
    reg = opened(store_url)
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                reg.write_block("from the child", "child")
                reg.sync()
                code = 0
            finally:
                os._exit(code)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.02)
        else:
            os.kill(pid, signal.SIGKILL)
            pytest.fail("the forked child hung")
        assert os.waitstatus_to_exitcode(status) == 0
        reg.sync()
        assert [b.content for b in reg.list_blocks()] == ["from the child"]
    finally:
        reg.close()


# ---- failures -----------------------------------------------------------------------------


def test_kill_9_of_the_server_loses_no_acknowledged_write(server: Server) -> None:
    """Redis with AOF ``appendfsync always``; PostgreSQL with ``synchronous_commit``
    on (the store's default) and ``fsync``: SIGKILL, restart, nothing lost."""
    url = server.url
    opened(url).close()
    p = run_writer(url, "r", 60)
    out, _ = p.communicate(timeout=120)
    acked = out.split()
    assert len(acked) == 60
    server.kill()
    server.start()
    reg = opened(url)
    try:
        assert set(acked) <= set(reg.runtime_ids())
    finally:
        reg.close()


def test_store_down_then_back(server: Server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="rampart.shared")
    caplog.set_level(logging.CRITICAL, logger="psycopg.pool")
    url = server.url
    reg = opened(url, seeds=[SEEDS])
    try:
        before = state(reg)
        server.kill()
        with pytest.raises(StoreUnavailableError) as err:
            reg.write_agent_block("lost", "run-1")
        assert isinstance(err.value, ConnectionError)
        assert state(reg) == before
        assert reg.compile(max_tokens=500).included  # compile never waits on the store
        server.start()
        # The first write after the outage lands: the error of an attempt made while
        # the server was down does not fail a call made once it is back.
        after = reg.write_agent_block("after the outage", "run-2")
        assert after in reg.runtime_ids()
        p = run_writer(url, "back", 3)
        out, _ = p.communicate(timeout=120)
        deadline = time.monotonic() + 30
        while not set(out.split()) <= set(reg.runtime_ids()):
            assert time.monotonic() < deadline, "the follower did not catch up"
            time.sleep(0.05)
        reg.sync()
    finally:
        reg.close()


@pytest.mark.parametrize("landed", [True, False], ids=["landed", "lost"])
def test_access_counts_publish_once_when_an_append_reply_is_lost(
    store_url: str, landed: bool
) -> None:
    """An access entry is a delta, and its append can reach the journal with the
    reply lost (a failover between the append and its WAIT, a timeout). The
    replica retries, but only what is not in the journal: every other replica
    counts each compile once (CI once saw a Redis-cluster failover count 2)."""
    a = opened(store_url, seeds=[SEEDS])
    b = opened(store_url)
    rep = a._replica
    real = rep.store.append
    faults: list[bytes] = []

    def append(name: str, entry: bytes, after: int) -> Any:
        # A fault in the real store's path: the first access entry's append
        # lands (or not) and then raises, as a lost reply does.
        if not faults and rep._outbox and rep._outbox[0] == ("access", entry):
            faults.append(entry)
            if landed:
                real(name, entry, after)
            raise StoreUnavailableError("the reply was lost")
        return real(name, entry, after)

    rep.store.append = append  # type: ignore[method-assign]
    try:
        included = a.compile(max_tokens=100_000).included
        assert included
        for _ in range(3):  # the follower's flush or this one meets the fault
            try:
                a.sync()
                break
            except StoreUnavailableError:
                pass
        assert len(faults) == 1
        a.sync()
        b.sync()
        counts = {x.semantic_name: x.access_count for x in b.list_blocks()}
        assert {counts[n] for n in included} == {1}
        assert counts == {x.semantic_name: x.access_count for x in a.list_blocks()}
        assert not rep._outbox and rep._in_doubt is None
        late = opened(store_url)  # replays the journal: each entry once
        try:
            assert {x.semantic_name: x.access_count for x in late.list_blocks()} == counts
        finally:
            late.close()
    finally:
        rep.store.append = real  # type: ignore[method-assign]
        a.close()
        b.close()


def test_a_failed_open_leaves_no_connection_behind(store_url: str) -> None:
    """The store an open made from a URL is closed when the open fails: CI saw a
    refused Sentinel open's socket warn (an error here) inside a later test."""
    import gc

    for _ in range(3):
        with pytest.raises(InvalidArgumentError, match="registry 'nobody'"):
            rampart.BlockRegistry.open(store_url, "nobody", create=False)
    gc.collect()  # an unclosed client socket warns here, and warnings are errors


def test_sqlite_store_unavailable(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError):
        rampart.BlockRegistry.open(f"sqlite:///{tmp_path}/missing/dir/x.db", "a")


def test_sqlite_open_waits_for_a_creator_holding_the_lock(tmp_path: Path) -> None:
    """Workers that start together: one holds the writer lock on a fresh file
    (still in rollback mode) while the others open it. SQLite answers the switch
    to WAL with BUSY at once there, without its busy handler; the store waits
    within its timeout instead of failing (CI saw uvicorn's second worker die)."""
    path = tmp_path / "x.db"
    with writer_lock_held(path, 0.3):
        reg = rampart.BlockRegistry.open(f"sqlite:///{path}", "a", label=None)
        reg.close()
    # Held past the timeout: a typed error that names the file, not a hang.
    fresh = tmp_path / "y.db"
    with (
        writer_lock_held(fresh, 1.0),
        pytest.raises(StoreUnavailableError, match=r"y\.db.*locked"),
    ):
        rampart.BlockRegistry.open(f"sqlite:///{fresh}?timeout=0.2", "a", label=None)


def test_garbage_entry_is_skipped_by_every_replica(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    a = opened(store_url, seeds=[SEEDS])
    b = opened(store_url)
    try:
        store = open_store(store_url)
        caplog.set_level(logging.WARNING, logger="rampart.shared")
        seq, _ = store.append("agent", b"\x01garbage from a foreign client", 0)
        store.append("agent", b"", 0)
        a.write_agent_block("after the garbage", "run-1")
        a.sync()
        b.sync()
        assert state(a) == state(b)
        skipped = [r for r in caplog.records if f"entry {seq}:" in r.getMessage()]
        assert len(skipped) == 2  # one warning per replica
    finally:
        a.close()
        b.close()


# ---- hypothesis: replicas against the pure-Python model -----------------------------------

OPS = st.lists(
    st.tuples(
        st.integers(0, 2),  # which replica acts
        st.sampled_from(["write", "front", "back", "evict", "priority", "group", "sync"]),
        st.integers(0, 50),
    ),
    min_size=1,
    max_size=25,
)


@pytest.fixture(scope="module", params=["sqlite", "redis", "postgres"])
def fresh_registry(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[], tuple[str, str]]]:
    """A new, empty shared registry ``(url, name)`` per call: a new SQLite file, or
    a new name on one server for the whole module (a server per hypothesis example
    would dominate the run)."""
    if request.param == "sqlite":
        yield lambda: (f"sqlite:///{tmp_path_factory.mktemp('hyp') / 'h.db'}", "agent")
        return
    srv, stop = start_server(request.param, tmp_path_factory.mktemp("hyp-server"))
    counter = itertools.count()
    yield lambda: (srv.url, f"hyp-{next(counter)}")
    stop()


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=OPS)
def test_replicas_match_the_model(
    fresh_registry: Callable[[], tuple[str, str]], ops: list[Any]
) -> None:
    url, name = fresh_registry()
    replicas = [opened(url, name) for _ in range(3)]
    model = ModelRegistry(replicas[0].registry_id)
    try:
        for k, (who, op, n) in enumerate(ops):
            reg = replicas[who]
            ids = reg.runtime_ids()  # what this replica sees: maybe behind
            if op == "write":
                rid = reg.write_block(f"c{k}", f"b{k}", priority=(n % 11) / 10)
                model.write(ModelBlock(rid, f"b{k}", f"c{k}", 0, priority=(n % 11) / 10))
            elif op == "sync":
                reg.sync()
            elif ids:
                rid = ids[n % len(ids)]
                group = ids[: 1 + n % 3]
                try:
                    if op == "front":
                        assert reg.promote(rid, to_front=True) == model.move_to(rid, 0)
                    elif op == "back":
                        got = reg.promote(rid, to_back=True)
                        assert got == model.move_to(rid, len(model.ids()) - 1)
                    elif op == "evict":
                        reg.evict(rid)
                        model.evict(rid)
                    elif op == "priority":
                        reg.update_priority(rid, (n % 11) / 10)
                        model.blocks[rid].priority = (n % 11) / 10
                    elif op == "group":
                        assert reg.promote_group(group, to_position=n % 4) == (
                            model.promote_group(group, n % 4)
                        )
                except rampart.BlockNotFoundError:
                    # Another replica evicted it (for a group: one of them) first:
                    # refused in journal order, and so in the model too.
                    acted_on = group if op == "group" else [rid]
                    assert any(x not in model.blocks for x in acted_on)
            # A replica that acted has applied the journal up to its own entry,
            # which in this one thread is everything appended so far.
            if op == "write" or (op != "sync" and ids):
                assert reg.runtime_ids() == model.ids()
        for r in replicas:
            r.sync()
            assert r.runtime_ids() == model.ids()
            assert [b.priority for b in r.list_blocks()] == [
                b.priority for b in model.blocks.values()
            ]
    finally:
        for r in replicas:
            r.close()


def test_cli_reads_and_compacts_a_shared_registry(sqlite_url: str) -> None:
    reg = opened(sqlite_url, seeds=[SEEDS])
    rid = reg.write_agent_block("Run `make lint` before committing.", "run-1")
    reg.close()

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rampart", *argv], capture_output=True, text=True, cwd=ROOT
        )

    out = cli("inspect", "--store", sqlite_url, "--name", "agent", "--json")
    assert out.returncode == 0, out.stderr
    assert rid in out.stdout
    out = cli("compile", "--store", sqlite_url, "--name", "agent", "--max-tokens", "300")
    assert out.returncode == 0 and "included" in out.stdout
    out = cli("store", "ls", sqlite_url)
    assert out.returncode == 0 and out.stdout.startswith("agent  2 entries")
    out = cli("store", "compact", sqlite_url, "agent")
    assert out.returncode == 0 and "2 entries dropped" in out.stdout
    late = opened(sqlite_url)
    assert rid in late and len(late) == N_SEEDS + 1
    late.close()
    for argv in (
        ("inspect", "--store", sqlite_url),
        ("inspect", str(SEEDS), "--store", sqlite_url, "--name", "agent"),
        ("store", "compact", sqlite_url, "nope"),
        ("store", "ls", "ftp://nowhere"),
    ):
        out = cli(*argv)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, (argv, out.stderr)


@needs_model
def test_vectors_travel_in_the_journal(sqlite_url: str) -> None:
    """The writer embeds (off its write path) and publishes; a replica without
    the model gets the very same vector, and gates with it."""
    a = opened(sqlite_url, embedding_model="default", seeds=[SEEDS])
    b = opened(sqlite_url)  # no model: it can only get vectors from the journal
    try:
        rid = a.write_agent_block("Always sign release tags with GPG.", "run-1")
        b.sync()
        deadline = time.monotonic() + 30
        while b.embedding(rid) is None:
            assert time.monotonic() < deadline, "the vector never arrived"
            time.sleep(0.02)
            b.sync()
        va, vb = a.embedding(rid), b.embedding(rid)
        assert va is not None and vb.tobytes() == va.tobytes()
        assert all(b.embedding(x) is not None for x in b.runtime_ids())
        q = rampart.default_embedder().encode("sign the release tag")
        top = b.compile(task_embedding=q, top_k=1).included
        assert top == [a.get_by_id(rid).semantic_name]
    finally:
        a.close()
        b.close()


def test_tool_schemas_load_once_for_every_replica(sqlite_url: str) -> None:
    a = opened(sqlite_url)
    b = opened(sqlite_url)
    try:
        ids = a.load_tools(ROOT / "tests" / "data" / "mcp_git_tools.json")
        b.sync()
        assert b.runtime_ids() == ids
        assert b.get_by_id(ids[0]).tool_schema == a.get_by_id(ids[0]).tool_schema
        wire = [t["function"]["name"] for t in b.compile(tools_in_prompt=False).tools("openai")]
        assert wire == [a.get_by_id(i).semantic_name for i in ids]
        a.evict(ids[0])
        b.sync()
        assert ids[0] not in b
    finally:
        a.close()
        b.close()


def _valid_entries() -> list[bytes]:
    """Real entries, encoded by the core's own write methods: with a journal
    origin attached, each write's body returns its entry as a value
    (``_core.PendingEntry``) instead of applying it, and no replica takes it."""
    from rampart import _core
    from rampart._ops import body_of

    B = rampart.BlockRegistry
    reg = B.from_files([SEEDS], label=None)
    rid = reg.runtime_ids()[0]
    snap = reg.snapshot()
    reg._core.attach_journal(b"\0" * 16)
    pending = [
        reg._insert_many([("n", "text", 0.5, ["t"], None, None)], "seed", False, None),
        body_of(B.write_agent_block)(reg, "c", "run", "n", tags=["t"], position=2, gated=False),
        body_of(B.promote_group)(reg, [rid], to_position=1),
        body_of(B.evict_by_policy)(reg, 1, threshold=0.1),
        body_of(B.set_wrap)(reg, rid, "<a>", "</a>"),
        body_of(B.set_gated)(reg, rid, False),
        body_of(B.restore)(reg, snap),
    ]
    assert all(type(p) is _core.PendingEntry for p in pending)
    assert len(reg) == len(snap)  # nothing was applied
    return [p.data for p in pending]


VALID = _valid_entries()


@settings(max_examples=300, deadline=None)
@given(
    base=st.sampled_from(VALID),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=4),
    cut=st.integers(0, 10**6),
    junk=st.binary(max_size=64),
)
def test_journal_decoder_fuzz(base: bytes, flips: list[Any], cut: int, junk: bytes) -> None:
    """Damaged, truncated or foreign entries: only rampart's typed errors, never a
    crash, and a refused entry leaves the replica as it was."""
    reg = rampart.BlockRegistry.from_files([SEEDS], label=None)
    data = bytearray(base)
    for at, x in flips:
        data[at % len(data)] ^= x
    data = data[: max(1, cut % (len(data) + 1))] + junk if cut % 3 == 0 else data
    before = state(reg)
    try:
        reg._core.apply_entry(bytes(data), b"\x02" * 16)
    except rampart.RampartError:
        assert state(reg) == before


def test_lone_surrogates_are_refused_before_the_journal(sqlite_url: str) -> None:
    a = opened(sqlite_url)
    try:
        with pytest.raises(InvalidArgumentError, match="surrogate"):
            a.write_block("text \ud800", "n")
        with pytest.raises(InvalidArgumentError, match="surrogate"):
            a.get_by_id("\ud800")
        for find in (a.get_by_name, a.find_by_tag):
            with pytest.raises(InvalidArgumentError, match="surrogate"):
                find("\udfff")
        assert a.position == 0 and len(a) == 0
    finally:
        a.close()


def test_postgres_durability_setting_and_errors(tmp_path: Path) -> None:
    """synchronous_commit: at least `on` by default (even for a role set to
    `off`), exactly what the URL says otherwise; refusals are typed and never
    show the password."""
    import psycopg

    srv, stop = start_server("postgres", tmp_path)
    try:
        with psycopg.connect(srv.url, autocommit=True) as c:
            c.execute("CREATE ROLE careless LOGIN PASSWORD 'pw1' IN ROLE pg_write_all_data")
            c.execute("ALTER ROLE careless SET synchronous_commit = off")
            c.execute("GRANT CREATE ON SCHEMA public TO careless")
            c.execute("CREATE ROLE reader LOGIN PASSWORD 's3cret'")
            c.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")

        def session_setting(url: str) -> str:
            store = open_store(url)
            try:
                store.names()  # connects, creates the tables
                return str(store._run(lambda c: c.execute("SHOW synchronous_commit").fetchone()[0]))
            finally:
                store.close()

        careless = srv.url.replace("postgres@", "careless:pw1@")
        assert session_setting(careless) == "on"
        assert session_setting(careless + "?synchronous_commit=off") == "off"
        assert session_setting(srv.url + "?synchronous_commit=Remote_Apply") == "remote_apply"
        with pytest.raises(InvalidArgumentError, match="synchronous_commit"):
            open_store(srv.url + "?synchronous_commit=sometimes")
        with pytest.raises(InvalidArgumentError, match="pool_max"):
            open_store(srv.url + "?pool_max=0")
        reader = open_store(srv.url.replace("postgres@", "reader:s3cret@").replace(
            "/postgres", "/postgres?pool_max=1"))  # fmt: skip
        with pytest.raises(StoreUnavailableError, match="permission denied") as err:
            reader.names()  # the tables exist: reading them is refused
        assert "s3cret" not in str(err.value)
        reader.close()
        wrong = open_store(srv.url.replace("postgres@", "nobody_here:s3cret@"))
        with pytest.raises(StoreUnavailableError, match="does not exist") as err:
            wrong.meta("agent")
        assert "s3cret" not in str(err.value) and "s3cret" not in repr(wrong)
        wrong.close()
    finally:
        stop()
