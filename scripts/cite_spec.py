"""Point citations of the old outside briefs at the repository's own documents.

The code and docs once cited a behaviour contract and a style guide kept outside the
repository, which a clone cannot follow. docs/specification.md now holds the contract
with the same section numbers, and docs/design.md ("House rules") the style, so each
citation maps one to one:

    <contract> §9                -> docs/specification.md §9
                                    (in docs/*.md: [specification §9](specification.md#s9))
    <style guide>, "Rule name"   -> docs/design.md, House rules, "Rule name"

Usage: python scripts/cite_spec.py [--check] [PATH ...]
    PATH: files or folders (default: every file git tracks). Files are rewritten in
    place and listed. --check writes nothing and exits 1 if any file would change.
    A rewritten line longer than the line limit (100) is wrapped when it is a whole
    comment line; any other is listed for wrapping by hand (then run ruff format).
    Mentions of the old briefs that no rule maps (a bare name without §) are listed
    too, for a hand edit: tests/test_standalone.py fails while any is left.

The old names are spelled in pieces here so that this file does not cite them itself.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 100
CONTRACT = "SP" + "EC"
STYLE = "STYLE" + ".md"
# Verbatim recordings of third-party tool output over this repository's own history
# (git show of old commits): rewriting them would falsify the recording.
RECORDINGS = {"tests/data/mcp_tool_outputs.json"}
SELF = {"scripts/cite_spec.py", "tests/test_standalone.py"}

_SECTION = re.compile(r"\b" + CONTRACT + r" §(\d+)")
_STYLE = re.compile(re.escape(STYLE) + r",?")
_LEFT = re.compile(r"\b" + CONTRACT + r"\b|" + re.escape(STYLE) + r"|\.\./shared")
_COMMENT = re.compile(r"^(\s*(?:#:?|//[/!]?)\s?)")
_RULE = re.compile(r" -{3,}$")  # a comment that ends in a rule: "# ---- part ----"


def docs_prefix(rel: str) -> str | None:
    """The relative path from a docs page to docs/, or None outside docs/."""
    parts = Path(rel).parts
    if parts[0] != "docs" or not rel.endswith(".md"):
        return None
    return "../" * (len(parts) - 2)


def rewrite_text(rel: str, text: str) -> str:
    prefix = docs_prefix(rel)
    if prefix is None:
        text = _SECTION.sub(r"docs/specification.md §\1", text)
        return _STYLE.sub("docs/design.md, House rules,", text)
    link = prefix + "specification.md#s"
    text = _SECTION.sub(lambda m: f"[specification §{m[1]}]({link}{m[1]})", text)
    return _STYLE.sub(f"[design notes, House rules]({prefix}design.md#house-rules),", text)


def wrap(line: str) -> list[str] | None:
    """A whole comment line split at a space before the limit, or None."""
    m = _COMMENT.match(line)
    if m is None:
        return None
    lead = m.group(1)
    rule = _RULE.search(line)
    if rule is not None:  # shorten the rule instead of wrapping it
        keep = LIMIT - rule.start() - 1
        return [line[: rule.start()] + " " + "-" * keep] if keep >= 3 else None
    out, rest = [], line
    while len(rest) > LIMIT:
        cut = rest.rfind(" ", len(lead) + 1, LIMIT + 1)
        if cut <= len(lead):
            return None
        out.append(rest[:cut].rstrip())
        rest = lead + rest[cut + 1 :]
    return [*out, rest]


def rewrite_file(rel: str, text: str) -> tuple[str, list[str]]:
    """The new text, and the notes for the lines that need a hand."""
    new = rewrite_text(rel, text)
    if new == text:
        return text, []
    notes: list[str] = []
    code = rel.endswith((".py", ".rs", ".pyi", ".toml"))
    old_lines = set(text.splitlines())
    lines: list[str] = []
    for n, line in enumerate(new.splitlines(keepends=True), 1):
        body = line.rstrip("\n")
        if code and len(body) > LIMIT and body not in old_lines:
            wrapped = wrap(body)
            if wrapped is None:
                notes.append(f"{rel}:{n}: {len(body)} columns: wrap by hand")
            else:
                line = "\n".join(wrapped) + line[len(body) :]
        lines.append(line)
    return "".join(lines), notes


def targets(paths: list[str]) -> list[str]:
    if not paths:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
        return [p for p in out.decode().split("\0") if p]
    found: list[str] = []
    for p in paths:
        full = (ROOT / p).resolve() if not os.path.isabs(p) else Path(p)
        if full.is_dir():
            found += [str(f.relative_to(ROOT)) for f in sorted(full.rglob("*")) if f.is_file()]
        else:
            found.append(str(full.relative_to(ROOT)))
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 on a change")
    ap.add_argument("paths", nargs="*")
    args = ap.parse_args(argv)
    changed, notes = [], []
    for rel in targets(args.paths):
        if rel in RECORDINGS or rel in SELF:
            continue
        try:
            # bytes, not read_text: line endings stay as they are
            text = (ROOT / rel).read_bytes().decode("utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary, or gone
        new, hand = rewrite_file(rel, text)
        notes += hand
        for n, line in enumerate(new.splitlines(), 1):
            if _LEFT.search(line):
                notes.append(f"{rel}:{n}: unmapped mention: {line.strip()[:80]}")
        if new != text:
            changed.append(rel)
            if not args.check:
                (ROOT / rel).write_bytes(new.encode("utf-8"))
    for rel in changed:
        print(("would rewrite " if args.check else "rewrote ") + rel)
    for note in notes:
        print(note, file=sys.stderr)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
