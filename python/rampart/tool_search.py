"""The providers' own tool-search protocols, with the relevance gate as the search.

Both providers can keep a large ``tools`` array out of the model's context and load
tools on demand, so the array (the head of the provider's prompt cache) stays the
same for every task:

* **Anthropic** (``anthropic_messages(result, messages, tools="deferred")``): every
  tool is sent with ``"defer_loading": true``, beside one ordinary client tool,
  :data:`SEARCH_TOOL` (``tool_search(query)``). The model sees only that tool; a
  deferred tool is loaded when a ``tool_result`` holds a ``tool_reference`` block
  naming it. The compile's gated tools are preloaded that way: right after the
  task's user message, a ``tool_use`` of the search tool (its query: the message's
  text) and its ``tool_result`` with one ``tool_reference`` per gated tool.
* **OpenAI Responses** (``openai_responses(result, items, tools="search")``): a
  ``{"type": "tool_search", "execution": "client"}`` tool, and every function tool
  with ``"defer_loading": true``, grouped in one ``namespace`` per MCP server (the
  tool block's ``server:NAME`` tag; tools without one stay top-level functions).
  The gated tools are preloaded as a ``tool_search_call`` / ``tool_search_output``
  pair after the task's user message; the output repeats the gated tools'
  definitions, in their namespaces.

Later search calls from the model are answered by :func:`answer_tool_search`
(``rampart.adapters.answer_tool_search``): the tools the query names, else the
``k`` the registry's gate ranks highest for the query (the same ranking a gated
compile uses: the example gate when tools have examples, the cosine gate with the
query adapter otherwise). The preload's ids are derived from its content, so every
request of one task carries the same bytes (the messages' cache prefix holds too).

Wire formats as the installed SDKs type them (anthropic ``ToolParam.defer_loading``,
``ToolReferenceBlockParam``; openai ``ToolSearchToolParam``, ``NamespaceToolParam``,
``ResponseToolSearchOutputItemParamParam``, the input item ``ToolSearchCall``);
tests/test_tool_search.py validates every body against them.

Rejected: putting the preload *before* the user's message (Anthropic requires a
``tool_use`` to follow a user turn, and a conversation to start with one), and
sending the gated tools undeferred (the array would change with the task, which
is what deferring is for).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rampart.block import CompileResult, InstructionBlock
from rampart.errors import InvalidArgumentError

if TYPE_CHECKING:
    from rampart.registry import BlockRegistry
    from rampart.tools import ToolSchema

__all__ = [
    "PROVIDERS",
    "SEARCH_TOOL",
    "TOOL_SEARCH",
    "TOOL_SEARCH_K",
    "TOOL_SEARCH_TOOL",
    "aanswer_tool_search",
    "answer_tool_search",
    "answered_tools",
    "anthropic_search_tool",
    "asearch_tools",
    "openai_search_tool",
    "search_answer",
    "search_tools",
]

#: The name of the client-side search tool sent with ``tools="deferred"``.
SEARCH_TOOL = "tool_search"
#: How many tools one search call returns at most (by relevance; named tools all).
TOOL_SEARCH_K = 3
#: What :func:`answer_tool_search` answers: an Anthropic ``tool_use`` of the search
#: tool, an OpenAI Responses ``tool_search_call``, or a Chat Completions call of the
#: agent's ``find_tools`` function.
PROVIDERS = ("anthropic", "openai-responses", "openai")
# The server tag of a tool block (rampart.toolgate.SERVER_TAG, repeated here so
# that building a request body never imports toolgate, which loads numpy).
_SERVER_TAG = "server:"
# A query is clipped before it is ranked (the gate embeds it) or echoed.
_QUERY_CHARS = 1000
# The preload's search call records what was searched for: the start of the task.
_PRELOAD_QUERY_CHARS = 300
_PRELOAD_PREFIX = "rampart_preload_"
# Namespace names are used in calls (``namespace`` of a function_call): the same
# alphabet as tool names.
_NAMESPACE_BAD = re.compile(r"[^A-Za-z0-9_-]")
_NAMESPACE_DESCRIPTION_CHARS = 1000

_QUERY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": "What the tool should do (or its exact name).",
        }
    },
    "required": ["query"],
}
_DESCRIPTION = (
    "Search the deferred tools: say what you need to do, or name a tool. The tools "
    "found are loaded and can be called from then on."
)


def anthropic_search_tool() -> dict[str, Any]:
    """The client-side search tool sent first in a ``tools="deferred"`` body (never
    deferred itself: the API wants at least one tool loaded)."""
    return {"name": SEARCH_TOOL, "description": _DESCRIPTION, "input_schema": _QUERY_SCHEMA}


def openai_search_tool() -> dict[str, Any]:
    """The ``tool_search`` tool sent last in a ``tools="search"`` body: executed by
    the client (rampart), with a ``query`` argument."""
    return {
        "type": "tool_search",
        "execution": "client",
        "description": _DESCRIPTION,
        "parameters": _QUERY_SCHEMA,
    }


# ---- the catalogue: tool blocks with their servers ---------------------------------------


def _server(block: InstructionBlock) -> str | None:
    for tag in block.tags:
        if tag.startswith(_SERVER_TAG) and len(tag) > len(_SERVER_TAG):
            return tag[len(_SERVER_TAG) :]
    return None


def _catalogue(blocks: Iterable[InstructionBlock]) -> list[tuple[ToolSchema, str | None]]:
    """``(schema, server)`` of each tool block, in order, a name once (the first)."""
    out: list[tuple[ToolSchema, str | None]] = []
    seen: set[str] = set()
    for b in blocks:
        schema = b.tool_schema
        if schema is not None and schema.name not in seen:
            seen.add(schema.name)
            out.append((schema, _server(b)))
    return out


def _result_catalogue(res: CompileResult) -> list[tuple[ToolSchema, str | None]]:
    return _catalogue(InstructionBlock(b) for b in res._sel.tool_blocks())


def _registry_catalogue(registry: BlockRegistry) -> list[tuple[ToolSchema, str | None]]:
    return _catalogue(registry.list_blocks())


def _namespace_name(server: str) -> str:
    return _NAMESPACE_BAD.sub("_", server)[:64] or "tools"


Clean = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def _responses_tools(
    entries: Sequence[tuple[ToolSchema, str | None]],
    clean: Clean | None,
    catalogue: Sequence[tuple[ToolSchema, str | None]] | None = None,
) -> list[dict[str, Any]]:
    """Function tools (deferred) grouped in one namespace per server, in the order of
    each group's first tool; tools without a server stay top-level functions.
    ``clean`` rewrites the function definitions (the adapters' ``drop_schema_uri``).
    A namespace's description lists its server's tools in ``catalogue`` (default:
    ``entries``), so a search's output names a namespace as the tools array does."""
    fns = [{**schema.to_openai_responses(), "defer_loading": True} for schema, _ in entries]
    if clean is not None:
        fns = clean(fns)
    out: list[dict[str, Any]] = []
    spaces: dict[str, dict[str, Any]] = {}
    for fn, (_, server) in zip(fns, entries):
        if server is None:
            out.append(fn)
            continue
        name = _namespace_name(server)
        space = spaces.get(name)
        if space is None:
            space = spaces[name] = {"type": "namespace", "name": name, "tools": []}
            out.append(space)
        space["tools"].append(fn)
    members: dict[str, list[str]] = {}
    for schema, server in entries if catalogue is None else catalogue:
        if server is not None:
            members.setdefault(_namespace_name(server), []).append(schema.name)
    for name, space in spaces.items():
        listed = ", ".join(members.get(name, ()))
        text = f"Tools of the {name} MCP server: {listed}."
        if len(text) > _NAMESPACE_DESCRIPTION_CHARS:
            text = text[: _NAMESPACE_DESCRIPTION_CHARS - 1] + "…"
        listed_tools = space.pop("tools")
        space["description"] = text  # required; before the tools, for a readable body
        space["tools"] = listed_tools
    return out


def _check_no_clash(names: Iterable[str]) -> None:
    if SEARCH_TOOL in names:
        raise InvalidArgumentError(
            f"a tool block is named {SEARCH_TOOL!r}, the name of the search tool that "
            "tools='deferred' adds: rename the tool, or use tools='all'"
        )


# ---- request bodies ----------------------------------------------------------------------


def _text_of(content: Any) -> str | None:
    """The text of a user message's content; None when it is a tool-result turn."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    parts = []
    for block in content:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind in ("tool_result", "function_call_output"):
            return None
        if kind in ("text", "input_text") and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return " ".join(parts)


def _task_message(msgs: Sequence[Any], is_user: Any) -> tuple[int, str] | None:
    """Index and text of the last message that states a task (a user message that is
    not a turn of tool results), or None."""
    for i in range(len(msgs) - 1, -1, -1):
        m = msgs[i]
        if isinstance(m, Mapping) and is_user(m):
            text = _text_of(m.get("content"))
            if text is not None:
                return i, text
    return None


def _preload_id(kind: str, query: str, names: Sequence[str]) -> str:
    digest = hashlib.sha256(json.dumps([kind, query, list(names)]).encode()).hexdigest()
    return f"{_PRELOAD_PREFIX}{digest[:24]}"


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def anthropic_deferred(
    res: CompileResult, every_tool: list[dict[str, Any]], msgs: list[Any]
) -> tuple[list[dict[str, Any]], list[Any]]:
    """``(tools, messages)`` of a ``tools="deferred"`` Anthropic body: the search
    tool, then ``every_tool`` (the registry's, in registry order) deferred; the
    messages with the gated tools preloaded after the task's user message."""
    _check_no_clash(t["name"] for t in every_tool)
    tools = [anthropic_search_tool(), *({**t, "defer_loading": True} for t in every_tool)]
    gated = [t["name"] for t in res.tools("anthropic")]
    found = _task_message(msgs, lambda m: m.get("role") == "user")
    if not gated or found is None:
        return tools, msgs
    at, text = found
    query = _clip(text, _PRELOAD_QUERY_CHARS)
    use_id = "toolu_" + _preload_id("anthropic", query, gated)
    nxt = msgs[at + 1] if at + 1 < len(msgs) else None
    if _is_anthropic_preload(nxt):  # the caller sent back a body's messages
        return tools, msgs
    call = {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": use_id, "name": SEARCH_TOOL, "input": {"query": query}}
        ],
    }
    answer = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": use_id, "content": _references(gated)}],
    }
    return tools, [*msgs[: at + 1], call, answer, *msgs[at + 1 :]]


