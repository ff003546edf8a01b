"""A real redis-server (Debian's package) for the shared-registry tests: started on a
free port in a temporary directory with AOF and ``appendfsync always``, stopped
(or killed and restarted, to test durability) by the tests."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

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


class RedisServer:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert REDIS is not None
        self.proc = subprocess.Popen(
            [
                REDIS,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(self.dir),
                "--appendonly", "yes",
                "--appendfsync", "always",
                "--save", "",
                "--protected-mode", "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        """kill -9: no shutdown save, only what AOF already holds survives."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None
