"""The relevance-aware steps of a compile (SPEC §9; docs/conversation.md, "Keep
what the step needs"): the step's scores, the order the clear step takes tool
results in, excerpts, and recall at the tail. :mod:`rampart.conversation.plan`
runs them; they record only through the plan they are handed.
"""

from __future__ import annotations

import time as _time
from typing import TYPE_CHECKING, Any, Protocol

from rampart.conversation import retention
from rampart.conversation.core import RECALL_TOOL_NAME
from rampart.conversation.counting import ITEM_OVERHEAD
from rampart.conversation.policy import ContextPolicy
from rampart.relevance import ItemScore

if TYPE_CHECKING:
    from rampart.conversation.core import Conversation, _View

__all__ = [
    "STUB_ESTIMATE",
    "Scoring",
    "boundaries",
    "clear_candidates",
    "clear_order",
    "recall",
    "removal",
]

#: The stub of a cleared result, for planning (the exact count is taken when
#: the clear is recorded).
STUB_ESTIMATE = 40


class PlanView(Protocol):
    """What the steps use of the plan (rampart.conversation.plan._Plan)."""

    conv: Conversation
    twin: Conversation | None
    entries: list[dict[str, Any]]

    def record(self, entry: dict[str, Any]) -> _View:
        """Record ``entry`` into the plan's twin; the view after it."""
        ...


class Scoring:
    """The relevance of one compile, scored lazily (once per compile, only when a
    step needs it) against every tool result: for the step's ``query`` (the
    question and the latest calls: which results go first when the window
    forces), and for the question alone, ``task_query`` (which results stay:
    stable across the steps of one question, so what is kept at one step is not
    cleared at the next — that would rewrite the cached body from far back)."""

    __slots__ = (
        "_query",
        "_scores",
        "_task_query",
        "_task_scores",
        "_task_text",
        "_view",
        "conv",
        "embedder",
    )

    def __init__(
        self, conv: Conversation, view: _View, task_text: str | None, embedder: Any
    ) -> None:
        self.conv = conv
        self.embedder = embedder
        # The queries are read from the compile's first view (its lists only grow;
        # a recall grows a twin's), on first use: most compiles never score.
        self._view = view
        self._task_text = task_text
        self._query: str | None = None
        self._task_query: str | None = None
        self._scores: dict[str, ItemScore] | None = None
        self._task_scores: dict[str, ItemScore] | None = None

    @property
    def query(self) -> str:
        """The step's query: the question and the latest assistant message's calls."""
        if self._query is None:
            self._query = retention.step_query(self._view, self._task_text)
        return self._query

    @property
    def task_query(self) -> str:
        """The question alone (or the compile's ``task_text``)."""
        if self._task_query is None:
            self._task_query = retention.step_query(self._view, self._task_text, calls=False)
        return self._task_query

    def _score(self, query: str) -> dict[str, ItemScore]:
        conv = self.conv
        ids = [it.id for it in conv._items if it.kind == "tool_result" and it.native is None]
        return retention.relevance_of(conv).scores(conv, query, ids, self.embedder)

    def scores(self) -> dict[str, ItemScore]:
        """Every tool result scored for the step's query (once per compile)."""
        if self._scores is None:
            self._scores = self._score(self.query)
            if self.task_query == self.query:
                self._task_scores = self._scores
        return self._scores

    def task_scores(self) -> dict[str, ItemScore]:
        """Every tool result scored for the question alone (once per compile)."""
        if self._task_scores is None:
            if self.task_query == self.query:
                return self.scores()
            self._task_scores = self._score(self.task_query)
        return self._task_scores


def boundaries(view: _View) -> list[bool]:
    """``closed[e]``: no tool call in ``shown[:e]`` has its result at ``e`` or
    later (a cut at ``e`` splits no call from its result). One pass; a call
    with no result anywhere does not hold a cut open (the renderer stubs it)."""
    answered = {s.item.call_id for s in view.shown if s.item.kind == "tool_result"}
    closed = [True] * (len(view.shown) + 1)
    open_calls: set[str] = set()
    for e, s in enumerate(view.shown):
        closed[e] = not open_calls
        it = s.item
        if it.kind == "tool_call" and it.call_id in answered:
            open_calls.add(it.call_id or "")
        elif it.kind == "tool_result":
            open_calls.discard(it.call_id or "")
    closed[len(view.shown)] = not open_calls
    return closed


