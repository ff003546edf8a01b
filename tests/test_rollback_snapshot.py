"""Rollback of a run's writes, and snapshot/restore with new runtime ids."""

from __future__ import annotations

import pytest
import rampart

from tests.conftest import words


def test_rollback_removes_only_that_runs_own_agent_blocks() -> None:
    r = rampart.BlockRegistry(tokeniser=words)
    other = rampart.BlockRegistry(tokeniser=words)
    seed = r.write_block("seed", "seed", source="seed", evictable=False)
    plan = r.write_block("plan", "plan", source="orchestrator", evictable=False, author=other)
    a1 = r.write_agent_block("one", "run-a", "a1", evictable=False)
    r.write_agent_block("two", "run-a", "a2")
    b1 = r.write_agent_block("three", "run-b", "b1")
    theirs = r.write_agent_block("four", "run-a", "theirs", author=other)

    assert r.rollback_trajectory("run-a") == 2, "non-evictable own writes are retracted too"
    assert r.runtime_ids() == [plan, seed, b1, theirs]
    assert a1 not in r
    assert r.rollback_trajectory("run-a") == 0
    assert r.rollback_trajectory("run-a", by=other) == 1
    assert r.runtime_ids() == [plan, seed, b1]
    assert r.rollback_trajectory("no-such-run") == 0


def _state(r: rampart.BlockRegistry) -> list[tuple[object, ...]]:
    """Everything about each block but its runtime id and access count, in order."""
    return [
        (
            b.semantic_name,
            b.content,
            b.priority,
            b.source,
            b.author_id,
            b.tags,
            b.trajectory_id,
            b.wrap_prefix,
            b.evictable,
        )
        for b in r.list_blocks()
    ]


def test_restore_brings_back_blocks_order_and_metadata_under_new_ids() -> None:
    other = rampart.BlockRegistry(tokeniser=words)
    r = rampart.BlockRegistry(tokeniser=words)
    s = r.write_block("seed text", "s", source="seed", evictable=False, tags=["t"])
    p = r.write_block("plan", "p", source="orchestrator", evictable=False, author=other)
    a = r.write_agent_block("note", "run-1", "a", priority=0.7)
    r.set_wrap(a, "<x>", "</x>")
    before = _state(r)
    snap = r.snapshot()
    assert len(snap) == 3

    r.evict(a)
    r.promote(s, to_front=True)
    r.write_agent_block("more", "run-2", "b")
    r.update_priority(s, 0.1)
    assert len(snap) == 3 and snap.blocks()[2].semantic_name == "a", "snapshots are immutable"

    r.restore(snap)
    after = _state(r)
    assert after == before
    new_ids = r.runtime_ids()
    assert not {s, a} & set(new_ids), "every restored block gets a new runtime id"
    # A block pinned by another registry is untouched by a restore: it keeps the
    # id its author holds (docs/coordination.md, restore rows).
    assert p in new_ids
    assert len(set(new_ids)) == 3
    # ownership survives: the author can still force-evict its block
    plan = r.get_by_name("p")[0]
    r.evict(plan.runtime_id, force=True, by=other)


def test_restore_twice_gives_different_ids_and_rejects_foreign_snapshots() -> None:
    r = rampart.BlockRegistry(tokeniser=words)
    r.write_block("x", "x")
    snap = r.snapshot()
    r.restore(snap)
    first = r.runtime_ids()
    r.restore(snap)
    assert r.runtime_ids() != first
    other = rampart.BlockRegistry(tokeniser=words)
    import pytest

    with pytest.raises(ValueError, match="snapshot was taken of registry"):
        other.restore(snap)
    assert len(other) == 0


def test_restore_brings_back_access_counts_as_snapshotted() -> None:
    r = rampart.BlockRegistry(tokeniser=words)
    a = r.write_block("alpha", "a")
    r.compile()
    snap = r.snapshot()
    r.compile()
    r.update_priority(a, 0.9)  # a new version of the block, same id
    r.compile()
    assert r.get_by_id(a).access_count == 3
    r.restore(snap)
    assert r.list_blocks()[0].access_count == 1
    assert r.list_blocks()[0].priority == 0.5
    r.restore(snap)
    assert r.list_blocks()[0].access_count == 1


def test_restore_cannot_remove_or_resurrect_blocks_pinned_by_others() -> None:
    """The capability bypass: a receiver that snapshots before an orchestrator
    pins a block cannot restore it away, nor bring back a pinned block its author
    evicted."""
    boss = rampart.BlockRegistry(tokeniser=words)
    r = rampart.BlockRegistry(tokeniser=words)
    own = r.write_agent_block("note", "run-1", "own")
    old = r.write_block("old order", "old", source="orchestrator", evictable=False, author=boss)
    snap = r.snapshot()
    new = r.write_block("new order", "new", source="orchestrator", evictable=False, author=boss)
    r.evict(old, force=True, by=boss)
    r.evict(own)
    r.restore(snap)
    assert [b.semantic_name for b in r.list_blocks()] == ["new", "own"]
    assert new in r
    with pytest.raises(rampart.BlockPermissionError):
        r.evict(new, force=True)
    r.evict(new, force=True, by=boss)
