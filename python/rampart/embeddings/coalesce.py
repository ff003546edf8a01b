"""Coalescing concurrent calls into batches, and reading how busy the machine is.

A server gates many sessions at once, so many threads call ``encode`` at the same
moment. Run one by one, each call streams the model's 42 MB of weights for a
dozen tokens; run together, one pass serves them all. :class:`Coalescer` does this
without a timer: the first caller runs at once (an idle server pays nothing), and
every call that arrives while a run is in progress joins the next batch.

Coroutines join the same rounds (:meth:`Coalescer.asubmit`): a coroutine never
runs a round on the event loop's thread; a round that has no thread caller to
lead it goes to one of the coalescer's own worker threads (at most one per
concurrent round), and each coroutine's future is resolved from there.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["Coalescer", "free_cores", "usable_cores"]

T = TypeVar("T")
R = TypeVar("R")


class _Request(Generic[T, R]):
    __slots__ = ("batch", "done", "error", "future", "item", "result")

    def __init__(self, item: T, future: asyncio.Future[None] | None = None) -> None:
        self.item = item
        self.result: R | None = None
        self.error: BaseException | None = None
        # Set (under the lock) when this caller is to lead a round: the round's
        # requests, its own first.
        self.batch: list[_Request[T, R]] | None = None
        self.done = threading.Event()
        # A coroutine's request: resolved on its loop when its round is over; such
        # a request never leads (its loop must not run the model).
        self.future = future

    def finish(self) -> None:
        """Tell the caller its result is ready (from the thread that ran the round)."""
        fut = self.future
        if fut is None:
            self.done.set()
            return
        try:
            fut.get_loop().call_soon_threadsafe(_resolve, fut)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():  # a cancelled caller's future stays cancelled
        fut.set_result(None)


class Coalescer(Generic[T, R]):
    """``submit(item)`` returns ``run([item, ...])[i]`` for its item, running the items
    of concurrent callers together.

    Up to ``leaders`` rounds run at a time, each led by one of the callers: it runs
    its round's items (every item waiting when the round formed, at most ``limit``),
    hands each result to its caller, then forms the next round from the callers
    still waiting and hands it to the oldest of them, so nobody serves others
    indefinitely. An exception from ``run`` is raised in every caller of that round.

    Not fork-safe by itself (a lock held by a thread that the child does not have
    stays held): an owner that may be used after ``fork()`` makes a new one there.
    """

    def __init__(self, run: Callable[[list[T]], Sequence[R]], limit: int, leaders: int = 1) -> None:
        self._run = run
        self._limit = max(1, limit)
        self._max_leaders = max(1, leaders)
        self._lock = threading.Lock()
        self._pending: list[_Request[T, R]] = []
        self._leaders = 0  # rounds running or handed over
        # Rounds of coroutines' requests, for the worker threads to lead.
        self._rounds: queue.SimpleQueue[list[_Request[T, R]]] = queue.SimpleQueue()
        self._workers = 0
        self._idle = 0

    def submit(self, item: T) -> R:
        """``run([..., item, ...])``'s result for ``item``, computed in one round with
        the items of other callers waiting at the same time (blocks until ready)."""
        req: _Request[T, R] = _Request(item)
        try:
            with self._lock:
                if self._leaders < self._max_leaders:
                    # Nobody is waiting (a finishing leader hands waiting callers a
                    # round before it gives up its place): this round is this caller's.
                    self._leaders += 1
                    req.batch = [req]
                else:
                    self._pending.append(req)
            if req.batch is None:
                req.done.wait()
        except BaseException:
            # e.g. KeyboardInterrupt, also one that lands after the request joined
            # the queue and before the wait: leave without stalling the others
            self._withdraw(req)
            raise
        if req.batch is not None:
            self._lead(req.batch)
        return self._outcome(req)

    async def asubmit(self, item: T) -> R:
        """:meth:`submit` for coroutines: the item joins the next round (or starts
        one on a worker thread) and the caller awaits its result without blocking
        its event loop. A cancelled caller leaves the round; its result is dropped."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        req: _Request[T, R] = _Request(item, fut)
        with self._lock:
            if self._leaders < self._max_leaders:
                self._leaders += 1
                self._dispatch([req])
            else:
                self._pending.append(req)
        try:
            await fut
        except asyncio.CancelledError:
            with self._lock:
                if req in self._pending:
                    self._pending.remove(req)
            raise
        return self._outcome(req)

    def _dispatch(self, batch: list[_Request[T, R]]) -> None:
        """Hand a round to a worker thread (caller holds the lock): an idle one,
        or a new one while fewer than ``leaders`` exist."""
        self._rounds.put(batch)
        if self._idle > 0:
            self._idle -= 1  # it takes this round
        else:
            self._workers += 1
            threading.Thread(target=self._work, name="rampart-coalescer", daemon=True).start()

    def _work(self) -> None:
        while True:
            self._lead(self._rounds.get(), first=0)

    def _lead(self, batch: list[_Request[T, R]], first: int = 1) -> None:
        """Run one round and hand each result to its caller (``first``: 0 on a
        worker thread, 1 when ``batch[0]`` is the calling leader, which needs no
        signal)."""
        try:
            results = self._run([r.item for r in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"a batch of {len(batch)} gave {len(results)} results")
            for r, res in zip(batch, results):
                r.result = res
        except BaseException as exc:
            for r in batch:
                r.error = exc
        finally:
            if first == 0:
                with self._lock:
                    self._idle += 1  # before the hand-over, which may give it the next round
            self._hand_over()
            for r in batch[first:]:
                r.finish()

    def _hand_over(self) -> None:
        """Form the next round for the oldest waiting caller (a worker thread, when
        that caller is a coroutine), or give up the place."""
        with self._lock:
            if self._pending:
                nxt: _Request[T, R] | None = self._pending[0]
                batch = self._pending[: self._limit]
                del self._pending[: self._limit]
                if batch[0].future is not None:
                    self._dispatch(batch)
                    nxt = None
                else:
                    batch[0].batch = batch
            else:
                nxt = None
                self._leaders -= 1
        if nxt is not None:
            nxt.done.set()

    def _withdraw(self, req: _Request[T, R]) -> None:
        with self._lock:
            if req in self._pending:
                self._pending.remove(req)
                return
            batch = req.batch
            if batch is None:
                return  # in another caller's round: its result is simply dropped
            # It was handed a round it can no longer run: give the round back.
            self._pending[:0] = batch[1:]
        self._hand_over()

    @staticmethod
    def _outcome(req: _Request[T, R]) -> R:
        if req.error is not None:
            raise req.error
        return req.result  # type: ignore[return-value]


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


_LOADAVG: int | None = None  # an open descriptor of /proc/loadavg; -1: unavailable


def free_cores() -> int | None:
    """Cores with nothing runnable on them right now, counting the caller's thread as
    free: ``usable_cores()`` minus the other runnable tasks of the whole machine.

    Read from the fourth field of Linux's ``/proc/loadavg`` (``runnable/total``, an
    instantaneous count); the load averages themselves lag by a minute. The file is
    opened once and re-read with ``pread`` (~1 µs; opening it each time costs ~20–50).
    ``None`` where the count is unknown (other systems)."""
    global _LOADAVG
    fd = _LOADAVG
    if fd is None:
        try:
            fd = os.open("/proc/loadavg", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            fd = -1
        _LOADAVG = fd
    if fd < 0:
        return None
    try:
        runnable = int(os.pread(fd, 128, 0).split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return max(0, usable_cores() - max(0, runnable - 1))
