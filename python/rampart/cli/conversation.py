"""What ``rampart compile --conversation FILE`` reads: a saved conversation or a
list of messages in any of the four shapes, each fault one line naming the file and
the entry; and the per-message rows of the report.

A file is, in this order of detection:

- a saved :class:`rampart.Conversation` (``conv.save(path)``: a JSON object with
  ``"format": "rampart-conversation"``), read by ``Conversation.load`` (bounded,
  checked entry by entry, its recorded clearing steps replayed);
- a JSON list of messages (OpenAI Chat, OpenAI Responses items, Anthropic or Gemini
  messages: ``Conversation.append`` detects the shape of each);
- a JSON object holding such a list under ``messages`` (an OpenAI Chat or Anthropic
  request body), ``input`` (Responses) or ``contents`` (Gemini);
- one message (a JSON object with ``role``, ``type`` or ``parts``);
- JSON Lines: one message per line.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import rampart._files as _files
from rampart.cli.common import CliError
from rampart.conversation import Conversation
from rampart.conversation.codec import FORMAT, MAX_FILE_BYTES
from rampart.conversation.items import one_line
from rampart.errors import InvalidArgumentError, UnsupportedFormatError

__all__ = ["load_conversation", "message_rows"]

# The request-body keys a message list may sit under, by API.
_LIST_KEYS = ("messages", "input", "contents")
# How the conversation's own errors begin ("message: ...", "message 0: ..."): the
# CLI names the entry itself, with its number in the file.
_WHERE = re.compile(r"^message( \d+)?: ")


def load_conversation(path: str) -> Conversation:
    """The conversation in ``path`` (see the module docstring), or a CliError
    naming the file and the entry at fault."""
    if not os.path.lexists(path):
        raise CliError(f"{path}: no such file or directory")
    if os.path.isdir(path):
        raise CliError(f"{path}: a directory, not a conversation file")
    try:
        # The one reader of untrusted files (docs/limits.md): a regular file only,
        # opened non-blocking and checked with fstat, so a FIFO without a writer
        # or a device is refused at once instead of hanging or reading forever;
        # at most MAX_FILE_BYTES + 1 bytes read, whatever the size claims.
        raw = _files.read_regular_file(Path(path), MAX_FILE_BYTES)
    except _files.FileProblem as exc:
        raise CliError(f"{path}: cannot read it ({exc})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CliError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise CliError(f"{path}: empty: no messages")
    try:
        data: Any = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return _from_messages(path, _json_lines(path, text, exc))
    if isinstance(data, dict) and "format" in data:
        if data.get("format") != FORMAT:
            raise CliError(
                f"{path}: a JSON object with format {data.get('format')!r}, "
                "not a saved conversation"
            )
        # Bounded and checked entry by entry; a fault is a RegistryFileError that
        # names the file and the log entry (one line, exit status 2).
        return Conversation.load(path)
    if isinstance(data, dict):
        key = next((k for k in _LIST_KEYS if isinstance(data.get(k), list)), None)
        if key is None and any(k in data for k in ("role", "type", "parts")):
            return _from_messages(path, [(0, None, data)])  # one message
        if key is None:
            raise CliError(
                f"{path}: a JSON object with no message list (a saved conversation, a list of "
                f"messages, or an object with {', '.join(repr(k) for k in _LIST_KEYS)})"
            )
        return _from_messages(path, [(i, None, m) for i, m in enumerate(data[key])])
    if isinstance(data, list):
        return _from_messages(path, [(i, None, m) for i, m in enumerate(data)])
    raise CliError(f"{path}: JSON {type(data).__name__}, not a list of messages")


def _json_lines(path: str, text: str, whole: Exception) -> list[tuple[int, int | None, Any]]:
    """(message number, line, message) for a JSON Lines file; the JSON error of the
    whole file when its first line is not JSON either (then it was meant as one
    document)."""
    out: list[tuple[int, int | None, Any]] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((len(out), line_no, json.loads(line)))
        except (ValueError, RecursionError) as exc:
            if not out:
                raise CliError(f"{path}: not JSON ({_first_line(whole)})") from None
            raise CliError(f"{path}: line {line_no}: not JSON ({_first_line(exc)})") from None
    return out


def _from_messages(path: str, entries: list[tuple[int, int | None, Any]]) -> Conversation:
    if not entries:
        raise CliError(f"{path}: no messages")
    conv = Conversation()
    for i, line, m in entries:
        # One at a time: the error names the entry in the file (a tool result's
        # call is found among the messages appended before it).
        try:
            conv.append(m)
        except (UnsupportedFormatError, InvalidArgumentError) as exc:
            at = f"message {i}" + (f" (line {line})" if line is not None else "")
            raise CliError(f"{path}: {at}: {_WHERE.sub('', _first_line(exc))}") from None
    if not len(conv):
        raise CliError(f"{path}: {len(entries)} messages, none with content")
    return conv


def _first_line(exc: BaseException) -> str:
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    return "; ".join(lines) or type(exc).__name__


def message_rows(result: Any) -> list[str]:
    """One line per conversation item: its tool and call id (what the provider
    calls it), action, tokens (as appended, when that differs), relevance score
    and rank, and the reason."""
    ctx = result.context
    if ctx is None:
        return []
    marks = {"kept": "=", "cleared": "~", "excerpted": "≈", "recalled": "+"}
    report = ctx.message_report
    width = max((len(str(m.id)) for m in report), default=4)
    # the names a model wrote are one bounded line here (a tool name may hold anything)
    whats = [
        " ".join(
            one_line(x, 24)
            for x in (getattr(m, "tool_name", None) or m.kind, getattr(m, "call_id", None))
            if x
        )
        for m in report
    ]
    # wide enough for the usual "git_show call_12", never wider than a screen allows
    what_width = min(max((len(w) for w in whats), default=16), 32)
    out = []
    for m, what in zip(report, whats):
        tokens = f"{m.tokens:>6} tok"
        if m.original_tokens != m.tokens:
            tokens += f" (of {m.original_tokens})"
        score = getattr(m, "score", None)
        rank = getattr(m, "rank", None)
        rel = "" if score is None else f"  relevance {score:.2f}" + (f" #{rank}" if rank else "")
        why = f"  {m.reason}" if m.reason else ""
        mark = marks.get(m.action, "-")
        line = f" {mark} {m.id:<{width}}  {m.role:<9} {what:<{what_width}} {tokens}  {m.action}"
        line += rel + why
        out.append(line.rstrip())
    return out
