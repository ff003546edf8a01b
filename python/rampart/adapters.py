"""Request bodies for chat APIs, built from a compiled context.

Plain dicts, no SDK import: pass them as keyword arguments to the SDK
(``client.chat.completions.create(**openai_chat(result, messages, model="gpt-4o"))``,
``client.messages.create(**anthropic_messages(result, messages, model=...))``) or
post them as JSON. The compiled prompt becomes the system prompt and the included
tool blocks become the ``tools`` list, so a tool that was gated out, cut by the
budget or evicted is absent from the request altogether.

Choices: an empty prompt sends no system prompt and an empty tool list no ``tools``
key (both APIs reject ``tools: []`` or treat it as noise); ``messages`` are copied
into a new list but the message dicts themselves are not copied; ``model`` is left
out when ``None`` (for callers that add it later); ``**extra`` keys (``temperature``,
``tool_choice``, …) are added as they are, but may not replace a key the adapter
builds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rampart.block import CompileResult
from rampart.errors import InvalidArgumentError

__all__ = ["anthropic_messages", "openai_chat"]

_OPENAI_SYSTEM_ROLES = ("system", "developer")


def _result(result: Any) -> CompileResult:
    if not isinstance(result, CompileResult):
        raise InvalidArgumentError(
            f"expected a CompileResult from BlockRegistry.compile(), got {type(result).__name__}"
        )
    return result


def _messages(messages: Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    if messages is None:
        return []
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidArgumentError(
            f"messages must be a list of message dicts, got {type(messages).__name__}"
        )
    out = list(messages)
    for i, m in enumerate(out):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise InvalidArgumentError(
                f"messages[{i}] must be a dict with a string 'role', got {m!r:.80}"
            )
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
    **extra: Any,
) -> dict[str, Any]:
    """An OpenAI Chat Completions request body.

    ``{"model", "messages": [{"role": system_role, "content": result.prompt},
    *messages], "tools": result.tools("openai"), **extra}``. ``system_role`` may be
    ``"developer"`` for the models that want that role. ``messages`` may hold
    system messages of their own; they follow the compiled one.
    """
    res = _result(result)
    if system_role not in _OPENAI_SYSTEM_ROLES:
        raise InvalidArgumentError(
            f"system_role must be one of {_OPENAI_SYSTEM_ROLES}, got {system_role!r}"
        )
    msgs = _messages(messages)
    system = [{"role": system_role, "content": res.prompt}] if res.prompt else []
    body: dict[str, Any] = {"messages": [*system, *msgs]}
    tools = res.tools("openai")
    if tools:
        body["tools"] = tools
    return _finish(body, model, extra)


def anthropic_messages(
    result: CompileResult,
    messages: Sequence[Mapping[str, Any]] | None = None,
    *,
    model: str | None = None,
    max_tokens: int = 1024,
    **extra: Any,
) -> dict[str, Any]:
    """An Anthropic Messages request body.

    ``{"model", "max_tokens", "system": result.prompt, "messages": messages,
    "tools": result.tools("anthropic"), **extra}``. ``max_tokens`` is the reply's
    limit (the API requires one), not the compile budget. The Messages API has no
    system role inside ``messages``, so a message with ``"role": "system"`` is an
    error: put that text in the registry instead.
    """
    res = _result(result)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidArgumentError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
    msgs = _messages(messages)
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
    if tools:
        body["tools"] = tools
    return _finish(body, model, extra)
