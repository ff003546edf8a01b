"""BlockRegistry: the ordered, in-RAM registry an agent compiles its context from."""

from __future__ import annotations

import itertools
import math
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from rampart import _core
from rampart.block import CompileResult, DryRunResult, InstructionBlock, Snapshot
from rampart.errors import InvalidArgumentError, RampartError
from rampart.seeds import BlockSource, PathLike, SeedBlock, SeedRegistry, load_sources
from rampart.tokens import Tokeniser, resolve_tokeniser

__all__ = ["DEFAULT_SEPARATOR", "BlockRegistry", "EmbeddingModel", "GateFn", "get_by_label"]

DEFAULT_SEPARATOR = "\n\n---\n\n"
SOURCES = ("seed", "agent", "orchestrator")

GateFn = Callable[[str, Sequence[InstructionBlock]], Sequence[float]]
EvictionPolicy = Callable[[InstructionBlock], float]


class EmbeddingModel(Protocol):
    def encode(self, text: str) -> Any: ...


# ---- labels: process-unique, weak ---------------------------------------------------

_LABELS: weakref.WeakValueDictionary[str, BlockRegistry] = weakref.WeakValueDictionary()
_LABELS_LOCK = threading.Lock()
_LABEL_COUNTER = itertools.count(1)


def _claim_label(label: str | None, reg: BlockRegistry) -> str:
    with _LABELS_LOCK:
        if label is None:
            while True:
                label = f"registry-{next(_LABEL_COUNTER)}"
                if label not in _LABELS:
                    break
        elif not isinstance(label, str) or not label:
            raise InvalidArgumentError(f"label must be a non-empty string, got {label!r}")
        holder = _LABELS.get(label)
        if holder is not None:
            raise InvalidArgumentError(
                f"label {label!r} is already held by registry {holder.registry_id}; "
                "call release() on it or pick another label"
            )
        _LABELS[label] = reg
        return label


def get_by_label(label: str) -> BlockRegistry | None:
    """The live registry holding ``label``, or None. Labels do not keep registries alive."""
    with _LABELS_LOCK:
        return _LABELS.get(label)


# ---- argument checks ------------------------------------------------------------------


