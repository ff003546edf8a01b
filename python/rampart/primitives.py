"""The registry's write operations, each declared once (``rampart._ops``): the
paper's primitives that act on blocks before compilation at zero prompt-token
cost (write, promote and group promote, evict, rollback, restore) and the
writes that load blocks (seeds, tool schemas).

A declaration is the method's argument checks and its core call; the core
applies the write (a local registry) or returns the encoded journal entry (a
shared one), and the sync method and its ``a``-twin, generated from the one
declaration with its exact signature, drive what follows. ``BlockRegistry``
mixes this class in (as redis-py mixes in its command classes): the methods
are the registry's, written here so that the façade stays readable.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import rampart._args as _args
import rampart._core as _core
from rampart._core import Block, PendingEntry, Registry
from rampart._ops import aio, body_of, operation
from rampart.block import InstructionBlock, Snapshot
from rampart.errors import InvalidArgumentError
from rampart.persistence import SOURCES
from rampart.seeds import SeedBlock, SeedRegistry
from rampart.tools import (
    ToolsInput,
    block_metadata_json,
    parse_tools,
    render_tool,
    schema_from_metadata,
    tool_name_clash,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from rampart.gates.policy import GatePolicy
    from rampart.tokens import Tokeniser

__all__ = ["Primitives"]

_int = _args.int_arg
_clamped = _args.clamped
_number = _args.number
_priority = _args.priority
_flag = _args.flag
_tags = _args.tags
_text = _args.text
_vector = _args.vector
_FAR = _args.FAR


def _registry_core(obj: Any, what: str) -> _core.Registry:
    """The native registry of ``obj``, a registry object: the capability that
    ``author=`` and ``by=`` pass (an id string could be forged, an object not)."""
    core = getattr(obj, "_core", None)
    if not isinstance(core, _core.Registry):
        raise InvalidArgumentError(
            f"{what} must be a BlockRegistry object (an id string is not a capability), "
            f"got {type(obj).__name__}"
        )
    return core


# ---- after-steps: the method's return value from the core's outcome, run by the
# sync and the async driver alike -------------------------------------------------------


def _first(reg: Primitives, ids: list[str]) -> str:
    return ids[0]


def _nothing(reg: Primitives, outcome: object) -> None:
    return None


def _evicted(reg: Primitives, block: _core.Block) -> InstructionBlock:
    return InstructionBlock(block)


def _tools_loaded(reg: Any, ids: list[str]) -> list[str]:
    # Run by both drivers, so a sync, a shared and an async load agree (the
    # hand-written aload_tools once skipped the adapter's re-arm).
    reg._gate.tools_loaded(reg, ids)
    return ids


class Primitives:
    """The write operations of :class:`~rampart.registry.BlockRegistry` (mixed in)."""

    __slots__ = ()

    # Provided by BlockRegistry.
    _core: Registry
    _tok: Tokeniser
    _gate: GatePolicy
    _policy: Callable[[InstructionBlock], float] | None

    if TYPE_CHECKING:

        @property
        def label(self) -> str: ...
        def _count(self, text: str) -> int | None: ...
        def list_blocks(self) -> list[InstructionBlock]:
            """Every block, in registry order (BlockRegistry's)."""
            ...

    @operation(after=_first)
    def add_from_seed(self, seed_registry: SeedRegistry, name: str) -> list[str] | PendingEntry:
        """Append one seed block (no file I/O); returns its new runtime id."""
        return self._insert_seeds([seed_registry.get(name)])

    def _counts(self, texts: list[str]) -> list[int | None]:
        """Token counts for a batch of new blocks; None lets the core count with
        the built-in cl100k_base (GIL released)."""
        if self._tok.builtin:
            return [None] * len(texts)
        return list(self._tok.count_many(texts))

    def _seed_rows(self, blocks: Sequence[SeedBlock]) -> tuple[list[Any], list[bool] | None]:
        counts = self._counts([b.content for b in blocks])
        rows = [
            (b.name, b.content, b.priority, list(b.tags), b.metadata_json(), n)
            for b, n in zip(blocks, counts)
        ]
        tools = ["tool_schema" in b.metadata for b in blocks]
        return rows, tools if any(tools) else None

    def _insert_seeds(self, blocks: Sequence[SeedBlock]) -> list[str] | PendingEntry:
        declared = []
        for b in blocks:
            try:
                schema = schema_from_metadata(b.metadata)
            except ValueError:  # malformed: reported when the block's schema is read
                continue
            if schema is not None:
                declared.append((schema, f"{b.path or '<seed>'}:{b.line}: seed block {b.name!r}"))
        clash = tool_name_clash(declared, self.list_blocks()) if declared else None
        if clash:
            raise InvalidArgumentError(clash)
        rows, tools = self._seed_rows(blocks)
        ungated = [not b.gated for b in blocks]
        return self._insert_many(rows, "seed", False, tools, ungated if any(ungated) else None)

    def _insert_many(
        self,
        rows: list[Any],
        source: str,
        evictable: bool,
        tools: list[bool] | None,
        ungated: list[bool] | None = None,
    ) -> list[str] | PendingEntry:
        return self._core.insert_many(rows, source, evictable, tools, ungated)

    # ---- write ------------------------------------------------------------------------

    @operation()
    def write_block(
        self,
        content: str,
        semantic_name: str,
        source: str = "agent",
        priority: float = 0.5,
        trajectory_id: str | None = None,
        tags: Iterable[str] | None = None,
        *,
        position: int | None = None,
        evictable: bool = True,
        author: Primitives | None = None,
        embedding: Sequence[float] | None = None,
        gated: bool = True,
    ) -> str | PendingEntry:
        """Insert a block; returns its runtime id.

        Appended at the back, except orchestrator blocks, which go to the front;
        ``position`` (clamped) overrides both. ``author`` is the writing registry
        *object* when one registry writes into another: it alone may later
        force-evict the block or change its content. ``embedding`` supplies the
        block's vector for the relevance gate instead of running the model.
        ``gated=False``: the relevance gate never removes the block (only the budget
        may): for task-independent text that belongs in the cached head (docs/specification.md §8).
        """
        # Coordination writes are hot (one per message between agents): the common
        # argument types are checked inline, anything else by the full checks.
        if type(content) is not str:
            _text(content, "content")
        if type(semantic_name) is not str:
            _text(semantic_name, "semantic_name")
        if source not in SOURCES:
            raise InvalidArgumentError(f"source must be one of {SOURCES}, got {source!r}")
        author_core = None if author is None else _registry_core(author, "author")
        if position is not None and not (type(position) is int and -_FAR <= position <= _FAR):
            position = _clamped(position, "position")
        if trajectory_id is not None and type(trajectory_id) is not str:
            _text(trajectory_id, "trajectory_id")
        if not (type(priority) is float and 0.0 <= priority <= 1.0):
            priority = _priority(priority)
        if gated is not True:
            gated = _flag(gated, "gated")
        try:
            return self._core.insert(
                semantic_name,
                content,
                priority,
                source,
                evictable is True or bool(evictable),
                trajectory_id,
                None if tags is None else _tags(tags),
                None,
                None if self._tok.builtin else self._tok.count(content),
                position,
                source == "orchestrator",
                author_core,
                None if embedding is None else _vector(embedding, "embedding"),
                gated,
            )
        except UnicodeEncodeError as e:  # free on the hot path; rare enough to look here
            raise _args.not_text(
                e,
                content=content,
                semantic_name=semantic_name,
                trajectory_id=trajectory_id,
                tags=tags,
            ) from None

    _write_block = body_of(write_block)

    @operation()
    def write_agent_block(
        self,
        content: str,
        trajectory_id: str,
        semantic_name: str | None = None,
        priority: float = 0.5,
        tags: Iterable[str] | None = None,
        *,
        position: int | None = None,
        evictable: bool = True,
        author: Primitives | None = None,
        embedding: Sequence[float] | None = None,
        gated: bool = True,
    ) -> str | PendingEntry:
        """Write an ``agent`` block for run ``trajectory_id`` (required); the
        keyword arguments as :meth:`write_block`'s."""
        if not isinstance(trajectory_id, str) or not trajectory_id:
            raise InvalidArgumentError("an agent block needs a non-empty trajectory_id")
        out: str | PendingEntry = self._write_block(
            content,
            semantic_name or f"agent_note_{trajectory_id}",
            "agent",
            priority,
            trajectory_id,
            tags,
            position=position,
            evictable=evictable,
            author=author,
            embedding=embedding,
            gated=gated,
        )
        return out

    @operation()
    def update_block_content(
        self, runtime_id: str, content: str, *, by: Primitives | None = None
    ) -> PendingEntry | None:
        """Replace an agent block's content (seed: SeedMutationError, orchestrator:
        OrchestratorMutationError; another registry's block: BlockPermissionError
        unless ``by`` is its author)."""
        _text(content, "content")
        # The new text gets a new vector before the gate next scores it.
        return self._core.update_content(runtime_id, content, self._count(content), self._actor(by))

    @operation()
    def update_priority(self, runtime_id: str, priority: float) -> PendingEntry | None:
        """Change a block's priority (any block; it feeds eviction, never order)."""
        return self._core.update_priority(runtime_id, _priority(priority))

    @operation()
    def set_gated(self, runtime_id: str, flag: bool) -> PendingEntry | None:
        """Let the relevance gate leave the block out (``True``, the default) or
        not (``False``: only the budget may). Allowed on any block, like priority."""
        gated = _flag(flag, "flag")
        return self._core.set_gated(runtime_id, gated)

    @operation()
    def set_wrap(self, runtime_id: str, prefix: str = "", suffix: str = "") -> PendingEntry | None:
        """Decorate a block at compile time (e.g. ``<critical>`` … ``</critical>``).
        The wrap's tokens count against the budget; empty strings remove it."""
        _text(prefix, "prefix")
        _text(suffix, "suffix")
        tokens = None if self._tok.builtin else self._tok.count(prefix) + self._tok.count(suffix)
        return self._core.set_wrap(runtime_id, prefix, suffix, tokens)

    # ---- promote ----------------------------------------------------------------------

    @operation()
    def promote(
        self,
        runtime_id: str,
        *,
        steps: int | None = None,
        to_position: int | None = None,
        before: str | None = None,
        after: str | None = None,
        to_front: bool = False,
        to_back: bool = False,
    ) -> int | PendingEntry:
        """Move a block by exactly one directive; positions clamp. Returns the new index."""
        given = [
            name
            for name, v in (
                ("steps", steps),
                ("to_position", to_position),
                ("before", before),
                ("after", after),
            )
            if v is not None
        ] + [name for name, v in (("to_front", to_front), ("to_back", to_back)) if v]
        if len(given) != 1:
            raise InvalidArgumentError(
                "promote takes exactly one of steps, to_position, before, after, to_front, "
                f"to_back; got {', '.join(given) or 'none'}"
            )
        if steps is not None:
            return self._core.move_by(runtime_id, _clamped(steps, "steps"))
        if to_position is not None:
            return self._core.move_to(runtime_id, _clamped(to_position, "to_position"))
        if before is not None:
            return self._core.move_next_to(runtime_id, before, False)
        if after is not None:
            return self._core.move_next_to(runtime_id, after, True)
        return self._core.move_to(runtime_id, 0 if to_front else _FAR)

    @operation()
    def demote(self, runtime_id: str, steps: int = 1) -> int | PendingEntry:
        """Move a block ``steps`` toward the back (clamped). Returns the new index."""
        return self._core.move_by(runtime_id, -_clamped(steps, "steps"))

    @operation()
    def promote_to_front(self, runtime_id: str) -> int | PendingEntry:
        """``promote(runtime_id, to_front=True)``: move the block to index 0; returns 0."""
        return self._core.move_to(runtime_id, 0)

    @operation()
    def demote_to_back(self, runtime_id: str) -> int | PendingEntry:
        """``demote(runtime_id, to_back=True)``: move the block to the last index;
        returns that index."""
        return self._core.move_to(runtime_id, _FAR)

    @operation(after=_nothing)
    def reorder(self, id_list: Sequence[str]) -> int | PendingEntry:
        """The listed blocks move to the front in that order; the rest keep their order."""
        return self._core.promote_group(list(id_list), 0)

    @operation()
    def promote_group(self, id_list: Sequence[str], *, to_position: int = 0) -> int | PendingEntry:
        """Move the listed blocks as one contiguous unit, in the given order, to
        ``to_position`` (the paper's group promote). Returns the unit's first index."""
        return self._core.promote_group(list(id_list), _clamped(to_position, "to_position"))

    # ---- evict / rollback ----------------------------------------------------------------

    def _actor(self, by: Primitives | None) -> Registry | None:
        return None if by is None else _registry_core(by, "by")

    @operation(after=_evicted)
    def evict(
        self, runtime_id: str, *, force: bool = False, by: Primitives | None = None
    ) -> Block | PendingEntry:
        """Remove a block; returns it.

        An evictable block goes for anyone. A non-evictable one needs ``force=True``
        (else EvictionError naming its author) *and* the acting registry (``by``,
        default this one) must be its author (else BlockPermissionError)."""
        return self._core.evict(runtime_id, bool(force), self._actor(by))

    @operation()
    def evict_by_policy(
        self, n: int | None = None, *, threshold: float | None = None
    ) -> list[str] | PendingEntry:
        """Score every evictable block with the eviction policy (default
        ``0.5*(1-priority) + 0.5/(access_count+1)``; higher goes first) and remove
        them: all of them, the ``n`` highest, or those scoring >= ``threshold``.
        Returns the removed ids, highest score first. Nothing is evicted automatically."""
        if n is not None:
            n = _int(n, "n", minimum=0)
        if threshold is not None:
            threshold = _number(threshold, "threshold")
        if self._policy is None:
            # The default policy, scored by the core (a shared registry journals
            # the scores: they rest on this process's access counts).
            return self._core.evict_scored(None, None, n, threshold)
        # A custom policy: score here, then the core ranks, cuts and removes under
        # one lock (skipping blocks another thread removed meanwhile).
        policy = self._policy
        blocks = [InstructionBlock(b) for b in self._core.view().blocks() if b.evictable]
        scores = []
        for b in blocks:
            raw = policy(b)
            try:
                scores.append(_number(raw, "score", finite=False))  # numpy scalars; NaN refused
            except InvalidArgumentError:
                raise InvalidArgumentError(
                    f"eviction policy returned {raw!r:.60} for block {b!r}; expected a number"
                ) from None
        return self._core.evict_scored([b.runtime_id for b in blocks], scores, n, threshold)

    @operation()
    def rollback_trajectory(
        self, trajectory_id: str, *, by: Primitives | None = None
    ) -> int | PendingEntry:
        """Remove the agent blocks of run ``trajectory_id`` written by this registry
        (or by ``by``): an author retracting its own writes, so ``evictable`` does
        not protect them. Seed and orchestrator blocks are never touched. Returns
        how many blocks went."""
        _text(trajectory_id, "trajectory_id")
        return self._core.rollback_trajectory(trajectory_id, self._actor(by))

    @operation()
    def restore(self, snapshot: Snapshot) -> PendingEntry | None:
        """Put the registry back exactly as the snapshot saw it (blocks, order,
        metadata, access counts), each block under a **new** runtime id; authors are
        kept, so ownership survives."""
        if not isinstance(snapshot, Snapshot):
            raise InvalidArgumentError(f"restore takes a Snapshot, got {type(snapshot).__name__}")
        return self._core.restore(snapshot._snap)

    # ---- tool schemas -------------------------------------------------------------------

    @operation(after=_tools_loaded)
    def load_tools(
        self,
        tools: ToolsInput,
        *,
        priority: float = 0.5,
        tags: Iterable[str] | None = None,
        evictable: bool = True,
        gated: bool = True,
    ) -> list[str] | PendingEntry:
        """Append one block per tool definition; returns their runtime ids, in order.

        ``tools``: a list of OpenAI, Anthropic or MCP definitions (detected per
        entry), an MCP ``tools/list`` result, or a path to a JSON file holding one
        (see :func:`rampart.parse_tools`). Each block is a ``seed`` block named after
        the tool, tagged ``tool`` (plus ``tags``), whose content is
        :func:`rampart.render_tool`'s description and whose metadata keeps the
        schema (``block.tool_schema``). Tool blocks are evictable by default, so
        ``evict(id)`` and ``evict_by_policy`` can drop a tool the task does not
        need; ``evictable=False`` pins them (then only this registry, with
        ``force=True``, removes them). All or nothing: every definition is
        validated, and a name already loaded here refused, before any block is
        written. ``gated=False``: the relevance gate never drops these tools, so a
        ``tools`` array built from them stays byte-stable across tasks (docs/specification.md §8).
        """
        p = _priority(priority)
        ungated = not _flag(gated, "gated")
        extra = [t for t in _tags(tags) if t != "tool"]
        schemas = parse_tools(tools)
        # Every block, not just those tagged "tool": a seed file may declare a tool too.
        loaded = {t.name: b for b in self.list_blocks() if (t := b.tool_schema)}
        clash = [s.name for s in schemas if s.name in loaded]
        if clash:
            b = loaded[clash[0]]
            raise InvalidArgumentError(
                f"registry {self.label!r} already holds tool {clash[0]!r} (block {b.runtime_id}); "
                "evict it first to load a new version"
            )
        texts = [render_tool(s) for s in schemas]
        counts = self._counts(texts)
        rows: list[tuple[str, str, float, list[str], str | None, int | None]] = [
            (s.name, text, p, ["tool", *extra], block_metadata_json(s), n)
            for s, text, n in zip(schemas, texts, counts)
        ]
        return self._insert_many(
            rows,
            "seed",
            bool(evictable),
            [True] * len(rows),
            [ungated] * len(rows) if ungated else None,
        )

    # Every write operation's coroutine twin, from its one declaration (rampart._ops).
    aadd_from_seed = aio(add_from_seed)
    awrite_block = aio(write_block)
    awrite_agent_block = aio(write_agent_block)
    aupdate_block_content = aio(update_block_content)
    aupdate_priority = aio(update_priority)
    aset_gated = aio(set_gated)
    aset_wrap = aio(set_wrap)
    apromote = aio(promote)
    ademote = aio(demote)
    apromote_to_front = aio(promote_to_front)
    ademote_to_back = aio(demote_to_back)
    areorder = aio(reorder)
    apromote_group = aio(promote_group)
    aevict = aio(evict)
    aevict_by_policy = aio(evict_by_policy)
    arollback_trajectory = aio(rollback_trajectory)
    arestore = aio(restore)
    aload_tools = aio(load_tools)
