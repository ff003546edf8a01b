"""BlockRegistry: the ordered, in-RAM registry an agent compiles its context from."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import rampart._args as _args
import rampart._core as _core
import rampart.gates as gates
import rampart.persistence as persistence
import rampart.telemetry as _telemetry
from rampart._labels import claim_label, label_of, release_label
from rampart._labels import get_by_label as _get_by_label
from rampart._ops import (
    adrive,
    drive,
)
from rampart._view import DEFAULT_SEPARATOR, GateFn
from rampart.block import CompileResult, DryRunResult, InstructionBlock, Snapshot
from rampart.embeddings.base import EmbeddingModel, encode_texts, resolve_model
from rampart.errors import InvalidArgumentError, RampartError
from rampart.gates.policy import GatePolicy
from rampart.persistence import Persistence
from rampart.primitives import Primitives
from rampart.seeds import (
    BlockSource,
    PathLike,
    SeedRegistry,
    load_sources,
)
from rampart.shared import SharedRegistry
from rampart.tokens import Tokeniser, resolve_tokeniser

if TYPE_CHECKING:
    from rampart.caching import CacheSession
    from rampart.conversation.core import Conversation
    from rampart.conversation.policy import ContextPolicy
    from rampart.shared.replica import Replica

__all__ = ["DEFAULT_SEPARATOR", "BlockRegistry", "EmbeddingModel", "GateFn", "get_by_label"]

# Without OpenTelemetry a compile pays one membership test of this dict (rampart.telemetry).
_MODULES = sys.modules
_TRACE = _telemetry.TRACE_MODULE  # a compile looks it up in sys.modules: one dict probe

SOURCES = persistence.SOURCES

EvictionPolicy = Callable[[InstructionBlock], float]


# ---- argument checks (rampart._args) ----------------------------------------------------

_int = _args.int_arg
_check_budget = _args.check_budget
_tags = _args.tags
_text = _args.text
_MAX_INT = _args.MAX_INT


class BlockRegistry(Primitives, SharedRegistry, Persistence):
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
        "_gate",
        "_policy",
        "_replica",
        "_sep_cache",
        "_tok",
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
        # The gate's state and choice (rampart.gates.policy): query cache, the
        # query adapter, the tool-example gate.
        self._gate = GatePolicy()
        self._core = _core.Registry(claim_label(label, self), _registry_id)
        # Set by BlockRegistry.open (docs/specification.md §7): the core then journals every write
        # through this replica; None for a local registry.
        self._replica: Replica | None = None
        if quantise_embeddings:
            self._core.set_quantised(True)

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
        replica: every process's replica is the same registry, docs/specification.md §7)."""
        return cls(embedding_model, tokeniser, label=label, _registry_id=registry_id, **kwargs)

    def _embed_written(self) -> None:
        """Embed what was written, when a model is attached (a replica's
        follower calls this after writes, off the write path)."""
        if self._embedder is not None:
            self.embed_pending()

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
        self._gate.model_changed()

    def release(self) -> None:
        """Free this registry's label for another registry (the registry stays usable)."""
        release_label(self.label, self)

    def _drop(self) -> None:
        """Undo a construction that failed half-way (a load, a cold start): free the
        label, so that a retry under the same label works."""
        self.release()

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under this registry's tokeniser."""
        return self._tok.count(text)

    def _count(self, text: str) -> int | None:
        # None lets the core count with the built-in cl100k_base, without a round trip.
        return None if self._tok.builtin else self._tok.count(text)

    def index_of(self, runtime_id: str) -> int:
        """The block's position (0 = front of the prompt); :class:`BlockNotFoundError`
        if no block has that id."""
        try:
            return self._core.index_of(runtime_id)
        except UnicodeEncodeError as exc:
            raise _args.not_text(exc, runtime_id=runtime_id) from None

    def snapshot(self) -> Snapshot:
        """An immutable picture of blocks, order, metadata and access counts.

        Cheap: blocks are shared, not copied; only the access counts are read
        (1.2 µs at 200 blocks, 1.5 ms at 100 000)."""
        return Snapshot(self._core.snapshot(), self.label)

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

    # ---- tool examples (rampart.gates.examples, rampart.gates.enrichment) ---------------

    def add_tool_example(
        self, tool: str, request: str, *, trajectory_id: str | None = None
    ) -> str | None:
        """Teach the gate that ``request`` is served by ``tool`` (a tool name or a
        tool block's runtime id): an agent block of run ``trajectory_id`` that
        ``rollback_trajectory`` takes back. Returns its runtime id, or None when
        nothing was written (already an example; the tool's learned examples are
        full). See :func:`rampart.toolgate.add_tool_example`."""
        import rampart.gates.examples as examples

        return examples.add_tool_example(self, tool, request, trajectory_id=trajectory_id)

    def enrich_tools(self, model: Any, *, n: int = 5, seed: int = 0) -> dict[str, list[str]]:
        """Generate ``n`` example requests per tool block with ``model`` (any
        ``rampart.llm`` backend), cached on disk by schema, and gate with them. See
        :func:`rampart.toolgate.enrich_tools`."""
        import rampart.gates.enrichment as enrichment

        return enrichment.enrich_tools(self, model, n=n, seed=seed)

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
        reply_tokens`` (docs/specification.md §9, docs/conversation.md); ``result.messages(format)``
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
            if task_text is not None and (type(task_text) is not str or not task_text.isascii()):
                # unused without a gate, but the conversation scores with it: one
                # rule for the argument whatever the path (a gate checks it too)
                task_text = _text(task_text, "task_text")
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
                self,
                CompileResult(prompt or "", sel, sep),
                conversation,
                context_window,
                reply_tokens,
                policy,
                task_text,
            )
        steps = gates.select_steps(
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
        )
        res = _result(drive(self, steps), separator)
        if conversation is None and context_window is None and policy is None:
            return res
        return _conversation_step(
            self, res, conversation, context_window, reply_tokens, policy, task_text
        )

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
        _, sel, notes = drive(
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
        return DryRunResult(sel, notes)

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

    # ---- asyncio twins (docs/shared.md, "asyncio and servers"): the write
    # operations' come from their declarations (rampart.primitives), the shared
    # registry's from rampart.shared; these are the reads that may wait.

    async def aembed_pending(self) -> int:
        """:meth:`embed_pending` for coroutines: the model runs off the loop, and
        one coroutine per registry embeds at a time (the others then find none)."""
        import rampart.shared.aio as _aio

        return await _aio.aembed_pending(self)

    async def aadd_tool_example(
        self, tool: str, request: str, *, trajectory_id: str | None = None
    ) -> str | None:
        """:meth:`add_tool_example` for coroutines (it embeds the request and
        writes: the sync call on the loop's default executor)."""
        import rampart.shared.aio as _aio

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
            if conversation is None and context_window is None and policy is None:
                return res
            return await _aconversation_step(
                self, res, conversation, context_window, reply_tokens, policy, task_text
            )
        steps = gates.select_steps(
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
        )
        res = _result(await adrive(self, steps), separator)
        if conversation is None and context_window is None and policy is None:
            return res
        return await _aconversation_step(
            self, res, conversation, context_window, reply_tokens, policy, task_text
        )


def _result(
    picked: tuple[str | None, Any, gates.Notes | None], separator: str | None
) -> CompileResult:
    """The result of a gated compile's steps (the gate's notes attached)."""
    prompt, sel, notes = picked
    res = CompileResult(prompt or "", sel, DEFAULT_SEPARATOR if separator is None else separator)
    if notes:
        res._notes = notes
    return res


def _conversation_step(
    reg: BlockRegistry,
    res: CompileResult,
    conversation: Conversation | None,
    context_window: int | None,
    reply_tokens: int | None,
    policy: ContextPolicy | None,
    task_text: str | None,
) -> CompileResult:
    """The conversation part of a compile (docs/specification.md §9), in rampart.conversation.plan
    (the registry's embedder scores tool results against the step)."""
    import rampart.conversation.plan as plan

    return plan.attach(res, conversation, context_window, reply_tokens, policy, reg, task_text)


async def _aconversation_step(
    reg: BlockRegistry,
    res: CompileResult,
    conversation: Conversation | None,
    context_window: int | None,
    reply_tokens: int | None,
    policy: ContextPolicy | None,
    task_text: str | None,
) -> CompileResult:
    """:func:`_conversation_step` for acompile: on the loop's default executor when
    it may wait (a compact backend calls a model; a shared conversation records
    its transformations in the store), else right here."""
    import rampart.conversation.plan as plan

    if conversation is not None and plan.may_wait(conversation, policy):
        import rampart.shared.aio as _aio

        out: CompileResult = await _aio.off_loop(
            lambda: plan.attach(
                res, conversation, context_window, reply_tokens, policy, reg, task_text
            )
        )
        return out
    return plan.attach(res, conversation, context_window, reply_tokens, policy, reg, task_text)


def get_by_label(label: str) -> BlockRegistry | None:
    """The live registry holding ``label``, or None. Labels do not keep registries alive."""
    reg: BlockRegistry | None = _get_by_label(label)
    return reg
