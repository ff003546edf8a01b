"""The other-writer tool-gate sets (tests/data/tool_gate_other_writer*.json) and the
scorer of benches/tool_gate_other_writer.py: the data is sound (counts, halves, no
tool names, real tools as labels, disjoint from the other request sets), and the
scorer ranks requests through both encoders. Which encoder wins is measured by the
bench (docs/tool-gate.md, "Requests by another writer"), not asserted here."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from typing import Any

import pytest

from tests.conftest import DATA, ROOT, needs_model

_spec = importlib.util.spec_from_file_location(
    "tool_gate_other_writer", ROOT / "benches" / "tool_gate_other_writer.py"
)
assert _spec is not None and _spec.loader is not None
ow = importlib.util.module_from_spec(_spec)
sys.modules["tool_gate_other_writer"] = ow
_spec.loader.exec_module(ow)

OTHER_SETS = (
    "tool_gate_eval.json",
    "tool_gate_indirect.json",
    "tool_gate_fsgit.json",
    "tool_gate_stream.json",
)


def _doc(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / name).read_text(encoding="utf-8"))
    return doc


def _names() -> list[str]:
    return [t.name for t in ow.load_tools()]


def _check(requests: list[dict[str, Any]], names: list[str]) -> None:
    for r in requests:
        assert r["acceptable"] and set(r["acceptable"]) <= set(names), r
        assert len(set(r["acceptable"])) == len(r["acceptable"]), r
        assert r["split"] in ("tune", "holdout"), r
        assert r["writer"] and r["style"], r
        assert ow.base.SERVER_OF[r["acceptable"][0]] == r["server"], r
        assert not ow.names_in(r["request"], names), r  # no request gives a name away
        assert r["request"] == r["request"].strip() and "\n" not in r["request"], r


def test_hand_set_is_sound() -> None:
    doc = _doc("tool_gate_other_writer.json")
    names = _names()
    requests = doc["requests"]
    assert len(requests) == 160 and len(names) == 40
    assert len({r["request"] for r in requests}) == len(requests)
    assert len({r["id"] for r in requests}) == len(requests)
    _check(requests, names)
    assert {r["writer"] for r in requests} == {"hand"}
    assert {r["style"] for r in requests} == set(doc["styles"]) and len(doc["styles"]) == 7
    # four per tool, alternating tune / holdout, each in its own style
    per_tool: dict[str, list[dict[str, Any]]] = {}
    for r in requests:
        per_tool.setdefault(r["acceptable"][0], []).append(r)
    assert set(per_tool) == set(names)
    for reqs in per_tool.values():
        assert [r["split"] for r in reqs] == ["tune", "holdout", "tune", "holdout"]
        assert len({r["style"] for r in reqs}) == 4
    assert Counter(r["split"] for r in requests) == {"tune": 80, "holdout": 80}
    # every style in both halves
    halves = Counter((r["style"], r["split"]) for r in requests)
    assert all(halves[(s, h)] >= 10 for s in doc["styles"] for h in ("tune", "holdout"))


def test_model_written_set_is_sound() -> None:
    doc = _doc("tool_gate_other_writer_qwen.json")
    names = _names()
    requests = doc["requests"]
    assert len(requests) >= 40
    assert len({r["request"] for r in requests}) == len(requests)
    _check(requests, names)
    assert {r["writer"] for r in requests} == {doc["made_with"]["model"]}
    assert {r["style"] for r in requests} <= set(doc["made_with"]["personas"])
    per_tool = Counter((r["acceptable"][0], r["split"]) for r in requests)
    assert all(v == 1 for v in per_tool.values())  # at most one per tool and half
    assert len({r["acceptable"][0] for r in requests}) >= 30


def test_other_writer_sets_are_new_requests() -> None:
    """Disjoint from every other request set over these tools and from the author
    examples (the encoder's and the gate's own data)."""
    seen = set()
    for name in OTHER_SETS:
        seen |= {r["request"].lower() for r in _doc(name)["requests"]}
    for examples in _doc("tool_gate_examples.json")["examples"].values():
        seen |= {e.lower() for e in examples}
    for r in ow.load_requests():
        assert r["request"].lower() not in seen, r


@needs_model
@pytest.mark.parametrize("model", [ow.DEFAULT_MODEL_NAME, ow.TOOLS_MODEL_NAME])
def test_scorer_ranks_requests(model: str) -> None:
    """The bench's scorer on 20 held-out requests: a rank for each (1..40, or None
    when no acceptable tool is ranked) and a sanity floor, not a comparison."""
    tools = ow.load_tools()
    requests = [r for r in ow.load_requests() if r["split"] == "holdout"][::4][:20]
    assert len(requests) == 20
    reg = ow.registry(model, tools)
    try:
        ranks = [ow.rank_of(r, ow.base.find_ranker(reg)) for r in requests]
    finally:
        reg.release()
    assert all(k is None or 1 <= k <= len(tools) for k in ranks)
    got = ow.rates(ranks)
    assert got["n"] == 20 and got["top3"] > 0.3, got


@needs_model
def test_fused_gate_matches_its_parts() -> None:
    """FusedGate with a = 1 and no BM25 ranks as the first registry's own gate."""
    tools = ow.load_tools()
    requests = [r for r in ow.load_requests() if r["split"] == "tune"][:6]
    first = ow.registry(ow.DEFAULT_MODEL_NAME, tools)
    second = ow.registry(ow.TOOLS_MODEL_NAME, tools)
    try:
        fused = ow.FusedGate(first, second, 1.0, 0.0)
        for r in requests:
            assert (
                ow.base.gate_ranker(first, fused)(r["request"])[:3]
                == ow.base.find_ranker(first)(r["request"])[:3]
            )
    finally:
        first.release()
        second.release()
