"""A real PostgreSQL server (Debian's ``postgresql`` package: ``initdb`` and
``postgres`` from /usr/lib/postgresql/N/bin) for the shared-registry tests:
started on a free loopback port in a temporary directory, with ``fsync`` on, and
stopped, or killed with SIGKILL and restarted (crash recovery from the WAL), by
the tests.

initdb and postgres refuse to run as root. As root (CI), the server runs as the
unprivileged ``nobody`` (``subprocess``'s ``user=``/``group=``: no ``runuser``
or ``sudo`` needed), in a directory under the system temp dir that ``nobody``
owns (pytest's tmp_path is private to root, so the server could not enter it).
initdb runs once per test process into a template that each server copies
(about 0.1 s instead of 1 s).
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

_USER = "nobody"


def _pg_bin() -> Path | None:
    """The directory holding ``initdb`` and ``postgres``: $RAMPART_PG_BIN, else
    the newest Debian cluster binaries, else whatever ``initdb`` PATH has."""
    env = os.environ.get("RAMPART_PG_BIN")
    if env:
        return Path(env)
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(v) if (v := Path(p).parent.parent.name).isdigit() else 0,
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


PG_BIN = _pg_bin()


def _have_psycopg() -> bool:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        return False
    return True


def postgres_available() -> bool:
    return PG_BIN is not None and (PG_BIN / "postgres").exists() and _have_psycopg()


def skip_without_postgres() -> None:
    if postgres_available():
        return
    # CI sets RAMPART_REQUIRE_POSTGRES=1: there a missing server fails, never skips.
    if os.environ.get("RAMPART_REQUIRE_POSTGRES") == "1":
        pytest.fail("RAMPART_REQUIRE_POSTGRES=1 but the PostgreSQL server or psycopg is missing")
    pytest.skip("PostgreSQL server (apt-get install postgresql) or psycopg is not installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user() -> dict[str, Any]:
    """Popen arguments that drop root for the server (nothing when not root)."""
    if os.geteuid() != 0:
        return {}
    pw = pwd.getpwnam(_USER)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


def _own_dir(prefix: str) -> Path:
    """A fresh directory the server's user owns, under the system temp dir."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        pw = pwd.getpwnam(_USER)
        os.chown(d, pw.pw_uid, pw.pw_gid)
    return d


_TEMPLATE: Path | None = None


def _template() -> Path:
    """An initdb'd data directory, made once per process."""
    global _TEMPLATE
    if _TEMPLATE is None:
        assert PG_BIN is not None
        base = _own_dir("rampart-pg-template-")
        atexit.register(shutil.rmtree, base, True)
        data = base / "data"
        out = subprocess.run(
            [
                str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                "-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions",
            ],
            capture_output=True, text=True, timeout=120, cwd=base, **_as_server_user(),
        )  # fmt: skip
        if out.returncode != 0:
            raise RuntimeError(f"initdb failed: {out.stderr[-2000:]}")
        _TEMPLATE = data
    return _TEMPLATE


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


class PostgresServer:
    """One server: ``start()``, ``kill()`` (SIGKILL of the postmaster and every
    backend: a crash of the database host's processes), ``stop()`` (fast
    shutdown), ``close()`` (stop and remove its files)."""

    def __init__(self) -> None:
        assert PG_BIN is not None
        self.dir = _own_dir("rampart-pg-")
        self.data = self.dir / "data"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        subprocess.run(
            ["cp", "-a", str(_template()), str(self.data)],
            check=True, timeout=120, cwd=self.dir, **_as_server_user(),
        )  # fmt: skip

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        assert PG_BIN is not None
        log = open(self.dir / "server.log", "ab")  # the child writes to it
        try:
            self.proc = subprocess.Popen(
                [
                    str(PG_BIN / "postgres"), "-D", str(self.data), "-p", str(self.port),
                    "-c", "listen_addresses=127.0.0.1",
                    "-c", "unix_socket_directories=",
                    "-c", "fsync=on",
                    "-c", "max_connections=200",
                    "-c", "shared_buffers=32MB",
                    # Crash recovery syncs the data directory first: one syncfs()
                    # instead of an fsync per file.
                    "-c", "recovery_init_sync_method=syncfs",
                ],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.dir,
                start_new_session=True, **_as_server_user(),
            )  # fmt: skip
        finally:
            log.close()
        self._wait_ready()

    def _wait_ready(self) -> None:
        import psycopg

        assert self.proc is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with psycopg.connect(self.url, connect_timeout=2) as c:
                    c.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                time.sleep(0.02)
        tail = (self.dir / "server.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"postgres did not start on port {self.port}:\n{tail}")

    def _children(self) -> list[int]:
        assert self.proc is not None
        out = []
        for stat in glob.glob("/proc/[0-9]*/stat"):
            try:
                fields = Path(stat).read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.proc.pid:  # ppid
                out.append(int(Path(stat).parent.name))
        return out

    def kill(self) -> None:
        """SIGKILL the postmaster and its backends at once: no shutdown checkpoint,
        only what the WAL already holds on disk survives."""
        if self.proc is None:
            return
        pids = [self.proc.pid, *self._children()]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self.proc = None
        # A restart refuses while a backend of the old server still holds its
        # shared memory: wait until every one is dead (a zombie waiting for init
        # to reap it holds nothing).
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in pids[1:]):
            if time.monotonic() > deadline:
                raise RuntimeError("postgres backends outlived SIGKILL")
            time.sleep(0.01)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)  # fast shutdown
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
        self.proc = None

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
