"""Provider message shapes in and out: OpenAI Chat, OpenAI Responses, Anthropic
Messages and Gemini ``contents``.

In: :func:`parse` turns one message (a dict or an SDK object) into
:class:`Piece` s, one per item, refusing what it cannot represent with an
UnsupportedFormatError naming the message. The shapes overlap (``{"role":
"user", "content": "hi"}`` is valid in three APIs), so a message is read by
what it holds, not by a declared format.

Out: :func:`render` builds one format's message list from the compiled view.
Choices (docs/conversation.md):

- A summary is a user message ``[Summary of earlier turns] …`` (every API
  takes a user text; none has a summary role).
- A system item is an OpenAI message; Anthropic and Gemini have no system role
  inside the messages, so rendering one there is an UnsupportedFormatError
  (put that text in the registry, where it compiles into the system prompt).
- A tool call with no result gets a stub result right after it (every API
  rejects an unanswered call in the history).
- Provider-opaque items (``native``) go to their own format only.
- Anthropic and Gemini messages merge consecutive items of one role (both
  APIs want alternating roles); content is always a list of blocks there, so
  appending never changes how an earlier message is written.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rampart.conversation.items import ConversationItem
from rampart.errors import UnsupportedFormatError

__all__ = ["FORMATS", "Piece", "loads_strict", "parse", "plain", "render"]

FORMATS = ("openai_chat", "openai_responses", "anthropic", "gemini")

#: How deep a tool call's arguments may nest (JSON depth): deeper is refused,
#: not a RecursionError somewhere in json.
MAX_DEPTH = 64

SUMMARY_HEAD = "[Summary of earlier turns]\n"
NO_RESULT = "[no result was recorded for this call]"
CONTINUED = "(continued)"


@dataclass(frozen=True, slots=True)
class Piece:
    """One item as parsed, before the conversation gives it an id and a count."""

    role: str
    kind: str
    content: str
    tool_name: str | None = None
    call_id: str | None = None
    is_error: bool = False
    native: str | None = None


_PRIMITIVE = (str, int, float, bool, type(None))


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` with SDK (pydantic) objects dumped to plain dicts, bounded in
    depth. Plain data comes back as the same objects (no copy)."""
    if isinstance(value, _PRIMITIVE):
        return value
    if depth > MAX_DEPTH:
        raise UnsupportedFormatError(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        out = None
        for k, v in value.items():
            if isinstance(v, _PRIMITIVE):
                continue
            nv = plain(v, depth + 1)
            if nv is not v:
                if out is None:
                    out = dict(value)
                out[k] = nv
        return value if out is None else out
    if isinstance(value, list):
        items = None
        for i, v in enumerate(value):
            if isinstance(v, _PRIMITIVE):
                continue
            nv = plain(v, depth + 1)
            if nv is not v:
                if items is None:
                    items = list(value)
                items[i] = nv
        return value if items is None else items
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return plain(dump(mode="json", exclude_none=True), depth + 1)
    if isinstance(value, Mapping):
        return plain(dict(value), depth)
    if isinstance(value, tuple):
        return plain(list(value), depth)
    return value


def _json(value: Any, where: str) -> str:
    # allow_nan=False: NaN and Infinity are not JSON; Python's json would write
    # them bare, and every provider refuses the body that carries them.
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as exc:
        why = "it holds NaN or Infinity" if "Out of range float" in str(exc) else str(exc)
        raise UnsupportedFormatError(f"{where}: not JSON ({why})") from None
    except (TypeError, RecursionError) as exc:
        raise UnsupportedFormatError(f"{where}: not JSON ({exc})") from None


class _NotJSON(ValueError):
    pass


def _refuse_constant(token: str) -> Any:
    raise _NotJSON(f"{token} is not a JSON number")


def _finite_float(token: str) -> float:
    v = float(token)
    if not math.isfinite(v):  # 1e999 parses as infinity
        raise _NotJSON(f"{token} overflows to infinity")
    return v


def _not_text(s: str) -> bool:
    return not s.isascii() and _LONE_SURROGATE.search(s) is not None


def _problem(value: Any) -> str | None:
    """Why parsed JSON cannot go into a body as it is: nesting past MAX_DEPTH, or
    a string (a key too) holding a lone surrogate (a "\\ud800" escape decodes
    to one, and no body with it can be encoded). Iterative: the value may nest
    almost to the recursion limit."""
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            if _not_text(node):
                return "it holds a lone surrogate, which is not text"
            continue
        if depth > MAX_DEPTH:
            return f"it nests deeper than {MAX_DEPTH} levels"
        if isinstance(node, dict):
            if any(_not_text(k) for k in node):
                return "it holds a lone surrogate, which is not text"
            children: Any = node.values()
        else:
            children = node
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list, str)))
    return None


