"""The ``recall`` tool: what every cleared stub names, answered client-side
from the conversation's log for every provider (docs/specification.md §9).

``recall(call_id=...)`` brings back one earlier tool result as it was appended;
``recall(query=...)`` finds the results whose passages answer a query (BM25 over
the log's tool results, fused with an embedder's cosine when one is given) and
brings back their best lines with the tool name, call id and arguments. Both
together: that result's lines for the query. Nothing here changes the
conversation: the answer is the tool's result, which the caller appends as any
other (and the policy keeps it while its question stands).

Every fault is an error *result* (a string starting ``error:``), never an
exception out of the agent loop: an unknown id, a query past
:data:`MAX_QUERY_CHARS`, arguments that are not an object. A lone surrogate
in the arguments (a ``"\\ud800"`` escape) is read as U+FFFD, as in every other
text a model wrote.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rampart._args import repaired as _repaired
from rampart.conversation import retention
from rampart.conversation.core import RECALL_TOOL_NAME

if TYPE_CHECKING:
    from rampart.conversation.core import Conversation

__all__ = [
    "MAX_QUERY_CHARS",
    "RECALL_MAX_CHARS",
    "RECALL_TOOL",
    "RECALL_TOOL_NAME",
    "answer_recall",
    "recall_tool",
]

#: A query longer than this is refused (an error result), not truncated silently.
MAX_QUERY_CHARS = 4000
#: What one answer carries at most (characters): a longer result comes back as
#: its best lines for the query (or its beginning, with a note to ask by query).
RECALL_MAX_CHARS = 24_000
#: Results a query answer draws from at most.
_QUERY_RESULTS = 3

_DESCRIPTION = (
    "Bring back an earlier tool result that was cleared from the conversation to save "
    "context. Pass call_id (named in the cleared result's stub) for that result, or query "
    "(what you need to find) to search every earlier result; both: that result's lines "
    "for the query."
)
_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "call_id": {"type": "string", "description": "The call id the stub names."},
        "query": {"type": "string", "description": "What to look for in earlier results."},
    },
}

#: The tool as offered to the model, OpenAI Chat form.
RECALL_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {"name": RECALL_TOOL_NAME, "description": _DESCRIPTION, "parameters": _PARAMETERS},
}


def recall_tool(format: str = "openai_chat") -> dict[str, Any]:
    """The ``recall`` tool definition in ``format`` (``"openai_chat"``,
    ``"openai_responses"``, ``"anthropic"``, ``"gemini"`` or ``"mcp"``): a new dict."""
    params = json.loads(json.dumps(_PARAMETERS))
    if format == "openai_chat":
        return {
            "type": "function",
            "function": {
                "name": RECALL_TOOL_NAME,
                "description": _DESCRIPTION,
                "parameters": params,
            },
        }
    if format == "openai_responses":
        # the Responses API requires "strict"; both arguments are optional, which
        # strict mode does not allow
        return {
            "type": "function",
            "name": RECALL_TOOL_NAME,
            "description": _DESCRIPTION,
            "parameters": params,
            "strict": False,
        }
    if format == "anthropic":
        return {"name": RECALL_TOOL_NAME, "description": _DESCRIPTION, "input_schema": params}
    if format == "gemini":
        return {"name": RECALL_TOOL_NAME, "description": _DESCRIPTION, "parameters": params}
    if format == "mcp":
        return {"name": RECALL_TOOL_NAME, "description": _DESCRIPTION, "inputSchema": params}
    from rampart.errors import InvalidArgumentError

    raise InvalidArgumentError(
        f"recall_tool format must be openai_chat, openai_responses, anthropic, gemini or mcp, "
        f"got {format!r}"
    )


def _args(arguments: Any) -> dict[str, Any] | str:
    if isinstance(arguments, (str, bytes)):
        if len(arguments) > 4 * MAX_QUERY_CHARS + 1024:
            return (
                f"error: the recall arguments are {len(arguments)} characters; a query may "
                f"have at most {MAX_QUERY_CHARS}"
            )
        from rampart._http import loads_text

        try:
            text = (
                arguments.decode("utf-8", "replace") if isinstance(arguments, bytes) else arguments
            )
            arguments = loads_text(text) if text.strip() else {}
        except ValueError as exc:
            return f"error: the recall arguments are not JSON ({exc})"
    if not isinstance(arguments, Mapping):
        return "error: the recall arguments must be an object with call_id or query"
    return dict(arguments)


def answer_recall(conversation: Conversation, arguments: Any, embedder: Any = None) -> str:
    """The ``recall`` tool's answer from ``conversation``'s log (see the module).
    ``arguments``: the call's arguments (a JSON string or a mapping);
    ``embedder``: a registry's embedding model for the query search (lexical
    only without one). Never raises for bad arguments: the answer says what is
    wrong."""
    args = _args(arguments)
    if isinstance(args, str):
        return args
    call_id, query = args.get("call_id"), args.get("query")
    if call_id is not None and not isinstance(call_id, str):
        return "error: recall's call_id must be a string"
    if query is not None and not isinstance(query, str):
        return "error: recall's query must be a string"
    # What the model wrote is taken as written, a lone surrogate (a "\ud800"
    # escape) as U+FFFD, as the conversation took its call ids at append: the
    # index and the tokeniser take text only.
    call_id = _repaired(call_id).strip() if call_id else None
    query = _repaired(query).strip() if query else None
    if not call_id and not query:
        return "error: recall needs a call_id (named in a cleared result's stub) or a query"
    if query and len(query) > MAX_QUERY_CHARS:
        return (
            f"error: the recall query is {len(query)} characters; at most {MAX_QUERY_CHARS} "
            "(ask for what you need in a sentence)"
        )
    with conversation._lock:
        results = [
            it for it in conversation._items if it.kind == "tool_result" and it.native is None
        ]
        if call_id:
            found = [it for it in results if it.call_id == call_id]
            if not found:
                known = [it.call_id for it in results if it.call_id][-20:]
                return (
                    f"error: no tool result with call id {call_id[:80]!r} in this conversation"
                    + (f"; the latest call ids: {', '.join(known)}" if known else "")
                )
            it = found[-1]
            if not query and len(it.content) <= RECALL_MAX_CHARS:
                return _header(conversation, it, "all") + it.content
            pool = [it]
        else:
            pool = results
        if not pool:
            return "error: this conversation has no tool results to recall"
        rel = retention.relevance_of(conversation)
        scores = rel.scores(conversation, query or "", [it.id for it in pool], embedder)
        if not scores:  # a call id with no query, too long to send whole
            it = pool[0]
            head = it.content[:RECALL_MAX_CHARS]
            return (
                _header(conversation, it, f"the first {len(head)} of {len(it.content)} characters")
                + head
                + "\n[... the rest was left out: recall again with this call_id and a query "
                "for the lines you need]"
            )
        ranked = sorted(scores.values(), key=lambda s: -s.score)[:_QUERY_RESULTS]
        if not call_id and not any(retention.is_relevant(s) or s.lexical > 0 for s in ranked):
            return f"no earlier tool result matches {(query or '')[:200]!r}"
        room = RECALL_MAX_CHARS // len(ranked)
        parts = []
        for s in ranked:
            it = conversation._items[conversation._index[s.key]]
            spans = retention.best_spans(rel, it, s, room)
            where = retention.lines_of(it, spans)
            parts.append(_header(conversation, it, where) + retention.spans_text(it, spans))
        return "\n\n".join(parts)


def _header(conv: Conversation, it: Any, where: str) -> str:
    return f"[recalled: {retention.describe(conv, it, where)}]\n"
