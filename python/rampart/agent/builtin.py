"""The agent's own tools: ``remember`` and ``forget`` (``memory_tools=True``), the
gate's way back, ``find_tools`` (offered when the agent gates its tools), and
``recall`` (offered when it compiles into a ``context_window``: what every cleared
stub names): their definitions as the model is offered them, and what answers
their calls.

Like :mod:`rampart.agent.lessons`, this takes the agent as a small protocol
(:class:`rampart.agent.lessons.LessonHost`) and never imports the Agent class."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rampart.agent import lessons
from rampart.agent.calls import arguments
from rampart.agent.quarantine import QuarantinedLesson
from rampart.agent.records import Run
from rampart.agent.text import clean_rule, clip
from rampart.conversation import Conversation, answer_recall
from rampart.conversation.recall import RECALL_TOOL, RECALL_TOOL_NAME
from rampart.errors import RampartError
from rampart.llm import ToolCall

# The gate's fallback tool is defined with the gate's tool search (integrations use it too).
from rampart.tool_search import TOOL_SEARCH, TOOL_SEARCH_TOOL, answer_tool_search, answered_tools

if TYPE_CHECKING:
    from rampart.registry import BlockRegistry

__all__ = [
    "MEMORY_NAMES",
    "MEMORY_TOOLS",
    "RECALL_TOOL",
    "RECALL_TOOL_NAME",
    "TOOL_SEARCH",
    "TOOL_SEARCH_TOOL",
]

#: ``remember`` and ``forget``, as offered to the model (OpenAI tool dicts).
MEMORY_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "remember",
            "description": "Store one rule or fact for future tasks (one short sentence).",
            "parameters": {
                "type": "object",
                "properties": {"rule": {"type": "string", "description": "The rule to keep."}},
                "required": ["rule"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "forget",
            "description": "Remove a stored rule by its block name or runtime id.",
            "parameters": {
                "type": "object",
                "properties": {
                    "block": {"type": "string", "description": "Name or id of the block."}
                },
                "required": ["block"],
            },
        },
    },
]
MEMORY_NAMES = frozenset(t["function"]["name"] for t in MEMORY_TOOLS)


#: The name of the gate's fallback tool (offered when the agent gates its tools).
def memory(host: lessons.LessonHost, call: ToolCall, run: Run, tainted: bool) -> tuple[str, bool]:
    """``remember`` and ``forget``: plain registry writes and evictions, so the
    registry's own rules decide (a pinned or foreign block stays). After the model
    has read untrusted output, ``remember`` is quarantined like a diagnosis and
    ``forget`` refused: the page may be the one asking."""
    args = arguments(call)
    if isinstance(args, str):
        return args, True
    registry = host.registry
    try:
        if call.name == "remember":
            rule = clean_rule(str(args.get("rule", "")), host.max_rule_chars)
            if not rule:
                return "error: remember needs a non-empty 'rule'", True
            raw = clip(str(args.get("rule", "")), 2000)
            kept = lessons.learn(host, rule, run, "remember", raw, tainted)
            if isinstance(kept, QuarantinedLesson):
                return (
                    f"quarantined as {kept.id}: this run read untrusted tool output "
                    f"({', '.join(run.untrusted_reads)}), so the rule is used only once "
                    "an operator approves it or a later run confirms it",
                    False,
                )
            run.memory_writes.append(kept.block_id)
            verb = "updated" if kept.updated else "stored"
            return f"{verb} as block {kept.block_id}", False
        if tainted and host.quarantine is not None:
            return (
                "error: forget is not available after reading untrusted tool output "
                f"({', '.join(run.untrusted_reads)})",
                True,
            )
        key = str(args.get("block", ""))
        target = key if key in registry else None
        if target is None:
            named = registry.get_by_name(key)
            if not named:
                return f"error: no block named or with id {key!r}", True
            target = named[0].runtime_id
        gone = registry.evict(target)
        return f"forgot block {gone.semantic_name!r} ({gone.runtime_id})", False
    except RampartError as exc:
        return f"error: {type(exc).__name__}: {exc}", True


def find_tools(
    registry: BlockRegistry, call: ToolCall, run: Run, allowed: Sequence[str]
) -> tuple[str, bool]:
    """The gate's way back (:func:`rampart.tool_search.answer_tool_search` over
    ``allowed``, the tools the agent can run); what it finds joins the tools
    offered from the next step on."""
    args = arguments(call)
    if isinstance(args, str):
        return args, True
    if not str(args.get("query", "")).strip():
        return f"error: {TOOL_SEARCH} needs a non-empty 'query'", True
    try:
        answer = answer_tool_search(registry, call, provider="openai", allowed=allowed)
    except RampartError as exc:
        return f"error: {type(exc).__name__}: {exc}", True
    for name in answered_tools(answer):
        if name not in run.found_tools:
            run.found_tools.append(name)
    return str(answer["content"]), False


def recall(
    registry: BlockRegistry,
    conversation: Conversation,
    call: ToolCall,
    run: Run,
    trusted: frozenset[str],
) -> tuple[str, bool]:
    """``recall``: an earlier tool result brought back from ``conversation``'s log
    (:func:`rampart.conversation.answer_recall`, hybrid with the registry's
    embedding model when it has one). A bad call is an error result, never an
    exception. What it brings back is earlier tool output: unless every tool result
    in the log came from a ``trusted`` tool, the run has read untrusted output
    (``recall`` joins ``run.untrusted_reads``), as it had when the result first came."""
    try:
        answer = answer_recall(conversation, call.arguments, registry.embedding_model)
    except Exception as exc:  # the embedding model failing, say: the model reads why
        return f"error: {type(exc).__name__}: {exc}", True
    if answer.startswith("error:"):
        return answer, True
    sources = {
        it.tool_name
        for it in conversation.items
        if it.kind == "tool_result" and it.tool_name != RECALL_TOOL_NAME
    }
    if not sources <= trusted and RECALL_TOOL_NAME not in run.untrusted_reads:
        run.untrusted_reads.append(RECALL_TOOL_NAME)
    return answer, False
