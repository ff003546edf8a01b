"""Request bodies for chat APIs, built from a compiled context.

Plain dicts, no SDK import: pass them as keyword arguments to the SDK
(``client.chat.completions.create(**openai_chat(result, messages, model="gpt-4o"))``,
``client.messages.create(**anthropic_messages(result, messages, model=...))``) or
post them as JSON. The compiled prompt becomes the system prompt and the included
tool blocks become the ``tools`` list, so a tool that was gated out, cut by the
budget or evicted is absent from the request altogether.

Choices: an empty prompt sends no system prompt and an empty tool list no ``tools``
key (both APIs reject ``tools: []`` or treat it as noise); ``messages`` are copied
into a new list but plain message dicts themselves are not copied; ``model`` is left
out when ``None`` (for callers that add it later); ``**extra`` keys (``temperature``,
``tool_choice``, …) are added as they are, but may not replace a key the adapter
builds.

SDK response objects may go back into ``messages`` as they are, the usual
``messages.append(resp.choices[0].message)`` (OpenAI) or ``{"role": "assistant",
"content": resp.content}`` (Anthropic): pydantic models become plain dicts
(``model_dump``, ``None`` fields left out) holding only the keys a request message
takes, so the body stays JSON. ``drop_schema_uri=True`` removes ``"$schema"`` from
the tools' parameter schemas: MCP servers send it, OpenAI and Anthropic accept it,
but some OpenAI-compatible servers and Gemini's schema subset refuse it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rampart.block import CompileResult
from rampart.errors import InvalidArgumentError

__all__ = ["anthropic_messages", "openai_chat", "without_schema_uri"]

_OPENAI_SYSTEM_ROLES = ("system", "developer")
# What a request message may hold; a response object also has response-only fields
# (OpenAI's annotations, Anthropic's id, model, usage, stop_reason…).
_OPENAI_MESSAGE_KEYS = frozenset(
    {"role", "content", "name", "tool_calls", "tool_call_id", "refusal", "function_call", "audio"}
)
_ANTHROPIC_MESSAGE_KEYS = frozenset({"role", "content"})


def _result(result: Any) -> CompileResult:
    if not isinstance(result, CompileResult):
        raise InvalidArgumentError(
            f"expected a CompileResult from BlockRegistry.compile(), got {type(result).__name__}"
        )
    return result


def _is_model(value: Any) -> bool:
    return callable(getattr(value, "model_dump", None)) and not isinstance(value, type)


def _has_model(value: Any) -> bool:
    if _is_model(value):
        return True
    if isinstance(value, Mapping):
        return any(_has_model(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_model(v) for v in value)
    return False


def _plain(value: Any) -> Any:
    """``value`` with every pydantic model dumped to JSON-ready dicts."""
    if _is_model(value):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _message(m: Any, keys: frozenset[str]) -> Any:
    """A request message from a dict or an SDK response object."""
    if not _has_model(m):
        return m
    out = _plain(m)
    if not isinstance(out, dict):
        return out
    if _is_model(m):  # a response object: keep what a request message takes
        out = {k: v for k, v in out.items() if k in keys}
        audio = out.get("audio")
        if isinstance(audio, dict) and "id" in audio:
            out["audio"] = {"id": audio["id"]}  # a request refers to earlier audio by id
    return out


def _messages(messages: Any, keys: frozenset[str]) -> list[Any]:
    if messages is None:
        return []
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidArgumentError(
            f"messages must be a list of message dicts, got {type(messages).__name__}"
        )
    out = [_message(m, keys) for m in messages]
    for i, m in enumerate(out):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise InvalidArgumentError(
                f"messages[{i}] must be a dict (or an SDK message object) with a string "
                f"'role', got {m!r:.80}"
            )
    return out


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def _drop_uri(schema: Any) -> Any:
    # "$schema" is a keyword only where a schema stands: under "properties" (and the
    # other name -> schema maps) a key is a parameter name, kept whatever it is.
    if isinstance(schema, list):
        return [_drop_uri(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k == "$schema":
            continue
        if k in _SCHEMA_MAPS and isinstance(v, Mapping):
            out[k] = {name: _drop_uri(sub) for name, sub in v.items()}
        else:
            out[k] = _drop_uri(v)
    return out


def without_schema_uri(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``tools`` (any format of ``CompileResult.tools``) without ``"$schema"`` keywords
    in their parameter schemas."""
    out = []
    for t in tools:
        t = dict(t)
        for key in ("parameters", "input_schema", "inputSchema"):
            if key in t:
                t[key] = _drop_uri(t[key])
        if isinstance(t.get("function"), Mapping):
            fn = dict(t["function"])
            if "parameters" in fn:
                fn["parameters"] = _drop_uri(fn["parameters"])
            t["function"] = fn
        out.append(t)
    return out


