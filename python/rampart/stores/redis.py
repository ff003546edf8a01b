"""The networked store: one Redis Stream per registry, for processes on many hosts.

Keys of registry ``NAME`` (all under the hash tag ``{NAME}``, so Redis Cluster
keeps them in one slot and the scripts below stay single-slot):

- ``rampart:{NAME}:log`` — the journal, a Stream whose entry ids are ``0-<seq>``
  (dense sequence numbers, the same numbers the SQLite store uses);
- ``rampart:{NAME}:seq`` — the last sequence number (survives trimming);
- ``rampart:{NAME}:meta`` — the metadata record written at creation;
- ``rampart:{NAME}:ckpt`` — a hash with the latest checkpoint (``seq``, ``data``).

An append is one Lua script: bump ``seq``, ``XADD`` the entry, ``XRANGE`` the
tail the appender has not applied — one round trip, atomic. Followers block in
``XREAD BLOCK``. Durability is Redis's: run it with ``appendonly yes`` and
``appendfsync always`` for "an acknowledged write survives a crash of Redis"
(see docs/shared.md for what ``everysec`` loses).
"""

from __future__ import annotations

import threading
from typing import Any

from rampart.errors import InvalidArgumentError, StoreUnavailableError
from rampart.stores.base import Entries

__all__ = ["RedisStore"]


_APPEND = """
local n = redis.call('INCR', KEYS[2])
redis.call('XADD', KEYS[1], '0-' .. n, 'e', ARGV[1])
local tail = redis.call('XRANGE', KEYS[1], '(0-' .. ARGV[2], '+')
return {n, tail}
"""

_CREATE = """
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
redis.call('SET', KEYS[3], ARGV[1])
for i = 2, #ARGV do
  local n = redis.call('INCR', KEYS[2])
  redis.call('XADD', KEYS[1], '0-' .. n, 'e', ARGV[i])
end
if #ARGV == 1 then redis.call('SET', KEYS[2], 0) end
return 1
"""

_CHECKPOINT = """
local cur = tonumber(redis.call('HGET', KEYS[1], 'seq') or '-1')
if tonumber(ARGV[1]) > cur then
  redis.call('HSET', KEYS[1], 'seq', ARGV[1], 'data', ARGV[2])
  return 1
end
return 0
"""

_COMPACT = """
local ck = tonumber(redis.call('HGET', KEYS[2], 'seq') or '0')
local upto = math.min(tonumber(ARGV[1]), ck)
if upto <= 0 then return 0 end
return redis.call('XTRIM', KEYS[1], 'MINID', '0-' .. (upto + 1))
"""


def _seq(stream_id: bytes | str) -> int:
    s = stream_id.decode() if isinstance(stream_id, bytes) else stream_id
    return int(s.split("-", 1)[1])


