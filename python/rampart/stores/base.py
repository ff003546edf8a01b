"""What every store module shares: the shape of journal entries as stores return
them, and the one validation every value read from a store goes through.

A store is shared with clients that are not rampart (anyone who can write to
the SQLite file or the Redis keys), so nothing it returns is trusted: the
helpers below turn whatever the driver handed back into well-formed values, or
into a :class:`Damaged` marker that every replica skips the same way. A store
module (SQLite, Redis, and any other) calls them on its read paths, so the
replica only ever sees ``(int seq, bytes | Damaged)`` pairs, in order, with no
gaps (docs/shared.md, "Garbage in the store", states the rules).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "AHEAD_LIMIT",
    "CHAIN_MAX",
    "SEQ_MAX",
    "Damaged",
    "Entries",
    "checked_chain",
    "checked_checkpoint",
    "checked_seq",
    "journal_entries",
]

#: The largest sequence number: 2**53 - 1, exact in a double (Redis's Lua
#: numbers) and in JSON. An id beyond it is not part of any journal.
SEQ_MAX = 2**53 - 1

#: How far past its counter an append looks for entries a foreign client put
#: there: entries within reach are taken into the journal (the append lands
#: after them), entries farther ahead are ignored (SQLite) or removed (Redis,
#: whose stream ids must grow) — so one stray entry can push the counter forward
#: by at most this much, and never to SEQ_MAX.
AHEAD_LIMIT = 4096

#: The longest chain value a store keeps beside an entry (its hash of the
#: history up to that entry, stores/*.py): anything longer is not one.
CHAIN_MAX = 64


class Damaged:
    """Stands for journal entries ``first..seq`` that hold nothing a replica can
    apply: a value of the wrong type, a foreign client's entry, or nothing at
    all (a hole). Every replica skips it, with one warning, and moves on —
    except ``compacted``: entries compaction dropped (``first..seq``, ``seq``
    the store's low-water mark), which a replica takes from the checkpoint."""

    __slots__ = ("compacted", "first", "missing", "reason")

    def __init__(
        self, reason: str, first: int, *, missing: bool = False, compacted: bool = False
    ) -> None:
        self.reason = reason
        self.first = first
        #: Nothing is stored there (a hole, or entries compaction dropped),
        #: as opposed to something unusable.
        self.missing = missing or compacted
        #: Dropped by compaction (below the low-water mark): not a hole.
        self.compacted = compacted

    def __repr__(self) -> str:
        return (
            f"Damaged({self.reason!r}, first={self.first}, missing={self.missing}, "
            f"compacted={self.compacted})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Damaged) and (
            other.reason,
            other.first,
            other.missing,
            other.compacted,
        ) == (self.reason, self.first, self.missing, self.compacted)

    __hash__ = None  # type: ignore[assignment]


class Entries(list[tuple[int, "bytes | Damaged"]]):
    """``(seq, entry)`` pairs in journal order: seq is after+1, after+2, … with
    no gaps; a :class:`Damaged` entry at ``seq`` covers ``first..seq``. Beside
    them, what the store knows of the history they extend (docs/shared.md,
    "No divergence"), all from the same read:

    - ``after``: the position they follow (None: a store that does not say);
    - ``anchor``: the store's chain value of entry ``after`` (None: unknown —
      no such entry, one without a chain, or compacted);
    - ``chains``: seq -> chain value of the entries that carry one;
    - ``low``: the store's low-water mark (every entry up to it may have been
      dropped by compaction; None: a store that does not keep one);
    - ``gone``: the store holds no entry ``after`` although it lies above the
      mark (entries are only ever dropped below it: the history went back)."""

    __slots__ = ("after", "anchor", "chains", "gone", "low")

    def __init__(self, items: Iterable[tuple[int, bytes | Damaged]] = ()) -> None:
        super().__init__(items)
        self.after: int | None = None
        self.anchor: bytes | None = None
        self.chains: dict[int, bytes] = {}
        self.low: int | None = None
        self.gone = False


def checked_seq(value: object) -> int | None:
    """A sequence number (or counter) read from a store: an int in [0, SEQ_MAX],
    from an int or the ASCII digits Redis returns; anything else (a float, text,
    a negative or huge number, a bool) is None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        n = value
    elif isinstance(value, bytes | bytearray | str):
        s = value.decode("ascii", "replace") if isinstance(value, bytes | bytearray) else value
        # Only plain digits: int() would also take "+5", " 5", "5_0" and "٥".
        if not (0 < len(s) <= 16 and s.isascii() and s.isdigit()):
            return None
        n = int(s)
    else:
        return None
    return n if 0 <= n <= SEQ_MAX else None


def _value(raw: object) -> bytes | str:
    """An entry's payload as bytes, or why it is not one."""
    if isinstance(raw, Damaged):  # the store already knows why
        return raw.reason
    if isinstance(raw, bytes):
        data = raw
    elif isinstance(raw, bytearray | memoryview):
        data = bytes(raw)
    else:
        return f"a {type(raw).__name__} value where a journal entry is bytes"
    if not data:
        return "no entry at this sequence number (a hole a foreign entry left)"
    return data


def checked_chain(value: object) -> bytes | None:
    """A chain value read from a store: non-empty bytes of at most
    ``CHAIN_MAX``; anything else (NULL, text, a number, a foreign blob too long)
    is no chain."""
    if isinstance(value, bytes | bytearray | memoryview) and 0 < len(value) <= CHAIN_MAX:
        return bytes(value)
    return None


def journal_entries(
    rows: Iterable[tuple[object, ...]],
    after: int,
    last: int | None,
    *,
    low: int | None = None,
    anchor: object = None,
    gone: bool = False,
) -> Entries:
    """The journal entries after ``after`` from a store's raw ``(seq, value)``
    or ``(seq, value, chain)`` rows: rows whose seq is not an integer in
    ``(after, last]`` (or in ``(after, SEQ_MAX]`` when ``last`` is None) are not
    part of the journal and are dropped; a value that is not a non-empty bytes
    string becomes :class:`Damaged`; every missing seq between two rows becomes
    one Damaged entry per run of them. ``last`` is how far the store's counter
    lets readers read (None: up to SEQ_MAX).

    ``low`` is the store's low-water mark: rows at or below it are not read
    (compaction dropped that part; what is left there is a filler or a foreign
    row), and when ``after`` lies below it the entries start with one
    ``Damaged(compacted=True)`` at ``low``: the replica reloads the checkpoint.
    ``anchor`` is the store's chain value of entry ``after``; ``gone``: the
    store holds no entry ``after`` (which lies above the mark)."""
    top = SEQ_MAX if last is None else min(last, SEQ_MAX)
    floor = max(after, low or 0)
    kept: dict[int, bytes | str] = {}
    chains: dict[int, bytes] = {}
    for row in rows:
        raw_seq, raw = row[0], row[1]
        if isinstance(raw_seq, bool) or not isinstance(raw_seq, int):
            continue
        if floor < raw_seq <= top and raw_seq not in kept:
            kept[raw_seq] = _value(raw)
            chain = checked_chain(row[2]) if len(row) > 2 else None
            if chain is not None:
                chains[raw_seq] = chain
    out = Entries()
    out.after, out.low, out.chains = after, low, chains
    out.anchor = checked_chain(anchor) if low is None or after >= low else None
    out.gone = bool(gone) and after > (low or 0)
    at = after
    if low is not None and after < low:
        out.append((low, Damaged(_COMPACTED, after + 1, compacted=True)))
        at = low
    for seq in sorted(kept):
        if seq > at + 1:
            out.append((seq - 1, Damaged(_HOLE, at + 1, missing=True)))
        v = kept[seq]
        out.append((seq, Damaged(v, seq) if isinstance(v, str) else v))
        at = seq
    # Numbers past the last row are not skipped: a counter a foreign client set
    # on (or back) must not carry a replica past where the next append lands.
    return out


_COMPACTED = "dropped by compaction (below the low-water mark)"
_HOLE = "no entry at these sequence numbers (a hole)"


def checked_checkpoint(seq: object, data: object) -> tuple[int, bytes] | None:
    """A checkpoint read from a store, or None when either half is malformed."""
    n = checked_seq(seq)
    if n is None or not isinstance(data, bytes | bytearray | memoryview) or not data:
        return None
    return n, bytes(data)