def _int(value: Any, what: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{what} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise InvalidArgumentError(f"{what} must be >= {minimum}, got {value}")
    return value


# Positions and steps clamp (SPEC §3), so any Python int is valid; the core takes
# i64, and +-2**62 is already past the end of any registry.
_FAR = 2**62


def _clamped(value: Any, what: str) -> int:
    return max(-_FAR, min(_FAR, _int(value, what)))


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentError(f"{what} must be a number, got {value!r}")
    return float(value)


def _check_budget(budget: Any) -> None:
    """Raise for a budget the fast path did not accept (an int subclass is fine)."""
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise InvalidArgumentError(f"max_tokens must be an int >= 0, got {budget!r}")


def _priority(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentError(f"priority must be a number in [0, 1], got {value!r}")
    p = float(value)
    if not 0.0 <= p <= 1.0:
        raise InvalidArgumentError(f"priority must be a number in [0, 1], got {value!r}")
    return p


def _tags(tags: Iterable[str] | None) -> list[str]:
    if tags is None:
        return []
    if isinstance(tags, str):
        raise InvalidArgumentError(f"tags must be a list of strings, not the string {tags!r}")
    out = list(tags)
    if not all(isinstance(t, str) for t in out):
        raise InvalidArgumentError(f"tags must be strings, got {out!r}")
    return out


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a str, got {type(value).__name__}")
    return value


def _vector(value: Any, what: str) -> list[float]:
    try:
        vec = [float(x) for x in value]
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{what} must be a sequence of numbers") from None
    if not vec or not all(math.isfinite(x) for x in vec):
        raise InvalidArgumentError(f"{what} must be a non-empty sequence of finite numbers")
    return vec


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


class BlockRegistry:
    """An ordered map ``runtime_id -> InstructionBlock`` compiled into a prompt.

    Order is explicit and is the only thing that decides where a block lands in the
    compiled prompt (index 0 = front). Every method is safe to call from many
    threads at once.
    """

    __slots__ = (
        "__weakref__",
        "_core",
        "_embed_cache",
        "_embedder",
        "_policy",
        "_sep_cache",
        "_tok",
        "default_max_tokens",
    )

    def __init__(
        self,
        embedding_model: EmbeddingModel | None = None,
        tokeniser: Any = None,
        eviction_policy: EvictionPolicy | None = None,
        *,
        label: str | None = None,
        default_max_tokens: int | None = 16384,
    ) -> None:
        if default_max_tokens is not None:
            _int(default_max_tokens, "default_max_tokens", minimum=0)
        if eviction_policy is not None and not callable(eviction_policy):
            raise InvalidArgumentError("eviction_policy must be a callable(block) -> float")
        tok = resolve_tokeniser(tokeniser)
        self._tok: Tokeniser = tok
        self._embedder = embedding_model
        self._policy = eviction_policy
        self.default_max_tokens = default_max_tokens
        self._sep_cache: dict[str, int] = {}
        self._embed_cache: dict[str, list[float]] = {}
        self._core = _core.Registry(_claim_label(label, self))

    # ---- construction from seeds -------------------------------------------------

    @classmethod
    def from_files(
        cls,
        paths: Iterable[PathLike | BlockSource] | PathLike | BlockSource,
        embedding_model: EmbeddingModel | None = None,
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
        reg._insert_seeds(blocks)
        return reg

    @classmethod
    def from_seed(
        cls,
        seed_registry: SeedRegistry,
        names: Iterable[str],
        must_match: bool = True,
        embedding_model: EmbeddingModel | None = None,
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
        reg._insert_seeds(picked)
        return reg

    def add_from_seed(self, seed_registry: SeedRegistry, name: str) -> str:
        """Append one seed block (no file I/O); returns its new runtime id."""
        return self._insert_seeds([seed_registry.get(name)])[0]

    def _insert_seeds(self, blocks: Sequence[SeedBlock]) -> list[str]:
        if self._tok.builtin:
            counts: list[int | None] = [None] * len(blocks)
        else:
            counts = list(self._tok.count_many([b.content for b in blocks]))
        rows = [
            (b.name, b.content, b.priority, list(b.tags), b.metadata_json(), n)
            for b, n in zip(blocks, counts)
        ]
        return self._core.insert_many(rows, "seed", False)

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

    def release(self) -> None:
        """Free this registry's label for another registry (the registry stays usable)."""
        with _LABELS_LOCK:
            if _LABELS.get(self.label) is self:
                del _LABELS[self.label]

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under this registry's tokeniser."""
        return self._tok.count(text)

    def _count(self, text: str) -> int | None:
        # None lets the core count with the built-in cl100k_base, without a round trip.
        return None if self._tok.builtin else self._tok.count(text)

    # ---- write ------------------------------------------------------------------------

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
    ) -> str:
        """Insert a block; returns its runtime id.

        Appended at the back, except orchestrator blocks, which go to the front;
        ``position`` (clamped) overrides both. ``author`` is the writing registry
        *object* when one registry writes into another: it alone may later
        force-evict the block or change its content. ``embedding`` supplies the
        block's vector for the relevance gate instead of running the model.
        """
        _text(content, "content")
        _text(semantic_name, "semantic_name")
        if source not in SOURCES:
            raise InvalidArgumentError(f"source must be one of {SOURCES}, got {source!r}")
        if author is not None and not isinstance(author, BlockRegistry):
            raise InvalidArgumentError(
                "author must be a BlockRegistry object (an id string is not a capability), "
                f"got {type(author).__name__}"
            )
        if position is not None:
            position = _clamped(position, "position")
        if trajectory_id is not None:
            _text(trajectory_id, "trajectory_id")
        vector = None if embedding is None else _vector(embedding, "embedding")
        rid = self._core.insert(
            semantic_name,
            content,
            _priority(priority),
            source,
            bool(evictable),
            trajectory_id,
            _tags(tags),
            None,
            self._count(content),
            position,
            source == "orchestrator",
            None if author is None else author._core,
        )
        if vector is not None:
            self._embed_cache[rid] = vector
        return rid

    def write_agent_block(
        self,
        content: str,
        trajectory_id: str,
        semantic_name: str | None = None,
        priority: float = 0.5,
        tags: Iterable[str] | None = None,
        **kwargs: Any,
    ) -> str:
        """Write an ``agent`` block for run ``trajectory_id`` (required)."""
        if not isinstance(trajectory_id, str) or not trajectory_id:
            raise InvalidArgumentError("an agent block needs a non-empty trajectory_id")
        return self.write_block(
            content,
            semantic_name or f"agent_note_{trajectory_id}",
            "agent",
            priority,
            trajectory_id,
            tags,
            **kwargs,
        )

    def update_block_content(
        self, runtime_id: str, content: str, *, by: BlockRegistry | None = None
    ) -> None:
        """Replace an agent block's content (seed: SeedMutationError, orchestrator:
        OrchestratorMutationError; another registry's block: BlockPermissionError
        unless ``by`` is its author)."""
        _text(content, "content")
        self._core.update_content(runtime_id, content, self._count(content), self._actor(by))
        self._embed_cache.pop(runtime_id, None)  # its embedding described the old text

    def update_priority(self, runtime_id: str, priority: float) -> None:
        """Change a block's priority (any block; it feeds eviction, never order)."""
        self._core.update_priority(runtime_id, _priority(priority))

    def set_wrap(self, runtime_id: str, prefix: str = "", suffix: str = "") -> None:
        """Decorate a block at compile time (e.g. ``<critical>`` … ``</critical>``).
        The wrap's tokens count against the budget; empty strings remove it."""
        _text(prefix, "prefix")
        _text(suffix, "suffix")
        tokens = None if self._tok.builtin else self._tok.count(prefix) + self._tok.count(suffix)
        self._core.set_wrap(runtime_id, prefix, suffix, tokens)

    # ---- promote ----------------------------------------------------------------------

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
    ) -> int:
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

    def demote(self, runtime_id: str, steps: int = 1) -> int:
        """Move a block ``steps`` toward the back (clamped). Returns the new index."""
        return self._core.move_by(runtime_id, -_clamped(steps, "steps"))

    def promote_to_front(self, runtime_id: str) -> int:
        return self._core.move_to(runtime_id, 0)

    def demote_to_back(self, runtime_id: str) -> int:
        return self._core.move_to(runtime_id, _FAR)

    def reorder(self, id_list: Sequence[str]) -> None:
        """The listed blocks move to the front in that order; the rest keep their order."""
        self._core.promote_group(list(id_list), 0)

    def promote_group(self, id_list: Sequence[str], *, to_position: int = 0) -> int:
        """Move the listed blocks as one contiguous unit, in the given order, to
        ``to_position`` (the paper's group promote). Returns the unit's first index."""
        return self._core.promote_group(list(id_list), _clamped(to_position, "to_position"))

    def index_of(self, runtime_id: str) -> int:
        return self._core.index_of(runtime_id)

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

    def evict(
        self, runtime_id: str, *, force: bool = False, by: BlockRegistry | None = None
    ) -> InstructionBlock:
        """Remove a block; returns it.

        An evictable block goes for anyone. A non-evictable one needs ``force=True``
        (else EvictionError naming its author) *and* the acting registry (``by``,
        default this one) must be its author (else BlockPermissionError)."""
        return InstructionBlock(self._core.evict(runtime_id, bool(force), self._actor(by)))

    def evict_by_policy(self, n: int | None = None, *, threshold: float | None = None) -> list[str]:
        """Score every evictable block with the eviction policy (default
        ``0.5*(1-priority) + 0.5/(access_count+1)``; higher goes first) and remove
        them: all of them, the ``n`` highest, or those scoring >= ``threshold``.
        Returns the removed ids, highest score first. Nothing is evicted automatically."""
        if n is not None:
            _int(n, "n", minimum=0)
        if threshold is not None:
            threshold = _number(threshold, "threshold")
        if self._policy is None:
            return self._core.evict_by_policy(n, threshold)
        blocks = [InstructionBlock(b) for b in self._core.view().blocks() if b.evictable]
        scored = []
        for k, b in enumerate(blocks):
            s = float(self._policy(b))
            if math.isnan(s):
                raise InvalidArgumentError(f"eviction policy returned NaN for block {b!r}")
            if threshold is None or s >= threshold:
                scored.append((-s, k, b.runtime_id))
        scored.sort()
        doomed = [rid for _, _, rid in scored[: n if n is not None else len(scored)]]
        self._core.evict_many(doomed)
        return doomed

    def rollback_trajectory(self, trajectory_id: str, *, by: BlockRegistry | None = None) -> int:
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

    def restore(self, snapshot: Snapshot) -> None:
        """Put the registry back exactly as the snapshot saw it (blocks, order,
        metadata, access counts), each block under a **new** runtime id; authors are
        kept, so ownership survives."""
        if not isinstance(snapshot, Snapshot):
            raise InvalidArgumentError(f"restore takes a Snapshot, got {type(snapshot).__name__}")
        self._core.restore(snapshot._snap)

    # ---- gate ----------------------------------------------------------------------------

    def _embed(self, texts: list[str]) -> list[list[float]]:
        model = self._embedder
        if model is None:
            raise RampartError(
                f"registry {self.label!r} has no embedding model: pass embedding_model= to "
                "the registry, or a gate= callable to compile"
            )
        batch = getattr(model, "encode_batch", None)
        vectors = batch(texts) if batch is not None else [model.encode(t) for t in texts]
        return [[float(x) for x in v] for v in vectors]

    def _cosine_scores(
        self, task_text: str | None, task_embedding: Any, blocks: Sequence[InstructionBlock]
    ) -> list[float]:
        query = (
            _vector(task_embedding, "task_embedding")
            if task_embedding is not None
            else self._embed([task_text or ""])[0]
        )
        cache = self._embed_cache
        todo = [b for b in blocks if b.runtime_id not in cache]
        if todo:
            for b, v in zip(todo, self._embed([b.gate_text for b in todo])):
                cache[b.runtime_id] = v
        scores = [_cosine(query, cache[b.runtime_id]) for b in blocks]
        if len(cache) > 2 * len(blocks) + 64:  # forget evicted blocks now and then
            live = {b.runtime_id for b in blocks}
            for rid in [r for r in list(cache) if r not in live]:  # list(): threads
                cache.pop(rid, None)
        return scores

    def _gate_scores(
        self,
        view: _core.OrderView,
        task_text: str | None,
        task_embedding: Any,
        gate: GateFn | None,
    ) -> list[float]:
        blocks = [InstructionBlock(b) for b in view.blocks()]
        if gate is None:
            return self._cosine_scores(task_text, task_embedding, blocks)
        scores = list(gate(task_text or "", blocks))
        if len(scores) != len(blocks):
            raise InvalidArgumentError(
                f"gate returned {len(scores)} scores for {len(blocks)} blocks"
            )
        out = []
        for b, s in zip(blocks, scores):
            if isinstance(s, bool) or not isinstance(s, (int, float)) or math.isnan(s):
                raise InvalidArgumentError(
                    f"gate returned {s!r} for block {b!r}; expected a number"
                )
            out.append(float(s))
        return out

    def find_relevant(
        self, task_text: str, top_k: int | None = None, threshold: float | None = None
    ) -> list[tuple[InstructionBlock, float]]:
        """Blocks by cosine similarity to ``task_text``, descending; ties in registry order."""
        _text(task_text, "task_text")
        blocks = [InstructionBlock(b) for b in self._core.view().blocks()]
        scores = self._cosine_scores(task_text, None, blocks)
        ranked = sorted(range(len(blocks)), key=lambda i: (-scores[i], i))
        if threshold is not None:
            ranked = [i for i in ranked if scores[i] >= threshold]
        if top_k is not None:
            ranked = ranked[: _int(top_k, "top_k", minimum=0)]
        return [(blocks[i], scores[i]) for i in ranked]

    # ---- compile --------------------------------------------------------------------------

    def _sep_tokens(self, separator: str) -> int:
        n = self._sep_cache.get(separator)
        if n is None:
            n = self._sep_cache[_text(separator, "separator")] = self._tok.count(separator)
        return n

    def _select(
        self,
        max_tokens: int | None,
        task_text: str | None,
        relevance_threshold: float | None,
        top_k: int | None,
        separator: str | None,
        task_embedding: Any,
        gate: GateFn | None,
        dry_run: bool,
    ) -> tuple[str | None, _core.Selection]:
        budget = self.default_max_tokens if max_tokens is None else max_tokens
        if budget is not None and (type(budget) is not int or budget < 0):
            _check_budget(budget)
        sep = DEFAULT_SEPARATOR if separator is None else _text(separator, "separator")
        if relevance_threshold is None and top_k is None:
            return self._core.compile(budget, sep, self._sep_tokens(sep), dry_run=dry_run)
        if task_text is None and task_embedding is None:
            raise InvalidArgumentError(
                "relevance_threshold/top_k need a task: pass task_text or task_embedding"
            )
        if top_k is not None:
            _int(top_k, "top_k", minimum=0)
        if relevance_threshold is not None:
            relevance_threshold = _number(relevance_threshold, "relevance_threshold")
        view = self._core.view()
        scores = self._gate_scores(view, task_text, task_embedding, gate)
        return self._core.compile(
            budget,
            sep,
            self._sep_tokens(sep),
            view=view,
            scores=scores,
            threshold=relevance_threshold,
            top_k=top_k,
            dry_run=dry_run,
        )

    def compile(
        self,
        max_tokens: int | None = None,
        task_text: str | None = None,
        relevance_threshold: float | None = None,
        top_k: int | None = None,
        separator: str | None = None,
        *,
        task_embedding: Any = None,
        gate: GateFn | None = None,
    ) -> CompileResult:
        """Compile the context: (1) gate, when a task and ``relevance_threshold`` or
        ``top_k`` are given; (2) walk the registry in order; (3) cut at the token
        budget, stopping at the first block that does not fit; (4) count an access
        for each emitted block. Never reorders the registry."""
        if relevance_threshold is None and top_k is None:
            # The hot path, kept flat: agents call this before every model call.
            budget = self.default_max_tokens if max_tokens is None else max_tokens
            if budget is not None and (type(budget) is not int or budget < 0):
                _check_budget(budget)
            sep = DEFAULT_SEPARATOR if separator is None else separator
            n = self._sep_cache.get(sep)
            if n is None:
                n = self._sep_tokens(sep)
            prompt, sel = self._core.compile(budget, sep, n)
            return CompileResult(prompt or "", sel)
        prompt, sel = self._select(
            max_tokens,
            task_text,
            relevance_threshold,
            top_k,
            separator,
            task_embedding,
            gate,
            False,
        )
        return CompileResult(prompt or "", sel)

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
    ) -> DryRunResult:
        """Stages 1–3 only: the same selection, no prompt built, no state changed."""
        _, sel = self._select(
            max_tokens,
            task_text,
            relevance_threshold,
            top_k,
            separator,
            task_embedding,
            gate,
            True,
        )
        return DryRunResult(sel)

    # ---- observability ----------------------------------------------------------------------

    def get_by_id(self, runtime_id: str) -> InstructionBlock:
        return InstructionBlock(self._core.get(runtime_id))

    def get_by_name(self, semantic_name: str) -> list[InstructionBlock]:
        """All blocks with this name, registry order (names may repeat)."""
        return [InstructionBlock(b) for b in self._core.find_by_name(semantic_name)]

    def find_by_tag(self, tag: str) -> list[InstructionBlock]:
        return [InstructionBlock(b) for b in self._core.find_by_tags([tag], False)]

    def find_by_tags(self, tags: Iterable[str], match_all: bool = False) -> list[InstructionBlock]:
        return [InstructionBlock(b) for b in self._core.find_by_tags(_tags(tags), match_all)]

    def list_blocks(self) -> list[InstructionBlock]:
        return [InstructionBlock(b) for b in self._core.blocks()]

    def runtime_ids(self) -> list[str]:
        return self._core.runtime_ids()

    def registry_summary(self) -> dict[str, Any]:
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
                    "author_label": _label_of(b.author_id),
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


def _label_of(registry_id: str) -> str | None:
    with _LABELS_LOCK:
        for label, reg in _LABELS.items():
            if reg.registry_id == registry_id:
                return label
    return None
