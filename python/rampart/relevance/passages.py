"""A text cut into passages: what the relevance scorer scores, what an excerpt
keeps and what a recall brings back, each with its line range.

Bounded for hostile input (a 50 MB single-line tool result): a line longer than
a passage is cut into pieces (its line number kept), and no more than
``max_passages`` passages are made, so the work is O(max_passages x
max_chars) whatever the text's size. What lies past the last passage is not
scored (docs/limits.md).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_PASSAGES", "PASSAGE_CHARS", "PASSAGE_LINES", "Passage", "split_passages"]

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
