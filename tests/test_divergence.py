"""No divergence, by construction (docs/shared.md, "No divergence"): compaction's
low-water mark and each journal entry's chain value, against real stores and
real processes.

- A reader process frozen (SIGSTOP) while writer processes write and
  ``rampart store compact`` drops entries, then resumed (SIGCONT), ends with
  the writers' state, on SQLite, Redis and PostgreSQL (issue 26: it ended with
  150 blocks where the writers had 1 050, skipping the compacted entries as
  holes).
- A Sentinel failover without ``wait`` under writers: the replicas are frozen so
  the master's last entries reach no replica, the master is killed, a replica
  is promoted and reuses those sequence numbers; the replica that applied the
  lost entries notices and rebuilds, and ends equal to a replica opened afterwards.
- A store restored from a backup (its history went back) makes replicas rebuild.
- "Behind, never divergent" as a hypothesis property: a reader process is
  frozen and thawed at random points between writes and compactions; whenever
  it is observed, its state is the writer's state at the reader's position.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rampart
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis_server import SentinelSet, _cli, skip_without_redis
from test_failover import Writers
from test_shared import start_server, state
from test_store_garbage import bounded

SECONDS = float(os.environ.get("RAMPART_FUZZ_SECONDS", "3"))


def digest(reg: rampart.BlockRegistry) -> str:
    return hashlib.sha256(repr(state(reg)).encode()).hexdigest()


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    srv, stop = start_server(request.param, tmp_path)
    yield srv.url
    stop()


# A replica in a process of its own, driven by lines on stdin: "peek" prints its
# position and state digest as they are, "sync" after a sync, "quit" ends it.
READER = textwrap.dedent(
    """
    import hashlib, sys
    sys.path.insert(0, sys.argv[2])
    import rampart
    from test_shared import state
    reg = rampart.BlockRegistry.open(sys.argv[1], "agent", label=None)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "quit":
            break
        if cmd == "sync":
            reg.sync(timeout=60)
        with reg._replica._lock:  # position and state from one moment
            pos, st = reg.position, state(reg)
        print(pos, hashlib.sha256(repr(st).encode()).hexdigest(), flush=True)
    reg.close()
    """
)

WRITER = textwrap.dedent(
    """
    import sys, rampart
    url, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    reg = rampart.BlockRegistry.open(url, "agent", label=None)
    for i in range(n):
        rid = reg.write_block(f"{tag} {i}", f"{tag}{i}")
        if i % 7 == 0:
            reg.promote(rid, to_front=True)
    reg.sync()
    reg.close()
    """
)


class Reader:
    """The reader process; its warnings go to a file (a full pipe would block it)."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.log = tmp_path / f"reader-{time.monotonic_ns()}.err"
        self._err = self.log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", READER, url, str(ROOT / "tests")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            cwd=ROOT,
        )
        assert self.ask_line() == "ready"
        self.frozen = False

    def ask_line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line, f"the reader died: {self.log.read_text()[-2000:]}"
        return line

    def ask(self, cmd: str) -> tuple[int, str]:
        assert not self.frozen
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        pos, dig = self.ask_line().split()
        return int(pos), dig

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)
        self.frozen = False

    def close(self) -> None:
        if self.frozen:
            self.thaw()
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self._err):
            if f is not None:
                f.close()

    def warnings(self) -> str:
        return self.log.read_text()


