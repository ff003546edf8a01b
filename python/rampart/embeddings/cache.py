"""Caches that make a restart cheap: vectors already computed (a SQLite table),
example requests an LLM wrote for a tool (:class:`ExampleCache`, beside the vectors)
and file hashes memoised by (path, size, mtime_ns) in the cache's ``hashes.json``."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rampart._files import (
    FILE_MODE,
    SMALL_FILE_BYTES,
    FileProblem,
    atomic_write,
    cache_dir,
    read_regular_file,
    sha256_file,
)
from rampart._sqlite import retry_busy

__all__ = ["VECTOR_CACHE_ENV", "ExampleCache", "VectorCache", "file_sha256"]

# Cache files are world-readable (mkstemp makes 0600): a cache prepared by root in an
# image build is then usable by the service account that runs the embedder.
_FILE_MODE = FILE_MODE
_MEMO_FILE = "hashes.json"
_MEMO_MAX = 256
_MEMO_LOCK = threading.Lock()


def _new_locks() -> None:
    # A lock held by another thread at fork() stays held in the child forever.
    global _MEMO_LOCK
    _MEMO_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_locks)


VECTOR_CACHE_ENV = "RAMPART_VECTOR_CACHE"
_VECTOR_FILE = "vectors.sqlite"
_VECTOR_MAX_ROWS = 200_000  # ~300 MB at 384 dimensions; the oldest go first


_LOCK_TIMEOUT = 10.0  # seconds a cache call waits for another process's writer lock


class _SQLiteFileCache:
    """What both on-disk caches share: one SQLite connection per thread and per
    process (WAL), set up by the subclass's ``_SETUP`` statements, and the rule
    that a database error turns the cache off for this process with one warning."""

    _SETUP: tuple[str, ...] = ()
    _WHAT = "cache"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._broken = False

    def _conn(self) -> sqlite3.Connection:
        c: sqlite3.Connection | None = getattr(self._local, "conn", None)
        # SQLite connections must not cross fork(): a child opens its own (the
        # parent's stays open in the parent, untouched).
        if c is None or self._local.pid != os.getpid():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            c = sqlite3.connect(self.path, timeout=_LOCK_TIMEOUT, isolation_level=None)
            deadline = time.monotonic() + _LOCK_TIMEOUT
            try:
                for statement in self._SETUP:
                    retry_busy(functools.partial(c.execute, statement), deadline)
            except BaseException:
                c.close()
                raise
            self._local.conn = c
            self._local.pid = os.getpid()
        return c

    def _fail(self, exc: Exception) -> None:
        if not self._broken:
            self._broken = True
            warnings.warn(
                f"rampart: {self._WHAT} {self.path} disabled for this process ({exc})",
                RuntimeWarning,
                stacklevel=3,
            )


class VectorCache(_SQLiteFileCache):
    """Vectors already computed, kept on disk between processes: a SQLite table keyed
    by a hash of (model id, text), holding the float32 vector and whether the text
    was truncated. A restart that embeds the same seed blocks reads them back
    instead of running the model (a batch of blocks is compute-bound: ~0.6 s for the
    31 example seeds on two cores, against milliseconds from here).

    Safe across threads (one connection per thread) and processes (SQLite WAL). Any
    database error turns the cache off for this process with one RuntimeWarning;
    embedding goes on without it. At most ``max_rows`` vectors are kept."""

    _SETUP = (
        "PRAGMA journal_mode=WAL",
        "PRAGMA synchronous=NORMAL",
        "CREATE TABLE IF NOT EXISTS vectors "
        "(key BLOB PRIMARY KEY, truncated INTEGER NOT NULL, vector BLOB NOT NULL)",
    )
    _WHAT = "vector cache"

    def __init__(self, path: Path, model_id: str, dim: int, max_rows: int = _VECTOR_MAX_ROWS):
        super().__init__(path)
        self._salt = f"{model_id}\0".encode()
        self._dim = dim
        self._max_rows = max_rows
        self._puts = 0

    def key(self, text: str) -> bytes:
        """The cache key of ``text`` for this model (a salted SHA-256 prefix)."""
        return hashlib.sha256(self._salt + text.encode("utf-8", "surrogatepass")).digest()[:20]

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, tuple[np.ndarray, bool]]:
        """The stored (vector, truncated) of every key that has one."""
        found: dict[bytes, tuple[np.ndarray, bool]] = {}
        if self._broken or not keys:
            return found
        try:
            c = self._conn()
            for i in range(0, len(keys), 500):
                chunk = list(keys[i : i + 500])
                marks = ",".join("?" * len(chunk))
                rows = c.execute(
                    f"SELECT key, truncated, vector FROM vectors WHERE key IN ({marks})", chunk
                )
                for k, t, v in rows:
                    vec = np.frombuffer(v, dtype=np.float32)
                    if vec.shape == (self._dim,):  # anything else is not ours: ignore
                        found[bytes(k)] = (vec, bool(t))
        except sqlite3.Error as exc:
            self._fail(exc)
            return {}
        return found

    def put_many(self, items: Sequence[tuple[bytes, np.ndarray, bool]]) -> None:
        """Store (key, vector, truncated) rows; a cache that cannot be written is
        skipped, never an error."""
        if self._broken or not items:
            return
        try:
            c = self._conn()
            c.execute("BEGIN IMMEDIATE")
            try:
                c.executemany(
                    "INSERT OR REPLACE INTO vectors (key, truncated, vector) VALUES (?, ?, ?)",
                    [
                        (k, int(t), np.ascontiguousarray(v, np.float32).tobytes())
                        for k, v, t in items
                    ],
                )
                self._puts += len(items)
                if self._puts >= 1000:  # now and then: keep the newest max_rows
                    self._puts = 0
                    c.execute(
                        "DELETE FROM vectors WHERE rowid <= (SELECT MAX(rowid) FROM vectors) - ?",
                        (self._max_rows,),
                    )
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            self._fail(exc)


_EXAMPLE_FILE = "examples.sqlite"


class ExampleCache(_SQLiteFileCache):
    """Example requests generated for tools (``BlockRegistry.enrich_tools``), kept on
    disk so that a restart, another process or another replica of a shared
    registry does not ask the model again: a SQLite table keyed by a hash of
    (generator id, tool schema), holding the examples as a JSON list. Generation
    costs seconds per tool on a CPU; reading them back costs microseconds.

    Same rules as :class:`VectorCache`: one connection per thread and process, WAL,
    and a database error turns the cache off for this process with one
    RuntimeWarning (examples are then generated again, never lost)."""

    _SETUP = (
        "PRAGMA journal_mode=WAL",
        "CREATE TABLE IF NOT EXISTS examples (key BLOB PRIMARY KEY, examples TEXT NOT NULL)",
    )
    _WHAT = "example cache"

    def __init__(self, path: Path | None = None) -> None:
        super().__init__(cache_dir() / _EXAMPLE_FILE if path is None else Path(path))

    @staticmethod
    def key(generator: str, schema_json: str) -> bytes:
        """The cache key of one tool schema (canonical JSON) for one generator."""
        raw = f"{generator}\0{schema_json}".encode("utf-8", "surrogatepass")
        return hashlib.sha256(raw).digest()[:20]

    def get(self, key: bytes) -> list[str] | None:
        """The stored examples, or None (not cached, unreadable, or not a list of str)."""
        if self._broken:
            return None
        try:
            row = self._conn().execute("SELECT examples FROM examples WHERE key = ?", (key,))
            hit = row.fetchone()
        except sqlite3.Error as exc:
            self._fail(exc)
            return None
        if hit is None:
            return None
        try:
            value = json.loads(hit[0])
        except (ValueError, RecursionError):  # a damaged row is a miss
            return None
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return value if ok else None

    def put(self, key: bytes, examples: Sequence[str]) -> None:
        """Store the examples of one tool; a cache that cannot be written is skipped."""
        if self._broken:
            return
        try:
            self._conn().execute(
                "INSERT OR REPLACE INTO examples (key, examples) VALUES (?, ?)",
                (key, json.dumps(list(examples), ensure_ascii=False)),
            )
        except sqlite3.Error as exc:
            self._fail(exc)


def _vector_cache_wanted(arg: bool | None) -> bool:
    if arg is not None:
        return bool(arg)
    return os.environ.get(VECTOR_CACHE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _read_memo(path: Path) -> dict[str, list[Any]]:
    # An accelerator: a memo that is unreadable, not a regular file or oversize is
    # no memo (and the next write replaces it).
    try:
        data = json.loads(read_regular_file(path, SMALL_FILE_BYTES))
        files = data.get("files", {}) if isinstance(data, dict) else {}
        return files if isinstance(files, dict) else {}
    except (FileProblem, ValueError, RecursionError):
        return {}


def file_sha256(path: str | Path) -> str:
    """sha256 of a file, memoised by (path, size, mtime_ns) in the cache's ``hashes.json``.

    A file rewritten with the same size within one mtime tick would keep its old
    hash; the model files this guards are written once and renamed into place.
    """
    p = Path(path).resolve()
    st = p.stat()
    stamp = [st.st_size, st.st_mtime_ns]
    memo_path = cache_dir() / _MEMO_FILE
    with _MEMO_LOCK:
        hit = _read_memo(memo_path).get(str(p))
    if isinstance(hit, list) and len(hit) == 3 and hit[:2] == stamp:
        return str(hit[2])
    digest = sha256_file(p)
    _remember_hash(p, digest)
    return digest


def _remember_hash(p: Path, digest: str) -> None:
    st = p.stat()
    memo_path = cache_dir() / _MEMO_FILE
    with _MEMO_LOCK:
        memo = _read_memo(memo_path)  # re-read: another process may have added entries
        memo.pop(str(p), None)
        memo[str(p)] = [st.st_size, st.st_mtime_ns, digest]
        while len(memo) > _MEMO_MAX:  # oldest first (dicts keep insertion order)
            memo.pop(next(iter(memo)))
        try:  # the memo is only an accelerator: a read-only cache just means re-hashing
            atomic_write(memo_path, json.dumps({"version": 1, "files": memo}).encode())
        except OSError:
            pass


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())
