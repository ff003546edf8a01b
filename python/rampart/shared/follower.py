"""The follower: one daemon thread per replica that applies other processes'
entries as they arrive, publishes access counts, embeds what this process wrote
and writes due checkpoints (docs/specification.md §7; docs/shared.md)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["FLUSH_INTERVAL", "Followed", "follow"]

log = logging.getLogger("rampart.shared")

#: How often (seconds) the follower publishes this replica's access counts.
FLUSH_INTERVAL = 0.5
#: Longest a follower waits in one store call before it checks for shutdown
#: (Redis's XREAD BLOCK cannot be interrupted: close() waits at most this long).
_WAIT = 0.25
_BACKOFF_MAX = 2.0
#: How often an idle follower checks that the store's history is still its own.
_CHECK_EVERY = 1.0


class Followed(Protocol):
    """What the follower uses of a replica (:class:`rampart.shared.replica.Replica`)."""

    name: str
    position: int
    store: Any
    _reg: Callable[[], Any]
    _stop: threading.Event
    _lock: threading.RLock
    _wrote: bool
    _checkpoint_due: int | None
    _outbox: list[Any]

    def _apply(self, entries: Any) -> Any: ...
    def _try_checkpoint(self) -> int | None: ...
    def flush(self) -> None:
        """Publish queued entries and access counts."""
        ...


def follow(rep: Followed) -> None:
    """The follower thread's body: until the replica stops or its registry is gone."""
    # Bounded in CPU whatever the store holds: a store that is down, damaged or
    # hands back nothing new puts the follower to sleep (50 ms doubling to 2 s);
    # it never stops for good (the store may be repaired).
    backoff = 0.05
    last_flush = last_check = time.monotonic()
    said: str | None = None
    while not rep._stop.is_set():
        reg = rep._reg()
        if reg is None:
            return
        del reg
        try:
            before, t0 = rep.position, time.monotonic()
            entries = rep.store.wait(rep.name, rep.position, _WAIT, rep._stop)
            if not entries and time.monotonic() - last_check >= _CHECK_EVERY:
                # Nothing new: still make sure the store's history is this
                # replica's (a failover without wait can take entries back).
                entries = rep.store.read(rep.name, rep.position)
                last_check = time.monotonic()
            if entries or getattr(entries, "after", None) is not None:
                with rep._lock:
                    rep._apply(entries)
            stalled = rep.position == before and (
                bool(entries) or time.monotonic() - t0 < _WAIT / 100
            )
            if rep._wrote:
                rep._wrote = False
                _embed_written(rep)
            if rep._checkpoint_due is not None and rep._try_checkpoint() is not None:
                rep._checkpoint_due = None
            if rep._outbox or time.monotonic() - last_flush >= FLUSH_INTERVAL:
                rep.flush()
                last_flush = time.monotonic()
            if stalled:  # entries that moved nothing, or a wait that did not wait
                rep._stop.wait(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX)
            else:
                backoff, said = 0.05, None
        except Exception as e:
            msg = f"{type(e).__name__}: {e}"
            if msg != said:  # one warning per distinct failure, not one per retry
                said = msg
                log.warning("shared registry %r: follower retrying: %s", rep.name, msg)
            rep._stop.wait(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX)
    rep.store.close()


def _embed_written(rep: Followed) -> None:
    reg = rep._reg()
    if reg is not None:
        reg._embed_written()
