"""The quarantine: rules held back because the run that wrote them had read
untrusted tool output (:class:`QuarantinedLesson`, :class:`Quarantine`), and the
checks a saved quarantine file passes before its entries are trusted again.

Nothing here compiles a rule: :mod:`rampart.agent.lessons` does, when an operator
approves one or a clean run confirms it."""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

import rampart._args as _args
from rampart._files import FileProblem, atomic_write, read_regular_file
from rampart.agent import limits
from rampart.errors import InvalidArgumentError

__all__ = ["Quarantine", "QuarantinedLesson"]


@dataclass
class QuarantinedLesson:
    """A rule held back because the run that wrote it had read untrusted tool output.

    ``status``: ``pending`` (never compiled), ``approved`` (by an operator),
    ``confirmed`` (a later clean run wrote a near-duplicate; ``decided_by`` is that
    run and ``block_id`` its compiled rule) or ``rejected``. ``sightings``: later
    untrusted runs that wrote a near-duplicate (they never confirm: the same page
    read again would plant the same rule again)."""

    id: str
    rule: str
    run_id: str
    task: str
    origin: str  # "diagnosis" or "remember"
    untrusted_tools: list[str]  # the tools whose output the run had read
    diagnosis: str  # the diagnosis reply (or the remember call) as the model wrote it
    created: str  # UTC, ISO 8601
    status: str = "pending"
    decided_by: str | None = None  # "operator" or the confirming run's trajectory id
    block_id: str | None = None  # the compiled rule, once approved or confirmed
    sightings: list[str] = field(default_factory=list)


_STATUSES = ("pending", "approved", "confirmed", "rejected")
# A UTF-16 surrogate alone (JSON's "\ud800" escape decodes to one): not text.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class Quarantine:
    """The lessons an agent holds back, in insertion order, bounded to ``limit``
    entries (past it the oldest decided entry goes first, then the oldest pending
    one: a page read in a loop cannot grow it without bound). Share one between
    agents of one registry; :meth:`save` / :meth:`load` keep it across processes
    (JSON, written atomically)."""

    def __init__(self, limit: int = 256) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidArgumentError(f"Quarantine limit must be an int >= 1, got {limit!r}")
        self.limit = limit
        self._entries: dict[str, QuarantinedLesson] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self, status: str | None = None) -> list[QuarantinedLesson]:
        """Every entry (or those with ``status``), oldest first."""
        if status is not None and status not in _STATUSES:
            raise InvalidArgumentError(f"status must be one of {_STATUSES}, got {status!r}")
        with self._lock:
            return [e for e in self._entries.values() if status is None or e.status == status]

    def get(self, entry_id: str) -> QuarantinedLesson:
        """The entry with ``entry_id``; InvalidArgumentError if there is none."""
        with self._lock:
            entry = self._entries.get(entry_id) if isinstance(entry_id, str) else None
        if entry is None:
            raise InvalidArgumentError(f"no quarantined lesson with id {entry_id!r}")
        return entry

    def add(self, entry: QuarantinedLesson) -> None:
        """Keep ``entry``; past ``limit`` entries the oldest decided one (else the
        oldest) makes room. Its text is the model's (a diagnosis, a ``remember``
        call's arguments): a lone surrogate in it becomes U+FFFD here, as the HTTP
        client does with replies, so the entry can always be saved."""
        for name in (*_TEXT_FIELDS, "decided_by", "block_id"):
            value = getattr(entry, name)
            if isinstance(value, str) and not value.isascii():
                setattr(entry, name, _LONE_SURROGATE.sub("\ufffd", value))
        for name in ("untrusted_tools", "sightings"):
            setattr(entry, name, [_LONE_SURROGATE.sub("\ufffd", v) for v in getattr(entry, name)])
        with self._lock:
            while len(self._entries) >= self.limit:
                decided = [k for k, e in self._entries.items() if e.status != "pending"]
                del self._entries[decided[0] if decided else next(iter(self._entries))]
            self._entries[entry.id] = entry

    def discard(self, entry_id: str) -> None:
        """Drop the entry with ``entry_id`` (nothing if there is none)."""
        with self._lock:
            self._entries.pop(entry_id, None)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write every entry as JSON (a temporary file renamed into place)."""
        target = _args.file_path(path)
        rows = [asdict(e) for e in self.entries()]
        for i, row in enumerate(rows):  # checked before the file is touched
            problem = _entry_problem(row)
            if problem:
                raise InvalidArgumentError(f"quarantine entry {i} cannot be saved ({problem})")
        data = json.dumps({"version": 1, "entries": rows}, ensure_ascii=False, indent=1)
        atomic_write(target, data.encode("utf-8"))

    @classmethod
    def load(cls, path: str | os.PathLike[str], limit: int = 256) -> Quarantine:
        """A quarantine from :meth:`save`'s file; a malformed file, one over 64 MiB
        or one that is not a regular file (a FIFO, a device) is an
        :class:`InvalidArgumentError` naming it and the entry. Rules are rendered
        when approved (:meth:`Agent.approve`), not here."""
        target = _args.file_path(path)
        try:
            raw = read_regular_file(target, limits.MAX_QUARANTINE_BYTES)
            data = json.loads(raw.decode("utf-8"))
        except (FileProblem, ValueError, RecursionError) as exc:
            raise InvalidArgumentError(f"{path}: cannot read a quarantine ({exc})") from None
        q = cls(limit)
        rows = data.get("entries") if isinstance(data, dict) else None
        if not isinstance(rows, list):
            raise InvalidArgumentError(f"{path}: not a quarantine file (no 'entries' list)")
        for i, row in enumerate(rows):
            problem = _entry_problem(row)
            if problem:
                raise InvalidArgumentError(f"{path}: entry {i} is malformed ({problem})")
            q.add(QuarantinedLesson(**row))
        return q


_TEXT_FIELDS = ("id", "rule", "run_id", "task", "origin", "diagnosis", "created", "status")


def _entry_problem(row: Any) -> str | None:
    """Why ``row`` is not a saved :class:`QuarantinedLesson`, or None."""
    if not isinstance(row, dict):
        return f"a {type(row).__name__}, not an object"
    known = QuarantinedLesson.__dataclass_fields__
    extra = sorted(set(row) - set(known))
    missing = [f for f in (*_TEXT_FIELDS[:-1], "untrusted_tools") if f not in row]
    if extra or missing:
        return f"unknown fields {extra}" if extra else f"missing fields {missing}"
    for name in _TEXT_FIELDS:
        if name in row and not isinstance(row[name], str):
            return f"{name} is not a string"
        if name in row and _LONE_SURROGATE.search(row[name]):
            return f"{name} holds a lone surrogate, which is not text"
    for name in ("decided_by", "block_id"):
        if row.get(name) is not None and not isinstance(row[name], str):
            return f"{name} is not a string or null"
        if row.get(name) is not None and _LONE_SURROGATE.search(row[name]):
            return f"{name} holds a lone surrogate, which is not text"
    for name in ("untrusted_tools", "sightings"):
        value = row.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return f"{name} is not a list of strings"
        if any(_LONE_SURROGATE.search(v) for v in value):
            return f"{name} holds a lone surrogate, which is not text"
    if row.get("status", "pending") not in _STATUSES:
        return f"status {row['status']!r} is not one of {_STATUSES}"
    if len(row.get("sightings", [])) > limits.MAX_SIGHTINGS:
        return f"more than {limits.MAX_SIGHTINGS} sightings"
    return None
