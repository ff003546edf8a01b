"""BlockRegistry: the ordered, in-RAM registry an agent compiles its context from."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import rampart._args as _args
import rampart._core as _core
import rampart.gates as gates
import rampart.persistence as persistence
import rampart.telemetry as _telemetry
from rampart._embedding import EmbeddingModel, default_model, encode_texts, resolve_model
from rampart._files import atomic_write
from rampart._labels import claim_label, label_of, release_label
from rampart._labels import get_by_label as _get_by_label
from rampart._ops import (
    adrive,
    aio,
    body_of,
    drive,
    offloaded,
    operation,
)
from rampart._view import DEFAULT_SEPARATOR, GateFn
from rampart.block import CompileResult, DryRunResult, InstructionBlock, Snapshot
from rampart.errors import InvalidArgumentError, RampartError
from rampart.seeds import (
    BlockSource,
    PathLike,
    SeedBlock,
    SeedRegistry,
    load_sources,
)
from rampart.tokens import Tokeniser, resolve_tokeniser

if TYPE_CHECKING:
    from rampart._replica import Replica
    from rampart.caching import CacheSession
    from rampart.conversation.core import Conversation
    from rampart.conversation.policy import ContextPolicy
from rampart.tools import (
    ToolsInput,
    block_metadata_json,
    parse_tools,
    render_tool,
    schema_from_metadata,
    tool_name_clash,
)

__all__ = ["DEFAULT_SEPARATOR", "BlockRegistry", "EmbeddingModel", "GateFn", "get_by_label"]

# Without OpenTelemetry a compile pays one membership test of this dict (rampart.telemetry).
_MODULES = sys.modules
_TRACE = _telemetry.TRACE_MODULE  # a compile looks it up in sys.modules: one dict probe

SOURCES = persistence.SOURCES

EvictionPolicy = Callable[[InstructionBlock], float]


# ---- argument checks (rampart._args) ----------------------------------------------------

_int = _args.int_arg
_clamped = _args.clamped
_number = _args.number
_check_budget = _args.check_budget
_priority = _args.priority
_flag = _args.flag
_tags = _args.tags
_text = _args.text
_vector = _args.vector
_FAR = _args.FAR
_MAX_INT = _args.MAX_INT


# ---- after-steps of write operations (rampart._ops): the method's return value
# from the core's outcome, run by the sync and the async driver alike ------------------


def _first(reg: BlockRegistry, ids: list[str]) -> str:
    return ids[0]


def _nothing(reg: BlockRegistry, outcome: object) -> None:
    return None


def _evicted(reg: BlockRegistry, block: _core.Block) -> InstructionBlock:
    return InstructionBlock(block)


def _prepare_async(reg: BlockRegistry) -> None:
    # e.g. the async store client's import: on aopen's executor thread rather
    # than on the loop at the first write.
    prepare = getattr(reg._replica.store if reg._replica else None, "aprepare", None)
    if prepare is not None:
        prepare()


def _tools_loaded(reg: BlockRegistry, ids: list[str]) -> list[str]:
    # Run by both drivers, so a sync, a shared and an async load agree (the
    # hand-written aload_tools once skipped the adapter's re-arm).
    import rampart.toolgate as toolgate

    if toolgate.has_examples(reg, ids):
        reg._examples_arrived()
    if reg._tool_adapter is False:
        reg._tool_adapter = None  # tools arrived: look for the adapter again
    return ids


class BlockRegistry:
    """An ordered map ``runtime_id -> InstructionBlock`` compiled into a prompt.

    Order is explicit and is the only thing that decides where a block lands in the
    compiled prompt (index 0 = front). Every method is safe to call from many
    threads at once.

    Example:
        >>> reg = rampart.BlockRegistry.from_files(["seeds/"], "default")
        >>> rid = reg.write_agent_block("In release notes, list breaking changes first.", "run-42")
        >>> reg.promote(rid, to_front=True)  # returns the new index
        0
        >>> result = reg.compile(task_text="write the release notes", top_k=8, max_tokens=1024)
        >>> result.included[0]
        'agent_note_run-42'
    """

    __slots__ = (
        "__weakref__",
        "_core",
        "_embed_lock",
        "_embedder",
        "_policy",
        "_queries",
        "_replica",
        "_sep_cache",
        "_tok",
        "_tool_adapter",
        "_tool_examples",
        "_toolgate",
        "default_max_tokens",
    )

    def __init__(
        self,
        embedding_model: EmbeddingModel | str | None = None,
        tokeniser: Any = None,
        eviction_policy: EvictionPolicy | None = None,
        *,
        label: str | None = None,
        default_max_tokens: int | None = 16384,
        quantise_embeddings: bool = False,
        _registry_id: str | None = None,
    ) -> None:
        if default_max_tokens is not None:
            default_max_tokens = _int(default_max_tokens, "default_max_tokens", minimum=0)
        if eviction_policy is not None and not callable(eviction_policy):
            raise InvalidArgumentError("eviction_policy must be a callable(block) -> float")
        tok = resolve_tokeniser(tokeniser)
        self._tok: Tokeniser = tok
        self._embedder: EmbeddingModel | None = resolve_model(embedding_model)
        self._policy = eviction_policy
        self.default_max_tokens = default_max_tokens
        self._sep_cache: dict[str, int] = {}
        # One thread embeds pending blocks at a time; the others then find none.
        self._embed_lock = threading.Lock()
        self._queries: dict[tuple[int, str], bytes] = {}
        self._core = _core.Registry(claim_label(label, self), _registry_id)
        # Set by BlockRegistry.open (SPEC §7): the core then journals every write
        # through this replica; None for a local registry.
        self._replica: Replica | None = None
        if quantise_embeddings:
            self._core.set_quantised(True)
        # Tool examples (rampart.toolgate): None = not looked for yet.
        self._tool_examples: bool | None = None
        self._toolgate: Any = None
        # The cold tool gate's query adapter (rampart.toolgate.query_adapter):
        # None = not looked for yet, False = none, "off" = turned off, or one.
        self._tool_adapter: Any = None

    @classmethod
    def _with_id(
        cls,
        embedding_model: Any,
        tokeniser: Any,
        registry_id: str,
        label: str | None,
        kwargs: dict[str, Any],
    ) -> BlockRegistry:
        """A new empty registry under a given registry id (a shared registry's
        replica: every process's replica is the same registry, SPEC §7)."""
        return cls(embedding_model, tokeniser, label=label, _registry_id=registry_id, **kwargs)

    def _embed_written(self) -> None:
        """Embed what was written, when a model is attached (a replica's
        follower calls this after writes, off the write path)."""
        if self._embedder is not None:
            self.embed_pending()

    def _blocks_arrived(self, runtime_ids: list[str]) -> None:
        """A shared replica applied journal entries that wrote these blocks (any
        replica's, under the replica's lock). A registry that found no tool examples
        looks at just these: one another replica wrote (an author's tool, a run's
        learned example) switches it to the example gate, as its own write would."""
        if self._tool_examples is not False:
            return
        import rampart.toolgate as toolgate

        if toolgate.has_examples(self, runtime_ids):
            toolgate.note_examples(self)

    # ---- construction from seeds -------------------------------------------------

    @classmethod
    def from_files(
        cls,
        paths: Iterable[PathLike | BlockSource] | PathLike | BlockSource,
        embedding_model: EmbeddingModel | str | None = None,
        tokeniser: Any = None,
        *,
        label: str | None = None,
        **kwargs: Any,
    ) -> BlockRegistry:
        """Cold start from seed files: file order, then section order. Every block is
        a ``seed`` block, authored by this registry, not evictable. All or nothing:
        any bad file raises before a registry exists."""
        blocks = load_sources(paths)  # type: ignore[arg-type]
        reg = cls(embedding_model, tokeniser, label=label, **kwargs)
        try:
            reg._insert_seeds(blocks)
            if reg._embedder is not None:
                reg.embed_pending()  # all seed blocks in one batch
        except BaseException:
            reg._drop()  # the core or the model failed: the label is free again
            del reg
            raise
        return reg

    @classmethod
    def from_seed(
        cls,
        seed_registry: SeedRegistry,
        names: Iterable[str],
        must_match: bool = True,
        embedding_model: EmbeddingModel | str | None = None,
        tokeniser: Any = None,
        *,
        label: str | None = None,
        **kwargs: Any,
    ) -> BlockRegistry:
        """A working registry holding the named seed blocks, in the order of ``names``."""
        picked, missing = [], []
        for name in names:
            if name in seed_registry:
                picked.append(seed_registry.get(name))
            elif must_match:
                missing.append(name)
        if missing:
            from rampart.errors import BlockNotFoundError

            raise BlockNotFoundError(f"seed registry has no blocks {', '.join(map(repr, missing))}")
        reg = cls(embedding_model, tokeniser, label=label, **kwargs)
        try:
            reg._insert_seeds(picked)
            if reg._embedder is not None:
                reg.embed_pending()
        except BaseException:
            reg._drop()
            del reg
            raise
        return reg

    @operation(after=_first)
    def add_from_seed(
        self, seed_registry: SeedRegistry, name: str
    ) -> list[str] | _core.PendingEntry:
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

    def _insert_seeds(self, blocks: Sequence[SeedBlock]) -> list[str] | _core.PendingEntry:
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
    ) -> list[str] | _core.PendingEntry:
        return self._core.insert_many(rows, source, evictable, tools, ungated)

    # ---- identity --------------------------------------------------------------------

    @property
    def label(self) -> str:
        return self._core.label

    @property
    def registry_id(self) -> str:
        return self._core.registry_id

    @property
    def tokeniser(self) -> Tokeniser:
        return self._tok

    @property
    def embedding_model(self) -> EmbeddingModel | None:
        return self._embedder

    @embedding_model.setter
    def embedding_model(self, model: EmbeddingModel | str | None) -> None:
        """Attach (or swap) the model that embeds blocks for the default gate.
        Stored vectors stay; use a model of the same dimension, or evict first."""
        self._embedder = resolve_model(model)
        self._queries.clear()

    def release(self) -> None:
        """Free this registry's label for another registry (the registry stays usable)."""
        release_label(self.label, self)

    def _drop(self) -> None:
        """Undo a construction that failed half-way (a load, a cold start): free the
        label, so that a retry under the same label works."""
        self.release()

    # ---- shared registries (SPEC §7) -----------------------------------------------------

    @classmethod
    def open(
        cls,
        store: Any,
        name: str,
        embedding_model: EmbeddingModel | str | None = None,
        tokeniser: Any = None,
        *,
        label: str | None = None,
        seeds: Iterable[PathLike | BlockSource] | None = None,
        create: bool = True,
        **kwargs: Any,
    ) -> BlockRegistry:
        """Open (or create) the shared registry ``name`` in ``store``.

        ``store``: ``"sqlite:///abs/path.db"`` / ``"sqlite:rel/path.db"`` (processes
        on one host), ``"redis://host:port/db"`` (also ``rediss://``, ``unix://``;
        many hosts), or a store object from :mod:`rampart.stores`. Every process
        that opens the same (store, name) holds a replica of one registry: its
        mutations are appended to the store's journal and applied in journal
        order everywhere; compile stays local and never waits on the store.
        ``seeds`` (paths, as for :meth:`from_files`) are loaded only by the
        opener that creates the registry. ``create=False`` only joins: a
        registry (or SQLite file) that does not exist is
        :class:`~rampart.errors.InvalidArgumentError`, and nothing is created.
        Example::

            reg = rampart.BlockRegistry.open("sqlite:///tmp/agents.db", "planner",
                                             seeds=["seeds/"])
            reg.write_agent_block("Run the linter first.", "run-7")  # durable, shared
            reg.sync()                       # see every write appended before this
            reg.close()
        """
        from rampart._replica import open_shared

        reg: BlockRegistry = open_shared(
            cls, store, name, embedding_model, tokeniser, label, seeds, kwargs, create
        )
        return reg

    @property
    def shared(self) -> bool:
        """Whether this registry is a replica of a shared registry (``open``)."""
        return self._replica is not None

    @property
    def name(self) -> str | None:
        """The shared registry's name in its store (None for a local registry)."""
        return None if self._replica is None else self._replica.name

    @property
    def store_url(self) -> str | None:
        """The store's URL (None for a local registry)."""
        return None if self._replica is None else self._replica.store.url

    @property
    def position(self) -> int | None:
        """How far into the journal this replica has applied (None: local)."""
        return None if self._replica is None else self._replica.position

    def sync(self, timeout: float = 10.0) -> None:
        """Publish this replica's access counts and vectors, then apply every
        entry appended before the call. A local registry has nothing to do."""
        if self._replica is not None:
            self._replica.sync(timeout)

    def checkpoint(self) -> int:
        """Write a checkpoint of this shared replica's state to the store now
        (new replicas start from the latest one; ``compact`` drops what it
        covers); returns the journal position it covers. Local registries have
        no journal: InvalidArgumentError (use :meth:`save`)."""
        if self._replica is None:
            raise InvalidArgumentError(
                f"registry {self.label!r} is not shared: it has no journal to checkpoint "
                "(save() writes a local registry to a file)"
            )
        return self._replica.checkpoint()

    def compact(self) -> tuple[int, int]:
        """Checkpoint this shared replica (as :meth:`checkpoint`) and drop the
        journal entries the store's checkpoint covers (``rampart store
        compact``); returns the position checkpointed and how many entries were
        dropped. Replicas that still need them reload the checkpoint."""
        if self._replica is None:
            raise InvalidArgumentError(
                f"registry {self.label!r} is not shared: it has no journal to compact"
            )
        return self._replica.compact()

    def close(self) -> None:
        """Flush and stop following the store; the registry stays readable (and
        compiles) but refuses mutations. A local registry has nothing to close."""
        if self._replica is not None:
            self._replica.close()

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under this registry's tokeniser."""
        return self._tok.count(text)

    def _count(self, text: str) -> int | None:
        # None lets the core count with the built-in cl100k_base, without a round trip.
        return None if self._tok.builtin else self._tok.count(text)

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
        author: BlockRegistry | None = None,
        embedding: Sequence[float] | None = None,
        gated: bool = True,
    ) -> str | _core.PendingEntry:
        """Insert a block; returns its runtime id.

        Appended at the back, except orchestrator blocks, which go to the front;
        ``position`` (clamped) overrides both. ``author`` is the writing registry
        *object* when one registry writes into another: it alone may later
        force-evict the block or change its content. ``embedding`` supplies the
        block's vector for the relevance gate instead of running the model.
        ``gated=False``: the relevance gate never removes the block (only the budget
        may): for task-independent text that belongs in the cached head (SPEC §8).
        """
        # Coordination writes are hot (one per message between agents): the common
        # argument types are checked inline, anything else by the full checks.
        if type(content) is not str:
            _text(content, "content")
        if type(semantic_name) is not str:
            _text(semantic_name, "semantic_name")
        if source not in SOURCES:
            raise InvalidArgumentError(f"source must be one of {SOURCES}, got {source!r}")
        if author is not None and not isinstance(author, BlockRegistry):
            raise InvalidArgumentError(
                "author must be a BlockRegistry object (an id string is not a capability), "
                f"got {type(author).__name__}"
            )
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
                None if author is None else author._core,
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
        author: BlockRegistry | None = None,
        embedding: Sequence[float] | None = None,
        gated: bool = True,
    ) -> str | _core.PendingEntry:
        """Write an ``agent`` block for run ``trajectory_id`` (required); the
        keyword arguments as :meth:`write_block`'s."""
        if not isinstance(trajectory_id, str) or not trajectory_id:
            raise InvalidArgumentError("an agent block needs a non-empty trajectory_id")
        out: str | _core.PendingEntry = self._write_block(
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
        self, runtime_id: str, content: str, *, by: BlockRegistry | None = None
    ) -> _core.PendingEntry | None:
        """Replace an agent block's content (seed: SeedMutationError, orchestrator:
        OrchestratorMutationError; another registry's block: BlockPermissionError
        unless ``by`` is its author)."""
        _text(content, "content")
        # The new text gets a new vector before the gate next scores it.
        return self._core.update_content(runtime_id, content, self._count(content), self._actor(by))

    @operation()
    def update_priority(self, runtime_id: str, priority: float) -> _core.PendingEntry | None:
        """Change a block's priority (any block; it feeds eviction, never order)."""
        return self._core.update_priority(runtime_id, _priority(priority))

    @operation()
    def set_gated(self, runtime_id: str, flag: bool) -> _core.PendingEntry | None:
        """Let the relevance gate leave the block out (``True``, the default) or
        not (``False``: only the budget may). Allowed on any block, like priority."""
        gated = _flag(flag, "flag")
        return self._core.set_gated(runtime_id, gated)

    @operation()
    def set_wrap(
        self, runtime_id: str, prefix: str = "", suffix: str = ""
    ) -> _core.PendingEntry | None:
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
    ) -> int | _core.PendingEntry:
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
    def demote(self, runtime_id: str, steps: int = 1) -> int | _core.PendingEntry:
        """Move a block ``steps`` toward the back (clamped). Returns the new index."""
        return self._core.move_by(runtime_id, -_clamped(steps, "steps"))

    @operation()
    def promote_to_front(self, runtime_id: str) -> int | _core.PendingEntry:
        """``promote(runtime_id, to_front=True)``: move the block to index 0; returns 0."""
        return self._core.move_to(runtime_id, 0)

    @operation()
    def demote_to_back(self, runtime_id: str) -> int | _core.PendingEntry:
        """``demote(runtime_id, to_back=True)``: move the block to the last index;
        returns that index."""
        return self._core.move_to(runtime_id, _FAR)

    @operation(after=_nothing)
    def reorder(self, id_list: Sequence[str]) -> int | _core.PendingEntry:
        """The listed blocks move to the front in that order; the rest keep their order."""
        return self._core.promote_group(list(id_list), 0)

    @operation()
    def promote_group(
        self, id_list: Sequence[str], *, to_position: int = 0
    ) -> int | _core.PendingEntry:
        """Move the listed blocks as one contiguous unit, in the given order, to
        ``to_position`` (the paper's group promote). Returns the unit's first index."""
        return self._core.promote_group(list(id_list), _clamped(to_position, "to_position"))

    def index_of(self, runtime_id: str) -> int:
        """The block's position (0 = front of the prompt); :class:`BlockNotFoundError`
        if no block has that id."""
        try:
            return self._core.index_of(runtime_id)
        except UnicodeEncodeError as exc:
            raise _args.not_text(exc, runtime_id=runtime_id) from None

    # ---- evict / rollback ----------------------------------------------------------------

    def _actor(self, by: BlockRegistry | None) -> _core.Registry | None:
        if by is None:
            return None
        if not isinstance(by, BlockRegistry):
            raise InvalidArgumentError(
                "by must be a BlockRegistry object (an id string is not a capability), "
                f"got {type(by).__name__}"
            )
        return by._core

    @operation(after=_evicted)
    def evict(
        self, runtime_id: str, *, force: bool = False, by: BlockRegistry | None = None
    ) -> _core.Block | _core.PendingEntry:
        """Remove a block; returns it.

        An evictable block goes for anyone. A non-evictable one needs ``force=True``
        (else EvictionError naming its author) *and* the acting registry (``by``,
        default this one) must be its author (else BlockPermissionError)."""
        return self._core.evict(runtime_id, bool(force), self._actor(by))

    @operation()
    def evict_by_policy(
        self, n: int | None = None, *, threshold: float | None = None
    ) -> list[str] | _core.PendingEntry:
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
        self, trajectory_id: str, *, by: BlockRegistry | None = None
    ) -> int | _core.PendingEntry:
        """Remove the agent blocks of run ``trajectory_id`` written by this registry
        (or by ``by``): an author retracting its own writes, so ``evictable`` does
        not protect them. Seed and orchestrator blocks are never touched. Returns
        how many blocks went."""
        _text(trajectory_id, "trajectory_id")
        return self._core.rollback_trajectory(trajectory_id, self._actor(by))

    def snapshot(self) -> Snapshot:
        """An immutable picture of blocks, order, metadata and access counts.

        Cheap: blocks are shared, not copied; only the access counts are read
        (1.2 µs at 200 blocks, 1.5 ms at 100 000)."""
        return Snapshot(self._core.snapshot(), self.label)

    @operation()
    def restore(self, snapshot: Snapshot) -> _core.PendingEntry | None:
        """Put the registry back exactly as the snapshot saw it (blocks, order,
        metadata, access counts), each block under a **new** runtime id; authors are
        kept, so ownership survives."""
        if not isinstance(snapshot, Snapshot):
            raise InvalidArgumentError(f"restore takes a Snapshot, got {type(snapshot).__name__}")
        return self._core.restore(snapshot._snap)

    # ---- embeddings and the gate -----------------------------------------------------

    def _model(self) -> EmbeddingModel:
        model = self._embedder
        if model is None:
            raise RampartError(
                f"registry {self.label!r} has no embedding model: pass embedding_model= "
                '(e.g. "default" or rampart.default_embedder()) to the registry, vectors with '
                "write_block(embedding=...), or a gate= callable to compile"
            )
        return model

    def embed_pending(self) -> int:
        """Embed every block that has no vector yet (seeds at cold start, agent
        writes, changed content) in one batch; returns how many were embedded.
        Gating calls this itself, so a written block is never missed; call it
        yourself to move the cost out of the next compile."""
        if not self._core.unembedded():  # one comparison while nothing changed
            return 0
        with self._embed_lock:
            pending = self._core.unembedded()
            if not pending:
                return 0
            model = self._model()
            texts = [InstructionBlock(b).gate_text for b in pending]
            matrix, dim, truncated = encode_texts(model, texts)
            n = int(self._core.attach_embeddings(pending, matrix, dim, truncated))
            if self._replica is not None:
                # Publish the vectors: other replicas need not run the model.
                self._replica.publish_vectors(pending, matrix, dim, truncated)
            return n

    def _query(self, task_text: str | None, task_embedding: Any) -> bytes:
        """The task's vector (the model's, or ``task_embedding``), cached per model."""
        out: bytes = drive(self, gates.query_steps(self, task_text, task_embedding))
        return out

    def _adapt(self, task_text: str | None, task_embedding: Any, q: bytes) -> bytes:
        if task_embedding is not None or self._tool_adapter is False or task_text is None:
            return q  # a caller's own vector may come from any model: never mapped
        import rampart.toolgate as toolgate

        adapter = toolgate.query_adapter(self)
        if adapter is None:
            return q
        # Kept beside the plain vector (the example gate reads that one), keyed by
        # the adapter object: a repeated task pays a dict lookup, not the matvec.
        key = (id(adapter), task_text)
        mapped = self._queries.get(key)
        if mapped is None:
            mapped = adapter.map(q)
            if len(self._queries) >= gates.QUERY_CACHE:
                self._queries.clear()
            self._queries[key] = mapped
        return mapped

    def embedding(self, runtime_id: str) -> Any:
        """The stored vector of a block (``numpy.ndarray``, float32), or None
        before it is embedded."""
        raw = self._core.embedding(self._core.get(runtime_id))
        if raw is None:
            return None
        import numpy as np

        return np.frombuffer(raw, dtype=np.float32).copy()

    def embedding_info(self) -> dict[str, Any]:
        """Dimension, blocks with vectors, bytes held and whether the int8 copy is on."""
        dim, rows, nbytes, quantised = self._core.embedding_stats()
        return {"dim": dim, "embedded": rows, "bytes": nbytes, "quantised": quantised}

    def quantise_embeddings(self, on: bool = True) -> None:
        """Keep an int8 copy of the embedding matrix: gating scans a quarter of the
        memory and re-scores the candidates exactly, so results do not change."""
        self._core.set_quantised(bool(on))

    def find_relevant(
        self,
        task_text: str | None,
        top_k: int | None = None,
        threshold: float | None = None,
        *,
        task_embedding: Any = None,
    ) -> list[tuple[InstructionBlock, float]]:
        """Blocks by cosine similarity to the task, descending; ties in registry order."""
        out: list[tuple[InstructionBlock, float]] = drive(
            self, gates.ranking_steps(self, task_text, top_k, threshold, task_embedding)
        )
        return out

    async def afind_relevant(
        self,
        task_text: str | None,
        top_k: int | None = None,
        threshold: float | None = None,
        *,
        task_embedding: Any = None,
    ) -> list[tuple[InstructionBlock, float]]:
        """:meth:`find_relevant` for coroutines (the model and pending blocks off the loop)."""
        out: list[tuple[InstructionBlock, float]] = await adrive(
            self, gates.ranking_steps(self, task_text, top_k, threshold, task_embedding)
        )
        return out

    def score_block(
        self, runtime_id: str, task_text: str | None = None, *, task_embedding: Any = None
    ) -> float:
        """Cosine score of one block against the task (what the default gate uses)."""
        out: float = drive(self, gates.score_steps(self, runtime_id, task_text, task_embedding))
        return out

    async def ascore_block(
        self, runtime_id: str, task_text: str | None = None, *, task_embedding: Any = None
    ) -> float:
        """:meth:`score_block` for coroutines."""
        out: float = await adrive(
            self, gates.score_steps(self, runtime_id, task_text, task_embedding)
        )
        return out

    # ---- tool examples: the gate-score hook (rampart.toolgate) ------------------------
    # A registry whose tool blocks carry example requests gates a task with
    # rampart.toolgate.ExampleGate (best match among a tool's description and its
    # examples, in numpy) instead of the core's one-vector cosine. Registries without
    # examples pay one attribute read per gated compile (docs/tool-gate.md).

    def _examples_arrived(self) -> None:
        import rampart.toolgate as toolgate

        toolgate.note_examples(self)

    def add_tool_example(
        self, tool: str, request: str, *, trajectory_id: str | None = None
    ) -> str | None:
        """Teach the gate that ``request`` is served by ``tool`` (a tool name or a
        tool block's runtime id): an agent block of run ``trajectory_id`` that
        ``rollback_trajectory`` takes back. Returns its runtime id, or None when
        nothing was written (already an example; the tool's learned examples are
        full). See :func:`rampart.toolgate.add_tool_example`."""
        import rampart.toolgate as toolgate

        return toolgate.add_tool_example(self, tool, request, trajectory_id=trajectory_id)

    def enrich_tools(self, model: Any, *, n: int = 5, seed: int = 0) -> dict[str, list[str]]:
        """Generate ``n`` example requests per tool block with ``model`` (any
        ``rampart.llm`` backend), cached on disk by schema, and gate with them. See
        :func:`rampart.toolgate.enrich_tools`."""
        import rampart.toolgate as toolgate

        return toolgate.enrich_tools(self, model, n=n, seed=seed)

    # ---- compile --------------------------------------------------------------------------

    def compile(
        self,
        max_tokens: int | None = None,
        task_text: str | None = None,
        relevance_threshold: float | None = None,
        top_k: int | None = None,
        separator: str | None = None,
        # Positional-or-keyword, though meant as keywords: CPython fills a
        # keyword-only default from a dict on every call, and these four cost the
        # hot path ~50 ns (7 %) that way (benches/ab_house.py).
        conversation: Conversation | None = None,
        context_window: int | None = None,
        reply_tokens: int | None = None,
        policy: ContextPolicy | None = None,
        *,
        task_embedding: Any = None,
        gate: GateFn | None = None,
        tools_in_prompt: bool = True,
    ) -> CompileResult:
        """Compile the context: (1) gate, when a task and ``relevance_threshold`` or
        ``top_k`` are given; (2) walk the registry in order; (3) cut at the token
        budget, stopping at the first block that does not fit; (4) count an access
        for each emitted block. Never reorders the registry.

        ``gate``: a callable ``(task_text, blocks) -> scores`` replacing the
        built-in cosine gate. ``tools_in_prompt=False``: tool-schema blocks go
        only to ``result.tools()``, not into the prompt text or its budget.

        ``conversation`` (a :class:`rampart.Conversation`), ``context_window``,
        ``reply_tokens``, ``policy`` (a :class:`rampart.ContextPolicy`): compile the
        messages too, so instructions + tools + messages fit ``context_window -
        reply_tokens`` (SPEC §9, docs/conversation.md); ``result.messages(format)``
        and ``result.message_report`` then hold them.

        Example:
            >>> result = reg.compile(max_tokens=2048)  # no gate: order and budget only
            >>> result = reg.compile(task_text="fix the failing test", top_k=8, max_tokens=2048)
            >>> [(r.name, r.reason) for r in result.report if not r.included][:2]
            [('read_before_edit', 'gate'), ('never_force_push', 'gate')]
        """
        if _TRACE in _MODULES and _telemetry.tracing() is not None:
            return _telemetry.traced_compile(self, locals())  # OpenTelemetry is set up
        if relevance_threshold is None and top_k is None and tools_in_prompt is True:
            # The hot path, kept flat: agents call this before every model call.
            budget = self.default_max_tokens if max_tokens is None else max_tokens
            if budget is not None and (type(budget) is not int or not 0 <= budget <= _MAX_INT):
                budget = _check_budget(budget)
            sep = DEFAULT_SEPARATOR if separator is None else separator
            n = self._sep_cache.get(sep)
            if n is None:
                n = gates.sep_tokens(self, sep)
            prompt, sel = self._core.compile(budget, sep, n)
            if conversation is None and context_window is None and policy is None:
                return CompileResult(prompt or "", sel, sep)
            return _conversation_step(
                CompileResult(prompt or "", sel, sep),
                conversation,
                context_window,
                reply_tokens,
                policy,
            )
        prompt, sel = drive(
            self,
            gates.select_steps(
                self,
                max_tokens,
                task_text,
                relevance_threshold,
                top_k,
                separator,
                task_embedding,
                gate,
                False,
                tools_in_prompt,
            ),
        )
        res = CompileResult(
            prompt or "", sel, DEFAULT_SEPARATOR if separator is None else separator
        )
        if conversation is None and context_window is None and policy is None:
            return res
        return _conversation_step(res, conversation, context_window, reply_tokens, policy)

    def compile_dry_run(
        self,
        max_tokens: int | None = None,
        task_text: str | None = None,
        relevance_threshold: float | None = None,
        top_k: int | None = None,
        separator: str | None = None,
        *,
        task_embedding: Any = None,
        gate: GateFn | None = None,
        tools_in_prompt: bool = True,
    ) -> DryRunResult:
        """Stages 1–3 only: the same selection, no prompt built, no state changed."""
        _, sel = drive(
            self,
            gates.select_steps(
                self,
                max_tokens,
                task_text,
                relevance_threshold,
                top_k,
                separator,
                task_embedding,
                gate,
                True,
                tools_in_prompt,
            ),
        )
        return DryRunResult(sel)

    def session(self, **options: Any) -> CacheSession:
        """A :class:`~rampart.caching.CacheSession` over this registry: compiles for
        one conversation that keep its prompt cache warm when the task changes
        (``options``: ``max_tokens``, ``top_k``, ``relevance_threshold``,
        ``separator``, ``gate``, ``tools_in_prompt``, ``prices``, ``calls_per_task``,
        ``clock``; see docs/caching.md).

        Example:
            >>> s = reg.session(top_k=8, max_tokens=16384, prices="anthropic", calls_per_task=5)
            >>> r = s.compile("fix the failing test")
            >>> body = anthropic_messages(r, messages, cache=True, tools="all")
        """
        from rampart.caching import CacheSession

        return CacheSession(self, **options)

    # ---- observability ----------------------------------------------------------------------

    def get_by_id(self, runtime_id: str) -> InstructionBlock:
        """The block with this runtime id; :class:`BlockNotFoundError` if none."""
        try:
            return InstructionBlock(self._core.get(runtime_id))
        except UnicodeEncodeError as exc:
            raise _args.not_text(exc, runtime_id=runtime_id) from None

    def get_by_name(self, semantic_name: str) -> list[InstructionBlock]:
        """All blocks with this name, registry order (names may repeat)."""
        return [InstructionBlock(b) for b in self._core.find_by_name(_text(semantic_name, "name"))]

    def find_by_tag(self, tag: str) -> list[InstructionBlock]:
        """Blocks carrying ``tag``, registry order.

        Example:
            >>> [b.semantic_name for b in reg.find_by_tag("git")][:2]
            ['never_force_push', 'check_worktree_first']
        """
        return [InstructionBlock(b) for b in self._core.find_by_tags([_text(tag, "tag")], False)]

    def find_by_tags(self, tags: Iterable[str], match_all: bool = False) -> list[InstructionBlock]:
        """Blocks carrying any of ``tags`` (all of them with ``match_all``), registry
        order."""
        found = self._core.find_by_tags([_text(t, "tag") for t in _tags(tags)], match_all)
        return [InstructionBlock(b) for b in found]

    def list_blocks(self) -> list[InstructionBlock]:
        """Every block, in registry order (index 0 first)."""
        return [InstructionBlock(b) for b in self._core.blocks()]

    def runtime_ids(self) -> list[str]:
        """The runtime ids of every block, in registry order."""
        return self._core.runtime_ids()

    def registry_summary(self) -> dict[str, Any]:
        """A JSON-ready overview: label, registry id, block and token counts, blocks
        by source, evictable blocks, trajectories, tokeniser and default budget."""
        blocks = self._core.blocks()
        by_source = dict.fromkeys(SOURCES, 0)
        for b in blocks:
            by_source[b.source] += 1
        return {
            "label": self.label,
            "registry_id": self.registry_id,
            "blocks": len(blocks),
            "tokens": sum(b.token_count + b.wrap_tokens for b in blocks),
            "by_source": by_source,
            "evictable": sum(1 for b in blocks if b.evictable),
            "trajectories": sorted({b.trajectory_id for b in blocks if b.trajectory_id}),
            "tokeniser": self._tok.name,
            "default_max_tokens": self.default_max_tokens,
        }

    def provenance_report(self, trajectory_id: str | None = None) -> list[dict[str, Any]]:
        """Who wrote what: one row per agent or orchestrator block (optionally one run)."""
        rows = []
        for i, b in enumerate(self._core.blocks()):
            if b.source == "seed":
                continue
            if trajectory_id is not None and b.trajectory_id != trajectory_id:
                continue
            rows.append(
                {
                    "index": i,
                    "name": b.semantic_name,
                    "runtime_id": b.runtime_id,
                    "source": b.source,
                    "author_id": b.author_id,
                    "author_label": label_of(b.author_id),
                    "trajectory_id": b.trajectory_id,
                    "created_at": b.created_at,
                    "evictable": b.evictable,
                }
            )
        return rows

    def __copy__(self) -> BlockRegistry:
        # A copy would share the native registry (and bypass label uniqueness);
        # say what to use instead.
        raise TypeError(
            "BlockRegistry cannot be copied: use snapshot()/restore() for a point to "
            "return to, or BlockRegistry.from_seed() for a second registry"
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> BlockRegistry:
        return self.__copy__()

    def __len__(self) -> int:
        return len(self._core)

    def __contains__(self, runtime_id: object) -> bool:
        return isinstance(runtime_id, str) and self._core.contains(runtime_id)

    def __iter__(self) -> Iterator[InstructionBlock]:
        return iter(self.list_blocks())

    def __repr__(self) -> str:
        return f"<BlockRegistry {self.label!r} {len(self)} blocks>"

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
    ) -> list[str] | _core.PendingEntry:
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
        ``tools`` array built from them stays byte-stable across tasks (SPEC §8).
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

    # ---- persistence --------------------------------------------------------------------

    def _settings(self) -> str:
        return json.dumps(
            {
                "tokeniser": self._tok.name,
                "default_max_tokens": self.default_max_tokens,
                "embedding_model": getattr(self._embedder, "model_id", None),
            }
        )

    def save(self, path: PathLike) -> None:
        """Write the whole registry (blocks, order, provenance, access counts,
        embeddings) to one versioned file, atomically: a temporary file in the
        same folder, fsync, rename. A crash mid-save leaves the previous file whole."""
        data = self._core.save_bytes(self._settings())
        atomic_write(Path(os.fspath(path)), data)

    @classmethod
    def load(
        cls,
        path: PathLike,
        embedding_model: EmbeddingModel | str | None = None,
        tokeniser: Any = None,
        *,
        label: str | None = None,
        **kwargs: Any,
    ) -> BlockRegistry:
        """A registry from a file ``save`` wrote, every block under a **new**
        runtime id. Vectors come back with it (no re-embedding). Blocks the saved
        registry wrote belong to the new one; other authors keep their identity
        (so nothing here can force-evict their pinned blocks). A truncated,
        damaged or newer file raises ``RegistryFileError`` and creates nothing."""
        data, where = persistence.read_file(path)
        return cls._from_bytes(data, where, embedding_model, tokeniser, label, kwargs)

    @classmethod
    def _from_bytes(
        cls,
        data: bytes,
        where: str,
        embedding_model: Any,
        tokeniser: Any,
        label: str | None,
        kwargs: dict[str, Any],
    ) -> BlockRegistry:
        reg: BlockRegistry = persistence.from_bytes(
            cls, data, where, embedding_model, tokeniser, label, kwargs
        )
        return reg

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickling goes through the same state as save(); the copy gets a fresh
        # label (the original may still hold its own). The tokeniser travels with
        # it; of embedding models only the shared default one does (vectors
        # always do).
        model = (
            "default" if self._embedder is not None and self._embedder is default_model() else None
        )
        return (
            _unpickle,
            (self._core.save_bytes(self._settings()), self._tok, model, self.default_max_tokens),
        )

    def export_markdown(
        self, path: PathLike, *, source: str | None = "agent", overwrite: bool = True
    ) -> int:
        """Write the chosen blocks (``source``: "agent", "orchestrator", "seed", or
        None for all) as a seed file that loads back through the ordinary parser
        with the same names, contents, priorities and tags, byte for byte;
        provenance (source, trajectory, created, author) goes into front matter.
        A name or content the Markdown form would change (outer blank space,
        ``\r``, a "---" line read as front matter) is written verbatim under the
        front-matter key ``exact``. Returns the number of blocks written; when no
        block has that ``source`` the (empty) file is written with a
        ``RuntimeWarning``.

        Example:
            >>> rid = reg.write_agent_block("Run `make lint` before committing.", "run-42")
            >>> reg.export_markdown("learned.md")  # next session: from_files([..., "learned.md"])
            1
        """
        return persistence.export_markdown(self, path, source, overwrite)

    # =====================================================================================
    # ---- asyncio twins (issue 18) ----------------------------------------------------------
    # Each ``a``-method means what its sync twin means (same arguments, result and
    # typed errors) and never blocks the event loop. What never waits (reads,
    # compile without a new task, writes to a local registry) just calls the twin;
    # a shared registry's write is encoded by the core as usual and appended with
    # the store's async client (``_replica.awrite``); a new task or new blocks go
    # to the model without blocking (``_aio``). See docs/shared.md, "asyncio and
    # servers".
    # =====================================================================================

    # Opening reads a checkpoint, replays the journal tail and may embed seeds
    # (CPU work and store I/O once per registry): the sync open, off the loop.
    aopen = classmethod(
        offloaded(open.__func__, name="aopen", then=_prepare_async)  # type: ignore[attr-defined]
    )

    async def aclose(self) -> None:
        """:meth:`close` for coroutines (the flush and the follower's stop run off the loop)."""
        if self._replica is not None:
            await self._replica.aclose()

    async def sync_async(self, timeout: float = 10.0) -> None:
        """:meth:`sync` for coroutines (``a`` + ``sync`` is the keyword ``async``,
        hence this name): publish this replica's access counts and vectors, then
        apply every entry appended before the call."""
        if self._replica is not None:
            await self._replica.sync_async(timeout)

    async def aembed_pending(self) -> int:
        """:meth:`embed_pending` for coroutines: the model runs off the loop, and
        one coroutine per registry embeds at a time (the others then find none)."""
        import rampart._aio as _aio

        return await _aio.aembed_pending(self)

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

    async def aadd_tool_example(
        self, tool: str, request: str, *, trajectory_id: str | None = None
    ) -> str | None:
        """:meth:`add_tool_example` for coroutines (it embeds the request and
        writes: the sync call on the loop's default executor)."""
        import rampart._aio as _aio

        out: str | None = await _aio.off_loop(
            lambda: self.add_tool_example(tool, request, trajectory_id=trajectory_id)
        )
        return out

    async def acompile(
        self,
        max_tokens: int | None = None,
        task_text: str | None = None,
        relevance_threshold: float | None = None,
        top_k: int | None = None,
        separator: str | None = None,
        # Positional-or-keyword, though meant as keywords: CPython fills a
        # keyword-only default from a dict on every call, and these four cost the
        # hot path ~50 ns (7 %) that way (benches/ab_house.py).
        conversation: Conversation | None = None,
        context_window: int | None = None,
        reply_tokens: int | None = None,
        policy: ContextPolicy | None = None,
        *,
        task_embedding: Any = None,
        gate: GateFn | None = None,
        tools_in_prompt: bool = True,
    ) -> CompileResult:
        """:meth:`compile` for coroutines: the same steps (``rampart.gates.select_steps``), with
        a new task's vector, blocks written since the last gate and the tool-example
        gate awaited off the loop. A compile without a gate never waits: it is the
        sync call."""
        if _TRACE in _MODULES and _telemetry.tracing() is not None:
            return await _telemetry.atraced_compile(self, locals())  # OpenTelemetry is set up
        if relevance_threshold is None and top_k is None:
            if conversation is None and context_window is None and policy is None:
                return self.compile(
                    max_tokens,
                    task_text,
                    relevance_threshold,
                    top_k,
                    separator,
                    task_embedding=task_embedding,
                    gate=gate,
                    tools_in_prompt=tools_in_prompt,
                )
            res = self.compile(
                max_tokens,
                task_text,
                relevance_threshold,
                top_k,
                separator,
                task_embedding=task_embedding,
                gate=gate,
                tools_in_prompt=tools_in_prompt,
            )
            return await _aconversation_step(
                res, conversation, context_window, reply_tokens, policy
            )
        prompt, sel = await adrive(
            self,
            gates.select_steps(
                self,
                max_tokens,
                task_text,
                relevance_threshold,
                top_k,
                separator,
                task_embedding,
                gate,
                False,
                tools_in_prompt,
            ),
        )
        res = CompileResult(
            prompt or "", sel, DEFAULT_SEPARATOR if separator is None else separator
        )
        if conversation is None and context_window is None and policy is None:
            return res
        return await _aconversation_step(res, conversation, context_window, reply_tokens, policy)


