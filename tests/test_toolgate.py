"""Tool gating: what a tool block is embedded from, the evaluation set's integrity, and
the default gate's hit rate on it with the real model."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
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
    # The MCP title joins the head when it says more than the name; annotations.title
    # stands in where a server sets no top-level title.
    assert tool_gate_text(ToolSchema("ping", title="Ping a host")) == "ping (Ping a host)"
    annotated = ToolSchema("ping", annotations={"title": "Ping  a host", "readOnlyHint": True})
    assert tool_gate_text(annotated) == "ping (Ping a host)"
    both = ToolSchema("ping", title="Reachability", annotations={"title": "Ping a host"})
    assert tool_gate_text(both) == "ping (Reachability)"
    assert tool_gate_text(ToolSchema("ping", annotations={"title": 7})) == "ping"
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
    # Measured with the query adapter: 61.8 / 83.8 % (204 requests, both halves).
    assert top3 >= 0.82 and top1 >= 0.60, (top1, top3)


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


# ---- example requests (issue 17): data, schema, gate, learning, generation ----------

INDIRECT = DATA / "tool_gate_indirect.json"
FSGIT = DATA / "tool_gate_fsgit.json"
EXAMPLES = DATA / "tool_gate_examples.json"
STREAM = DATA / "tool_gate_stream.json"
_STOP = set("this that with from only than have will your into what when which where there".split())
_STOP |= set("their them they then also more most each some such does like just".split())


def _words(text: str) -> set[str]:
    """Words of 4+ letters, crudely stemmed: what "a tool's own words" means here."""
    out = set()
    for w in re.findall(r"[a-z]+", text.lower()):
        if len(w) < 4 or w in _STOP:
            continue
        for suffix in ("ing", "ies", "es", "ed", "s"):
            if w.endswith(suffix) and len(w) - len(suffix) >= 3:
                w = w[: -len(suffix)]
                break
        out.add(w)
    return out


def test_indirect_and_fsgit_sets_are_sound() -> None:
    _, tools = load_eval()
    by_name = {t.name: t for t in tools}
    ind = json.loads(INDIRECT.read_text(encoding="utf-8"))["requests"]
    assert len(ind) == 120 and Counter(r["split"] for r in ind) == {"tune": 60, "holdout": 60}
    assert Counter(r["acceptable"][0] for r in ind) == {n: 3 for n in by_name}
    for r in ind:  # never a word of the intended tool's name or description
        t = by_name[r["acceptable"][0]]
        own = _words(t.name.replace("_", " ") + " " + t.description)
        assert not _words(r["request"]) & own, r
        assert set(r["acceptable"]) <= set(by_name)
    fs = json.loads(FSGIT.read_text(encoding="utf-8"))["requests"]
    fs_tools = {
        t.name
        for f in ("mcp_filesystem_tools.json", "mcp_git_tools.json")
        for t in parse_tools(DATA / f)
    }
    assert len(fs) >= 40 and {r["split"] for r in fs} == {"holdout"}
    assert {r["acceptable"][0] for r in fs} == fs_tools and len(fs_tools) == 22
    assert all(set(r["acceptable"]) <= fs_tools for r in fs)


def test_examples_and_stream_are_disjoint_from_every_evaluation_request() -> None:
    doc, tools = load_eval()
    names = {t.name for t in tools}
    examples = rampart.tools.load_examples(EXAMPLES)
    assert set(examples) == names and all(3 <= len(v) <= 6 for v in examples.values())
    stream = json.loads(STREAM.read_text(encoding="utf-8"))["requests"]
    assert {r["tool"] for r in stream} == names
    evaluated = {
        r["request"].lower()
        for path in (EVAL, INDIRECT, FSGIT)
        for r in json.loads(path.read_text(encoding="utf-8"))["requests"]
    }
    taught = {e.lower() for v in examples.values() for e in v} | {
        r["request"].lower() for r in stream
    }
    assert not evaluated & taught


def test_tool_schema_keeps_examples_and_never_sends_them() -> None:
    from rampart.tools import example_texts, with_examples

    entry = {
        "name": "get_weather",
        "description": "Weather for a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        "examples": ["will it rain in Oslo tomorrow?", "  is it   cold in Riga "],
        "input_examples": [{"city": "Lima", "days": 3}],
    }
    (schema,) = parse_tools([entry])
    assert schema.examples == ("will it rain in Oslo tomorrow?", "  is it   cold in Riga ")
    assert example_texts(schema) == [
        "will it rain in Oslo tomorrow?",
        "is it cold in Riga",
        "city: Lima; days: 3",
    ]
    assert ToolSchema.from_json(schema.to_json()) == schema
    for fmt in ("openai", "openai-responses", "anthropic", "mcp"):
        sent = json.dumps(schema.to_format(fmt))
        assert "examples" not in sent and "Oslo" not in sent, fmt
    for bad, match in (
        ({**entry, "examples": "one string"}, "examples must be a list"),
        ({**entry, "examples": [""]}, r"examples\[0\] must be a non-empty string"),
        ({**entry, "examples": ["x"] * 65}, "at most 64"),
        ({**entry, "examples": ["x" * 1001]}, "longer than 1000"),
        ({**entry, "input_examples": ["city"]}, "argument objects"),
    ):
        with pytest.raises(rampart.UnsupportedFormatError, match=match):
            parse_tools([bad])
    merged = with_examples([entry], {"get_weather": ["umbrella needed in Bergen?"]})
    assert merged[0].examples[-1] == "umbrella needed in Bergen?"
    assert with_examples(merged, {"get_weather": ["umbrella needed in Bergen?"]}) == merged
    with pytest.raises(InvalidArgumentError, match="not in the list"):
        with_examples([entry], {"get_wether": ["typo"]})


def example_registry(with_examples: bool = True) -> rampart.BlockRegistry:
    from rampart.tools import with_examples as attach

    from tests.test_gate import HashingEmbedder

    reg = rampart.BlockRegistry(embedding_model=HashingEmbedder())
    reg.write_block("Dates are written as ISO 8601.", "dates", "seed")
    tools = parse_tools(DATA / "mcp_git_tools.json") + parse_tools(DATA / "mcp_time_tools.json")
    if with_examples:
        tools = attach(tools, {"git_log": ["who has been pushing lately"]})
    reg.load_tools(tools)
    return reg


def test_registry_without_examples_keeps_the_core_gate() -> None:
    reg = example_registry(with_examples=False)
    task = "who has been pushing lately"
    ranked = reg.find_relevant(task)
    assert reg._gate.examples is False and reg._gate.example_gate is None
    assert [s for _, s in ranked] == sorted(
        (reg.score_block(b.runtime_id, task) for b in reg.list_blocks()), reverse=True
    )
    reg.release()


def test_example_gate_scores_a_tool_by_its_best_text_and_says_which() -> None:
    from rampart.toolgate import ExampleGate

    reg = example_registry()
    task = "who has been pushing lately?"
    top, score = reg.find_relevant(task, top_k=1)[0]
    assert top.semantic_name == "git_log" and reg._gate.examples is True
    # Best and second best (the example, then the description) averaged, + BM25.
    plain = ExampleGate(reg, second_weight=0, lexical_weight=0)
    assert dict((b.semantic_name, s) for b, s in plain.rank(task))["git_log"] == pytest.approx(1.0)
    assert score < 1.0
    # A block with one vector scores its cosine, so thresholds keep their meaning.
    dates = reg.get_by_name("dates")[0]
    assert dict((b.semantic_name, s) for b, s in plain.rank(task))["dates"] == pytest.approx(
        reg.score_block(dates.runtime_id, task)
    )
    result = reg.compile(task_text=task, top_k=1, tools_in_prompt=False)
    assert [t["function"]["name"] for t in result.tools()] == ["git_log"]
    row = next(r for r in result.report if r.name == "git_log")
    assert "best match: example 'who has been pushing lately'" in row.detail
    assert reg.compile_dry_run(task_text=task, top_k=1).included[0][0] == "git_log"
    with pytest.raises(InvalidArgumentError, match="second_weight"):
        ExampleGate(reg, second_weight=-1)
    reg.release()


def test_learned_examples_teach_the_gate_and_roll_back_with_their_run() -> None:
    reg = example_registry(with_examples=False)
    task = "standup is 09:30 in New York; what is that for Bangalore?"
    before = [b.semantic_name for b, _ in reg.find_relevant(task, top_k=1)]
    rid = reg.add_tool_example("convert_time", task, trajectory_id="run-7")
    assert rid is not None and reg._gate.examples is True
    block = reg.get_by_id(rid)
    assert (block.source, block.trajectory_id) == ("agent", "run-7")
    assert set(block.tags) == {"tool-example", "convert_time"}
    assert [b.semantic_name for b, _ in reg.find_relevant(task, top_k=1)] == ["convert_time"]
    assert before != ["convert_time"]  # the hashing embedder alone did not find it
    # Already known: nothing written; by runtime id works too.
    tool_id = reg.get_by_name("convert_time")[0].runtime_id
    assert reg.add_tool_example(tool_id, f"  {task} ", trajectory_id="run-8") is None
    # Never in a gated prompt, even when top_k would admit every block.
    result = reg.compile(task_text=task, top_k=len(reg) + 5)
    assert "convert_time_example" not in result.included
    assert all(rid != b.runtime_id for b, _ in reg.find_relevant(task))
    assert reg.rollback_trajectory("run-7") == 1
    assert [b.semantic_name for b, _ in reg.find_relevant(task, top_k=1)] == before
    with pytest.raises(rampart.BlockNotFoundError, match="no tool 'nope'"):
        reg.add_tool_example("nope", "x")
    with pytest.raises(InvalidArgumentError, match="not a tool block"):
        reg.add_tool_example(reg.get_by_name("dates")[0].runtime_id, "x")
    with pytest.raises(InvalidArgumentError, match="must not be empty"):
        reg.add_tool_example("git_log", "   ")
    reg.release()


def test_learned_examples_survive_save_and_load(tmp_path: Any) -> None:
    from tests.test_gate import HashingEmbedder

    reg = example_registry(with_examples=False)
    task = "who has been pushing lately"
    reg.add_tool_example("git_log", task, trajectory_id="run-1")
    reg.save(tmp_path / "r.rampart")
    back = rampart.BlockRegistry.load(tmp_path / "r.rampart", HashingEmbedder())
    assert [b.semantic_name for b, _ in back.find_relevant(task, top_k=1)] == ["git_log"]
    assert back.rollback_trajectory("run-1") == 1
    reg.release()
    back.release()


def test_enrich_tools_generates_once_and_reads_the_cache_after(tmp_path: Any) -> None:
    from rampart.embeddings.cache import ExampleCache
    from rampart.llm import OpenAIBackend
    from rampart.toolgate import ENRICH_PROMPT, enrich_tools, parse_examples

    from tests import fake_openai as fake

    assert parse_examples("1. show the log\n- 'who pushed?'\n\nExamples:\n* show the log\n", 5) == [
        "show the log",
        "who pushed?",
    ]
    cache = ExampleCache(tmp_path / "examples.sqlite")
    reg = example_registry(with_examples=False)
    n_tools = len([b for b in reg.list_blocks() if b.tool_schema])
    turns: list[Any] = [("1. first request\n2. second request", [])] * n_tools
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        backend = OpenAIBackend(server.base_url, "gen", native_tools=False)
        out = enrich_tools(reg, backend, n=2, cache=cache)
        assert len(server.payloads) == n_tools
        again = example_registry(with_examples=False)
        assert enrich_tools(again, backend, n=2, cache=cache) == out  # no model call
        assert len(server.payloads) == n_tools
        backend.close()
    assert out["git_log"] == ["first request", "second request"]
    (first,) = server.payloads[0]["messages"]  # one user message: the tool, then the ask
    assert first["role"] == "user"
    assert first["content"].startswith("Tool `git_status`")  # the tool as render_tool says
    assert first["content"].endswith(ENRICH_PROMPT.format(n=2))
    assert again._gate.examples is True
    row = next(iter(again.find_relevant("first request", top_k=1)))
    assert row[0].tool_schema is not None
    reg.release()
    again.release()


def test_parse_examples_on_real_model_replies() -> None:
    """Replies Qwen2.5-Coder-1.5B really gave (tests/data/tool_gate_enrich_replies.json):
    numbered and bulleted lines, quoted values, calls written out, a reply cut at the
    token limit and, under the first prompt, the tool's own description and parameter
    list copied back. Each entry holds the
    lines a reader kept by hand; the parser must keep exactly those."""
    from rampart.toolgate import parse_examples
    from rampart.tools import render_tool

    doc = json.loads((DATA / "tool_gate_enrich_replies.json").read_text(encoding="utf-8"))
    assert len(doc["replies"]) >= 10
    for r in doc["replies"]:
        schema = next(t for t in parse_tools(DATA / r["file"]) if t.name == r["tool"])
        got = parse_examples(
            r["reply"],
            5,
            tool_text=render_tool(schema),
            name=schema.name,
            truncated=r.get("truncated", False),
        )
        assert got == r["kept"], r["tool"]
        assert len({" ".join(g.casefold().split()) for g in got}) == len(got)
        for g in got:
            assert not re.match(r"\s*(?:[-*•]|\d+[.)])\s", g), g
            assert not (g[0] == g[-1] and g[0] in "\"'`"), g
            assert g.count('"') % 2 == 0, g  # a quoted value keeps both its quotes
    # Copied descriptions and parameter lists, and calls written out (`git_log
    # /path/to/repo 5`), yield nothing; without the tool's text and name the same
    # lines would have passed as requests.
    copies = [r for r in doc["replies"] if not r["kept"]]
    assert {r["prompt"] for r in copies} == {"system-message", "after-tool"}
    assert all(parse_examples(r["reply"], 5) for r in copies)
    # A reply cut at the token limit loses its unfinished last line, and only that.
    (cut,) = [r for r in doc["replies"] if r.get("truncated")]
    whole = parse_examples(cut["reply"], 5)
    assert whole[:-1] == parse_examples(cut["reply"], 5, truncated=True)


@needs_model
def test_example_gate_hit_rate_on_the_holdout() -> None:
    """A floor under the measured enriched numbers (docs/tool-gate.md)."""
    from rampart.tools import load_examples, with_examples

    doc, _ = load_eval()
    reg = rampart.BlockRegistry(embedding_model="default")
    examples = load_examples(EXAMPLES)
    for f in doc["tool_files"]:  # each server's tools tagged with it, as the benches do
        names = {t.name for t in parse_tools(DATA / f)}
        mine = {k: v for k, v in examples.items() if k in names}
        reg.load_tools(with_examples(DATA / f, mine), tags=[f"server:{server_of(f)}"])
    holdout = [r for r in doc["requests"] if r["split"] == "holdout"]
    top1, top3 = hit_rates(reg, holdout)
    reg.release()
    # Measured: 81.4 / 93.1 % (102 natural holdout requests; docs/tool-gate.md).
    assert top3 >= 0.92 and top1 >= 0.80, (top1, top3)


def server_of(file: str) -> str:
    """``mcp_git_tools.json`` -> ``git`` (the benches' server names)."""
    return Path(file).name.removesuffix(".json").removeprefix("mcp_").removesuffix("_tools")


def _tagged_registry() -> tuple[rampart.BlockRegistry, Any]:
    """git and time tools, each server's tagged, git_log and convert_time with
    examples, one instruction block; the hashing embedder."""
    from rampart.tools import with_examples

    from tests.test_gate import HashingEmbedder

    emb = HashingEmbedder()
    reg = rampart.BlockRegistry(embedding_model=emb)
    reg.write_block("Dates are written as ISO 8601.", "dates", "seed")
    examples = {
        "git_log": ["who has been pushing lately", "history of the parser"],
        "convert_time": ["what is 9am Tokyo time in Lisbon"],
    }
    for f in ("mcp_git_tools.json", "mcp_time_tools.json"):
        mine = {k: v for k, v in examples.items() if k in {t.name for t in parse_tools(DATA / f)}}
        reg.load_tools(with_examples(DATA / f, mine), tags=[f"server:{server_of(f)}"])
    return reg, emb


def _scores(gate: Any, task: str) -> dict[str, float]:
    view, scores, _ = gate.scores(task)
    return {rampart.InstructionBlock(b).semantic_name: s for b, s in zip(view.blocks(), scores)}


def test_example_gate_server_term_is_the_centred_cosine_with_each_servers_centroid() -> None:
    import numpy as np
    from rampart.toolgate import ExampleGate, block_examples

    reg, emb = _tagged_registry()
    task = "what time is it in Lisbon while I read the git history"
    plain = _scores(ExampleGate(reg, server_weight=0, hub_weight=0), task)
    served = _scores(ExampleGate(reg, server_weight=0.5, hub_weight=0), task)
    q = emb.encode(task)
    near = {}
    for server in ("git", "time"):
        rows = []
        for b in reg.find_by_tag(f"server:{server}"):
            rows.append(reg.embedding(b.runtime_id))
            rows += [emb.encode(e) for e in block_examples(b)]
        c = np.mean(rows, axis=0)
        near[server] = float(q @ (c / np.linalg.norm(c)))
    centre = sum(near.values()) / 2
    for b in reg.list_blocks():
        server = next((t[7:] for t in b.tags if t.startswith("server:")), None)
        want = 0.5 * (near[server] - centre) if server else 0.0
        assert served[b.semantic_name] - plain[b.semantic_name] == pytest.approx(want, abs=1e-5)
    assert near["git"] != near["time"]  # the test compares something
    reg.release()
    # Untagged tools (or a single server) get no server term.
    untagged = example_registry()
    a = _scores(ExampleGate(untagged, server_weight=0, hub_weight=0), task)
    assert _scores(ExampleGate(untagged, server_weight=0.5, hub_weight=0), task) == a
    untagged.release()


def test_example_gate_hub_term_is_a_constant_per_tool_that_penalises_generic_tools() -> None:
    from rampart.toolgate import ExampleGate

    from tests.test_gate import HashingEmbedder

    def tool(name: str, description: str, examples: list[str]) -> dict[str, Any]:
        schema = {"type": "object", "properties": {}}
        return {"name": name, "description": description, "inputSchema": schema,
                "examples": examples}  # fmt: skip

    reg = rampart.BlockRegistry(embedding_model=HashingEmbedder())
    reg.write_block("Answer briefly.", "style", "seed")
    reg.load_tools(
        [
            tool("find_anything", "find mail calendar events notes contacts", []),
            tool("read_mail", "read mail", ["show my mail", "any new mail from Bob"]),
            tool("list_events", "list calendar events", ["calendar events next week"]),
            tool("open_note", "open notes", ["open my notes on rust", "show notes"]),
        ]
    )
    plain = ExampleGate(reg, server_weight=0, hub_weight=0)
    hubbed = ExampleGate(reg, server_weight=0, hub_weight=0.5)
    shifts = []
    for task in ("mail from Bob", "calendar for Friday", "rust notes"):
        a, b = _scores(plain, task), _scores(hubbed, task)
        shifts.append({k: b[k] - a[k] for k in a})
    for other in shifts[1:]:  # the same shift whatever the task
        assert other == pytest.approx(shifts[0], abs=1e-6)
    shift = shifts[0]
    assert shift["style"] == 0.0  # blocks that are not tools: none
    tools = {k: v for k, v in shift.items() if k != "style"}
    assert sum(tools.values()) == pytest.approx(0.0, abs=1e-6)  # centred over the tools
    assert min(tools, key=tools.__getitem__) == "find_anything"  # the generic one loses most
    for bad in ({"server_weight": -1}, {"hub_weight": True}, {"hub_weight": float("inf")}):
        with pytest.raises(InvalidArgumentError, match="must be a number"):
            ExampleGate(reg, **bad)
    reg.release()


SCALE = DATA / "tool_gate_scale.json"
SCALE_EXAMPLES = (
    DATA / "tool_gate_examples_scale_a.json",
    DATA / "tool_gate_examples_scale_b.json",
)


def _scale_tools() -> tuple[dict[str, Any], list[tuple[str, list[dict[str, Any]]]]]:
    """The scale set and, per server file in tier order, its (renamed) tool definitions."""
    doc = json.loads(SCALE.read_text(encoding="utf-8"))
    out = []
    for f in (f for tier in doc["tiers"] for f in tier):
        raw = json.loads((DATA / f).read_text(encoding="utf-8"))
        defs = raw["tools"] if "tools" in raw else raw["result"]["tools"]
        renamed = doc.get("renamed", {}).get(f, {})
        out.append((f, [dict(t, name=renamed.get(t["name"], t["name"])) for t in defs]))
    return doc, out


def test_scale_examples_are_disjoint_from_every_evaluation_request() -> None:
    from rampart.tools import load_examples

    doc, servers = _scale_tools()
    new_tools = {t["name"] for f, defs in servers for t in defs} - {t.name for t in load_eval()[1]}
    files = [load_examples(f) for f in SCALE_EXAMPLES]
    assert not set(files[0]) & set(files[1])
    assert set(files[0]) | set(files[1]) == new_tools and len(new_tools) == 439

    def norm(text: str) -> str:
        return " ".join(text.lower().split())

    evaluated = {
        norm(r["request"])
        for path in (SCALE, EVAL, INDIRECT, FSGIT)
        for r in json.loads(path.read_text(encoding="utf-8"))["requests"]
    }
    taught = {norm(e) for table in files for v in table.values() for e in v}
    assert sorted(evaluated & taught) == []


@needs_model
def test_example_gate_at_479_tools() -> None:
    """At the scale set's largest tier (479 tools of 18 servers, every tool with author
    examples): the default example gate keeps a floor under its measured holdout
    top-3, and its server and hub terms do not lose on the tune half against the
    same weights without them (docs/tool-gate.md, Scale)."""
    from rampart.toolgate import ExampleGate
    from rampart.tools import load_examples, with_examples

    doc, servers = _scale_tools()
    examples: dict[str, list[str]] = {}
    for f in (EXAMPLES, *SCALE_EXAMPLES):
        for k, v in load_examples(f).items():
            examples.setdefault(k, []).extend(v)
    reg = rampart.BlockRegistry(embedding_model="default")
    for f, defs in servers:
        mine = {k: v for k, v in examples.items() if k in {t["name"] for t in defs}}
        reg.load_tools(with_examples({"tools": defs}, mine), tags=[f"server:{server_of(f)}"])
    base = json.loads(EVAL.read_text(encoding="utf-8"))["requests"]
    requests = base + doc["requests"]
    gates = {
        "default": ExampleGate(reg),
        "plain": ExampleGate(reg, server_weight=0, hub_weight=0),
    }
    tools = [b for b in reg.list_blocks() if b.tool_schema is not None]
    hits: dict[tuple[str, str], list[bool]] = {}
    for r in requests:
        for name, gate in gates.items():
            scores = gate(r["request"], tools)
            top = sorted(range(len(tools)), key=lambda i: -scores[i])[:3]
            hit = bool({tools[i].semantic_name for i in top} & set(r["acceptable"]))
            hits.setdefault((name, r["split"]), []).append(hit)
    reg.release()
    rate = {k: sum(v) / len(v) for k, v in hits.items()}
    # Measured: 89.2 % holdout top-3 (286 requests), 94.6 % tune against 92.6 % for
    # the same weights without the server and hub terms.
    assert rate["default", "holdout"] >= 0.88, rate
    assert rate["default", "tune"] >= rate["plain", "tune"], rate


def test_cli_tools_enrich_writes_examples_that_with_examples_loads(
    tmp_path: Any, monkeypatch: Any
) -> None:
    from rampart.cli import main
    from rampart.tools import load_examples, with_examples

    from tests import fake_openai as fake

    monkeypatch.setenv("RAMPART_CACHE_DIR", str(tmp_path / "cache"))
    turns: list[Any] = [("- what time is it in Lima?\n- time in Oslo now", [])] * 2
    out = tmp_path / "examples.json"
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        args = ["tools", "enrich", str(DATA / "mcp_time_tools.json"), "-n", "2"]
        assert (
            main([*args, "--base-url", server.base_url, "--model", "gen", "--out", str(out)]) == 0
        )
        assert len(server.payloads) == 2
        # A second run reads the cache: no model call, same file.
        again = tmp_path / "again.json"
        assert (
            main([*args, "--base-url", server.base_url, "--model", "gen", "--out", str(again)]) == 0
        )
        assert len(server.payloads) == 2
    table = load_examples(out)
    assert table == load_examples(again)
    assert table["convert_time"] == ["what time is it in Lima?", "time in Oslo now"]
    schemas = with_examples(DATA / "mcp_time_tools.json", out)
    assert schemas[0].examples == ("what time is it in Lima?", "time in Oslo now")


def test_bm25_score_array_equals_scores() -> None:
    from rampart.toolgate import BM25

    docs = ["Read a file from disk", "Switch git branches", "Read the commit logs", ""]
    index = BM25(docs)
    for q in ("read read the logs", "branches of git", "nothing matches", ""):
        assert index.score_array(q).tolist() == pytest.approx(index.scores(q))


def test_examples_travel_through_a_shared_registrys_journal(tmp_path: Any) -> None:
    """Author examples (block metadata) and learned examples (agent blocks) are
    journaled: a second replica gates with them and sees the rollback."""
    from rampart.tools import with_examples

    from tests.test_gate import HashingEmbedder

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    a = rampart.BlockRegistry.open(url, "tools", HashingEmbedder())
    b = rampart.BlockRegistry.open(url, "tools", HashingEmbedder())
    try:
        a.load_tools(
            with_examples(
                DATA / "mcp_time_tools.json", {"get_current_time": ["is it late in Oslo"]}
            )
        )
        a.load_tools(DATA / "mcp_git_tools.json")
        a.add_tool_example("git_log", "who has been pushing lately", trajectory_id="run-1")
        b.sync()
        assert [x.semantic_name for x, _ in b.find_relevant("is it late in Oslo", top_k=1)] == [
            "get_current_time"
        ]
        assert [
            x.semantic_name for x, _ in b.find_relevant("who has been pushing lately", top_k=1)
        ] == ["git_log"]
        a.rollback_trajectory("run-1")
        b.sync()
        assert not b.find_by_tag("tool-example")
        assert all(x.source == "seed" for x, _ in b.find_relevant("who has been pushing lately"))
    finally:
        a.close()
        b.close()


def test_a_replica_that_found_no_examples_notices_ones_another_replica_writes(
    tmp_path: Any,
) -> None:
    """A replica decides once that its registry has no tool examples (the cheap
    path for its gated compiles); examples another replica writes later, taught by
    its runs or loaded with their tools, switch it to the example gate at once."""
    from rampart.tools import with_examples

    from tests.test_gate import HashingEmbedder

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    a = rampart.BlockRegistry.open(url, "tools", HashingEmbedder())
    b = rampart.BlockRegistry.open(url, "tools", HashingEmbedder())
    try:
        a.load_tools(DATA / "mcp_git_tools.json")
        b.sync()
        task = "who has been pushing lately"
        b.compile(task_text=task, top_k=3, tools_in_prompt=False)
        assert b._gate.examples is False  # decided: the core's scan
        a.add_tool_example("git_log", task, trajectory_id="run-1")
        b.sync()
        r = b.compile(task_text=task, top_k=1, tools_in_prompt=False)
        assert [t["function"]["name"] for t in r.tools("openai")] == ["git_log"]
        row = next(x for x in r.report if x.name == "git_log")
        assert "best match: example" in row.detail
        # The same for author examples arriving with a tool another replica loads.
        c = rampart.BlockRegistry.open(url, "more", HashingEmbedder())
        d = rampart.BlockRegistry.open(url, "more", HashingEmbedder())
        try:
            c.load_tools(DATA / "mcp_git_tools.json")
            d.sync()
            d.compile(task_text="is it late in Oslo", top_k=1, tools_in_prompt=False)
            assert d._gate.examples is False
            c.load_tools(
                with_examples(
                    DATA / "mcp_time_tools.json", {"get_current_time": ["is it late in Oslo"]}
                )
            )
            d.sync()
            r = d.compile(task_text="is it late in Oslo", top_k=1, tools_in_prompt=False)
            assert [t["function"]["name"] for t in r.tools("openai")] == ["get_current_time"]
        finally:
            c.close()
            d.close()
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("trusted", [True, False])
def test_an_agent_learns_tool_examples_from_successful_runs(trusted: bool) -> None:
    """Issue 17: a successful run that called tool T for request X makes X an example
    of T (an agent write of the run: ``forget(run)`` takes it back); a run that read
    untrusted tool output teaches nothing."""
    from rampart.agent import Agent
    from rampart.llm import OpenAIBackend

    from tests import fake_openai as fake
    from tests.test_gate import HashingEmbedder

    def release_date(version: str) -> str:
        """Look up when a version of the project was released."""
        return "2025-03-05"

    reg = rampart.BlockRegistry(embedding_model=HashingEmbedder())
    reg.write_block("Answer in one line.", "style", "seed")
    task = "when did 1.4.0 ship?"
    turns: list[Any] = [("", [("release_date", {"version": "1.4.0"})]), ("5 March 2025", [])]
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        backend = OpenAIBackend(server.base_url, "m", native_tools=True)
        agent = Agent(
            reg,
            backend,
            tools=[release_date],
            check=lambda answer, run: (True, ""),
            learn=False,
            learn_tools=True,
            trusted_tools=[release_date] if trusted else (),
        )
        run = agent.run(task)
        backend.close()
    assert run.success is True
    if not trusted:
        assert run.untrusted_reads and reg.find_by_tag("tool-example") == []
        reg.release()
        return
    (learned,) = reg.find_by_tag("tool-example")
    assert learned.trajectory_id == run.trajectory_id and "release_date" in learned.tags
    assert [b.semantic_name for b, _ in reg.find_relevant(task, top_k=1)] == ["release_date"]
    assert agent.forget(run) >= 1
    assert reg.find_by_tag("tool-example") == []
    reg.release()
