"""What the compile step did to a conversation: :class:`ContextResult` (the
view it compiled, rendered in any format on demand) and the per-item report,
with each result's relevance score and rank (docs/specification.md §9)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rampart.conversation.counting import ITEM_OVERHEAD
from rampart.conversation.items import ConversationItem, MessageReport, RewriteNote, one_line
from rampart.conversation.policy import ContextPolicy
from rampart.conversation.shapes import Shown, render
from rampart.relevance import ItemScore

if TYPE_CHECKING:
    from rampart.conversation.core import Conversation, _View
    from rampart.conversation.steps import Scoring

__all__ = ["ContextResult"]


class ContextResult:
    """What the compile step did to the conversation: the view it compiled (as
    the messages of any format), the per-item report (built on first access),
    the budget it worked to and where it rewrote the body's prefix."""

    __slots__ = (
        "_n",
        "_n_items",
        "_report",
        "_scoring",
        "_shown",
        "_state",
        "budget",
        "constant",
        "context_window",
        "conversation",
        "fixed_tokens",
        "message_tokens",
        "policy",
        "recalled",
        "reply_tokens",
        "rewrites",
        "scale",
    )

    def __init__(
        self,
        conversation: Conversation,
        state: Conversation,
        view: _View,
        policy: ContextPolicy,
        context_window: int | None,
        reply_tokens: int,
        fixed_tokens: int,
        budget: int | None,
        scale: float,
        rewrites: list[RewriteNote],
        scoring: Scoring | None = None,
        recalled: list[str] | None = None,
        constant: float = 0.0,
    ) -> None:
        self.conversation = conversation
        self._state = state
        # The view's lists only grow (a rebuild makes a new view): its length now
        # is this result's snapshot, with no copy on the compile path.
        self._shown = view.shown
        self._n = len(view.shown)
        self._n_items = len(state._items)
        self.policy = policy
        self.context_window = context_window
        self.reply_tokens = reply_tokens
        self.fixed_tokens = fixed_tokens
        self.message_tokens = view.total
        self.budget = budget
        self.scale = scale
        self.rewrites = rewrites
        self._scoring = scoring
        #: ids of the recall items this compile appended at the tail
        self.recalled = recalled or []
        #: the fixed tokens per request learned by observe_usage (in the budget)
        self.constant = constant
        self._report: list[MessageReport] | None = None

    @property
    def native(self) -> str | bool:
        """The policy's provider-native setting (the adapters emit its edits)."""
        return self.policy.native

    @property
    def shown(self) -> list[Shown]:
        return self._shown[: self._n]

    @property
    def total_tokens(self) -> int:
        """Instructions + tools + messages, in the provider's units (scaled)."""
        return math.ceil((self.fixed_tokens + self.message_tokens) * self.scale + self.constant)

    @property
    def transformed(self) -> bool:
        """Whether this compile rewrote the body (a new transformation)."""
        return bool(self.rewrites)

    def messages(self, format: str = "openai_chat") -> list[dict[str, Any]]:
        """The compiled messages in ``format`` (a new list of new dicts each call)."""
        return render(self._shown[: self._n], format)

    @property
    def message_report(self) -> list[MessageReport]:
        if self._report is None:
            scores: dict[str, ItemScore] = {}
            if self._scoring is not None:
                with self.conversation._lock:
                    scores = self._scoring.scores()
            self._report = _report(
                self.shown, self._state._items[: self._n_items], self._state, scores
            )
        return self._report

    @property
    def query(self) -> str | None:
        """The current step's query the results were scored against (None when
        relevance is off)."""
        return None if self._scoring is None else self._scoring.query

    def __repr__(self) -> str:
        return (
            f"<ContextResult {self._n} items shown, {self.message_tokens} message tokens, "
            f"budget {self.budget}, {len(self.rewrites)} rewrites>"
        )


def _report(
    shown: Sequence[Shown],
    items: Sequence[ConversationItem],
    state: Conversation,
    scores: dict[str, ItemScore],
) -> list[MessageReport]:
    by_id = {s.item.id: s for s in shown}
    why: dict[str, tuple[str, str]] = {}
    excerpted: set[str] = set()
    recall_of: dict[str, tuple[str, float | None]] = {}
    for t in state.transformations:
        if not t.active:
            continue
        if t.kind == "recall":
            if t.summary_id is not None:
                sc = dict(t.scores).get(t.ids[0]) if t.ids else None
                recall_of[t.summary_id] = (t.ids[0] if t.ids else "?", sc)
            continue
        action = {"clear": "cleared", "compact": "compacted", "drop": "dropped"}[t.kind]
        recorded = dict(t.scores)
        ex = {i for i, _ in t.excerpts}
        for i in t.ids:
            detail = f"{t.reason}; summary {t.summary_id}" if t.summary_id else t.reason
            if t.kind == "clear":
                sc = recorded.get(i)
                if i in ex:
                    detail += (
                        f"; relevant lines kept (relevance {sc:.2f})" if sc is not None else ""
                    )
                elif sc is not None:
                    detail += f"; least relevant (relevance {sc:.2f})"
                else:
                    detail += "; age"
            why[i] = (action, detail)
            if i in ex:
                excerpted.add(i)
            else:
                excerpted.discard(i)
    ranked = sorted(scores.values(), key=lambda x: -x.score)
    rank = {x.key: r for r, x in enumerate(ranked, 1)}
    # Each call's arguments by its id, as the calls come: a result and a recall
    # (both after their call) name the call's arguments too. One preview per call.
    arguments: dict[str, str] = {}
    out = []
    for idx, it in enumerate(items):
        args = None
        if it.call_id is not None:
            if it.kind == "tool_call":
                args = arguments[it.call_id] = one_line(it.content)
            else:
                args = arguments.get(it.call_id)
        act = why.get(it.id)
        s = by_id.get(it.id)
        reason: str | None
        if s is not None and s.content is not it.content:  # shown as a stub
            reason = act[1] if act is not None else "input cleared with its result"
            action = "excerpted" if it.id in excerpted else "cleared"
            tokens = state._count(s.content) + ITEM_OVERHEAD
        elif s is not None:
            reason = "pinned" if it.pinned else None
            if it.kind == "summary":
                reason = f"summary of {len(it.covers)} items"
            action, tokens = "kept", it.tokens
            if it.id in recall_of:
                src, at = recall_of[it.id]
                action = "recalled"
                rel = f" (relevance {at:.2f})" if at is not None else ""
                reason = f"{src} brought back at the tail: relevant to the step{rel}"
        elif act is not None:
            action, reason, tokens = act[0], act[1], 0
        else:  # a summary a later summary covers
            action, reason, tokens = "compacted", "covered by a later summary", 0
        scored = scores.get(it.id)
        out.append(
            MessageReport(
                it.id,
                action,
                reason,
                tokens,
                it.tokens,
                idx,
                it.role,
                it.kind,
                None if scored is None else round(scored.score, 4),
                rank.get(it.id),
                it.call_id,
                it.tool_name,
                args,
            )
        )
    return out
