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
"""

from __future__ import annotations

import asyncio
import difflib
import enum
import functools
import inspect
import json
import math
import os
import re
import threading
import time
import types
import typing
import uuid
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Union

import rampart._http as _http
from rampart._files import FileProblem, read_regular_file
from rampart.block import CompileResult, InstructionBlock
from rampart.conversation import ContextPolicy, Conversation
from rampart.errors import BlockNotFoundError, InvalidArgumentError, RampartError
from rampart.llm import Backend, Reply, ToolCall
from rampart.registry import BlockRegistry
from rampart.tool_search import (
    TOOL_SEARCH_K,
    answer_tool_search,
    answered_tools,
    asearch_tools,
    search_tools,
)
from rampart.tools import ToolSchema

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

#: The tag of every rule the agent learned (diagnosis or the ``remember`` tool).
LESSON_TAG = "lesson"
#: Cosine similarity at or above which a new rule updates an existing one. From the
#: learning demo's 30 rules (docs/agent.md): with all-MiniLM-L6-v2, rules for the same
#: convention scored a median 0.70, rules for different ones at most 0.46; the first
#: choice, 0.85, merged none of the paraphrases.
DUPLICATE_COSINE = 0.7
#: The same for normalised-text similarity (difflib ratio), without an embedding model:
#: it only catches near-verbatim repeats (paraphrases of one rule scored a median 0.47,
#: rules for different conventions up to 0.53, so no threshold separates them).
DUPLICATE_TEXT = 0.75

CheckFn = Callable[[str, "Run"], "bool | tuple[bool, str]"]

_JUDGE_SYSTEM = (
    "You grade an assistant's answer to a task. Reply with PASS or FAIL on the first "
    "line, then one sentence saying why."
)
_DIAGNOSE_SYSTEM = (
    "You review a failed attempt at a task and write one rule that would make future "
    "attempts at similar tasks pass. The rule must be specific and actionable: say "
    "exactly what to do (names, formats, values), not that one should be careful."
)
_MEMORY_TOOLS: list[dict[str, Any]] = [
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
_MEMORY_NAMES = frozenset(t["function"]["name"] for t in _MEMORY_TOOLS)

#: The name of the gate's fallback tool (offered when the agent gates its tools).
TOOL_SEARCH = "find_tools"
_TOOL_SEARCH_TOOL: dict[str, Any] = {
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


# ---- results ------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolResult:
    """One executed tool call: what the model asked and what it was told."""

    call: ToolCall
    output: str  # as fed back to the model (cut at max_tool_result_chars)
    is_error: bool
    latency_s: float


@dataclass
class Step:
    """One model call of a run and the tool calls it made."""

    index: int
    compile: CompileResult  # what the model saw: .prompt, .included, .report, .tools()
    reply: Reply
    tools_offered: list[str]
    results: list[ToolResult] = field(default_factory=list)
    model_s: float = 0.0  # the model call alone
    latency_s: float = 0.0  # the whole step: compile, model, tools

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return self.reply.calls


@dataclass(frozen=True)
class Lesson:
    """The rule a failed run wrote: a new block (``updated=False``) or the new content
    of a near-duplicate rule (``previous`` holds what it replaced)."""

    block_id: str
    content: str
    updated: bool
    previous: str | None = None
    similarity: float | None = None
    previous_wrap: tuple[str, str] | None = None  # the provenance line it replaced


@dataclass
class QuarantinedLesson:
    """A rule held back because the run that wrote it had read untrusted tool output.

    ``status``: ``pending`` (never compiled), ``approved`` (by an operator),
    ``confirmed`` (a later clean run wrote a near-duplicate; ``decided_by`` is that
    run and ``block_id`` its compiled rule) or ``rejected``. ``sightings``: later
    untrusted runs that wrote a near-duplicate (they never confirm: the same page
    read again would plant the same rule again)."""

    id: str
    rule: str
    run_id: str
    task: str
    origin: str  # "diagnosis" or "remember"
    untrusted_tools: list[str]  # the tools whose output the run had read
    diagnosis: str  # the diagnosis reply (or the remember call) as the model wrote it
    created: str  # UTC, ISO 8601
    status: str = "pending"
    decided_by: str | None = None  # "operator" or the confirming run's trajectory id
    block_id: str | None = None  # the compiled rule, once approved or confirmed
    sightings: list[str] = field(default_factory=list)


_STATUSES = ("pending", "approved", "confirmed", "rejected")
_MAX_SIGHTINGS = 16


class Quarantine:
    """The lessons an agent holds back, in insertion order, bounded to ``limit``
    entries (past it the oldest decided entry goes first, then the oldest pending
    one: a page read in a loop cannot grow it without bound). Share one between
    agents of one registry; :meth:`save` / :meth:`load` keep it across processes
    (JSON, written atomically)."""

    def __init__(self, limit: int = 256) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidArgumentError(f"Quarantine limit must be an int >= 1, got {limit!r}")
        self.limit = limit
        self._entries: dict[str, QuarantinedLesson] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self, status: str | None = None) -> list[QuarantinedLesson]:
        """Every entry (or those with ``status``), oldest first."""
        if status is not None and status not in _STATUSES:
            raise InvalidArgumentError(f"status must be one of {_STATUSES}, got {status!r}")
        with self._lock:
            return [e for e in self._entries.values() if status is None or e.status == status]

    def get(self, entry_id: str) -> QuarantinedLesson:
        """The entry with ``entry_id``; InvalidArgumentError if there is none."""
        with self._lock:
            entry = self._entries.get(entry_id) if isinstance(entry_id, str) else None
        if entry is None:
            raise InvalidArgumentError(f"no quarantined lesson with id {entry_id!r}")
        return entry

    def add(self, entry: QuarantinedLesson) -> None:
        """Keep ``entry``; past ``limit`` entries the oldest decided one (else the
        oldest) makes room."""
        with self._lock:
            while len(self._entries) >= self.limit:
                decided = [k for k, e in self._entries.items() if e.status != "pending"]
                del self._entries[decided[0] if decided else next(iter(self._entries))]
            self._entries[entry.id] = entry

    def discard(self, entry_id: str) -> None:
        """Drop the entry with ``entry_id`` (nothing if there is none)."""
        with self._lock:
            self._entries.pop(entry_id, None)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write every entry as JSON (a temporary file renamed into place)."""
        target = Path(path)
        tmp = target.with_name(target.name + ".tmp")
        data = {"version": 1, "entries": [asdict(e) for e in self.entries()]}
        tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
        os.replace(tmp, target)

    @classmethod
    def load(cls, path: str | os.PathLike[str], limit: int = 256) -> Quarantine:
        """A quarantine from :meth:`save`'s file; a malformed file, one over 64 MiB
        or one that is not a regular file (a FIFO, a device) is an
        :class:`InvalidArgumentError` naming it and the entry. Rules are rendered
        when approved (:meth:`Agent.approve`), not here."""
        try:
            raw = read_regular_file(Path(path), _MAX_QUARANTINE_BYTES)
            data = json.loads(raw.decode("utf-8"))
        except (FileProblem, ValueError, RecursionError) as exc:
            raise InvalidArgumentError(f"{path}: cannot read a quarantine ({exc})") from None
        q = cls(limit)
        rows = data.get("entries") if isinstance(data, dict) else None
        if not isinstance(rows, list):
            raise InvalidArgumentError(f"{path}: not a quarantine file (no 'entries' list)")
        for i, row in enumerate(rows):
            problem = _entry_problem(row)
            if problem:
                raise InvalidArgumentError(f"{path}: entry {i} is malformed ({problem})")
            q.add(QuarantinedLesson(**row))
        return q


