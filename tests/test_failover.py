"""Redis that fails over (docs/specification.md §7, docs/shared.md "Deploying Redis"): a real
Sentinel set (master + 2 replicas + 3 sentinels) and a real Cluster (3 masters +
3 replicas), kill -9 of the master under continuous writes from several
processes. With ``?wait=1`` no acknowledged write is lost after the promotion;
the clients find the new master by themselves; during the switch a mutation
raises ``StoreUnavailableError`` while compile keeps working; every replica
converges afterwards. (The loss window without ``wait`` is measured in
benches/test_bench_shared.py: it is a measurement, not a property.)"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import rampart
from conftest import ROOT
from rampart.errors import StoreUnavailableError
from redis_server import ClusterSet, FreshSentinelSet, SentinelSet, _cli, skip_without_redis
from test_shared import state

# Writes until it has `n` acknowledged ones (or `limit` seconds passed, or the stop
# file exists), retrying refused ones, pausing `pause` seconds after each; prints
# each acknowledged id (printed = acknowledged).
WRITER = textwrap.dedent(
    """
    import os, sys, time, rampart
    from rampart.errors import StoreUnavailableError
    url, tag, n, limit = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    stop, pause = sys.argv[5] or None, float(sys.argv[6])
    reg = rampart.BlockRegistry.open(url, "agent", label=None)
    deadline = time.monotonic() + limit
    done = refused = 0
    while done < n and time.monotonic() < deadline and not (stop and os.path.exists(stop)):
        try:
            rid = reg.write_block(f"{tag} {done}", f"{tag}{done}")
        except StoreUnavailableError:
            refused += 1
            time.sleep(0.02)
            continue
        done += 1
        print(rid, flush=True)
        if pause:
            time.sleep(pause)
    print("refused", refused, flush=True)
    reg.close()
    """
)

N_WRITERS = 3
PER_WRITER = 120
BEFORE_KILL = 20  # acknowledged writes per writer before the master dies


@pytest.fixture
def sentinel_set(tmp_path: Path) -> Iterator[SentinelSet]:
    skip_without_redis()
    s = SentinelSet(tmp_path)
    try:
        s.start()
        yield s
    finally:
        s.stop()


@pytest.fixture
def cluster_set(tmp_path: Path) -> Iterator[ClusterSet]:
    skip_without_redis()
    c = ClusterSet(tmp_path)
    try:
        c.start()
        yield c
    finally:
        c.stop()


class Writers:
    """Writer processes and the ids they acknowledged, read as they come."""

    def __init__(
        self,
        url: str,
        per_writer: int = PER_WRITER,
        *,
        limit: float = 120.0,
        stop_file: Path | None = None,
        pause: float = 0.0,
    ) -> None:
        self.stop_file = stop_file
        args = [str(per_writer), str(limit), str(stop_file or ""), str(pause)]
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, url, f"w{k}", *args],
                stdout=subprocess.PIPE,
                text=True,
                cwd=ROOT,
            )
            for k in range(N_WRITERS)
        ]
        self.acked: list[list[str]] = [[] for _ in self.procs]
        self.refused = [0] * len(self.procs)
        self.seen = [threading.Semaphore(0) for _ in self.procs]
        self.readers = [
            threading.Thread(target=self._read, args=(k,), daemon=True)
            for k in range(len(self.procs))
        ]
        for t in self.readers:
            t.start()

    def _read(self, k: int) -> None:
        out = self.procs[k].stdout
        assert out is not None
        for line in out:
            if line.startswith("refused"):
                self.refused[k] = int(line.split()[1])
            elif line.strip():
                self.acked[k].append(line.strip())
                self.seen[k].release()

    def wait_for(self, n: int) -> None:
        """Until every writer has n acknowledged writes."""
        for sem in self.seen:
            for _ in range(n):
                assert sem.acquire(timeout=120), "a writer stopped writing"

    def wait_for_new(self, n: int) -> None:
        """Until every writer has n writes acknowledged after this call: the
        acknowledgements already counted are dropped first (wait_for(n) counts
        from the last wait, and writers may be far ahead of it)."""
        for sem in self.seen:
            while sem.acquire(blocking=False):
                pass
        self.wait_for(n)

    def stop(self) -> list[str]:
        """Tell the writers to stop (the stop file) and wait for them, as finish()."""
        assert self.stop_file is not None, "these writers have no stop file"
        self.stop_file.touch()
        return self.finish()

    def finish(self) -> list[str]:
        for p, t in zip(self.procs, self.readers):
            p.wait(timeout=180)
            t.join(timeout=30)
            assert p.returncode == 0
        return [rid for ids in self.acked for rid in ids]

    def kill(self) -> None:
        for p, t in zip(self.procs, self.readers):
            if p.poll() is None:
                p.kill()
                p.wait()
            t.join(timeout=30)
            if p.stdout is not None:
                p.stdout.close()


def _survives_failover(url: str, kill_master: object, after_kill: object) -> None:
    """The scenario both set-ups run: several writer processes, kill -9 of the
    master, promotion, then every acknowledged write is there and replicas agree."""
    reg = rampart.BlockRegistry.open(url, "agent", label=None)
    writers = Writers(url)
    try:
        reg.write_block("before the failover", "before")
        writers.wait_for(BEFORE_KILL)
        old = kill_master()  # type: ignore[operator]
        # The master is dead and nobody is promoted yet (a sentinel waits 500 ms,
        # a cluster node 1 000 ms before it even calls the master down).
        with pytest.raises(StoreUnavailableError):
            reg.write_block("during the switch", "during")
        assert reg.compile(max_tokens=500).included  # compile never waits on the store
        after_kill(old)  # type: ignore[operator]
        acked = writers.finish()
        assert len(acked) == N_WRITERS * PER_WRITER  # writes came back by themselves
        rid = reg.write_block("after the failover", "after")
        reg.sync(timeout=60)
        late = rampart.BlockRegistry.open(url, "agent", label=None)
        try:
            held = set(late.runtime_ids())
            lost = [x for x in acked if x not in held]
            assert lost == [], f"{len(lost)} acknowledged writes lost in the failover"
            assert rid in held
            assert state(late) == state(reg)
        finally:
            late.close()
    finally:
        writers.kill()
        reg.close()


def test_sentinel_failover_with_wait_loses_no_acknowledged_write(
    sentinel_set: SentinelSet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL, logger="rampart.shared")
    _survives_failover(
        sentinel_set.url(wait=1),
        sentinel_set.kill_master,
        lambda old: sentinel_set.wait_promoted(old),
    )


def test_cluster_failover_with_wait_loses_no_acknowledged_write(
    cluster_set: ClusterSet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL, logger="rampart.shared")
    key = "rampart:{agent}:log"

    def after_kill(old: int) -> None:
        cluster_set.wait_promoted(key, old)
        # The promoted replica has no replica of its own: the old master comes
        # back as one (as an operator restarts a failed node), so wait=1 can be
        # met again.
        (node,) = [n for n in cluster_set.nodes if n.port == old]
        node.start()

    _survives_failover(cluster_set.url(wait=1), lambda: cluster_set.kill_master_of(key), after_kill)


def test_wait_needs_replicas(sentinel_set: SentinelSet) -> None:
    """More replicas asked for than exist: the append is refused with the typed
    error after ``wait_timeout`` and the replica is unchanged."""
    rampart.BlockRegistry.open(sentinel_set.url(wait=1), "agent", label=None).close()
    url = sentinel_set.url(wait=1).replace("wait=1", "wait=3&wait_timeout=0.2")
    reg = rampart.BlockRegistry.open(url, "agent", label=None)
    try:
        with pytest.raises(StoreUnavailableError, match="only 2 of 3 replicas"):
            reg.write_block("three replicas wanted", "n")
        assert len(reg) == 0  # unchanged by the refused call
    finally:
        reg.close()


class DeadSentinel:
    """A sentinel address whose host accepts connections and drops them at once
    (a crashed sentinel behind a live host); counts the attempts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.attempts = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            self.attempts += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def fresh_set(tmp_path: Path) -> Iterator[FreshSentinelSet]:
    skip_without_redis()
    s = FreshSentinelSet(tmp_path)
    try:
        s.start()
        yield s
    finally:
        s.stop()


