"""Read-only views of blocks and of compile results."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import rampart._core as _core
from rampart.errors import UnsupportedFormatError
from rampart.tools import (
    METADATA_KEY,
    ToolSchema,
    check_format,
    schema_from_metadata,
    tool_gate_text,
)

if TYPE_CHECKING:
    from rampart.context_map import ContextMap

__all__ = ["BlockReport", "CompileResult", "DryRunResult", "InstructionBlock", "Snapshot"]


class InstructionBlock:
    """One instruction block as it was when fetched (``access_count`` is live).

    Blocks change by replacement (a new priority or wrap makes a new version under
    the same ``runtime_id``), so a view never changes under your feet; fetch it
    again with ``registry.get_by_id`` to see later changes.
    """

    __slots__ = ("_b",)

    def __init__(self, native: _core.Block) -> None:
        self._b = native

    @property
    def runtime_id(self) -> str:
        return self._b.runtime_id

    @property
    def semantic_name(self) -> str:
        return self._b.semantic_name

    @property
    def content(self) -> str:
        return self._b.content

    @property
    def priority(self) -> float:
        return self._b.priority

    @property
    def source(self) -> str:
        return self._b.source

    @property
    def author_id(self) -> str:
        return self._b.author_id

    @property
    def evictable(self) -> bool:
        return self._b.evictable

    @property
    def trajectory_id(self) -> str | None:
        return self._b.trajectory_id

    @property
    def gated(self) -> bool:
        """Whether the relevance gate may leave this block out (default True).
        ``False``: only the budget can; such a block belongs in the task-independent
        head that providers cache (docs/specification.md §8)."""
        return self._b.gated

    @property
    def created_at(self) -> int:
        return self._b.created_at

    @property
    def access_count(self) -> int:
        return self._b.access_count

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(self._b.tags)

    @property
    def token_count(self) -> int:
        return self._b.token_count

    @property
    def wrap_prefix(self) -> str:
        return self._b.wrap_prefix

    @property
    def wrap_suffix(self) -> str:
        return self._b.wrap_suffix

    @property
    def cost(self) -> int:
        """Tokens this block costs in a prompt: content plus wrap (separator excluded)."""
        return self._b.token_count + self._b.wrap_tokens

    @property
    def metadata(self) -> dict[str, Any]:
        """Front-matter keys other than name, priority and tags (e.g. ``description``)."""
        raw = self._b.metadata_json
        return {} if raw is None else dict(json.loads(raw))

    @property
    def description(self) -> str | None:
        d = self.metadata.get("description")
        return d if isinstance(d, str) else None

    @property
    def gate_text(self) -> str:
        """What a relevance gate should judge: for a tool block its name, description
        and parameters in words (:func:`rampart.tools.tool_gate_text`); otherwise the
        description (skills) and the content."""
        schema = _tool_schema(self._b)
        if schema is not None:
            return tool_gate_text(schema)
        d = self.description
        return f"{d}\n\n{self.content}" if d else self.content

    @property
    def embedded(self) -> bool:
        """Whether the registry holds a vector for this block's text (blocks
        written after cold start get one, batched, before the next gate)."""
        return self._b.embedded

    @property
    def embedding_truncated(self) -> bool:
        """Whether the embedded text was longer than the model's input and was
        cut (the gate judged only its beginning)."""
        return self._b.truncated

    @property
    def tool_schema(self) -> ToolSchema | None:
        """The tool this block describes (blocks from ``load_tools``), else None.

        A seed file may declare one too, with a ``tool_schema:`` front-matter
        mapping in :meth:`ToolSchema.to_dict` form; a malformed one raises
        UnsupportedFormatError naming the block."""
        return _tool_schema(self._b)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, InstructionBlock):
            return NotImplemented
        return self.runtime_id == other.runtime_id

    def __hash__(self) -> int:
        return hash(self.runtime_id)

    def __repr__(self) -> str:
        return (
            f"<InstructionBlock {self.semantic_name!r} {self.source} "
            f"priority={self.priority:g} tokens={self.token_count} id={self.runtime_id}>"
        )


def _tool_schema(b: _core.Block) -> ToolSchema | None:
    raw = b.metadata_json
    if raw is None or METADATA_KEY not in raw:  # no JSON parse for ordinary blocks
        return None
    try:
        return schema_from_metadata(json.loads(raw))
    except ValueError as exc:
        raise UnsupportedFormatError(
            f"block {b.semantic_name!r} ({b.runtime_id}) holds a malformed tool schema: {exc}"
        ) from None


@dataclass(frozen=True, slots=True)
class BlockReport:
    """Why one block is in or out of a compiled prompt."""

    index: int  # position in the registry when compiled
    name: str
    runtime_id: str
    included: bool
    cost: int  # tokens it cost (included) or would have cost (excluded), separator included
    # None when included in the prompt; "tools" when included only in the tools
    # list (tools_in_prompt=False); "gate" or "budget" when excluded.
    reason: str | None
    score: float | None  # relevance score when a gate ran
    detail: str
    gated: bool = True  # False: the gate never removes it (docs/specification.md §8)


def _reports(sel: _core.Selection, notes: Mapping[str, str] | None = None) -> list[BlockReport]:
    notes = notes or {}
    return [
        BlockReport(
            i,
            b.semantic_name,
            b.runtime_id,
            inc,
            cost,
            reason,
            score,
            _noted(detail, notes.get(b.runtime_id)),
            b.gated,
        )
        for (i, b, inc, cost, reason, score, detail) in sel.report()
    ]


def _noted(detail: str, note: str | None) -> str:
    """A report row's detail with the gate's note for its block (what matched)."""
    if note is None:
        return detail
    return f"{detail}; {note}" if detail else note


def _cache_notes(sel: _core.Selection) -> list[str]:
    notes = []
    boundary = sel.stable_boundary
    if boundary is not None:
        head = sel.view_block(boundary)
        for b in sel.interruptions():
            notes.append(
                f"ungated block {b.semantic_name!r} ({b.runtime_id}) follows gated block "
                f"{head.semantic_name!r} at position {boundary}: the stable prefix is "
                "interrupted there (move it before the first gated block to cache it)"
            )
    return notes


class CompileResult:
    """The compiled context and a report of what was left out and why.

    ``prompt`` and ``total_tokens`` are ready at once; ``included``, ``excluded``
    and ``report`` are built on first access from the registry order the compile
    saw, so a compile costs what it includes, not the size of the registry.
    """

    __slots__ = ("_context", "_names", "_notes", "_report", "_sel", "_sep", "prompt")
    # Set only by a compile with a conversation (rampart.conversation.plan.attach).
    _context: Any
    # Set only by a gate that explains its scores (rampart.gates: the example gate).
    _notes: Mapping[str, str]

    def __init__(self, prompt: str, sel: _core.Selection, separator: str = "") -> None:
        # Kept to four stores: this object is built on every compile.
        self.prompt = prompt
        self._sel = sel
        self._sep = separator
        self._names: tuple[list[str], list[str]] | None = None

    @property
    def stable_prefix_tokens(self) -> int:
        """Tokens of the prompt before the first block whose presence depends on
        the task (a gated block, when a gate ran); the whole prompt without a gate.
        What a provider's prompt cache can serve across tasks (docs/specification.md §8)."""
        return self._sel.stable_prefix_tokens

    @property
    def stable_prefix_blocks(self) -> int:
        """How many of the included blocks (from the front) form the stable prefix."""
        return self._sel.stable_prefix_blocks

    @property
    def stable_prefix_chars(self) -> int:
        """Length of that prefix in ``prompt`` (characters): ``prompt[:n]`` is the
        same for every task; the rest starts with the separator."""
        return self._sel.stable_prefix_chars(len(self._sep))

    @property
    def stable_prefix(self) -> str:
        """``prompt[:stable_prefix_chars]``."""
        return self.prompt[: self.stable_prefix_chars]

    @property
    def cache_notes(self) -> list[str]:
        """Where the stable prefix is interrupted: an ungated block placed after
        a gated one (it is sent every time, but after a part that changes, so no
        cache serves it). Empty when the layout is cache-friendly."""
        return _cache_notes(self._sel)

    @property
    def total_tokens(self) -> int:
        return self._sel.total_tokens

    @property
    def max_tokens(self) -> int | None:
        """The budget this compile ran under (None: unlimited)."""
        return self._sel.budget

    @property
    def included(self) -> list[str]:
        """Names of the emitted blocks, in compile order."""
        if self._names is None:
            self._names = (self._sel.included_names(), self._sel.excluded_names())
        return self._names[0]

    @property
    def excluded(self) -> list[str]:
        """Names of the blocks left out (gated out or over budget), registry order."""
        if self._names is None:
            self._names = (self._sel.included_names(), self._sel.excluded_names())
        return self._names[1]

    @property
    def included_ids(self) -> list[str]:
        return self._sel.included_ids()

    @property
    def included_blocks(self) -> list[InstructionBlock]:
        return [InstructionBlock(b) for b in self._sel.included_blocks()]

    @property
    def costs(self) -> list[int]:
        """Tokens each included block added (separator included), compile order."""
        return self._sel.included_costs()

    @property
    def gate_notes(self) -> Mapping[str, str]:
        """What the gate matched, by runtime id (the example gate: which example
        or description scored best); empty when the gate gave no notes. Each row
        of :attr:`report` carries its block's note in ``detail``."""
        try:
            return self._notes
        except AttributeError:
            return {}

    @property
    def report(self) -> list[BlockReport]:
        """One row per block the compile saw, in registry order."""
        try:
            return self._report
        except AttributeError:
            self._report: list[BlockReport] = _reports(self._sel, self.gate_notes)
            return self._report

    def tools(self, format: str = "openai") -> list[dict[str, Any]]:
        """The schemas of the included tool blocks, in compile order, in ``format``
        (``"openai"``, ``"openai-responses"``, ``"anthropic"`` or ``"mcp"``): ready
        for an API's ``tools`` parameter. A tool gated out, cut by the budget or
        evicted is absent. Two blocks for one tool name give it once (the first in
        compile order), since APIs refuse duplicate names."""
        check_format(format)
        out, seen = [], set()
        # With tools_in_prompt=False the tools come only from tools_only_blocks().
        for b in [*self._sel.included_blocks(), *self._sel.tools_only_blocks()]:
            schema = _tool_schema(b)
            if schema is not None and schema.name not in seen:
                seen.add(schema.name)
                out.append(schema.to_format(format))
        return out

    def registry_tools(self, format: str = "openai") -> list[dict[str, Any]]:
        """Every tool block of the registry this compile saw, in registry order,
        gated or not, in ``format``: a ``tools`` array that does not change with
        the task (the adapters' ``tools="all"``; duplicates by name given once)."""
        check_format(format)
        out, seen = [], set()
        for b in self._sel.tool_blocks():
            schema = _tool_schema(b)
            if schema is not None and schema.name not in seen:
                seen.add(schema.name)
                out.append(schema.to_format(format))
        return out

    # ---- the conversation part (docs/specification.md §9; compile(..., conversation=conv)) -------

    @property
    def context(self) -> Any:
        """The compile step's outcome when a conversation was compiled (a
        :class:`rampart.conversation.ContextResult`: budget, scale, rewrites),
        else None."""
        try:
            return self._context
        except AttributeError:
            return None

    @property
    def conversation(self) -> Any:
        """The :class:`rampart.Conversation` compiled with this result, or None."""
        ctx = self.context
        return None if ctx is None else ctx.conversation

    def messages(self, format: str = "openai_chat") -> list[dict[str, Any]]:
        """The conversation's messages as compiled (transformations applied), in
        ``format``: ``"openai_chat"``, ``"openai_responses"``, ``"anthropic"`` or
        ``"gemini"``; empty when no conversation was compiled."""
        ctx = self.context
        return [] if ctx is None else ctx.messages(format)

    @property
    def message_report(self) -> list[Any]:
        """One :class:`rampart.conversation.MessageReport` per conversation item:
        ``.id``, ``.action`` (kept / cleared / compacted / dropped), ``.reason``,
        ``.tokens``; empty when no conversation was compiled."""
        ctx = self.context
        return [] if ctx is None else ctx.message_report

    def context_map(self, prices: Any = None) -> ContextMap:
        """What this compile sends, drawn: the window's composition, the cached
        prefix and a call's cost under ``prices`` (a price table or its name;
        default: the policy's), every block and message with its action and reason.
        ``print(result.context_map())`` draws it as text; ``.to_dict()``, ``.html()``
        (a :class:`rampart.context_map.ContextMap`)."""
        from rampart.context_map import build  # rendering: loaded on first use

        return build(self, prices)

    def __len__(self) -> int:
        return self._sel.included_count()

    def __str__(self) -> str:
        return self.prompt

    def __repr__(self) -> str:
        return (
            f"<CompileResult {self._sel.included_count()}/{self._sel.registry_size} blocks, "
            f"{self.total_tokens} tokens>"
        )


