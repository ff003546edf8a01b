"""The compile step: fit a conversation into what the window leaves after the
instructions and tools, by the policy, cache-aware (SPEC §9).

:func:`compile_conversation` is the one hook ``BlockRegistry.compile`` calls.
The common case — the conversation grew and still fits, and no transformation
pays — is O(1) beyond a snapshot of the view: totals and the tool-result list
are kept up to date by ``append``, so no item is walked or re-counted. Only a
compile that transforms walks the view (once per step).

Cost model for "pays": :meth:`ContextPolicy.pays` over §8's price table.
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rampart.conversation.items import ConversationItem, MessageReport, RewriteNote
from rampart.conversation.policy import ContextPolicy
from rampart.conversation.shapes import Shown, render
from rampart.errors import ContextOverflowError, InvalidArgumentError

if TYPE_CHECKING:
    from rampart.block import CompileResult
    from rampart.conversation.core import Conversation, _View

__all__ = ["ContextOverflowError", "ContextResult", "compile_conversation"]

#: The stub of a cleared result, for planning (the exact count is taken when
#: the clear is recorded).
_STUB_ESTIMATE = 40


_DEFAULT_POLICY: ContextPolicy | None = None


def _default_policy() -> ContextPolicy:
    global _DEFAULT_POLICY
    if _DEFAULT_POLICY is None:
        _DEFAULT_POLICY = ContextPolicy()
    return _DEFAULT_POLICY


class ContextResult:
    """What the compile step did to the conversation: the view it compiled, the
    per-item report (built on first access), where it rewrote the prefix."""

    __slots__ = (
        "_items",
        "_report",
        "_state",
        "budget",
        "context_window",
        "conversation",
        "fixed_tokens",
        "message_tokens",
        "native",
        "policy",
        "reply_tokens",
        "rewrites",
        "scale",
        "shown",
        "transformations",
    )

    def __init__(
        self,
        conversation: Conversation,
        shown: list[Shown],
        items: list[ConversationItem],
        *,
        policy: ContextPolicy,
        context_window: int | None,
        reply_tokens: int,
        fixed_tokens: int,
        message_tokens: int,
        budget: int | None,
        scale: float,
        rewrites: list[RewriteNote],
        transformations: list[dict[str, Any]],
        state: Conversation | None = None,
    ) -> None:
        self.conversation = conversation
        self._state = conversation if state is None else state
        self.shown = shown
        self._items = items
        self.policy = policy
        self.context_window = context_window
        self.reply_tokens = reply_tokens
        self.fixed_tokens = fixed_tokens
        self.message_tokens = message_tokens
        self.budget = budget
        self.scale = scale
        self.rewrites = rewrites
        self.transformations = transformations
        self.native = policy.native
        self._report: list[MessageReport] | None = None

    @property
    def total_tokens(self) -> int:
        """Instructions + tools + messages, in the provider's units (scaled)."""
        return math.ceil((self.fixed_tokens + self.message_tokens) * self.scale)

    def messages(self, format: str = "openai_chat") -> list[dict[str, Any]]:
        return render(self.shown, format)

    @property
    def message_report(self) -> list[MessageReport]:
        if self._report is None:
            self._report = _report(self.shown, self._items, self._state)
        return self._report


def _report(
    shown: Sequence[Shown], items: Sequence[ConversationItem], state: Conversation
) -> list[MessageReport]:
    shown_ids = {s.item.id for s in shown}
    why: dict[str, tuple[str, str]] = {}
    for t in state.transformations:
        if not t.active:
            continue
        action = {"clear": "cleared", "compact": "compacted", "drop": "dropped"}[t.kind]
        detail = f"{t.reason}; summary {t.summary_id}" if t.summary_id else t.reason
        for i in t.ids:
            why[i] = (action, detail)
    out = []
    for idx, it in enumerate(items):
        act = why.get(it.id)
        if it.id in shown_ids and (act is None or act[0] != "cleared"):
            reason = "pinned" if it.pinned else None
            if it.kind == "summary":
                reason = f"summary of {len(it.covers)} items"
            action, tokens = "kept", it.tokens
        elif it.id in shown_ids:
            action, reason, tokens = "cleared", act[1], state._stub_tokens(it)  # type: ignore[index]
        elif act is not None:
            action, reason, tokens = act[0], act[1], 0
        else:  # a summary a later summary covers
            action, reason, tokens = "compacted", "covered by a later summary", 0
        out.append(MessageReport(it.id, action, reason, tokens, it.tokens, idx, it.role, it.kind))
    return out


