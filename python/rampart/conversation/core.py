"""``rampart.Conversation``: the items of one session, as an append-only log.

Everything that happens to a conversation is an entry of its log: items
appended, a transformation recorded by a compile (clear, compact, drop), a
transformation undone, a count scale learned from usage. The state — the items
and what a compile shows of them (the *view*) — is a function of the log, so a
saved file, a shared store's journal and this process's memory all replay to
the same view, and the same view renders to the same bytes everywhere.

The view is kept up to date incrementally: an append adds its items to the end
(no transformation can touch an item appended after it), so a compile of a
conversation that only grew costs O(new items); a transformation rebuilds the
view once, in O(items).
"""

from __future__ import annotations

import json
import operator
import os
import threading
import time as _time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import rampart._args as _args
import rampart.conversation.codec as codec
from rampart.conversation.counting import ITEM_OVERHEAD, TOOL_CALL_OVERHEAD, counter_for
from rampart.conversation.items import (
    DEFAULT_MAX_ITEM_BYTES,
    DEFAULT_MAX_ITEMS,
    ConversationItem,
    cleared_stub,
)
from rampart.conversation.shapes import Piece, Shown, parse, render
from rampart.errors import InvalidArgumentError, RampartError, UnsupportedFormatError

__all__ = ["Conversation", "Transformation"]

_TRANSFORMS = ("clear", "compact", "drop", "recall")
#: Kinds a clear may stub (a recall item too, once its question has passed).
_RESULTS = ("tool_result", "recall")
#: The tool whose results are recall output (kept while their question stands).
RECALL_TOOL_NAME = "recall"


@dataclass(frozen=True, slots=True)
class Transformation:
    """One recorded transformation: ``kind`` (``"clear"``, ``"compact"``,
    ``"drop"``, ``"recall"``), the item ids it acts on, and for ``"compact"``
    the summary item's id (for ``"recall"``: the recall item's). ``active``
    turns False when it is undone (``rollback``); the log keeps it either way.
    ``excerpts``: for ``"clear"``, the ids kept as an excerpt and their spans
    ([first line, last line, offset, length] each)."""

    id: str
    kind: str
    ids: tuple[str, ...]
    reason: str
    summary_id: str | None = None
    inputs: bool = False  # clear: the calls' arguments too
    active: bool = True
    # clear: the stub tokens of each id (counted once, when recorded)
    stub_tokens: tuple[int, ...] = ()
    excerpts: tuple[tuple[str, tuple[tuple[int, ...], ...]], ...] = ()
    # the relevance score of each id when it was recorded (clear, recall)
    scores: tuple[tuple[str, float], ...] = ()


@dataclass(slots=True)
class _View:
    """What a compile shows: ``shown`` in order with the prefix sums of their
    tokens, and the bookkeeping the policy's O(1) checks need. Its lists are
    only ever appended to (a rebuild makes a new view), so a compile result
    holds the view and its length instead of a copy."""

    shown: list[Shown] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)  # prefix sums: tokens[k] = sum(shown[:k+1])
    total: int = 0
    version: int = 0
    # indices into shown of tool results still shown in full (unpinned), oldest first
    results: list[int] = field(default_factory=list)
    results_tokens: int = 0
    results_by_tool: dict[str, int] = field(default_factory=dict)
    pinned_tokens: int = 0
    last_user: int = -1  # index into shown of the latest user text (never transformed)

    def cost(self, k: int) -> int:
        return self.tokens[k] - (self.tokens[k - 1] if k else 0)

    def protected(self, k: int) -> bool:
        it = self.shown[k].item
        return k == self.last_user or it.pinned or (k > self.last_user and _recall_output(it))


def _recall_output(it: ConversationItem) -> bool:
    """A recall item: never cleared while the question it answers stands (no
    user text after it). (A ``recall`` tool result is kept by the clear step
    while its question stands unless the window forces it.)"""
    return it.kind == "recall"