class DryRunResult:
    """The selection a compile would make, with no prompt built and nothing changed."""

    __slots__ = ("_sel", "gate_notes")

    def __init__(self, sel: _core.Selection, gate_notes: Mapping[str, str] | None = None) -> None:
        self._sel = sel
        #: What the gate matched, by runtime id (as ``CompileResult.gate_notes``).
        self.gate_notes: Mapping[str, str] = gate_notes or {}

    @property
    def max_tokens(self) -> int | None:
        return self._sel.budget

    @property
    def included(self) -> list[tuple[str, int]]:
        """``(name, cost)`` pairs in compile order (cost includes the separator)."""
        return list(zip(self._sel.included_names(), self._sel.included_costs()))

    @property
    def excluded(self) -> list[str]:
        return self._sel.excluded_names()

    @property
    def total_tokens(self) -> int:
        return self._sel.total_tokens

    @property
    def report(self) -> list[BlockReport]:
        return _reports(self._sel, self.gate_notes)

    def __repr__(self) -> str:
        return (
            f"<DryRunResult {self._sel.included_count()}/{self._sel.registry_size} blocks, "
            f"{self.total_tokens} tokens>"
        )


class Snapshot:
    """An immutable picture of a registry (blocks, order, metadata); cheap to take."""

    __slots__ = ("_snap", "label")

    def __init__(self, native: _core.Snapshot, label: str) -> None:
        self._snap = native
        self.label = label

    @property
    def taken_at(self) -> int:
        return self._snap.taken_at

    @property
    def registry_id(self) -> str:
        return self._snap.registry_id

    def blocks(self) -> list[InstructionBlock]:
        """The blocks as they were when the snapshot was taken, in registry order."""
        return [InstructionBlock(b) for b in self._snap.blocks()]

    def __len__(self) -> int:
        return len(self._snap)

    def __repr__(self) -> str:
        return f"<Snapshot of {self.label!r}: {len(self)} blocks at {self.taken_at}>"
