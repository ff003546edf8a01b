"""A text cut into passages: what the relevance scorer scores, what an excerpt
keeps and what a recall brings back, each with its line range.

Lines are what :meth:`str.splitlines` calls lines: ``\\n``, ``\\r\\n`` and a lone
``\\r`` end one, and so do ``\\v``, ``\\f``, ``\\x1c``-``\\x1e``, ``\\x85``, U+2028
and U+2029 (:data:`LINE_BREAKS`), so a CR-only or U+2028-separated text has its
lines numbered as an editor shows them. A passage's text is the source itself
(``source[offset : offset + len(text)]``), its line breaks as they were.

Bounded for hostile input (a 50 MB single-line tool result): a line longer than
a passage is cut into pieces (its line number kept), at a space when one lies
in the piece's last quarter, else mid-word; no more than ``max_passages``
passages are made, and no more than ``max_passages × max_chars × 4``
characters are looked at (50 MB of blank lines makes no passage and costs no
more than that), so the work is O(max_passages × max_chars) whatever the
text's size. What lies past the last passage is not scored (docs/limits.md).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

__all__ = [
    "LINE_BREAKS",
    "MAX_PASSAGES",
    "PASSAGE_CHARS",
    "PASSAGE_LINES",
    "Passage",
    "count_breaks",
    "heading_before",
    "headings",
    "split_passages",
]

#: A passage holds at most this many characters ...
PASSAGE_CHARS = 700
#: ... and this many lines (a blank line ends one early once it is a third full).
PASSAGE_LINES = 12
#: Passages made of one text at most (the rest of the text is not scored).
MAX_PASSAGES = 256
#: The characters that end a line (``\r\n`` ends one line): str.splitlines' set.
LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"

_BREAK = re.compile("\r\n|[" + re.escape(LINE_BREAKS) + "]")
_SPACE = re.compile(r"\s")
#: White space, line breaks included: a run of blank lines is skipped in one
#: step (50 MB of blank lines would otherwise cost a step a line).
_BLANKS = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Passage:
    """Lines ``start`` .. ``end`` (1-based, inclusive) of a text, and their text,
    which is ``source[offset : offset + len(text)]``. A piece of a line longer
    than a passage has ``start == end``."""

    start: int
    end: int
    text: str
    offset: int = 0


def _cut(text: str, pos: int, hard: int, max_chars: int) -> int:
    """Where a piece of a long line starting at ``pos`` ends: after the last
    whitespace in its last quarter (before ``hard``), else at ``hard``."""
    last = -1
    for m in _SPACE.finditer(text, pos + max_chars - max_chars // 4, hard):
        last = m.end()
    return last if last > pos else hard


def _blank_lines(text: str, pos: int, limit: int) -> int:
    """The end of the run of blank lines at ``pos`` (after its last line break)
    when it holds two or more, else 0."""
    ws = _BLANKS.match(text, pos, limit)
    if ws is None:
        return 0
    e = ws.end()
    last = max(text.rfind(c, pos, e) for c in LINE_BREAKS)
    if last < 0:
        return 0
    if text[last] == "\r" and last + 1 < len(text) and text[last + 1] == "\n":
        last += 1  # the run ends inside a \r\n (at the limit): keep the pair whole
    return last + 1 if count_breaks(text, pos, last + 1) >= 2 else 0


def count_breaks(text: str, start: int = 0, stop: int | None = None) -> int:
    """Line breaks in ``text[start:stop]`` (``\r\n`` counts one), in C-speed
    passes: a text's line count is this plus one (less one when it ends with a
    break, as str.splitlines counts)."""
    stop = len(text) if stop is None else stop
    n = 0
    for c in LINE_BREAKS:
        if c < "\x80" or not text.isascii():
            n += text.count(c, start, stop)
    return n - text.count("\r\n", start, stop)


def split_passages(
    text: str,
    max_chars: int = PASSAGE_CHARS,
    max_lines: int = PASSAGE_LINES,
    max_passages: int = MAX_PASSAGES,
) -> list[Passage]:
    """``text`` in order as passages of whole lines (a longer line in pieces)."""
    out: list[Passage] = []
    n = len(text)
    limit = min(n, max(max_passages, 1) * max(max_chars, 1) * 4)
    # the buffer: lines first..last, text[at:end]
    first = last = 0
    at = end = -1
    count = 0
    filled = False  # holds a line that is not blank

    def flush() -> None:
        nonlocal at, count, filled
        if at >= 0 and filled:
            out.append(Passage(first, last, text[at:end], at))
        at, count, filled = -1, 0, False

    line_no = 1
    pos = 0
    col = 0  # where pos lies in its line (> 0: the rest of a long line)
    while pos < limit and len(out) < max_passages:
        if not col:
            run = _blank_lines(text, pos, limit)
            if run:
                # two or more blank lines: a paragraph break
                flush()
                line_no += count_breaks(text, pos, run)
                pos = run
                continue
        m = _BREAK.search(text, pos, min(n, pos + max_chars + 1))
        if m is None and pos + max_chars < n:
            # a line longer than a passage: a piece of it, a passage of its own
            flush()
            stop = _cut(text, pos, pos + max_chars, max_chars)
            if text[pos:stop].strip():
                out.append(Passage(line_no, line_no, text[pos:stop], pos))
            col += stop - pos
            pos = stop
            continue
        stop = m.start() if m is not None else n
        after = n if m is None else m.end()
        if m is not None and m.group() == "\r" and after < n and text[after] == "\n":
            after += 1  # a \r\n split by the search window's end
        line = text[pos:stop]
        if col:
            # the rest of a long line: a piece of its own, under the line's number
            flush()
            if line.strip():
                out.append(Passage(line_no, line_no, line, pos))
        else:
            if at >= 0 and (stop - at > max_chars or count >= max_lines):
                flush()
            if not line.strip() and at >= 0 and end - at >= max_chars // 3:
                flush()
            elif line.strip() or at >= 0:
                if at < 0:
                    first, at = line_no, pos
                if line.strip():  # a passage ends with its last line that is not blank
                    last, end, filled = line_no, stop, True
                count += 1
        pos, col = after, 0
        if m is not None:
            line_no += 1
    if len(out) < max_passages:
        flush()
    return out


# A line that names what follows it: a Markdown heading, or a definition in the
# common languages (what a reader of a passage in the middle of a file needs to
# know where it is). One line, at most 160 characters of it kept.
_HEADING = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]+\S|(?:export[ \t]+|pub(?:\([a-z]+\))?[ \t]+|async[ \t]+)*"
    r"(?:def|class|fn|func|function|struct|enum|trait|impl|interface|module|type)[ \t]+[A-Za-z_])"
    r"[^\n]{0,400}",
    re.MULTILINE,
)
_FENCE = re.compile(r"^[ \t]{0,3}(?:```|~~~)", re.MULTILINE)
#: How far back (characters) the nearest heading of a passage is looked for.
HEADING_REACH = 20_000


def headings(text: str, end: int) -> list[tuple[int, str]]:
    """Every heading or definition line starting before ``end``, as (offset,
    line stripped and cut to 160 characters), in order: one pass for all the
    passages of a text (:func:`heading_before` answers one)."""
    fences = [m.start() for m in _FENCE.finditer(text, 0, end)]
    out = []
    for m in _HEADING.finditer(text, 0, end):
        # a "# comment" inside a fenced code block is not a heading of the page
        if bisect.bisect_left(fences, m.start()) % 2:
            continue
        out.append((m.start(), m.group(0).strip()[:160]))
    return out


def heading_before(text: str, offset: int) -> str:
    """The nearest heading or definition line that starts before ``offset`` (and
    within :data:`HEADING_REACH` of it) in ``text``, stripped and cut to 160
    characters; ``""`` when none."""
    found = [h for at, h in headings(text, offset) if offset - at <= HEADING_REACH]
    return found[-1] if found else ""