def loads_strict(text: str) -> Any:
    """``text`` as JSON that every provider takes back: ValueError when it is not
    JSON, holds NaN or Infinity (or a number that overflows to it), a string
    with a lone surrogate, or nests deeper than :data:`MAX_DEPTH` levels (never
    a RecursionError). The renderers parse stored text only through this, so no
    body they build can hold a value ``json.dumps`` would write as bare ``NaN``,
    or one that cannot be encoded as UTF-8."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError(f"it nests deeper than {MAX_DEPTH} levels") from None
    problem = _problem(value) if isinstance(value, (dict, list, str)) else None
    if problem is not None:
        raise ValueError(problem)
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise UnsupportedFormatError(f"{where} must be a string, got {type(value).__name__}")
    return value


_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


def _texts(content: Any, where: str) -> list[str]:
    """The texts of a content value: a string, or a list of text parts."""
    if content is None:
        return []
    if isinstance(content, str):
        return [content] if content else []
    if not isinstance(content, list):
        raise UnsupportedFormatError(
            f"{where}: content must be a string or a list of parts, got {type(content).__name__}"
        )
    out = []
    for j, part in enumerate(content):
        if isinstance(part, str):
            out.append(part)
            continue
        if not isinstance(part, Mapping):
            raise UnsupportedFormatError(f"{where}: content[{j}] is not a part")
        kind = part.get("type")
        if kind in _TEXT_PARTS:
            out.append(_str(part.get("text"), f"{where}: content[{j}].text"))
        elif kind == "refusal":
            out.append(_str(part.get("refusal"), f"{where}: content[{j}].refusal"))
        else:
            raise UnsupportedFormatError(
                f"{where}: content[{j}] is a {kind!r} part; a Conversation holds text, tool "
                "calls and tool results (send images and files outside it)"
            )
    return [t for t in out if t]


def _arguments(raw: Any, where: str) -> str:
    if raw is None:
        return "{}"
    if isinstance(raw, str):
        return raw
    if isinstance(raw, Mapping):
        return _json(raw, where)
    raise UnsupportedFormatError(f"{where}: arguments must be a JSON string or an object")


def _openai_chat(m: Mapping[str, Any], where: str) -> list[Piece]:
    role = m["role"]
    content = m.get("content")
    if (
        role in ("user", "assistant")
        and isinstance(content, list)
        and any(isinstance(b, Mapping) and b.get("type") in _ANTHROPIC_ONLY for b in content)
    ):
        return _anthropic(m, where)
    if role in ("system", "developer"):
        return [Piece("system", "text", t) for t in _texts(m.get("content"), where)]
    if role == "user":
        return [Piece("user", "text", t) for t in _texts(m.get("content"), where)]
    if role == "tool":
        call = m.get("tool_call_id")
        if not isinstance(call, str) or not call:
            raise UnsupportedFormatError(f"{where}: a tool message needs a string tool_call_id")
        return [Piece("tool", "tool_result", "".join(_texts(m.get("content"), where)), None, call)]
    if role != "assistant":
        raise UnsupportedFormatError(f"{where}: unknown role {role!r}")
    out = [Piece("assistant", "text", t) for t in _texts(content, where)]
    calls = m.get("tool_calls") or []
    if not isinstance(calls, list):
        raise UnsupportedFormatError(f"{where}: tool_calls must be a list")
    for j, c in enumerate(calls):
        w = f"{where}: tool_calls[{j}]"
        if not isinstance(c, Mapping) or not isinstance(c.get("function"), Mapping):
            raise UnsupportedFormatError(f"{w} must be a function call")
        fn = c["function"]
        name, cid = fn.get("name"), c.get("id")
        if not isinstance(name, str) or not name or not isinstance(cid, str) or not cid:
            raise UnsupportedFormatError(f"{w} needs a string id and function.name")
        out.append(Piece("assistant", "tool_call", _arguments(fn.get("arguments"), w), name, cid))
    return out


_ANTHROPIC_ONLY = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})


def _anthropic(m: Mapping[str, Any], where: str) -> list[Piece]:
    role = m["role"]
    content = m.get("content")
    if role not in ("user", "assistant"):
        raise UnsupportedFormatError(f"{where}: unknown role {role!r}")
    if not isinstance(content, list):
        return [Piece(role, "text", t) for t in _texts(content, where)]
    out: list[Piece] = []
    for j, b in enumerate(content):
        w = f"{where}: content[{j}]"
        if not isinstance(b, Mapping):
            raise UnsupportedFormatError(f"{w} is not a content block")
        kind = b.get("type")
        if kind == "text":
            t = _str(b.get("text"), f"{w}.text")
            if t:
                out.append(Piece(role, "text", t))
        elif kind == "tool_use" and role == "assistant":
            name, cid = b.get("name"), b.get("id")
            if not isinstance(name, str) or not name or not isinstance(cid, str) or not cid:
                raise UnsupportedFormatError(f"{w}: a tool_use needs a string id and name")
            args = b.get("input", {})
            if not isinstance(args, Mapping):
                raise UnsupportedFormatError(f"{w}: tool_use input must be an object")
            out.append(Piece("assistant", "tool_call", _json(args, w), name, cid))
        elif kind == "tool_result" and role == "user":
            cid = b.get("tool_use_id")
            if not isinstance(cid, str) or not cid:
                raise UnsupportedFormatError(f"{w}: a tool_result needs a string tool_use_id")
            text = "".join(_texts(b.get("content"), w))
            out.append(Piece("tool", "tool_result", text, None, cid, bool(b.get("is_error"))))
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            out.append(Piece("assistant", "text", _json(dict(b), w), native="anthropic"))
        else:
            raise UnsupportedFormatError(
                f"{w} is a {kind!r} block in a {role} message; a Conversation holds text, "
                "tool_use/tool_result and thinking blocks"
            )
    return out


def _gemini(m: Mapping[str, Any], where: str) -> list[Piece]:
    role = m.get("role", "user")
    if role not in ("user", "model", "function"):
        raise UnsupportedFormatError(f"{where}: unknown Gemini role {role!r}")
    parts = m.get("parts")
    if not isinstance(parts, list):
        raise UnsupportedFormatError(f"{where}: parts must be a list")
    out: list[Piece] = []
    for j, p in enumerate(parts):
        w = f"{where}: parts[{j}]"
        if not isinstance(p, Mapping):
            raise UnsupportedFormatError(f"{w} is not a part")
        if "text" in p:
            t = _str(p["text"], f"{w}.text")
            if t and not p.get("thought"):  # thought summaries are not history
                out.append(Piece("assistant" if role == "model" else "user", "text", t))
        elif "functionCall" in p or "function_call" in p:
            fc = p.get("functionCall", p.get("function_call"))
            if not isinstance(fc, Mapping) or not isinstance(fc.get("name"), str) or not fc["name"]:
                raise UnsupportedFormatError(f"{w}: functionCall needs a name")
            args = fc.get("args", {})
            if not isinstance(args, Mapping):
                raise UnsupportedFormatError(f"{w}: functionCall args must be an object")
            cid = fc.get("id")
            out.append(
                Piece(
                    "assistant",
                    "tool_call",
                    _json(args, w),
                    fc["name"],
                    cid if isinstance(cid, str) and cid else None,
                )
            )
        elif "functionResponse" in p or "function_response" in p:
            fr = p.get("functionResponse", p.get("function_response"))
            if not isinstance(fr, Mapping) or not isinstance(fr.get("name"), str) or not fr["name"]:
                raise UnsupportedFormatError(f"{w}: functionResponse needs a name")
            resp = fr.get("response", {})
            text = _json(resp, w) if not isinstance(resp, str) else resp
            cid = fr.get("id")
            out.append(
                Piece(
                    "tool",
                    "tool_result",
                    text,
                    fr["name"],
                    cid if isinstance(cid, str) and cid else None,
                )
            )
        else:
            raise UnsupportedFormatError(
                f"{w} holds {sorted(p)[:3]}; a Conversation holds text, functionCall and "
                "functionResponse parts"
            )
    return out


def _responses(m: Mapping[str, Any], where: str) -> list[Piece]:
    kind = m.get("type")
    if kind == "function_call":
        name, cid = m.get("name"), m.get("call_id")
        if not isinstance(name, str) or not name or not isinstance(cid, str) or not cid:
            raise UnsupportedFormatError(
                f"{where}: a function_call needs a string call_id and name"
            )
        return [Piece("assistant", "tool_call", _arguments(m.get("arguments"), where), name, cid)]
    if kind == "function_call_output":
        cid = m.get("call_id")
        if not isinstance(cid, str) or not cid:
            raise UnsupportedFormatError(f"{where}: a function_call_output needs a call_id")
        out = m.get("output")
        return [Piece("tool", "tool_result", "".join(_texts(out, where)), None, cid)]
    if kind == "compaction":
        _str(m.get("encrypted_content"), f"{where}.encrypted_content")
        keep = {k: m[k] for k in ("type", "encrypted_content", "id") if k in m}
        return [Piece("summary", "summary", _json(keep, where), native="openai_responses")]
    if kind == "reasoning":
        keep = {k: v for k, v in m.items() if k != "status"}
        return [Piece("assistant", "text", _json(keep, where), native="openai_responses")]
    if kind == "message":
        role = m.get("role")
        if role not in ("user", "assistant", "system", "developer"):
            raise UnsupportedFormatError(f"{where}: unknown role {role!r}")
        r = "system" if role == "developer" else role
        return [Piece(r, "text", t) for t in _texts(m.get("content"), where)]
    raise UnsupportedFormatError(
        f"{where}: a Responses item of type {kind!r}; a Conversation holds messages, "
        "function_call, function_call_output, reasoning and compaction items"
    )


# A UTF-16 surrogate alone (JSON's "\ud800" decodes to one) is not text: no
# tokeniser or UTF-8 file takes it. Replaced by U+FFFD at the door.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _clean(p: Piece) -> Piece:
    fields = (p.content, p.tool_name or "", p.call_id or "")
    if all(f.isascii() for f in fields):
        return p
    sub = _LONE_SURROGATE.sub
    return Piece(
        p.role,
        p.kind,
        sub("\ufffd", p.content),
        None if p.tool_name is None else sub("\ufffd", p.tool_name),
        None if p.call_id is None else sub("\ufffd", p.call_id),
        p.is_error,
        p.native,
    )


def parse(message: Any, where: str) -> list[Piece]:
    """The pieces of one message in any of the four shapes (module docstring)."""
    return [_clean(p) for p in _parse(message, where)]


def _parse(message: Any, where: str) -> list[Piece]:
    m = plain(message)
    if not isinstance(m, Mapping):
        raise UnsupportedFormatError(
            f"{where} must be a message dict (or an SDK message object), got {type(m).__name__}"
        )
    if (isinstance(m.get("type"), str) and m["type"] != "message") or "call_id" in m:
        return _responses(m, where)
    if "parts" in m:
        return _gemini(m, where)
    role = m.get("role")
    if not isinstance(role, str):
        raise UnsupportedFormatError(f"{where} has no string 'role' (nor a Responses 'type')")
    content = m.get("content")
    if m.get("type") == "message" and not (
        isinstance(content, list)
        and any(isinstance(b, Mapping) and b.get("type") in _ANTHROPIC_ONLY for b in content)
    ):
        return _responses(m, where)
    return _openai_chat(m, where)


# ---- out ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Shown:
    """One item as a compile shows it: the item, and the content it is sent with
    (the stub for a cleared result or input)."""

    item: ConversationItem
    content: str


def _input_object(args: str) -> dict[str, Any]:
    # Anthropic and Gemini take the arguments as an object; a model's invalid JSON
    # (NaN, Infinity and nesting past MAX_DEPTH included: loads_strict) or a JSON
    # value that is not an object travels under one key instead.
    try:
        v = loads_strict(args)
    except ValueError:
        return {"arguments": args}
    return v if isinstance(v, dict) else {"arguments": v}


def _response_object(text: str) -> dict[str, Any]:
    try:
        v = loads_strict(text)
    except ValueError:
        return {"result": text}
    return v if isinstance(v, dict) else {"result": text}


def _native(it: Any) -> Any:
    # A provider-opaque item's JSON, written by _json at append (or checked by the
    # codec when a file or journal was read): an object every provider takes.
    try:
        return loads_strict(it.content)
    except ValueError as exc:
        raise UnsupportedFormatError(
            f"conversation item {it.id}: its {it.native} item is not JSON ({exc})"
        ) from None


def _no_system(s: Shown, fmt: str) -> None:
    raise UnsupportedFormatError(
        f"conversation item {s.item.id} is a system message, which the {fmt} API does not "
        "take inside the messages: write it into the registry so it compiles into the "
        "system prompt"
    )


def render(shown: Sequence[Shown], fmt: str) -> list[dict[str, Any]]:
    """The message list of ``fmt`` for the items ``shown``, in order, except that
    a question's recalls come before it (:func:`question_last`)."""
    shown = question_last(shown)
    if fmt == "openai_chat":
        return _render_chat(shown)
    if fmt == "openai_responses":
        return _render_responses(shown)
    if fmt == "anthropic":
        return _render_merged(shown, "anthropic")
    if fmt == "gemini":
        return _render_merged(shown, "gemini")
    raise UnsupportedFormatError(f"unknown message format {fmt!r}; one of {', '.join(FORMATS)}")