def _is_anthropic_preload(m: Any) -> bool:
    if not isinstance(m, Mapping) or m.get("role") != "assistant":
        return False
    content = m.get("content")
    first = content[0] if isinstance(content, list) and content else None
    return (
        isinstance(first, Mapping)
        and first.get("type") == "tool_use"
        and str(first.get("id", "")).startswith("toolu_" + _PRELOAD_PREFIX)
    )


def _references(names: Sequence[str]) -> list[dict[str, Any]]:
    return [{"type": "tool_reference", "tool_name": n} for n in names]


def openai_search(
    res: CompileResult, items: list[Any], clean: Clean | None = None
) -> tuple[list[dict[str, Any]], list[Any]]:
    """``(tools, input)`` of a ``tools="search"`` Responses body: every tool deferred
    (namespaced per server) and the client ``tool_search`` tool; the input with the
    gated tools preloaded after the task's user message."""
    entries = _result_catalogue(res)
    _check_no_clash(schema.name for schema, _ in entries)
    tools = [*_responses_tools(entries, clean), openai_search_tool()]
    gated = [t["name"] for t in res.tools("openai-responses")]
    found = _task_message(items, lambda m: m.get("role") == "user")
    if not gated or found is None:
        return tools, items
    at, text = found
    nxt = items[at + 1] if at + 1 < len(items) else None
    if (
        isinstance(nxt, Mapping)
        and nxt.get("type") == "tool_search_call"
        and str(nxt.get("call_id", "")).startswith(_PRELOAD_PREFIX)
    ):
        return tools, items
    query = _clip(text, _PRELOAD_QUERY_CHARS)
    call_id = _preload_id("openai", query, gated)
    keep = set(gated)
    loaded = _responses_tools([e for e in entries if e[0].name in keep], clean, entries)
    call = {
        "type": "tool_search_call",
        "call_id": call_id,
        "execution": "client",
        "status": "completed",
        "arguments": {"query": query},
    }
    output = {
        "type": "tool_search_output",
        "call_id": call_id,
        "execution": "client",
        "status": "completed",
        "tools": loaded,
    }
    return tools, [*items[: at + 1], call, output, *items[at + 1 :]]


