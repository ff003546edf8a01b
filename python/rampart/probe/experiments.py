"""The probes' registries, trial plans and prompts, built with rampart's own primitives.

A *needle* probe registry holds ``n_blocks`` blocks: filler blocks, three
content-adjacent *neighbours* of the critical block at fixed home positions, and the
critical block itself, which holds an identifier found nowhere else
(``zorblax_refresh_v7``). Each trial restores the pristine order (``reorder``), moves the
critical block with ``promote`` (or moves it and K neighbours as one unit with
``promote_group``), compiles, and places the task after the context, before it, or
both. The *schema* probe appends tool blocks (``load_tools``) and, in the ``evicted``
condition, compiles a registry whose target tool block was evicted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rampart.block import CompileResult
from rampart.errors import InvalidArgumentError
from rampart.registry import BlockRegistry
from rampart.seeds import SeedRegistry

DATA = Path(__file__).parent / "data"
FILLERS = DATA / "fillers.md"
NEEDLE = DATA / "needle.md"
TOOLS = DATA / "tools.json"

EXPERIMENTS = ("sweep", "gating", "schema")
PLACEMENTS = ("after", "before", "both")
#: ``rampart probe gating --layout``: ``today`` (full / gated / promoted, every block
#: gated) or ``cache-aware`` (the ``gating-layout`` experiment: the same ungated head
#: interleaved where the registry has it, against moved in front of every gated block).
LAYOUTS = ("today", "cache-aware")
LAYOUT_CONDITIONS = ("interleaved", "cache-aware")
#: The cache-aware layout's head, in a filler set whose seeds mark no block
#: ``gated: false`` (the built-in one): house rules that hold whatever the task is
#: (commit style, Python version, money, secrets…). Topic blocks (testing, database,
#: api, billing, integrations) and the cache blocks stay gated: they are what a task
#: needs or not.
HEAD_TAGS = ("rules", "style", "git", "safety")

IDENTIFIER = "zorblax_refresh_v7"
# Calibrated on SmolLM2-135M (docs/probes.md): asked "which function must be called"
# every model finds the identifier; asked to write code that uses it, tiny models
# almost never do. This wording sits between the two, so position can matter.
NEEDLE_TASK = "How do I rotate the cache in this project? Answer in one sentence."
# Low enough that SmolLM2 stays near its greedy answer, high enough that trials differ
# (at 0 every trial repeats trial 0; greedy decoding also falls into "1. 1.1.1…" loops).
DEFAULT_TEMPERATURE = 0.3
SYSTEM = (
    "You are a coding assistant working in a software project. Follow the project instructions."
)

SCHEMA_TOOL = "zorblax_cache_rotate"
SCHEMA_TASK = "The invoice cache for region eu-west is stale. Rotate it now."
SCHEMA_SYSTEM = (
    "You are an agent that acts by calling tools. The tools you can call are described "
    'in the project instructions. To call a tool, reply with one line of JSON: {"tool": '
    '"<tool name>", "arguments": {...}}. If no described tool fits, say so.'
)
SEPARATOR = "\n\n"


@dataclass(frozen=True)
class TrialSpec:
    """One planned model call. ``position`` is the critical (or schema) block's index
    in the registry; ``group`` the number of neighbours promoted with it."""

    experiment: str
    condition: str
    placement: str
    position: int
    group: int
    trial: int

    @property
    def key(self) -> str:
        return (
            f"{self.experiment}|{self.condition}|{self.placement}|{self.position}|"
            f"{self.group}|{self.trial}"
        )


@dataclass(frozen=True)
class Prompt:
    """What one trial sends, and what the judge needs to score the answer."""

    messages: tuple[dict[str, str], ...]
    tools: tuple[dict[str, Any], ...]
    context_tokens: int
    blocks: int
    target_included: bool
    target: str
    # What a prompt cache could serve across tasks (CompileResult.stable_prefix_tokens),
    # and where the target block landed in the compiled prompt (None: not included).
    stable_prefix_tokens: int | None = None
    target_index: int | None = None


def compose(context: str, task: str, placement: str) -> str:
    """The user turn: the compiled context with the task after it, before it, or both."""
    ctx = f"Project instructions:\n\n{context}"
    if placement == "after":
        return f"{ctx}\n\n{task}"
    if placement == "before":
        return f"{task}\n\n{ctx}"
    if placement == "both":
        return f"{task}\n\n{ctx}\n\n{task}"
    raise InvalidArgumentError(f"placement {placement!r}: expected one of {', '.join(PLACEMENTS)}")


def judge(text: str, tool_calls: Iterable[str], target: str) -> bool:
    """Success: the answer names the target identifier (case-insensitive), or the model
    called the target tool through the API."""
    return target in tool_calls or target.lower() in text.lower()


def _seed_registry(paths: Sequence[str | Path] | None) -> SeedRegistry:
    return SeedRegistry.from_files(list(paths) if paths else [FILLERS])


class _Bench:
    """A registry, its pristine snapshot, and the id of the block each trial moves."""

    def __init__(
        self,
        n_blocks: int,
        seeds: Sequence[str | Path] | None,
        reserved: int,
        *,
        target: str,
    ) -> None:
        if n_blocks < reserved + 1:
            raise InvalidArgumentError(f"n_blocks must be at least {reserved + 1}, got {n_blocks}")
        fillers = _seed_registry(seeds)
        need = n_blocks - reserved
        names = fillers.list_names()
        if len(names) < need:
            where = "the given --seeds" if seeds else "the built-in filler set"
            raise InvalidArgumentError(
                f"n_blocks={n_blocks} needs {need} filler blocks; {where} holds {len(names)}"
            )
        for name in names:
            if target.lower() in fillers.get(name).content.lower():
                raise InvalidArgumentError(
                    f"filler block {name!r} mentions {target!r}: the probe's identifier must "
                    "occur nowhere but in its own block"
                )
        self.n_blocks = n_blocks
        self.target = target
        self.fillers = fillers
        self.filler_names = names[:need]

    @property
    def digest(self) -> str:
        """Identifies the filler set in a run's config, so resuming with other seeds fails."""
        h = hashlib.sha256()
        for b in self.fillers.blocks():
            h.update(b.name.encode() + b"\0" + b.content.encode() + b"\0")
        return h.hexdigest()[:16]


