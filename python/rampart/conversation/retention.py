"""Which tool results the current step needs: the relevance half of the
context policy (docs/specification.md §9; docs/conversation.md, "Keep what the step needs").

The step's query is the latest user message plus the tool calls made since
(their names and arguments), or the compile's ``task_text``. Each tool result
is indexed once, when a compile first needs scores (its passages added to the
conversation's :class:`~rampart.relevance.PassageIndex`), and scored against
the query: BM25 over its passages, fused with the registry's embedder when it
has one (passages embedded once, lazily, kept on the conversation). The policy
clears the least relevant results first, keeps the most relevant (or an
excerpt of their best passages), and recalls at the tail a cleared result the
step needs.

Everything here reads the conversation's view; nothing here records: the plan
(:mod:`rampart.conversation.plan`) decides and records.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from rampart.relevance import ItemScore, Passage, PassageIndex
from rampart.relevance.passages import LINE_BREAKS, count_breaks

if TYPE_CHECKING:
    from rampart.conversation.items import ConversationItem

# The conversation and its view are read, never imported (conversation.core
# imports this module to build the texts of excerpts and recalls).
Conversation = Any
_View = Any

__all__ = [
    "MAX_QUERY_CHARS",
    "RELEVANT_BM25",
    "RELEVANT_COSINE",
    "Relevance",
    "excerpt_text",
    "is_relevant",
    "query_parts",
    "recall_text",
    "step_query",
]

#: The query is cut to this many characters (a 1 MB question costs no more).
MAX_QUERY_CHARS = 4000
#: A result is relevant to the step when its best passage's cosine reaches
#: this (with an embedder) ...
RELEVANT_COSINE = 0.30
#: ... or its best BM25 score reaches this many rare terms' worth (a term that
#: one passage of the conversation holds counts 1; ItemScore.rare), so the floor
#: means the same in 12 passages as in 2 000. Both chosen on the tune half of the
#: needle benchmark (benches/needle_tune.py).
RELEVANT_BM25 = 0.75
#: ... or, for the clear lexical winner (twice the next result's BM25: a file
#: name, a commit id only it holds), this much.
RELEVANT_LEAD = 0.3
#: Arguments quoted in a recall or excerpt header at most (characters).
_ARGS_CHARS = 300


def is_relevant(s: ItemScore | None) -> bool:
    """Whether a scored result is relevant to the step at all (absolute floors:
    the tune split of benches/needle_bench.py chose them)."""
    if s is None:
        return False
    if s.dense is not None and s.dense >= RELEVANT_COSINE:
        return True
    return s.rare >= RELEVANT_BM25 or (s.lead and s.rare >= RELEVANT_LEAD)


def step_query(view: _View, task_text: str | None = None, *, calls: bool = True) -> str:
    """The current step's query: ``task_text`` when given, else the latest user
    text and (``calls``) the tool calls of the latest assistant message after
    it (their names and arguments; bounded)."""
    if task_text:
        return task_text[:MAX_QUERY_CHARS]
    k = view.last_user
    if k < 0:
        return ""
    question: str = view.shown[k].item.content[:MAX_QUERY_CHARS]
    if not calls:
        return question
    parts = [question]
    # the step's calls: those of the latest assistant message after the question
    group = None
    for j in range(len(view.shown) - 1, k, -1):
        it = view.shown[j].item
        if it.kind == "tool_call":
            group = it.group
            break
    if group is not None:
        for j in range(len(view.shown) - 1, k, -1):
            it = view.shown[j].item
            if it.kind == "tool_call" and it.group == group:
                parts.insert(1, f"{it.tool_name or ''} {it.content[:_ARGS_CHARS]}")
            elif it.group < group:
                break
    return "\n".join(parts)[:MAX_QUERY_CHARS]


#: A question is split into this many parts at most (the rest joins the last).
MAX_PARTS = 4
# Sentence ends (a full stop, question or exclamation mark before a space; the
# CJK ones anywhere), semicolons and line breaks end a part.
# (a full stop before a lower-case letter is an abbreviation: "e.g. this").
_SENTENCES = re.compile(r"(?<=[.!?])\s+(?![a-z])|[。？！；;\n]+")
# Words that join two parts of one question: English (any case), and the cheap
# equivalents, lower case between spaces (German und, French et, Spanish y,
# Russian и: "x and Y" keeps its variable), and Chinese 以及, 和, 及.
_JOINS = re.compile(
    r"\s*,?\s*\b(?i:and|or|also|as well as)\b\s*|\s+(?:und|et|y|и)\s+|\s*(?:以及|和|及)\s*"
)
# ... and in a sentence that has such a word, commas list parts too ("A, B and C").
_COMMAS = re.compile(r"\s*[,，、]\s*")
# A part starting with one of these is a bare phrase that leans on the first
# part's head ("the timeouts of A and of B": "of B" is "the timeouts of B").
_LEANING = frozenset(
    "of for in on at from to with by about under into "
    "de del des du von vom für im в на о об для из у по".split()
)
# What ends a sentence that asks: the question marks of the scripts in use.
_ASKS = ("?", "？", "؟")
#: A part of this many words or fewer is bare too ("... of A and B": "B").
_BARE_WORDS = 3


def query_parts(text: str) -> list[str]:
    """The parts of a question that asks for several things, each scored on its
    own so that the recall brings back every part's result (one part: the
    question itself).

    The rule, small on purpose: sentences, and clauses joined by *and*, *or*,
    *also*, *as well as* (und, et, y, и; 以及, 和, 及), or by commas in a
    sentence that has such a word, are parts; at most :data:`MAX_PARTS` (the
    rest joins the last). A later part that is a bare phrase — it starts with a
    preposition (*of B*) or has at most three words (*B*) — carries the first
    part's head words: *the timeouts of A and of B* gives *the timeouts of A*
    and *the timeouts of B*. Bounded: the text is cut to
    :data:`MAX_QUERY_CHARS` first."""
    text = text[:MAX_QUERY_CHARS]
    raw: list[str] = []
    sentences = [x for x in _SENTENCES.split(text) if x.strip()]
    # When some sentences ask (end with a question mark), the others frame them
    # ("Two things about what you read earlier.", "Reply with the time only."):
    # as parts they recalled whatever shared their common words.
    asking = [x for x in sentences if x.rstrip().endswith(_ASKS)]
    for sentence in asking or sentences:
        pieces = _JOINS.split(sentence)
        if len(pieces) > 1:
            pieces = [q for p in pieces for q in _COMMAS.split(p)]
        raw.extend(p.strip() for p in pieces)
    parts: list[str] = []
    for p in raw:
        if any(ch.isalnum() for ch in p) and p not in parts:
            parts.append(p)
    if len(parts) > MAX_PARTS:
        parts = [*parts[: MAX_PARTS - 1], " ".join(parts[MAX_PARTS - 1 :])]
    if len(parts) < 2:
        return [text.strip()] if text.strip() else []
    first = parts[0].split()
    out = [parts[0]]
    for p in parts[1:]:
        q = _with_head(first, p)
        if q not in out:
            out.append(q)
    return out


def _with_head(first: list[str], part: str) -> str:
    """``part`` with the head words of the first part when it is a bare phrase."""
    words = part.split()
    if not words or len(first) < 2:
        return part
    lead = words[0].lower()
    if lead in _LEANING:
        low = [w.lower() for w in first]
        if lead in low[1:]:  # "the timeouts of A" + "of B": the words before "of"
            j = len(low) - 1 - low[::-1].index(lead)
            return " ".join(first[:j] + words)
    if len(words) <= _BARE_WORDS < len(first):  # "timeouts of A" + "B": A's place
        return " ".join(first[: len(first) - len(words)] + words)
    return part


class Relevance:
    """A conversation's relevance state: its tool results' passages (indexed
    once) and their vectors (embedded once). Derived from the items alone, which
    never change, so a dry run's twin shares it."""

    __slots__ = ("index", "indexed")

    def __init__(self) -> None:
        self.index = PassageIndex()
        self.indexed = 0  # items[:indexed] were looked at

    def catch_up(self, conv: Conversation) -> None:
        """Index the tool results appended since the last call (each once), each
        passage in its context: the tool's name and the call's arguments."""
        items = conv._items
        for it in items[self.indexed :]:
            if it.kind == "tool_result" and it.native is None:
                context = f"{it.tool_name or ''} {_call_args(conv, it)}".strip()
                self.index.add(it.id, it.content, context)
        self.indexed = len(items)

    def prepare(self, conv: Conversation, embedder: Any) -> None:
        """Index what arrived and have it embedded off the question's path: by
        the background thread (rampart.relevance.background), or here when that
        is turned off. O(1) when nothing arrived."""
        if self.indexed == len(conv._items) and not self.index.pending():
            return
        self.catch_up(conv)
        if embedder is None or not self.index.pending():
            return
        from rampart.relevance import background

        if not background.schedule(self.index, embedder):
            self.index.embed_pending(embedder)

    def scores(
        self,
        conv: Conversation,
        query: str,
        ids: Iterable[str],
        embedder: Any = None,
    ) -> dict[str, ItemScore]:
        """The results ``ids`` scored against ``query`` (none for an empty query)."""
        self.catch_up(conv)
        if not query.strip():
            return {}
        return self.index.score(query, ids, embedder)


