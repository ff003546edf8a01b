"""The compile step: fit a conversation into what the window leaves after the
instructions and tools, by the policy, cache-aware (docs/specification.md §9).

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
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rampart.conversation import retention
from rampart.conversation.items import ConversationItem, RewriteNote
from rampart.conversation.policy import ContextPolicy
from rampart.conversation.result import ContextResult
from rampart.conversation.shapes import Shown
from rampart.conversation.steps import (
    STUB_ESTIMATE,
    MakeRoom,
    Scoring,
    boundaries,
    clear_candidates,
    clear_order,
    needed_by_question,
    recall,
    removal,
    room_for_recall,
)
from rampart.errors import ContextOverflowError, InvalidArgumentError

if TYPE_CHECKING:
    from rampart.block import CompileResult
    from rampart.conversation.core import Conversation, _View

__all__ = ["ContextOverflowError", "ContextResult", "compile_conversation"]

_DEFAULT_POLICY: ContextPolicy | None = None


def _default_policy() -> ContextPolicy:
    global _DEFAULT_POLICY
    if _DEFAULT_POLICY is None:
        _DEFAULT_POLICY = ContextPolicy()
    return _DEFAULT_POLICY


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
    embedder: Any = None,
    task_text: str | None = None,
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
        constant = conv._constant.get(pol.provider, 0.0)
        now = _time.monotonic()
        last = conv._last_compile
        ttl = pol.prices.ttl_s
        cold = last is not None and ttl is not None and now - last[2] > ttl
        target = conv
        view = conv._view
        notes: list[RewriteNote] = []
        budget = None
        scoring = None
        if pol.relevance:
            scoring = Scoring(conv, view, task_text, embedder)
            # new results are indexed now and embedded while the model is called
            # (the question's compile finds their vectors made)
            retention.relevance_of(conv).prepare(conv, embedder)
        if window is not None:
            budget = math.floor((window - reply - constant) / scale) - fixed
            if budget < 0 or _pinned_tokens(view) > budget:
                _overflow(conv, view, fixed, budget, window, reply, scale, result)
        recalled: list[str] = []
        recalls = scoring is not None and pol.recall and pol.native != "anthropic"
        # What the messages grew by since the last compile for this provider:
        # the next call will likely grow as much, so a forced drop leaves that
        # much room (see _fit).
        grown = 0
        if last is not None and last[0] == pol.provider:
            grown = max(0, int(fixed + view.total - last[1]))
        try:
            plan, view = _steps(
                conv, view, budget, pol, cold, notes, scoring, recalls, recalled, grown
            )
        except ContextOverflowError:
            if not (recalls and recalled):
                raise
            # A recall is never removed while its question stands, so one that
            # the window cannot hold beside what must be sent (a huge question,
            # pinned items, results the policy may not remove) would make the
            # compile fail where the same compile without it fits: plan again
            # without the recall (what must be sent fits: checked above).
            notes.clear()
            recalled.clear()
            plan, view = _steps(
                conv, view, budget, pol, cold, notes, scoring, False, recalled, grown
            )
        if plan.twin is not None:
            if pol.dry_run:
                target = plan.twin
            else:
                for entry in plan.entries:
                    conv._commit(entry)
                view = conv._view
                if recalled:  # the ids the recall entries got in the conversation itself
                    recalled = [
                        t.summary_id
                        for t in conv._transforms[-len(plan.entries) :]
                        if t.kind == "recall" and t.summary_id is not None
                    ]
        if not pol.dry_run:
            conv._last_compile = (pol.provider, float(fixed + view.total), now)
        return ContextResult(
            conv,
            target,
            view,
            pol,
            window,
            reply,
            fixed,
            budget,
            scale,
            notes,
            scoring,
            recalled,
            constant,
        )


def _steps(
    conv: Conversation,
    view: _View,
    budget: int | None,
    pol: ContextPolicy,
    cold: bool,
    notes: list[RewriteNote],
    scoring: Scoring | None,
    recalls: bool,
    recalled: list[str],
    grown: int = 0,
) -> tuple[_Plan, _View]:
    """The policy's steps and the recall at the tail, planned on a copy of the
    state (made only when a step runs) and recorded in the conversation by the
    caller once they all succeeded: a compile that overflows after a clear
    leaves the conversation as it was."""
    plan = _Plan(conv)
    if budget is not None:
        view = _fit(plan, view, budget, pol, cold, notes, scoring, grown)
    if recalls:
        # After the fit, into the room it left: the body before the recall is
        # what the same compile without the recall sends (the price check never
        # sees the recall; a result this fit removed can be recalled).
        view = recall(
            plan,
            view,
            pol,
            scoring,  # type: ignore[arg-type]
            budget,
            recalled,
            _recall_room(plan, pol, scoring, notes),  # type: ignore[arg-type]
        )
    return plan, view


def _pinned_tokens(view: _View) -> int:
    """Tokens the policy can never remove: pinned items and the latest user text."""
    k = view.last_user
    extra = view.cost(k) if k >= 0 and not view.shown[k].item.pinned else 0
    return view.pinned_tokens + extra


def _overflow(
    conv: Conversation,
    view: _View,
    fixed: int,
    budget: int,
    window: int,
    reply: int,
    scale: float,
    result: CompileResult,
) -> None:
    pinned = [s.item.id for k, s in enumerate(view.shown) if view.protected(k)]
    names = [r.name for r in result.report if r.included and not r.gated]
    blocks = ", ".join(names[:5]) or "none"
    raise ContextOverflowError(
        f"conversation {conv.conversation_id!r}: what must be sent does not fit a "
        f"{window}-token window less {reply} reply tokens (count scale {scale:g}): the "
        f"compiled instructions and tools take {fixed} tokens (ungated blocks: {blocks}), "
        f"the pinned items and the latest user message ({', '.join(pinned[:8])}"
        f"{', ...' if len(pinned) > 8 else ''}) {_pinned_tokens(view)}; room for messages: "
        f"{max(budget, 0)}. Raise context_window, lower reply_tokens, unpin items or "
        "compile fewer blocks (max_tokens)."
    )


def _eligible_fast(view: _View, pol: ContextPolicy) -> tuple[int, int]:
    """(tokens clearing could remove, index of the first result it would clear)
    in O(keep + excluded tools): what the price check needs on every compile."""
    keep = pol.keep_tool_results
    res = view.results
    if len(res) <= keep:
        return 0, -1
    tail = sum(view.cost(k) for k in res[len(res) - keep :]) if keep else 0
    excluded = sum(view.results_by_tool.get(t, 0) for t in pol.exclude_tools)
    removable = view.results_tokens - tail - excluded - STUB_ESTIMATE * (len(res) - keep)
    first = -1
    names = pol.exclude_tools
    for j in range(len(res) - keep):  # no slice: this runs on every compile
        k = res[j]
        if view.shown[k].item.tool_name not in names:
            first = k
            break
    return removable, first


class _Plan:
    """The steps of one compile: recorded into a twin of the conversation (made
    on the first step), kept as entries to commit afterwards."""

    __slots__ = ("conv", "entries", "twin")

    def __init__(self, conv: Conversation) -> None:
        self.conv = conv
        self.twin: Conversation | None = None
        self.entries: list[dict[str, Any]] = []

    @property
    def conversation_id(self) -> str:
        return self.conv.conversation_id

    def record(self, entry: dict[str, Any]) -> _View:
        if self.twin is None:
            self.twin = _twin(self.conv)
        self.twin._commit(entry)
        self.entries.append(entry)
        return self.twin._view


def _fit(
    conv: _Plan,
    view: _View,
    budget: int,
    pol: ContextPolicy,
    cold: bool,
    notes: list[RewriteNote],
    scoring: Scoring | None = None,
    grown: int = 0,
) -> _View:
    """The view after the policy's steps, each recorded in ``conv`` (the twin of
    a dry run). Fast path: fits, and clearing cannot pay → O(keep).
    ``grown``: what the messages grew by since the previous compile (the room a
    forced drop leaves for the next call)."""
    need = view.total - budget
    # A forced step removes at least clear_at_least, and leaves room for one
    # more call that grows as much as this one did (half the budget at most):
    # removing only what this call needs forces the next call again, and every
    # forced step rewrites the cached body from its first changed item on.
    # Results larger than clear_at_least (3 000 tokens against 2 048) forced
    # every call of a tool loop before. The room is taken from what goes first
    # (older results, older steps); the recency floor, the results kept as
    # relevant and the latest step go only as far as the window needs.
    # clear_at_least=0 asks for no room: only what the window needs goes.
    room = min(grown, budget // 2) if pol.clear_at_least > 0 else 0
    # ... and a step of clear_at_least at most half the budget: in a window not
    # much larger than clear_at_least, a forced drop of 2 048 tokens dropped the
    # whole conversation, the result the question needed with it.
    step = min(pol.clear_at_least, budget // 2)
    # 1. clear tool results (Anthropic clears them itself when native)
    if pol.clear_tool_results and pol.native != "anthropic" and view.results:
        chosen: list[int] = []
        excerpts: dict[str, list[list[int]]] = {}
        reason = ""
        if need > 0:
            # The older results go first (least relevant first), in a step of at
            # least clear_at_least; the last keep_tool_results only as far as the
            # window needs.
            got = 0
            older = set(clear_candidates(view, pol, False))
            order, keep = clear_order(view, pol, scoring)
            goal = max(need + room, step)
            for k in order:
                if got >= (goal if k in older and k not in keep else need):
                    break
                r = removal(conv.conv, view, k, pol, scoring, excerpts, k in keep)
                if r > 0:
                    chosen.append(k)
                    got += r
            reason = "window"
        else:
            removable, first = _eligible_fast(view, pol)
            if removable >= max(pol.clear_at_least, 1) and first >= 0:
                after = view.total - (view.tokens[first - 1] if first else 0)
                if pol.pays(removable, after, cold):
                    # By age: a clear the window does not force takes every older
                    # result (relevance decides only what the window forces out,
                    # and what a question recalls). Keeping the most relevant here
                    # would clear them at a later step instead, when another
                    # result outranks them, and each such clear rewrites the
                    # cached body from far back: 1.6x the cost of the 200-call
                    # run (benches/conversation_run.py).
                    got = 0
                    for k in clear_candidates(view, pol, False):
                        r = view.cost(k) - STUB_ESTIMATE
                        if r > 0:
                            chosen.append(k)
                            got += r
                    # what is really removed (error results stay) must still pay
                    if chosen:
                        at = view.tokens[chosen[0] - 1] if chosen[0] else 0
                        if got < max(pol.clear_at_least, 1) or not pol.pays(
                            got, view.total - at, cold
                        ):
                            chosen = []
                    reason = "cold" if cold else "price"
        if chosen:
            chosen.sort()
            ids = [view.shown[k].item.id for k in chosen]
            entry: dict[str, Any] = {
                "op": "clear",
                "ids": ids,
                "inputs": pol.clear_tool_inputs,
                "reason": reason,
            }
            ex = {i: excerpts[i] for i in ids if i in excerpts}
            if ex:
                entry["excerpts"] = ex
            if scoring is not None and reason == "window":  # chosen by relevance
                sc = scoring.scores()
                entry["scores"] = {i: round(sc[i].score, 4) for i in ids if i in sc}
            view = _record(conv, view, entry, chosen[0], notes)
            need = view.total - budget
    # 2. compact the oldest span (OpenAI compacts itself when native)
    if need > 0 and pol.compact is not None and pol.native != "openai":
        span = _compact_span(view, pol)
        if span is not None:
            a, b = span
            ids = [view.shown[k].item.id for k in range(a, b)]
            if pol.dry_run:
                text = f"(dry run: a summary of {len(ids)} items would go here)"
            else:
                text = _summarise(pol, view.shown[a:b])
            entry = {"op": "compact", "ids": ids, "summary": {"content": text}, "reason": "window"}
            view = _record(conv, view, entry, a, notes)
            need = view.total - budget
    # 3. the tail recalls an earlier compile made for the standing question go
    # before any older step: they sit at the tail (dropping them rewrites only
    # the tail) and the recall after the fit makes them again in the room there
    # is. Kept, they held the room while a step holding the very result they
    # showed a part of was dropped (a compile made again after a usage count
    # moved the learned scale).
    if need > 0 and pol.drop_oldest:
        tail = [
            k
            for k in range(view.last_user + 1, len(view.shown))
            if view.shown[k].item.kind == "recall"
        ]
        if view.last_user >= 0 and tail:
            ids = [view.shown[k].item.id for k in tail]
            view = _record(
                conv, view, {"op": "drop", "ids": ids, "reason": "window"}, tail[0], notes
            )
            need = view.total - budget
    # 4. drop the oldest unprotected steps
    if need > 0 and pol.drop_oldest:
        # At least clear_at_least and the room, as clearing (above).
        ids, first = _drop_steps(view, max(need + room, step), need)
        if ids:
            view = _record(conv, view, {"op": "drop", "ids": ids, "reason": "window"}, first, notes)
            need = view.total - budget
    if need > 0:
        left = [s.item.id for k, s in enumerate(view.shown) if view.protected(k)]
        raise ContextOverflowError(
            f"conversation {conv.conversation_id!r}: {view.total} message tokens after the "
            f"policy's steps and {budget} fit; what is left is pinned or the latest user "
            f"message ({', '.join(left[:8]) or 'none'}) or the policy may not remove it "
            "(drop_oldest=False, no compact); nothing was recorded"
        )
    return view


def _recall_room(
    plan: _Plan, pol: ContextPolicy, scoring: Scoring, notes: list[RewriteNote]
) -> MakeRoom:
    """How the recall makes room when the fit left too little, rewriting the
    fewest cached tokens: a clear of the results nearest the tail that the
    question does not need (:func:`room_for_recall`), recorded as a window
    clear, as far as they make room; when the recall is starved (``floor_too``)
    and that is short, a drop of the oldest tool steps the question needs less
    (:func:`_unneeded_steps`); when nothing could be cleared, a drop of the
    oldest steps only where this compile's fit already rewrote the body
    (nothing more is lost); else nothing, and the recall takes the room there
    is."""

    def make(view: _View, need: int, below: float, floor_too: bool) -> _View:
        chosen: list[int] = []
        before = view.total
        if pol.clear_tool_results and pol.native != "anthropic":
            chosen = room_for_recall(view, pol, scoring, need, below, floor_too)
        if chosen:
            ids = [view.shown[k].item.id for k in chosen]
            sc = scoring.task_scores()
            entry: dict[str, Any] = {
                "op": "clear",
                "ids": ids,
                "inputs": pol.clear_tool_inputs,
                "reason": "window",
                "scores": {i: round(sc[i].score, 4) for i in ids if i in sc},
            }
            view = _record(plan, view, entry, chosen[0], notes)
        short = need - (before - view.total)
        if short <= 0 or not pol.drop_oldest:
            return view
        if floor_too:
            # The recall is starved (the recency floor is being cleared for it):
            # the oldest steps whose results the question needs less than what
            # is recalled go, call and stub together (a stub alone is 40 tokens;
            # eight of them were a quarter of a 2 048-token window while the two
            # results a two-part question asked for got 60 tokens each).
            ids, first = _unneeded_steps(view, scoring, below, short)
            if ids:
                return _record(
                    plan, view, {"op": "drop", "ids": ids, "reason": "window"}, first, notes
                )
        if chosen:
            return view
        # Results too small to clear (a stub is no shorter): drop whole steps,
        # but only where this compile's fit already rewrote the body from (the
        # cache of what follows is lost with or without the recall), and only
        # what the recall needs: a clear_at_least step here dropped the whole
        # conversation before a recall of a few hundred tokens (the task-success
        # bench's 2 048-token window).
        ids, first = _drop_steps(view, short, short)
        start = min((n.at_index for n in notes), default=-1)
        if ids and 0 <= start <= first:
            return _record(plan, view, {"op": "drop", "ids": ids, "reason": "window"}, first, notes)
        return view

    return make


def _unneeded_steps(
    view: _View, scoring: Scoring, below: float, need: int
) -> tuple[list[str], int]:
    """Ids of the oldest tool steps (an assistant's calls and their results, no
    user text, nothing protected, not the latest step) whose every result the
    question needs less than ``below`` (not relevant to it, or scoring under
    it), until ``need`` tokens are gone; and the index of the first."""
    ts = scoring.task_scores()
    n = len(view.shown)
    drop: list[int] = []
    got = 0
    for k, e in _step_spans(view):
        if got >= need or e >= n:
            break  # enough, or the latest step (it stays)
        items = [view.shown[j].item for j in range(k, e)]
        tool_step = all(it.kind in ("tool_call", "tool_result") for it in items)
        needed = any(
            needed_by_question(ts.get(it.id), below) for it in items if it.kind == "tool_result"
        )
        if tool_step and not needed and not any(view.protected(j) for j in range(k, e)):
            drop.extend(range(k, e))
            got += view.tokens[e - 1] - (view.tokens[k - 1] if k else 0)
    if not drop:
        return [], -1
    return [view.shown[j].item.id for j in drop], drop[0]


def _compact_span(view: _View, pol: ContextPolicy) -> tuple[int, int] | None:
    """The oldest run of unprotected items, ending before the last
    ``compact_keep_recent`` and cut where no call is split from its result."""
    n = len(view.shown)
    closed = boundaries(view)
    end = n - pol.compact_keep_recent
    a = 0
    while a < end and (view.protected(a) or not closed[a]):
        a += 1
    b = a
    while b < end and not view.protected(b):
        b += 1
    while b > a and not closed[b]:
        b -= 1
    if b - a < 2:
        return None
    return a, b


def _summarise(pol: ContextPolicy, span: list[Shown]) -> str:
    # The summariser's input is bounded, for a backend and a callable alike: a
    # span of huge tool results would otherwise need a window as large as the
    # one it relieves (letta#3279). A callable gets the items with their content
    # cut the same way (at most _SUMMARY_ITEM_CHARS each, _SUMMARY_INPUT_CHARS
    # in all; the items past that are left out).
    from dataclasses import replace

    lines: list[str] = []
    seen: list[ConversationItem] = []
    room = _SUMMARY_INPUT_CHARS
    for s in span:
        it = s.item
        cut = _SUMMARY_ITEM_CHARS - len(_CUT)
        text = s.content if len(s.content) <= _SUMMARY_ITEM_CHARS else s.content[:cut] + _CUT
        text = text[: max(room, 0)]
        who = it.tool_name if it.kind in ("tool_call", "tool_result") else it.role
        lines.append(f"{it.kind} ({who}): {text}")
        seen.append(it if text is it.content else replace(it, content=text))
        room -= len(text)
        if room <= 0:
            lines.append("[...]")
            break
    c = pol.compact
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
        out = c(seen)  # type: ignore[misc]
    if not isinstance(out, str) or not out.strip():
        raise InvalidArgumentError(
            f"the compact backend or callable returned {type(out).__name__} {out!r:.40}; "
            "expected the summary text"
        )
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(
            "the compact backend or callable returned a summary with a lone surrogate "
            f"({out!r:.60}); nothing was recorded"
        ) from None
    return out


#: What a summariser is given at most (characters): each item's content cut to
#: _SUMMARY_ITEM_CHARS (the cut marked), and the span's text to _SUMMARY_INPUT_CHARS.
_SUMMARY_INPUT_CHARS = 200_000
_SUMMARY_ITEM_CHARS = 4_000
_CUT = " [...]"


def _drop_steps(view: _View, goal: int, need: int) -> tuple[list[str], int]:
    """Ids of the oldest whole steps to drop until ``goal`` tokens are gone (the
    latest step only as far as ``need``, what the window needs: the room beyond
    it is taken from older steps, never from the result the agent just got),
    and the index of the first. A step runs from a cut to the next cut (a user
    text, or an assistant item after a non-assistant one) where no call is
    split from its result; one holding a protected item stays, unless dropping
    every other step is not enough: then its unprotected items go too (see
    :func:`_drop_inside`)."""
    n = len(view.shown)
    drop: list[int] = []
    kept: list[tuple[int, int]] = []  # steps holding a protected item
    got = 0
    for k, e in _step_spans(view):
        if got >= goal or (e == n and got >= need):
            break  # enough; the latest step only as far as the window needs
        if any(view.protected(j) for j in range(k, e)):
            kept.append((k, e))
        else:
            drop.extend(range(k, e))
            got += view.tokens[e - 1] - (view.tokens[k - 1] if k else 0)
    if got < need:
        got += _drop_inside(view, kept, need - got, drop)
    if not drop:
        return [], -1
    drop.sort()
    return [view.shown[j].item.id for j in drop], drop[0]


def _drop_inside(view: _View, steps: list[tuple[int, int]], need: int, drop: list[int]) -> int:
    """The last resort: the unprotected items of steps that hold a protected one
    (a pinned message, the latest user text, a recall), oldest first, until
    ``need`` tokens are gone; then the recalls of the standing question (an
    earlier compile's: they are not what must be sent). Appended to ``drop``.
    A call goes with its result when neither must stay; the result of a pinned
    call goes alone (the call is answered by the renderer's stub), and so does
    the call of a pinned result (the result is sent as text): what must be sent
    is the pinned items and the latest user message, and when they fit beside
    the instructions, the compile fits."""
    got = 0
    done: set[int] = set()
    for must_stay in (view.protected, lambda j: j == view.last_user or view.shown[j].item.pinned):
        for a, b in steps:
            pairs: dict[str, list[int]] = {}
            for j in range(a, b):
                it = view.shown[j].item
                if it.kind in ("tool_call", "tool_result") and it.call_id is not None:
                    pairs.setdefault(it.call_id, []).append(j)
            for j in range(a, b):
                if got >= need:
                    return got
                if j in done or must_stay(j):
                    continue
                it = view.shown[j].item
                unit = [j]
                if it.kind in ("tool_call", "tool_result") and it.call_id is not None:
                    unit = [i for i in pairs[it.call_id] if i not in done and not must_stay(i)]
                for i in unit:
                    done.add(i)
                    drop.append(i)
                    got += view.cost(i)
    return got


def _step_spans(view: _View) -> Iterator[tuple[int, int]]:
    """The steps of ``view`` in order, as ``(start, end)`` index ranges: a step
    runs from a cut to the next (a user text, or an assistant item after a
    non-assistant one) where no call is split from its result."""
    closed = boundaries(view)
    n = len(view.shown)
    k = 0
    while k < n:
        e = k + 1
        while e < n and not (closed[e] and _step_start(view, e)):
            e += 1
        yield k, e
        k = e


def _step_start(view: _View, e: int) -> bool:
    it = view.shown[e].item
    if (it.role == "user" and it.kind == "text") or it.kind == "summary":
        return True
    prev = view.shown[e - 1].item
    return it.role == "assistant" and prev.role != "assistant"


def _record(
    conv: _Plan,
    view: _View,
    entry: dict[str, Any],
    at: int,
    notes: list[RewriteNote],
) -> _View:
    before = view.total
    prefix = view.tokens[at - 1] if at else 0
    at_item = view.shown[at].item.id
    new = conv.record({**entry, "time": round(_time.time(), 3)})
    notes.append(
        RewriteNote(
            at_item=at_item,
            at_index=at,
            reason=entry["reason"],
            action=entry["op"],
            tokens_removed=before - new.total,
            prefix_tokens=prefix,
            detail=f"{len(entry['ids'])} items; the body is rewritten from item {at_item} on",
        )
    )
    return new


def _twin(conv: Conversation) -> Conversation:
    """A dry run's copy of the conversation's state: transformations are
    recorded into it, the conversation itself is untouched."""
    from dataclasses import replace

    from rampart.conversation.core import Conversation

    twin = Conversation.__new__(Conversation)
    twin.__dict__.update(conv.__dict__)
    twin._items = list(conv._items)
    twin._index = dict(conv._index)
    twin._transforms = list(conv._transforms)
    twin._log = list(conv._log)
    twin._shared = None
    # its own view: a recall grows the view in place (it is at the tail)
    v = conv._view
    twin._view = replace(
        v,
        shown=list(v.shown),
        tokens=list(v.tokens),
        results=list(v.results),
        results_by_tool=dict(v.results_by_tool),
    )
    return twin


def attach(
    result: CompileResult,
    conversation: Any,
    context_window: int | None,
    reply_tokens: int | None,
    policy: ContextPolicy | None,
    registry: Any = None,
    task_text: str | None = None,
) -> CompileResult:
    """``BlockRegistry.compile``'s hook: the compile step's outcome, on the result."""
    if conversation is None:
        raise InvalidArgumentError(
            "context_window, reply_tokens and policy apply to a conversation: pass "
            "conversation=rampart.Conversation(...)"
        )
    embedder = getattr(registry, "_embedder", None)
    result._context = compile_conversation(
        result, conversation, context_window, reply_tokens, policy, embedder, task_text
    )
    return result


def may_wait(conversation: Any, policy: ContextPolicy | None) -> bool:
    """Whether compiling ``conversation`` may call a model (a compact backend) or
    a store (a shared conversation records its transformations there)."""
    return bool(getattr(conversation, "shared", False)) or (
        policy is not None and policy.compact is not None
    )