class NeedleBench(_Bench):
    """Registry for the sweep and gating probes."""

    def __init__(
        self,
        n_blocks: int = 31,
        seeds: Sequence[str | Path] | None = None,
        *,
        embed: bool = False,
        task: str = NEEDLE_TASK,
        head: bool = False,
    ) -> None:
        needle = SeedRegistry.from_files([NEEDLE])
        needle_names = needle.list_names()
        critical_name, neighbour_names = needle_names[0], needle_names[1:]
        super().__init__(n_blocks, seeds, 1 + len(neighbour_names), target=IDENTIFIER)
        self.task = task
        # Neighbours sit at evenly spaced home positions among the fillers, so an
        # ungrouped critical block is usually far from them, a grouped one beside them.
        order = list(self.filler_names)
        k = len(neighbour_names)
        for i, name in enumerate(neighbour_names):
            home = round((i + 1) * (n_blocks - 1) / (k + 1))
            order.insert(min(home, len(order)), name)
        order.append(critical_name)
        merged = self.fillers.merged(needle)
        self.reg = BlockRegistry.from_seed(
            merged, order, embedding_model="default" if embed else None
        )
        ids = self.reg.runtime_ids()
        self.critical = ids[-1]
        self.neighbours = [ids[order.index(n)] for n in neighbour_names]
        self.base = ids  # the pristine order; `reorder` restores it and keeps the ids
        # The ungated head of the cache-aware layout (empty unless ``head``): fillers
        # the seeds mark ``gated: false``, or, when none is marked, the house rules
        # (HEAD_TAGS). Seeds that mark blocks are already ungated by from_seed.
        self.head: list[str] = []
        if head:
            # (qualified seed names, as `order` holds them, with their blocks)
            blocks = [(n, self.fillers.get(n)) for n in self.filler_names]
            marked = [n for n, b in blocks if not b.gated]
            names = marked or [n for n, b in blocks if set(b.tags) & set(HEAD_TAGS)]
            if not names:
                raise InvalidArgumentError(
                    "the cache-aware layout needs an ungated head: mark blocks of the "
                    f"filler set `gated: false`, or tag them one of {', '.join(HEAD_TAGS)}"
                )
            self.head = [ids[order.index(n)] for n in names]
            for rid in self.head:
                self.reg.set_gated(rid, False)

    @property
    def max_group(self) -> int:
        return len(self.neighbours)

    def arrange(self, position: int, group: int) -> int:
        """Restore the pristine order and move the critical block to ``position``,
        alone (``promote``) or with ``group`` neighbours as one unit (``promote_group``).
        Returns the critical block's index."""
        if not 0 <= position < self.n_blocks:
            raise InvalidArgumentError(f"position {position} is outside 0..{self.n_blocks - 1}")
        if not 0 <= group <= self.max_group:
            raise InvalidArgumentError(f"group must be in 0..{self.max_group}, got {group}")
        self.reg.reorder(self.base)
        if group == 0:
            return self.reg.promote(self.critical, to_position=position)
        unit = [self.critical, *self.neighbours[:group]]
        if position <= self.n_blocks - 1 - group:
            self.reg.promote_group(unit, to_position=position)
        else:  # near the end the neighbours go first, so the critical block lands on `position`
            self.reg.promote_group(unit[1:] + unit[:1], to_position=position - group)
        return self.reg.index_of(self.critical)

    def prompt(
        self,
        spec: TrialSpec,
        *,
        top_k: int | None = None,
        threshold: float | None = None,
    ) -> Prompt:
        """The prompt of one trial: the registry arranged (or promoted, or gated with
        ``top_k``/``threshold``) as ``spec`` says, compiled, with the task placed."""
        if spec.condition == "promoted":
            self.reg.reorder(self.base)
            self.reg.promote(self.critical, to_front=True)
        else:
            self.arrange(spec.position, spec.group)
        if spec.condition == "cache-aware":
            # The head moves in front of every gated block, keeping its own order; the
            # gated blocks keep theirs (the critical block stays where `arrange` put it
            # relative to them). Nothing else differs from "interleaved".
            head = set(self.head)
            self.reg.reorder([rid for rid in self.reg.runtime_ids() if rid in head])
        gated = spec.condition in ("gated", *LAYOUT_CONDITIONS)
        result = self.reg.compile(
            separator=SEPARATOR,
            task_text=self.task if gated else None,
            top_k=top_k if gated else None,
            relevance_threshold=threshold if gated else None,
        )
        return _prompt(
            result,
            SYSTEM,
            compose(result.prompt, self.task, spec.placement),
            (),
            self.critical,
            self.target,
        )


