"""Stateful property test: a real ``rampart.BlockRegistry`` and the pure-Python
``ModelRegistry`` (tests/pymodel.py) driven side by side with random operations,
compared after every step (docs/specification.md §3).

The registry uses a word-count tokeniser so that the model knows every block's
cost without cl100k, and ``default_max_tokens=None`` so that ``compile()`` with
no budget means "no budget".

The model uses the registry's runtime ids as its ids: every write goes to the
registry first, then to the model under the id the registry returned. Authors are
registry ids (``BlockRegistry.registry_id``) in the model and registry objects in
the calls.

Access counts across ``restore``: ``BlockRegistry.restore`` documents that it puts
the registry back "exactly as the snapshot saw it (blocks, order, metadata, access
counts)", matching docs/specification.md §3 ("restores blocks, order and metadata"). The model
implements that: a restored block gets the access count its block had when the
snapshot was taken. (An earlier build documented "access counts stay as the blocks
have them now"; set ``RESTORE_KEEPS_SNAPSHOT_COUNTS = False`` to model that
contract instead: the count the copied block has at restore time, or its last
count if it has left the registry since the snapshot.)
"""

from __future__ import annotations

import dataclasses
import uuid

import pytest
import rampart
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)
from rampart import (
    BlockNotFoundError,
    BlockPermissionError,
    EvictionError,
    OrchestratorMutationError,
    SeedMutationError,
)

try:
    from tests.pymodel import ModelBlock, ModelRegistry
except ImportError:  # tests/ itself on sys.path (pytest rootdir-less import)
    from pymodel import ModelBlock, ModelRegistry  # type: ignore[no-redef]

RESTORE_KEEPS_SNAPSHOT_COUNTS = True


def word_tokens(text: str) -> int:
    """Deterministic tokeniser: whitespace-separated words."""
    return len(text.split())


# ---- strategies -------------------------------------------------------------------------

WORDS = ["alpha", "beta", "gamma", "delta", "x", "run", "the", "tests"]
contents = st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join)
names = st.sampled_from(["rules", "style", "tool", "plan", "note", "heuristic"])
priorities = st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0.0, 1.0))
trajectories = st.sampled_from([None, "t1", "t2", "t3"])
# Out-of-range positions in both directions, but inside i64 arithmetic for the core
# (the extremes have their own tests below).
positions = st.one_of(
    st.integers(-60, 60),
    st.sampled_from([10**9, -(10**9), 2**62, -(2**62)]),
)
steps_values = st.one_of(
    st.integers(-60, 60),
    st.sampled_from([10**9, -(10**9), 2**62, -(2**62)]),
)
budgets = st.one_of(
    st.none(),
    st.just(0),
    st.integers(1, 12),
    st.integers(13, 200),
    st.just(10**9),
)
separators = st.sampled_from([None, "", " ", "\n\n", " | ", " sep sep ", "\n---\n"])
wrap_texts = st.sampled_from(["", "<c>", "<critical> ", " </critical>", "NOTE: read this "])


def gate_score(content: str) -> float:
    """A deterministic relevance score with many ties (tests tie-breaks)."""
    return (len(content) % 5) / 4.0


def gate_fn(task_text: str, blocks):
    return [gate_score(b.content) for b in blocks]


class RegistryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.reg = rampart.BlockRegistry(tokeniser=word_tokens, default_max_tokens=None)
        # Other registries act as authors (shared-registry coordination).
        self.others = [rampart.BlockRegistry(tokeniser=word_tokens) for _ in range(2)]
        self.model = ModelRegistry(registry_id=self.reg.registry_id)
        # Every ModelBlock ever created, by id. Blocks are mutated in place while
        # they are in the model, so a departed block keeps its last access count.
        self.all_blocks: dict[str, ModelBlock] = {}
        self.seen_ids: set[str] = set()
        # (snapshot, [(id at snapshot time, frozen ModelBlock copy)])
        self.snapshots: list[tuple[rampart.Snapshot, list[tuple[str, ModelBlock]]]] = []

    def teardown(self) -> None:
        self.reg.release()
        for o in self.others:
            o.release()

    # ---- helpers ----------------------------------------------------------------------

    def actor(self, index: int) -> rampart.BlockRegistry | None:
        """index 0: default (None, this registry), 1: this registry explicitly, 2+: others."""
        if index == 0:
            return None
        if index == 1:
            return self.reg
        return self.others[index - 2]

    def actor_id(self, actor: rampart.BlockRegistry | None) -> str:
        return self.reg.registry_id if actor is None else actor.registry_id

    def pick_id(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from(self.model.ids()), label="id")

    def dead_ids(self) -> list[str]:
        return sorted(self.seen_ids - set(self.model.blocks))

    def assert_unchanged(self, ids_before: list[str]) -> None:
        assert self.reg.runtime_ids() == ids_before == self.model.ids()

    def sep_of(self, separator: str | None) -> str:
        return rampart.DEFAULT_SEPARATOR if separator is None else separator

    # ---- write --------------------------------------------------------------------------

    @rule(
        kind=st.sampled_from(["agent", "orchestrator", "seed"]),
        content=contents,
        name=names,
        priority=priorities,
        trajectory=trajectories,
        evictable=st.booleans(),
        author=st.integers(0, 3),
        position=st.one_of(st.none(), positions),
        tags=st.lists(st.sampled_from(["a", "b", "tool"]), max_size=2, unique=True),
    )
    def write_block(
        self, kind, content, name, priority, trajectory, evictable, author, position, tags
    ) -> None:
        if kind == "seed":
            # seed-like: non-evictable, written by this registry
            evictable, author_obj, trajectory = False, None, None
        else:
            author_obj = self.actor(author)
        if kind == "orchestrator":
            trajectory = None
        kwargs = {}
        if position is not None:
            kwargs["position"] = position
        if author_obj is not None:
            kwargs["author"] = author_obj
        rid = self.reg.write_block(
            content,
            name,
            source=kind,
            priority=priority,
            trajectory_id=trajectory,
            tags=tags,
            evictable=evictable,
            **kwargs,
        )
        assert isinstance(rid, str)
        assert str(uuid.UUID(rid)) == rid and uuid.UUID(rid).version == 4
        assert rid not in self.seen_ids, "runtime ids are never reused"
        self.seen_ids.add(rid)
        block = ModelBlock(
            runtime_id=rid,
            name=name,
            content=content,
            tokens=word_tokens(content),
            priority=float(priority),
            source=kind,
            author=self.actor_id(author_obj),
            evictable=evictable,
            trajectory=trajectory,
            tags=tuple(tags),
        )
        self.all_blocks[rid] = block
        self.model.write(block, position=position, front=(kind == "orchestrator"))

    # ---- promote --------------------------------------------------------------------------

    @precondition(lambda self: len(self.model.blocks) > 0)
    @rule(
        data=st.data(),
        directive=st.sampled_from(
            [
                "steps",
                "to_position",
                "before",
                "after",
                "to_front",
                "to_back",
                "promote_to_front",
                "demote_to_back",
                "demote",
            ]
        ),
        steps=steps_values,
        position=positions,
    )
    def promote(self, data, directive, steps, position) -> None:
        rid = self.pick_id(data)
        if directive == "steps":
            got = self.reg.promote(rid, steps=steps)
            want = self.model.move_by(rid, steps)
        elif directive == "demote":
            got = self.reg.demote(rid, steps)
            want = self.model.move_by(rid, -steps)
        elif directive == "to_position":
            got = self.reg.promote(rid, to_position=position)
            want = self.model.move_to(rid, position)
        elif directive in ("before", "after"):
            anchor = self.pick_id(data)  # may be rid itself
            got = self.reg.promote(rid, **{directive: anchor})
            want = self.model.move_next_to(rid, anchor, after=(directive == "after"))
        elif directive in ("to_front", "promote_to_front"):
            got = (
                self.reg.promote(rid, to_front=True)
                if directive == "to_front"
                else self.reg.promote_to_front(rid)
            )
            want = self.model.move_to(rid, 0)
        else:
            got = (
                self.reg.promote(rid, to_back=True)
                if directive == "to_back"
                else self.reg.demote_to_back(rid)
            )
            want = self.model.move_to(rid, len(self.model.blocks))
        assert got == want
        assert self.reg.index_of(rid) == want

    @rule(data=st.data(), position=positions, as_reorder=st.booleans())
    def promote_group(self, data, position, as_reorder) -> None:
        """promote_group (random subset, random order, random position) or reorder."""
        ids = self.model.ids()
        perm = data.draw(st.permutations(ids), label="perm")
        k = data.draw(st.integers(0, len(ids)), label="group size")
        group = list(perm[:k])
        if as_reorder:
            assert self.reg.reorder(group) is None
            self.model.promote_group(group, 0)
        else:
            got = self.reg.promote_group(group, to_position=position)
            want = self.model.promote_group(group, position)
            assert got == want

    # ---- evict / rollback ---------------------------------------------------------------

    @precondition(lambda self: len(self.model.blocks) > 0)
    @rule(data=st.data(), force=st.booleans(), by=st.integers(0, 3))
    def evict(self, data, force, by) -> None:
        rid = self.pick_id(data)
        b = self.model.blocks[rid]
        actor = self.actor(by)
        before = self.reg.runtime_ids()
        kwargs = {"force": force}
        if actor is not None:
            kwargs["by"] = actor
        if b.evictable or (force and self.actor_id(actor) == b.author):
            gone = self.reg.evict(rid, **kwargs)
            assert gone.runtime_id == rid and gone.semantic_name == b.name
            self.model.evict(rid, force=force, actor=self.actor_id(actor))
            assert rid not in self.reg
        elif not force:
            with pytest.raises(EvictionError):
                self.reg.evict(rid, **kwargs)
            self.assert_unchanged(before)
        else:
            with pytest.raises(PermissionError) as exc:
                self.reg.evict(rid, **kwargs)
            assert isinstance(exc.value, BlockPermissionError)
            self.assert_unchanged(before)

    @rule(trajectory=st.sampled_from(["t1", "t2", "t3", "nope"]), by=st.integers(0, 3))
    def rollback_trajectory(self, trajectory, by) -> None:
        actor = self.actor(by)
        kwargs = {} if actor is None else {"by": actor}
        got = self.reg.rollback_trajectory(trajectory, **kwargs)
        want = self.model.rollback(trajectory, actor=self.actor_id(actor))
        assert got == want

    @rule(n=st.one_of(st.integers(0, 4), st.none()), use_none=st.integers(0, 9))
    def evict_by_policy(self, n, use_none) -> None:
        if n is None and use_none != 0:  # evicting everything evictable: keep it rare
            n = 1
        got = self.reg.evict_by_policy(n)
        want = self.model.evict_by_policy(n)
        assert got == want

    # ---- change -------------------------------------------------------------------------

    @precondition(lambda self: len(self.model.blocks) > 0)
    @rule(data=st.data(), priority=priorities)
    def update_priority(self, data, priority) -> None:
        rid = self.pick_id(data)
        before = self.reg.runtime_ids()
        self.reg.update_priority(rid, priority)
        self.model.blocks[rid].priority = float(priority)
        assert self.reg.runtime_ids() == before, "priority never reorders"

    @precondition(lambda self: len(self.model.blocks) > 0)
    @rule(data=st.data(), gated=st.booleans())
    def set_gated(self, data, gated) -> None:
        """docs/specification.md §8: an ungated block is never removed by the gate; order
        unchanged."""
        rid = self.pick_id(data)
        before = self.reg.runtime_ids()
        self.reg.set_gated(rid, gated)
        self.model.blocks[rid].gated = gated
        assert self.reg.get_by_id(rid).gated is gated
        assert self.reg.runtime_ids() == before, "the gate flag never reorders"

    @precondition(lambda self: len(self.model.blocks) > 0)
    @rule(data=st.data(), prefix=wrap_texts, suffix=wrap_texts)
    def set_wrap(self, data, prefix, suffix) -> None:
        rid = self.pick_id(data)
        self.reg.set_wrap(rid, prefix, suffix)
        b = self.model.blocks[rid]
        b.wrap_prefix, b.wrap_suffix = prefix, suffix
        b.wrap_tokens = word_tokens(prefix) + word_tokens(suffix)

    @precondition(lambda self: len(self.model.blocks) > 0)
    @rule(data=st.data(), content=contents, by=st.integers(0, 3))
    def update_block_content(self, data, content, by) -> None:
        rid = self.pick_id(data)
        b = self.model.blocks[rid]
        actor = self.actor(by)
        kwargs = {} if actor is None else {"by": actor}
        if b.source == "seed":
            with pytest.raises(SeedMutationError):
                self.reg.update_block_content(rid, content, **kwargs)
        elif b.source == "orchestrator":
            with pytest.raises(OrchestratorMutationError):
                self.reg.update_block_content(rid, content, **kwargs)
        elif self.actor_id(actor) != b.author:
            with pytest.raises(PermissionError):
                self.reg.update_block_content(rid, content, **kwargs)
        else:
            self.reg.update_block_content(rid, content, **kwargs)
            b.content, b.tokens = content, word_tokens(content)

    # ---- compile ----------------------------------------------------------------------------

    def _expected(self, budget, separator, gate, threshold, top_k, count_access):
        sep = self.sep_of(separator)
        sep_tokens = word_tokens(sep)
        admitted = None
        if gate:
            ids = self.model.ids()
            gated = [self.model.blocks[i].gated for i in ids]
            scores = [gate_score(self.model.blocks[i].content) for i in ids]
            # Ungated blocks pass whatever their score and take no top-k place.
            ok = [threshold is None or s >= threshold for s in scores]
            if top_k is not None:
                cands = sorted(
                    (k for k in range(len(ids)) if ok[k] and gated[k]),
                    key=lambda k: (-scores[k], k),
                )
                keep = set(cands[:top_k])
                ok = [k in keep for k in range(len(ids))]
            admitted = {i for i, a, g in zip(ids, ok, gated) if a or not g}
        prompt, included, excluded, total = self.model.compile(
            budget, sep_tokens, sep, admitted=admitted, count_access=count_access
        )
        # Ids and costs of the included blocks: the first len(included) admitted blocks.
        admitted_ids = [i for i in self.model.ids() if admitted is None or i in admitted]
        inc_ids = admitted_ids[: len(included)]
        costs = [
            self.model.blocks[i].tokens
            + self.model.blocks[i].wrap_tokens
            + (sep_tokens if k else 0)
            for k, i in enumerate(inc_ids)
        ]
        return prompt, included, excluded, total, inc_ids, costs, admitted, sep_tokens

    def _check_stable_prefix(self, res, inc_ids, costs, use_gate, separator) -> None:
        """docs/specification.md §8: the prefix ends before the first gated block when a
        gate ran."""
        ids = self.model.ids()
        first = next((k for k, i in enumerate(ids) if self.model.blocks[i].gated), None)
        if not use_gate or first is None:
            n_stable = len(inc_ids)
        else:
            n_stable = sum(1 for i in inc_ids if ids.index(i) < first)
        assert res.stable_prefix_tokens == sum(costs[:n_stable])
        parts = [
            self.model.blocks[i].wrap_prefix
            + self.model.blocks[i].content
            + self.model.blocks[i].wrap_suffix
            for i in inc_ids[:n_stable]
        ]
        assert res.stable_prefix == self.sep_of(separator).join(parts)
        assert res.prompt.startswith(res.stable_prefix)

    def _check_report(self, report, inc_ids, admitted, budget, total, sep_tokens) -> None:
        ids = self.model.ids()
        assert [r.runtime_id for r in report] == ids
        assert [r.index for r in report] == list(range(len(ids)))
        inc = set(inc_ids)
        stopped = False
        for r in report:
            b = self.model.blocks[r.runtime_id]
            assert r.name == b.name
            assert r.included == (r.runtime_id in inc)
            if r.included:
                assert r.reason is None
            elif admitted is not None and r.runtime_id not in admitted:
                assert r.reason == "gate"
                assert r.score == gate_score(b.content)
            else:
                assert r.reason == "budget"
                if not stopped:  # the block the walk stopped at
                    stopped = True
                    assert budget is not None
                    assert r.cost == b.tokens + b.wrap_tokens + (sep_tokens if inc else 0)
                    assert total + r.cost > budget

    @rule(
        budget=budgets,
        separator=separators,
        gate=st.integers(0, 3),
        threshold=st.one_of(st.none(), st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])),
        top_k=st.one_of(st.none(), st.integers(0, 6)),
        dry=st.booleans(),
        times=st.integers(1, 3),
    )
    def compile(self, budget, separator, gate, threshold, top_k, dry, times) -> None:
        """compile / compile_dry_run, repeated up to 3 times with the same arguments
        (an unchanged registry may reuse the previous prompt; counts still move)."""
        for _ in range(times):
            self._compile_once(budget, separator, gate, threshold, top_k, dry)

    def _compile_once(self, budget, separator, gate, threshold, top_k, dry) -> None:
        use_gate = gate == 0 and (threshold is not None or top_k is not None)
        kwargs = {"separator": separator}
        if budget is not None:
            kwargs["max_tokens"] = budget
        if use_gate:
            kwargs.update(
                task_text="a task", gate=gate_fn, relevance_threshold=threshold, top_k=top_k
            )
        before_ids = self.reg.runtime_ids()
        prompt, included, excluded, total, inc_ids, costs, admitted, sep_tokens = self._expected(
            budget, separator, use_gate, threshold, top_k, count_access=not dry
        )
        if dry:
            counts_before = {i: self.reg.get_by_id(i).access_count for i in before_ids}
            res = self.reg.compile_dry_run(**kwargs)
            assert res.included == list(zip(included, costs))
            assert res.excluded == excluded
            assert res.total_tokens == total
            assert {i: self.reg.get_by_id(i).access_count for i in before_ids} == counts_before
        else:
            res = self.reg.compile(**kwargs)
            assert res.prompt == prompt
            assert str(res) == prompt
            assert res.included == included
            assert res.excluded == excluded
            assert res.total_tokens == total
            assert res.included_ids == inc_ids
            assert res.costs == costs
            assert len(res) == len(included)
            assert [b.runtime_id for b in res.included_blocks] == inc_ids
            assert res.max_tokens == budget
        assert sum(costs) == total
        if budget is not None:
            assert total <= budget
        if not dry:
            self._check_stable_prefix(res, inc_ids, costs, use_gate, separator)
        self._check_report(res.report, inc_ids, admitted, budget, total, sep_tokens)
        assert self.reg.runtime_ids() == before_ids, "compile never reorders"

    # ---- snapshot / restore -------------------------------------------------------------------

    @rule()
    def snapshot(self) -> None:
        snap = self.reg.snapshot()
        frozen = [(rid, dataclasses.replace(b)) for rid, b in self.model.blocks.items()]
        assert len(snap) == len(frozen)
        assert [b.runtime_id for b in snap.blocks()] == [rid for rid, _ in frozen]
        assert snap.registry_id == self.reg.registry_id
        self.snapshots.append((snap, frozen))
        del self.snapshots[:-3]

    @precondition(lambda self: len(self.snapshots) > 0)
    @rule(data=st.data())
    def restore(self, data) -> None:
        snap, frozen = data.draw(st.sampled_from(self.snapshots), label="snapshot")
        # The snapshot still shows the picture it took (access counts: see
        # test_snapshot_is_immutable_including_access_counts).
        shown = [
            (b.runtime_id, b.semantic_name, b.content, b.priority, b.wrap_prefix, b.wrap_suffix)
            for b in snap.blocks()
        ]
        assert shown == [
            (rid, b.name, b.content, b.priority, b.wrap_prefix, b.wrap_suffix) for rid, b in frozen
        ]
        # Access counts the restored blocks should have (see module docstring).
        counts = [
            b.access_count if RESTORE_KEEPS_SNAPSHOT_COUNTS else self.all_blocks[rid].access_count
            for rid, b in frozen
        ]
        me = self.reg.registry_id

        def pinned(b: ModelBlock) -> bool:
            # Pinned by another registry: a restore leaves it alone (it neither
            # removes it nor brings it back once its author evicted it).
            return not b.evictable and b.author != me

        in_snap = {rid for rid, _ in frozen}
        current = self.model.blocks
        plan = [(rid, b, None) for rid, b in current.items() if pinned(b) and rid not in in_snap]
        for (rid, b), n in zip(frozen, counts):
            if pinned(b):
                if rid in current:
                    plan.append((rid, current[rid], None))
            else:
                plan.append((None, b, n))
        self.reg.restore(snap)
        new_ids = self.reg.runtime_ids()
        assert len(new_ids) == len(plan)
        kept = {rid for rid, _, _ in plan if rid is not None}
        fresh = [n for (rid, _, _), n in zip(plan, new_ids) if rid is None]
        assert not set(fresh) & self.seen_ids, "restore gives every restored block a new id"
        for old in self.seen_ids - kept:
            assert old not in self.reg
        for new in new_ids:
            assert str(uuid.UUID(new)) == new
        model = ModelRegistry(registry_id=self.reg.registry_id)
        for new, (rid, b, n) in zip(new_ids, plan):
            if rid is not None:
                assert new == rid
                model.write(b)
                continue
            nb = dataclasses.replace(b, runtime_id=new, access_count=n)
            self.all_blocks[new] = nb
            model.write(nb)
        self.model = model
        self.seen_ids.update(new_ids)

    # ---- calls that must fail and change nothing -------------------------------------------

    @rule(
        data=st.data(),
        op=st.sampled_from(
            [
                "evict",
                "promote",
                "update_priority",
                "set_wrap",
                "index_of",
                "get",
                "group",
                "content",
                "two_directives",
                "no_directive",
                "duplicate_group",
                "duplicate_reorder",
                "bad_priority",
                "bad_write",
                "gate_without_task",
                "foreign_snapshot",
            ]
        ),
    )
    def invalid_call(self, data, op) -> None:
        before = self.reg.runtime_ids()
        counts = [self.reg.get_by_id(i).access_count for i in before]
        live = self.model.ids()
        if op in (
            "evict",
            "promote",
            "update_priority",
            "set_wrap",
            "index_of",
            "get",
            "group",
            "content",
        ):
            # an unknown id: evicted earlier, replaced by a restore, random, or malformed
            candidates = [*self.dead_ids(), str(uuid.uuid4()), "not-a-uuid"]
            rid = data.draw(st.sampled_from(candidates), label="unknown id")
            with pytest.raises(BlockNotFoundError) as exc:
                if op == "evict":
                    self.reg.evict(rid, force=True)
                elif op == "promote":
                    self.reg.promote(rid, to_front=True)
                elif op == "update_priority":
                    self.reg.update_priority(rid, 0.3)
                elif op == "set_wrap":
                    self.reg.set_wrap(rid, "<a>", "</a>")
                elif op == "index_of":
                    self.reg.index_of(rid)
                elif op == "get":
                    self.reg.get_by_id(rid)
                elif op == "content":
                    self.reg.update_block_content(rid, "new text")
                else:
                    self.reg.promote_group([*live[:1], rid])
            assert isinstance(exc.value, KeyError)
            assert rid not in self.reg
        elif op in (
            "two_directives",
            "no_directive",
            "duplicate_group",
            "duplicate_reorder",
            "bad_priority",
        ):
            if not live:
                return
            rid = self.pick_id(data)
            with pytest.raises(ValueError):
                if op == "two_directives":
                    kw = data.draw(
                        st.sampled_from(
                            [
                                {"steps": 1, "to_front": True},
                                {"to_position": 0, "before": rid},
                                {"to_front": True, "to_back": True},
                                {"after": rid, "steps": 0},
                            ]
                        )
                    )
                    self.reg.promote(rid, **kw)
                elif op == "no_directive":
                    self.reg.promote(rid)
                elif op == "duplicate_group":
                    self.reg.promote_group(
                        [rid, *[i for i in live if i != rid][:1], rid], to_position=1
                    )
                elif op == "duplicate_reorder":
                    self.reg.reorder([rid, rid])
                else:
                    bad = data.draw(st.sampled_from([-0.1, 1.5, float("nan"), True]))
                    self.reg.update_priority(rid, bad)
        elif op == "bad_write":
            bad = data.draw(
                st.sampled_from(
                    [
                        {"source": "system"},
                        {"priority": 2.0},
                        {"semantic_name": "  "},
                        {"author": self.others[0].registry_id},
                        {"position": 1.5},
                    ]
                )
            )
            kwargs = {"content": "text", "semantic_name": "n", **bad}
            with pytest.raises(ValueError):
                self.reg.write_block(**kwargs)
        elif op == "gate_without_task":
            with pytest.raises(ValueError):
                self.reg.compile(relevance_threshold=0.5)
            with pytest.raises(ValueError):
                self.reg.compile_dry_run(top_k=1)
        else:
            with pytest.raises(ValueError):
                self.reg.restore(self.others[0].snapshot())
        self.assert_unchanged(before)
        assert [self.reg.get_by_id(i).access_count for i in before] == counts

    # ---- after every step -----------------------------------------------------------------

    @invariant()
    def matches_model(self) -> None:
        ids = self.reg.runtime_ids()
        assert ids == self.model.ids()
        assert len(set(ids)) == len(ids)
        assert len(self.reg) == len(ids)
        assert [b.semantic_name for b in self.reg.list_blocks()] == self.model.names()
        for k, rid in enumerate(ids):
            got = self.reg.get_by_id(rid)
            want = self.model.blocks[rid]
            assert rid in self.reg
            assert got.runtime_id == rid
            assert got.access_count == want.access_count, (got, want)
            assert (got.semantic_name, got.content, got.token_count) == (
                want.name,
                want.content,
                want.tokens,
            )
            assert got.priority == want.priority
            assert (got.source, got.author_id, got.evictable, got.trajectory_id) == (
                want.source,
                want.author,
                want.evictable,
                want.trajectory,
            )
            assert (got.wrap_prefix, got.wrap_suffix) == (want.wrap_prefix, want.wrap_suffix)
            assert got.cost == want.tokens + want.wrap_tokens
            assert got.tags == want.tags
        if ids:
            # index_of is position lookup by pointer: spot-check the ends.
            assert self.reg.index_of(ids[0]) == 0
            assert self.reg.index_of(ids[-1]) == len(ids) - 1