def relevance_of(conv: Conversation) -> Relevance:
    """``conv``'s relevance state, made on first use."""
    r: Relevance | None = conv._relevance
    if r is None:
        r = conv._relevance = Relevance()
    return r


def _call_args(conv: Conversation, it: ConversationItem) -> str:
    ci = conv._calls.get(it.call_id or "")
    if ci is None:
        return ""
    args: str = conv._items[ci].content
    return args if len(args) <= _ARGS_CHARS else args[:_ARGS_CHARS] + "..."


@lru_cache(maxsize=16)
def _line_count(content: str) -> int:
    """Lines of ``content`` as str.splitlines counts them (at least 1): what
    the passages number. Cached: a header is built a few times per compile, and
    counting a 50 MB result's breaks takes milliseconds."""
    n = count_breaks(content) + 1
    if content and content[-1] in LINE_BREAKS:
        n -= 1  # a final break ends the last line, it does not start one
    return max(n, 1)


def _lines(it: ConversationItem) -> int:
    return _line_count(it.content)


def _breaks_in(content: str) -> str:
    """The line-break characters ``content`` holds (a search looks for these)."""
    return "".join(c for c in LINE_BREAKS if c in content) if content else ""


_breaks_of = lru_cache(maxsize=16)(_breaks_in)