def clear_candidates(view: _View, pol: ContextPolicy, forced: bool) -> list[int]:
    """Results the policy may clear, in the order it clears them by age: oldest
    first; the last ``keep_tool_results`` and error results (``keep_errors``)
    only when the window forces it (newest last); recall output never while
    its question stands."""
    keep = pol.keep_tool_results
    names = set(pol.exclude_tools)
    res = [
        k
        for k in view.results
        if view.shown[k].item.tool_name not in names and not view.protected(k)
    ]
    old = set(view.results[: len(view.results) - keep] if keep else view.results)
    older = [
        k
        for k in res
        if k in old
        and not (pol.keep_errors and view.shown[k].item.is_error)
        and not (k > view.last_user and view.shown[k].item.tool_name == RECALL_TOOL_NAME)
    ]
    if not forced:
        return older
    seen = set(older)
    return older + [k for k in res if k not in seen]


def clear_order(
    view: _View, pol: ContextPolicy, scoring: Scoring | None
) -> tuple[list[int], set[int]]:
    """The results in the order a clear the window forces takes them, and those
    it keeps until last (the most relevant to the question). By age when
    relevance is off; else the older results least relevant to the step first
    (ties: oldest first), then the recency floor and errors the same way, then
    the kept ones."""
    base = clear_candidates(view, pol, True)
    if scoring is None:
        return base, set()
    older = clear_candidates(view, pol, False)
    zero = ItemScore("", 0.0, 0.0, None, ())
    kept_by = scoring.task_scores()

    def task_score(k: int) -> float:
        return kept_by.get(view.shown[k].item.id, zero).score

    # the most relevant to the question, among every result the step may clear
    # (a recent one the question needs outlasts the recency floor's others)
    ranked = sorted(base, key=lambda k: (-task_score(k), -k))  # ties: the newest
    keep = {
        k
        for k in ranked[: pol.keep_relevant]
        if retention.is_relevant(kept_by.get(view.shown[k].item.id))
    }
    old = set(older)
    kept = sorted(keep, key=lambda k: (task_score(k), k))
    sc = scoring.scores()

    def score(k: int) -> float:
        return sc.get(view.shown[k].item.id, zero).score

    first = sorted((k for k in older if k not in keep), key=lambda k: (score(k), k))
    rest = sorted((k for k in base if k not in old and k not in keep), key=lambda k: (score(k), k))
    return first + rest + kept, keep


def removal(
    conv: Conversation,
    view: _View,
    k: int,
    pol: ContextPolicy,
    scoring: Scoring | None,
    excerpts: dict[str, list[list[int]]],
    relevant: bool = False,
) -> int:
    """Tokens clearing result ``k`` removes (0: not worth it). One of the most
    relevant results (``relevant``: the window forces it out), when long, keeps
    its best passages as an excerpt (recorded in ``excerpts``)."""
    it = view.shown[k].item
    cost = view.cost(k)
    if relevant and scoring is not None and pol.excerpts and it.kind == "tool_result":
        s = scoring.task_scores().get(it.id)
        if retention.is_relevant(s) and cost > 2 * pol.excerpt_tokens and s is not None:
            rel = retention.relevance_of(conv)
            spans = retention.best_spans(rel, it, s, pol.excerpt_tokens * 3)
            text = retention.excerpt_text(conv, it, spans)
            r = cost - (conv._count(text) + ITEM_OVERHEAD)
            if r > 0:
                excerpts[it.id] = spans
                return r
    return max(cost - STUB_ESTIMATE, 0)


#: A recall smaller than this is not worth sending: below it, a recall takes this
#: much and the window's steps make room (a passage or two is too little to hold
#: the line a paraphrased question needs: 256 kept 83 % of the tune half's needles,
#: 768 kept 88 %; benches/needle_tune.py).
MIN_RECALL_TOKENS = 768