class SchemaBench(_Bench):
    """Registry for the schema probe: fillers, then one block per tool (load_tools)."""

    def __init__(
        self,
        n_blocks: int = 31,
        seeds: Sequence[str | Path] | None = None,
        *,
        task: str = SCHEMA_TASK,
    ) -> None:
        tools = json.loads(TOOLS.read_text(encoding="utf-8"))["tools"]
        super().__init__(n_blocks, seeds, len(tools), target=SCHEMA_TOOL)
        self.task = task
        # Two registries built once: one with every tool block, one where the target
        # tool's block has been evicted (the primitive under test).
        self.present = BlockRegistry.from_seed(self.fillers, self.filler_names)
        ids = self.present.load_tools(tools)
        names = [t["function"]["name"] for t in tools]
        self.schema_block = ids[names.index(SCHEMA_TOOL)]
        self.position = self.present.index_of(self.schema_block)
        self.evicted = BlockRegistry.from_seed(self.fillers, self.filler_names)
        self.evicted.evict(self.evicted.load_tools(tools)[names.index(SCHEMA_TOOL)])

    def prompt(self, spec: TrialSpec) -> Prompt:
        """The prompt of one schema trial: with the tool schema present or evicted."""
        if spec.condition not in ("present", "evicted"):
            raise InvalidArgumentError(f"schema condition {spec.condition!r}")
        reg = self.present if spec.condition == "present" else self.evicted
        result = reg.compile(separator=SEPARATOR)
        return _prompt(
            result,
            SCHEMA_SYSTEM,
            compose(result.prompt, self.task, spec.placement),
            tuple(result.tools("openai")),
            self.schema_block,
            self.target,
        )


