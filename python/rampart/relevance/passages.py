"""A text cut into passages: what the relevance scorer scores, what an excerpt
keeps and what a recall brings back, each with its line range.

Bounded for hostile input (a 50 MB single-line tool result): a line longer than
a passage is cut into pieces (its line number kept), and no more than
``max_passages`` passages are made, so the work is O(max_passages x
max_chars) whatever the text's size. What lies past the last passage is not
scored (docs/limits.md).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

__all__ = [
    "MAX_PASSAGES",
    "PASSAGE_CHARS",
    "PASSAGE_LINES",
    "Passage",
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


@dataclass(frozen=True, slots=True)
class Passage:
    """Lines ``start`` .. ``end`` (1-based, inclusive) of a text, and their text,
    which is ``source[offset : offset + len(text)]``."""

    start: int
    end: int
    text: str
    offset: int = 0


def split_passages(
    text: str,
    max_chars: int = PASSAGE_CHARS,
    max_lines: int = PASSAGE_LINES,
    max_passages: int = MAX_PASSAGES,
) -> list[Passage]:
    """``text`` in order as passages of whole lines (a longer line in pieces)."""
    out: list[Passage] = []
    buf: list[str] = []
    size = 0
    first = 1
    first_at = 0  # offset of the buffer's first line
    line_no = 0
    pos = 0
    n = len(text)

    def flush(last: int) -> None:
        nonlocal buf, size
        if buf and any(s.strip() for s in buf):
            out.append(Passage(first, last, "\n".join(buf), first_at))
        buf, size = [], 0

    while pos < n and len(out) < max_passages:
        nl = text.find("\n", pos, pos + max_chars * 4 + 1)
        end = nl if nl >= 0 else min(n, pos + max_chars * 4)
        line = text[pos:end]
        at = pos
        line_no += 1
        if nl >= 0:
            pos = nl + 1
        elif end >= n:
            pos = n
        else:  # a very long line: what follows keeps its line number
            pos = end
        if len(line) > max_chars:
            flush(line_no - 1)
            for k in range(0, len(line), max_chars):
                if len(out) >= max_passages:
                    break
                if line[k : k + max_chars].strip():
                    out.append(Passage(line_no, line_no, line[k : k + max_chars], at + k))
            if nl < 0 and pos < n:
                line_no -= 1  # the rest of this line comes next, under the same number
            first = line_no + 1
            continue
        if not buf:
            first, first_at = line_no, at
        if buf and (size + len(line) + 1 > max_chars or len(buf) >= max_lines):
            flush(line_no - 1)
            first, first_at = line_no, at
        if not line.strip() and size >= max_chars // 3:
            flush(line_no - 1)
            first = line_no + 1
            continue
        buf.append(line)
        size += len(line) + 1
    if len(out) < max_passages:
        flush(line_no)
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