def _check_int(v: Any, name: str, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise InvalidArgumentError(f"{name} must be an int >= {minimum}, got {v!r}")
    return v


def _fixed_tokens(conv: Conversation, result: CompileResult) -> int:
    """Tokens of the instructions and tools under the conversation's counter,
    counted once per distinct prompt (a compile of an unchanged registry pays a
    string comparison)."""
    prompt = result.prompt
    cache = conv._fixed_cache
    if cache is not None and cache[0] == prompt:
        return cache[1]
    n = conv._count(prompt) if prompt else 0
    # Tools travel as JSON beside the prompt: what the registry counted for the
    # tool blocks stands for them (their schemas are the blocks' content).
    sel = result._sel
    for b in [*sel.included_blocks(), *sel.tools_only_blocks()]:
        raw = b.metadata_json
        if raw is not None and "tool_schema" in raw:
            n += b.token_count
    conv._fixed_cache = (prompt, n)
    return n


def compile_conversation(
    result: CompileResult,
    conversation: Any,
    context_window: int | None,
    reply_tokens: int | None,
    policy: ContextPolicy | None,
    ungated: Sequence[str] = (),
) -> ContextResult:
    """The hook of ``BlockRegistry.compile(..., conversation=...)``: fit the
    conversation in ``context_window - reply_tokens`` beside ``result``'s
    instructions and tools, recording what the policy does (unless dry run)."""
    from rampart.conversation.core import Conversation

    if not isinstance(conversation, Conversation):
        raise InvalidArgumentError(
            f"conversation must be a rampart.Conversation, got {type(conversation).__name__}"
        )
    pol = _default_policy() if policy is None else policy
    if not isinstance(pol, ContextPolicy):
        raise InvalidArgumentError(f"policy must be a ContextPolicy, got {type(pol).__name__}")
    reply = 0 if reply_tokens is None else _check_int(reply_tokens, "reply_tokens")
    window = None if context_window is None else _check_int(context_window, "context_window", 1)
    conv = conversation
    with conv._lock:
        fixed = _fixed_tokens(conv, result)
        scale = conv._scale.get(pol.provider, pol.default_scale)
        now = _time.monotonic()
        last = conv._last_compile
        ttl = pol.prices.ttl_s
        cold = last is not None and ttl is not None and now - last[2] > ttl
        view, items = conv._snapshot()
        planned: list[dict[str, Any]] = []
        notes: list[RewriteNote] = []
        budget = None
        if window is not None:
            room = (window - reply) / scale
            budget = math.floor(room) - fixed
            if budget < 0 or pinned_tokens(conv, view) > budget:
                _overflow(conv, view, fixed, budget, window, reply, scale, ungated, result)
            target = _twin(conv) if pol.dry_run else conv
            view = _fit(target, view, budget, pol, cold, planned, notes)
            items = target._items[:]
        else:
            target = conv
        if not pol.dry_run:
            conv._last_compile = (pol.provider, float(fixed + view.total), now)
        return ContextResult(
            conv,
            view.shown,
            items,
            policy=pol,
            context_window=window,
            reply_tokens=reply,
            fixed_tokens=fixed,
            message_tokens=view.total,
            budget=budget,
            scale=scale,
            rewrites=notes,
            transformations=planned,
            state=target,
        )


def _pinned_from(conv: Conversation, view: _View) -> int:
    return conv._latest_user_shown(view)


def pinned_tokens(conv: Conversation, view: _View) -> int:
    """Tokens the policy can never remove: the latest user turn and pinned items."""
    start = _pinned_from(conv, view)
    tail = view.total - (view.tokens[start - 1] if start > 0 else 0)
    head = sum(_cost(view, k) for k in range(start) if view.shown[k].item.pinned)
    return tail + head


def _cost(view: _View, k: int) -> int:
    return view.tokens[k] - (view.tokens[k - 1] if k else 0)


def _overflow(
    conv: Conversation,
    view: _View,
    fixed: int,
    budget: int,
    window: int,
    reply: int,
    scale: float,
    ungated: Sequence[str],
    result: CompileResult,
) -> None:
    start = _pinned_from(conv, view)
    pinned = [s.item.id for k, s in enumerate(view.shown) if s.item.pinned or k >= start]
    names = list(ungated) or [r.name for r in result.report if r.included and not r.gated]
    blocks = ", ".join(names[:5]) or "none"
    raise ContextOverflowError(
        f"conversation {conv.conversation_id!r}: what must be sent does not fit a "
        f"{window}-token window less {reply} reply tokens (scale {scale:g}): the compiled "
        f"instructions and tools take {fixed} tokens (ungated blocks: {blocks}), the pinned "
        f"messages and the latest user turn ({', '.join(pinned[:8])}"
        f"{', …' if len(pinned) > 8 else ''}) {pinned_tokens(conv, view)}; "
        f"room for messages: {max(budget, 0)}. Raise context_window, lower reply_tokens, "
        "unpin messages or compile fewer blocks (max_tokens)."
    )


def _closed(view: _View, end: int) -> bool:
    """Whether no tool call in ``shown[:end]`` has its result at or after ``end``."""
    open_calls: set[str] = set()
    for s in view.shown[:end]:
        it = s.item
        if it.kind == "tool_call" and it.call_id:
            open_calls.add(it.call_id)
        elif it.kind == "tool_result":
            open_calls.discard(it.call_id or "")
    if not open_calls:
        return True
    return not any(
        s.item.kind == "tool_result" and s.item.call_id in open_calls for s in view.shown[end:]
    )


def _fit(
    conv: Conversation,
    view: _View,
    budget: int,
    pol: ContextPolicy,
    cold: bool,
    planned: list[dict[str, Any]],
    notes: list[RewriteNote],
) -> _View:
    """The view after the policy's steps, recorded in ``conv`` (or, in a dry
    run, planned only)."""
    need = view.total - budget
    # 1. clear tool results
    if pol.clear_tool_results and pol.native != "anthropic" and view.results:
        cands = _clear_candidates(conv, view, pol)
        if cands:
            removable = [(k, _cost(view, k) - _STUB_ESTIMATE) for k in cands]
            removable = [(k, r) for k, r in removable if r > 0]
            total_removable = sum(r for _, r in removable)
            chosen: list[int] = []
            reason = ""
            if need > 0:
                got = 0
                goal = max(need, pol.clear_at_least)
                for k, r in removable:
                    chosen.append(k)
                    got += r
                    if got >= goal:
                        break
                reason = "window"
            elif total_removable >= pol.clear_at_least and removable:
                first = removable[0][0]
                after = view.total - (view.tokens[first - 1] if first else 0)
                if pol.pays(total_removable, after, cold):
                    chosen = [k for k, _ in removable]
                    reason = "cold" if cold else "price"
            if chosen:
                view = _record(
                    conv,
                    view,
                    pol,
                    {
                        "op": "clear",
                        "ids": [view.shown[k].item.id for k in chosen],
                        "inputs": pol.clear_tool_inputs,
                        "reason": reason,
                    },
                    chosen[0],
                    planned,
                    notes,
                )
                need = view.total - budget
    # 2. compact the oldest span
    if need > 0 and pol.compact is not None and pol.native != "openai":
        span = _compact_span(conv, view, pol)
        if span is not None:
            a, b = span
            ids = [view.shown[k].item.id for k in range(a, b)]
            if pol.dry_run:
                text = f"(dry run: a summary of {len(ids)} items)"
            else:
                text = _summarise(pol, [view.shown[k] for k in range(a, b)])
            view = _record(
                conv,
                view,
                pol,
                {"op": "compact", "ids": ids, "summary": {"content": text}, "reason": "window"},
                a,
                planned,
                notes,
            )
            need = view.total - budget
    # 3. drop the oldest unpinned turns
    if need > 0 and pol.drop_oldest:
        ids, first = _drop_turns(conv, view, need)
        if ids:
            view = _record(
                conv,
                view,
                pol,
                {"op": "drop", "ids": ids, "reason": "window"},
                first,
                planned,
                notes,
            )
            need = view.total - budget
    if need > 0:
        start = _pinned_from(conv, view)
        raise ContextOverflowError(
            f"conversation {conv.conversation_id!r}: {view.total} message tokens after the "
            f"policy's steps, {budget} fit; what is left is pinned or the latest user turn "
            f"(from item {view.shown[start].item.id if start < len(view.shown) else '-'}), or "
            "the policy may not remove more (enable drop_oldest or compact)"
        )
    return view


def _clear_candidates(conv: Conversation, view: _View, pol: ContextPolicy) -> list[int]:
    keep = pol.keep_tool_results
    results = view.results[:-keep] if keep else list(view.results)
    start = _pinned_from(conv, view)
    excluded = set(pol.exclude_tools)
    return [
        k
        for k in results
        if k < start
        and not view.shown[k].item.pinned
        and view.shown[k].item.tool_name not in excluded
    ]


def _compact_span(conv: Conversation, view: _View, pol: ContextPolicy) -> tuple[int, int] | None:
    n = len(view.shown)
    start = _pinned_from(conv, view)
    end = min(n - pol.compact_keep_recent, start)
    a = 0
    while a < end and view.shown[a].item.pinned:
        a += 1
    b = a
    while b < end and not view.shown[b].item.pinned:
        b += 1
    while b > a + 1 and not _closed(view, b):
        b -= 1
    if b - a < 2:
        return None
    return a, b


def _summarise(pol: ContextPolicy, span: list[Shown]) -> str:
    # The summariser's input is bounded: a span of huge tool results would
    # otherwise need a window as large as the one it relieves (letta#3279).
    lines = []
    budget = 200_000
    for s in span:
        it = s.item
        text = s.content if len(s.content) <= 4000 else s.content[:4000] + " […]"
        who = it.tool_name if it.kind in ("tool_call", "tool_result") else it.role
        lines.append(f"{it.kind} ({who}): {text}")
        budget -= len(lines[-1])
        if budget <= 0:
            lines.append("[…]")
            break
    c = pol.compact
    items = [s.item for s in span]
    if callable(getattr(c, "chat", None)):
        prompt = (
            "Summarise this part of an agent's conversation for the agent itself: keep "
            "decisions, facts learned, file names, ids and open tasks; drop chatter.\n\n"
            + "\n".join(lines)
        )
        reply = c.chat(  # type: ignore[union-attr]
            [{"role": "user", "content": prompt}],
            temperature=0.0,
            seed=0,
            max_tokens=pol.compact_max_tokens,
        )
        out = reply.text
    else:
        out = c(items)  # type: ignore[misc]
    if not isinstance(out, str) or not out.strip():
        raise InvalidArgumentError(
            f"the compact callable returned {type(out).__name__} {out!r:.40}; expected the "
            "summary text"
        )
    return out


def _drop_turns(conv: Conversation, view: _View, need: int) -> tuple[list[str], int]:
    start = _pinned_from(conv, view)
    ids: list[str] = []
    got = 0
    first = -1
    k = 0
    while k < start and got < need:
        # a turn: from here to the next user text (or summary), closed for tool calls
        e = k + 1
        while e < start and not _turn_start(view.shown[e].item):
            e += 1
        while e < start and not _closed(view, e):
            e += 1
        turn = range(k, e)
        if not any(view.shown[j].item.pinned for j in turn) and _closed(view, e):
            if first < 0:
                first = k
            ids.extend(view.shown[j].item.id for j in turn)
            got += view.tokens[e - 1] - (view.tokens[k - 1] if k else 0)
        k = e
    return ids, first


def _turn_start(it: ConversationItem) -> bool:
    return (it.role == "user" and it.kind == "text") or it.kind == "summary"


def _record(
    conv: Conversation,
    view: _View,
    pol: ContextPolicy,
    entry: dict[str, Any],
    at: int,
    planned: list[dict[str, Any]],
    notes: list[RewriteNote],
) -> _View:
    before = view.total
    prefix = view.tokens[at - 1] if at else 0
    at_item = view.shown[at].item.id
    conv._commit({**entry, "time": round(_time.time(), 3)})
    new = conv._snapshot()[0]
    planned.append(entry)
    notes.append(
        RewriteNote(
            at_item=at_item,
            at_index=at,
            reason=entry["reason"],
            action=entry["op"],
            tokens_removed=before - new.total,
            prefix_tokens=prefix,
            detail=f"{len(entry['ids'])} items; body rewritten from item {at_item} on",
        )
    )
    return new


def _twin(conv: Conversation) -> Conversation:
    """A dry run's copy of the conversation's state: transformations are
    recorded into it, the conversation itself is untouched."""
    from rampart.conversation.core import Conversation

    twin = Conversation.__new__(Conversation)
    twin.__dict__.update(conv.__dict__)
    twin._items = list(conv._items)
    twin._index = dict(conv._index)
    twin._transforms = list(conv._transforms)
    twin._log = list(conv._log)
    twin._shared = None
    return twin


def attach(
    result: CompileResult,
    conversation: Any,
    context_window: int | None,
    reply_tokens: int | None,
    policy: ContextPolicy | None,
) -> CompileResult:
    """``BlockRegistry.compile``'s hook: the compile step's outcome, on the result."""
    if conversation is None:
        raise InvalidArgumentError(
            "context_window, reply_tokens and policy apply to a conversation: pass "
            "conversation=rampart.Conversation(...)"
        )
    result._context = compile_conversation(
        result, conversation, context_window, reply_tokens, policy
    )
    return result