def question_last(shown: Sequence[Shown]) -> Sequence[Shown]:
    """``shown`` with each run of recall items sent before the user's text they
    follow, so the question is the last thing the model reads. A recall is
    appended after the question that asked for it (the log only grows), but a
    1.5B model read the question above the recalled text worse than below it: of
    27 task-success holdout question requests that held a recall, the same text
    with the recalls moved before the question answered 16, against 9 as sent
    (7 more, none fewer; restating the question after the recall instead: 13).
    The question was new in that request, so the cached prefix is the same
    either way; later requests keep this order."""
    if not any(s.item.kind == "recall" for s in shown):  # the common case: no copy
        return shown
    out = list(shown)
    k = 0
    while k < len(out):
        it = out[k].item
        if it.role == "user" and it.kind == "text":
            j = k + 1
            while j < len(out) and out[j].item.kind == "recall":
                j += 1
            if j > k + 1:
                out[k:j] = [*out[k + 1 : j], out[k]]
            k = j
        else:
            k += 1
    return out


def _late(it: Any, content: str) -> str:
    """A tool result that does not follow its call (other items came between):
    sent as text, its call answered by a stub, so nothing is reordered and no
    API sees a result away from its call."""
    return f"[result of the earlier call {it.call_id} ({it.tool_name or 'tool'})]\n{content}"


