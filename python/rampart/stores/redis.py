"""The networked store: one Redis Stream per registry, for processes on many hosts.

Keys of registry ``NAME`` (all under the hash tag ``{NAME}``, so Redis Cluster
keeps them in one slot and the scripts below stay single-slot):

- ``rampart:{NAME}:log`` — the journal, a Stream whose entry ids are ``0-<seq>``
  (dense sequence numbers, the same numbers the SQLite store uses);
- ``rampart:{NAME}:seq`` — the last sequence number (survives trimming);
- ``rampart:{NAME}:meta`` — the metadata record written at creation;
- ``rampart:{NAME}:ckpt`` — a hash with the latest checkpoint (``seq``, ``data``);
- ``rampart:{NAME}:low`` — compaction's low-water mark, a hash (``seq``, and
  ``chain``: the chain value of the entry there); every entry up to ``seq`` may
  have been trimmed, and a replica that needs one reloads the checkpoint;
- ``rampart:{NAME}:fence`` — with ``?wait=N`` only: a counter followers write to
  (without changing it) so that ``WAIT`` covers what they read.

An append is one Lua script: bump ``seq``, ``XADD`` the entry with its chain
value (field ``c``: ``SHA1`` of the previous entry's chain value, the sequence
number and the entry), ``XRANGE`` the tail the appender has not applied — one
round trip, atomic. Followers block in
``XREAD BLOCK`` and read with a script that returns the end of the journal and
the entries up to it from one moment.

Garbage: any client that can reach the keys can write anything, so every value
read back is checked (stores/base.py): only ids ``0-<seq>`` up to the counter
(extended through entries that follow it) are journal entries; an entry without
an ``e`` field is skipped by every replica; an append lands after a foreign
``0-<seq>`` entry just ahead of the counter, and removes entries past reach (an
auto id ``<ms>-<n>``, a huge seq) that would make every ``XADD`` fail; a damaged
counter or checkpoint is replaced, a key of the wrong type is
:class:`RegistryFileError`.

Durability is Redis's: run it with ``appendonly yes`` and
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

import asyncio
import math
import os
import threading
import time
import urllib.parse
from typing import Any

from rampart.errors import InvalidArgumentError, RegistryFileError, StoreUnavailableError
from rampart.stores.base import (
    SEQ_MAX,
    Damaged,
    Entries,
    checked_checkpoint,
    checked_seq,
    journal_entries,
)
from rampart.stores.redact import guard_loggers, redacted, remember
from rampart.stores.redis_scripts import _APPEND, _CHECKPOINT, _COMPACT, _CREATE, _FENCE, _READ

__all__ = ["RedisStore"]

#: How often a follower polls while an id past the counter makes XREAD useless.
_POLL = 0.05


# Our options, taken out of the URL before redis-py sees it.
_OPTIONS = ("wait", "wait_timeout", "sync_timeout", "pool_max", "timeout")

#: How often a store waiting for replicas in their initial sync asks the master.
_SYNC_POLL = 0.1

#: redis-py's message when a blocking pool had no connection to give in time.
_NO_CONNECTION = "No connection available."


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
                f"bad Redis URL {redacted(url)!r}: hosts are host:port[,host:port...]"
            )
        hosts.append((host.strip("[]"), int(port)))
    return hosts, user, password


def _stream_seq(stream_id: object) -> int | None:
    """The sequence number of a stream id ``0-<seq>``; None for any other id."""
    if isinstance(stream_id, bytes):
        stream_id = stream_id.decode("ascii", "replace")
    if not isinstance(stream_id, str):
        return None
    ms, _, seq = stream_id.partition("-")
    return checked_seq(seq) if ms == "0" else None


def _payload(fields: Any) -> object:
    """An entry's ``e`` field (a script returns ``[field, value, …]``, redis-py a
    dict); a Damaged marker when it has none."""
    if isinstance(fields, list):
        fields = dict(zip(fields[::2], fields[1::2], strict=False))
    if isinstance(fields, dict) and b"e" in fields:
        return fields[b"e"]
    return Damaged("a stream entry without an 'e' field", 0)


def _chain(fields: Any) -> object:
    """An entry's chain value (field ``c``), or None."""
    if isinstance(fields, list):
        fields = dict(zip(fields[::2], fields[1::2], strict=False))
    return fields.get(b"c") if isinstance(fields, dict) else None