_MAX_QUARANTINE_BYTES = 64 << 20
_TEXT_FIELDS = ("id", "rule", "run_id", "task", "origin", "diagnosis", "created", "status")


def _entry_problem(row: Any) -> str | None:
    """Why ``row`` is not a saved :class:`QuarantinedLesson`, or None."""
    if not isinstance(row, dict):
        return f"a {type(row).__name__}, not an object"
    known = QuarantinedLesson.__dataclass_fields__
    extra = sorted(set(row) - set(known))
    missing = [f for f in (*_TEXT_FIELDS[:-1], "untrusted_tools") if f not in row]
    if extra or missing:
        return f"unknown fields {extra}" if extra else f"missing fields {missing}"
    for name in _TEXT_FIELDS:
        if name in row and not isinstance(row[name], str):
            return f"{name} is not a string"
    for name in ("decided_by", "block_id"):
        if row.get(name) is not None and not isinstance(row[name], str):
            return f"{name} is not a string or null"
    for name in ("untrusted_tools", "sightings"):
        value = row.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return f"{name} is not a list of strings"
    if row.get("status", "pending") not in _STATUSES:
        return f"status {row['status']!r} is not one of {_STATUSES}"
    if len(row.get("sightings", [])) > _MAX_SIGHTINGS:
        return f"more than {_MAX_SIGHTINGS} sightings"
    return None


@dataclass
class Run:
    """The outcome of :meth:`Agent.run`."""

    task: str
    trajectory_id: str
    answer: str = ""
    steps: list[Step] = field(default_factory=list)
    stop_reason: str = "answer"  # "answer" or "max_steps"
    success: bool | None = None  # None: nothing judged it
    feedback: str = ""  # the checker's or judge's reason
    lesson: Lesson | None = None
    memory_writes: list[str] = field(default_factory=list)  # ids written by `remember`
    # Tools not in trusted_tools whose output the model was given, in first-read order:
    # a rule this run writes is quarantined when this is not empty.
    untrusted_reads: list[str] = field(default_factory=list)
    quarantined: list[QuarantinedLesson] = field(default_factory=list)
    confirmed: list[str] = field(default_factory=list)  # quarantine ids this run confirmed
    found_tools: list[str] = field(default_factory=list)  # offered after find_tools
    prompt_tokens: int = 0  # every call of the run, judge and diagnosis included
    completion_tokens: int = 0
    latency_s: float = 0.0
    # The session's messages, this run's appended (pass it to the next run to continue).
    conversation: Conversation | None = None

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def tool_results(self) -> list[ToolResult]:
        return [r for s in self.steps for r in s.results]

    @property
    def tainted(self) -> bool:
        """Whether the model read output of an untrusted tool during this run."""
        return bool(self.untrusted_reads)


