"""Request bodies for chat APIs, built from a compiled context.

Plain dicts, no SDK import: pass them as keyword arguments to the SDK
(``client.chat.completions.create(**openai_chat(result, messages, model="gpt-4o"))``,
``client.responses.create(**openai_responses(result, items, model=...))``,
``client.messages.create(**anthropic_messages(result, messages, model=...))``) or
post them as JSON. The compiled prompt becomes the system prompt and the tool blocks
become the ``tools`` list.

Which tools (``tools=``): ``"gated"`` (the default) sends the tools the compile
kept, so a tool that was gated out, cut by the budget or evicted is absent from the
request altogether; ``"all"`` sends every tool block of the registry the compile saw,
in registry order, so the ``tools`` array is byte-identical from task to task and
the provider's prompt cache (tools come first in it) survives a change of task;
``"allowed"`` (OpenAI only) sends every tool and restricts the model to the gated
ones with ``tool_choice={"type": "allowed_tools", ...}``: the gate still decides
what the model may call, without touching the cached ``tools``. An evicted tool is
absent whatever the choice. See docs/caching.md. The providers' own tool search
(:mod:`rampart.tool_search`, docs/tool-gate.md): ``"deferred"`` (Anthropic) sends
every tool with ``defer_loading`` beside a client-side search tool and preloads the
gated ones as ``tool_reference`` blocks; ``"search"`` (OpenAI Responses) sends every
tool deferred in per-server namespaces beside a client ``tool_search`` tool and
preloads the gated ones as a ``tool_search_output`` item; the model's later search
calls are answered by :func:`answer_tool_search`.

Choices: an empty prompt sends no system prompt and an empty tool list no ``tools``
key (both APIs reject ``tools: []`` or treat it as noise); ``messages`` are copied
into a new list but plain message dicts themselves are not copied (except the last
one when ``anthropic_messages`` marks it for the cache); ``model`` is left out when
``None`` (for callers that add it later); ``**extra`` keys (``temperature``,
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

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from rampart import tool_search
from rampart.block import CompileResult
from rampart.caching import SessionResult
from rampart.errors import InvalidArgumentError
from rampart.providers import anthropic, openai
from rampart.tool_search import aanswer_tool_search, answer_tool_search, answered_tools

__all__ = [
    "ANTHROPIC_CONTEXT_BETA",
    "ANTHROPIC_MIN_CACHE_TOKENS",
    "TOOL_CHOICES",
    "aanswer_tool_search",
    "answer_tool_search",
    "answered_tools",
    "anthropic_messages",
    "gemini_cache_payload",
    "gemini_generate_content",
    "openai_chat",
    "openai_responses",
    "without_schema_uri",
]

#: What ``tools=`` may be: see the module docstring.
TOOL_CHOICES = ("gated", "all", "allowed")
ANTHROPIC_MIN_CACHE_TOKENS = anthropic.MIN_CACHE_TOKENS


Result = CompileResult | SessionResult

#: The beta that Anthropic's ``context_management`` edits need (providers.anthropic).
ANTHROPIC_CONTEXT_BETA = anthropic.CONTEXT_BETA


def _conversation_messages(res: Result, messages: Any, fmt: str) -> Any:
    """``messages`` as given, or, when omitted, the compiled conversation's
    (docs/specification.md §9: ``reg.compile(..., conversation=conv)``)."""
    if messages is not None:
        return messages
    ctx = getattr(res, "context", None)
    return None if ctx is None else ctx.messages(fmt)


def _native_threshold(ctx: Any) -> int | None:
    """Where a provider-side edit should trigger: the window less the reply and
    one clearing step (the point the client-side policy would act), in the
    provider's tokens."""
    if ctx is None or ctx.context_window is None:
        return None
    room = int(ctx.context_window - ctx.reply_tokens - ctx.policy.clear_at_least)
    return max(room, 1024)


