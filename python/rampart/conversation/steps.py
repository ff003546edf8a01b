"""The relevance-aware steps of a compile (docs/specification.md §9; docs/conversation.md, "Keep
what the step needs"): the step's scores, the order the clear step takes tool
results in, excerpts, and recall at the tail. :mod:`rampart.conversation.plan`
runs them; they record only through the plan they are handed.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from rampart.conversation import retention
from rampart.conversation.core import RECALL_TOOL_NAME
from rampart.conversation.counting import ITEM_OVERHEAD
from rampart.conversation.policy import ContextPolicy
from rampart.relevance import ItemScore, lexical

if TYPE_CHECKING:
    from rampart.conversation.core import Conversation, _View
    from rampart.conversation.items import ConversationItem

__all__ = [
    "STUB_ESTIMATE",
    "Scoring",
    "boundaries",
    "clear_candidates",
    "clear_order",
    "needed_by_question",
    "recall",
    "removal",
    "room_for_recall",
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
    the kept ones, then the answer of a recall the model just called."""
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
    # the answer of a recall the model just called goes last of all: clearing what
    # the model asked to have back would only make it ask again
    newest = max(view.results, default=-1)
    if newest >= 0 and view.shown[newest].item.tool_name == RECALL_TOOL_NAME:
        if newest in rest or newest in kept:
            tail = [k for k in rest if k != newest] + [k for k in kept if k != newest]
            return first + tail + [newest], keep
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


#: The room a recall asks the window for: when the fit leaves less than this
#: (and less than the recall needs), the latest results the question does not
#: need are cleared to make it (:func:`room_for_recall`); with more, the recall
#: takes the room there is and rewrites nothing. A passage or two is too little
#: to hold the line a paraphrased question needs: on the needle set's tune half
#: in an 8 000-token window, asking no room kept 73 % of the evidence, 256 kept
#: 77 %, 768 and 1 200 kept 85 % (benches/needle_bench.py; at 16 000, 92 % for all).
MIN_RECALL_TOKENS = 768

#: Everything one compile recalls takes at most this part of the budget (a
#: third), for each part of the question, two parts' at most: a quarter left a
#: 2 048-token window's recall 60 tokens a result, the header's first lines and
#: not the Date line asked for (task-success bench, tune split: 9 of 12 commit
#: questions reached the model with a third, 7 with a quarter; 4 of 8 two-part
#: questions with two thirds, 1 with a third). Past 8 000 tokens,
#: recall_max_tokens (2 000) is the cap.
RECALL_BUDGET_PART = 3

#: A recalled result shares the tail with the others recalled for the same step.
_RECALL_TOP = 2
#: ... and is recalled only when it scores this close to the best result.
_RECALL_RATIO = 0.6
#: The least a recall shows beside its header (tokens): less is not sent.
_RECALL_LEAST_BODY = 16

#: Makes ``need`` tokens of room in the view (a clear recorded by the plan);
#: the view after it.
MakeRoom = Callable[["_View", int, float, bool], "_View"]