class RedisStore:
    """Journals in Redis ≥ 7 (``redis://``, ``rediss://``, ``unix://`` URLs as
    redis-py reads them). Needs the ``redis`` extra (redis-py with hiredis)."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        try:
            import redis
        except ImportError:
            raise InvalidArgumentError(
                f"store {url!r} needs redis-py: pip install 'rampart-registry[redis]'"
            ) from None
        self.url = url
        self._redis = redis
        kwargs.setdefault("socket_timeout", 5.0)
        kwargs.setdefault("socket_connect_timeout", 5.0)
        try:
            # redis-py's pool notices fork() and opens new connections in the child.
            self._r = redis.Redis.from_url(url, **kwargs)
        except ValueError as e:
            raise InvalidArgumentError(f"bad Redis URL {url!r}: {e}") from None
        self._append = self._r.register_script(_APPEND)
        self._create = self._r.register_script(_CREATE)
        self._checkpoint = self._r.register_script(_CHECKPOINT)
        self._compact = self._r.register_script(_COMPACT)

    @staticmethod
    def keys(name: str) -> dict[str, str]:
        """The Redis keys of registry ``name`` (journal stream, sequence, metadata,
        checkpoint), in one hash slot so a cluster keeps them together."""
        tag = "{" + name + "}"
        return {k: f"rampart:{tag}:{k}" for k in ("log", "seq", "meta", "ckpt")}

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (self._redis.ConnectionError, self._redis.TimeoutError, OSError) as e:
            raise StoreUnavailableError(f"Redis store {self.url}: {e}") from None
        except self._redis.ResponseError as e:
            # LOADING / READONLY / BUSY / MISCONF: the server is there but cannot serve.
            raise StoreUnavailableError(f"Redis store {self.url}: {e}") from None

    def meta(self, name: str) -> bytes | None:
        v = self._call(self._r.get, self.keys(name)["meta"])
        return None if v is None else bytes(v)

    def create(self, name: str, meta: bytes, entries: list[bytes]) -> bool:
        k = self.keys(name)
        done = self._call(self._create, keys=[k["log"], k["seq"], k["meta"]], args=[meta, *entries])
        return bool(done)

    def append(self, name: str, entry: bytes, after: int) -> tuple[int, Entries]:
        k = self.keys(name)
        n, tail = self._call(self._append, keys=[k["log"], k["seq"]], args=[entry, after])
        return int(n), [(_seq(i), bytes(f[b"e"])) for i, f in self._fields(tail)]

    @staticmethod
    def _fields(raw: Any) -> list[tuple[bytes, dict[bytes, bytes]]]:
        # A script returns a stream entry as [id, [field, value, ...]].
        out = []
        for item in raw:
            sid, flat = item[0], item[1]
            if isinstance(flat, dict):
                out.append((sid, flat))
            else:
                out.append((sid, dict(zip(flat[::2], flat[1::2]))))
        return out

    def read(self, name: str, after: int, limit: int = 10_000) -> Entries:
        rows = self._call(self._r.xrange, self.keys(name)["log"], f"(0-{after}", "+", count=limit)
        return [(_seq(i), bytes(f.get(b"e", b""))) for i, f in rows]

    def wait(
        self, name: str, after: int, timeout: float, stop: threading.Event | None = None
    ) -> Entries:
        # XREAD BLOCK cannot be interrupted: a closing replica waits at most `timeout`.
        log = self.keys(name)["log"]
        ms = max(1, int(timeout * 1000))
        # The socket must outlive the server-side block.
        got = self._call(self._r.xread, {log: f"0-{after}"}, count=10_000, block=ms)
        if not got:
            return []
        _, rows = got[0]
        return [(_seq(i), bytes(f.get(b"e", b""))) for i, f in rows]

    def first_seq(self, name: str) -> int:
        rows = self._call(self._r.xrange, self.keys(name)["log"], "-", "+", count=1)
        return _seq(rows[0][0]) if rows else 0

    def last_seq(self, name: str) -> int:
        v = self._call(self._r.get, self.keys(name)["seq"])
        return int(v or 0)

    def put_checkpoint(self, name: str, seq: int, data: bytes) -> None:
        self._call(self._checkpoint, keys=[self.keys(name)["ckpt"]], args=[seq, data])

    def checkpoint(self, name: str) -> tuple[int, bytes] | None:
        got = self._call(self._r.hmget, self.keys(name)["ckpt"], ["seq", "data"])
        if got[0] is None or got[1] is None:
            return None
        return int(got[0]), bytes(got[1])

    def compact(self, name: str, upto: int) -> int:
        k = self.keys(name)
        return int(self._call(self._compact, keys=[k["log"], k["ckpt"]], args=[upto]))

    def names(self) -> list[str]:
        out = []
        for key in self._call(
            lambda: list(self._r.scan_iter(match="rampart:{*}:meta", count=1000))
        ):
            s = key.decode() if isinstance(key, bytes) else key
            out.append(s[len("rampart:{") : -len("}:meta")])
        return sorted(out)

    def close(self) -> None:
        self._r.close()

    def __repr__(self) -> str:
        return f"RedisStore({self.url!r})"