def compact_cli(url: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "rampart", "store", "compact", url, "agent"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_frozen_reader_across_compactions_ends_equal_to_the_writers(
    store_url: str, tmp_path: Path
) -> None:
    rampart.BlockRegistry.open(store_url, "agent", label=None).close()
    reader = Reader(store_url, tmp_path)
    try:
        reader.freeze()
        writers = [
            subprocess.Popen([sys.executable, "-c", WRITER, store_url, f"w{k}", "80"], cwd=ROOT)
            for k in range(3)
        ]
        dropped = 0
        while any(w.poll() is None for w in writers):
            dropped += int(compact_cli(store_url).split(", ")[1].split()[0])
        for w in writers:
            assert w.wait(timeout=120) == 0
        dropped += int(compact_cli(store_url).split(", ")[1].split()[0])
        # Writes after the last compaction: appends land past the mark.
        late = [
            subprocess.Popen([sys.executable, "-c", WRITER, store_url, f"late{k}", "10"], cwd=ROOT)
            for k in range(3)
        ]
        for w in late:
            assert w.wait(timeout=120) == 0
        assert dropped > 0, "nothing was compacted while the reader was frozen"
        reader.thaw()
        pos, dig = reader.ask("sync")
        ref = rampart.BlockRegistry.open(store_url, "agent", label=None)
        try:
            ref.sync()
            assert len(ref) == 3 * 80 + 3 * 10
            assert (pos, dig) == (ref.position, digest(ref))
        finally:
            ref.close()
        assert "skipped journal" not in reader.warnings()
    finally:
        reader.close()


def test_sentinel_failover_without_wait_leaves_no_fork(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The master's last entries reach no Redis replica (both are frozen and
    their links dropped), this
    replica applies them, the master dies and a replica is promoted without
    them: writers append at the same sequence numbers. The replica notices that
    the store's history is not its own, rebuilds, and ends equal to a replica
    opened afterwards."""
    skip_without_redis()
    caplog.set_level(logging.WARNING, logger="rampart.shared")
    sentinels = SentinelSet(tmp_path)
    try:
        sentinels.start()
        url = sentinels.url(wait=0)
        reg = rampart.BlockRegistry.open(url, "agent", label=None)
        # Writers paced (5 ms between writes) and stopped by a file: they are still
        # writing when the replicas freeze, however fast the machine (unpaced, they
        # could finish all their writes before it, and nothing new would come).
        writers = Writers(url, 10**6, limit=300, stop_file=tmp_path / "stop", pause=0.005)
        try:
            writers.wait_for(10)
            master = sentinels.master_port()
            replicas = [n for n in sentinels.nodes if n.port != master and n.proc is not None]
            for node in replicas:
                assert node.proc is not None
                os.kill(node.proc.pid, signal.SIGSTOP)
            try:
                # The master drops its replicas' links (frozen, they cannot come
                # back): what it appends from now on is on the master alone.
                _cli(master, "CLIENT", "KILL", "TYPE", "replica")
                reg.sync(timeout=30)
                before = reg.position
                writers.wait_for_new(15)  # entries only the master will ever have
                reg.sync(timeout=30)
                assert reg.position is not None and before is not None
                assert reg.position > before
                forked = reg.position
                sentinels.kill_master()
            finally:
                for node in replicas:
                    assert node.proc is not None
                    os.kill(node.proc.pid, signal.SIGCONT)
            sentinels.wait_promoted(master)
            writers.wait_for_new(5)  # writing again, on the promoted replica
            writers.stop()
            bounded(lambda: reg.sync(timeout=60), "sync()")
            late = rampart.BlockRegistry.open(url, "agent", label=None)
            try:
                assert state(late) == state(reg)
                assert late.position == reg.position
            finally:
                late.close()
            rep = reg._replica
            assert rep is not None
            # The fork happened and was noticed: entries this replica applied
            # were lost, and it rebuilt from the store.
            assert rep.rebuilds >= 1, f"no rebuild (position {forked} before the kill)"
            assert any("went another way" in r.getMessage() for r in caplog.records)
        finally:
            writers.kill()
            reg.close()
    finally:
        sentinels.stop()


def test_a_store_restored_from_a_backup_makes_replicas_rebuild(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The SQLite file is replaced by a copy taken earlier (its history went
    back) and others write on: a replica that had applied the entries the
    backup lacks rebuilds instead of keeping them."""
    import sqlite3

    caplog.set_level(logging.WARNING, logger="rampart.shared")
    path = tmp_path / "shared.db"
    url = f"sqlite:///{path}"
    a = rampart.BlockRegistry.open(url, "agent", label=None)
    try:
        for k in range(5):
            a.write_block(f"kept {k}", f"k{k}")
        backup = tmp_path / "backup.db"
        src = sqlite3.connect(path)
        dst = sqlite3.connect(backup)
        src.backup(dst)
        src.close()
        dst.close()
        for k in range(5):
            a.write_block(f"lost {k}", f"l{k}")
        # Restore: the backup's pages over the live file (SQLite's own backup API).
        src = sqlite3.connect(backup)
        dst = sqlite3.connect(path)
        src.backup(dst)
        src.close()
        dst.close()
        c = rampart.BlockRegistry.open(url, "agent", label=None)
        try:
            assert c.position == 5
            for k in range(7):
                c.write_block(f"after {k}", f"a{k}")
            bounded(lambda: a.sync(timeout=30), "sync()")
            assert state(a) == state(c)
            assert [x.content for x in a.list_blocks()][:5] == [f"kept {k}" for k in range(5)]
            assert a._replica is not None and a._replica.rebuilds >= 1
        finally:
            c.close()
    finally:
        a.close()


# ---- behind, never divergent: a property over real processes ----------------------------

_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(1, 6)),
        st.tuples(st.just("evict"), st.integers(0, 50)),
        st.tuples(st.just("compact"), st.none()),
        st.tuples(st.just("freeze"), st.none()),
        st.tuples(st.just("thaw"), st.none()),
        st.tuples(st.just("peek"), st.none()),
    ),
    min_size=3,
    max_size=14,
)


