"""Real redis-server processes (Debian's package) for the shared-registry tests:
one server on a free port in a temporary directory with AOF and ``appendfsync
always``, stopped (or killed and restarted, to test durability) by the tests; and
the two set-ups that fail over, all on free loopback ports:

- :class:`SentinelSet`: a master, 2 replicas and 3 sentinels (quorum 2,
  ``down-after-milliseconds`` 500, ``failover-timeout`` 5000);
- :class:`ClusterSet`: a Cluster of 3 masters + 3 replicas made by ``redis-cli
  --cluster create … --cluster-replicas 1`` (``cluster-node-timeout`` 1000).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

REDIS = shutil.which("redis-server")


def _have_redis_py() -> bool:
    try:
        import redis  # noqa: F401
    except ImportError:
        return False
    return True


def redis_available() -> bool:
    return REDIS is not None and _have_redis_py()


def skip_without_redis() -> None:
    if redis_available():
        return
    # CI sets RAMPART_REQUIRE_REDIS=1: there a missing server fails, never skips.
    if os.environ.get("RAMPART_REQUIRE_REDIS") == "1":
        pytest.fail("RAMPART_REQUIRE_REDIS=1 but redis-server or redis-py is missing")
    pytest.skip("redis-server (apt-get install redis-server) or redis-py is not installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    for _ in range(1000):
        port = random.randrange(20000, 55535)
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"PING\r\n")
            # NOAUTH: up, and asking for the password it was started with.
            return s.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


class RedisServer:
    """One redis-server; ``extra`` arguments are appended to its command line
    (replication, cluster mode), ``sentinel`` runs it as a sentinel."""

    def __init__(
        self, directory: Path, *extra: str, sentinel: str | None = None, port: int | None = None
    ) -> None:
        self.dir = directory
        self.port = port or free_port()
        self.extra = list(extra)
        self.sentinel = sentinel
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert REDIS is not None
        if self.sentinel is not None:
            # A sentinel rewrites its configuration file: it must be its own.
            conf = self.dir / "sentinel.conf"
            if not conf.exists():
                conf.write_text(self.sentinel)
            argv = [
                REDIS,
                str(conf),
                "--sentinel",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--protected-mode",
                "no",
            ]
        else:
            argv = [
                REDIS,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
                "--protected-mode",
                "no",
                *self.extra,
            ]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if _ping(self.port):
                return
            if self.proc.poll() is not None:
                break  # exited: the port was taken meanwhile, a bad argument
            time.sleep(0.02)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def kill(self) -> None:
        """kill -9: no shutdown save, only what AOF already holds survives."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        """SIGTERM, then kill -9 if it has not exited in 10 s: a server in the
        middle of a replica's initial sync on a loaded machine was seen to take
        longer, and a test's teardown must not leave it running (its Popen would
        warn later, inside whichever test the collector runs in)."""
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def stop_all(servers: list[Any]) -> None:
    """Stop every server, even when one raises (the first error is raised after)."""
    errors = []
    for s in servers:
        try:
            s.stop()
        except Exception as e:
            errors.append(e)
    if errors:
        raise errors[0]


def _cli(port: int, *args: str, timeout: float = 30) -> str:
    cli = shutil.which("redis-cli")
    assert cli is not None, "redis-cli is part of the redis-tools package"
    out = subprocess.run(
        [cli, "-h", "127.0.0.1", "-p", str(port), *args],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    return out.stdout + out.stderr


def _wait_until(what: str, ok: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


class SentinelSet:
    """A master, 2 replicas and 3 sentinels (quorum 2). ``url(wait)`` is the
    ``redis+sentinel://`` URL; ``kill_master()`` is kill -9 of the current master."""

    NAME = "rampart"

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.nodes: list[RedisServer] = []
        self.sentinels: list[RedisServer] = []

    def start(self) -> None:
        master = self._node("m")
        master.start()
        for k in range(2):
            replica = self._node(f"r{k}", "--replicaof", "127.0.0.1", str(master.port))
            replica.start()
        _wait_until(
            "2 replicas in sync",
            lambda: "connected_slaves:2" in _cli(master.port, "INFO", "replication")
            and all("master_link_status:up" in _cli(r.port, "INFO", "replication")
                    for r in self.nodes[1:]),
        )  # fmt: skip
        conf = (
            f"sentinel monitor {self.NAME} 127.0.0.1 {master.port} 2\n"
            f"sentinel down-after-milliseconds {self.NAME} 500\n"
            f"sentinel failover-timeout {self.NAME} 5000\n"
            f"sentinel parallel-syncs {self.NAME} 2\n"
        )
        for k in range(3):
            d = self.dir / f"s{k}"
            d.mkdir()
            sentinel = RedisServer(d, sentinel=conf)
            sentinel.start()
            self.sentinels.append(sentinel)
        # Every sentinel knows both replicas and the other sentinels.
        _wait_until(
            "sentinels to discover each other",
            lambda: all(
                "num-other-sentinels\n2" in _cli(s.port, "SENTINEL", "MASTER", self.NAME)
                and "num-slaves\n2" in _cli(s.port, "SENTINEL", "MASTER", self.NAME)
                for s in self.sentinels
            ),
        )

    def _node(self, tag: str, *extra: str) -> RedisServer:
        d = self.dir / tag
        d.mkdir()
        node = RedisServer(d, *extra)
        self.nodes.append(node)
        return node

    def url(self, wait: int = 0) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.NAME}" + (f"?wait={wait}" if wait else "")

    def master_port(self) -> int:
        out = _cli(self.sentinels[0].port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.NAME)
        return int(out.split()[1])

    def kill_master(self) -> int:
        """kill -9 of the current master; returns its port."""
        port = self.master_port()
        (node,) = [n for n in self.nodes if n.port == port]
        node.kill()
        return port

    def wait_promoted(self, old: int, timeout: float = 60) -> int:
        """Wait until the sentinels name a new master and it accepts writes."""
        _wait_until(
            "a replica to be promoted",
            lambda: (
                self.master_port() != old
                and "role:master" in _cli(self.master_port(), "INFO", "replication")
            ),
            timeout,
        )
        return self.master_port()

    def stop(self) -> None:
        stop_all([*self.sentinels, *self.nodes])


