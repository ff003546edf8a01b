"""The networked store: one Redis Stream per registry, for processes on many hosts.

Keys of registry ``NAME`` (all under the hash tag ``{NAME}``, so Redis Cluster
keeps them in one slot and the scripts below stay single-slot):

- ``rampart:{NAME}:log`` — the journal, a Stream whose entry ids are ``0-<seq>``
  (dense sequence numbers, the same numbers the SQLite store uses);
- ``rampart:{NAME}:seq`` — the last sequence number (survives trimming);
- ``rampart:{NAME}:meta`` — the metadata record written at creation;
- ``rampart:{NAME}:ckpt`` — a hash with the latest checkpoint (``seq``, ``data``);
- ``rampart:{NAME}:fence`` — with ``?wait=N`` only: a counter followers write to
  (without changing it) so that ``WAIT`` covers what they read.

An append is one Lua script: bump ``seq``, ``XADD`` the entry, ``XRANGE`` the
tail the appender has not applied — one round trip, atomic. Followers block in
``XREAD BLOCK``. Durability is Redis's: run it with ``appendonly yes`` and
``appendfsync always`` for "an acknowledged write survives a crash of Redis"
(see docs/shared.md for what ``everysec`` loses).

Redis that fails over: ``redis+sentinel://h1:p1,h2:p2/MASTER[/db]`` (the
sentinels; the client asks them for the master on every new connection) and
``redis+cluster://h1:p1[,h2:p2]`` (any nodes; the client learns the slot map).
Redis replicates asynchronously, so a write the old master acknowledged can be
missing on the replica that is promoted. ``?wait=N`` closes that window: each
append is followed, on the same connection and in the same round trip, by
``WAIT N`` (the append returns only once N replicas have it, else
``StoreUnavailableError``), and entries a follower reads are first fenced the
same way (a no-op write + ``WAIT``), so no replica applies an entry that is on
fewer than N Redis replicas. ``wait_timeout`` bounds each ``WAIT`` (seconds,
default 1).

Appends are never retried by the client (redis-py retries by default): a retried
append whose first reply was lost would be in the journal twice. A mutation that
fails raises ``StoreUnavailableError``; the follower retries on its own.
"""

from __future__ import annotations

import threading
import urllib.parse
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


# A write that changes nothing but is replicated: after it, ``WAIT`` on the same
# connection covers everything the master held when it ran (what a follower just
# read included).
_FENCE = """
return redis.call('INCRBY', KEYS[1], 0)
"""

# Our options, taken out of the URL before redis-py sees it.
_OPTIONS = ("wait", "wait_timeout")


def _hosts(netloc: str, url: str) -> tuple[list[tuple[str, int]], str | None, str | None]:
    """``[user[:password]@]h1:p1,h2:p2`` -> hosts, username, password."""
    user = password = None
    if "@" in netloc:
        auth, netloc = netloc.rsplit("@", 1)
        user, _, pw = auth.partition(":")
        user = urllib.parse.unquote(user) or None
        password = urllib.parse.unquote(pw) if pw else None
    hosts = []
    for part in netloc.split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidArgumentError(
                f"bad Redis URL {_redacted(url)!r}: hosts are host:port[,host:port...]"
            )
        hosts.append((host.strip("[]"), int(port)))
    return hosts, user, password