# ---- tool schemas from Python callables ------------------------------------------------

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _json_type(hint: Any) -> dict[str, Any]:
    """A JSON Schema for a type hint; {} (any value) for what it cannot express."""
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    if hint is type(None):
        return {"type": "null"}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _json_type(rest[0])
        return {"anyOf": [_json_type(a) for a in args]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if hint in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset, Sequence):
        # tuple[int, str] has positional item types a single "items" cannot say
        homogeneous = origin is not tuple or (len(args) == 2 and args[1] is Ellipsis)
        item = _json_type(args[0]) if args and homogeneous else {}
        return {"type": "array", "items": item} if item else {"type": "array"}
    if hint is dict or origin in (dict, Mapping):
        return {"type": "object"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    return {}


_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params)\s*:\s*$", re.IGNORECASE)
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_REST_PARAM = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The summary (first paragraph) and per-parameter descriptions of a Google-style
    (``Args:``) or reST-style (``:param x:``) docstring."""
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line) or line.lstrip().startswith(":"):
            break
        summary.append(line.strip())
    params: dict[str, str] = {}
    in_args, current = False, None
    for line in lines:
        rest = _REST_PARAM.match(line)
        if rest:
            current = rest.group(1)
            params[current] = rest.group(2).strip()
            continue
        if _SECTION.match(line):
            in_args, current = True, None
            continue
        if in_args:
            if not line.strip():
                continue
            if re.match(r"^\S", line) and line.rstrip().endswith(":"):
                in_args = False  # the next section (Returns:, Raises:)
                continue
            m = _ARG_LINE.match(line)
            if m and line[: len(line) - len(line.lstrip())].count(" ") <= 4:
                current = m.group(1).lstrip("*")
                params[current] = m.group(2).strip()
            elif current:
                params[current] = (params[current] + " " + line.strip()).strip()
    return " ".join(summary), params


def tool_schema(fn: Callable[..., Any], name: str | None = None) -> ToolSchema:
    """The tool definition of a Python callable: its name, the docstring's summary as
    description, and a JSON Schema of its parameters from their type hints (parameters
    without a default are required; docstring ``Args:`` lines describe them)."""
    if not callable(fn):
        raise InvalidArgumentError(f"a tool must be callable, got {type(fn).__name__}")
    tool_name = str(name or getattr(fn, "__name__", ""))
    if not _NAME.fullmatch(tool_name):
        raise InvalidArgumentError(
            f"tool name {tool_name!r} must match [A-Za-z0-9_-]{{1,64}} (what the APIs accept)"
        )
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(
            f"tool {tool_name!r}: no signature to build a schema ({exc})"
        ) from None
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable forward references: fall back to untyped
        hints = {}
    summary, docs = _parse_docstring(inspect.getdoc(fn) or "")
    props: dict[str, Any] = {}
    required: list[str] = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue  # *args/**kwargs have no name a model could pass
        if p.kind is p.POSITIONAL_ONLY:
            raise InvalidArgumentError(
                f"tool {tool_name!r}: parameter {p.name!r} is positional-only; tools are "
                "called with keyword arguments"
            )
        prop = _json_type(hints.get(p.name, Any))
        if docs.get(p.name):
            prop["description"] = docs[p.name]
        if p.default is p.empty:
            required.append(p.name)
        elif p.default is None or isinstance(p.default, (str, int, float, bool)):
            prop["default"] = p.default
        props[p.name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return ToolSchema(name=tool_name, description=summary, input_schema=schema)


# ---- MCP sessions ------------------------------------------------------------------------


def _mcp_session_class() -> tuple[type, ...] | None:
    """The MCP client classes whose tools an agent can call (``mcp.ClientSession``,
    and ``mcp.Client`` where the SDK has one), or None without the mcp package."""
    try:
        import mcp
    except ImportError:
        return None
    return tuple(
        c for c in (getattr(mcp, "ClientSession", None), getattr(mcp, "Client", None)) if c
    )


def _looks_like_session(obj: Any) -> bool:
    return hasattr(obj, "list_tools") and hasattr(obj, "call_tool") and not callable(obj)


def _mcp_output(result: Any) -> tuple[str, bool]:
    """The text of an MCP ``CallToolResult`` and its ``isError`` flag."""
    parts: list[str] = []
    for item in getattr(result, "content", None) or []:
        text = getattr(item, "text", None)
        if isinstance(text, str):
            parts.append(text)
        else:
            dump = getattr(item, "model_dump", None)
            parts.append(json.dumps(dump(mode="json")) if dump else str(item))
    structured = getattr(result, "structured_content", getattr(result, "structuredContent", None))
    if not parts and structured is not None:
        parts.append(json.dumps(structured))
    # mcp 1.x names the flag isError, 2.x is_error
    flag = getattr(result, "is_error", getattr(result, "isError", False))
    return "\n".join(parts), bool(flag)


# ---- the agent -----------------------------------------------------------------------------

# What the loop asks its driver to do: call the model, run one tool call, compile
# the context for the task, or run a registry step (memory tools, learning) that
# may write to a shared registry or run the embedding model. ``run`` does each in
# place; ``arun`` awaits the registry's asyncio twin (compile) or runs the step
# on a worker thread, so the event loop never waits on the store or the model.
_Chat = tuple[str, list[dict[str, Any]], list[dict[str, Any]], int]
_Step = tuple[str, Callable[..., Any], tuple[Any, ...]]
_Action = _Chat | tuple[str, ToolCall] | tuple[str, str, Conversation] | _Step


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [cut: {len(text) - limit} more characters]"


def _normalise(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _clean_rule(text: str, limit: int) -> str:
    """The rule a diagnosis reply holds: its first non-empty line without list
    markers, quotes or a "Rule:" label, cut at a word boundary within ``limit``."""
    line = next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), "")
    line = re.sub(r"^(?:[-*•]|\d+[.)])\s*", "", line)
    line = re.sub(r"^[*_\s]*(?:new\s+)?rule[*_\s]*[:：][*_\s]*", "", line, flags=re.IGNORECASE)
    return _renderable_rule(line.strip().strip("\"'`"), limit)


def _renderable_rule(text: str, limit: int) -> str:
    """``text`` as a rule may be rendered: one line (every line break and run of
    whitespace, U+2028 included, becomes one space), no double quotes (the rule is
    rendered inside them, as data after its provenance, and may not close them), no
    control characters a terminal or template would act on, at most ``limit``
    characters (cut at a word boundary, "…" included). Applied when a rule is
    compiled, whatever wrote it (a quarantine file is edited on disk too);
    idempotent, so text already rendered is compiled as it is. Only as much of
    ``text`` is read as the first ``limit`` characters need (a 20 MB rule costs
    microseconds, not seconds)."""
    n = 4 * limit + 64
    while True:
        head = text[:n]
        line = "".join(c if c.isprintable() else " " for c in head.replace('"', "'"))
        line = " ".join(line.split())
        if len(line) > limit or n >= len(text):
            break
        n *= 4
    if len(line) > limit:
        cut = line[: limit - 1].rsplit(" ", 1)[0]
        line = (cut or line[: limit - 1]).rstrip(",;: ") + "…"
    return line


class Agent:
    """A tool-calling agent whose context is compiled from ``registry``.

    ``model``: a :class:`rampart.llm.Backend` (``OpenAIBackend``, ``LlamaCppBackend``
    or any object with the same ``chat``). ``tools``: Python callables and/or MCP
    client sessions. ``max_tokens``: the compile budget per step (default: the
    registry's). ``top_k``: gate the registry to the ``top_k`` blocks most relevant
    to the task (needs the registry's embedding model). ``check(answer, run)``:
    returns ``True``/``False`` or ``(ok, reason)``; without it, a learning agent asks
    the model to judge. ``reply_tokens``: the model's reply limit per call.

    ``trusted_tools``: names (or the callables) of tools whose output the operator
    vouches for; every other tool's output is untrusted, and a rule from a run that
    read it is quarantined (``quarantine``: a :class:`Quarantine` to share, ``True``
    for a fresh one, ``False`` to compile such rules at once, as before).
    ``tool_search``: offer ``find_tools`` beside the gated tools (default: when
    ``top_k`` gates). ``max_calls_per_step``: the tool calls of one reply that run
    (default 32); the rest are answered with an error the model can act on, so a
    reply listing thousands of calls costs thirty-two tool runs, not thousands.

    ``context_window``: the model's window in tokens; each step's request
    (instructions + tools + messages) then fits it less ``reply_tokens``, the
    messages managed by ``policy`` (default ``ContextPolicy()``). Without it the
    messages are sent as they are, as before.
    """

    def __init__(
        self,
        registry: BlockRegistry,
        model: Backend,
        tools: Iterable[Any] = (),
        *,
        max_steps: int = 8,
        max_tokens: int | None = None,
        top_k: int | None = None,
        learn: bool = True,
        check: CheckFn | None = None,
        memory_tools: bool = False,
        reply_tokens: int = 512,
        temperature: float = 0.0,
        max_tool_result_chars: int = 4000,
        max_rule_chars: int = 300,
        duplicate_threshold: float | None = None,
        lesson_priority: float = 0.6,
        trusted_tools: Iterable[str | Callable[..., Any]] = (),
        quarantine: Quarantine | bool = True,
        tool_search: bool | None = None,
        learn_tools: bool | None = None,
        max_calls_per_step: int = 32,
        context_window: int | None = None,
        policy: ContextPolicy | None = None,
    ) -> None:
        if not isinstance(registry, BlockRegistry):
            raise InvalidArgumentError(
                f"registry must be a BlockRegistry, got {type(registry).__name__}"
            )
        if not callable(getattr(model, "chat", None)):
            raise InvalidArgumentError(
                f"model must have a chat() method (a rampart.llm backend), got "
                f"{type(model).__name__}"
            )
        for value, what in (
            (max_steps, "max_steps"),
            (reply_tokens, "reply_tokens"),
            (max_tool_result_chars, "max_tool_result_chars"),
            (max_rule_chars, "max_rule_chars"),
            (max_calls_per_step, "max_calls_per_step"),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{what} must be an int >= 1, got {value!r}")
        if context_window is not None and (
            isinstance(context_window, bool)
            or not isinstance(context_window, int)
            or context_window <= reply_tokens
        ):
            raise InvalidArgumentError(
                f"context_window must be an int above reply_tokens ({reply_tokens}) or None, "
                f"got {context_window!r}"
            )
        if policy is not None and not isinstance(policy, ContextPolicy):
            raise InvalidArgumentError(
                f"policy must be a rampart.ContextPolicy or None, got {type(policy).__name__}"
            )
        if top_k is not None:
            if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
                raise InvalidArgumentError(f"top_k must be an int >= 1 or None, got {top_k!r}")
            if registry.embedding_model is None:
                raise InvalidArgumentError(
                    f"top_k={top_k} gates by relevance, but registry {registry.label!r} has no "
                    "embedding model: pass embedding_model= to it, or top_k=None"
                )
        if check is not None and not callable(check):
            raise InvalidArgumentError("check must be a callable(answer, run)")
        if duplicate_threshold is not None and not 0.0 < duplicate_threshold <= 1.0:
            raise InvalidArgumentError(
                f"duplicate_threshold must be in (0, 1], got {duplicate_threshold!r}"
            )
        self.registry = registry
        self.model = model
        self.max_steps = max_steps
        self.max_tokens = max_tokens
        self.top_k = top_k
        self.learn = learn
        if learn_tools is not None and not isinstance(learn_tools, bool):
            raise InvalidArgumentError(f"learn_tools must be a bool or None, got {learn_tools!r}")
        self.learn_tools = learn if learn_tools is None else learn_tools
        self.check = check
        self.memory_tools = memory_tools
        self.reply_tokens = reply_tokens
        self.temperature = temperature
        self.max_tool_result_chars = max_tool_result_chars
        self.max_rule_chars = max_rule_chars
        self.max_calls_per_step = max_calls_per_step
        self.context_window = context_window
        self.policy = policy
        self.duplicate_threshold = duplicate_threshold
        self.lesson_priority = lesson_priority
        trusted: set[str] = set()
        for t in [trusted_tools] if isinstance(trusted_tools, str) else trusted_tools:
            name = t if isinstance(t, str) else getattr(t, "__name__", None)
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(
                    f"trusted_tools holds tool names or the tool callables, got {t!r}"
                )
            trusted.add(name)
        self.trusted_tools = frozenset(trusted)
        if isinstance(quarantine, Quarantine):
            self.quarantine: Quarantine | None = quarantine
        elif isinstance(quarantine, bool):
            self.quarantine = Quarantine() if quarantine else None
        else:
            raise InvalidArgumentError(
                f"quarantine must be a Quarantine or a bool, got {type(quarantine).__name__}"
            )
        if tool_search is not None and not isinstance(tool_search, bool):
            raise InvalidArgumentError(f"tool_search must be a bool or None, got {tool_search!r}")
        self.tool_search = top_k is not None if tool_search is None else tool_search
        self._vectors: dict[str, Any] = {}  # quarantined rule text -> its embedding
        self._functions: dict[str, Callable[..., Any]] = {}
        self._sessions: list[Any] = []
        self._mcp_tools: dict[str, Any] = {}  # tool name -> its session
        self._mcp_listed = False
        self._wire: dict[str, dict[str, Any]] = {}  # tool block id -> OpenAI tool dict
        schemas: list[ToolSchema] = []
        session_cls = _mcp_session_class()
        for i, t in enumerate(tools):
            if session_cls and isinstance(t, session_cls):
                self._sessions.append(t)
            elif callable(t):
                s = tool_schema(t)
                if s.name in self._functions or s.name in _MEMORY_NAMES:
                    raise InvalidArgumentError(f"tools[{i}]: a second tool named {s.name!r}")
                self._check_search_clash(s.name, f"tools[{i}]")
                self._functions[s.name] = t
                schemas.append(s)
            elif session_cls is None and _looks_like_session(t):
                raise ImportError(
                    f"tools[{i}] looks like an MCP client session ({type(t).__name__}), but the "
                    "mcp package is not installed: pip install mcp"
                )
            else:
                raise InvalidArgumentError(
                    f"tools[{i}] must be a callable or an mcp.ClientSession, got {type(t).__name__}"
                )
        self._load([s.to_openai() for s in schemas])

    # ---- tool blocks ----------------------------------------------------------------

    def _check_search_clash(self, name: str, where: str) -> None:
        if self.tool_search and name == TOOL_SEARCH:
            raise InvalidArgumentError(
                f"{where}: a tool named {TOOL_SEARCH!r} clashes with the gate's fallback "
                "tool: rename it, or pass tool_search=False"
            )

    def _load(self, definitions: list[dict[str, Any]], tags: Sequence[str] = ()) -> None:
        """Write tool blocks for the definitions the registry does not hold yet.
        Pinned (not evictable), so the model's ``forget`` cannot drop a tool."""
        if not definitions:
            return
        have = {s.name for b in self.registry.find_by_tag("tool") if (s := b.tool_schema)}
        new = [d for d in definitions if _definition_name(d) not in have]
        if new:
            self.registry.load_tools(new, evictable=False, tags=list(tags))

    async def _list_mcp(self) -> None:
        if self._mcp_listed:
            return
        listings: list[tuple[list[dict[str, Any]], list[str]]] = []
        for session in self._sessions:
            definitions: list[dict[str, Any]] = []
            listings.append((definitions, _server_tags(session)))
            tools: list[Any] = []
            cursor = None
            while True:  # every page of the listing
                listed = await (
                    session.list_tools(cursor=cursor) if cursor else session.list_tools()
                )
                tools.extend(listed.tools)
                cursor = getattr(listed, "next_cursor", getattr(listed, "nextCursor", None))
                if not cursor:
                    break
            for t in tools:
                if t.name in self._functions or t.name in self._mcp_tools:
                    raise InvalidArgumentError(f"two tools named {t.name!r} (MCP session)")
                self._check_search_clash(t.name, "an MCP session")
                self._mcp_tools[t.name] = session
                definitions.append(t.model_dump(mode="json", by_alias=True, exclude_none=True))
        for definitions, tags in listings:
            self._load(definitions, tags)
        self._mcp_listed = True

    # ---- running ----------------------------------------------------------------------------

    def run(self, task: str, *, seed: int = 0, conversation: Conversation | None = None) -> Run:
        """Run ``task`` to an answer (or ``max_steps``); learn from it if it failed.

        ``conversation``: the session to continue (``task`` is appended to it as the
        next user message); default: a new one, in ``Run.conversation``."""
        if self._sessions:
            raise InvalidArgumentError(
                "this agent has MCP session tools, which are async: use `await agent.arun(task)` "
                "inside the session's event loop"
            )
        loop = self._loop(task, seed, conversation)
        action: _Action = next(loop)
        while True:
            try:
                if action[0] == "chat":
                    _, messages, tools, limit = action  # type: ignore[misc]
                    action = loop.send(self._chat(messages, tools, limit, seed))
                elif action[0] == "compile":
                    action = loop.send(self._compile(action[1], action[2]))  # type: ignore[arg-type,misc]
                elif action[0] == "step":
                    _, fn, args = action  # type: ignore[misc]
                    action = loop.send(fn(*args))  # type: ignore[misc,operator]
                else:
                    action = loop.send(self._call_sync(action[1]))  # type: ignore[arg-type]
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    async def arun(
        self, task: str, *, seed: int = 0, conversation: Conversation | None = None
    ) -> Run:
        """:meth:`run` for async code: awaits MCP tools and coroutine functions, and
        runs the (blocking) model call in a worker thread."""
        await self._list_mcp()
        loop = self._loop(task, seed, conversation)
        action: _Action = next(loop)
        while True:
            try:
                if action[0] == "chat":
                    _, messages, tools, limit = action  # type: ignore[misc]
                    reply = await asyncio.to_thread(self._chat, messages, tools, limit, seed)
                    action = loop.send(reply)
                elif action[0] == "compile":
                    action = loop.send(await self._acompile(action[1], action[2]))  # type: ignore[arg-type,misc]
                elif action[0] == "step":
                    _, fn, args = action  # type: ignore[misc]
                    action = loop.send(await asyncio.to_thread(fn, *args))  # type: ignore[misc,arg-type]
                else:
                    action = loop.send(await self._call_async(action[1]))  # type: ignore[arg-type]
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def _chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], limit: int, seed: int
    ) -> Reply:
        return self.model.chat(
            messages,
            temperature=self.temperature,
            seed=seed,
            max_tokens=limit,
            tools=tools or None,
        )

    def _compile_args(self, task: str, conversation: Conversation) -> dict[str, Any]:
        args: dict[str, Any] = {"tools_in_prompt": False, "conversation": conversation}
        if self.top_k is not None:
            args.update(task_text=task, top_k=self.top_k)
        if self.context_window is not None:
            args.update(context_window=self.context_window, reply_tokens=self.reply_tokens)
            args["policy"] = self.policy
        return args

    def _compile(self, task: str, conversation: Conversation) -> CompileResult:
        return self.registry.compile(self.max_tokens, **self._compile_args(task, conversation))

    async def _acompile(self, task: str, conversation: Conversation) -> CompileResult:
        return await self.registry.acompile(
            self.max_tokens, **self._compile_args(task, conversation)
        )

    def _offered(self, result: CompileResult, found: Sequence[str] = ()) -> list[dict[str, Any]]:
        # Only tools this agent can run: a tool block with no implementation here
        # (loaded for another agent) would only invite a failing call.
        tools = []
        # The agent compiles with tools_in_prompt=False, so every included tool block
        # is a tools-only block of the selection. Their wire form is built once per
        # block: result.tools() would parse and re-validate every schema on every step
        # (~50 µs for a dozen tools), and result.report builds a row per block.
        for native in result._sel.tools_only_blocks():
            rid = native.runtime_id
            tool = self._wire.get(rid)
            if tool is None:
                schema = InstructionBlock(native).tool_schema
                tool = self._wire[rid] = schema.to_openai() if schema else {}
            name = tool.get("function", {}).get("name")
            if name in self._functions or name in self._mcp_tools:
                tools.append(tool)
        if found:  # what find_tools turned up: offered whatever the gate says now
            have = {t["function"]["name"] for t in tools}
            for name in found:
                wire = self._wire_by_name(name)
                if wire and name not in have:
                    tools.append(wire)
                    have.add(name)
        if self.memory_tools:
            tools.extend(_MEMORY_TOOLS)
        if self.tool_search and (self._functions or self._mcp_tools):
            tools.append(_TOOL_SEARCH_TOOL)
        return tools

    def _wire_by_name(self, name: str) -> dict[str, Any] | None:
        """The OpenAI tool dict of this agent's tool ``name`` (from its tool block)."""
        for b in self.registry.get_by_name(name):
            schema = b.tool_schema
            if schema is not None and schema.name == name:
                wire = self._wire.get(b.runtime_id)
                if wire is None:
                    wire = self._wire[b.runtime_id] = schema.to_openai()
                return wire
        return None

    def _loop(
        self, task: str, seed: int, conversation: Conversation | None = None
    ) -> Generator[_Action, Any, Run]:
        if not isinstance(task, str) or not task.strip():
            raise InvalidArgumentError("task must be a non-empty string")
        if conversation is not None and not isinstance(conversation, Conversation):
            raise InvalidArgumentError(
                f"conversation must be a rampart.Conversation, got {type(conversation).__name__}"
            )
        t_run = time.perf_counter()
        run = Run(task=task, trajectory_id=f"run-{uuid.uuid4().hex[:16]}")
        conv = run.conversation = Conversation() if conversation is None else conversation
        trajectory = run.trajectory_id
        # Appends are registry-like steps: a conversation in a shared store writes to it,
        # so arun makes them on a worker thread, never on the event loop.
        append = functools.partial(conv.append, trajectory_id=trajectory)
        yield ("step", append, ({"role": "user", "content": task},))
        reply: Reply | None = None
        for index in range(self.max_steps):
            t_step = time.perf_counter()
            # What the model has read before it makes this step's calls: results of
            # this step's own calls reach it only on the next step.
            tainted = run.tainted
            result = yield ("compile", task, conv)
            tools = self._offered(result, run.found_tools)
            messages: list[dict[str, Any]] = []
            if result.prompt:
                messages.append({"role": "system", "content": result.prompt})
            # The conversation as compiled: with a window, old tool results cleared,
            # compacted or dropped by the policy; without one, every message as it came.
            messages.extend(result.messages("openai_chat"))
            t_model = time.perf_counter()
            reply = yield ("chat", messages, tools, self.reply_tokens)
            model_s = time.perf_counter() - t_model
            self._count(run, reply)
            if reply.prompt_tokens is not None:
                yield ("step", conv.observe_usage, ({"prompt_tokens": reply.prompt_tokens},))
            step = Step(index, result, reply, [t["function"]["name"] for t in tools])
            step.model_s = model_s
            run.steps.append(step)
            if not reply.calls:
                step.latency_s = time.perf_counter() - t_step
                run.answer = reply.text
                if reply.text:  # the session goes on from the answer
                    yield ("step", append, (reply.assistant_message(),))
                break
            yield ("step", append, (reply.assistant_message(),))
            results: list[dict[str, Any]] = []
            offered = set(step.tools_offered)
            for n_call, call in enumerate(reply.calls):
                t_tool = time.perf_counter()
                if n_call >= self.max_calls_per_step:
                    # Every call still gets an answer: the chat API wants one per id.
                    output, is_error = (
                        f"error: not run: at most {self.max_calls_per_step} tool calls run "
                        "per step; call it again in the next step if it is still needed",
                        True,
                    )
                elif call.name not in offered:
                    output, is_error = (
                        f"error: no tool {call.name!r} is available in this step "
                        f"(offered: {', '.join(sorted(offered)) or 'none'})",
                        True,
                    )
                elif call.name in _MEMORY_NAMES:
                    output, is_error = yield ("step", self._memory, (call, run, tainted))
                elif call.name == TOOL_SEARCH and self.tool_search:
                    output, is_error = yield ("step", self._find_tools, (call, run))
                else:
                    output, is_error = yield ("tool", call)
                    # Its output (an error message too) may carry a stranger's text.
                    if call.name not in self.trusted_tools and call.name not in run.untrusted_reads:
                        run.untrusted_reads.append(call.name)
                output = _clip(output, self.max_tool_result_chars)
                step.results.append(
                    ToolResult(call, output, is_error, time.perf_counter() - t_tool)
                )
                results.append({"role": "tool", "tool_call_id": call.id, "content": output})
            yield ("step", append, (results,))
            step.latency_s = time.perf_counter() - t_step
        else:
            run.stop_reason = "max_steps"
            run.answer = reply.text if reply is not None else ""
        yield from self._assess(run)
        if run.success:
            called = [
                r.call.name
                for r in run.tool_results
                if not r.is_error
                and r.call.name not in _MEMORY_NAMES
                and r.call.name != TOOL_SEARCH
            ]
            # It may write tool examples (the store, the model): a registry step.
            yield ("step", self.after_success, (task, list(dict.fromkeys(called)), run))
        run.latency_s = time.perf_counter() - t_run
        return run

    def after_success(self, task: str, tools_called: Sequence[str], run: Run) -> None:
        """Called once after each successful run with its task and the tools it
        called without error (first-call order, no repeats, internal tools left out).

        With ``learn_tools`` (default: as ``learn``), ``task`` becomes an example
        request of each tool called that is a tool block of the registry
        (:meth:`BlockRegistry.add_tool_example`: an agent write of this run, so
        ``forget(run)`` takes it back, journaled on shared registries), and the
        gate finds that tool for similar requests from then on. A run that read
        untrusted tool output teaches nothing: a page the model read may have told
        it which tool to call (as with lessons). Override to change the rule."""
        if not self.learn_tools or run.untrusted_reads:
            return
        for name in tools_called:
            try:
                self.registry.add_tool_example(name, task, trajectory_id=run.trajectory_id)
            except (BlockNotFoundError, InvalidArgumentError):
                continue  # not a tool block of this registry (an MCP-only tool, say)

    @staticmethod
    def _count(run: Run, reply: Reply) -> None:
        run.prompt_tokens += reply.prompt_tokens or 0
        run.completion_tokens += reply.completion_tokens or 0

    # ---- tools ----------------------------------------------------------------------------

    def _arguments(self, call: ToolCall) -> dict[str, Any] | str:
        try:
            args = _http.loads_text(call.arguments) if call.arguments.strip() else {}
        except ValueError as exc:
            return (
                f"error: the arguments of {call.name!r} are not JSON ({exc}): {call.arguments:.200}"
            )
        if not isinstance(args, dict):
            return f"error: {call.name} arguments must be a JSON object: {call.arguments:.200}"
        return args

    @staticmethod
    def _text(value: Any) -> str:
        if isinstance(value, str):
            return value
        try:
            return json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            return repr(value)

    def _call_sync(self, call: ToolCall) -> tuple[str, bool]:
        args = self._arguments(call)
        if isinstance(args, str):
            return args, True
        fn = self._functions[call.name]
        try:
            value = fn(**args)
            if inspect.isawaitable(value):
                value = _run_awaitable(value)
        except Exception as exc:  # the model should see why its call failed
            return f"error: {type(exc).__name__}: {exc}", True
        return self._text(value), False

    async def _call_async(self, call: ToolCall) -> tuple[str, bool]:
        args = self._arguments(call)
        if isinstance(args, str):
            return args, True
        session = self._mcp_tools.get(call.name)
        try:
            if session is not None:
                return _mcp_output(await session.call_tool(call.name, args))
            value = self._functions[call.name](**args)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            return f"error: {type(exc).__name__}: {exc}", True
        return self._text(value), False

    def _memory(self, call: ToolCall, run: Run, tainted: bool) -> tuple[str, bool]:
        """``remember`` and ``forget``: plain registry writes and evictions, so the
        registry's own rules decide (a pinned or foreign block stays). After the model
        has read untrusted output, ``remember`` is quarantined like a diagnosis and
        ``forget`` refused: the page may be the one asking."""
        args = self._arguments(call)
        if isinstance(args, str):
            return args, True
        try:
            if call.name == "remember":
                rule = _clean_rule(str(args.get("rule", "")), self.max_rule_chars)
                if not rule:
                    return "error: remember needs a non-empty 'rule'", True
                raw = _clip(str(args.get("rule", "")), 2000)
                kept = self._learn(rule, run, "remember", raw, tainted)
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
            if tainted and self.quarantine is not None:
                return (
                    "error: forget is not available after reading untrusted tool output "
                    f"({', '.join(run.untrusted_reads)})",
                    True,
                )
            key = str(args.get("block", ""))
            target = key if key in self.registry else None
            if target is None:
                named = self.registry.get_by_name(key)
                if not named:
                    return f"error: no block named or with id {key!r}", True
                target = named[0].runtime_id
            gone = self.registry.evict(target)
            return f"forgot block {gone.semantic_name!r} ({gone.runtime_id})", False
        except RampartError as exc:
            return f"error: {type(exc).__name__}: {exc}", True

    def _find_tools(self, call: ToolCall, run: Run) -> tuple[str, bool]:
        """The gate's way back (:func:`rampart.tool_search.answer_tool_search` over
        the tools this agent can run); what it finds joins the tools offered from the
        next step on."""
        args = self._arguments(call)
        if isinstance(args, str):
            return args, True
        if not str(args.get("query", "")).strip():
            return f"error: {TOOL_SEARCH} needs a non-empty 'query'", True
        try:
            answer = answer_tool_search(
                self.registry, call, provider="openai", allowed=(*self._functions, *self._mcp_tools)
            )
        except RampartError as exc:
            return f"error: {type(exc).__name__}: {exc}", True
        for name in answered_tools(answer):
            if name not in run.found_tools:
                run.found_tools.append(name)
        return str(answer["content"]), False

    # ---- judging and learning --------------------------------------------------------------

    def _assess(self, run: Run) -> Generator[_Action, Any, None]:
        if self.check is not None:
            verdict = self.check(run.answer, run)
            if isinstance(verdict, tuple):
                run.success, run.feedback = bool(verdict[0]), str(verdict[1])
            else:
                run.success = bool(verdict)
        elif self.learn:
            prompt = f"Task:\n{run.task}\n\nAnswer:\n{_clip(run.answer, 4000)}"
            reply = yield (
                "chat",
                [{"role": "system", "content": _JUDGE_SYSTEM}, {"role": "user", "content": prompt}],
                [],
                64,
            )
            self._count(run, reply)
            head = reply.text.strip().upper()
            run.success = head.startswith("PASS")
            run.feedback = reply.text.strip()
        if self.learn and run.success is False:
            yield from self._diagnose(run)

    def _diagnose(self, run: Run) -> Generator[_Action, Any, None]:
        used = [r for s in run.steps for r in s.results]
        calls = "".join(
            f"\n- {r.call.name}({r.call.arguments:.200}) -> {r.output[:200]}" for r in used
        )
        prompt = (
            f"Task:\n{run.task}\n\nAnswer given:\n{_clip(run.answer, 2000)}\n\n"
            + (f"Tool calls:{calls}\n\n" if calls else "")
            + f"Why it failed:\n{run.feedback or 'it was judged a failure'}\n\n"
            f"Write the one rule, as a single imperative sentence under "
            f"{self.max_rule_chars} characters. Reply with the rule only."
        )
        reply = yield (
            "chat",
            [{"role": "system", "content": _DIAGNOSE_SYSTEM}, {"role": "user", "content": prompt}],
            [],
            max(16, self.max_rule_chars // 3),
        )
        self._count(run, reply)
        rule = _clean_rule(reply.text, self.max_rule_chars)
        if rule:
            kept = yield (
                "step",
                self._learn,
                (rule, run, "diagnosis", _clip(reply.text, 2000), run.tainted),
            )
            if isinstance(kept, Lesson):
                run.lesson = kept

    def lessons(self) -> list[InstructionBlock]:
        """The rules learned so far (blocks tagged ``lesson``), registry order."""
        return self.registry.find_by_tag(LESSON_TAG)

    # ---- similarity --------------------------------------------------------------------

    def _limit(self) -> float:
        if self.duplicate_threshold:
            return self.duplicate_threshold
        return DUPLICATE_COSINE if self.registry.embedding_model is not None else DUPLICATE_TEXT

    def _similar(self, rule: str) -> tuple[InstructionBlock, float] | None:
        """The learned rule most similar to ``rule`` when at or above the threshold:
        cosine of the registry's embeddings when it has a model, else difflib's ratio
        of the normalised texts."""
        existing = self.lessons()
        if not existing:
            return None
        model = self.registry.embedding_model
        best: tuple[InstructionBlock, float] | None = None
        if model is not None:
            import numpy as np

            self.registry.embed_pending()
            q = np.asarray(model.encode(rule), dtype=np.float32)
            qn = float(np.linalg.norm(q)) or 1.0
            for b in existing:
                v = self.registry.embedding(b.runtime_id)
                if v is None:
                    continue
                s = float(q @ v) / (qn * (float(np.linalg.norm(v)) or 1.0))
                if math.isfinite(s) and (best is None or s > best[1]):
                    best = (b, s)
        else:
            norm = _normalise(rule)
            for b in existing:
                s = difflib.SequenceMatcher(None, norm, _normalise(b.content)).ratio()
                if best is None or s > best[1]:
                    best = (b, s)
        return best if best is not None and best[1] >= self._limit() else None

    def _similarities(self, rule: str, others: Sequence[str]) -> list[float]:
        """``rule`` against texts outside the registry (quarantined rules), by the
        same measure as :meth:`_similar`."""
        model = self.registry.embedding_model
        if model is None:
            norm = _normalise(rule)
            return [difflib.SequenceMatcher(None, norm, _normalise(o)).ratio() for o in others]
        import numpy as np

        def vector(text: str) -> Any:
            v = self._vectors.get(text)
            if v is None:
                v = np.asarray(model.encode(text), dtype=np.float32)
                v = v / (float(np.linalg.norm(v)) or 1.0)
                if len(self._vectors) >= 1024:  # bounded: quarantined texts come and go
                    self._vectors.clear()
                self._vectors[text] = v
            return v

        q = vector(rule)
        scores = [float(q @ vector(o)) for o in others]
        return [s if math.isfinite(s) else 0.0 for s in scores]

    # ---- writing lessons -----------------------------------------------------------------

    def _learn(
        self, rule: str, run: Run, origin: str, raw: str, tainted: bool
    ) -> Lesson | QuarantinedLesson:
        """Keep ``rule``: quarantined when the model had read untrusted output (a
        near-duplicate of a pending entry adds a sighting to it), else compiled, and
        then every pending entry it near-duplicates is confirmed."""
        tags = ("memory",) if origin == "remember" else ()
        if tainted and self.quarantine is not None:
            pending = self.quarantine.entries("pending")
            scores = self._similarities(rule, [q.rule for q in pending]) if pending else []
            best = max(range(len(scores)), key=scores.__getitem__, default=None)
            if best is not None and scores[best] >= self._limit():
                entry = pending[best]
                if run.trajectory_id not in entry.sightings and entry.run_id != run.trajectory_id:
                    entry.sightings = [*entry.sightings, run.trajectory_id][-_MAX_SIGHTINGS:]
            else:
                entry = QuarantinedLesson(
                    id=f"q-{uuid.uuid4().hex[:12]}",
                    rule=rule,
                    run_id=run.trajectory_id,
                    task=_clip(run.task, 500),
                    origin=origin,
                    untrusted_tools=list(run.untrusted_reads),
                    diagnosis=raw,
                    created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                )
                self.quarantine.add(entry)
            run.quarantined.append(entry)
            return entry
        lesson = self._write_lesson(rule, run.trajectory_id, origin, tags=tags)
        if self.quarantine is not None:
            pending = self.quarantine.entries("pending")
            scores = self._similarities(rule, [q.rule for q in pending]) if pending else []
            for entry, score in zip(pending, scores):
                if score >= self._limit():
                    entry.status, entry.decided_by = "confirmed", run.trajectory_id
                    entry.block_id = lesson.block_id
                    run.confirmed.append(entry.id)
        return lesson

    @staticmethod
    def _provenance(origin: str, trajectory_id: str, note: str = "") -> tuple[str, str]:
        """The wrap that renders a rule as data: where it came from, then the rule in
        quotes (the rule cannot close them: :func:`_clean_rule`)."""
        day = time.strftime("%Y-%m-%d", time.gmtime())
        what = "Noted by the agent in run" if origin == "remember" else "Lesson learned from run"
        return f'{what} {trajectory_id} on {day}{note}: "', '"'

    def _write_lesson(
        self,
        rule: str,
        trajectory_id: str,
        origin: str = "diagnosis",
        *,
        tags: Sequence[str] = (),
        note: str = "",
        merge: bool = True,
    ) -> Lesson:
        rule = _renderable_rule(rule, self.max_rule_chars)
        if not rule:
            raise InvalidArgumentError("a lesson's rule is empty once rendered as one line")
        prefix, suffix = self._provenance(origin, trajectory_id, note)
        near = self._similar(rule) if merge else None
        if near is not None:
            block, score = near
            try:
                self.registry.update_block_content(block.runtime_id, rule)
                self.registry.set_wrap(block.runtime_id, prefix, suffix)
                old = (block.wrap_prefix, block.wrap_suffix)
                return Lesson(block.runtime_id, rule, True, block.content, score, old)
            except RampartError:
                pass  # not ours to change (a seed, another registry's): add a new one
        rid = self.registry.write_agent_block(
            rule,
            trajectory_id,
            semantic_name=f"lesson_{trajectory_id.removeprefix('run-')[:8]}",
            priority=self.lesson_priority,
            tags=[LESSON_TAG, *tags],
        )
        self.registry.set_wrap(rid, prefix, suffix)
        return Lesson(rid, rule, False)

    # ---- the operator's side of the quarantine --------------------------------------------

    def _quarantine(self) -> Quarantine:
        if self.quarantine is None:
            raise InvalidArgumentError("this agent has no quarantine (quarantine=False)")
        return self.quarantine

    def quarantined(self) -> list[QuarantinedLesson]:
        """The rules held back and not yet decided, oldest first, with provenance
        (``quarantine.entries()`` lists decided ones too)."""
        return self._quarantine().entries("pending")

    def approve(self, entry_id: str) -> Lesson:
        """Compile a quarantined rule, as a lesson of the run that wrote it (so
        ``forget`` of that run and ``rollback_trajectory`` take it back), rendered
        with "approved by an operator" in its provenance. Never merged into another
        lesson: the operator approved this text. What the quarantine holds is rendered
        as every rule is (one line, quotes neutralised, at most ``max_rule_chars``):
        a quarantine file may have been edited since the rule was written."""
        entry = self._quarantine().get(entry_id)
        if entry.status != "pending":
            raise InvalidArgumentError(
                f"quarantined lesson {entry_id} is already {entry.status}"
                + (f" (by {entry.decided_by})" if entry.decided_by else "")
            )
        if not _renderable_rule(entry.rule, self.max_rule_chars):
            raise InvalidArgumentError(
                f"quarantined lesson {entry_id} has no rule text once rendered as one line"
            )
        tags = ("memory", "approved") if entry.origin == "remember" else ("approved",)
        lesson = self._write_lesson(
            entry.rule,
            entry.run_id,
            entry.origin,
            tags=tags,
            note=", approved by an operator",
            merge=False,
        )
        entry.status, entry.decided_by, entry.block_id = "approved", "operator", lesson.block_id
        return lesson

    def reject(self, entry_id: str) -> QuarantinedLesson:
        """Mark a pending quarantined rule rejected (it stays listed, as a record)."""
        entry = self._quarantine().get(entry_id)
        if entry.status != "pending":
            raise InvalidArgumentError(f"quarantined lesson {entry_id} is already {entry.status}")
        entry.status, entry.decided_by = "rejected", "operator"
        return entry

    def forget(self, run: Run) -> int:
        """Take back what ``run`` taught: its blocks go (``rollback_trajectory``, an
        approved rule of it too), a rule it updated gets its previous text back, its
        quarantined rules go, and entries it confirmed are pending again. Returns how
        many blocks changed."""
        if not isinstance(run, Run):
            raise InvalidArgumentError(f"forget takes a Run, got {type(run).__name__}")
        n = self.registry.rollback_trajectory(run.trajectory_id)
        lesson = run.lesson
        if lesson is not None and lesson.updated and lesson.previous is not None:
            if lesson.block_id in self.registry:
                block = self.registry.get_by_id(lesson.block_id)
                if block.content == lesson.content:  # not changed again since
                    self.registry.update_block_content(lesson.block_id, lesson.previous)
                    if lesson.previous_wrap is not None:
                        self.registry.set_wrap(lesson.block_id, *lesson.previous_wrap)
                    n += 1
        if self.quarantine is not None:
            for entry in self.quarantine.entries():
                if entry.run_id == run.trajectory_id:
                    self.quarantine.discard(entry.id)
                elif entry.status == "confirmed" and entry.decided_by == run.trajectory_id:
                    entry.status, entry.decided_by, entry.block_id = "pending", None, None
        return n


def _server_tags(session: Any) -> list[str]:
    """``["server:NAME"]`` for an MCP session whose server said its name at
    initialisation (``session.server_info``), else ``[]``: the example gate weighs
    how close a request is to each server's tools (rampart.toolgate.SERVER_TAG).
    The name comes from a stranger: one line, at most 64 characters."""
    from rampart.toolgate import SERVER_TAG

    name = getattr(getattr(session, "server_info", None), "name", None)
    if not isinstance(name, str):
        return []
    name = "-".join(name.split())[:64]
    return [SERVER_TAG + name] if name else []


def _definition_name(d: Mapping[str, Any]) -> str:
    fn = d.get("function")
    return str(fn["name"] if isinstance(fn, Mapping) else d.get("name"))


def _run_awaitable(value: Any) -> Any:
    """A coroutine returned by a tool under the sync :meth:`Agent.run`."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(value)
    raise InvalidArgumentError(
        "an async tool was called from Agent.run inside a running event loop: "
        "use `await agent.arun(task)`"
    )
