"""The items of a conversation and the per-item report of a compile (docs/specification.md §9).

An item is the unit the context policy acts on: one user or assistant text, one
tool call, one tool result, one summary. A provider message may hold several
(an assistant message with text and two tool calls is three items); ``group``
records which message they came from, so a body rebuilt from the items has the
same messages in the same order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "ARGUMENTS_CHARS",
    "DEFAULT_MAX_ITEMS",
    "DEFAULT_MAX_ITEM_BYTES",
    "KINDS",
    "ROLES",
    "ConversationItem",
    "MessageReport",
    "RewriteNote",
    "cleared_stub",
    "one_line",
]

ROLES = ("user", "assistant", "tool", "system", "summary")
KINDS = ("text", "tool_call", "tool_result", "summary", "recall")

#: Default bounds of one conversation (hostile input: a run that never trims).
#: 100 000 items hold any real session; past it an append is refused, typed.
DEFAULT_MAX_ITEMS = 1_000_000
#: The longest content one item may hold (UTF-8 bytes). A larger tool result
#: is refused at ``append`` (InvalidArgumentError naming the item): no provider
#: takes a 64 MiB message, and counting it would hold the process for seconds.
DEFAULT_MAX_ITEM_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ConversationItem:
    """One entry of a conversation, as appended (never changed afterwards: a
    transformation is recorded beside it in the log, not written into it).

    ``tokens``: its cost in a request (content plus the per-message framing),
    counted once at append under the conversation's tokeniser. ``call_id``
    links a tool call to its result; ``covers``: the ids a summary stands for.
    """

    id: str
    role: str
    kind: str
    content: str
    tokens: int
    time: float
    tool_name: str | None = None
    call_id: str | None = None
    trajectory_id: str | None = None
    pinned: bool = False
    covers: tuple[str, ...] = ()
    group: int = 0
    is_error: bool = False
    #: Set on provider-opaque items carried as they came (an OpenAI compaction or
    #: reasoning item, an Anthropic thinking block): the format they belong to.
    #: They are sent to that provider only; ``content`` is their JSON.
    native: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (the save and journal form)."""
        d: dict[str, Any] = {
            "id": self.id,
            "role": self.role,
            "kind": self.kind,
            "content": self.content,
            "tokens": self.tokens,
            "time": self.time,
            "group": self.group,
        }
        for k in ("tool_name", "call_id", "trajectory_id"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        if self.pinned:
            d["pinned"] = True
        if self.covers:
            d["covers"] = list(self.covers)
        if self.is_error:
            d["is_error"] = True
        if self.native is not None:
            d["native"] = self.native
        return d


@dataclass(frozen=True, slots=True)
class MessageReport:
    """What one compile did with one conversation item.

    ``action``: ``"kept"``, ``"cleared"`` (a tool result or call input replaced by
    a stub), ``"excerpted"`` (a long result cut to its relevant lines),
    ``"compacted"`` (covered by a summary item), ``"dropped"`` or ``"recalled"``
    (a recall item: an earlier cleared result appended at the tail).
    ``tokens``: what the item costs in this request (the stub's for a cleared
    one, 0 when compacted or dropped); ``original_tokens``: what it cost as
    appended. ``reason``: why (None for a plain kept item). ``score`` and
    ``rank``: a tool result's relevance to the current step and its rank among
    the results (1 = most relevant; None when not scored: relevance off, or not
    a tool result).

    The provider's names for it, so a reader can find their own call: ``call_id``
    (the id the request carries), ``tool_name`` and ``arguments`` (the call's
    arguments as one line of at most :data:`ARGUMENTS_CHARS` characters, cut with
    "…") on a tool call, its result and a recall of that result; None on text.
    """

    id: str
    action: str
    reason: str | None
    tokens: int
    original_tokens: int
    index: int = 0
    role: str = ""
    kind: str = ""
    score: float | None = None
    rank: int | None = None
    call_id: str | None = None
    tool_name: str | None = None
    arguments: str | None = None


@dataclass(frozen=True, slots=True)
class RewriteNote:
    """Where a compile rewrote the body's prefix (the provider's cache is lost
    from there on), and why: ``"window"`` (the request would not fit) or
    ``"price"`` (the cost model says the saving over the next calls pays for
    the rewrite), or ``"cold"`` (the cache had expired anyway)."""

    at_item: str
    at_index: int
    reason: str
    action: str
    tokens_removed: int
    prefix_tokens: int
    detail: str = field(default="")


def cleared_stub(tool_name: str | None, call_id: str | None, removed: int) -> str:
    """The text a cleared tool result becomes: it names the tool, the call and
    what was removed and the ``recall`` tool that brings it back (answered from
    the conversation's log), so the model knows the result existed."""
    return (
        f"[tool result cleared to save context: tool {tool_name or 'unknown'}, "
        f"call {call_id or 'unknown'}, {removed} tokens removed; "
        f'recall(call_id="{call_id or ""}") brings it back]'
    )


class ConversationView(Protocol):
    """What the log's codec and the shared journal use of a conversation
    (``Conversation`` implements it): they never import the class back."""

    max_item_bytes: int
    _index: dict[str, int]
    _items: list[ConversationItem]
    _transforms: list[Any]
    _shared: Any

    @property
    def tokeniser(self) -> str: ...
    def _check_append(self, groups: list[list[Any]]) -> None: ...
    def _apply(self, entry: dict[str, Any]) -> Any: ...


#: The longest preview of a call's arguments in a report row (characters).
ARGUMENTS_CHARS = 120

# Any run of whitespace (newlines, tabs, U+2028 and U+2029 included) becomes one
# space; any other character Python calls unprintable (control and format
# characters, bidi overrides, lone surrogates, which no UTF-8 writer accepts,
# unassigned code points) becomes U+FFFD, so a preview prints, encodes and greps.
_SPACES = re.compile(r"\s+")


def one_line(text: str, limit: int = ARGUMENTS_CHARS) -> str:
    """``text`` as one printable line of at most ``limit`` characters, cut with
    "…" when longer. Bounded work: only the first few times ``limit`` characters
    are read, whatever the length (a call's arguments may be megabytes)."""
    limit = max(limit, 1)
    head = text[: 4 * limit + 1]
    line = _SPACES.sub(" ", head).strip()
    if not line.isprintable():
        line = "".join(c if c.isprintable() else "\ufffd" for c in line)
    if len(line) > limit or len(head) < len(text):
        line = line[: limit - 1].rstrip() + "…"
    return line