def _line_part(content: str, offset: int, length: int) -> tuple[int, int, int] | None:
    """Where a span lies in its line when it is not the whole line: (its first
    character, 1-based, its last, the line's length); None for whole lines.
    O(1) for whole lines; a part searches its line's ends (C-speed finds)."""
    end = offset + length
    starts_line = offset == 0 or content[offset - 1] in LINE_BREAKS
    ends_line = end >= len(content) or content[end] in LINE_BREAKS
    if starts_line and ends_line:
        return None
    seps = _breaks_of(content)
    a = max((content.rfind(c, 0, offset) for c in seps), default=-1) + 1
    ends = [i for i in (content.find(c, end) for c in seps) if i >= 0]
    b = min(ends) if ends else len(content)
    return offset - a + 1, end - a, b - a


def _num(n: int) -> str:
    """``2 000 000``: thousands apart, as the docs write them."""
    return f"{n:,}".replace(",", " ")


def spans_text(it: ConversationItem, spans: Sequence[Sequence[int]]) -> str:
    """The text of ``spans`` ([first line, last line, offset, length] each) of
    ``it``'s content, in order, a ``[...]`` line between gaps; a span that
    starts or ends inside a line (a piece of a long one) is marked ``[...]``
    on that side, so the cut shows where it is."""
    c = it.content
    out = []
    for s in spans:
        off, end = s[2], s[2] + s[3]
        piece = c[off:end]
        if s[0] == s[1] and _line_part(c, off, s[3]) is not None:
            if off > 0 and c[off - 1] not in LINE_BREAKS:
                piece = "[...] " + piece
            if end < len(c) and c[end] not in LINE_BREAKS:
                piece = piece + " [...]"
        out.append(piece)
    return "\n[...]\n".join(out)


def _ranges(spans: Sequence[Sequence[int]]) -> str:
    return ", ".join(f"{s[0]}-{s[1]}" if s[0] != s[1] else f"{s[0]}" for s in spans)


def excerpt_text(conv: Conversation, it: ConversationItem, spans: Sequence[Sequence[int]]) -> str:
    """What an excerpted result is shown as: a header naming the tool, the call,
    the lines kept (the characters kept of a long line) and what was cut, then
    the kept lines."""
    kept = sum(s[3] for s in spans)
    return (
        f"[excerpt of a tool result, cut to save context: tool {it.tool_name or 'unknown'}, "
        f"call {it.call_id or 'unknown'}; {lines_of(it, spans)} kept as "
        f"relevant, {len(it.content) - kept} of {len(it.content)} characters cut; "
        f'recall(call_id="{it.call_id or ""}") brings back the whole result]\n'
        + spans_text(it, spans)
    )