def test_wait_on_a_fresh_deployment_behind_a_dead_sentinel(fresh_set: FreshSentinelSet) -> None:
    """redis+sentinel://DEAD,LIVE/name?wait=1 opened the moment the deployment is
    up: the replica has not had its first sync, so WAIT cannot count it yet. The
    store waits for that sync before its first write (redis-py 8 used to refuse
    it: "only 0 of 1 replicas"; redis-py 7 passed only because it retried the
    dead sentinel for ~12 s on every new connection), and asks the dead sentinel
    once, without retries."""
    dead = DeadSentinel()
    try:
        assert fresh_set.replica_state() != "online"  # the case under test
        reg = rampart.BlockRegistry.open(fresh_set.url(dead.address), "agent", label=None)
        try:
            rid = reg.write_block("acknowledged by the replica", "fresh")
            assert rid in reg.runtime_ids()
        finally:
            reg.close()
        # Acknowledged with wait=1: the replica holds the registry and the entry.
        assert int(_cli(fresh_set.replica.port, "XLEN", "rampart:{agent}:log")) >= 1
        assert dead.attempts == 1  # then discovery asks the live sentinel first
    finally:
        dead.close()


def test_short_wait_names_replicas_in_their_initial_sync(fresh_set: FreshSentinelSet) -> None:
    """With sync_timeout=0 the store does not wait for the first sync: the
    refusal says why the replica did not count."""
    url = fresh_set.url(query="wait=1&wait_timeout=0.05&sync_timeout=0")
    assert fresh_set.replica_state() != "online"
    with pytest.raises(StoreUnavailableError, match=r"only 0 of 1 .*initial sync: wait_bgsave"):
        rampart.BlockRegistry.open(url, "agent", label=None)


def test_failover_urls_are_checked() -> None:
    from rampart.errors import InvalidArgumentError
    from rampart.stores import open_store

    skip_without_redis()
    for bad in (
        "redis+sentinel://127.0.0.1:1/",  # no master name
        "redis+sentinel://127.0.0.1/m",  # no port
        "redis+sentinel://127.0.0.1:1/m/x",  # db is a number
        "redis+cluster://127.0.0.1:1/0",  # a cluster has one database
        "redis://127.0.0.1:1/0?wait=-1",
        "redis://127.0.0.1:1/0?wait=1&wait_timeout=x",
        "redis://127.0.0.1:1/0?wait=1&sync_timeout=-1",
        "redis://127.0.0.1:1/0?wait=1&sync_timeout=nan",
    ):
        with pytest.raises(InvalidArgumentError):
            open_store(bad)
    # The password never appears in messages.
    with pytest.raises(StoreUnavailableError) as err:
        open_store("redis+cluster://u:s3cret@127.0.0.1:1")
    assert "s3cret" not in str(err.value)
