"""Text the agent feeds back or compiles: tool output cut to its bound, and a rule
as it may be rendered (one line, no quotes to close, bounded)."""

from __future__ import annotations

import re


def clip(text: str, limit: int) -> str:
    """``text`` cut at ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [cut: {len(text) - limit} more characters]"


def normalise(text: str) -> str:
    """``text`` lower-cased, punctuation and runs of space as one space (for the
    text similarity of two rules)."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def clean_rule(text: str, limit: int) -> str:
    """The rule a diagnosis reply holds: its first non-empty line without list
    markers, quotes or a "Rule:" label, cut at a word boundary within ``limit``."""
    line = next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), "")
    line = re.sub(r"^(?:[-*•]|\d+[.)])\s*", "", line)
    line = re.sub(r"^[*_\s]*(?:new\s+)?rule[*_\s]*[:：][*_\s]*", "", line, flags=re.IGNORECASE)
    return renderable_rule(line.strip().strip("\"'`"), limit)


def renderable_rule(text: str, limit: int) -> str:
    """``text`` as a rule may be rendered: one line (every line break and run of
    whitespace, U+2028 included, becomes one space), no double quotes (the rule is
    rendered inside them, as data after its provenance, and may not close them), no
    control characters a terminal or template would act on, at most ``limit``
    characters (cut at a word boundary, "…" included). Applied when a rule is
    compiled, whatever wrote it (a quarantine file is edited on disk too);
    idempotent, so text already rendered is compiled as it is. Only as much of
    ``text`` is read as the first ``limit`` characters need (a 20 MB rule costs
    microseconds, not seconds)."""
    n = 4 * limit + 64
    while True:
        head = text[:n]
        line = "".join(c if c.isprintable() else " " for c in head.replace('"', "'"))
        line = " ".join(line.split())
        if len(line) > limit or n >= len(text):
            break
        n *= 4
    if len(line) > limit:
        cut = line[: limit - 1].rsplit(" ", 1)[0]
        line = (cut or line[: limit - 1]).rstrip(",;: ") + "…"
    return line