RegistryMachine.TestCase.settings = settings(
    # ~15-20 s on 2 cores when it passes (most of it is Hypothesis' own overhead);
    # a failure adds shrinking time.
    max_examples=250,
    stateful_step_count=80,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestRegistryMachine = RegistryMachine.TestCase


# ---- directed tests for things the machine keeps out of its value ranges -------------------


def _registry(n: int = 4) -> tuple[rampart.BlockRegistry, list[str]]:
    reg = rampart.BlockRegistry(tokeniser=word_tokens, default_max_tokens=None)
    return reg, [reg.write_block(f"content {i}", f"b{i}") for i in range(n)]


def _names(reg: rampart.BlockRegistry) -> list[str]:
    return [b.semantic_name for b in reg.list_blocks()]


@pytest.mark.parametrize("start", [0, 1, 2, 3])
@pytest.mark.parametrize("steps", [-(2**63), -(2**63) + 1, -(2**62) * 3 // 2])
def test_large_negative_steps_clamp_to_back(start: int, steps: int) -> None:
    """docs/specification.md §3: positions clamp. Moving "toward the front" by a huge
    negative number of steps is a move to the back, whatever the start index (i64 edge
    values)."""
    reg, ids = _registry()
    rid = reg.runtime_ids()[start]
    assert reg.promote(rid, steps=steps) == 3
    assert reg.runtime_ids()[-1] == rid
    reg2, _ = _registry()
    rid2 = reg2.runtime_ids()[start]
    assert reg2.demote(rid2, -steps) == 3


@pytest.mark.parametrize("value", [2**63, 10**30, -(2**63) - 1, -(10**30)])
def test_positions_beyond_i64_clamp(value: int) -> None:
    """docs/specification.md §3: "positions clamp"; §6: every error is a RampartError.
    An int outside i64 must clamp like any other out-of-range position, not raise
    OverflowError."""
    reg, ids = _registry()
    front = value < 0
    want = 0 if front else 3
    assert reg.promote(ids[1], to_position=value) == want
    assert reg.promote(ids[2], steps=-value) == want
    assert reg.promote_group([ids[3]], to_position=value) == want
    rid = reg.write_block("new", "new", position=value)
    assert reg.index_of(rid) == (0 if front else 4)


@given(
    st.lists(st.integers(1, 5), min_size=1, max_size=8),
    st.one_of(st.none(), st.integers(0, 40)),
    separators,
)
@settings(max_examples=100, deadline=None, database=None)
def test_budget_walk_matches_model(costs: list[int], budget: int | None, separator) -> None:
    """compile and the model agree on fresh registries (fast, many shapes)."""
    reg = rampart.BlockRegistry(tokeniser=word_tokens, default_max_tokens=None)
    model = ModelRegistry(reg.registry_id)
    for k, c in enumerate(costs):
        content = " ".join(["w"] * c)
        rid = reg.write_block(content, f"b{k}")
        model.write(ModelBlock(rid, f"b{k}", content, c, author=reg.registry_id))
    sep = rampart.DEFAULT_SEPARATOR if separator is None else separator
    prompt, inc, exc, total = model.compile(budget, word_tokens(sep), sep)
    res = reg.compile(budget, separator=separator)
    assert (res.prompt, res.included, res.excluded, res.total_tokens) == (prompt, inc, exc, total)
    reg.release()


def test_restore_access_counts_do_not_depend_on_block_versions() -> None:
    """Two blocks compiled the same number of times must come back from a restore
    with the same count, whether or not one of them had its priority (or wrap)
    changed after the snapshot (a change makes a new block version)."""
    reg, (a, b) = _registry(2)
    reg.compile()
    snap = reg.snapshot()
    reg.update_priority(a, 0.9)  # replaces a's block version
    reg.set_wrap(b, "", "")  # no-op wrap change: replaces b's version too
    reg.compile()
    reg.compile()
    assert [reg.get_by_id(i).access_count for i in (a, b)] == [3, 3]
    reg.restore(snap)
    want = [1, 1] if RESTORE_KEEPS_SNAPSHOT_COUNTS else [3, 3]
    assert [blk.access_count for blk in reg.list_blocks()] == want


def test_restore_access_counts_of_blocks_evicted_since_the_snapshot() -> None:
    """The same rule for blocks that left the registry after the snapshot: each comes
    back with the count it had when it left. Two blocks compiled twice and then
    evicted must both come back with 2, whether or not one of them had its priority
    changed in between (the count must not be that of a superseded block version)."""
    reg, (a, b) = _registry(2)
    snap = reg.snapshot()
    reg.update_priority(a, 0.9)
    reg.compile()
    reg.compile()
    assert [reg.get_by_id(i).access_count for i in (a, b)] == [2, 2]
    reg.evict(a)
    reg.evict(b)
    reg.restore(snap)
    want = [0, 0] if RESTORE_KEEPS_SNAPSHOT_COUNTS else [2, 2]
    assert [blk.access_count for blk in reg.list_blocks()] == want


def test_snapshot_is_immutable_including_access_counts() -> None:
    """docs/specification.md §3: ``snapshot() -> Snapshot (cheap, immutable)``. The
    blocks a snapshot shows must be the picture it took, and agree with what ``restore`` puts back:
    compiling after the snapshot must not change ``snapshot.blocks()``."""
    reg, (a,) = _registry(1)
    reg.compile()
    snap = reg.snapshot()
    assert [b.access_count for b in snap.blocks()] == [1]
    reg.compile()
    reg.compile()
    reg.update_priority(a, 0.1)
    assert [(b.access_count, b.priority) for b in snap.blocks()] == [(1, 0.5)]
    reg.restore(snap)
    want = 1 if RESTORE_KEEPS_SNAPSHOT_COUNTS else 3
    assert [b.access_count for b in reg.list_blocks()] == [want]
