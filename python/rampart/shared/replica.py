"""The replica side of a shared registry (docs/specification.md §7): append, apply, follow.

A shared ``BlockRegistry`` is an ordinary registry whose core has this replica's
origin attached (``attach_journal``): every write method of the core builds its
operation as usual and, instead of applying it, returns the encoded entry as a
value (``_core.PendingEntry``). The write's driver (``rampart._ops``) hands it
to ``Replica.submit`` (sync) or ``Replica.asubmit`` (async), which append it to
the store and apply every entry up to and including its own (``apply_entry``,
the core's one write path) before the call returns. A follower thread applies
other processes' entries as they arrive; compile never touches the store or the
replica's lock.

The replica reaches its registry only through ``ReplicaHost`` (below): the
core object, which never changes (a reload from a checkpoint replaces its
contents in place), the settings record, and embedding what was written.

Choices docs/specification.md §7 leaves open (docs/shared.md explains them):

- **Access counts** are counted locally by compile and published by the follower
  every ``FLUSH_INTERVAL`` seconds as one commutative entry (and by ``sync`` and
  ``close``); a replica skips its own access entries (it counted them already).
- **Embeddings**: the process that writes a block embeds it, on its follower
  thread right after the write (off the write path), and publishes the vectors;
  a replica that gates before they arrive embeds the block itself and publishes
  too (the last published vector wins everywhere, and one model gives one vector).
- **Checkpoints**: the replica whose append lands on a multiple of
  ``CHECKPOINT_EVERY`` writes a checkpoint (its state after that entry) from its
  follower thread; ``compact`` drops entries the latest checkpoint covers. A
  replica that finds a gap (the entries it needs were compacted) reloads the
  checkpoint.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import weakref
from collections import Counter
from typing import Any, Protocol

import rampart._core as _core
import rampart._files as _files
import rampart.shared.follower as follower
from rampart.errors import (
    RampartError,
    RegistryFileError,
    StoreUnavailableError,
)
from rampart.shared.aio import AsyncStore, async_store
from rampart.shared.follower import FLUSH_INTERVAL
from rampart.stores import Damaged, Entries, Store
from rampart.tools import check_block_metadata

__all__ = ["CHECKPOINT_EVERY", "FLUSH_INTERVAL", "Replica", "ReplicaHost"]

log = logging.getLogger("rampart.shared")

CHECKPOINT_EVERY = 1000
_NO_CODE = (lambda: None).__code__

_LIVE: weakref.WeakSet[Replica] = weakref.WeakSet()

#: Longest journal tail a coroutine applies on the event loop itself; a longer
#: one (a replica far behind) is applied on the loop's default executor.
_APPLY_ON_LOOP = 16


async def _aacquire(lock: threading.Lock) -> None:
    """Take a lock that threads hold only briefly, from a coroutine: poll,
    yielding to the loop between tries, instead of blocking it."""
    delay = 0.0
    while not lock.acquire(blocking=False):
        await asyncio.sleep(delay)
        delay = min(0.001, delay * 2 or 0.0001)


class ReplicaHost(Protocol):
    """What a replica uses of its registry (``BlockRegistry`` implements it)."""

    @property
    def _core(self) -> _core.Registry: ...
    def _settings(self) -> str: ...
    def _embed_written(self) -> None: ...

    # the gate's state (rampart.gates.policy): told which blocks arrived
    _gate: Any


class Replica:
    """One process's replica of a shared registry's journal."""

    def __init__(self, reg: ReplicaHost, store: Store, name: str, meta: dict[str, Any]) -> None:
        # Weak: the core holds this replica (its journal), and a strong way back
        # would be a cycle through a native object the collector cannot see.
        self._reg = weakref.ref(reg)
        self.store = store
        # Its async side (rampart.shared.aio): the store's own client, or its
        # blocking calls off the loop.
        self.astore: AsyncStore = async_store(store)
        self.name = name
        self.meta = meta
        self.origin = os.urandom(16)
        self.position = 0
        self._lock = threading.RLock()
        # ("access" | "other", entry): queued entries the follower appends soon.
        self._outbox: list[tuple[str, bytes]] = []
        # Access entries the parent process had queued when this one forked from
        # it: their counts are in this replica already (skipped when they arrive).
        self._counted: list[bytes] = []
        # The queued entry whose last append raised: it may be in the journal
        # with only the reply lost (a failover between the append and its WAIT,
        # a timeout). Access counts are deltas, so appending it again would count
        # them twice in every other replica: flush reads the journal first, and
        # _apply takes it off the queue if it is there.
        self._in_doubt: bytes | None = None
        self._outbox_lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = False
        self._wrote = False
        self._checkpoint_due: int | None = None
        self._warned: set[int] = set()
        self._thread: threading.Thread | None = None
        #: The store's chain value of the entry at ``position`` as this replica
        #: applied it (None: unknown — the next read says).
        self.head: bytes | None = None
        #: How often this replica rebuilt itself from the store (a fork).
        self.rebuilds = 0
        #: An empty registry's state, to rebuild from when there is no checkpoint.
        self._genesis = b""
        # Async writes append without the lock (the event loop must not wait for
        # another thread's round trip), so another thread may apply their entry
        # first: while any is in flight, _apply keeps every outcome past the
        # oldest one's starting position (_floors), for its writer to collect.
        self._olock = threading.Lock()
        self._floors: Counter[int] = Counter()
        self._outcomes: dict[int, tuple[Any, BaseException | None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        _LIVE.add(self)

    # ---- applying entries -----------------------------------------------------------

    def _core(self) -> _core.Registry:
        reg = self._reg()
        if reg is None:
            raise RampartError(f"shared registry {self.name!r} is gone")
        return reg._core

    def _apply(self, entries: Entries, own: int | None = None) -> tuple[Any, BaseException | None]:
        """Apply ``entries`` past ``position`` in order (caller holds the lock);
        return the outcome or error of entry ``own``. Damaged entries and holes
        (the store marks them, stores/base.py) are skipped, the same way in
        every replica; entries compaction dropped (below the store's low-water
        mark) come from the checkpoint; a store whose history is not this
        replica's (its chain value at ``position`` differs) makes it rebuild
        from the store, and the rest of ``entries`` is left for a new read."""
        result: Any = None
        error: BaseException | None = None
        after = getattr(entries, "after", None)
        if after is not None and after > self.position:
            return result, error  # read before a rebuild moved this replica back
        chains: dict[int, bytes] = getattr(entries, "chains", None) or {}
        if own is not None and after is not None and own <= after:
            # This replica's own entry landed at or below its position: the
            # store's history went back past entries applied here.
            self._rebuild(f"an append landed at {own}, at or below entry {after} applied here")
            return result, error
        if after is not None:
            theirs = entries.anchor if after == self.position else chains.get(self.position)
            if self._forked(theirs):
                self._rebuild(f"its entry {self.position} is not the one applied here")
                return result, error
            if after == self.position and getattr(entries, "gone", False) and self.head:
                self._rebuild(f"it holds no entry {after} any more, which was applied here")
                return result, error
        core = self._core()
        written: list[str] = []  # blocks the entries wrote (their ids come back)
        for seq, data in entries:
            if seq <= self.position:
                if seq == self.position and self.head is None:
                    self.head = chains.get(seq)  # after a checkpoint: the store's word
                continue
            if isinstance(data, Damaged) and data.compacted:
                # Below the low-water mark: compaction dropped these entries and
                # the checkpoint covers them (never a hole).
                if self._from_checkpoint(data.first, seq):
                    core = self._core()
                else:
                    self._skip(data.first, seq, "compacted, and no usable checkpoint covers them")
                    self.position, self.head = seq, None
                continue
            if seq != self.position + 1 or isinstance(data, Damaged):
                first = self.position + 1
                if isinstance(data, Damaged):
                    missing, why, last = data.missing, data.reason, seq
                else:  # a store that left out the hole marker
                    missing, why, last = True, "no entry at these sequence numbers", seq - 1
                if missing and getattr(entries, "low", None) is None:
                    # A store that keeps no low-water mark: compaction is told by
                    # the oldest entry kept, as before the mark existed.
                    if self._from_checkpoint(first, None):
                        core = self._core()
                if self.position < last:
                    self._skip(max(first, self.position + 1), last, why)
                    self.position, self.head = last, chains.get(last)
                if isinstance(data, Damaged) or seq <= self.position:
                    continue
            if self._in_doubt is not None and data == self._in_doubt:
                self._landed()  # then applied as any entry of this replica's
            if self._counted and data in self._counted:
                # Counted here before the fork; the parent published it now.
                self._counted.remove(data)
                self.position, self.head = seq, chains.get(seq)
                continue
            out: Any = None
            err: BaseException | None = None
            try:
                out = core.apply_entry(data, self.origin)
            except RegistryFileError as e:
                # A garbage entry (a foreign client, a newer rampart): every replica
                # decodes the same bytes, fails the same way and skips it.
                self._skip(seq, seq, str(e))
                err = e
            except RampartError as e:
                # A refused operation (permission, gone block): refused everywhere.
                err = e
            except Exception as e:
                # Anything else the core raises on foreign bytes: the same bytes
                # fail the same way in every replica, so skipping keeps them equal.
                self._skip(seq, seq, f"{type(e).__name__}: {e}")
                err = RegistryFileError(f"shared registry {self.name!r}: entry {seq}: {e}")
            # Another replica's writes (this one's own went through its registry's
            # methods, which already note examples they bring).
            if seq != own and isinstance(out, str):
                written.append(out)
            elif seq != own and isinstance(out, list):
                written += [x for x in out if isinstance(x, str)]
            if seq == own:
                result, error = out, err
            if self._floors:
                with self._olock:
                    self._outcomes[seq] = (out, err)
            self.position, self.head = seq, chains.get(seq)
        if written:
            reg = self._reg()
            if reg is not None:
                reg._gate.blocks_arrived(reg, written)
        return result, error

    def _forked(self, theirs: bytes | None) -> bool:
        """Whether the store's chain value at ``position`` says its history is
        not the one this replica applied. Unknown on either side: not a fork
        (and the store's value is taken as this replica's from now on)."""
        if theirs is None:
            return False
        if self.head is None:
            self.head = theirs
            return False
        return theirs != self.head

    def _rebuild(self, why: str) -> None:
        """The store's history is not this replica's (a failover without
        ``wait``, a restore from a backup, a foreign rewrite): become what a
        replica opened now would be — the store's checkpoint (or nothing) —
        and replay the store's journal from there (the caller reads on)."""
        log.warning(
            "shared registry %r: the store's journal went another way (%s): "
            "rebuilding this replica from the store",
            self.name,
            why,
        )
        self._queue_access()  # counted here, not yet published: kept for the journal
        ck = None
        try:
            ck = self.store.checkpoint(self.name)
            if ck is not None:
                _install_checkpoint(self._core(), self.meta["registry_id"], ck[1], self.name)
        except RegistryFileError as e:
            _replay_instead(self.name, e)
            ck = None
        if ck is None:
            _install_checkpoint(self._core(), self.meta["registry_id"], self._genesis, self.name)
        self._restarted(0 if ck is None else ck[0])
        self.rebuilds += 1

    def _restarted(self, position: int) -> None:
        """After this replica's state was replaced by a checkpoint's: its own
        entries past the checkpoint are no longer counted here, so it takes a
        new origin (they apply as anyone's), and what it skipped as inherited
        at fork() is in no state now."""
        self.position, self.head = position, None
        self.origin = os.urandom(16)
        self._counted = []

    def _skip(self, first: int, last: int, why: str) -> None:
        """One warning per skipped entry (or run of missing ones) per replica."""
        if last in self._warned:
            return
        self._warned.add(last)
        if first == last:
            log.warning("shared registry %r: skipped journal entry %d: %s", self.name, last, why)
        else:
            log.warning(
                "shared registry %r: skipped journal entries %d..%d: %s",
                self.name,
                first,
                last,
                why,
            )

    def _from_checkpoint(self, first: int, low: int | None) -> bool:
        """Entries from ``first`` on are missing: compaction dropped them (up to
        the store's low-water mark ``low``; None: a store without one, where
        only a run that starts before the oldest entry kept is compaction).
        Reload the checkpoint when it covers them (True); otherwise False."""
        if low is None:
            oldest = self.store.first_seq(self.name)
            if oldest and first >= oldest:
                return False  # entries before these are kept: not compaction
        try:
            ck = self.store.checkpoint(self.name)
            if ck is None or ck[0] < max(first, low or 0) or ck[0] < self.position:
                return False
            self._queue_access()
            _install_checkpoint(self._core(), self.meta["registry_id"], ck[1], self.name)
        except RegistryFileError as e:
            # The checkpoint is the only copy of what compaction dropped; damaged,
            # it cannot be used (docs/shared.md): the entries count as a hole.
            log.warning("shared registry %r: damaged checkpoint passed over: %s", self.name, e)
            return False
        self._restarted(ck[0])
        return True

    def catch_up(self) -> None:
        """Apply everything the store holds now (and check that the store's
        history is still this replica's, even when it holds nothing new)."""
        rebuilt = self.rebuilds
        while True:
            before = (self.position, self.rebuilds)
            entries = self.store.read(self.name, self.position)
            with self._lock:
                self._apply(entries)
            if (self.position, self.rebuilds) == before or self.rebuilds > rebuilt + 2:
                return  # nothing new (bounded, not a spin), or a store that keeps moving

    def _own(self, seq: int) -> tuple[Any, BaseException | None]:
        """This replica's entry ``seq`` was appended but a rebuild left it
        unapplied: read on until it is (caller holds the lock)."""
        for _ in range(16):
            before = (self.position, self.rebuilds)
            out = self._apply(self.store.read(self.name, self.position), own=seq)
            if self.position >= seq:
                return out
            if (self.position, self.rebuilds) == before:
                break
        raise StoreUnavailableError(
            f"shared registry {self.name!r}: entry {seq} was appended, then lost by the "
            "store (its history went back past it: a failover without wait, a restore); "
            "it is in no replica"
        )

    # ---- mutations ------------------------------------------------------------------

    def submit(self, entry: bytes, writes_text: bool) -> Any:
        """Append one mutation (encoded by the core's write method, handed here
        by the operation's sync driver) and apply the journal up to it; return
        its outcome (or raise its error), as the local call would."""
        if self._closed:
            raise RampartError(f"shared registry {self.name!r} is closed (reopen it to write)")
        with self._lock:
            if self._closed:  # close() ran while this call was on its way here
                raise RampartError(f"shared registry {self.name!r} is closed (reopen it to write)")
            seq, tail = self.store.append(self.name, entry, self.position)
            result, error = self._apply(tail, own=seq)
            if self.position < seq:
                result, error = self._own(seq)
        return self._settle(seq, writes_text, result, error)

    def _settle(self, seq: int, writes_text: bool, result: Any, error: BaseException | None) -> Any:
        """After this replica's own entry ``seq`` was applied (sync or async
        write): note a checkpoint due and text to embed; the caller's outcome."""
        if seq % CHECKPOINT_EVERY == 0:
            self._checkpoint_due = seq
        if writes_text:
            self._wrote = True
        if error is not None:
            raise error
        return result

    def publish_vectors(
        self, blocks: list[Any], matrix: bytes, dim: int, truncated: list[bool]
    ) -> None:
        """Queue the vectors this process computed, for the other replicas."""
        self.publish(self._core().embed_entry(self.origin, blocks, matrix, dim, truncated))

    def publish(self, entry: bytes | None) -> None:
        """Queue an entry the follower appends soon (vectors): it commutes with
        everything, so nobody waits for it."""
        if entry is not None:
            with self._outbox_lock:
                self._outbox.append(("other", entry))

    def _queue_access(self) -> None:
        """Queue this replica's unpublished access counts as one entry (caller
        holds the lock: the counts leave the core and enter the queue at once,
        so a fork or a checkpoint never finds them in neither or in both)."""
        reg = self._reg()
        entry = None if reg is None else reg._core.access_entry(self.origin)
        if entry is not None:
            with self._outbox_lock:
                self._outbox.append(("access", entry))

    def flush(self) -> None:
        """Append queued vectors and this replica's unpublished access counts.
        An entry leaves the queue only once it is in the journal: a
        StoreUnavailableError keeps it (and the rest) for the next flush, which
        first reads the journal for it (the append may have landed with its
        reply lost), so no entry is appended twice."""
        with self._lock:
            self._queue_access()
            while True:
                with self._outbox_lock:
                    if not self._outbox:
                        return
                    entry = self._outbox[0][1]
                if entry is self._in_doubt:
                    self.catch_up()  # applying it, if there, takes it off the queue
                    with self._outbox_lock:
                        if not self._outbox or self._outbox[0][1] is not entry:
                            continue  # it had landed
                    # Not in the journal the store holds now: the append was lost
                    # (a failover's promoted replica never had it), so append again.
                    self._in_doubt = None
                try:
                    seq, tail = self.store.append(self.name, entry, self.position)
                except StoreUnavailableError:
                    self._in_doubt = entry
                    raise
                with self._outbox_lock:
                    self._outbox.pop(0)
                self._apply(tail, own=seq)

    def _landed(self) -> None:
        """The entry in doubt is in the journal: off the queue (caller holds the lock)."""
        with self._outbox_lock:
            if self._outbox and self._outbox[0][1] is self._in_doubt:
                self._outbox.pop(0)
        self._in_doubt = None

    def sync(self, timeout: float = 10.0) -> None:
        """Flush, then apply everything appended before this call."""
        deadline = time.monotonic() + timeout
        self.flush()
        target = self.store.last_seq(self.name)
        self.catch_up()  # also when ahead of the store: its history may have gone back
        while self.position < target:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"shared registry {self.name!r}: at entry {self.position} of {target} "
                    f"after {timeout} s"
                )
            before = self.position
            self.catch_up()
            if self.position == before:
                time.sleep(0.01)  # nothing new readable yet: do not spin

    def checkpoint(self) -> int:
        """Write a checkpoint of the state after ``position``; returns that position."""
        at = self._try_checkpoint()
        if at is None:
            raise RampartError(
                f"shared registry {self.name!r}: a checkpoint must wait until the access "
                "counts this process inherited at fork() are in the journal; try again"
            )
        return at

    def compact(self) -> tuple[int, int]:
        """Checkpoint the state after everything appended so far and drop the
        entries the store's checkpoint covers, once that checkpoint is known
        to decode as this registry's (a foreign one that does not must never
        let entries go: it would be their only copy). Returns the position
        checkpointed and the number of entries dropped."""
        self.sync()
        at = self.checkpoint()
        try:
            ck = self.store.checkpoint(self.name)
            if ck is None:
                raise RegistryFileError("no checkpoint")
            saved = _core.decode_checkpoint(ck[1])
            if saved.registry_id != self.meta["registry_id"]:
                raise RegistryFileError("a checkpoint of another registry")
        except RegistryFileError as e:
            log.warning(
                "shared registry %r: not compacted: the checkpoint is unusable: %s", self.name, e
            )
            return at, 0
        return at, self.store.compact(self.name, min(at, ck[0]))

    def _try_checkpoint(self) -> int | None:
        """The checkpoint holds the journal's access counts (the core writes the
        published ones); this replica's queued entries are appended first, so
        that none is published after a checkpoint that holds it. None: put off
        (a forked child whose parent has not published what it inherited)."""
        reg = self._reg()
        if reg is None:
            return self.position
        with self._lock:
            if self._counted:
                return None
            self.flush()
            data = reg._core.checkpoint_bytes(reg._settings())
            at, head = self.position, self.head
        # The store refuses it when its entry ``at`` is not this replica's (a
        # fork this replica has not noticed yet): no checkpoint of a fork.
        put = self.store.put_checkpoint
        if "chain" in getattr(put, "__code__", _NO_CODE).co_varnames:
            put(self.name, at, data, chain=head)
        else:  # a store object of an older shape
            put(self.name, at, data)
        return at

    # ---- asyncio: the same operations, without blocking the event loop --------------

    async def _aappend(self, entry: bytes) -> tuple[int, Entries]:
        return await self.astore.aappend(self.name, entry, self.position)

    async def _aread(self) -> Entries:
        return await self.astore.aread(self.name, self.position)

    async def _aapply(self, entries: Entries) -> None:
        """Apply ``entries`` from a coroutine without ever waiting on the loop: a
        short tail, when the replica's lock is free at this instant, is applied
        here (microseconds); a long one, or one that would wait for a thread
        holding the lock (the follower applying, a sync write's round trip), is
        applied on the loop's default executor."""
        if (
            len(entries) <= _APPLY_ON_LOOP
            and not self._needs_store(entries)
            and self._lock.acquire(blocking=False)
        ):
            try:
                self._apply(entries)
            finally:
                self._lock.release()
            return
        await asyncio.get_running_loop().run_in_executor(None, self._apply_locked, entries)

    def _needs_store(self, entries: Entries) -> bool:
        """Whether applying ``entries`` would read the store (a checkpoint to
        reload, a rebuild): never on the loop."""
        after = getattr(entries, "after", None)
        if after is not None and after <= self.position:
            chains = getattr(entries, "chains", None) or {}
            theirs = entries.anchor if after == self.position else chains.get(self.position)
            if theirs is not None and self.head is not None and theirs != self.head:
                return True
            if after == self.position and getattr(entries, "gone", False) and self.head:
                return True
        return any(isinstance(d, Damaged) and d.missing for _, d in entries)

    def _rebuild_locked(self, why: str) -> None:
        with self._lock:
            self._rebuild(why)

    def _apply_locked(self, entries: Entries) -> None:
        with self._lock:
            self._apply(entries)

    async def asubmit(self, entry: bytes, writes_text: bool) -> Any:
        """:meth:`submit` for coroutines. The append and apply run in a task of
        their own that a cancelled caller does not stop: the write either never
        started or lands everywhere (this replica included) before that task
        ends; the caller that was cancelled just does not get the outcome."""
        if self._closed:
            raise RampartError(f"shared registry {self.name!r} is closed (reopen it to write)")
        task = asyncio.ensure_future(self._asubmit(entry, writes_text))
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return await asyncio.shield(task)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a cancelled caller's error is not an orphan

    async def _asubmit(self, entry: bytes, writes_text: bool) -> Any:
        # _olock guards a few dict operations that threads do too: taken without
        # blocking, so the loop never waits for a thread that holds it.
        await _aacquire(self._olock)
        try:
            floor = self.position  # our entry lands after it: keep outcomes past it
            self._floors[floor] += 1
        finally:
            self._olock.release()
        try:
            seq, tail = await self._aappend(entry)
            after = getattr(tail, "after", None)
            if after is not None and seq <= after:
                # Our entry landed at or below where we had applied: the store's
                # history went back (a failover without wait). Rebuild off the loop.
                why = f"an append landed at {seq}, at or below entry {after} applied here"
                await asyncio.get_running_loop().run_in_executor(None, self._rebuild_locked, why)
            else:
                await self._aapply(tail)
            for _ in range(16):
                if self.position >= seq:
                    break
                # A rebuild (a fork) left this write's entry unapplied: read on.
                before = (self.position, self.rebuilds)
                await self._aapply(await self._aread())
                if (self.position, self.rebuilds) == before:
                    break
            if self.position < seq:
                raise StoreUnavailableError(
                    f"shared registry {self.name!r}: entry {seq} was appended, then lost by "
                    "the store (its history went back past it); it is in no replica"
                )
            await _aacquire(self._olock)
            try:
                result, error = self._outcomes.pop(seq, (None, None))
            finally:
                self._olock.release()
        finally:
            # (a cancelled write's bookkeeping: its task is shielded, so this runs)
            await _aacquire(self._olock)
            try:
                self._floors[floor] -= 1
                if not self._floors[floor]:
                    del self._floors[floor]
                low = min(self._floors) if self._floors else None
                for k in list(self._outcomes):
                    if low is not None and k > low:
                        break
                    del self._outcomes[k]
            finally:
                self._olock.release()
        return self._settle(seq, writes_text, result, error)

    async def _ainflight(self) -> None:
        """Wait for this replica's writes in flight on this loop (their callers
        may have been cancelled; the writes go on)."""
        loop = asyncio.get_running_loop()
        mine = [t for t in self._tasks if t.get_loop() is loop]
        if mine:
            await asyncio.gather(*mine, return_exceptions=True)

    async def aflush(self) -> None:
        """:meth:`flush` for coroutines (``sync_async``, ``aclose``; not a write
        path): the sync flush, which holds the replica's lock from queueing to
        appending so no entry goes twice, on the loop's default executor."""
        await asyncio.get_running_loop().run_in_executor(None, self.flush)

    async def sync_async(self, timeout: float = 10.0) -> None:
        """:meth:`sync` for coroutines."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        await self._ainflight()
        await self.aflush()
        target = await self.astore.alast_seq(self.name)
        while self.position < target:
            if loop.time() > deadline:
                raise TimeoutError(
                    f"shared registry {self.name!r}: at entry {self.position} of {target} "
                    f"after {timeout} s"
                )
            entries = await self.astore.aread(self.name, self.position)
            if entries:
                await self._aapply(entries)

    async def aclose(self) -> None:
        """:meth:`close` for coroutines: flush and stop the follower on the
        loop's default executor, then close this loop's async client."""
        if self._closed:
            return
        try:
            await self.aflush()
        except StoreUnavailableError as e:
            log.warning("shared registry %r: closing without a final flush: %s", self.name, e)
        await self._ainflight()  # writes whose callers were cancelled finish first
        await asyncio.get_running_loop().run_in_executor(None, self.close)
        await self.astore.aclose()

    # ---- the follower -----------------------------------------------------------------

    def start(self) -> None:
        """Start the follower thread (rampart.shared.follower.follow)."""
        self._thread = threading.Thread(
            target=follower.follow, args=(self,), name=f"rampart-follower-{self.name}", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop writing and following. A write racing close() either completes
        or raises RampartError ("closed"): close() waits for the one in flight
        (the lock), and a later one finds the flag under that lock."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            try:
                self.flush()
            except RampartError as e:
                log.warning("shared registry %r: closing without a final flush: %s", self.name, e)
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5)
        _LIVE.discard(self)

    def _before_fork(self) -> None:
        # Held across fork() (released in both processes after it): no write or
        # flush is half done, and the unpublished access counts are queued, so
        # parent and child agree on what the parent still has to publish.
        self._lock.acquire()
        try:
            if not self._closed:
                self._queue_access()
        except Exception as e:
            log.warning("shared registry %r: before fork: %s", self.name, e)

    def _after_fork(self) -> None:
        # The parent's threads do not exist in the child; its locks may be held
        # by them. Fresh locks and a fresh follower (store connections notice
        # the new pid themselves). The parent publishes what it had queued: the
        # child starts with nothing to publish, and skips the parent's queued
        # access entries when they arrive (their counts are in its copy already).
        self._lock = threading.RLock()
        self._outbox_lock = threading.Lock()
        self._olock = threading.Lock()
        self._floors.clear()  # the parent's async writes are the parent's
        self._outcomes.clear()
        self._tasks = set()
        self._stop = threading.Event()
        self._counted = self._counted + [e for kind, e in self._outbox if kind == "access"]
        self._outbox = []
        self._in_doubt = None  # the parent's (the child has nothing to publish)
        self._checkpoint_due = None
        self._wrote = False
        self.origin = os.urandom(16)
        reg = self._reg()
        if reg is not None and not self._closed:
            # The child writes under its own origin (its entries are its own).
            reg._core.attach_journal(self.origin)
        if not self._closed:
            self.start()


_FORKING: list[Replica] = []


def _before_fork() -> None:
    _FORKING[:] = list(_LIVE)
    for rep in _FORKING:
        rep._before_fork()


def _after_fork_in_parent() -> None:
    for rep in _FORKING:
        rep._lock.release()
    _FORKING.clear()


def _after_fork_in_child() -> None:
    for rep in _FORKING:
        rep._after_fork()
    _FORKING.clear()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)


def _install_checkpoint(core: _core.Registry, registry_id: str, data: bytes, name: str) -> None:
    """Decode and check a checkpoint, then make it ``core``'s whole state, in place."""
    try:
        saved = _core.decode_checkpoint(data)
    except RegistryFileError as e:
        raise RegistryFileError(f"shared registry {name!r}: bad checkpoint: {e}") from None
    if saved.registry_id != registry_id:
        raise RegistryFileError(f"shared registry {name!r}: checkpoint of another registry")
    try:
        check_block_metadata(saved.block_metadata())
    except _files.FileProblem as e:
        raise RegistryFileError(f"shared registry {name!r}: bad checkpoint: {e}") from None
    core.reset_to(saved)


def _replay_instead(name: str, why: RegistryFileError) -> None:
    # A damaged checkpoint is passed over, the same way by every replica: the
    # journal alone gives the same state unless compaction dropped entries it
    # covered, which no replica can then recover (docs/shared.md).
    log.warning("shared registry %r: replaying the journal, not a checkpoint: %s", name, why)