def recall(
    conv: PlanView,
    view: _View,
    pol: ContextPolicy,
    scoring: Scoring,
    budget: int | None,
    recalled: list[str],
    make_room: MakeRoom | None = None,
) -> _View:
    """Append at the tail the cleared results the step needs: for the
    question (or each of its parts, :func:`retention.query_parts`) the
    best-scoring results that are not shown in full, when they are relevant,
    not already recalled for this question, and the tail is not inside a call.

    Runs after the fit, into the room the fit left: what comes before the tail
    is what the same compile without the recall sends. Everything recalled
    together is at most ``pol.recall_max_tokens`` (headers and framing
    included) and a third of the budget a part, two thirds at most
    (:data:`RECALL_BUDGET_PART`): for a question of several parts shared among
    the picks by need (a short result leaves the rest to the others), for one
    part the best pick's first. When the room left is under
    :data:`MIN_RECALL_TOKENS` and under what the picks need, ``make_room`` may
    clear results the question does not need (the plan records it)."""
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
    asked = _recall_picks(c, view, scoring)
    picks = [x for x, _ in asked]
    if not picks:
        c._recall_checked = key
        return view
    rel = retention.relevance_of(c)
    items = [c._items[c._index[x.key]] for x in picks]
    parts = len({q for _, q in asked})  # the question's parts the picks answer
    cap = pol.recall_max_tokens
    if budget is not None:
        cap = min(cap, max(budget * min(parts, 2) // RECALL_BUDGET_PART, 0))
    needs = [_recall_need(c, rel, it, x, cap) for it, x in zip(items, picks, strict=True)]
    want = min(cap, sum(needs))
    if budget is not None:
        room = budget - view.total
        floor = min(want, MIN_RECALL_TOKENS)
        if room < floor and make_room is not None:
            # what scores under every pick is less needed than what is recalled
            below = min(x.score for x in picks)
            view = make_room(view, floor - room, below, False)
            room = budget - view.total
            useful = sum(_recall_cost(c, it, [[1, 1, 0, 0]]) + MIN_RECALL_BODY for it in items)
            small = budget < SMALL_BUDGET and room < min(useful, want)
            if room < MIN_USEFUL_RECALL or small:
                # the older results could not make it: the recency floor too, as
                # a window-forced clear would take it (what is recalled is needed
                # more than what it clears). In a small budget, also under each
                # pick's header and a body of MIN_RECALL_BODY: two picks sharing
                # 260 tokens of a 2 048-token window showed two 85-token headers
                # and two lines each (task-success tune, two-part questions:
                # 4 -> 6 of 8 with both needles in the request). In a larger one
                # the cached body is worth more than those lines, and the room
                # there is held both needles of a two-part question at 9 000.
                view = make_room(view, floor - room, below, True)
                room = budget - view.total
        want = min(want, max(room, 0))
    # A question of several parts: shared by need, the smallest first, each at
    # most an even share of what is left, so what a short result does not use
    # goes to the longer ones (every part needs its result). A question of one
    # part: the best result first, the runner-up gets what is left (halving a
    # small room showed two results' first lines and neither's answer).
    chosen: dict[int, list[list[int]]] = {}
    # the last recall ends with retention.RECALL_CLOSING: its room first
    left = want - c._count(retention.RECALL_CLOSING)
    several = parts > 1
    order = (
        sorted(range(len(picks)), key=lambda i: (needs[i], i))
        if several
        else list(range(len(picks)))
    )
    for pos, i in enumerate(order):
        share = min(needs[i], left // (len(order) - pos) if several else left)
        got = _recall_spans(c, rel, items[i], picks[i], share, asked[i][1])
        if got is not None:
            chosen[i], used = got
            left -= used
    last = max(chosen, default=-1)
    for i, x in enumerate(picks):  # at the tail in the order they were picked
        if i not in chosen:
            continue
        entry = {
            "op": "recall",
            "ids": [x.key],
            "spans": chosen[i],
            "reason": "relevance",
            "scores": {x.key: round(x.score, 4)},
            "time": round(_time.time(), 3),
        }
        if i == last:  # marks where the recalled text ends and the question begins
            entry["closing"] = True
        view = conv.record(entry)
        recalled.append(view.shown[-1].item.id)
    return view


def _recall_picks(c: Conversation, view: _View, scoring: Scoring) -> list[tuple[ItemScore, str]]:
    """What the question recalls: a question of one part (the common case) its
    ``_RECALL_TOP`` best results scoring within ``_RECALL_RATIO`` of the best;
    a question of several parts the best of each part
    (:func:`retention.query_parts`, at most :data:`retention.MAX_PARTS`) — each
    a result that is relevant, hidden (cleared, dropped, or excerpted without
    its best passage) and not recalled for this question yet; each with the
    text it was picked for (the question, or its part)."""
    partial = {s.item.id: s.content for s in view.shown if s.content is not s.item.content}
    full = {s.item.id for s in view.shown if s.content is s.item.content}
    hidden = {
        it.id
        for it in c._items
        if it.kind == "tool_result" and it.native is None and it.id not in full
    }
    already = {
        view.shown[k].item.covers[0]
        for k in range(view.last_user + 1, len(view.shown))
        if view.shown[k].item.kind == "recall" and view.shown[k].item.covers
    }
    rel = retention.relevance_of(c)

    def wanted(x: ItemScore, top: float) -> bool:
        if x.key not in hidden or x.key in already or x.score < _RECALL_RATIO * top:
            return False
        if not retention.is_relevant(x):
            return False
        # an excerpt that already holds the best passage needs no recall
        text = partial.get(x.key)
        return not (text and x.best and rel.index.passages(x.key)[x.best[0]].text in text)

    def ranked(scores: dict[str, ItemScore]) -> list[ItemScore]:
        return sorted(scores.values(), key=lambda x: (-x.score, x.key))

    whole = ranked(scoring.scores())
    if not whole:
        return []
    parts = retention.query_parts(scoring.task_query)
    if len(parts) < 2:
        q = scoring.task_query
        return [(x, q) for x in whole[:_RECALL_TOP] if wanted(x, whole[0].score)]
    # Several parts: each part's best hidden relevant result (no cut at a rank:
    # the second part's result may rank anywhere for the whole question). Two
    # parts that want the same result: it goes to the part it scores higher
    # for, and the other takes its next (parts propose in turn, as in a
    # stable matching: "which typeface did the brand guide avoid, and which
    # class puts the brand colours on slides" both score the brand file first).
    ids = [it.id for it in c._items if it.kind == "tool_result" and it.native is None]
    wants: list[list[ItemScore]] = []
    for part in parts:
        r = ranked(rel.scores(c, part, ids, scoring.embedder))
        # A part whose best result is recalled for this question already has
        # what it asks for: it recalls nothing (it used to take its next hidden
        # result, and a compile made again stacked runners-up at the tail). One
        # whose best is in view still recalls its best hidden result: the one in
        # view may be the wrong one.
        if r and r[0].key in already:
            wants.append([])
            continue
        wants.append([x for x in r if wanted(x, r[0].score)][:_PART_CHOICES])
    held: dict[str, int] = {}  # result -> the part holding it
    nxt = [0] * len(parts)
    free = list(range(len(parts)))
    while free:
        i = free.pop(0)
        if nxt[i] >= len(wants[i]):
            continue
        x = wants[i][nxt[i]]
        nxt[i] += 1
        j = held.get(x.key)
        if j is None:
            held[x.key] = i
        elif x.score > next(y.score for y in wants[j] if y.key == x.key):
            held[x.key] = i
            free.append(j)
        else:
            free.append(i)
    by_part = {i: k for k, i in held.items()}
    return [
        (next(x for x in wants[i] if x.key == by_part[i]), parts[i])
        for i in range(len(parts))
        if i in by_part
    ]


#: Results a part may fall back to when another part holds its best.
_PART_CHOICES = 4


def _recall_cost(c: Conversation, it: ConversationItem, spans: list[list[int]]) -> int:
    """Tokens of the recall item of ``spans`` of ``it`` (its header and framing included)."""
    return c._count(retention.recall_text(c, it, spans)) + ITEM_OVERHEAD


def _recall_need(
    c: Conversation, rel: retention.Relevance, it: ConversationItem, x: ItemScore, cap: int
) -> int:
    """What recalling ``it`` would take, at most ``cap``: the whole result when it
    fits, else its relevant lines (the passages that scored above zero)."""
    header = _recall_cost(c, it, [[1, 1, 0, 0]])
    if it.tokens + header <= cap:
        return it.tokens + header
    ps = rel.index.passages(it.id)
    need = header
    for j in x.best:
        need += c._count(ps[j].text) + _GAP_TOKENS
        if need >= cap:
            return cap
    return need


#: What the ``[...]`` line between two recalled passages takes (about).
_GAP_TOKENS = 3
#: Passages a recall tries at most (each is counted once).
_RECALL_TRIES = 64


def _recall_spans(
    c: Conversation,
    rel: retention.Relevance,
    it: ConversationItem,
    x: ItemScore,
    share: int,
    query: str = "",
) -> tuple[list[list[int]], int] | None:
    """The spans of ``it`` to recall within ``share`` tokens and what they take:
    the whole result (no spans) when it fits, else its best passages in rank
    order while they fit, else the first lines of its best passage; None when
    not even a line's worth fits beside the header."""
    if it.tokens <= share:
        n = _recall_cost(c, it, [])
        if n <= share:
            return [], n
    ps = rel.index.passages(it.id)
    room = share - _recall_cost(c, it, [[1, 1, 0, 0]])
    ranked: list[Any] = []
    scores = x.passage_scores
    order = list(x.best[:_RECALL_TRIES])
    top = scores[order[0]] if order and scores else 0.0
    # The passage holding the line with most of the question's own words (a
    # commit id, "Date") goes first when it scores near the best: the embedding
    # cannot tell the header that names the commit from a diff hunk of it.
    lead = _line_passage(ps, order, query)
    if lead is not None and (not scores or scores[lead] >= _RECALL_PASSAGE_RATIO * top):
        order.remove(lead)
        order.insert(0, lead)
    missed = False
    for j in order:
        # In rank order while they fit. After one that does not fit, only
        # passages near the best fill the room: smaller, lower-ranked ones filled
        # a small share with `if __name__ ==` lines while the line asked for sat
        # in the passage that did not fit. (Stopping there outright lost evidence
        # at 8 000 and 16 000 tokens on the needle set's tune half.)
        n = c._count(ps[j].text) + _GAP_TOKENS
        if n > room:
            missed = True
            continue
        if missed and scores and scores[j] < _RECALL_PASSAGE_RATIO * top:
            continue
        ranked.append(ps[j])
        room -= n
    # counted apart, a little off together: the exact count decides, and the
    # lowest-ranked passage goes until it fits
    while ranked:
        spans = sorted(
            ([p.start, p.end, p.offset, len(p.text)] for p in ranked), key=lambda s: s[2]
        )
        n = _recall_cost(c, it, spans)
        if n <= share:
            return spans, n
        ranked.pop()
    if not order:
        return None
    return _recall_head(c, it, ps[order[0]], share, query)


#: The passage holding the question's words goes first when it scores this close
#: to the best one.
_RECALL_PASSAGE_RATIO = 0.75


def _line_values(lines: Sequence[str], query: str) -> list[float]:
    """Each line's share of ``query``'s terms: the sum over the terms it holds of
    one over the number of lines holding that term (a term one line holds
    counts 1)."""
    want = set(lexical.terms(query)) if query else set()
    if not want:
        return [0.0] * len(lines)
    held = [want.intersection(lexical.terms(line)) for line in lines]
    df: dict[str, int] = {}
    for h in held:
        for t in h:
            df[t] = df.get(t, 0) + 1
    return [sum(1.0 / df[t] for t in h) for h in held]


def _line_passage(ps: Sequence[Any], order: Sequence[int], query: str) -> int | None:
    """Of the passages ``order`` names, the one holding the line of most value
    (:func:`_line_values` over all their lines); None when no line holds a term."""
    lines: list[str] = []
    owner: list[int] = []
    for j in order:
        for line in ps[j].text.split("\n"):
            lines.append(line)
            owner.append(j)
    values = _line_values(lines, query)
    best = max(values, default=0.0)
    return owner[values.index(best)] if best > 0 else None


def _best_line(lines: list[str], query: str) -> int:
    """The index of the line of ``lines`` of most value (:func:`_line_values`;
    ties: the first); 0 when none holds a term of ``query``."""
    values = _line_values(lines, query)
    best = max(values, default=0.0)
    return values.index(best) if best > 0 else 0


def _recall_head(
    c: Conversation, it: ConversationItem, p: Any, share: int, query: str = ""
) -> tuple[list[list[int]], int] | None:
    """The most whole lines of passage ``p`` whose recall fits ``share``, around
    the line that holds most of the question's terms (from the passage's start
    when none does), else that line's first characters; None when too little
    fits."""
    if _recall_cost(c, it, [[p.start, p.start, p.offset, 0]]) + _RECALL_LEAST_BODY > share:
        return None
    text = it.content[p.offset : p.offset + len(p.text)]
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def span(a: int, b: int) -> list[int]:  # lines a..b of the passage (0-based)
        return [p.start + a, p.start + b, p.offset + starts[a], starts[b + 1] - 1 - starts[a]]

    # Grow a window of whole lines from the question's line: a line below, then
    # one above (the line before a value is often its heading), while it fits.
    a = b = _best_line(lines, query)
    if _recall_cost(c, it, [span(a, b)]) <= share:
        grew = True
        while grew:
            grew = False
            for na, nb in ((a, b + 1), (a - 1, b)):
                if 0 <= na and nb < len(lines) and _recall_cost(c, it, [span(na, nb)]) <= share:
                    a, b, grew = na, nb, True
        got = span(a, b)
        return [got], _recall_cost(c, it, [got])
    # the line alone does not fit: the most of it around the question's words,
    # cut at spaces (its first characters when it has none of them)
    line, off, text_a = p.start + a, p.offset + starts[a], lines[a]
    centre = _term_centre(text_a, query)

    def piece(w: int) -> tuple[int, int]:  # [start, end) of half-width w, at spaces
        lo_, hi_ = max(0, centre - w), min(len(text_a), centre + w)
        if lo_ > 0:
            sp = text_a.find(" ", lo_ - 1)
            lo_ = sp + 1 if 0 <= sp < centre else lo_
        if hi_ < len(text_a):
            sp = text_a.rfind(" ", centre, hi_)
            hi_ = sp + 1 if sp >= 0 else hi_
        return lo_, hi_

    lo, hi = 0, len(text_a)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        x, y = piece(mid)
        if _recall_cost(c, it, [[line, line, off + x, y - x]]) <= share:
            lo = mid
        else:
            hi = mid - 1
    x, y = piece(lo)  # it fits: the bisection kept only widths that do
    if y <= x:
        return None
    cut = [line, line, off + x, y - x]
    return [cut], _recall_cost(c, it, [cut])


def _term_centre(text: str, query: str, reach: int = 150) -> int:
    """The position in ``text`` with the most distinct terms of ``query`` within
    ``reach`` characters (0 when it holds none): where a cut of a long line
    centres. Bounded: 64 occurrences of a term at most."""
    low = text.lower()
    found: list[tuple[int, str]] = []
    for t in dict.fromkeys(lexical.terms(query) if query else []):
        at = low.find(t)
        n = 0
        while at >= 0 and n < 64:
            found.append((at, t))
            at = low.find(t, at + 1)
            n += 1
    if not found:
        return 0
    found.sort()
    best, centre = 0, found[0][0]
    j = 0
    for i, (at, _) in enumerate(found):  # a window [at - reach, at + reach] over the sorted hits
        while found[j][0] < at - reach:
            j += 1
        k = i
        while k + 1 < len(found) and found[k + 1][0] <= at + reach:
            k += 1
        n = len({t for _, t in found[j : k + 1]})
        if n > best:
            best, centre = n, at
    return centre


#: Under this much room (or, in a small budget, each pick's header and
#: MIN_RECALL_BODY), a recall may clear the recency floor, and drop the steps
#: it needs less, for itself.
MIN_USEFUL_RECALL = 256
#: The body a recalled pick is worth clearing the recency floor for (tokens) ...
MIN_RECALL_BODY = 128
#: ... in a budget under this (a window of about 4 000 tokens or less).
SMALL_BUDGET = 3072


def needed_by_question(s: ItemScore | None, below: float) -> bool:
    """Whether the question needs a result scored ``s`` at least as much as what a
    recall brings back: relevant to it, and scoring ``below`` (the weakest pick's
    score) or more. What is not may make room for the recall."""
    return s is not None and retention.is_relevant(s) and s.score >= below


def room_for_recall(
    view: _View,
    pol: ContextPolicy,
    scoring: Scoring,
    need: int,
    below: float = -1.0,
    floor_too: bool = False,
) -> list[int]:
    """The results to clear so a recall has ``need`` more tokens of room,
    rewriting the fewest cached tokens: the latest of the older results (with
    ``floor_too``, also the recency floor and errors, as a window-forced clear
    takes them; never excluded tools or the standing question's recalls) that
    the question needs less than what is recalled — not relevant to it, or
    scoring under ``below`` (the weakest pick's score: a result kept at an
    earlier step must not hold the room that the question's best result
    needs) — taken from the tail back.
    When those cannot make all of it, what they can make (empty when nothing:
    then the recall takes the room there is and nothing is rewritten)."""
    ts = scoring.task_scores()
    chosen: list[int] = []
    got = 0
    for k in sorted(clear_candidates(view, pol, floor_too), reverse=True):
        if needed_by_question(ts.get(view.shown[k].item.id), below):
            continue
        r = view.cost(k) - STUB_ESTIMATE
        if r > 0:
            chosen.append(k)
            got += r
            if got >= need:
                break
    # What can be made, even short of ``need``: the clears are the results nearest
    # the tail (a short rewrite), and a recall squeezed into a few dozen tokens
    # shows the first lines of a passage, not the line the question asks for
    # (the task-success bench's 2 048-token window).
    return sorted(chosen)
