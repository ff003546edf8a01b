"""What every store module shares: the shape of journal entries as stores return them."""

from __future__ import annotations

__all__ = ["Entries"]

#: ``(seq, entry)`` pairs in journal order.
Entries = list[tuple[int, bytes]]