# ---- the search: names first, then the gate's ranking ------------------------------------


def _tools_named(
    registry: BlockRegistry, query: str, allowed: Iterable[str] | None
) -> tuple[str, dict[str, ToolSchema], list[tuple[ToolSchema, str, float | None]]]:
    """search_tools' first half: (the clipped query, the tools searched, those it names)."""
    query = query.strip()[:_QUERY_CHARS]
    keep = None if allowed is None else set(allowed)
    schemas: dict[str, ToolSchema] = {}
    for b in registry.list_blocks():
        schema = b.tool_schema
        if schema is not None and (keep is None or schema.name in keep):
            schemas.setdefault(schema.name, schema)
    lower = {n.lower(): n for n in schemas}
    found: list[tuple[ToolSchema, str, float | None]] = []
    for w in [query, *re.findall(r"[A-Za-z0-9_.-]+", query)]:
        name = lower.get(w.lower().strip("."))
        if name and all(f[0].name != name for f in found):
            found.append((schemas[name], "name", None))
    return query, schemas, found


def _tools_ranked(
    ranked: Iterable[tuple[InstructionBlock, float]],
    schemas: dict[str, ToolSchema],
    found: list[tuple[ToolSchema, str, float | None]],
    k: int,
) -> list[tuple[ToolSchema, str, float | None]]:
    for block, score in ranked:
        schema = block.tool_schema
        if schema is not None and schema.name in schemas:
            if all(f[0].name != schema.name for f in found):
                found.append((schema, "relevance", float(score)))
            if len(found) >= k:
                break
    return found


