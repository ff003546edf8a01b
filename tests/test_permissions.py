"""The permission model: evict, content changes, provenance, shared-registry writes."""

from __future__ import annotations

import pytest
import rampart

from tests.conftest import words


@pytest.fixture
def pair() -> tuple[rampart.BlockRegistry, rampart.BlockRegistry]:
    orch = rampart.BlockRegistry(tokeniser=words, label="orchestrator-under-test")
    worker = rampart.BlockRegistry(tokeniser=words, label="worker-under-test")
    yield orch, worker
    orch.release()
    worker.release()


def test_orchestrator_block_lands_at_front_with_provenance(pair) -> None:
    orch, worker = pair
    worker.write_block("existing", "existing")
    rid = worker.write_block(
        "plan: do X", "plan", source="orchestrator", evictable=False, author=orch
    )
    b = worker.get_by_id(rid)
    assert worker.index_of(rid) == 0
    assert (b.source, b.author_id, b.evictable) == ("orchestrator", orch.registry_id, False)
    pos = worker.write_block("later", "later", source="orchestrator", position=1, author=orch)
    assert worker.index_of(pos) == 1


def test_evict_matrix(pair) -> None:
    orch, worker = pair
    free = worker.write_block("free", "free")
    pinned = worker.write_block(
        "pin", "pinned", source="orchestrator", evictable=False, author=orch
    )
    own_seed = worker.write_block("seed", "own_seed", source="seed", evictable=False)

    # evictable: anyone may remove it, the owner or another registry
    worker.evict(free, by=orch)
    assert free not in worker

    # not evictable, no force: EvictionError naming the author
    with pytest.raises(rampart.EvictionError, match="orchestrator-under-test"):
        worker.evict(pinned)
    # force by a registry that is not the author: PermissionError
    with pytest.raises(PermissionError, match="only its author"):
        worker.evict(pinned, force=True)
    assert pinned in worker, "a failed evict leaves the block"
    # force by the author object: removed
    removed = worker.evict(pinned, force=True, by=orch)
    assert removed.semantic_name == "pinned" and pinned not in worker

    # a registry's own non-evictable blocks: force needed, and enough
    with pytest.raises(rampart.EvictionError):
        worker.evict(own_seed)
    worker.evict(own_seed, force=True)
    assert len(worker) == 0


def test_an_id_string_is_not_a_capability(pair) -> None:
    orch, worker = pair
    pinned = worker.write_block("p", "p", source="orchestrator", evictable=False, author=orch)
    with pytest.raises(ValueError, match="not a capability"):
        worker.evict(pinned, force=True, by=orch.registry_id)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a capability"):
        worker.write_block("x", "x", author=orch.label)  # type: ignore[arg-type]
    assert pinned in worker


def test_unknown_block(pair) -> None:
    _, worker = pair
    with pytest.raises(rampart.BlockNotFoundError) as info:
        worker.evict("5f0c5a3e-7a4e-4f8e-9d7e-2d1c1b0a9f8e")
    assert isinstance(info.value, KeyError) and "worker-under-test" in str(info.value)


def test_content_mutability(pair) -> None:
    orch, worker = pair
    seed = worker.write_block("seed text", "s", source="seed", evictable=False)
    plan = worker.write_block("plan", "p", source="orchestrator", evictable=False, author=orch)
    note = worker.write_agent_block("note one", "run-1", "note")
    foreign = worker.write_agent_block("theirs", "run-9", "foreign", author=orch)

    with pytest.raises(rampart.SeedMutationError, match="seed block"):
        worker.update_block_content(seed, "changed")
    with pytest.raises(rampart.OrchestratorMutationError, match="orchestrator block"):
        worker.update_block_content(plan, "changed")
    with pytest.raises(PermissionError, match="orchestrator-under-test"):
        worker.update_block_content(foreign, "changed")
    worker.update_block_content(foreign, "their new words", by=orch)
    assert worker.get_by_id(foreign).content == "their new words"

    worker.update_block_content(note, "note one two three")
    b = worker.get_by_id(note)
    assert b.content == "note one two three" and b.token_count == 4
    assert worker.index_of(note) == 2, "a content change keeps the block's place"
    assert worker.get_by_id(seed).content == "seed text"


def test_priority_and_wrap_change_on_any_block(pair) -> None:
    orch, worker = pair
    seed = worker.write_block("seed text", "s", source="seed", evictable=False)
    plan = worker.write_block("plan", "p", source="orchestrator", evictable=False, author=orch)
    for rid in (seed, plan):
        worker.update_priority(rid, 0.95)
        worker.set_wrap(rid, "<b>", "</b>")
        assert worker.get_by_id(rid).priority == 0.95
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        worker.update_priority(seed, 1.5)
    with pytest.raises(ValueError):
        worker.update_priority(seed, True)  # type: ignore[arg-type]


def test_write_validation_leaves_registry_unchanged(pair) -> None:
    _, worker = pair
    bad_calls = [
        lambda: worker.write_block("x", "x", source="system"),
        lambda: worker.write_block("x", "x", priority=-0.1),
        lambda: worker.write_block("x", ""),
        lambda: worker.write_block("x", "x", tags="solo"),  # type: ignore[arg-type]
        lambda: worker.write_block("x", "x", tags=["ok", ""]),
        lambda: worker.write_block(3, "x"),  # type: ignore[arg-type]
        lambda: worker.write_agent_block("x", ""),
    ]
    for call in bad_calls:
        with pytest.raises(ValueError):
            call()
    assert len(worker) == 0


def test_evict_by_policy_default_ranking() -> None:
    r = rampart.BlockRegistry(tokeniser=words)
    low = r.write_block("a", "low", priority=0.1)
    high = r.write_block("b", "high", priority=0.9)
    used = r.write_block("c", "used", priority=0.1)
    r.write_block("d", "seed", source="seed", evictable=False, priority=0.0)
    r.compile()  # every block emitted once: access_count 1
    r.compile(max_tokens=1)  # only the first again
    # scores: low 0.45+0.1667, high 0.05+0.25, used 0.45+0.25 → used, low, high
    assert r.evict_by_policy(1) == [used]
    assert r.evict_by_policy(threshold=0.5) == [low]
    assert r.evict_by_policy() == [high]
    assert [b.semantic_name for b in r.list_blocks()] == ["seed"], "never the non-evictable"
    assert r.evict_by_policy() == []


def test_custom_eviction_policy() -> None:
    r = rampart.BlockRegistry(tokeniser=words, eviction_policy=lambda b: len(b.content))
    short = r.write_block("ab", "short")
    long = r.write_block("abcdef", "long")
    assert r.evict_by_policy(1) == [long]
    assert r.runtime_ids() == [short]
