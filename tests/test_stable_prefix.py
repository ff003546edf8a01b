"""docs/specification.md §8 in the core: ungated blocks (``gated=False``) and the stable prefix.

The gate never removes an ungated block and ungated blocks take no top-k place
(cosine gate, float32 and int8; callable gates); the flag is set by every route
(write_block, load_tools, front matter, set_gated) and travels through save/load,
snapshots, markdown export and shared registries' journals; ``stable_prefix_*``
say where the task-independent front of the prompt ends, and ``cache_notes``
where an ungated block sits after a gated one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rampart
from conftest import DATA
from rampart.errors import InvalidArgumentError, ParseError

DIM = 8


def unit(i: int, dim: int = DIM) -> list[float]:
    v = np.zeros(dim, dtype=np.float32)
    v[i % dim] = 1.0
    return v.tolist()


def blended(i: int, j: int, w: float) -> list[float]:
    v = np.asarray(unit(i)) * (1 - w) + np.asarray(unit(j)) * w
    return (v / np.linalg.norm(v)).tolist()


def registry(label: str) -> tuple[rampart.BlockRegistry, list[str]]:
    """head (ungated), four gated skills with known vectors, tail (ungated)."""
    reg = rampart.BlockRegistry(label=label)
    ids = [reg.write_block("You are careful.", "head", embedding=unit(7), gated=False)]
    for k in range(4):
        ids.append(reg.write_block(f"skill {k}", f"s{k}", embedding=blended(0, 1, k / 4)))
    ids.append(reg.write_block("Answer briefly.", "tail", embedding=unit(6), gated=False))
    return reg, ids


@pytest.mark.parametrize("quantised", [False, True])
def test_ungated_blocks_pass_the_gate_and_take_no_top_k_place(quantised: bool) -> None:
    reg, ids = registry(f"sp-gate-{quantised}")
    reg.quantise_embeddings(quantised)
    # The query is far from head and tail: a gate alone would drop them.
    r = reg.compile(task_embedding=unit(0), top_k=2, max_tokens=None)
    assert r.included == ["head", "s0", "s1", "tail"]
    r = reg.compile(task_embedding=unit(1), top_k=1, max_tokens=None)
    assert r.included == ["head", "s3", "tail"]
    r = reg.compile(task_embedding=unit(0), relevance_threshold=0.99, max_tokens=None)
    assert r.included == ["head", "s0", "tail"]
    r = reg.compile(task_embedding=unit(0), top_k=0, max_tokens=None)
    assert r.included == ["head", "tail"]
    rows = {row.name: row for row in r.report}
    assert rows["head"].gated is False and rows["s0"].gated is True
    assert rows["s0"].reason == "gate" and rows["head"].reason is None


def test_callable_gate_keeps_ungated_blocks() -> None:
    reg, ids = registry("sp-callable")
    # The callable scores head and tail highest: they still take no top-k place.
    r = reg.compile(
        task_text="x", top_k=1, gate=lambda t, bs: [9.0, 1.0, 2.0, 3.0, 0.0, 9.0], max_tokens=None
    )
    assert r.included == ["head", "s2", "tail"]


def test_budget_still_cuts_ungated_blocks() -> None:
    reg, ids = registry("sp-budget")
    head_cost = reg.get_by_id(ids[0]).cost
    r = reg.compile(task_embedding=unit(0), top_k=2, max_tokens=head_cost)
    assert r.included == ["head"]
    assert r.stable_prefix_tokens == head_cost


def test_stable_prefix_is_what_no_task_changes() -> None:
    reg, ids = registry("sp-prefix")
    reg.promote_to_front(ids[-1])  # tail joins the head: head, tail, s0..s3
    prompts = [
        reg.compile(task_embedding=blended(0, 1, w), top_k=2, max_tokens=None)
        for w in (0.0, 0.5, 1.0)
    ]
    stable = prompts[0].stable_prefix
    assert stable == "Answer briefly." + rampart.DEFAULT_SEPARATOR + "You are careful."
    for r in prompts:
        assert r.stable_prefix == stable
        assert r.prompt.startswith(stable + rampart.DEFAULT_SEPARATOR)
        assert r.stable_prefix_chars == len(stable)
        assert r.stable_prefix_tokens == sum(r.costs[:2])
        assert r.cache_notes == []
    assert len({r.prompt for r in prompts}) > 1


def test_without_a_gate_the_whole_prompt_is_stable() -> None:
    reg, _ = registry("sp-ungated")
    for _ in range(2):  # the second compile comes from the prompt memo
        r = reg.compile(max_tokens=None)
        assert r.stable_prefix_tokens == r.total_tokens
        assert r.stable_prefix == r.prompt
        assert r.cache_notes == []


def test_an_ungated_block_after_a_gated_one_is_noted() -> None:
    reg, ids = registry("sp-notes")
    r = reg.compile(task_embedding=unit(0), top_k=1, max_tokens=None)
    assert r.stable_prefix == "You are careful."
    (note,) = r.cache_notes
    assert "'tail'" in note and "'s0'" in note and "interrupted" in note


def test_empty_stable_prefix() -> None:
    reg = rampart.BlockRegistry(label="sp-empty")
    reg.write_block("gated first", "g", embedding=unit(0))
    reg.write_block("ungated after", "u", embedding=unit(1), gated=False)
    r = reg.compile(task_embedding=unit(0), top_k=1, max_tokens=None)
    assert r.stable_prefix_tokens == 0 and r.stable_prefix == ""
    assert r.prompt == "gated first" + rampart.DEFAULT_SEPARATOR + "ungated after"


def test_tool_blocks_outside_the_prompt_do_not_end_the_prefix() -> None:
    reg = rampart.BlockRegistry(label="sp-tools")
    reg.write_block("head", "head", embedding=unit(7), gated=False)
    (tool,) = reg.load_tools(
        [{"name": "t", "description": "a tool", "inputSchema": {"type": "object"}}]
    )
    reg.write_block("more head", "head2", embedding=unit(6), gated=False)
    reg.write_block("skill", "s", embedding=unit(0))
    r = reg.compile(
        task_text="x",
        gate=lambda t, bs: [0.0, 1.0, 0.0, 0.5],
        top_k=1,
        max_tokens=None,
        tools_in_prompt=False,
    )
    # The tool takes the one top-k place (it goes to the tools list only).
    assert r.included == ["head", "head2"]
    assert [t["function"]["name"] for t in r.tools()] == ["t"]
    assert r.stable_prefix == "head" + rampart.DEFAULT_SEPARATOR + "more head"
    assert [t["function"]["name"] for t in r.registry_tools()] == ["t"]


def test_every_route_sets_the_flag(tmp_path: Path) -> None:
    seed = tmp_path / "rules.md"
    seed.write_text(
        "---\nname: always\ngated: false\n---\nAlways cite sources.\n\n"
        "---\nname: sometimes\n---\nUse tables for numbers.\n",
        encoding="utf-8",
    )
    reg = rampart.BlockRegistry.from_files([seed], label="sp-routes")
    assert [b.gated for b in reg.list_blocks()] == [False, True]
    tools = reg.load_tools(DATA / "mcp_time_tools.json", gated=False)
    assert all(not reg.get_by_id(t).gated for t in tools)
    rid = reg.write_agent_block("a lesson", "run-1", gated=False)
    assert reg.get_by_id(rid).gated is False
    reg.set_gated(rid, True)
    assert reg.get_by_id(rid).gated is True
    with pytest.raises(InvalidArgumentError):
        reg.set_gated(rid, "no")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        reg.write_block("x", "x", gated=1)  # type: ignore[arg-type]
    bad = tmp_path / "bad.md"
    bad.write_text("---\nname: b\ngated: maybe\n---\nbody\n", encoding="utf-8")
    with pytest.raises(ParseError) as e:
        rampart.BlockRegistry.from_files([bad])
    assert "bad.md" in str(e.value) and "gated" in str(e.value)


def test_the_flag_survives_save_snapshot_and_export(tmp_path: Path) -> None:
    reg, ids = registry("sp-persist")
    reg.set_gated(ids[1], False)
    flags = [b.gated for b in reg.list_blocks()]
    reg.save(tmp_path / "r.rmp")
    back = rampart.BlockRegistry.load(tmp_path / "r.rmp", label="sp-persist-2")
    assert [b.gated for b in back.list_blocks()] == flags
    snap = reg.snapshot()
    for b in reg.list_blocks():
        reg.set_gated(b.runtime_id, True)
    reg.restore(snap)
    assert [b.gated for b in reg.list_blocks()] == flags
    reg.export_markdown(tmp_path / "x.md", source=None)
    again = rampart.BlockRegistry.from_files([tmp_path / "x.md"], label="sp-persist-3")
    assert [b.gated for b in again.list_blocks()] == flags


def test_the_flag_is_journaled(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    a = rampart.BlockRegistry.open(url, "sp", label="sp-a")
    b = rampart.BlockRegistry.open(url, "sp", label="sp-b")
    try:
        x = a.write_block("x", "x", gated=False)
        (t,) = a.load_tools(
            [{"name": "t", "description": "d", "inputSchema": {"type": "object"}}], gated=False
        )
        y = a.write_block("y", "y")
        a.set_gated(y, False)
        a.set_gated(x, True)
        b.sync()
        assert [(blk.runtime_id, blk.gated) for blk in b.list_blocks()] == [
            (x, True),
            (t, False),
            (y, False),
        ]
    finally:
        a.close()
        b.close()
