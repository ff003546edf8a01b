"""Tool gating: what a tool block is embedded from, the evaluation set's integrity, and
the default gate's hit rate on it with the real model."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest
import rampart
from rampart import ToolSchema, parse_tools
from rampart.errors import InvalidArgumentError
from rampart.tools import tool_gate_text

from tests.conftest import DATA, needs_model

EVAL = DATA / "tool_gate_eval.json"


def load_eval() -> tuple[dict[str, Any], list[ToolSchema]]:
    doc = json.loads(EVAL.read_text(encoding="utf-8"))
    tools = [t for f in doc["tool_files"] for t in parse_tools(DATA / f)]
    return doc, tools


def test_gate_text_is_name_description_and_parameters_in_words() -> None:
    schema = ToolSchema(
        "git_create_branch",
        "Creates a new branch\n  from an optional base branch",
        {
            "type": "object",
            "properties": {
                "repo_path": {"type": "string"},
                "branchName": {"type": "string", "description": "Name of the new branch"},
            },
            "required": ["repo_path"],
        },
    )
    assert tool_gate_text(schema) == (
        "git create branch: Creates a new branch from an optional base branch\n"
        "- repo path\n"
        "- branch name: Name of the new branch"
    )
    assert tool_gate_text(ToolSchema("ping")) == "ping"
    with pytest.raises(InvalidArgumentError, match="takes a ToolSchema"):
        tool_gate_text({"name": "x"})  # type: ignore[arg-type]


def test_tool_blocks_are_gated_on_their_gate_text_not_their_prompt_text() -> None:
    reg = rampart.BlockRegistry()
    reg.write_block("Plain rule.", "rule")
    (rid,) = reg.load_tools(DATA / "mcp_time_tools.json")[:1]
    block = reg.get_by_id(rid)
    assert block.content.startswith("Tool `get_current_time`")  # the prompt keeps the rendering
    assert block.gate_text.startswith("get current time: Get current time in a specific timezone")
    assert "required" not in block.gate_text
    assert reg.get_by_name("rule")[0].gate_text == "Plain rule."
    reg.release()


def test_evaluation_set_is_sound() -> None:
    doc, tools = load_eval()
    names = {t.name for t in tools}
    requests = doc["requests"]
    assert len(requests) >= 150 and len(doc["tool_files"]) >= 3
    assert len({r["request"] for r in requests}) == len(requests)
    covered = Counter(r["acceptable"][0] for r in requests)
    assert set(covered) == names  # every tool is the intended one for some request
    for r in requests:
        assert r["acceptable"] and set(r["acceptable"]) <= names, r
        assert r["split"] in ("tune", "holdout")
        text = r["request"].lower()
        for name in names:  # no request gives a tool's name away
            assert name not in text and name.replace("_", " ") not in text, (name, r)
    splits = Counter(r["split"] for r in requests)
    assert splits["tune"] == splits["holdout"]
    per_tool = Counter((r["acceptable"][0], r["split"]) for r in requests)
    assert all(per_tool[(n, s)] >= 2 for n in names for s in ("tune", "holdout"))


def hit_rates(reg: rampart.BlockRegistry, requests: list[dict[str, Any]]) -> tuple[float, float]:
    top1 = top3 = 0
    for r in requests:
        ranked = [b.semantic_name for b, _ in reg.find_relevant(r["request"], top_k=3)]
        top1 += ranked[0] in r["acceptable"]
        top3 += bool(set(ranked) & set(r["acceptable"]))
    return top1 / len(requests), top3 / len(requests)


@needs_model
def test_default_gate_hit_rate_on_the_evaluation_set() -> None:
    """A floor under the measured numbers (docs/tool-gate.md): a change that makes the
    default gate lose tools fails here. The full table comes from
    benches/tool_gate_eval.py."""
    doc, _ = load_eval()
    reg = rampart.BlockRegistry(embedding_model="default")
    for f in doc["tool_files"]:
        reg.load_tools(DATA / f)
    top1, top3 = hit_rates(reg, doc["requests"])
    reg.release()
    assert top3 >= 0.76 and top1 >= 0.50, (top1, top3)


def test_no_request_is_a_paraphrase_of_a_description() -> None:
    """Requests were written as people ask, not copied from the tool texts: no
    request shares a run of five words with a description."""
    doc, tools = load_eval()

    def runs(text: str) -> set[tuple[str, ...]]:
        w = re.findall(r"[a-z0-9]+", text.lower())
        return {tuple(w[i : i + 5]) for i in range(len(w) - 4)}

    described = set().union(*(runs(t.description) for t in tools))
    assert not [r["request"] for r in doc["requests"] if runs(r["request"]) & described]


# ---- the optional gates (rampart.toolgate) -----------------------------------------


def test_bm25_ranks_rare_shared_words_first() -> None:
    from rampart.toolgate import BM25, terms

    assert terms("listAllowedDirectories of the repo_path files") == [
        "list",
        "allow",
        "directorie",
        "repo",
        "path",
        "file",
    ]
    assert terms("branches staged class") == terms("branch stag class")
    index = BM25(["Read a file from disk", "Switch git branches", "Read the commit logs"])
    scores = index.scores("which branches exist in git?")
    assert scores[1] > 0 and scores[0] == scores[2] == 0
    assert BM25([]).scores("x") == []


def gate_registry() -> rampart.BlockRegistry:
    from tests.test_gate import HashingEmbedder

    reg = rampart.BlockRegistry(embedding_model=HashingEmbedder())
    reg.write_block("Dates are written as ISO 8601.", "dates", "seed")
    reg.load_tools(DATA / "mcp_git_tools.json")
    reg.load_tools(DATA / "mcp_time_tools.json")
    return reg


def test_hybrid_gate_adds_normalised_bm25_to_the_cosine() -> None:
    from rampart.toolgate import DenseGate, HybridGate

    reg = gate_registry()
    blocks = reg.list_blocks()
    task = "convert a time between timezones"
    dense = DenseGate(reg)(task, blocks)
    assert dense == [reg.score_block(b.runtime_id, task) for b in blocks]
    hybrid = HybridGate(reg, 0.5)
    lexical = hybrid.lexical(task, blocks)
    assert max(lexical) == 1.0 and min(lexical) >= 0.0
    assert blocks[lexical.index(1.0)].semantic_name == "convert_time"
    assert hybrid(task, blocks) == pytest.approx([d + 0.5 * x for d, x in zip(dense, lexical)])
    assert HybridGate(reg, 0.0)(task, blocks) == dense
    # Through compile, as a gate= callable; a new block rebuilds the index.
    result = reg.compile(task_text=task, top_k=1, gate=hybrid, tools_in_prompt=False)
    assert [t["function"]["name"] for t in result.tools()] == ["convert_time"]
    reg.write_block("Convert every time to UTC between timezones first.", "utc-rule")
    assert len(hybrid.lexical(task, reg.list_blocks())) == len(blocks) + 1
    with pytest.raises(InvalidArgumentError, match="lexical_weight"):
        HybridGate(reg, -1)
    reg.release()


def test_judge_gate_puts_the_models_picks_first() -> None:
    from rampart.llm import OpenAIBackend
    from rampart.toolgate import DenseGate, JudgeGate

    from tests import fake_openai as fake

    reg = gate_registry()
    turns: list[Any] = [("git_log\nnot_a_tool\ngit_show\ngit_log", [])]
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        backend = OpenAIBackend(server.base_url, "judge", native_tools=False)
        judge = JudgeGate(backend, picks=3)
        result = reg.compile(
            task_text="who changed what lately?", top_k=2, gate=judge, tools_in_prompt=False
        )
        blocks = reg.list_blocks()
        scores = JudgeGate(backend, fallback=DenseGate(reg))("who changed what?", blocks)
        backend.close()
        payload = server.payloads[0]
    # The picks (unknown names ignored) outrank everything; tools() lists them in
    # registry order. With a fallback, the other blocks keep their cosine scores.
    assert [t["function"]["name"] for t in result.tools()] == ["git_log", "git_show"]
    assert result.included == []
    by_name = {b.semantic_name: s for b, s in zip(blocks, scores)}
    assert by_name["git_log"] == 2.0 and by_name["git_show"] == 1.99
    assert by_name["dates"] == reg.score_block(blocks[0].runtime_id, "who changed what?")
    system = fake.system_text(payload)
    assert "- git_status: Shows the working tree status" in system
    assert "- convert_time: Convert time between timezones" in system
    assert payload["messages"][-1]["content"] == "Request: who changed what lately?"
    assert payload["temperature"] == 0.0
    assert judge.last_reply.startswith("git_log")
    with pytest.raises(InvalidArgumentError, match="picks"):
        JudgeGate(backend, picks=0)
    reg.release()