def _without_worst(
    spans: list[list[int]], score: ItemScore, passages: list[Any]
) -> list[list[int]]:
    """``spans`` less the one whose passage ranks lowest for the query."""
    rank = {passages[j].offset: r for r, j in enumerate(score.best)}
    worst = max(range(len(spans)), key=lambda i: rank.get(spans[i][2], len(rank)))
    return spans[:worst] + spans[worst + 1 :]


#: A recalled result shares the tail with the others recalled for the same step.
_RECALL_TOP = 2
#: ... and is recalled only when it scores this close to the best result.
_RECALL_RATIO = 0.6


def recall(
    conv: PlanView,
    view: _View,
    pol: ContextPolicy,
    scoring: Scoring,
    budget: int | None,
    recalled: list[str],
) -> _View:
    """Append at the tail the cleared results the step needs (SPEC §9): the
    best-scoring results that are not shown in full, when they are relevant,
    not already recalled for this question, and the tail is not inside a call."""
    c = conv.conv
    # A question recalls: only a compile whose latest item is the user's text
    # (an agent's later steps call the recall tool themselves). O(transformations)
    # while nothing was ever removed: the hot path.
    if view.last_user < 0 or any(s.item.kind != "recall" for s in view.shown[view.last_user + 1 :]):
        return view
    state = conv.twin if conv.twin is not None else c  # this compile's steps so far
    if not any(t.active and t.kind != "recall" for t in state._transforms):
        return view
    key = (scoring.query, view.version, len(view.shown))
    if c._recall_checked == key:  # nothing changed since the last compile looked
        return view
    if not boundaries(view)[len(view.shown)]:
        return view
    partial = {s.item.id: s.content for s in view.shown if s.content is not s.item.content}
    full = {s.item.id for s in view.shown if s.content is s.item.content}
    hidden = [
        it.id
        for it in c._items
        if it.kind == "tool_result" and it.native is None and it.id not in full
    ]
    already = {
        view.shown[k].item.covers[0]
        for k in range(view.last_user + 1, len(view.shown))
        if view.shown[k].item.kind == "recall" and view.shown[k].item.covers
    }
    sc = scoring.scores()
    ranked = sorted(sc.values(), key=lambda x: -x.score)
    if not ranked:
        return view
    top = ranked[0].score
    hidden_set = set(hidden)
    rel = retention.relevance_of(c)

    def shown_in_part(x: ItemScore) -> bool:
        # an excerpt that already holds the best passage needs no recall
        text = partial.get(x.key)
        return bool(text and x.best and rel.index.passages(x.key)[x.best[0]].text in text)

    picks = [
        x
        for x in ranked[:_RECALL_TOP]
        if x.key in hidden_set
        and x.key not in already
        and retention.is_relevant(x)
        and x.score >= _RECALL_RATIO * top
        and not shown_in_part(x)
    ]
    n = max(len(picks), 1)
    cap = pol.recall_max_tokens // n
    if budget is not None:
        cap = min(cap, max(budget // 4, 0) // n)
        # Within the room the window has left, when that holds a useful recall: a
        # recall that forces a clear rewrites the cached body from the cleared item.
        free = (budget - view.total) // n
        if free >= MIN_RECALL_TOKENS:
            cap = min(cap, free)
        else:
            cap = min(cap, MIN_RECALL_TOKENS)
    if cap <= 0:
        picks = []
    for x in picks:
        it = c._items[c._index[x.key]]
        spans: list[list[int]] = []
        if it.tokens > cap:
            spans = retention.best_spans(rel, it, x, max(cap * 3, 200))
            # the header and the framing count too: fewer passages until it fits
            while len(spans) > 1 and (
                c._count(retention.recall_text(c, it, spans)) + ITEM_OVERHEAD > cap
            ):
                spans = _without_worst(spans, x, rel.index.passages(it.id))
        entry = {
            "op": "recall",
            "ids": [it.id],
            "spans": spans,
            "reason": "relevance",
            "scores": {it.id: round(x.score, 4)},
            "time": round(_time.time(), 3),
        }
        view = conv.record(entry)
        recalled.append(view.shown[-1].item.id)
    if not picks:
        c._recall_checked = key
    return view