def _conversation_step(
    res: CompileResult,
    conversation: Conversation | None,
    context_window: int | None,
    reply_tokens: int | None,
    policy: ContextPolicy | None,
) -> CompileResult:
    """The conversation part of a compile (SPEC §9), in rampart.conversation.plan."""
    import rampart.conversation.plan as plan

    return plan.attach(res, conversation, context_window, reply_tokens, policy)


async def _aconversation_step(
    res: CompileResult,
    conversation: Conversation | None,
    context_window: int | None,
    reply_tokens: int | None,
    policy: ContextPolicy | None,
) -> CompileResult:
    """:func:`_conversation_step` for acompile: on the loop's default executor when
    it may wait (a compact backend calls a model; a shared conversation records
    its transformations in the store), else right here."""
    import rampart.conversation.plan as plan

    if conversation is not None and plan.may_wait(conversation, policy):
        import rampart._aio as _aio

        out: CompileResult = await _aio.off_loop(
            lambda: plan.attach(res, conversation, context_window, reply_tokens, policy)
        )
        return out
    return plan.attach(res, conversation, context_window, reply_tokens, policy)


def _unpickle(
    data: bytes, tokeniser: Any, model: str | None, default_max_tokens: int | None
) -> BlockRegistry:
    return BlockRegistry._from_bytes(
        data, "pickled registry", model, tokeniser, None, {"default_max_tokens": default_max_tokens}
    )


def get_by_label(label: str) -> BlockRegistry | None:
    """The live registry holding ``label``, or None. Labels do not keep registries alive."""
    reg: BlockRegistry | None = _get_by_label(label)
    return reg