def _behind_never_divergent(url_of: Any, tmp_path: Path) -> None:
    @settings(max_examples=3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(steps=_STEPS)
    def run(steps: list[tuple[str, Any]]) -> None:
        url = url_of()
        writer = rampart.BlockRegistry.open(url, "agent", label=None)
        # The writer's state after each position it reached: the journal's history.
        history: dict[int, str] = {0: digest(writer)}
        reader = Reader(url, tmp_path)
        try:

            def observe(cmd: str) -> None:
                pos, dig = reader.ask(cmd)
                assert pos in history, f"the reader is at {pos}, a position no writer had"
                assert dig == history[pos], f"the reader diverged at position {pos}"

            k = 0
            for what, arg in steps:
                if what == "write":
                    for _ in range(arg):
                        writer.write_block(f"note {k}", f"n{k}")
                        k += 1
                        history[writer.position or 0] = digest(writer)
                elif what == "evict" and len(writer):
                    writer.evict(writer.runtime_ids()[arg % len(writer)])
                    history[writer.position or 0] = digest(writer)
                elif what == "compact":
                    writer.compact()
                elif what == "freeze" and not reader.frozen:
                    reader.freeze()
                elif what == "thaw" and reader.frozen:
                    reader.thaw()
                elif what == "peek" and not reader.frozen:
                    observe("peek")  # behind, maybe: never another state
            if reader.frozen:
                reader.thaw()
            observe("peek")
            pos, dig = reader.ask("sync")
            assert (pos, dig) == (writer.position, digest(writer))
            assert "skipped journal" not in reader.warnings()
        finally:
            reader.close()
            writer.close()

    end = time.monotonic() + SECONDS
    while True:
        run()
        if time.monotonic() >= end:
            return


def test_behind_never_divergent(store_url: str, tmp_path: Path) -> None:
    made = [0]

    def url_of() -> str:
        if store_url.startswith("sqlite"):
            made[0] += 1
            return f"sqlite:///{tmp_path / f'p{made[0]}.db'}"
        from rampart.stores import open_store

        store = open_store(store_url)
        store.names()  # the tables exist from here on
        if store_url.startswith("redis"):
            store._r.flushall()  # type: ignore[attr-defined]
        else:
            import psycopg

            with psycopg.connect(store_url, autocommit=True) as db:
                for table in ("rampart_journal", "rampart_checkpoints", "rampart_registries"):
                    db.execute(f"DELETE FROM {table}")
        store.close()
        return store_url

    _behind_never_divergent(url_of, tmp_path)