def _check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 100:
        raise InvalidArgumentError(f"k must be an int in 1..100, got {k!r}")
    return k


def search_tools(
    registry: BlockRegistry,
    query: str,
    *,
    k: int = TOOL_SEARCH_K,
    allowed: Iterable[str] | None = None,
) -> list[tuple[ToolSchema, str, float | None]]:
    """The tool blocks of ``registry`` a search for ``query`` finds, as ``(schema,
    "name" | "relevance", score)``: the tools named in the query (the whole query, or
    a word of it, case-insensitive) when there are any, since the model then knew
    what it wanted; else the ``k`` the registry's gate ranks highest for the query
    (without an embedding model: BM25 over the tools' texts, the lexical scorer of
    :mod:`rampart.relevance`). ``allowed`` limits the search to these tool names
    (the tools a caller can run)."""
    k = _check_k(k)
    query, schemas, found = _tools_named(registry, query, allowed)
    if found or not query:
        return found
    if registry.embedding_model is None:
        return _tools_ranked(_lexical_ranking(registry, query, schemas), schemas, found, k)
    return _tools_ranked(registry.find_relevant(query), schemas, found, k)


def _lexical_ranking(
    registry: BlockRegistry, query: str, schemas: dict[str, ToolSchema]
) -> list[tuple[InstructionBlock, float]]:
    """The tool blocks of ``schemas`` ranked by BM25 for ``query`` (those that
    share no term with it left out): the search of a registry with no model."""
    from rampart.relevance import LexicalIndex

    blocks = [
        b
        for b in registry.list_blocks()
        if b.tool_schema is not None and b.tool_schema.name in schemas
    ]
    index = LexicalIndex()
    index.add([b.gate_text for b in blocks])
    scored = [(b, s) for b, s in zip(blocks, index.scores(query)) if s > 0]
    return sorted(scored, key=lambda x: -x[1])


