"""The model's tool calls made safe to record and run: each call's name, id and
arguments repaired the way the provider APIs accept them (:func:`prepare`), the
outputs of an agent SDK's history paired with their calls (:func:`repair_items`),
the arguments read as an object (:func:`arguments`). Used by the agent loop
(:mod:`rampart.agent.calls` runs the calls) and by the integrations, which sit
below the agent and give their models' calls the same repair."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import rampart._http as _http
from rampart.llm import ToolCall
from rampart.tools.schema import TOOL_NAME

#: What a call id may hold to be recorded as the model wrote it: Anthropic's rule
#: for tool_use ids (OpenAI and Gemini take any string), so the run's conversation
#: renders for every provider.
CALL_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
#: The name a call is recorded under when the model gave no valid tool name
#: (empty, not a string, characters no API takes): the history must name a tool,
#: and no tool can have been meant. The error result quotes what it wrote.
NO_NAME = "invalid_tool_name"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(value: str) -> str:
    return value if value.isascii() else _LONE_SURROGATE.sub("\ufffd", value)


def _arguments_text(raw: Any) -> str:
    """A call's arguments as the text the conversation records: a string as the
    model wrote it (lone surrogates as U+FFFD, as the HTTP client does), an
    object as its JSON (NaN written as NaN: :func:`arguments` then refuses it,
    and the renderers send such text under one key), anything else as its repr."""
    if isinstance(raw, str):
        return _text(raw)
    if raw is None:
        return "{}"
    try:
        return _text(json.dumps(raw, ensure_ascii=False, default=repr))
    except (TypeError, ValueError, RecursionError):
        return _text(repr(type(raw)))


def prepare(raw_calls: Iterable[Any], step: int) -> list[tuple[ToolCall, str | None]]:
    """The calls of a reply as the run records them, each with the error the model
    is told instead of running it (None: run it). A backend's calls are the
    model's text: nothing in them is trusted to fit the history.

    - **id**: kept when it is 1-128 characters of ``A-Z a-z 0-9 _ -`` and no
      earlier call of the reply holds it; else (null, empty, a duplicate, other
      characters) the call gets ``call_<step>_<n>`` (unique in the reply), so every
      result is matched to its own call and every provider takes the history.
    - **name**: a name no tool can have (empty, not a string, outside the tool-name
      rule) is recorded as :data:`NO_NAME`, answered with an error quoting it.
    - **arguments**: text (:func:`_arguments_text`); whether they are JSON is
      :func:`arguments`' to say when the call runs."""
    raw = list(raw_calls)
    ids = [getattr(c, "id", None) for c in raw]
    taken = {i for i in ids if isinstance(i, str) and CALL_ID.fullmatch(i)}
    seen: set[str] = set()
    out: list[tuple[ToolCall, str | None]] = []
    for n, (c, cid) in enumerate(zip(raw, ids)):
        if not isinstance(cid, str) or not CALL_ID.fullmatch(cid) or cid in seen:
            cid = f"call_{step}_{n}"
            while cid in taken or cid in seen:
                cid += "_"
        seen.add(cid)
        name = getattr(c, "name", None)
        problem = None
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            shown = _text(name)[:100] if isinstance(name, str) else type(name).__name__
            problem = (
                f"error: the call names no tool ({shown!r} is not a tool name: 1-64 "
                "characters from A-Z a-z 0-9 _ -); call one of the tools offered by its name"
            )
            name = NO_NAME
        args = _arguments_text(getattr(c, "arguments", None))
        out.append((ToolCall(cid, name, args), problem))
    return out


_MAX_WAITING = 4096  # call ids remembered for pairing their outputs, at most


class RawCall:
    """A call as :func:`prepare` reads one (``id``, ``name``, ``arguments``)."""

    __slots__ = ("arguments", "id", "name")

    def __init__(self, cid: Any, name: Any, arguments: Any) -> None:
        self.id, self.name, self.arguments = cid, name, arguments


def _key(cid: Any) -> Any:
    return cid if cid is None or isinstance(cid, (str, int)) else repr(cid)


def repair_items(
    items: list[Any], step: int, waiting: dict[Any, list[str]] | None = None
) -> list[Any]:
    """Responses-shape items (``function_call`` / ``function_call_output`` dicts,
    what the Agents SDK stores) with the repair :func:`prepare` makes for the
    :class:`~rampart.agent.Agent`: each run of consecutive ``function_call``
    items is one reply, whose ids and names are repaired as ``prepare`` does;
    an output names the call it answered by the id the model wrote, so it is
    given the repaired id of the first call of that id not answered yet (in
    order, so two calls the model gave one id keep their own outputs). Items
    that need nothing are returned as they are (the same objects).

    ``waiting`` (the id the model wrote -> the repaired ids of its calls not
    answered yet, in order) carries the pairing from one batch to the next:
    a session is given a call and its output in separate batches."""
    out = list(items)
    waiting = {} if waiting is None else waiting
    i = 0
    while i < len(out):
        it = out[i]
        kind = it.get("type") if isinstance(it, dict) else None
        if kind == "function_call_output":
            key = _key(it.get("call_id"))
            ids = waiting.get(key)
            if ids:
                new = ids.pop(0)
                if not ids:
                    del waiting[key]
                if new != it.get("call_id"):
                    out[i] = {**it, "call_id": new}
            i += 1
            continue
        if kind != "function_call":
            i += 1
            continue
        j = i
        while j < len(out) and isinstance(out[j], dict) and out[j].get("type") == "function_call":
            j += 1
        reply = out[i:j]
        raw = [RawCall(c.get("call_id"), c.get("name"), c.get("arguments")) for c in reply]
        for k, (c, (call, _)) in enumerate(zip(reply, prepare(raw, step))):
            waiting.setdefault(_key(c.get("call_id")), []).append(call.id)
            if (call.id, call.name) != (c.get("call_id"), c.get("name")):
                out[i + k] = {**c, "call_id": call.id, "name": call.name}
        while len(waiting) > _MAX_WAITING:  # calls never answered: the oldest go
            del waiting[next(iter(waiting))]
        i = j
    return out


def assistant_message(text: Any, prepared: Iterable[tuple[ToolCall, Any]]) -> dict[str, Any]:
    """The assistant message a reply is recorded as: its text, and its calls as
    :func:`prepare` made them."""
    msg: dict[str, Any] = {"role": "assistant", "content": text if isinstance(text, str) else ""}
    calls = [c.to_message() for c, _ in prepared]
    if calls:
        msg["tool_calls"] = calls
    return msg


def arguments(call: ToolCall) -> dict[str, Any] | str:
    """The call's arguments as an object, or the error message the model is told."""
    try:
        args = _http.loads_text(call.arguments) if call.arguments.strip() else {}
    except ValueError as exc:
        return f"error: the arguments of {call.name!r} are not JSON ({exc}): {call.arguments:.200}"
    if not isinstance(args, dict):
        return f"error: {call.name} arguments must be a JSON object: {call.arguments:.200}"
    return args
