"""Embedding off the question's path: one daemon thread per process embeds the
passages of tool results as they arrive, while the agent waits for its model,
so the compile that scores a question finds them embedded.

:func:`schedule` hands an index and its embedder to the thread; the thread
embeds the index's waiting passages in small batches (a query that needs a row
meanwhile takes the rest itself, or waits for the batch in flight: never both).
The thread is made on first use in each process — a forked child starts its
own, since threads do not survive ``fork()`` — and ``RAMPART_BACKGROUND_EMBED=0``
turns it off: then the next compile embeds what arrived (amortised over the
steps instead of hidden behind the model call).
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from typing import Any

__all__ = ["BATCH", "enabled", "schedule", "wait_idle"]

#: Passages embedded per batch: small, so a query waits little for one in flight.
BATCH = 16

_lock = threading.Lock()
_state: dict[str, Any] = {"pid": None, "queue": None, "thread": None, "busy": 0}
_idle = threading.Condition(_lock)


def enabled() -> bool:
    """Whether passages are embedded in the background
    (``RAMPART_BACKGROUND_EMBED``, on unless ``0``)."""
    return os.environ.get("RAMPART_BACKGROUND_EMBED", "1").strip() != "0"


def schedule(index: Any, embedder: Any) -> bool:
    """Have the background thread embed ``index``'s waiting passages with
    ``embedder``; False (nothing scheduled) when turned off."""
    if not enabled() or not index.pending():
        return False
    with _lock:
        if _state["pid"] != os.getpid() or _state["thread"] is None:
            q: queue.SimpleQueue[Any] = queue.SimpleQueue()
            t = threading.Thread(target=_run, args=(q,), name="rampart-embed", daemon=True)
            _state.update(pid=os.getpid(), queue=q, thread=t, busy=0)
            t.start()
        _state["busy"] += 1
        _state["queue"].put((weakref.ref(index), embedder))
    return True


def wait_idle(timeout: float | None = None) -> bool:
    """Block until every scheduled index is embedded (benchmarks and tests use
    it to measure a question compiled after the model's call time); False on
    timeout."""
    with _idle:
        if _state["pid"] != os.getpid():
            return True
        return bool(_idle.wait_for(lambda: _state["busy"] == 0, timeout))


def _run(q: queue.SimpleQueue[Any]) -> None:
    while True:
        ref, embedder = q.get()
        try:
            index = ref()
            while index is not None and index.pending():
                index.embed_pending(embedder, BATCH)
        except Exception:
            pass  # a batch that failed is embedded by the query that needs it
        finally:
            del index
            with _idle:
                _state["busy"] -= 1
                _idle.notify_all()
