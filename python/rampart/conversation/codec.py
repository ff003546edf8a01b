"""The conversation log as bytes: the save file and the shared journal's entries.

A file is one JSON object ``{"format": "rampart-conversation", "version": 1,
"conversation_id", "tokeniser", "log": [entry, ...]}``; a journal entry is one
entry's JSON. Nothing read is trusted: :func:`check_entry` checks every field's
type and range before the entry is applied, sizes are bounded before parsing,
and a fault names the file (or journal) and the entry.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import rampart._args as _args
import rampart._files as _files
from rampart.conversation.items import KINDS, ROLES
from rampart.conversation.shapes import Piece, loads_strict
from rampart.errors import InvalidArgumentError, RegistryFileError

if TYPE_CHECKING:
    from rampart.conversation.items import ConversationView

__all__ = [
    "FORMAT",
    "MAX_FILE_BYTES",
    "check_entry",
    "decode_entry",
    "decode_file",
    "encode_entry",
    "encode_file",
    "piece_from_dict",
    "piece_to_dict",
]

FORMAT = "rampart-conversation"
VERSION = 1
#: The largest file ``Conversation.load`` reads (bytes; ``max_bytes=`` to change).
MAX_FILE_BYTES = 2 * 1024**3
_MAX_GROUPS = 100_000
_MAX_IDS = 10_000_000


def piece_to_dict(p: Piece) -> dict[str, Any]:
    """One parsed piece as the log's plain data."""
    d: dict[str, Any] = {"role": p.role, "kind": p.kind, "content": p.content}
    if p.tool_name is not None:
        d["tool_name"] = p.tool_name
    if p.call_id is not None:
        d["call_id"] = p.call_id
    if p.is_error:
        d["is_error"] = True
    if p.native is not None:
        d["native"] = p.native
    return d


def _opt_str(d: dict[str, Any], k: str) -> str | None:
    v = d.get(k)
    if v is not None and (not isinstance(v, str) or not v):
        raise InvalidArgumentError(f"{k} must be a non-empty string, got {type(v).__name__}")
    return None if v is None else _args.text(v, k)