class FreshSentinelSet:
    """A deployment as it is just after it was started: a master, 1 replica whose
    initial sync has not happened yet (the master waits 5 s before it sends the
    first snapshot: ``repl-diskless-sync-delay``, Redis's default, set here
    explicitly) and 1 sentinel. ``url(*hosts)`` puts ``hosts`` (host:port) before
    the live sentinel."""

    NAME = "rampart"

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.nodes: list[RedisServer] = []

    def start(self) -> None:
        delay = ("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "5")
        self.master = self._start("m", *delay)
        self.replica = self._start("r", "--replicaof", "127.0.0.1", str(self.master.port))
        conf = f"sentinel monitor {self.NAME} 127.0.0.1 {self.master.port} 1\n"
        self.sentinel = self._start("s", sentinel=conf)

    def _start(self, tag: str, *extra: str, sentinel: str | None = None) -> RedisServer:
        d = self.dir / tag
        d.mkdir()
        node = RedisServer(d, *extra, sentinel=sentinel)
        self.nodes.append(node)
        node.start()
        return node

    def url(self, *hosts: str, query: str = "wait=1") -> str:
        netloc = ",".join([*hosts, f"127.0.0.1:{self.sentinel.port}"])
        return f"redis+sentinel://{netloc}/{self.NAME}?{query}"

    def replica_state(self) -> str:
        """The replica's state as the master reports it (wait_bgsave, online…)."""
        for line in _cli(self.master.port, "INFO", "replication").splitlines():
            if line.startswith("slave0:"):
                return dict(kv.split("=", 1) for kv in line[7:].split(","))["state"]
        return "absent"

    def stop(self) -> None:
        stop_all(self.nodes)


class ClusterSet:
    """A Redis Cluster of 3 masters + 3 replicas. ``url(wait)`` is the
    ``redis+cluster://`` URL (every node); ``kill_master_of(key)`` is kill -9 of
    the master that holds the key's slot."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.nodes: list[RedisServer] = []

    def start(self) -> None:
        for k in range(6):
            d = self.dir / f"n{k}"
            d.mkdir()
            node = RedisServer(
                d,
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "1000",
                port=free_cluster_port(),
            )  # fmt: skip
            node.start()
            self.nodes.append(node)
        out = _cli(
            self.nodes[0].port,
            "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in self.nodes],
            "--cluster-replicas", "1", "--cluster-yes",
            timeout=120,
        )  # fmt: skip
        if "[OK] All 16384 slots covered" not in out:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{out[-2000:]}")
        _wait_until(
            "the cluster to be ok on every node",
            lambda: all("cluster_state:ok" in _cli(n.port, "CLUSTER", "INFO") for n in self.nodes),
        )
        # Replicas attached and in sync, so a failover has somewhere to go.
        _wait_until(
            "every master to have a replica",
            lambda: sum("master_link_status:up" in _cli(n.port, "INFO", "replication")
                        for n in self.nodes) == 3,
        )  # fmt: skip

    def url(self, wait: int = 0) -> str:
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)
        return f"redis+cluster://{hosts}" + (f"?wait={wait}" if wait else "")

    def master_of(self, key: str) -> int:
        slot = int(_cli(self.nodes[0].port, "CLUSTER", "KEYSLOT", key).split()[0])
        for node in self.nodes:
            if node.proc is None:
                continue
            for line in _cli(node.port, "CLUSTER", "NODES").splitlines():
                f = line.split()
                if "master" in f[2] and "fail" not in f[2] and f[7] == "connected":
                    for r in f[8:]:
                        lo, _, hi = r.partition("-")
                        if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                            return int(f[1].split("@")[0].rsplit(":", 1)[1])
            break
        raise RuntimeError(f"no master holds the slot of {key!r}")

    def kill_master_of(self, key: str) -> int:
        port = self.master_of(key)
        (node,) = [n for n in self.nodes if n.port == port]
        node.kill()
        return port

    def wait_promoted(self, key: str, old: int, timeout: float = 60) -> int:
        def promoted() -> bool:
            try:
                port = self.master_of(key)
            except RuntimeError:
                return False
            return port != old and "cluster_state:ok" in _cli(port, "CLUSTER", "INFO")

        _wait_until("a replica to take over the slot", promoted, timeout)
        return self.master_of(key)

    def stop(self) -> None:
        stop_all(self.nodes)