def _prompt(
    result: CompileResult,
    system: str,
    user: str,
    tools: tuple[dict[str, Any], ...],
    target_id: str,
    target: str,
) -> Prompt:
    ids = result.included_ids
    return Prompt(
        messages=({"role": "system", "content": system}, {"role": "user", "content": user}),
        tools=tools,
        context_tokens=result.total_tokens,
        blocks=len(result),
        target_included=target_id in ids,
        target=target,
        stable_prefix_tokens=result.stable_prefix_tokens,
        target_index=ids.index(target_id) if target_id in ids else None,
    )


# ---- trial plans ----------------------------------------------------------------------


def sweep_plan(
    positions: Sequence[int], placements: Sequence[str], groups: Sequence[int], trials: int
) -> Iterator[TrialSpec]:
    """Placement, group, position, trial: consecutive prompts share the longest prefixes
    (an in-process model reuses their KV cache)."""
    for placement in placements:
        for group in groups:
            condition = placement if group == 0 else f"{placement}+group{group}"
            for position in positions:
                for t in range(trials):
                    yield TrialSpec("sweep", condition, placement, position, group, t)


def gating_plan(positions: Sequence[int], placement: str, trials: int) -> Iterator[TrialSpec]:
    """Full registry and gated registry at each position; the critical block promoted to
    the front, whose prompt does not depend on where it started: recorded at position
    0, with as many trials (distinct seeds) as each other condition has in all, so the
    three success rates rest on samples of one size."""
    for t in range(trials * len(positions)):
        yield TrialSpec("gating", "promoted", placement, 0, 0, t)
    for condition in ("full", "gated"):
        for position in positions:
            for t in range(trials):
                yield TrialSpec("gating", condition, placement, position, 0, t)


def layout_plan(positions: Sequence[int], placement: str, trials: int) -> Iterator[TrialSpec]:
    """The ``gating-layout`` experiment: the gated registry with its ungated head
    interleaved (today's layout) and in front (cache-aware), at each position."""
    for condition in LAYOUT_CONDITIONS:
        for position in positions:
            for t in range(trials):
                yield TrialSpec("gating-layout", condition, placement, position, 0, t)


def schema_plan(position: int, placement: str, trials: int) -> Iterator[TrialSpec]:
    """The trials of the schema probe: ``trials`` each with the schema present and
    evicted, at ``position``, task ``placement``."""
    for condition in ("present", "evicted"):
        for t in range(trials):
            yield TrialSpec("schema", condition, placement, position, 0, t)


def parse_positions(spec: Sequence[int] | str | None, n_blocks: int) -> list[int]:
    """``None``/"all" = 0..n-1; a list of ints; or text: numbers and ranges (``0-6,10,30``)."""
    if spec is None or (isinstance(spec, str) and spec.strip().lower() == "all"):
        return list(range(n_blocks))
    out: list[int] = []
    if not isinstance(spec, str):
        out = [int(p) for p in spec]
    else:
        for part in spec.split(","):
            part = part.strip()
            try:
                if "-" in part[1:]:
                    lo, hi = part.split("-", 1)
                    out.extend(range(int(lo), int(hi) + 1))
                else:
                    out.append(int(part))
            except ValueError:
                raise InvalidArgumentError(
                    f"positions {spec!r}: expected numbers and ranges like 0-6,10,30"
                ) from None
    bad = [p for p in out if not 0 <= p < n_blocks]
    if bad or not out:
        raise InvalidArgumentError(
            f"positions {bad or spec!r}: expected positions in 0..{n_blocks - 1}"
        )
    return sorted(set(out))