def piece_from_dict(d: Any) -> Piece:
    """A piece from the log's plain data, checked (InvalidArgumentError)."""
    if not isinstance(d, dict):
        raise InvalidArgumentError(f"an item must be an object, got {type(d).__name__}")
    role, kind, content = d.get("role"), d.get("kind"), d.get("content")
    if role not in ROLES or kind not in KINDS or kind == "recall" or not isinstance(content, str):
        raise InvalidArgumentError(
            f"an item needs a role in {ROLES}, a kind in {KINDS} and string content"
        )
    native = _opt_str(d, "native")
    if native not in (None, "openai_responses", "anthropic", "gemini"):
        raise InvalidArgumentError(f"unknown native format {native!r}")
    if native is not None:
        # rendered to its provider as it is: an object, JSON every provider takes
        try:
            obj = loads_strict(content)
        except ValueError as exc:
            raise InvalidArgumentError(f"a {native} item's content is not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise InvalidArgumentError(f"a {native} item's content must be a JSON object")
    return Piece(
        role,
        kind,
        _args.text(content, "content"),
        _opt_str(d, "tool_name"),
        _opt_str(d, "call_id"),
        d.get("is_error") is True,
        native,
    )


def _ids(v: Any, conv: ConversationView) -> list[str]:
    if not isinstance(v, list) or len(v) > _MAX_IDS or not all(isinstance(i, str) for i in v):
        raise InvalidArgumentError("ids must be a list of item ids")
    unknown = [i for i in v if i not in conv._index]
    if unknown:
        raise InvalidArgumentError(f"names items the conversation does not hold: {unknown[:3]}")
    return v


def _check_strings(e: dict[str, Any]) -> None:
    """Every string of an entry, keys included, must be text: one with a lone
    surrogate (a "\\ud800" escape in the file) would be applied, then refused by
    the next save or tokeniser far from here. Iterative (entries nest little,
    but a file is not trusted); O(1) per ASCII string."""
    stack: list[tuple[Any, str]] = [(e, "entry")]
    while stack:
        node, where = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in items:
            at = f"{where}.{k}" if isinstance(k, str) else f"{where}[{k}]"
            if isinstance(k, str) and not k.isascii():
                _args.text(k, f"the key of {at}")
            if isinstance(v, str):
                if not v.isascii():
                    _args.text(v, at)
            elif isinstance(v, (dict, list)):
                stack.append((v, at))


def check_entry(e: Any, conv: ConversationView) -> None:
    """Refuse (InvalidArgumentError) an entry that does not apply to ``conv``
    as it is now."""
    if not isinstance(e, dict):
        raise InvalidArgumentError(f"a log entry must be an object, got {type(e).__name__}")
    _check_strings(e)
    op = e.get("op")
    if op == "append":
        groups = e.get("groups")
        if not isinstance(groups, list) or len(groups) > _MAX_GROUPS:
            raise InvalidArgumentError("an append needs a list of groups")
        for g in groups:
            if not isinstance(g, list):
                raise InvalidArgumentError("a group must be a list of items")
            for p in g:
                piece_from_dict(p)
        t = e.get("time", 0.0)
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            raise InvalidArgumentError("time must be a finite number")
        if e.get("trajectory_id") is not None and not isinstance(e["trajectory_id"], str):
            raise InvalidArgumentError("trajectory_id must be a string")
    elif op in ("clear", "drop", "compact", "recall"):
        ids = _ids(e.get("ids"), conv)
        _check_scores(e.get("scores"), ids)
        if op == "compact":
            s = e.get("summary")
            if not isinstance(s, dict) or not isinstance(s.get("content"), str) or not ids:
                raise InvalidArgumentError("a compaction needs a summary and the ids it covers")
            size = len(s["content"].encode("utf-8", "surrogatepass"))
            if size > conv.max_item_bytes:
                raise InvalidArgumentError(f"a summary of {size} bytes passes max_item_bytes")
        if op == "clear":
            bad = [
                i for i in ids if conv._items[conv._index[i]].kind not in ("tool_result", "recall")
            ]
            if bad:
                raise InvalidArgumentError(f"clears items that are not tool results: {bad[:3]}")
            ex = e.get("excerpts")
            if ex is not None:
                if not isinstance(ex, dict) or not set(ex) <= set(ids):
                    raise InvalidArgumentError("excerpts must map cleared ids to spans")
                for i, spans in ex.items():
                    _spans(spans, conv._items[conv._index[i]].content)
        if op == "recall":
            if len(ids) != 1 or conv._items[conv._index[ids[0]]].kind != "tool_result":
                raise InvalidArgumentError("a recall names the one tool result it brings back")
            if not isinstance(e.get("closing", False), bool):
                raise InvalidArgumentError("a recall's closing must be true or false")
            _spans(e.get("spans") or [], conv._items[conv._index[ids[0]]].content)
    elif op == "undo":
        target = e.get("of")
        if not isinstance(target, str) or not any(
            t.id == target and t.active for t in conv._transforms
        ):
            raise InvalidArgumentError(f"undoes no active transformation ({target!r})")
    elif op == "scale":
        v, prov = e.get("value"), e.get("provider")
        if (
            not isinstance(prov, str)
            or isinstance(v, bool)
            or not isinstance(v, (int, float))
            or not 0.25 <= v <= 4.0
        ):
            raise InvalidArgumentError("a scale entry needs a provider and a value in [0.25, 4]")
        c = e.get("constant", 0.0)
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0 <= c <= 1e6:
            raise InvalidArgumentError("a scale entry's constant must be a number in [0, 1e6]")
    else:
        raise InvalidArgumentError(f"unknown log entry {op!r}")


def _spans(v: Any, content: str) -> None:
    from rampart.conversation.retention import check_spans

    try:
        check_spans(v, content)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None


def _check_scores(v: Any, ids: list[str]) -> None:
    if v is None:
        return
    if not isinstance(v, dict) or not set(v) <= set(ids):
        raise InvalidArgumentError("scores must map the entry's ids to numbers")
    for x in v.values():
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise InvalidArgumentError("a score must be a finite number")


def _refuse_constant(token: str) -> Any:
    raise ValueError(f"{token} is not a JSON number")


def _loads(text: str) -> Any:
    # NaN and Infinity are not JSON: a file or journal holding them is refused
    # (no entry takes a non-finite number).
    return json.loads(text, parse_constant=_refuse_constant)


def _noting(found: list[str]) -> Any:
    """A ``parse_constant`` that reads NaN/Infinity as the float and notes the
    token, so that a file holding one is refused naming where (json's own
    error names a character offset only)."""

    def constant(token: str) -> float:
        found.append(token)
        return float(token)

    return constant


def _non_finite_where(data: Any, token: str) -> str:
    """Where the first non-finite number of a parsed save file is, in the words
    of the other load errors (``log entry 3: entry.time is NaN, …``)."""
    log = data.get("log") if isinstance(data, dict) else None
    for k, entry in enumerate(log if isinstance(log, list) else ()):
        stack: list[tuple[Any, str]] = [(entry, "entry")]
        while stack:
            node, where = stack.pop()
            if isinstance(node, float) and not math.isfinite(node):
                return f"log entry {k}: {where} is {token}, not a JSON number"
            if isinstance(node, dict):
                stack.extend((v, f"{where}.{key}") for key, v in reversed(node.items()))
            elif isinstance(node, list):
                stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(node))))
    return f"not a conversation file ({token} is not a JSON number)"