def _result(result: Any) -> Result:
    if not isinstance(result, (CompileResult, SessionResult)):
        raise InvalidArgumentError(
            "expected a CompileResult from BlockRegistry.compile() (or a SessionResult from "
            f"CacheSession.compile()), got {type(result).__name__}"
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
        for key in ("parameters", "input_schema", "inputSchema", "parameters_json_schema"):
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
    reserved = ("model", "messages", "input", "instructions", "tools", "system")
    clash = sorted(k for k in extra if k in body or k in reserved)
    if clash:
        raise InvalidArgumentError(
            f"{', '.join(clash)} cannot be passed as extra keys: the adapter builds them "
            "from the compile result (pass messages=, model=, tools= directly)"
        )
    body.update(extra)
    return body


def _tool_choice(tools: Any, allowed_ok: bool) -> str:
    if not isinstance(tools, str) or tools not in TOOL_CHOICES:
        raise InvalidArgumentError(f"tools must be one of {TOOL_CHOICES}, got {tools!r}")
    if tools == "allowed" and not allowed_ok:
        raise InvalidArgumentError(
            "tools='allowed' is OpenAI's allowed_tools tool choice, which the Anthropic "
            "Messages API does not have: use tools='all' (stable, every tool) or 'gated'"
        )
    return tools


def _tools(
    res: Result, fmt: str, choice: str, drop_schema_uri: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the ``tools`` to send, the gated ones). With ``"all"``/``"allowed"`` every
    gated tool must be sent as the gate kept it: when two tool blocks share a name
    (load_tools and seed files refuse that; two replicas of a shared registry loading
    at once may not), the registry's first one would stand for the name, and
    ``"allowed"`` would let the model call a schema the gate dropped."""
    gated = res.tools(fmt)
    sent = gated if choice == "gated" else res.registry_tools(fmt)
    if sent is not gated:
        by_name = {_tool_name(t): t for t in sent}
        for t in gated:
            if by_name.get(_tool_name(t), t) != t:
                raise InvalidArgumentError(
                    f"tools={choice!r}: two tool blocks are named {_tool_name(t)!r}, and the "
                    "compile kept one the registry does not list first, so its schema cannot "
                    "be sent under that name: evict one of them, or load it under a "
                    "qualified name"
                )
    if drop_schema_uri:
        sent = without_schema_uri(sent)
    return sent, gated


def _tool_name(tool: Mapping[str, Any]) -> Any:
    fn = tool.get("function")
    return fn.get("name") if isinstance(fn, Mapping) else tool.get("name")


def _cache_key(key: Any) -> str | None:
    if key is not None and (not isinstance(key, str) or not key):
        raise InvalidArgumentError(f"prompt_cache_key must be a non-empty string, got {key!r}")
    return key


def openai_chat(
    result: Result,
    messages: Sequence[Mapping[str, Any]] | None = None,
    *,
    model: str | None = None,
    system_role: str = "system",
    tools: str = "gated",
    prompt_cache_key: str | None = None,
    drop_schema_uri: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """An OpenAI Chat Completions request body.

    ``{"model", "messages": [{"role": system_role, "content": result.prompt},
    *messages], "tools": ..., **extra}``. ``system_role`` may be ``"developer"`` for
    the models that want that role. ``messages`` may hold system messages of their
    own; they follow the compiled one, and SDK message objects
    (``resp.choices[0].message``).

    ``tools``: ``"gated"``, ``"all"`` or ``"allowed"`` (module docstring). With
    ``"allowed"`` the body gets ``tool_choice={"type": "allowed_tools",
    "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function":
    {"name": ...}}, ...]}}`` naming the gated tools (Chat Completions nests the list
    under ``allowed_tools``), or ``tool_choice="none"`` when the gate kept no tool;
    no ``tool_choice`` when it kept them all (it would restrict nothing, and its
    list costs input tokens on every call).
    ``prompt_cache_key`` is sent as it is: OpenAI routes requests with the same key
    to the same cache, which raises the hit rate of a fleet sharing one prefix.
    OpenAI caches prefixes of 1 024 tokens and more by itself; what rampart adds is a
    prefix that stays the same (ungated blocks first, ``tools="all"``/``"allowed"``).
    """
    res = _result(result)
    choice = _tool_choice(tools, True)
    if system_role not in openai.SYSTEM_ROLES:
        raise InvalidArgumentError(
            f"system_role must be one of {openai.SYSTEM_ROLES}, got {system_role!r}"
        )
    key = _cache_key(prompt_cache_key)
    msgs = _messages(_conversation_messages(res, messages, "openai_chat"), openai.MESSAGE_KEYS)
    system = [{"role": system_role, "content": res.prompt}] if res.prompt else []
    body: dict[str, Any] = {"messages": [*system, *msgs]}
    sent, gated = _tools(res, "openai", choice, drop_schema_uri)
    if sent:
        body["tools"] = sent
        if choice == "allowed" and len(gated) < len(sent):
            named = [
                {"type": "function", "function": {"name": t["function"]["name"]}} for t in gated
            ]
            body["tool_choice"] = (
                {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": named}}
                if named
                else "none"
            )
    if key is not None:
        body["prompt_cache_key"] = key
    return _finish(body, model, extra)


def _responses_items(items: Any) -> list[Any]:
    if items is None:
        return []
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise InvalidArgumentError(
            f"messages must be a list of Responses input items, got {type(items).__name__}"
        )
    out = [_plain(m) for m in items]  # an output item goes back in as it came out
    for i, m in enumerate(out):
        if not isinstance(m, Mapping) or not (
            isinstance(m.get("role"), str) or isinstance(m.get("type"), str)
        ):
            raise InvalidArgumentError(
                f"messages[{i}] must be a dict (or an SDK output item) with a string 'role' "
                f"or 'type', got {m!r:.80}"
            )
    return out


def openai_responses(
    result: Result,
    messages: Sequence[Mapping[str, Any]] | None = None,
    *,
    model: str | None = None,
    tools: str = "gated",
    prompt_cache_key: str | None = None,
    drop_schema_uri: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """An OpenAI Responses request body (``client.responses.create(**body)``).

    ``{"model", "instructions": result.prompt, "input": messages, "tools": ...,
    **extra}``. ``messages`` are Responses input items: messages
    (``{"role": "user", "content": ...}``), ``function_call`` and
    ``function_call_output`` items, or the SDK's output items
    (``resp.output``) appended as they are. ``tools`` as for :func:`openai_chat`;
    with ``"allowed"`` the tool choice has the Responses shape
    ``{"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function",
    "name": ...}, ...]}``. ``"search"``: OpenAI's tool search with rampart as the
    search (:func:`rampart.tool_search.openai_search`): every tool deferred, in one
    namespace per MCP server, a client ``tool_search`` tool, and the gated tools
    preloaded as a ``tool_search_output`` item after the task's user message; answer
    the model's ``tool_search_call`` items with :func:`answer_tool_search`
    (``provider="openai-responses"``).
    """
    res = _result(result)
    search = tools == "search"
    choice = "all" if search else _tool_choice(tools, True)
    key = _cache_key(prompt_cache_key)
    body: dict[str, Any] = {}
    if res.prompt:
        body["instructions"] = res.prompt
    body["input"] = _responses_items(_conversation_messages(res, messages, "openai_responses"))
    ctx = getattr(res, "context", None)
    if ctx is not None and ctx.native == "openai":
        edit: dict[str, Any] = {"type": "compaction"}
        threshold = _native_threshold(ctx)
        if threshold is not None:
            edit["compact_threshold"] = threshold
        body["context_management"] = [edit]
    sent, gated = _tools(res, "openai-responses", choice, drop_schema_uri)
    if search and sent:  # the provider's tool search, answered by the gate
        clean = without_schema_uri if drop_schema_uri else None
        body["tools"], body["input"] = tool_search.openai_search(
            _compile_of(res), body["input"], clean
        )
    elif sent:
        body["tools"] = sent
        if choice == "allowed" and len(gated) < len(sent):
            named = [{"type": "function", "name": t["name"]} for t in gated]
            body["tool_choice"] = (
                {"type": "allowed_tools", "mode": "auto", "tools": named} if named else "none"
            )
    if key is not None:
        body["prompt_cache_key"] = key
    return _finish(body, model, extra)


# ---- Anthropic, with cache breakpoints ------------------------------------------------------


def _compile_of(res: Result) -> CompileResult:
    return res if isinstance(res, CompileResult) else res.compile


def _cache_points(res: Result) -> list[tuple[int, int]]:
    """``(characters, tokens)`` of the prompt's cacheable prefixes short of the whole
    prompt: the stable prefix (and, for a session, what it kept of the previous
    prompt), strictly inside the prompt, increasing."""
    if isinstance(res, SessionResult):
        return list(res.cache_points)
    chars, tokens = res.stable_prefix_chars, res.stable_prefix_tokens
    return [(chars, tokens)] if 0 < chars < len(res.prompt) else []


def _tools_stable(res: Result, sent: list[dict[str, Any]], choice: str) -> bool:
    """Whether the ``tools`` sent would be the same for any task: always with
    ``"all"``; with ``"gated"`` when no gate ran, or when every tool block was kept
    and none of them is gated."""
    if choice != "gated":
        return True
    report = _compile_of(res).report
    if all(r.score is None for r in report):  # no gate ran
        return True
    names = {t["name"] for t in res.registry_tools("anthropic")}
    if len(sent) != len(names):
        return False
    return not any(r.gated for r in report if r.name in names)


def _tool_tokens(res: Result, sent: list[dict[str, Any]]) -> int:
    """Tokens of the tool blocks sent, as the registry counted their text (tool
    blocks are named after their tool): a lower bound of their JSON's tokens, so a
    breakpoint it allows is never below the provider's minimum. Counted from the
    blocks, not the report: with ``tools_in_prompt=False`` a tool costs the prompt
    nothing."""
    names = {t["name"] for t in sent}
    blocks = _compile_of(res)._sel.tool_blocks()
    return sum(b.token_count for b in blocks if b.semantic_name in names)


def _count_markers(value: Any) -> int:
    """cache_control markers the caller already put in (blocks of) messages."""
    if isinstance(value, Mapping):
        own = 1 if value.get("cache_control") else 0
        return own + sum(_count_markers(v) for k, v in value.items() if k == "content")
    if isinstance(value, list):
        return sum(_count_markers(v) for v in value)
    return 0


def _mark_last_message(msgs: list[Any], control: dict[str, Any]) -> bool:
    """Put ``control`` on the last content block of the last message (a copy of it);
    False when that block cannot take one."""
    last = dict(msgs[-1])
    content = last.get("content")
    if isinstance(content, str):
        if not content:
            return False
        last["content"] = [{"type": "text", "text": content, "cache_control": control}]
    elif isinstance(content, list) and content:
        block = content[-1]
        if not isinstance(block, Mapping) or block.get("type") not in anthropic.CACHEABLE:
            return False
        last["content"] = [*content[:-1], {**block, "cache_control": control}]
    else:
        return False
    msgs[-1] = last
    return True


def _anthropic_edits(res: Result, body: dict[str, Any]) -> None:
    """Anthropic's own tool-result clearing (``clear_tool_uses_20250919``) in
    place of the client-side one, when the compile's policy says
    ``native="anthropic"``: the policy's keep / exclude / inputs / clear_at_least,
    triggered where the client would have cleared."""
    ctx = getattr(res, "context", None)
    if ctx is None or ctx.native != "anthropic":
        return
    pol = ctx.policy
    edit: dict[str, Any] = {
        "type": "clear_tool_uses_20250919",
        "keep": {"type": "tool_uses", "value": pol.keep_tool_results},
        "clear_at_least": {"type": "input_tokens", "value": pol.clear_at_least},
    }
    threshold = _native_threshold(ctx)
    if threshold is not None:
        edit["trigger"] = {"type": "input_tokens", "value": threshold}
    if pol.exclude_tools:
        edit["exclude_tools"] = list(pol.exclude_tools)
    if pol.clear_tool_inputs:
        edit["clear_tool_inputs"] = True
    body["context_management"] = {"edits": [edit]}
    body["betas"] = [ANTHROPIC_CONTEXT_BETA]


def anthropic_messages(
    result: Result,
    messages: Sequence[Mapping[str, Any]] | None = None,
    *,
    model: str | None = None,
    max_tokens: int = 1024,
    tools: str = "gated",
    cache: bool = False,
    cache_ttl: str | None = None,
    min_cache_tokens: int = ANTHROPIC_MIN_CACHE_TOKENS,
    cache_messages: bool = True,
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
    ``tools``: ``"gated"``, ``"all"`` or ``"deferred"`` (module docstring):
    Anthropic's tool search with rampart as the search
    (:func:`rampart.tool_search.anthropic_deferred`): every tool with
    ``defer_loading``, a client-side ``tool_search`` tool first, and the gated tools
    preloaded as ``tool_reference`` blocks after the task's user message; answer the
    model's ``tool_search`` calls with :func:`answer_tool_search`
    (``provider="anthropic"``).

    ``cache=True`` adds prompt-cache breakpoints (``cache_control``; Anthropic
    caches a prefix only up to a breakpoint). ``system`` becomes text blocks split
    where the prompt stops being task-independent (``result.stable_prefix_chars``;
    a :class:`~rampart.caching.SessionResult` also splits where it stops matching
    the previous prompt), and breakpoints go, in this order of preference, on the
    last tool when the tools array is the same for every task (``tools="all"``, or
    no gated tool), at the end of the stable prefix, at the end of ``system``, and
    on the last content block of the last message (``cache_messages``: each turn
    of a conversation reads the turns before it from the cache). At most four in
    all, counting markers already in ``messages``; none where the prefix up to it
    is shorter than ``min_cache_tokens`` by the registry's token counts (1 024 for
    most Claude models; 2 048 for Haiku 3.x, 4 096 for Opus 4.5+ and Haiku 4.5); a
    message breakpoint only when ``system`` alone is long enough.
    ``cache_ttl``: ``None`` (the default five minutes), ``"5m"`` or ``"1h"`` (writes
    cost 2x instead of 1.25x).
    """
    res = _result(result)
    deferred = tools == "deferred"
    choice = "all" if deferred else _tool_choice(tools, False)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidArgumentError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
    if cache_ttl not in anthropic.CACHE_TTLS:
        raise InvalidArgumentError(
            f"cache_ttl must be one of {anthropic.CACHE_TTLS}, got {cache_ttl!r}"
        )
    if isinstance(min_cache_tokens, bool) or not isinstance(min_cache_tokens, int):
        raise InvalidArgumentError(f"min_cache_tokens must be an int, got {min_cache_tokens!r}")
    msgs = _messages(_conversation_messages(res, messages, "anthropic"), anthropic.MESSAGE_KEYS)
    for i, m in enumerate(msgs):
        if m["role"] == "system":
            raise InvalidArgumentError(
                f"messages[{i}] has role 'system', which the Anthropic Messages API does not "
                "accept: write it into the registry so it compiles into the system prompt"
            )
    body: dict[str, Any] = {"max_tokens": max_tokens}
    _anthropic_edits(res, body)
    sent, _ = _tools(res, "anthropic", choice, drop_schema_uri)
    if deferred and sent:  # the provider's tool search, answered by the gate
        sent, msgs = tool_search.anthropic_deferred(_compile_of(res), sent, msgs)
    if not cache:
        if res.prompt:
            body["system"] = res.prompt
        body["messages"] = msgs
        if sent:
            body["tools"] = sent
        return _finish(body, model, extra)

    control: dict[str, Any] = {"type": "ephemeral"}
    if cache_ttl is not None:
        control["ttl"] = cache_ttl
    # Deferred tools are not in the model's context (nor in the cached prefix).
    tool_tokens = 0 if deferred else _tool_tokens(res, sent)
    points = _cache_points(res)
    cuts = [0, *(c for c, _ in points), len(res.prompt)]
    system: list[dict[str, Any]] = [
        {"type": "text", "text": res.prompt[a:b]} for a, b in itertools.pairwise(cuts) if b > a
    ]
    # Candidate breakpoints, best first: (where, prefix tokens up to it).
    candidates: list[tuple[tuple[str, int], int]] = []
    if sent and _tools_stable(res, sent, choice):
        candidates.append((("tools", len(sent) - 1), tool_tokens))
    if system:
        if points:
            candidates.append((("system", 0), tool_tokens + points[0][1]))
        candidates.append((("system", len(system) - 1), tool_tokens + res.total_tokens))
    long_enough = tool_tokens + res.total_tokens >= min_cache_tokens
    if msgs and cache_messages and long_enough:
        candidates.append((("messages", -1), min_cache_tokens))
    # Later points (a session's kept prefix) come last: they end a text block, so
    # the end-of-system breakpoint's lookback finds an entry there anyway.
    candidates.extend(
        (("system", i), tool_tokens + t) for i, (_, t) in enumerate(points[1:], start=1)
    )
    marked = _count_markers(msgs) + (1 if extra.get("cache_control") else 0)
    room = anthropic.MAX_BREAKPOINTS - marked
    chosen = [where for where, tokens in candidates if tokens >= min_cache_tokens][: max(room, 0)]
    for kind, i in chosen:
        if kind == "tools":
            sent = [*sent[:i], {**sent[i], "cache_control": control}]
        elif kind == "system":
            system[i] = {**system[i], "cache_control": control}
        else:
            msgs = list(msgs)
            _mark_last_message(msgs, control)
    if system:
        body["system"] = system
    body["messages"] = msgs
    if sent:
        body["tools"] = sent
    return _finish(body, model, extra)


