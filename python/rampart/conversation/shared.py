"""A conversation kept in a shared store (docs/specification.md §7, §9): its log is a journal of
its own name in the same store registries use, so another worker that opens
(store, name) continues it.

The store needs nothing new: a conversation is a journal whose metadata record
says ``"kind": "conversation"`` (a registry opened under that name refuses it,
its metadata has no registry settings), and whose entries are the log's JSON
entries. An append goes to the store first; the reply carries every entry after
this replica's position up to and including it, applied in journal order, so
every replica applies the same entries in the same order and validates them
the same way (an entry another worker's entry made invalid fails everywhere).
No checkpoint and no follower thread: a conversation is continued by one
worker at a time, which catches up on its next change or on ``sync()``.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import rampart.conversation.codec as codec
from rampart.errors import InvalidArgumentError, RegistryFileError, UnsupportedFormatError
from rampart.stores import Damaged, check_name, opened_for, redacted

if TYPE_CHECKING:
    from rampart.conversation.items import ConversationView

__all__ = ["Journal", "open_journal"]

log = logging.getLogger("rampart.shared")

KIND = "conversation"


class Journal:
    """One process's replica of a conversation's journal."""

    def __init__(self, store: Any, name: str) -> None:
        self.store = store
        self.name = name
        self.position = 0

    def _apply_entries(self, conv: ConversationView, entries: Any, mine: int | None = None) -> Any:
        """Apply entries in order; returns the error of entry ``mine`` (None: ok)."""
        err = None
        for seq, raw in entries:
            if seq <= self.position:
                continue
            self.position = seq
            if isinstance(raw, Damaged):
                log.warning(
                    "conversation %r: journal entry %d skipped: %s", self.name, seq, raw.reason
                )
                continue
            try:
                e = codec.decode_entry(raw)
                codec.check_entry(e, conv)
                if e["op"] == "append":
                    conv._check_append([[codec.piece_from_dict(p) for p in g] for g in e["groups"]])
                conv._apply(e)
            except (InvalidArgumentError, UnsupportedFormatError) as exc:
                if seq == mine:
                    err = exc
                else:
                    log.warning(
                        "conversation %r: journal entry %d skipped: %s", self.name, seq, exc
                    )
        return err

    def submit(self, conv: ConversationView, entry: dict[str, Any]) -> None:
        """Append ``entry`` to the journal, apply everything up to it; raise its error."""
        seq, entries = self.store.append(self.name, codec.encode_entry(entry), self.position)
        err = self._apply_entries(conv, entries, seq)
        if err is not None:
            raise err

    def catch_up(self, conv: ConversationView) -> int:
        """Apply every entry other processes appended; returns how many were read."""
        n = 0
        while True:
            entries = self.store.read(self.name, self.position)
            if not entries:
                return n
            before = self.position
            self._apply_entries(conv, entries)
            n += len(entries)
            if self.position == before:
                return n

    def close(self) -> None:
        """Close the store."""
        close = getattr(self.store, "close", None)
        if callable(close):
            close()


def open_journal(conv: ConversationView, store: Any, name: str, create: bool) -> None:
    """Attach ``conv`` to the journal ``name`` in ``store`` (created unless
    ``create=False``) and apply what it holds."""
    check_name(name)
    with opened_for(store, create=create) as st:
        raw = st.meta(name)
        meta = {"format": codec.VERSION, "kind": KIND, "tokeniser": conv.tokeniser}
        where = redacted(st.url)  # a URL's credentials never reach a message
        if raw is None:
            if not create:
                raise InvalidArgumentError(f"store {where} holds no conversation {name!r}")
            if not st.create(name, json.dumps(meta).encode(), []):
                raw = st.meta(name)
        if raw is not None:
            try:
                got = json.loads(raw)
            except ValueError:
                got = None
            if not isinstance(got, dict) or got.get("kind") != KIND:
                raise RegistryFileError(
                    f"store {where}: {name!r} is not a conversation (a registry of that name?)"
                )
            if got.get("tokeniser") != conv.tokeniser:
                raise InvalidArgumentError(
                    f"conversation {name!r} in {where} counts with {got.get('tokeniser')!r}, "
                    f"this one with {conv.tokeniser!r}: open it with tokeniser="
                    f"{got.get('tokeniser')!r}"
                )
        j = Journal(st, name)
        conv._shared = j
        j.catch_up(conv)