def encode_entry(e: dict[str, Any]) -> bytes:
    """One log entry as a journal entry's bytes (compact JSON, UTF-8). Strict:
    a lone surrogate or a non-finite number anywhere in it is an
    InvalidArgumentError naming the entry's op, raised before anything is
    written, so neither a journal nor a save file ever holds bytes that
    :func:`decode_entry` would refuse (appends check their strings first; this
    is the last guard, for every kind of entry)."""
    try:
        text = json.dumps(e, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            f"a conversation log entry ({e.get('op')!r}) holds a lone surrogate "
            f"{exc.object[exc.start]!r}, which is not text: nothing was written"
        ) from None
    except ValueError as exc:
        raise InvalidArgumentError(
            f"a conversation log entry ({e.get('op')!r}) is not JSON ({exc}): nothing was written"
        ) from None


def decode_entry(raw: bytes) -> dict[str, Any]:
    """A journal entry's bytes as a log entry (InvalidArgumentError if not one)."""
    try:
        v = _loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidArgumentError(f"not a JSON log entry ({exc})") from None
    if not isinstance(v, dict):
        raise InvalidArgumentError("a log entry must be a JSON object")
    return v


def encode_file(conversation_id: str, tokeniser: str, log: list[dict[str, Any]]) -> bytes:
    """The save file of a conversation: its header and the log, one entry a line."""
    head = {
        "format": FORMAT,
        "version": VERSION,
        "conversation_id": _args.text(conversation_id, "conversation_id"),
        "tokeniser": _args.text(tokeniser, "tokeniser"),
    }
    # one entry a line: a diff of two saves shows what was appended
    body = ",\n".join(encode_entry(e).decode("utf-8") for e in log)
    text = json.dumps(head, ensure_ascii=False)[:-1] + ', "log": [\n' + body + "\n]}\n"
    return text.encode("utf-8")


def decode_file(path: Path, max_bytes: int) -> tuple[str, str, list[dict[str, Any]]]:
    """(conversation id, tokeniser, log entries) of a save file, bounded by ``max_bytes``;
    RegistryFileError naming the file for anything else. Entries are checked when replayed."""
    try:
        # a regular file only (a FIFO would block the read), at most max_bytes + 1 read
        raw = _files.read_regular_file(path, max_bytes)
    except _files.FileProblem as exc:
        raise RegistryFileError(
            f"{path}: cannot read the conversation file ({exc}; max_bytes={max_bytes})"
        ) from None
    found: list[str] = []  # the NaN/Infinity tokens read: named below, by entry
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_noting(found))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RegistryFileError(f"{path}: not a conversation file ({exc})") from None
    if found:
        raise RegistryFileError(f"{path}: {_non_finite_where(data, found[0])}")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RegistryFileError(f"{path}: not a rampart conversation file")
    if data.get("version") != VERSION:
        raise RegistryFileError(
            f"{path}: conversation file version {data.get('version')!r}; this rampart reads "
            f"{VERSION} (written by a newer rampart?)"
        )
    cid, tok, log = data.get("conversation_id"), data.get("tokeniser"), data.get("log")
    if not isinstance(cid, str) or not cid or not isinstance(tok, str) or not isinstance(log, list):
        raise RegistryFileError(f"{path}: conversation_id, tokeniser or log missing or malformed")
    try:
        _args.text(cid, "conversation_id")
        _args.text(tok, "tokeniser")
    except InvalidArgumentError as exc:
        raise RegistryFileError(f"{path}: {exc}") from None
    return cid, tok, log