def _render_chat(shown: Sequence[Shown]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # calls of the open assistant message not yet answered

    def close() -> None:
        for cid in pending:
            out.append({"role": "tool", "tool_call_id": cid, "content": NO_RESULT})
        pending.clear()

    current: dict[str, Any] | None = None  # the open assistant message
    group = None
    for s in shown:
        it = s.item
        if it.native is not None:
            continue
        if it.role == "assistant":
            if current is None or group != it.group:
                close()
                current = {"role": "assistant", "content": None}
                group = it.group
                out.append(current)
            if it.kind == "text":
                current["content"] = (
                    s.content if current["content"] is None else current["content"] + s.content
                )
            else:
                current.setdefault("tool_calls", []).append(
                    {
                        "id": it.call_id,
                        "type": "function",
                        "function": {"name": it.tool_name, "arguments": s.content},
                    }
                )
                pending.append(it.call_id or "")
            continue
        current = None
        if it.kind == "tool_result" and it.call_id in pending:
            pending.remove(it.call_id)
            out.append({"role": "tool", "tool_call_id": it.call_id, "content": s.content})
            continue
        close()
        if it.kind == "tool_result":
            out.append({"role": "user", "content": _late(it, s.content)})
        elif it.role == "system":
            out.append({"role": "system", "content": s.content})
        elif it.kind == "summary":
            out.append({"role": "user", "content": SUMMARY_HEAD + s.content})
        else:
            out.append({"role": "user", "content": s.content})
    close()
    return out


def _render_responses(shown: Sequence[Shown]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    pending: list[str] = []

    def close() -> None:
        for cid in pending:
            out.append({"type": "function_call_output", "call_id": cid, "output": NO_RESULT})
        pending.clear()

    for s in shown:
        it = s.item
        if it.native is not None:
            if it.native == "openai_responses":
                close()
                out.append(_native(it))
            continue
        if it.kind == "tool_call":
            out.append(
                {
                    "type": "function_call",
                    "call_id": it.call_id,
                    "name": it.tool_name,
                    "arguments": s.content,
                }
            )
            pending.append(it.call_id or "")
            continue
        if it.kind == "tool_result" and it.call_id in pending:
            pending.remove(it.call_id)
            out.append({"type": "function_call_output", "call_id": it.call_id, "output": s.content})
            continue
        close()
        if it.kind == "tool_result":
            out.append({"role": "user", "content": _late(it, s.content)})
        elif it.kind == "summary":
            out.append({"role": "user", "content": SUMMARY_HEAD + s.content})
        else:
            out.append({"role": it.role, "content": s.content})
    close()
    return out


def _render_merged(shown: Sequence[Shown], fmt: str) -> list[dict[str, Any]]:
    anthropic = fmt == "anthropic"
    assistant = "assistant" if anthropic else "model"
    out: list[dict[str, Any]] = []
    key = "content" if anthropic else "parts"
    pending: list[Any] = []  # call items of the open assistant message not yet answered

    def add(role: str, block: dict[str, Any]) -> None:
        if out and out[-1]["role"] == role:
            out[-1][key].append(block)
        else:
            out.append({"role": role, key: [block]})

    def close() -> None:
        for it in pending:
            add("user", _result_block(it, NO_RESULT, anthropic))
        pending.clear()

    def text(role: str, t: str) -> None:
        add(role, {"type": "text", "text": t} if anthropic else {"text": t})

    for s in shown:
        it = s.item
        if it.native is not None:
            if it.native == fmt:
                if out and out[-1]["role"] != assistant:
                    close()
                add(assistant, _native(it))
            continue
        if it.role == "system":
            _no_system(s, "Anthropic Messages" if anthropic else "Gemini")
        if it.kind == "tool_call":
            if out and out[-1]["role"] != assistant:
                close()
            if anthropic:
                block = {
                    "type": "tool_use",
                    "id": it.call_id,
                    "name": it.tool_name,
                    "input": _input_object(s.content),
                }
            else:
                block = {
                    "functionCall": {
                        "id": it.call_id,
                        "name": it.tool_name,
                        "args": _input_object(s.content),
                    }
                }
            add(assistant, block)
            pending.append(it)
            continue
        if it.kind == "tool_result":
            match = [p for p in pending if p.call_id == it.call_id]
            if match:
                pending.remove(match[0])
                add("user", _result_block(it, s.content, anthropic))
                continue
            close()
            text("user", _late(it, s.content))
            continue
        role = assistant if it.role == "assistant" else "user"
        if role != assistant or (out and out[-1]["role"] != assistant):
            close()  # an assistant text inside the calls' own message keeps them open
        text(role, SUMMARY_HEAD + s.content if it.kind == "summary" else s.content)
    close()
    if out and out[0]["role"] != "user":
        # Both APIs want the user to speak first; a history that starts with the
        # model (a greeting, or older turns dropped) gets a placeholder turn.
        out.insert(
            0,
            {
                "role": "user",
                key: [{"type": "text", "text": CONTINUED} if anthropic else {"text": CONTINUED}],
            },
        )
    return out


def _result_block(it: Any, content: str, anthropic: bool) -> dict[str, Any]:
    if anthropic:
        b: dict[str, Any] = {"type": "tool_result", "tool_use_id": it.call_id}
        if content:
            b["content"] = content
        if it.is_error:
            b["is_error"] = True
        return b
    return {
        "functionResponse": {
            "id": it.call_id,
            "name": it.tool_name or "unknown",
            "response": _response_object(content),
        }
    }
