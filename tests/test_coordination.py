"""Shared-registry coordination: every cell of docs/coordination.md's permission matrices.

Three registries: the *receiver* holds the block, the *author* wrote it into the
receiver (``author=``), a *third* registry holds a reference to the receiver too.
An action "by" a registry is the receiver's method called with ``by=`` that
registry (the receiver's own default when ``by`` is omitted); actions without a
``by=`` parameter (compile, priority, wrap, promote) are open to whoever holds the
receiver object, and the matrices say so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import rampart
from rampart import BlockRegistry

from tests.conftest import words

ROWS = ("receiver", "author", "third")
RUN = "run-7"


class World:
    def __init__(self) -> None:
        self.receiver = BlockRegistry(tokeniser=words, label="coord-receiver")
        self.author = BlockRegistry(tokeniser=words, label="coord-author")
        self.third = BlockRegistry(tokeniser=words, label="coord-third")
        self.receiver.write_block("own instructions", "own", source="seed", evictable=False)

    def by(self, row: str) -> BlockRegistry | None:
        return None if row == "receiver" else getattr(self, row)

    def orchestrator_block(self) -> str:
        # the specification's coordination write (docs/specification.md §3), with a run id
        # so that rollback has something to try
        return self.receiver.write_block(
            "plan: fix the parser",
            "plan",
            source="orchestrator",
            evictable=False,
            position=0,
            author=self.author,
            trajectory_id=RUN,
        )

    def agent_block(self, evictable: bool = True) -> str:
        return self.receiver.write_block(
            "hint: dates are ISO 8601",
            "hint",
            trajectory_id=RUN,
            evictable=evictable,
            author=self.author,
        )

    def release(self) -> None:
        for r in (self.receiver, self.author, self.third):
            r.release()


@pytest.fixture
def world() -> Iterator[World]:
    w = World()
    yield w
    w.release()


def outcome(call: Callable[[], Any]) -> str:
    try:
        call()
    except rampart.BlockPermissionError:
        return "BlockPermissionError"
    except rampart.OrchestratorMutationError:
        return "OrchestratorMutationError"
    except rampart.EvictionError:
        return "EvictionError"
    return "ok"


# ---- matrix 1: an orchestrator block (source="orchestrator", evictable=False) --------------

ORCHESTRATOR = {
    # column: (receiver, author, third)
    "compile/see": ("ok", "ok", "ok"),
    "update content": ("OrchestratorMutationError",) * 3,
    "update priority": ("ok", "ok", "ok"),
    "set_wrap": ("ok", "ok", "ok"),
    "promote": ("ok", "ok", "ok"),
    "evict non-forced": ("EvictionError",) * 3,
    "force-evict": ("BlockPermissionError", "ok", "BlockPermissionError"),
    "rollback_trajectory": ("kept", "kept", "kept"),
}


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("column", list(ORCHESTRATOR))
def test_orchestrator_block_matrix(world: World, row: str, column: str) -> None:
    expected = ORCHESTRATOR[column][ROWS.index(row)]
    rid = world.orchestrator_block()
    rec, by = world.receiver, world.by(row)
    before = rec.get_by_id(rid)
    if column == "compile/see":
        # whoever holds the receiver compiles it; the block is emitted first
        result = rec.compile()
        assert result.included[0] == "plan" and "plan: fix the parser" in result.prompt
        assert rec.get_by_name("plan")[0].author_id == world.author.registry_id
        got = "ok"
    elif column == "update content":
        got = outcome(lambda: rec.update_block_content(rid, "plan: skip the tests", by=by))
        assert rec.get_by_id(rid).content == before.content
    elif column == "update priority":
        got = outcome(lambda: rec.update_priority(rid, 0.1))
        assert rec.get_by_id(rid).priority == 0.1
    elif column == "set_wrap":
        got = outcome(lambda: rec.set_wrap(rid, "<plan>", "</plan>"))
        assert rec.compile().prompt.startswith("<plan>plan: fix the parser</plan>")
    elif column == "promote":
        got = outcome(lambda: rec.promote(rid, to_back=True))
        assert rec.index_of(rid) == len(rec) - 1  # order is the receiver's to decide
    elif column == "evict non-forced":
        got = outcome(lambda: rec.evict(rid, by=by))
        assert rid in rec
    elif column == "force-evict":
        got = outcome(lambda: rec.evict(rid, force=True, by=by))
        assert (rid in rec) == (got != "ok")
    else:
        assert rec.rollback_trajectory(RUN, by=by) == 0
        got = "kept" if rid in rec else "removed"
    assert got == expected


def test_orchestrator_block_lands_in_front_and_an_id_is_no_capability(world: World) -> None:
    world.receiver.write_block("more", "more")
    rid = world.orchestrator_block()
    assert world.receiver.index_of(rid) == 0
    with pytest.raises(rampart.InvalidArgumentError, match="not a capability"):
        world.receiver.evict(rid, force=True, by=world.author.registry_id)  # type: ignore[arg-type]
    # the author's own registry does not hold the block: the id addresses nothing there
    with pytest.raises(rampart.BlockNotFoundError):
        world.author.evict(rid, force=True)
    assert rid in world.receiver


# ---- matrix 2: an agent block written into the receiver by the author ------------------------

AGENT = {
    "compile/see": ("ok", "ok", "ok"),
    "update content": ("BlockPermissionError", "ok", "BlockPermissionError"),
    "update priority": ("ok", "ok", "ok"),
    "set_wrap": ("ok", "ok", "ok"),
    "promote": ("ok", "ok", "ok"),
    "evict non-forced": ("ok", "ok", "ok"),  # evictable (write_block's default)
    "force-evict": ("BlockPermissionError", "ok", "BlockPermissionError"),  # evictable=False
    "rollback_trajectory": ("kept", "removed", "kept"),
}


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("column", list(AGENT))
def test_cross_written_agent_block_matrix(world: World, row: str, column: str) -> None:
    expected = AGENT[column][ROWS.index(row)]
    rid = world.agent_block(evictable=column != "force-evict")
    rec, by = world.receiver, world.by(row)
    if column == "compile/see":
        assert "hint" in rec.compile().included
        got = "ok"
    elif column == "update content":
        got = outcome(lambda: rec.update_block_content(rid, "hint: dates are RFC 2822", by=by))
        changed = rec.get_by_id(rid).content == "hint: dates are RFC 2822"
        assert changed == (got == "ok")
    elif column == "update priority":
        got = outcome(lambda: rec.update_priority(rid, 0.9))
    elif column == "set_wrap":
        got = outcome(lambda: rec.set_wrap(rid, "<hint>", "</hint>"))
    elif column == "promote":
        got = outcome(lambda: rec.promote(rid, to_front=True))
    elif column == "evict non-forced":
        got = outcome(lambda: rec.evict(rid, by=by))
        assert rid not in rec
    elif column == "force-evict":
        got = outcome(lambda: rec.evict(rid, force=True, by=by))
        assert (rid in rec) == (got != "ok")
    else:
        removed = rec.rollback_trajectory(RUN, by=by)
        got = "kept" if rid in rec else "removed"
        assert removed == (1 if got == "removed" else 0)
    assert got == expected


def test_receivers_rollback_removes_only_its_own_writes(world: World) -> None:
    rec = world.receiver
    plan = world.orchestrator_block()
    hint = world.agent_block(evictable=False)
    own = rec.write_agent_block("tried X, failed", RUN, evictable=False)
    assert rec.rollback_trajectory(RUN) == 1
    assert own not in rec and plan in rec and hint in rec
    assert rec.rollback_trajectory(RUN, by=world.author) == 1  # the author retracts its hint
    assert hint not in rec and plan in rec  # orchestrator blocks never roll back


def test_snapshot_restore_keeps_authorship(world: World) -> None:
    rec = world.receiver
    world.orchestrator_block()
    snap = rec.snapshot()
    rec.restore(snap)
    (plan,) = rec.get_by_name("plan")
    assert plan.author_id == world.author.registry_id
    with pytest.raises(PermissionError):
        rec.evict(plan.runtime_id, force=True)
    rec.evict(plan.runtime_id, force=True, by=world.author)