def _redacted(url: str) -> str:
    """``url`` without its password, for messages."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    if "@" in netloc:
        auth, host = netloc.rsplit("@", 1)
        if ":" in auth:
            netloc = auth.split(":", 1)[0] + ":***@" + host
    return scheme + sep + netloc + slash + path


def _seq(stream_id: bytes | str) -> int:
    s = stream_id.decode() if isinstance(stream_id, bytes) else stream_id
    return int(s.split("-", 1)[1])


class RedisStore:
    """Journals in Redis ≥ 7: ``redis://``, ``rediss://``, ``unix://`` URLs as
    redis-py reads them, ``redis+sentinel://h1:p1,h2:p2/MASTER[/db]`` and
    ``redis+cluster://h1:p1[,h2:p2]`` (see the module doc), each with the options
    ``wait`` (replicas that must have each entry, default 0) and ``wait_timeout``
    (seconds, default 1). Needs the ``redis`` extra (redis-py with hiredis)."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise InvalidArgumentError(
                f"store {_redacted(url)!r} needs redis-py: pip install 'rampart-registry[redis]'"
            ) from None
        self.url = url
        self._where = _redacted(url)
        self._redis = redis
        scheme, _, rest = url.partition("://")
        rest, _, query_text = rest.partition("?")
        netloc, _, path = rest.partition("/")
        query = urllib.parse.parse_qsl(query_text, keep_blank_values=True)
        ours = {k: v for k, v in query if k in _OPTIONS}
        theirs = [(k, v) for k, v in query if k not in _OPTIONS]
        try:
            self.replicas = int(ours.get("wait", "0"))
            self.wait_timeout = float(ours.get("wait_timeout", "1"))
        except ValueError:
            raise InvalidArgumentError(
                f"{self._where!r}: wait is a number of replicas, wait_timeout seconds"
            ) from None
        if not 0 <= self.replicas <= 100 or not 0 < self.wait_timeout <= 60:
            raise InvalidArgumentError(
                f"{self._where!r}: wait is 0-100 replicas and wait_timeout 0-60 seconds"
            )
        kwargs.setdefault("socket_timeout", 5.0)
        kwargs.setdefault("socket_connect_timeout", 5.0)
        # No silent retries: see the module doc.
        kwargs.setdefault("retry", Retry(NoBackoff(), 0))
        self.cluster = scheme == "redis+cluster"
        try:
            if scheme == "redis+sentinel":
                self._r = self._sentinel_client(netloc, path, theirs, kwargs)
            elif self.cluster:
                self._r = self._cluster_client(netloc, path, theirs, kwargs)
            else:
                base = url.split("?", 1)[0]
                plain = base + ("?" + urllib.parse.urlencode(theirs) if theirs else "")
                # redis-py's pool notices fork() and opens new connections in the child.
                self._r = redis.Redis.from_url(plain, **kwargs)
        except ValueError as e:
            raise InvalidArgumentError(f"bad Redis URL {self._where!r}: {e}") from None
        except (redis.RedisError, redis.exceptions.RedisClusterException, OSError) as e:
            raise StoreUnavailableError(f"Redis store {self._where}: {e}") from None
        self._append = self._r.register_script(_APPEND)
        self._create = self._r.register_script(_CREATE)
        self._checkpoint = self._r.register_script(_CHECKPOINT)
        self._compact = self._r.register_script(_COMPACT)
        self._fence_script = self._r.register_script(_FENCE)

    def _sentinel_client(
        self, netloc: str, path: str, query: list[tuple[str, str]], kwargs: dict[str, Any]
    ) -> Any:
        from redis.sentinel import Sentinel

        hosts, user, password = _hosts(netloc, self.url)
        parts = [p for p in path.split("/") if p]
        if not parts or len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
            raise InvalidArgumentError(
                f"bad Redis URL {self._where!r}: redis+sentinel://h1:p1,h2:p2/MASTER[/db]"
            )
        extra = dict(query)
        sentinel_kwargs = {
            "socket_timeout": kwargs["socket_timeout"],
            "socket_connect_timeout": kwargs["socket_connect_timeout"],
        }
        # Sentinels may have their own credentials; the URL's are the data nodes'.
        for k in ("sentinel_username", "sentinel_password"):
            if k in extra:
                sentinel_kwargs[k.removeprefix("sentinel_")] = extra.pop(k)
        if extra:
            raise InvalidArgumentError(f"{self._where!r}: unknown options {sorted(extra)}")
        sentinel = Sentinel(hosts, sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]
        db = int(parts[1]) if len(parts) == 2 else 0
        return sentinel.master_for(  # type: ignore[no-untyped-call]
            urllib.parse.unquote(parts[0]), db=db, username=user, password=password, **kwargs
        )

    def _cluster_client(
        self, netloc: str, path: str, query: list[tuple[str, str]], kwargs: dict[str, Any]
    ) -> Any:
        from redis.cluster import ClusterNode, RedisCluster

        hosts, user, password = _hosts(netloc, self.url)
        if path.strip("/") or query:
            raise InvalidArgumentError(
                f"bad Redis URL {self._where!r}: redis+cluster://h1:p1[,h2:p2][?wait=N] "
                "(a cluster has one database)"
            )
        # RESP2: redis-py 8's RESP3 handshake breaks when the cluster client
        # reconnects to a promoted replica (AttributeError in on_connect).
        kwargs.setdefault("protocol", 2)
        return RedisCluster(
            startup_nodes=[ClusterNode(h, p) for h, p in hosts],  # type: ignore[no-untyped-call]
            username=user,
            password=password,
            **kwargs,
        )

    def _node_for(self, key: str) -> Any:
        """The client of the master that holds ``key`` (the store's own client
        when not a cluster): ``WAIT`` must follow a write on its connection."""
        if not self.cluster:
            return self._r
        return self._r.get_redis_connection(self._r.get_node_from_key(key))

    def _replicated(self, name: str, script: Any, keys: list[str], args: list[Any]) -> Any:
        """``script`` then ``WAIT replicas``, pipelined on one connection to the
        master of the registry's slot; the script's result once enough replicas
        have it."""
        redis = self._redis
        # At most: load a script the (new) master lacks, learn a moved slot, run.
        for attempt in range(3):
            node = self._node_for(keys[0])
            pipe = node.pipeline(transaction=False)
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            if self.replicas:
                pipe.wait(self.replicas, int(self.wait_timeout * 1000))
            try:
                out = pipe.execute(raise_on_error=False)
            except (redis.ConnectionError, redis.TimeoutError):
                # The master is gone (a failover): learn the new slot map for the
                # next call; this one may or may not have run.
                self._refresh_slots()
                raise
            finally:
                pipe.reset()
            first = out[0]
            if isinstance(first, redis.exceptions.NoScriptError) and attempt < 2:
                node.script_load(script.script)  # not run: load it and run it once more
                continue
            ex = redis.exceptions
            if isinstance(
                first, ex.AskError | ex.ClusterDownError | ex.TryAgainError | ex.ReadOnlyError
            ):
                # The slot moved or is moving (a failover): not run. Learn the new
                # map and try once more.
                self._refresh_slots()
                if attempt < 2:
                    continue
            if isinstance(first, Exception):
                raise first
            if self.replicas:
                acked = out[1]
                if isinstance(acked, Exception):
                    raise acked
                if int(acked) < self.replicas:
                    raise StoreUnavailableError(
                        f"Redis store {self._where}: registry {name!r}: only {acked} of "
                        f"{self.replicas} replicas acknowledged within {self.wait_timeout} s; "
                        "the entry is on the master and is applied everywhere unless the "
                        "master fails before a replica has it"
                    )
            return first
        raise AssertionError("unreachable")  # pragma: no cover

    def _refresh_slots(self) -> None:
        if self.cluster:
            try:
                self._r.nodes_manager.initialize()
            except (self._redis.RedisError, self._redis.exceptions.RedisClusterException):
                pass  # no node answers yet: the next call tries again

    def _fence(self, name: str, entries: Entries) -> Entries:
        """With ``wait``: return ``entries`` only once ``replicas`` Redis replicas
        hold them (else StoreUnavailableError: the follower retries)."""
        if self.replicas and entries:
            key = f"rampart:{{{name}}}:fence"
            self._call(self._replicated, name, self._fence_script, [key], [])
        return entries

    @staticmethod
    def keys(name: str) -> dict[str, str]:
        """The Redis keys of registry ``name`` (journal stream, sequence, metadata,
        checkpoint), in one hash slot so a cluster keeps them together."""
        tag = "{" + name + "}"
        return {k: f"rampart:{tag}:{k}" for k in ("log", "seq", "meta", "ckpt")}

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except StoreUnavailableError:
            raise
        except (self._redis.ConnectionError, self._redis.TimeoutError, OSError) as e:
            raise StoreUnavailableError(f"Redis store {self._where}: {e}") from None
        except self._redis.ResponseError as e:
            # LOADING / READONLY / BUSY / MISCONF / CLUSTERDOWN / MOVED: the server
            # is there but cannot serve (a failover in progress).
            raise StoreUnavailableError(f"Redis store {self._where}: {e}") from None
        except (self._redis.RedisError, self._redis.exceptions.RedisClusterException) as e:
            # A cluster with no reachable node for the slot, no master known…
            raise StoreUnavailableError(f"Redis store {self._where}: {e}") from None

    def meta(self, name: str) -> bytes | None:
        v = self._call(self._r.get, self.keys(name)["meta"])
        return None if v is None else bytes(v)

    def create(self, name: str, meta: bytes, entries: list[bytes]) -> bool:
        k = self.keys(name)
        keys, args = [k["log"], k["seq"], k["meta"]], [meta, *entries]
        if self.replicas:
            done = self._call(self._replicated, name, self._create, keys, args)
        else:
            done = self._call(self._create, keys=keys, args=args)
        return bool(done)

    def append(self, name: str, entry: bytes, after: int) -> tuple[int, Entries]:
        k = self.keys(name)
        keys, args = [k["log"], k["seq"]], [entry, after]
        if self.replicas or self.cluster:
            n, tail = self._call(self._replicated, name, self._append, keys, args)
        else:
            n, tail = self._call(self._append, keys=keys, args=args)
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
        return self._fence(name, [(_seq(i), bytes(f.get(b"e", b""))) for i, f in rows])

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
        return self._fence(name, [(_seq(i), bytes(f.get(b"e", b""))) for i, f in rows])

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
        return f"RedisStore({self._where!r})"