# ---- Gemini: the wire form and body live in rampart.providers.gemini --------------------


def gemini_generate_content(
    result: Result,
    contents: Sequence[Any] | None = None,
    *,
    model: str,
    tools: str = "gated",
    cached_content: str | None = None,
    drop_schema_uri: bool = False,
    **config: Any,
) -> dict[str, Any]:
    """A Gemini ``generate_content`` request: ``{"model", "contents", "config"}``,
    the keyword arguments of ``client.models.generate_content(**body)``.

    ``config.system_instruction`` is the compiled prompt; ``config.tools`` one
    ``Tool`` of function declarations. ``tools``: ``"gated"``, ``"all"`` (every
    tool block, the same for every task) or ``"allowed"``: every tool, and
    ``config.tool_config.function_calling_config`` with mode ``VALIDATED`` and
    ``allowed_function_names`` naming the gated ones (mode ``NONE`` when the gate
    kept none; no ``tool_config`` when it kept them all).

    ``contents`` may be omitted when the result holds a compiled conversation
    (``reg.compile(..., conversation=conv)``): its messages in Gemini's shape.

    ``cached_content``: the name of an explicit cache made from
    :func:`gemini_cache_payload`'s payload (the prompt's task-independent head and
    every tool). Then the body leaves out what the cache holds, and the rest of the
    prompt (from ``result.stable_prefix_chars`` on) opens ``contents`` as a user
    turn. Whether an explicit cache pays for its storage beside Gemini's implicit
    cache: :func:`rampart.providers.gemini.explicit_cache_pays`. ``**config``:
    further ``GenerateContentConfig`` fields (``temperature``, ``max_output_tokens``, …).
    """
    from rampart.providers import gemini

    res = _result(result)
    contents = _conversation_messages(res, contents, "gemini")
    every, gated = _tools(res, "gemini", "all", drop_schema_uri)
    if drop_schema_uri:
        gated = without_schema_uri(gated)
    prompt = res.prompt
    opening: list[dict[str, Any]] = []
    if cached_content is not None:
        rest = res.prompt[res.stable_prefix_chars :]
        if rest:
            opening = [{"role": "user", "parts": [{"text": rest}]}]
        prompt = ""
    body = gemini.generate_content(
        prompt,
        gated,
        every,
        contents,
        model=model,
        tools=tools,
        cached_content=cached_content,
        opening=opening,
        extra=config,
    )
    return body


def gemini_cache_payload(
    result: Result,
    *,
    model: str,
    ttl_s: int = 3600,
    display_name: str | None = None,
    drop_schema_uri: bool = False,
) -> dict[str, Any]:
    """``client.caches.create(**payload)``'s arguments for an explicit Gemini cache of
    what does not depend on the task: the prompt up to ``result.stable_prefix_chars``
    as the system instruction, and every tool block (registry order). Byte-identical
    for every task of one registry state; use the returned cache's ``name`` as
    :func:`gemini_generate_content`'s ``cached_content``."""
    from rampart.providers import gemini

    res = _result(result)
    every, _ = _tools(res, "gemini", "all", drop_schema_uri)
    return gemini.cache_payload(
        res.prompt[: res.stable_prefix_chars],
        every,
        model=model,
        ttl_s=ttl_s,
        display_name=display_name,
    )
