"""The agent loop: compile, call the model, run its tools, and learn from failures.

Each step of :meth:`Agent.run` compiles the context from the registry for the task
(gate, order, budget), offers the included tool blocks as the request's native
``tools`` (never as prompt text), calls the model, runs the tools it called and feeds
their results back, until the model answers without a tool call or ``max_steps`` is
reached. A failed run (per ``check(answer, run)`` or, without one, an LLM judge)
triggers, with ``learn=True``, one diagnosis call that writes a single actionable
rule as an ``agent`` block tagged with the run's trajectory id; a near-duplicate of
a rule already learned updates that rule instead. Later compiles put the rule in
front of the model as quoted data with its provenance ("Lesson learned from run X
on DATE: \"...\""); :meth:`Agent.forget` takes it back
(``rollback_trajectory``).

Tool output is written by strangers (a fetched page, an issue comment), and the
diagnosis reads it. A rule from a run that read the output of an untrusted tool
(every tool unless named in ``trusted_tools``) is *quarantined*: kept in the agent's
:class:`Quarantine` with its provenance (run, the tools read, the diagnosis text)
and never compiled until an operator approves it (:meth:`Agent.approve`) or a later
run that read no untrusted output writes a near-duplicate rule of its own (the
duplicate test below), whose text, not the quarantined one, is then compiled. The
``remember`` tool obeys the same rule.

With a gate (``top_k``) the model is also offered ``find_tools(query)``: a tool the
gate hid can be asked for by name or by description, and what is found is offered
from the next step on.

Tools are Python callables (their JSON schema comes from the signature and the
docstring) or the tools of an MCP client session (``mcp.ClientSession``, awaited by
:meth:`Agent.arun`). With ``memory_tools=True`` the model may also call ``remember``
and ``forget``, which write and evict blocks through the registry's own permission
model: pinned blocks (seeds, tools) cannot be forgotten.

The messages of a run live in a :class:`rampart.Conversation` (``Run.conversation``;
pass it back as ``run(task, conversation=...)`` to continue the session), and each
step compiles them with the registry: with ``context_window`` the request
(instructions, tools, messages) fits the window less ``reply_tokens``, old tool
results cleared, compacted or dropped as ``policy`` (a :class:`rampart.ContextPolicy`)
says, so a long run no longer overflows; the provider's ``usage`` of each call tunes
the count (``Conversation.observe_usage``).

Everything the loop feeds back is bounded: tool results are cut at
``max_tool_result_chars``, rules at ``max_rule_chars``, the tool calls run per step
at ``max_calls_per_step``, the loop at ``max_steps``.

The package: :mod:`~rampart.agent.loop` (the :class:`Agent` and its drivers),
:mod:`~rampart.agent.records` (what a run leaves), :mod:`~rampart.agent.lessons`
(learning and the operator's decisions), :mod:`~rampart.agent.quarantine`,
:mod:`~rampart.agent.judge`, :mod:`~rampart.agent.builtin` (``remember``,
``forget``, ``find_tools``), :mod:`~rampart.agent.calls` (running the model's tool
calls), :mod:`~rampart.agent.text` and :mod:`~rampart.agent.limits`. A tool's schema
from a Python callable is :func:`rampart.tools.tool_schema`; the MCP client side is
:mod:`rampart.integrations.mcp_client`.
"""

from __future__ import annotations

from rampart.agent.builtin import TOOL_SEARCH
from rampart.agent.lessons import LESSON_TAG
from rampart.agent.limits import DUPLICATE_COSINE as DUPLICATE_COSINE
from rampart.agent.limits import DUPLICATE_TEXT as DUPLICATE_TEXT
from rampart.agent.loop import Agent
from rampart.agent.quarantine import Quarantine, QuarantinedLesson
from rampart.agent.records import CheckFn as CheckFn
from rampart.agent.records import Lesson, Run, Step, ToolResult
from rampart.tool_search import TOOL_SEARCH_K, asearch_tools, search_tools
from rampart.tools import tool_schema

__all__ = [
    "LESSON_TAG",
    "TOOL_SEARCH",
    "TOOL_SEARCH_K",
    "Agent",
    "Lesson",
    "Quarantine",
    "QuarantinedLesson",
    "Run",
    "Step",
    "ToolResult",
    "asearch_tools",
    "search_tools",
    "tool_schema",
]