class Conversation:
    """The items of one session in order (docs/specification.md §9), append-only.

    ``conversation_id``: a name for it (a UUID4 when None). ``max_items`` and
    ``max_item_bytes`` bound it against hostile input: an append past either is
    refused (InvalidArgumentError naming the item), the conversation unchanged.
    ``tokeniser``: how items are counted (``"o200k_base"``, the default, for
    current OpenAI models; see :mod:`rampart.conversation.counting`).

    Thread-safe: one lock around every change; the view a compile takes is a
    snapshot (a later append does not change a result already returned).

    Example:
        >>> conv = Conversation()
        >>> conv.append({"role": "user", "content": "fix the failing test"})
        ['i0']
        >>> result = reg.compile(conversation=conv, context_window=128_000, reply_tokens=4096)
        >>> body = openai_chat(result, model="gpt-4.1")
    """

    def __init__(
        self,
        conversation_id: str | None = None,
        *,
        max_items: int = DEFAULT_MAX_ITEMS,
        max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
        tokeniser: Any = "o200k_base",
    ) -> None:
        if conversation_id is not None and (
            not isinstance(conversation_id, str) or not conversation_id
        ):
            raise InvalidArgumentError(
                f"conversation_id must be a non-empty string, got {conversation_id!r}"
            )
        if conversation_id is not None:  # saved and journaled: must be text
            _args.text(conversation_id, "conversation_id")
        for name, v in (("max_items", max_items), ("max_item_bytes", max_item_bytes)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgumentError(f"{name} must be an int >= 1, got {v!r}")
        self.conversation_id = conversation_id or uuid.uuid4().hex
        self.max_items = max_items
        self.max_item_bytes = max_item_bytes
        self._counter = counter_for(tokeniser)
        _args.text(self._counter.name, "tokeniser's name")  # saved and journaled
        self._lock = threading.RLock()
        self._log: list[dict[str, Any]] = []
        self._items: list[ConversationItem] = []
        self._index: dict[str, int] = {}
        self._groups = 0
        # call id -> index of its call item; ids of calls that have a result
        self._calls: dict[str, int] = {}
        self._answered: set[str] = set()
        # a reused call id is renamed (id, n): the result that follows is matched
        # to the newest call of that id (docs: "Hostile input")
        self._renamed: dict[str, str] = {}
        # tool name -> its calls not yet known answered, oldest first (Gemini's
        # results without ids are matched to the oldest unanswered call of the name)
        self._by_name: dict[str, deque[str]] = {}
        self._transforms: list[Transformation] = []
        self._scale: dict[str, float] = {}
        # provider -> the fixed tokens a request costs beyond the items (a chat
        # template's preamble), learned with the scale by observe_usage
        self._constant: dict[str, float] = {}
        self._usage_obs: dict[str, deque[tuple[float, float]]] = {}
        self._relevance: Any = None  # rampart.conversation.retention.Relevance, lazily
        # (query, view version, view length) the last recall check found nothing for
        self._recall_checked: Any = None
        self._view = _View()
        # set by the compile step: (provider, predicted tokens, time) of the last compile
        self._last_compile: tuple[str, float, float] | None = None
        self.last_usage: Any = None  # the provider usage observe_usage saw last
        self._fixed_cache: tuple[str, int] | None = None
        self._shared: Any = None  # rampart.conversation.shared.Journal
        self._appended: list[str] = []

    # ---- reading ------------------------------------------------------------------------

    @property
    def items(self) -> tuple[ConversationItem, ...]:
        """Every item appended, in order (summaries too, where they were made)."""
        with self._lock:
            return tuple(self._items)

    @property
    def transformations(self) -> tuple[Transformation, ...]:
        """Every transformation recorded, oldest first (undone ones inactive)."""
        with self._lock:
            return tuple(self._transforms)

    @property
    def log(self) -> tuple[dict[str, Any], ...]:
        """The log entries (plain data), oldest first."""
        with self._lock:
            return tuple(json.loads(json.dumps(e)) for e in self._log)

    @property
    def tokeniser(self) -> str:
        """The name of what counts this conversation's tokens (``"o200k_base"``;
        ``"cl100k_base"`` where the extension has no o200k table yet)."""
        return self._counter.name

    @property
    def counts_exact(self) -> bool:
        """False when the tokeniser asked for was not available (a stand-in counts)."""
        return self._counter.exact

    @property
    def shown_tokens(self) -> int:
        """Tokens of what a compile would show now (before any new transformation)."""
        with self._lock:
            return self._view.total

    def scale(self, provider: str) -> float | None:
        """The count scale learned for ``provider`` from observed usage (None: none yet)."""
        return self._scale.get(provider)

    def __len__(self) -> int:
        return len(self._items)

    def get(self, item_id: str) -> ConversationItem:
        """The item with this id (InvalidArgumentError when there is none)."""
        i = self._index.get(item_id)
        if i is None:
            raise InvalidArgumentError(
                f"conversation {self.conversation_id!r} has no item {item_id!r}"
            )
        return self._items[i]

    def to_messages(self, format: str = "openai_chat") -> list[dict[str, Any]]:
        """The messages as a compile shows them now (transformations recorded so
        far applied, none new), in ``format``."""
        with self._lock:
            shown = self._view.shown[:]
        return render(shown, format)

    def __repr__(self) -> str:
        return (
            f"<Conversation {self.conversation_id!r} {len(self._items)} items, "
            f"{self._view.total} tokens shown>"
        )

    # ---- appending ----------------------------------------------------------------------

    def append(
        self,
        message: Any,
        *,
        pinned: bool = False,
        trajectory_id: str | None = None,
    ) -> list[str]:
        """Append one message, or a list of them, in any of the four shapes
        (OpenAI Chat, OpenAI Responses, Anthropic, Gemini; dicts or SDK objects).
        Returns the new items' ids. A malformed message is refused with an
        UnsupportedFormatError naming its index (nothing of the call appended).
        ``pinned``: no transformation ever touches these items."""
        if trajectory_id is not None:  # written to the log: text, no lone surrogate
            _args.text(trajectory_id, "trajectory_id")
        msgs = list(message) if isinstance(message, (list, tuple)) else [message]
        groups: list[list[Piece]] = []
        for i, m in enumerate(msgs):
            where = f"message {i}" if len(msgs) > 1 else "message"
            groups.append(parse(m, where))
        entry = {
            "op": "append",
            "time": round(_time.time(), 3),
            "pinned": bool(pinned),
            "trajectory_id": trajectory_id,
            "groups": [[codec.piece_to_dict(p) for p in g] for g in groups],
        }
        with self._lock:
            # checked before anything is recorded (a shared journal included)
            self._check_append(groups)
            self._commit(entry)
            # the ids of this entry's items (a shared journal may have applied
            # other workers' entries before it; this one is applied last)
            return list(self._appended)

    def _check_append(self, groups: list[list[Piece]]) -> None:
        n = sum(len(g) for g in groups)
        if len(self._items) + n > self.max_items:
            raise InvalidArgumentError(
                f"conversation {self.conversation_id!r} holds {len(self._items)} items; "
                f"appending {n} would pass max_items={self.max_items}"
            )
        pending_calls: set[str] = set()
        for gi, g in enumerate(groups):
            for p in g:
                # Every string is written (a save, a journal) and encoded (a body, a
                # tokeniser): a lone surrogate is refused here, before anything is
                # recorded. (parse() turns them into U+FFFD; a file or a journal
                # entry replayed is checked, not repaired.)
                try:
                    size = len(p.content.encode("utf-8"))
                except UnicodeEncodeError as exc:
                    raise InvalidArgumentError(
                        f"message {gi}: a {p.kind} holds a lone surrogate at index {exc.start}, "
                        f"which is not text (conversation {self.conversation_id!r})"
                    ) from None
                for what, v in (("tool name", p.tool_name), ("call id", p.call_id)):
                    if v is not None:
                        _args.text(v, f"message {gi}: a {p.kind}'s {what}")
                if size > self.max_item_bytes:
                    raise InvalidArgumentError(
                        f"message {gi}: a {p.kind} of {size} bytes passes max_item_bytes="
                        f"{self.max_item_bytes} (conversation {self.conversation_id!r})"
                    )
                if p.kind == "tool_call" and p.call_id:
                    pending_calls.add(p.call_id)
                if p.kind == "tool_result" and not self._result_target(p, pending_calls):
                    raise InvalidArgumentError(
                        f"message {gi}: a tool result for call {p.call_id or p.tool_name!r} "
                        f"that no earlier tool call in conversation {self.conversation_id!r} "
                        "made (a result with no call is refused: every API rejects it)"
                    )

    def _result_target(self, p: Piece, pending: set[str]) -> bool:
        if p.call_id is not None:
            return p.call_id in self._calls or p.call_id in pending
        return p.tool_name is not None  # Gemini without ids: matched by name at apply

    # ---- the log ------------------------------------------------------------------------

    def _commit(self, entry: dict[str, Any]) -> None:
        """Record ``entry``: through the shared journal when there is one (which
        applies every entry up to it), else applied here."""
        if self._shared is not None:
            self._shared.submit(self, entry)
        else:
            self._apply(entry)

    def _apply(self, entry: dict[str, Any]) -> None:
        """Apply one log entry (validated by codec.check_entry where it came from
        outside). Deterministic: the same log gives the same state everywhere."""
        op = entry["op"]
        if op == "append":
            self._apply_append(entry)
        elif op in _TRANSFORMS:
            self._apply_transform(entry)
        elif op == "undo":
            self._apply_undo(entry)
        elif op == "scale":
            self._scale[entry["provider"]] = float(entry["value"])
            self._constant[entry["provider"]] = float(entry.get("constant", 0.0))
        else:  # pragma: no cover - check_entry refuses unknown ops
            raise RampartError(f"unknown conversation log entry {op!r}")
        self._log.append(entry)

    def _apply_append(self, entry: dict[str, Any]) -> None:
        # Hot for long histories: the entry's dicts are read as they are (checked
        # by check_entry where they came from outside), and each item is built
        # once, after one batched count.
        pinned = bool(entry.get("pinned"))
        traj = entry.get("trajectory_id")
        t = float(entry.get("time", 0.0))
        base = len(self._items)
        rows: list[tuple[Any, ...]] = []
        texts: list[str] = []
        calls = self._calls
        for g in entry["groups"]:
            group = self._groups
            self._groups += 1
            for raw in g:
                kind = raw["kind"]
                call_id, tool_name = raw.get("call_id"), raw.get("tool_name")
                idx = base + len(rows)
                if kind == "tool_call":
                    if call_id is None:  # Gemini without ids: a deterministic one
                        call_id = f"call_{idx}"
                        self._by_name.setdefault(tool_name or "", deque()).append(call_id)
                    if call_id in calls:  # reused: renamed, see __init__
                        fresh = f"{call_id}_{idx}"
                        self._renamed[call_id] = fresh
                        call_id = fresh
                    calls[call_id] = idx
                elif kind == "tool_result":
                    call_id = self._match(call_id, tool_name)
                    if call_id is None:
                        continue  # checked before commit; a replayed orphan is skipped
                    if tool_name is None:
                        ci = calls[call_id]
                        tool_name = self._items[ci].tool_name if ci < base else rows[ci - base][4]
                    self._answered.add(call_id)
                text = raw["content"]
                texts.append(text if kind != "tool_call" else f"{tool_name} {text}")
                rows.append(
                    (
                        raw["role"],
                        kind,
                        text,
                        group,
                        tool_name,
                        call_id,
                        raw.get("is_error") is True,
                        raw.get("native"),
                    )
                )
        counts = self._counter.count_many(texts) if texts else []
        self._appended = []
        for (role, kind, text, group, tool_name, call_id, err, native), n in zip(rows, counts):
            idx = len(self._items)
            it = ConversationItem(
                f"i{idx}",
                role,
                kind,
                text,
                n + (TOOL_CALL_OVERHEAD if kind == "tool_call" else ITEM_OVERHEAD),
                t,
                tool_name,
                call_id,
                traj,
                pinned,
                (),
                group,
                err,
                native,
            )
            self._index[it.id] = idx
            self._items.append(it)
            self._appended.append(it.id)
            self._show(Shown(it, text), it.tokens, kind == "tool_result")

    def _match(self, call_id: str | None, tool_name: str | None) -> str | None:
        if call_id is not None:
            renamed = self._renamed.get(call_id)
            if renamed is not None and renamed not in self._answered:
                return renamed
            return call_id if call_id in self._calls else None
        # Gemini without ids: the oldest unanswered call of that name
        queue = self._by_name.get(tool_name or "")
        while queue and queue[0] in self._answered:
            queue.popleft()
        return queue[0] if queue else None

    def _show(self, s: Shown, tokens: int, is_result: bool) -> None:
        v = self._view
        it = s.item
        k = len(v.shown)
        if it.pinned:
            v.pinned_tokens += tokens
        elif is_result and s.content is it.content:
            v.results.append(k)
            v.results_tokens += tokens
            name = it.tool_name or ""
            v.results_by_tool[name] = v.results_by_tool.get(name, 0) + tokens
        if it.role == "user" and it.kind == "text":
            v.last_user = k
        v.shown.append(s)
        v.total += tokens
        v.tokens.append(v.total)

    def _apply_transform(self, entry: dict[str, Any]) -> None:
        op = entry["op"]
        summary_id = None
        if op == "compact":
            s = entry["summary"]
            idx = len(self._items)
            summary_id = f"i{idx}"
            n = self._counter.count(s["content"]) + ITEM_OVERHEAD
            it = ConversationItem(
                id=summary_id,
                role="summary",
                kind="summary",
                content=s["content"],
                tokens=n,
                time=float(entry.get("time", 0.0)),
                covers=tuple(entry["ids"]),
                group=self._groups,
            )
            self._groups += 1
            self._index[summary_id] = idx
            self._items.append(it)
        elif op == "recall":
            summary_id = self._add_recall(entry)
        ids = tuple(i for i in entry["ids"] if i in self._index)
        stubs: tuple[int, ...] = ()
        raw_ex = entry.get("excerpts") or {}
        excerpts = tuple((i, tuple(tuple(sp) for sp in raw_ex[i])) for i in ids if i in raw_ex)
        if op == "clear":
            ex = dict(excerpts)
            stubs = tuple(self._stub_tokens(self._items[self._index[i]], ex.get(i)) for i in ids)
        raw_scores = entry.get("scores") or {}
        self._transforms.append(
            Transformation(
                id=f"t{len(self._log)}",
                kind=op,
                ids=ids,
                reason=str(entry.get("reason", "")),
                summary_id=summary_id,
                inputs=bool(entry.get("inputs")),
                stub_tokens=stubs,
                excerpts=excerpts,
                scores=tuple((i, float(raw_scores[i])) for i in ids if i in raw_scores),
            )
        )
        if op == "recall":  # at the tail: the view only grows (as an append does)
            it = self._items[-1]
            self._show(Shown(it, it.content), it.tokens, True)
        else:
            self._rebuild()

    def _add_recall(self, entry: dict[str, Any]) -> str:
        """The recall item of a ``recall`` entry, appended after every item so
        far: the tail, so nothing before it is rewritten."""
        from rampart.conversation.retention import recall_text

        src = self._items[self._index[entry["ids"][0]]]
        text = recall_text(self, src, entry.get("spans") or [], bool(entry.get("closing")))
        idx = len(self._items)
        it = ConversationItem(
            id=f"i{idx}",
            role="user",
            kind="recall",
            content=text,
            tokens=self._counter.count(text) + ITEM_OVERHEAD,
            time=float(entry.get("time", 0.0)),
            tool_name=src.tool_name,
            call_id=src.call_id,
            covers=(src.id,),
            group=self._groups,
        )
        self._groups += 1
        self._index[it.id] = idx
        self._items.append(it)
        return it.id

    def _stub_tokens(self, it: ConversationItem, spans: Any = None) -> int:
        return self._counter.count(self._stub(it, spans)) + ITEM_OVERHEAD

    def _stub(self, it: ConversationItem, spans: Any = None) -> str:
        if it.kind == "tool_call":
            return json.dumps({"cleared": f"{it.tokens} tokens of input removed"})
        if spans:
            from rampart.conversation.retention import excerpt_text

            return excerpt_text(self, it, spans)
        return cleared_stub(it.tool_name, it.call_id, it.tokens)

    def _apply_undo(self, entry: dict[str, Any]) -> None:
        target = entry["of"]
        for k, t in enumerate(self._transforms):
            if t.id == target:
                self._transforms[k] = _inactive(t)
                break
        self._rebuild()

    def _rebuild(self) -> None:
        """The view from the items and the active transformations (O(items))."""
        cleared: dict[str, int] = {}
        excerpts: dict[str, Any] = {}
        covered: dict[str, str] = {}
        dropped: set[str] = set()
        summaries: dict[str, ConversationItem] = {}
        recalls: set[str] = set()
        for t in self._transforms:
            if not t.active:
                continue
            if t.kind == "recall" and t.summary_id is not None:
                recalls.add(t.summary_id)
            elif t.kind == "clear":
                ex = dict(t.excerpts)
                for i, st in zip(t.ids, t.stub_tokens):
                    cleared[i] = st
                    if i in ex:
                        excerpts[i] = ex[i]
                    else:
                        excerpts.pop(i, None)
                if t.inputs:
                    for i in t.ids:
                        call = self._calls.get(self._items[self._index[i]].call_id or "")
                        if call is not None:
                            cid = self._items[call].id
                            cleared.setdefault(cid, self._stub_tokens(self._items[call]))
            elif t.kind == "compact" and t.summary_id is not None:
                s = self._items[self._index[t.summary_id]]
                summaries[s.covers[0]] = s
                for i in t.ids:
                    covered[i] = t.summary_id
            elif t.kind == "drop":
                dropped.update(t.ids)
        # A summary is shown where the first original item it stands for was
        # (through nested summaries: a compaction may cover an earlier summary);
        # only the outermost one, a summary a later one covers is not shown.
        at: dict[str, ConversationItem] = {}
        for s in summaries.values():
            if s.id not in covered and s.id not in dropped:
                at[self._first_leaf(s)] = s
        self._view = _View(version=self._view.version + 1)
        for it in self._items:
            if (it.kind == "summary" and it.native is None) or (
                it.kind == "recall" and it.id not in recalls
            ):
                continue
            summary = at.get(it.id)
            if summary is not None:
                self._show(Shown(summary, summary.content), summary.tokens, False)
            if it.id in covered or it.id in dropped:
                continue
            if it.id in cleared:
                self._show(Shown(it, self._stub(it, excerpts.get(it.id))), cleared[it.id], False)
            else:
                self._show(Shown(it, it.content), it.tokens, it.kind in _RESULTS)

    def _first_leaf(self, s: ConversationItem) -> str:
        """The first appended (non-summary) item a summary stands for."""
        for _ in range(len(self._items) + 1):  # bounded: covers point backwards
            if not s.covers or s.covers[0] not in self._index:
                return s.id
            head = self._items[self._index[s.covers[0]]]
            if head.kind != "summary" or head.native is not None:
                return head.id
            s = head
        return s.id

    # ---- transformations, usage ---------------------------------------------------------

    def rollback(self, transformation: str | None = None) -> Transformation:
        """Undo a transformation (the latest active one when None): the items it
        cleared, compacted or dropped are shown again as they were appended (the
        log kept them). The undo is itself a log entry. Returns what was undone."""
        with self._lock:
            active = [t for t in self._transforms if t.active]
            if transformation is None:
                if not active:
                    raise InvalidArgumentError(
                        f"conversation {self.conversation_id!r} has no transformation to undo"
                    )
                target = active[-1]
            else:
                found = [t for t in active if t.id == transformation]
                if not found:
                    raise InvalidArgumentError(
                        f"conversation {self.conversation_id!r} has no active transformation "
                        f"{transformation!r} (see .transformations)"
                    )
                target = found[0]
            self._commit({"op": "undo", "of": target.id})
            return target

    undo = rollback

    def observe_usage(self, usage: Any, *, provider: str | None = None) -> float | None:
        """Learn how the provider counts from the ``usage`` of the call made with
        the last compiled body: input + cache-creation + cache-read tokens against
        what the compile predicted. Takes OpenAI (Chat and Responses), Anthropic
        and Gemini usage objects or dicts. Returns the new scale (None when no
        compile of this conversation predicted a count yet).

        Two parameters are learned: ``observed = scale * predicted + constant``.
        The constant is what every request costs beyond its items (a local
        model's chat template, a tool preamble): one short request alone would
        otherwise read as a large scale and shrink every later budget. From one
        observation, a ratio outside [0.7, 1.4] (no tokenizer differs that much)
        puts the excess into the constant; from two or more of different sizes
        (the last 16), a least-squares line, raised by the largest count above
        it (the budget is a limit: every recent count lies on or under the line
        it is made with). :meth:`constant` reads it.

        One odd count cannot swing the budget: a count no scale in [0.25, 4]
        and constant in [0, 1e6] can explain (0 tokens for a body we count at
        7 488, say) is not learned — the scale in force is returned, None when
        none was learned yet — and one observation moves the scale by at most a
        factor of :data:`MAX_SCALE_STEP` and the constant by at most
        :data:`MAX_CONSTANT_STEP` tokens or an eighth of the request, whichever
        is more: a real change is learned over a few calls."""
        observed = _input_tokens(usage)
        with self._lock:
            self.last_usage = usage  # read by rampart.telemetry (cache read/creation tokens)
            last = self._last_compile
            if last is None or last[1] <= 0:
                return None
            prov = last[0] if provider is None else _args.text(provider, "provider")
            predicted = float(last[1])
            if not predicted * MIN_SCALE <= observed <= predicted * MAX_SCALE + MAX_CONSTANT:
                return self._scale.get(prov)  # impossible: not learned, nothing recorded
            obs = self._usage_obs.setdefault(prov, deque(maxlen=16))
            obs.append((predicted, float(observed)))
            value, constant = _fit_usage(obs)
            value, constant = _step_bounded(
                value,
                constant,
                self._scale.get(prov, _prior_scale(prov)),
                self._constant.get(prov, 0.0),
                predicted,
            )
            self._commit({"op": "scale", "provider": prov, "value": value, "constant": constant})
            return value

    def constant(self, provider: str) -> float:
        """The fixed tokens per request learned for ``provider`` (0 when none)."""
        return self._constant.get(provider, 0.0)

    # ---- persistence --------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the log to ``path`` (JSON, replaced atomically: a reader sees the
        old file or the new one, never half)."""
        p = _args.file_path(path)
        with self._lock:
            # strict: a log that cannot be written as UTF-8 JSON is refused here,
            # before the file is touched (load would refuse what it wrote)
            data = codec.encode_file(self.conversation_id, self._counter.name, self._log)
        tmp = p.with_name(f".{p.name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, p)
        finally:
            if tmp.exists():
                tmp.unlink()

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        max_items: int = DEFAULT_MAX_ITEMS,
        max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
        max_bytes: int = codec.MAX_FILE_BYTES,
        tokeniser: Any = None,
    ) -> Conversation:
        """A conversation from a file :meth:`save` wrote. Bounded (``max_bytes``,
        ``max_items``, ``max_item_bytes``) and checked entry by entry; any fault
        is a RegistryFileError naming the file and entry, and nothing is built.
        Token counts are taken again (a file's counts are not trusted)."""
        p = _args.file_path(path)
        conv_id, tok, entries = codec.decode_file(p, max_bytes)
        conv = cls(
            conv_id,
            max_items=max_items,
            max_item_bytes=max_item_bytes,
            tokeniser=tok if tokeniser is None else tokeniser,
        )
        conv._replay(entries, str(p))
        return conv

    def _replay(self, entries: Iterable[dict[str, Any]], where: str) -> None:
        from rampart.errors import RegistryFileError

        for k, e in enumerate(entries):
            try:
                codec.check_entry(e, self)
                if e["op"] == "append":
                    self._check_append([[codec.piece_from_dict(p) for p in g] for g in e["groups"]])
                self._apply(e)
            except (InvalidArgumentError, UnsupportedFormatError) as exc:
                raise RegistryFileError(f"{where}: log entry {k}: {exc}") from None

    @classmethod
    def open(
        cls,
        store: Any,
        name: str,
        *,
        create: bool = True,
        max_items: int = DEFAULT_MAX_ITEMS,
        max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
        tokeniser: Any = "o200k_base",
    ) -> Conversation:
        """A conversation kept in a shared store (docs/specification.md §7): its log is a journal
        named ``name`` in ``store`` (a URL or a store object), so another
        process that opens the same (store, name) continues it. Every change
        is appended to the journal and applied in journal order; ``sync()``
        applies what other processes appended."""
        from rampart.conversation.shared import open_journal

        conv = cls(name, max_items=max_items, max_item_bytes=max_item_bytes, tokeniser=tokeniser)
        open_journal(conv, store, name, create)
        return conv

    def sync(self) -> int:
        """Apply what other processes appended to a shared conversation's journal
        (0 for a local one); returns how many entries were applied."""
        if self._shared is None:
            return 0
        with self._lock:
            n: int = self._shared.catch_up(self)
            return n

    @property
    def shared(self) -> bool:
        return self._shared is not None

    def close(self) -> None:
        """Release a shared conversation's store connection (nothing for a local one)."""
        if self._shared is not None:
            self._shared.close()

    # ---- for the compile step -----------------------------------------------------------

    def _snapshot(self) -> _View:
        """The current view (callers hold the lock; see _View on sharing it)."""
        return self._view

    def _count(self, text: str) -> int:
        return self._counter.count(text)


#: The bounds of the learned count model ``observed = scale * predicted + constant``.
MIN_SCALE, MAX_SCALE, MAX_CONSTANT = 0.25, 4.0, 1e6
#: How far one observed usage moves the learned scale at most (a factor).
MAX_SCALE_STEP = 1.25
#: How far one observed usage moves the learned constant at most (tokens; or an
#: eighth of the request, when that is more).
MAX_CONSTANT_STEP = 256.0


def _prior_scale(provider: str) -> float:
    """The scale a compile used for ``provider`` before any usage was learned."""
    from rampart.conversation.policy import PROVIDERS

    return PROVIDERS[provider][1] if provider in PROVIDERS else 1.0


def _step_bounded(
    scale: float, constant: float, prev_scale: float, prev_constant: float, predicted: float
) -> tuple[float, float]:
    """(scale, constant) of a fit moved at most one step from the ones in force."""
    scale = min(max(scale, prev_scale / MAX_SCALE_STEP), prev_scale * MAX_SCALE_STEP)
    step = max(MAX_CONSTANT_STEP, predicted / 8)
    constant = min(max(constant, prev_constant - step), prev_constant + step)
    scale = min(max(scale, MIN_SCALE), MAX_SCALE)
    constant = min(max(constant, 0.0), MAX_CONSTANT)
    return round(scale, 6), round(constant, 3)


def _fit_usage(obs: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """(scale, constant) of ``observed = scale * predicted + constant`` over the
    observations (predicted, observed), bounded: scale in [0.25, 4], constant in
    [0, 1e6]; the least-squares line raised until no observation lies above it."""
    pts = list(obs)
    xs = [p for p, _ in pts]
    n = len(pts)
    mx = sum(xs) / n
    my = sum(o for _, o in pts) / n
    var = sum((x - mx) ** 2 for x in xs)
    if n >= 2 and var > (0.1 * mx) ** 2 * n:  # sizes differ enough to separate the two
        cov = sum((x - mx) * (o - my) for x, o in pts)
        scale = min(max(cov / var, 0.25), 4.0)
        constant = my - scale * mx
    else:
        x, o = pts[-1]
        ratio = o / x
        scale = min(max(ratio, 0.7), 1.4)
        constant = o - scale * x
    if constant < 0:  # the provider counts fewer: all of it is scale
        constant = 0.0
        scale = min(max(my / mx, 0.25), 4.0)
    # The budget is a limit, not an estimate: a line through the middle of the
    # counts puts half the requests over it (a request heavy in diffs counts
    # more tokens per o200k token than prose, and the same body compiled again
    # would overshoot again). Raised by the largest excess, every recent count
    # lies on or under the line the compile budgets with.
    excess = max(o - (scale * x + constant) for x, o in pts)
    if excess > 0:
        constant += excess
    return round(scale, 6), round(min(constant, 1e6), 3)


def _inactive(t: Transformation) -> Transformation:
    from dataclasses import replace

    return replace(t, active=False)


def _get(obj: Any, *names: str) -> Any:
    for n in names:
        v = obj.get(n) if isinstance(obj, Mapping) else getattr(obj, n, None)
        if v is not None:
            return v
    return None


def _input_tokens(usage: Any) -> int:
    """Input + cache creation + cache read tokens of any provider's usage."""
    if usage is None:
        raise InvalidArgumentError("observe_usage needs a usage object or dict, got None")
    anth = _get(usage, "cache_creation_input_tokens", "cache_read_input_tokens")
    inp = _count(
        _get(usage, "input_tokens", "prompt_tokens", "promptTokenCount", "prompt_token_count")
    )
    if inp is None or inp < 0:
        raise InvalidArgumentError(
            "usage has no input token count (input_tokens, prompt_tokens or promptTokenCount): "
            f"{usage!r:.120}"
        )
    total = inp
    if anth is not None:  # Anthropic's input_tokens excludes what the cache wrote and read
        for k in ("cache_creation_input_tokens", "cache_read_input_tokens"):
            v = _count(_get(usage, k))
            if v is not None and v > 0:
                total += v
    return total


def _count(v: Any) -> int | None:
    """A token count as an int (numpy's integers too); None for anything else
    (bool, float, text)."""
    if type(v) is int:
        return v
    if v is None or isinstance(v, (bool, float, str, bytes)) or type(v).__name__ == "bool_":
        return None
    try:
        return operator.index(v)
    except TypeError:
        return None