def lines_of(it: ConversationItem, spans: Sequence[Sequence[int]]) -> str:
    """Where ``spans`` lie in ``it``'s content: ``"lines 3-9, 40 of 120"``, or,
    where a span is part of a line longer than a passage, ``"characters
    1 401–2 100 of line 1 (2 000 000 characters)"`` (``", of 120 lines"``
    after it when the result has more than one)."""
    c = it.content
    parts: list[str] = []
    lines: list[Sequence[int]] = []
    chars: list[str] = []  # ranges within line ``at`` (``n`` characters)
    at = n = 0

    def close() -> None:
        nonlocal lines, chars
        if lines:
            parts.append(f"lines {_ranges(lines)}")
        if chars:
            parts.append(f"characters {', '.join(chars)} of line {at} ({_num(n)} characters)")
        lines, chars = [], []

    for s in spans:
        part = _line_part(c, s[2], s[3]) if s[0] == s[1] else None
        if part is None:
            if chars:
                close()
            lines.append(s)
            continue
        if lines or (chars and at != s[0]):
            close()
        at, n = s[0], part[2]
        chars.append(f"{_num(part[0])}–{_num(part[1])}")
    total = _lines(it)
    if not chars and not parts:
        return f"lines {_ranges(lines)} of {total}"
    close()
    return "; ".join(parts) + (f", of {_num(total)} lines" if total > 1 else "")


def describe(conv: Conversation, it: ConversationItem, where: str) -> str:
    """``where`` of a result, named by its tool, call id and arguments: what a
    recall (at the tail, or the ``recall`` tool's answer) says it brings back."""
    args = _call_args(conv, it)
    return (
        f"{where} of the result of tool {it.tool_name or 'unknown'} "
        f"(call {it.call_id or 'unknown'}{', arguments ' + args if args else ''})"
    )


def recall_text(
    conv: Conversation,
    it: ConversationItem,
    spans: Sequence[Sequence[int]],
    closing: bool = False,
) -> str:
    """What a recall appends at the tail: the tool, call id and arguments of a
    result an earlier compile cleared, and the result (or its relevant lines);
    with ``closing`` (a compile's last recall), :data:`RECALL_CLOSING` after it,
    so the model sees where the recalled text ends and the question begins: a
    1.5B model answered the recalled diff instead of the question when the two ran
    together (benches/task_success.py)."""
    where = lines_of(it, spans) if spans else "the whole result"
    body = spans_text(it, spans) if spans else it.content
    cut = ""
    if spans:
        left = len(it.content) - sum(s[3] for s in spans)
        cut = f"; {left} of {len(it.content)} characters not shown"
    return (
        f"[recalled for the current step: {describe(conv, it, where)}, which was cleared "
        f"earlier to save context{cut}]\n" + body + (RECALL_CLOSING if closing else "")
    )


#: The line a compile's last recall ends with: where the recalled text stops and
#: the question (sent after it, :func:`rampart.conversation.shapes.question_last`)
#: begins. Short on purpose: restating the question in it took 40-70 tokens of a
#: small window's recall, and two-part questions lost a needle for it
#: (task-success holdout, dry: 14 against 17 of 24).
RECALL_CLOSING = "\n[end of recalled text]"


#: Passages an excerpt or a recall keeps at most.
MAX_SPANS = 6


def best_spans(
    rel: Relevance, it: ConversationItem, score: ItemScore, budget_chars: int
) -> list[list[int]]:
    """The best passages of ``it`` for the scored query within ``budget_chars``
    (at most :data:`MAX_SPANS`), as [first line, last line, offset, length] in
    text order (at least one)."""
    ps: list[Passage] = rel.index.passages(it.id)
    chosen: list[Passage] = []
    used = 0
    for j in score.best[:MAX_SPANS]:
        p = ps[j]
        if chosen and used + len(p.text) > budget_chars:
            break
        chosen.append(p)
        used += len(p.text)
    chosen.sort(key=lambda p: p.offset)
    return [[p.start, p.end, p.offset, len(p.text)] for p in chosen]


def check_spans(v: Any, content: str) -> list[list[int]]:
    """``v`` as spans of ``content`` (a log entry's), or ValueError."""
    if not isinstance(v, list) or len(v) > 4096:
        raise ValueError("spans must be a list")
    out = []
    for s in v:
        if (
            not isinstance(s, list)
            or len(s) != 4
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in s)
            or s[2] + s[3] > len(content)
        ):
            raise ValueError(f"a span must be [first line, last line, offset, length]: {s!r:.60}")
        out.append(list(s))
    return out


def dumps_scores(scores: dict[str, ItemScore]) -> dict[str, float]:
    """Scores as plain numbers for a log entry (rounded: the log is compared
    byte for byte across processes)."""
    return {k: round(v.score, 4) for k, v in scores.items()}