def _finish(body: dict[str, Any], model: Any, extra: dict[str, Any]) -> dict[str, Any]:
    if model is not None:
        if not isinstance(model, str) or not model:
            raise InvalidArgumentError(f"model must be a non-empty string, got {model!r}")
        body = {"model": model, **body}
    clash = sorted(k for k in extra if k in body or k in ("model", "messages", "tools", "system"))
    if clash:
        raise InvalidArgumentError(
            f"{', '.join(clash)} cannot be passed as extra keys: the adapter builds them "
            "from the compile result (pass messages= and model= directly)"
        )
    body.update(extra)
    return body


def openai_chat(
    result: CompileResult,
    messages: Sequence[Mapping[str, Any]] | None = None,
    *,
    model: str | None = None,
    system_role: str = "system",
    drop_schema_uri: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """An OpenAI Chat Completions request body.

    ``{"model", "messages": [{"role": system_role, "content": result.prompt},
    *messages], "tools": result.tools("openai"), **extra}``. ``system_role`` may be
    ``"developer"`` for the models that want that role. ``messages`` may hold
    system messages of their own; they follow the compiled one, and SDK message
    objects (``resp.choices[0].message``).
    """
    res = _result(result)
    if system_role not in _OPENAI_SYSTEM_ROLES:
        raise InvalidArgumentError(
            f"system_role must be one of {_OPENAI_SYSTEM_ROLES}, got {system_role!r}"
        )
    msgs = _messages(messages, _OPENAI_MESSAGE_KEYS)
    system = [{"role": system_role, "content": res.prompt}] if res.prompt else []
    body: dict[str, Any] = {"messages": [*system, *msgs]}
    tools = res.tools("openai")
    if drop_schema_uri:
        tools = without_schema_uri(tools)
    if tools:
        body["tools"] = tools
    return _finish(body, model, extra)


def anthropic_messages(
    result: CompileResult,
    messages: Sequence[Mapping[str, Any]] | None = None,
    *,
    model: str | None = None,
    max_tokens: int = 1024,
    drop_schema_uri: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """An Anthropic Messages request body.

    ``{"model", "max_tokens", "system": result.prompt, "messages": messages,
    "tools": result.tools("anthropic"), **extra}``. ``max_tokens`` is the reply's
    limit (the API requires one), not the compile budget. The Messages API has no
    system role inside ``messages``, so a message with ``"role": "system"`` is an
    error: put that text in the registry instead. ``messages`` may hold SDK objects
    (a ``Message`` response, or content blocks in a dict's ``content``).
    """
    res = _result(result)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidArgumentError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
    msgs = _messages(messages, _ANTHROPIC_MESSAGE_KEYS)
    for i, m in enumerate(msgs):
        if m["role"] == "system":
            raise InvalidArgumentError(
                f"messages[{i}] has role 'system', which the Anthropic Messages API does not "
                "accept: write it into the registry so it compiles into the system prompt"
            )
    body: dict[str, Any] = {"max_tokens": max_tokens}
    if res.prompt:
        body["system"] = res.prompt
    body["messages"] = msgs
    tools = res.tools("anthropic")
    if drop_schema_uri:
        tools = without_schema_uri(tools)
    if tools:
        body["tools"] = tools
    return _finish(body, model, extra)