class RedisStore:
    """Journals in Redis ≥ 7: ``redis://``, ``rediss://``, ``unix://`` URLs as
    redis-py reads them, ``redis+sentinel://h1:p1,h2:p2/MASTER[/db]`` and
    ``redis+cluster://h1:p1[,h2:p2]`` (see the module doc), each with the options
    ``wait`` (replicas that must have each entry, default 0) and ``wait_timeout``
    (seconds, at least 0.001, default 1). Single-node URLs also take ``pool_max``
    (connections per client, default 100: the sync client, and each event loop's
    async one) and ``timeout`` (seconds a call waits for a free connection,
    default 5: past it, StoreUnavailableError). Needs the ``redis`` extra
    (redis-py with hiredis).

    ``create`` is accepted for the same call as the other stores: a Redis store
    has nothing of its own to create (keys are made per registry, by ``create``),
    and reads write no key."""

    def __init__(self, url: str, *, create: bool = True, **kwargs: Any) -> None:
        remember(url)  # before anything can quote it
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError as exc:
            raise InvalidArgumentError(
                f"store {redacted(url)!r} needs redis-py, which cannot be imported ({exc}): "
                'pip install "rampart-registry[redis]"'
            ) from None
        guard_loggers()
        self.url = url
        self.create_missing = create
        self._where = redacted(url)
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
            self.sync_timeout = float(ours.get("sync_timeout", "30"))
            self.pool_max = int(ours.get("pool_max", "100"))
            self.timeout = float(ours.get("timeout", "5"))
        except ValueError:
            raise InvalidArgumentError(
                f"{self._where!r}: wait and pool_max are whole numbers, wait_timeout, "
                "sync_timeout and timeout seconds"
            ) from None
        if not 0 <= self.replicas <= 100 or not 0 < self.wait_timeout <= 60:
            raise InvalidArgumentError(
                f"{self._where!r}: wait is 0-100 replicas and wait_timeout 0.001-60 seconds"
            )
        if self.wait_timeout < 0.001:
            # WAIT takes whole milliseconds and reads 0 as "wait forever": a
            # sub-millisecond timeout would make every append hang until the
            # socket timeout instead of failing fast.
            raise InvalidArgumentError(
                f"{self._where!r}: wait_timeout={self.wait_timeout:g} is below WAIT's "
                "resolution of 1 ms (0 would mean wait forever): give 0.001-60 seconds"
            )
        if not 0 <= self.sync_timeout <= 3600:
            raise InvalidArgumentError(f"{self._where!r}: sync_timeout is 0-3600 seconds")
        if not 1 <= self.pool_max <= 10_000 or not 0 < self.timeout <= 3600:
            raise InvalidArgumentError(
                f"{self._where!r}: pool_max is 1-10000 connections and timeout 0-3600 seconds"
            )
        if ("pool_max" in ours or "timeout" in ours) and scheme in (
            "redis+sentinel",
            "redis+cluster",
        ):
            raise InvalidArgumentError(
                f"{self._where!r}: pool_max and timeout are options of single-node URLs "
                "(Sentinel and Cluster clients keep redis-py's own pools)"
            )
        # The socket must outlast the server-side WAIT, or every WAIT that runs to
        # its timeout would end as a socket timeout instead of a count.
        kwargs.setdefault("socket_timeout", 5.0 + (self.wait_timeout if self.replicas else 0))
        kwargs.setdefault("socket_connect_timeout", 5.0)
        # No silent retries: see the module doc.
        kwargs.setdefault("retry", Retry(NoBackoff(), 0))
        self.cluster = scheme == "redis+cluster"
        # Whether the last WAIT counted enough replicas (see _await_replicas).
        self._replicas_ready = False
        try:
            if scheme == "redis+sentinel":
                self._r = self._sentinel_client(netloc, path, theirs, kwargs)
            elif self.cluster:
                self._r = self._cluster_client(netloc, path, theirs, kwargs)
            else:
                base = url.split("?", 1)[0]
                plain = base + ("?" + urllib.parse.urlencode(theirs) if theirs else "")
                # A pool that waits for a free connection (up to ``timeout``)
                # instead of refusing past ``pool_max``: many threads at once queue.
                # redis-py's pool notices fork() and opens new connections in the child.
                pool = redis.BlockingConnectionPool.from_url(
                    plain, max_connections=self.pool_max, timeout=self.timeout, **kwargs
                )
                self._r = redis.Redis.from_pool(pool)
        except ValueError as e:
            raise InvalidArgumentError(redacted(f"bad Redis URL {self._where!r}: {e}")) from None
        except (redis.RedisError, redis.exceptions.RedisClusterException, OSError) as e:
            raise StoreUnavailableError(redacted(f"Redis store {self._where}: {e}")) from None
        self._append = self._r.register_script(_APPEND)
        self._read_script = self._r.register_script(_READ)
        self._create = self._r.register_script(_CREATE)
        self._checkpoint = self._r.register_script(_CHECKPOINT)
        self._compact = self._r.register_script(_COMPACT)
        self._fence_script = self._r.register_script(_FENCE)
        guard_loggers()  # after the client: Sentinel and Cluster import their modules
        # The asyncio twins (below): one redis.asyncio client per event loop, for a
        # single node without ``wait``; anything else runs the sync call above
        # on the loop's default executor (its failover, WAIT and fencing logic).
        self._kwargs = {k: v for k, v in kwargs.items() if k != "retry"}
        # A plain dict, not a WeakKeyDictionary: a client's connections hold its
        # loop, so a weak key would never die and every asyncio.run() would leave
        # its connections open. Each entry leaves with its loop (_close_with_loop).
        self._aclients: dict[asyncio.AbstractEventLoop, Any] = {}
        self._apid = os.getpid()

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
            # One try per sentinel: discovery moves on to the next one by itself.
            # redis-py before 8 gave the sentinel clients its default retry (3
            # retries, exponential backoff), so a dead first sentinel cost ~12 s
            # on every new connection, and hid the initial sync below.
            "retry": kwargs["retry"],
        }
        # Sentinels may have their own credentials; the URL's are the data nodes'.
        for k in ("sentinel_username", "sentinel_password"):
            if k in extra:
                sentinel_kwargs[k.removeprefix("sentinel_")] = extra.pop(k)
        if extra:
            raise InvalidArgumentError(f"{self._where!r}: unknown options {sorted(extra)}")
        sentinel = Sentinel(hosts, sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call, unused-ignore]
        db = int(parts[1]) if len(parts) == 2 else 0
        return sentinel.master_for(  # type: ignore[no-untyped-call, unused-ignore]
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
            if self.replicas and not self._replicas_ready:
                self._await_replicas(node)
            pipe = node.pipeline(transaction=False)
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            if self.replicas:
                pipe.wait(self.replicas, math.ceil(self.wait_timeout * 1000))  # never 0
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
                    self._replicas_ready = False
                    raise StoreUnavailableError(
                        f"Redis store {self._where}: registry {name!r}: only {acked} of "
                        f"{self.replicas} replicas acknowledged within {self.wait_timeout} s"
                        f"{self._syncing_note(node)}; the entry is on the master and is "
                        "applied everywhere unless the master fails before a replica has it"
                    )
                self._replicas_ready = True
            return first
        raise AssertionError("unreachable")  # pragma: no cover

    def _replica_states(self, node: Any) -> tuple[int, list[str]]:
        """The master's replicas: how many are online, and the others' states
        (``wait_bgsave``, ``send_bulk``…: attached, in their initial sync)."""
        info = node.info("replication")
        states = [
            str(v.get("state", "")) for k, v in info.items()
            if k.startswith("slave") and isinstance(v, dict)
        ]  # fmt: skip
        return states.count("online"), [s for s in states if s != "online"]

    def _await_replicas(self, node: Any) -> None:
        """Before the first replicated write (and after a short ``WAIT``): while
        replicas that would make up ``wait`` are attached but in their initial
        sync, wait for it to end, up to ``sync_timeout``.

        WAIT counts online replicas only, and a replica that has just attached
        holds nothing until the master has sent it a snapshot (Redis waits
        ``repl-diskless-sync-delay``, 5 s by default, before it starts one): a
        store opened on a fresh deployment would have its first writes refused
        for those seconds. Waiting here, before the write, changes nothing of
        what an acknowledgement means: the WAIT after the write still decides."""
        deadline = time.monotonic() + self.sync_timeout
        while True:
            try:
                online, syncing = self._replica_states(node)
            except self._redis.ResponseError:
                return  # INFO refused (an ACL, a proxy): the WAIT alone decides
            except (self._redis.ConnectionError, self._redis.TimeoutError, OSError):
                return  # the write below meets the failure and handles it
            if online >= self.replicas or online + len(syncing) < self.replicas:
                return  # enough now, or never without another replica: WAIT says so
            if time.monotonic() >= deadline:
                return
            time.sleep(_SYNC_POLL)

    def _syncing_note(self, node: Any) -> str:
        """For the short-WAIT message: replicas still in their initial sync."""
        try:
            _, syncing = self._replica_states(node)
        except (self._redis.RedisError, OSError):
            return ""
        if not syncing:
            return ""
        return (
            f" ({len(syncing)} more attached but in their initial sync: "
            f"{', '.join(sorted(set(syncing)))}; sync_timeout={self.sync_timeout:g} s)"
        )

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
            keys = [f"rampart:{{{name}}}:fence", self.keys(name)["seq"]]
            self._call(self._replicated, name, self._fence_script, keys, [])
        return entries

    @staticmethod
    def keys(name: str) -> dict[str, str]:
        """The Redis keys of registry ``name`` (journal stream, sequence, metadata,
        checkpoint), in one hash slot so a cluster keeps them together."""
        tag = "{" + name + "}"
        return {k: f"rampart:{tag}:{k}" for k in ("log", "seq", "meta", "ckpt", "low")}

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except StoreUnavailableError:
            raise
        except (self._redis.ConnectionError, self._redis.TimeoutError, OSError) as e:
            raise self._unavailable(e) from None
        except self._redis.ResponseError as e:
            text = str(e)
            if "WRONGTYPE" in text or "RAMPART-DAMAGED" in text:
                # A foreign client put another type of value under one of our keys.
                raise RegistryFileError(
                    redacted(f"Redis store {self._where}: damaged: {text}")
                ) from None
            # LOADING / READONLY / BUSY / MISCONF / CLUSTERDOWN / MOVED: the server
            # is there but cannot serve (a failover in progress).
            raise self._unavailable(e) from None
        except (self._redis.RedisError, self._redis.exceptions.RedisClusterException) as e:
            # A cluster with no reachable node for the slot, no master known…
            raise self._unavailable(e) from None

    def exists(self) -> bool:
        """Whether the server answers (a Redis store has no layout of its own to
        find: its keys are made per registry). Creates nothing."""
        return bool(self._call(self._r.ping))

    def meta(self, name: str) -> bytes | None:
        try:
            v = self._call(self._r.get, self.keys(name)["meta"])
        except RegistryFileError as e:
            raise RegistryFileError(
                f"Redis store {self._where}: registry {name!r} has a damaged metadata record ({e})"
            ) from None
        return None if v is None else bytes(v)

    def create(self, name: str, meta: bytes, entries: list[bytes]) -> bool:
        k = self.keys(name)
        keys, args = [k["log"], k["seq"], k["meta"], k["ckpt"], k["low"]], [meta, *entries]
        if self.replicas:
            done = self._call(self._replicated, name, self._create, keys, args)
        else:
            done = self._call(self._create, keys=keys, args=args)
        return bool(done)

    def append(self, name: str, entry: bytes, after: int) -> tuple[int, Entries]:
        k = self.keys(name)
        keys, args = [k["log"], k["seq"], k["low"], k["ckpt"]], [entry, after]
        if self.replicas or self.cluster:
            n, tail, low, anchor, here = self._call(
                self._replicated, name, self._append, keys, args
            )
        else:
            n, tail, low, anchor, here = self._call(self._append, keys=keys, args=args)
        return int(n), self._entries(tail, after, int(n), int(low), anchor, not here)

    @staticmethod
    def _entries(
        raw: Any, after: int, last: int | None, low: int, anchor: object, gone: bool = False
    ) -> Entries:
        # A stream entry arrives as [id, [field, value, ...]] (or a dict).
        rows = []
        for item in raw if isinstance(raw, list) else []:
            if isinstance(item, list | tuple) and len(item) == 2:
                rows.append((_stream_seq(item[0]), _payload(item[1]), _chain(item[1])))
        return journal_entries(rows, after, last, low=low, anchor=anchor, gone=gone)

    def _read(self, name: str, after: int, limit: int) -> tuple[int, list[Any], int, Any, bool]:
        k = self.keys(name)
        c, kind, rows, low, anchor, here = self._call(
            self._read_script, keys=[k["log"], k["seq"], k["low"], k["ckpt"]], args=[after, limit]
        )
        if int(c) < 0:
            what = kind.decode("ascii", "replace") if isinstance(kind, bytes) else kind
            raise RegistryFileError(
                f"Redis store {self._where}: registry {name!r}: its journal key {k['log']} "
                f"holds a {what}, not a stream"
            )
        return int(c), rows, int(low), anchor, not here

    def read(self, name: str, after: int, limit: int = 10_000) -> Entries:
        last, rows, low, anchor, gone = self._read(name, after, limit)
        # With ``wait``: handed out only once enough Redis replicas hold them.
        top = None if len(rows) >= limit else last
        entries = self._entries(rows, after, top, low, anchor, gone)
        return self._fence(name, entries)

    def wait(
        self, name: str, after: int, timeout: float, stop: threading.Event | None = None
    ) -> Entries:
        # XREAD BLOCK cannot be interrupted: a closing replica waits at most `timeout`.
        log = self.keys(name)["log"]
        deadline = time.monotonic() + timeout
        woke = False
        while True:
            entries = self.read(name, after)
            if entries:
                return entries
            left = deadline - time.monotonic()
            if left <= 0 or (stop is not None and stop.is_set()):
                return Entries()
            if woke:
                # XREAD woke at once but nothing is in the journal yet: an id past
                # the counter (a foreign XADD, until the next append moves past or
                # removes it) would wake every XREAD at once, so poll instead.
                time.sleep(min(left, _POLL))
                woke = False
                continue
            # The socket timeout (5 s) outlives the server-side block (<= timeout).
            got = self._call(
                self._r.xread, {log: f"0-{after}"}, count=1, block=max(1, int(left * 1000))
            )
            woke = bool(got)

    def first_seq(self, name: str) -> int:
        rows = self._call(self._r.xrange, self.keys(name)["log"], "0-1", f"0-{SEQ_MAX}", count=1)
        return (_stream_seq(rows[0][0]) or 0) if rows else 0

    def last_seq(self, name: str) -> int:
        # The last entry there is: what sync() waits for (a checkpoint's seq is
        # not: a foreign one could name an entry that never comes).
        return self._read(name, SEQ_MAX, 0)[0]

    def put_checkpoint(self, name: str, seq: int, data: bytes, chain: bytes | None = None) -> bool:
        k = self.keys(name)
        return bool(
            self._call(
                self._checkpoint,
                keys=[k["ckpt"], k["log"], k["low"]],
                args=[seq, data, chain or b""],
            )
        )

    def checkpoint(self, name: str) -> tuple[int, bytes] | None:
        try:
            got = self._call(self._r.hmget, self.keys(name)["ckpt"], ["seq", "data"])
        except RegistryFileError as e:
            raise RegistryFileError(
                f"Redis store {self._where}: registry {name!r} has a damaged checkpoint ({e})"
            ) from None
        if got[0] is None and got[1] is None:
            return None
        ck = checked_checkpoint(got[0], got[1])
        if ck is None:
            raise RegistryFileError(
                f"Redis store {self._where}: registry {name!r} has a damaged checkpoint"
            )
        return ck

    def compact(self, name: str, upto: int) -> int:
        k = self.keys(name)
        return int(self._call(self._compact, keys=[k["log"], k["ckpt"], k["low"]], args=[upto]))

    def low_seq(self, name: str) -> int:
        """Compaction's low-water mark: every entry up to it may have been
        trimmed (a replica that needs one reloads the checkpoint)."""
        return self._read(name, SEQ_MAX, 0)[2]

    def names(self) -> list[str]:
        from rampart.stores import valid_name

        out = []
        for key in self._call(
            lambda: list(self._r.scan_iter(match="rampart:{*}:meta", count=1000))
        ):
            s = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
            name = s[len("rampart:{") : -len("}:meta")]
            if valid_name(name):  # a foreign key under our prefix is no registry
                out.append(name)
        return sorted(out)

    def close(self) -> None:
        self._r.close()

    # ---- asyncio (redis.asyncio, one client per event loop) ---------------------------

    def aprepare(self) -> None:
        """Import redis.asyncio (~0.1 s, once per process) off the event loop:
        ``BlockRegistry.aopen`` calls this on its executor thread."""
        from redis import asyncio  # noqa: F401

    def _direct(self) -> bool:
        """Whether the async client serves this store: one node (``redis://``,
        ``rediss://``, ``unix://``) without ``wait``. Sentinel, Cluster and ``wait``
        keep their one implementation, the sync one, run off the loop."""
        return not self.cluster and not self.replicas and not self.url.startswith("redis+")

    def _aclient(self) -> tuple[Any, Any]:
        """This loop's async client and its append script. Bound to the loop: made
        on its first call, closed when the loop ends (``asyncio.run`` and
        ``asyncio.Runner`` cancel the closer task below before they close the
        loop) or by :meth:`aclose`."""
        if self._apid != os.getpid():
            self._aclients = {}  # the parent's clients: not this process's to close
            self._apid = os.getpid()
        loop = asyncio.get_running_loop()
        got = self._aclients.get(loop)
        if got is None:
            from redis import asyncio as aioredis
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            guard_loggers()  # redis.asyncio's loggers exist from here on
            # A loop closed by hand (loop.close() with tasks pending) never ran
            # its closer: its client is dropped here, and its sockets close when
            # the client is collected.
            for old in [lp for lp in self._aclients if lp.is_closed()]:
                del self._aclients[old]

            base, _, q = self.url.partition("?")
            theirs = [
                (k, v)
                for k, v in urllib.parse.parse_qsl(q, keep_blank_values=True)
                if k not in _OPTIONS
            ]
            url = base + ("?" + urllib.parse.urlencode(theirs) if theirs else "")
            # No silent retries, as for the sync client (see the module doc).
            kwargs = {"retry": Retry(NoBackoff(), 0), **self._kwargs}
            # Coroutines past pool_max wait for a connection (up to timeout)
            # instead of failing with "Too many connections".
            pool = aioredis.BlockingConnectionPool.from_url(
                url, max_connections=self.pool_max, timeout=self.timeout, **kwargs
            )
            client = aioredis.Redis.from_pool(pool)
            closer = loop.create_task(
                _close_with_loop(self._aclients, loop, client), name="rampart-redis-close-with-loop"
            )
            got = self._aclients[loop] = (client, client.register_script(_APPEND), closer)
        return got[0], got[1]

    def _unavailable(self, e: BaseException) -> StoreUnavailableError:
        if str(e) == _NO_CONNECTION:
            return StoreUnavailableError(
                f"Redis store {self._where}: no free connection within {self.timeout:g} s "
                f"(pool_max={self.pool_max})"
            )
        return StoreUnavailableError(redacted(f"Redis store {self._where}: {e}"))

    async def _acall(self, coro: Any) -> Any:
        try:
            return await coro
        except (self._redis.ConnectionError, self._redis.TimeoutError, OSError) as e:
            raise self._unavailable(e) from None
        except self._redis.ResponseError as e:
            raise self._unavailable(e) from None

    @staticmethod
    async def _off_loop(fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def aappend(self, name: str, entry: bytes, after: int) -> tuple[int, Entries]:
        """:meth:`append` on this event loop (the same script, one round trip)."""
        if not self._direct():
            result: tuple[int, Entries] = await self._off_loop(self.append, name, entry, after)
            return result
        k = self.keys(name)
        _, script = self._aclient()
        keys = [k["log"], k["seq"], k["low"], k["ckpt"]]
        n, tail, low, anchor, here = await self._acall(script(keys=keys, args=[entry, after]))
        return int(n), self._entries(tail, after, int(n), int(low), anchor, not here)

    async def aread(self, name: str, after: int, limit: int = 10_000) -> Entries:
        """:meth:`read` for coroutines (``sync_async``'s catch-up, not the write
        path): the sync call, with its checks of every value, off the loop."""
        entries: Entries = await self._off_loop(self.read, name, after, limit)
        return entries

    async def alast_seq(self, name: str) -> int:
        """The journal's last sequence number, for coroutines (off the loop)."""
        return int(await self._off_loop(self.last_seq, name))

    async def aclose(self) -> None:
        """Close this loop's async client (other loops' clients close with their loop)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        got = self._aclients.pop(loop, None)
        if got is not None:
            got[2].cancel()
            await got[0].aclose()

    def __repr__(self) -> str:
        return f"RedisStore({self._where!r})"


async def _close_with_loop(
    clients: dict[asyncio.AbstractEventLoop, Any], loop: asyncio.AbstractEventLoop, client: Any
) -> None:
    """Sleeps until the loop ends (or ``aclose``), then closes ``client``'s
    connections on that loop, while it still runs. An asyncio.run() that used the
    store leaves no connection open behind it."""
    try:
        await asyncio.Event().wait()
    finally:
        got = clients.get(loop)
        if got is not None and got[0] is client:
            del clients[loop]
        try:
            await client.aclose()
        except Exception:  # a connection already broken: nothing left to close
            pass