async def asearch_tools(
    registry: BlockRegistry,
    query: str,
    *,
    k: int = TOOL_SEARCH_K,
    allowed: Iterable[str] | None = None,
) -> list[tuple[ToolSchema, str, float | None]]:
    """:func:`search_tools` for coroutines (the query is embedded off the loop)."""
    k = _check_k(k)
    query, schemas, found = _tools_named(registry, query, allowed)
    if found or not query:
        return found
    if registry.embedding_model is None:
        return _tools_ranked(_lexical_ranking(registry, query, schemas), schemas, found, k)
    return _tools_ranked(await registry.afind_relevant(query), schemas, found, k)


# ---- answering a search call -------------------------------------------------------------


def _plain(call: Any) -> Any:
    dump = getattr(call, "model_dump", None)
    if callable(dump) and not isinstance(call, type):
        return dump(mode="json", exclude_none=True)
    return call


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return {}
    return raw if isinstance(raw, dict) else {}


def _parse_call(call: Any, provider: str) -> tuple[str, str]:
    """``(call id, query)`` of a search call in ``provider``'s form; a call of another
    shape is the caller's mistake (InvalidArgumentError). A missing or empty query is
    the model's, answered as such."""
    if provider not in PROVIDERS:
        raise InvalidArgumentError(f"provider must be one of {PROVIDERS}, got {provider!r}")
    from rampart.llm import ToolCall

    if isinstance(call, ToolCall):
        if provider != "openai":
            raise InvalidArgumentError("a rampart.llm.ToolCall is a Chat Completions call")
        return call.id, str(_arguments(call.arguments).get("query", ""))
    call = _plain(call)
    if not isinstance(call, Mapping):
        raise InvalidArgumentError(
            f"call must be a dict or an SDK object, got {type(call).__name__}"
        )
    if provider == "anthropic":
        if call.get("type") != "tool_use" or not isinstance(call.get("id"), str):
            raise InvalidArgumentError(
                f"an Anthropic search call is a tool_use block with an id, got {str(call)[:120]}"
            )
        args, call_id = _arguments(call.get("input")), call["id"]
    elif provider == "openai-responses":
        if call.get("type") != "tool_search_call" or not isinstance(call.get("call_id"), str):
            raise InvalidArgumentError(
                "a Responses search call is a tool_search_call item with a call_id (client "
                f"execution), got {str(call)[:120]}"
            )
        args, call_id = _arguments(call.get("arguments")), call["call_id"]
    else:
        fn = call.get("function")
        if not isinstance(fn, Mapping) or not isinstance(call.get("id"), str):
            raise InvalidArgumentError(
                f"a Chat Completions call has an id and a function, got {str(call)[:120]}"
            )
        args, call_id = _arguments(fn.get("arguments")), call["id"]
    query = args.get("query", "")
    return call_id, query if isinstance(query, str) else ""


