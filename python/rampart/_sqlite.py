"""SQLite's BUSY answers that its busy handler never sees, retried.

Switching a file to WAL (``PRAGMA journal_mode=WAL``) needs an exclusive lock, and
while another connection holds the writer lock on a file still in rollback mode
SQLite answers BUSY at once instead of waiting out its ``timeout``. Processes that
open a fresh file together (uvicorn ``--workers``, a fork pool) hit it: the shared
store failed to open, the embedding cache turned itself off.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

__all__ = ["retry_busy"]

# SQLite's primary result codes (its C API; named in the sqlite3 module only
# from Python 3.11).
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6


def _is_busy(e: sqlite3.OperationalError) -> bool:
    code = getattr(e, "sqlite_errorcode", None)  # Python >= 3.11
    if isinstance(code, int):
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    return "locked" in str(e) or "busy" in str(e)


def retry_busy(step: Any, deadline: float) -> Any:
    """Run ``step()``, again after a short, growing sleep while SQLite answers
    BUSY, until ``deadline`` (then the last error propagates)."""
    pause = 0.001
    while True:
        try:
            return step()
        except sqlite3.OperationalError as e:
            if not _is_busy(e) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
