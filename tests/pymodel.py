"""A small pure-Python model of the registry semantics (docs/specification.md §3), built on an
OrderedDict the straightforward way.

Two uses: the hypothesis state machine drives it beside the Rust core and compares
them after every step, and the benchmarks use it as the baseline that the Rust
compile is measured against (same semantics, same inputs).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field


@dataclass
class ModelBlock:
    runtime_id: str
    name: str
    content: str
    tokens: int
    priority: float = 0.5
    source: str = "agent"
    author: str = ""
    evictable: bool = True
    trajectory: str | None = None
    wrap_prefix: str = ""
    wrap_suffix: str = ""
    wrap_tokens: int = 0
    access_count: int = 0
    tags: tuple[str, ...] = field(default_factory=tuple)
    gated: bool = True


class ModelRegistry:
    """OrderedDict ``runtime_id -> ModelBlock``; order is the dict order."""

    def __init__(self, registry_id: str = "self") -> None:
        self.registry_id = registry_id
        self.blocks: OrderedDict[str, ModelBlock] = OrderedDict()

    # -- order helpers ------------------------------------------------------------
    def ids(self) -> list[str]:
        return list(self.blocks)

    def names(self) -> list[str]:
        return [b.name for b in self.blocks.values()]

    def _set_order(self, ids: list[str]) -> None:
        self.blocks = OrderedDict((i, self.blocks[i]) for i in ids)

    @staticmethod
    def _clamp(pos: int, hi: int) -> int:
        return max(0, min(pos, hi))

    # -- write ---------------------------------------------------------------------
    def write(self, block: ModelBlock, position: int | None = None, front: bool = False) -> str:
        ids = self.ids()
        if position is not None:
            at = self._clamp(position, len(ids))
        elif front:
            at = 0
        else:
            at = len(ids)
        self.blocks[block.runtime_id] = block
        ids.insert(at, block.runtime_id)
        self._set_order(ids)
        return block.runtime_id

    # -- promote -------------------------------------------------------------------
    def move_to(self, rid: str, position: int) -> int:
        ids = self.ids()
        ids.remove(rid)
        at = self._clamp(position, len(ids))
        ids.insert(at, rid)
        self._set_order(ids)
        return at

    def move_by(self, rid: str, steps: int) -> int:
        return self.move_to(rid, self.ids().index(rid) - steps)

    def move_next_to(self, rid: str, anchor: str, after: bool) -> int:
        if rid == anchor:
            return self.ids().index(rid)
        ids = self.ids()
        ids.remove(rid)
        at = ids.index(anchor) + (1 if after else 0)
        ids.insert(at, rid)
        self._set_order(ids)
        return at

    def promote_group(self, group: list[str], position: int) -> int:
        if len(set(group)) != len(group):
            raise ValueError("duplicate ids")
        missing = [g for g in group if g not in self.blocks]
        if missing:
            raise KeyError(missing)
        rest = [i for i in self.ids() if i not in set(group)]
        at = self._clamp(position, len(rest))
        self._set_order(rest[:at] + group + rest[at:])
        return at

    # -- evict / rollback -------------------------------------------------------------
    def evict(self, rid: str, force: bool = False, actor: str | None = None) -> None:
        b = self.blocks[rid]
        actor = actor or self.registry_id
        if not b.evictable:
            if not force:
                raise LookupError("EvictionError")
            if actor != b.author:
                raise PermissionError("not the author")
        del self.blocks[rid]

    def evict_by_policy(self, n: int | None = None) -> list[str]:
        scored = [
            (-(0.5 * (1 - b.priority) + 0.5 / (b.access_count + 1)), k, rid)
            for k, (rid, b) in enumerate(self.blocks.items())
            if b.evictable
        ]
        scored.sort()
        doomed = [rid for _, _, rid in scored[: n if n is not None else len(scored)]]
        for rid in doomed:
            del self.blocks[rid]
        return doomed

    def rollback(self, trajectory: str, actor: str | None = None) -> int:
        actor = actor or self.registry_id
        doomed = [
            rid
            for rid, b in self.blocks.items()
            if b.source == "agent" and b.author == actor and b.trajectory == trajectory
        ]
        for rid in doomed:
            del self.blocks[rid]
        return len(doomed)

    # -- compile ---------------------------------------------------------------------
    def compile(
        self,
        budget: int | None,
        sep_tokens: int,
        separator: str,
        admitted: set[str] | None = None,
        count_access: bool = True,
    ) -> tuple[str, list[str], list[str], int]:
        """(prompt, included names, excluded names, total tokens)."""
        parts: list[str] = []
        included: list[str] = []
        excluded: list[str] = []
        total = 0
        stopped = False
        chosen: list[ModelBlock] = []
        for rid, b in self.blocks.items():
            if stopped or (admitted is not None and rid not in admitted):
                excluded.append(b.name)
                continue
            cost = b.tokens + b.wrap_tokens + (sep_tokens if included else 0)
            if budget is not None and total + cost > budget:
                stopped = True
                excluded.append(b.name)
                continue
            total += cost
            included.append(b.name)
            parts.append(b.wrap_prefix + b.content + b.wrap_suffix)
            chosen.append(b)
        if count_access:
            for b in chosen:
                b.access_count += 1
        return separator.join(parts), included, excluded, total