def _answer(
    registry: BlockRegistry,
    provider: str,
    call_id: str,
    query: str,
    found: list[tuple[ToolSchema, str, float | None]] | None,
) -> dict[str, Any]:
    names = [schema.name for schema, _, _ in found or ()]
    if provider == "anthropic":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
        if found is None:
            block.update(content=f"{SEARCH_TOOL} needs a non-empty 'query'", is_error=True)
        elif not names:
            block["content"] = f"no tool matches {_clip(query, 200)!r}"
        else:
            block["content"] = _references(names)
        return block
    if provider == "openai-responses":
        order = {n: i for i, n in enumerate(names)}
        catalogue = _registry_catalogue(registry)
        entries = sorted(
            (e for e in catalogue if e[0].name in order), key=lambda e: order[e[0].name]
        )
        return {
            "type": "tool_search_output",
            "call_id": call_id,
            "execution": "client",
            "status": "completed",
            "tools": _responses_tools(entries, None, catalogue),
        }
    if found is None:
        text = "error: the search needs a non-empty 'query'"
    elif not found:
        text = f"no tool matches {_clip(query, 200)!r}"
    else:
        rows = [
            {"name": s.name, "description": _clip(s.description, 300), "matched_by": how}
            for s, how, _ in found
        ]
        text = json.dumps({"found": rows, "note": "these tools are offered from your next step"})
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def answer_tool_search(
    registry: BlockRegistry,
    call: Any,
    *,
    provider: str,
    k: int = TOOL_SEARCH_K,
    allowed: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The answer to a model's search call, from ``registry``'s gate.

    ``provider="anthropic"``: ``call`` is a ``tool_use`` block of :data:`SEARCH_TOOL`
    (a dict or the SDK's block); the answer is its ``tool_result`` block, holding one
    ``tool_reference`` per tool found (append it in a user message).
    ``provider="openai-responses"``: ``call`` is a ``tool_search_call`` output item;
    the answer is the ``tool_search_output`` item holding the tools found, in their
    namespaces (append it to the input). ``provider="openai"``: ``call`` is a Chat
    Completions tool call (or a :class:`rampart.llm.ToolCall`) of the agent's
    ``find_tools``; the answer is the ``tool`` message (a JSON list of the tools).
    The tools found are :func:`search_tools`'s; :func:`answered_tools` reads their
    names back from any answer."""
    call_id, query = _parse_call(call, provider)
    query = query.strip()
    found = search_tools(registry, query, k=k, allowed=allowed) if query else None
    return _answer(registry, provider, call_id, query, found)


async def aanswer_tool_search(
    registry: BlockRegistry,
    call: Any,
    *,
    provider: str,
    k: int = TOOL_SEARCH_K,
    allowed: Iterable[str] | None = None,
) -> dict[str, Any]:
    """:func:`answer_tool_search` for coroutines (the query is embedded off the loop)."""
    call_id, query = _parse_call(call, provider)
    query = query.strip()
    found = await asearch_tools(registry, query, k=k, allowed=allowed) if query else None
    return _answer(registry, provider, call_id, query, found)


def search_answer(
    registry: BlockRegistry,
    found: Sequence[tuple[ToolSchema, str, float | None]],
    provider: str,
) -> list[dict[str, Any]]:
    """What a search found, in the content form of ``provider``'s answer: Anthropic
    ``tool_reference`` blocks (a ``tool_result``'s content), or the tools of a
    Responses ``tool_search_output`` (the MCP server's ``find_tools(format=...)``)."""
    if provider == "anthropic":
        return _references([schema.name for schema, _, _ in found])
    if provider == "openai-responses":
        answer = _answer(registry, provider, "", "", list(found))
        return list(answer["tools"])
    raise InvalidArgumentError(f"provider must be anthropic or openai-responses, got {provider!r}")


def answered_tools(answer: Mapping[str, Any]) -> list[str]:
    """The tool names an answer of :func:`answer_tool_search` (or a preload) loads,
    in its order, whatever the provider."""
    if answer.get("type") == "tool_result":
        content = answer.get("content")
        return (
            [
                b["tool_name"]
                for b in content
                if isinstance(b, Mapping) and b.get("type") == "tool_reference"
            ]
            if isinstance(content, list)
            else []
        )
    if answer.get("type") == "tool_search_output":
        names: list[str] = []
        for t in answer.get("tools", []):
            inner = t.get("tools", []) if t.get("type") == "namespace" else [t]
            names.extend(f["name"] for f in inner if isinstance(f.get("name"), str))
        return names
    try:
        rows = json.loads(str(answer.get("content", "")))["found"]
    except (ValueError, KeyError, TypeError):
        return []
    return [r["name"] for r in rows if isinstance(r, Mapping) and isinstance(r.get("name"), str)]


#: The name of the agent's fallback tool for tools the gate left out
#: (``Agent(tool_search=True)``, the OpenAI Agents SDK integration).
TOOL_SEARCH = "find_tools"
TOOL_SEARCH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_SEARCH,
        "description": (
            "Find a tool that is not in your tool list: give its exact name or say what "
            "it should do. The tools found are offered to you from the next step on."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "A tool name, or what the tool should do.",
                }
            },
            "required": ["query"],
        },
    },
}
