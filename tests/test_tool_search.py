"""Provider-native tool search answered by the gate (rampart.tool_search): request
bodies validated against the installed SDKs' types, answers to search calls, and a
replayed multi-turn run whose tools array stays byte-identical across tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import rampart
from rampart.adapters import (
    answer_tool_search,
    answered_tools,
    anthropic_messages,
    openai_responses,
)
from rampart.tool_search import SEARCH_TOOL, search_answer, search_tools

from tests import fake_embeddings
from tests.conftest import import_or_skip, words
from tests.test_adapters import sdk_check

DATA = Path(__file__).resolve().parent / "data"
SERVERS = ("git", "filesystem", "time")


class BagOfWords:
    """A real embedding model of the tests: each text a hashed bag of its words
    (tests/fake_embeddings.embed), so requests sharing words with a tool find it."""

    model_id = "bag-of-words-test"

    def encode(self, text: str) -> list[float]:
        return fake_embeddings.embed(text)


@pytest.fixture
def treg() -> Any:
    r = rampart.BlockRegistry(BagOfWords(), tokeniser=words, default_max_tokens=None)
    r.write_block("You are a careful release engineer.", "persona")
    for server in SERVERS:
        r.load_tools(DATA / f"mcp_{server}_tools.json", tags=[f"server:{server}"])
    yield r
    r.release()


@pytest.fixture
def sdks() -> Any:
    return import_or_skip("openai", "sdks"), import_or_skip("anthropic", "sdks")


def compile_for(reg: Any, task: str) -> Any:
    return reg.compile(task_text=task, top_k=3, tools_in_prompt=False)


TASKS = [
    "show me the commit log of the repository",
    "what time is it in Tokyo right now",
    "read the file README.md and list the directory",
]


# ---- Anthropic: defer_loading + tool_reference --------------------------------------------


def test_anthropic_deferred_body(treg: Any, sdks: Any) -> None:
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

    result = compile_for(treg, TASKS[0])
    gated = [t["name"] for t in result.tools("anthropic")]
    assert gated and len(gated) < len(result.registry_tools("anthropic"))
    user = {"role": "user", "content": TASKS[0]}
    body = anthropic_messages(result, [user], model="claude-sonnet-4-5", tools="deferred")
    tools = body["tools"]
    assert tools[0]["name"] == SEARCH_TOOL and "defer_loading" not in tools[0]
    assert [t["name"] for t in tools[1:]] == [t["name"] for t in result.registry_tools("anthropic")]
    assert all(t["defer_loading"] is True for t in tools[1:])
    assert set(gated) <= {t["name"] for t in tools[1:]}  # a reference names a sent tool
    # the preload: the user's message, the search call, its tool_reference result
    first, call, answer = body["messages"]
    assert first == user
    use = call["content"][0]
    assert call["role"] == "assistant" and use["type"] == "tool_use"
    assert use["name"] == SEARCH_TOOL and use["input"] == {"query": TASKS[0]}
    result_block = answer["content"][0]
    assert result_block["tool_use_id"] == use["id"]
    assert answered_tools(result_block) == gated
    sdk_check(MessageCreateParamsNonStreaming, body)
    # the same compile and messages give the same bytes (the messages' cache holds)
    again = anthropic_messages(result, [user], model="claude-sonnet-4-5", tools="deferred")
    assert json.dumps(again) == json.dumps(body)
    # a body's own messages sent back are not preloaded twice
    twice = anthropic_messages(result, body["messages"], tools="deferred")
    assert twice["messages"] == body["messages"]


def test_anthropic_deferred_cache_breakpoints_skip_deferred_tools(treg: Any) -> None:
    result = compile_for(treg, TASKS[0])
    body = anthropic_messages(
        result, [{"role": "user", "content": TASKS[0]}], tools="deferred", cache=True
    )
    # deferred tools are not in the model's context: no breakpoint counts them
    assert all("cache_control" not in t for t in body["tools"])


def test_anthropic_search_call_answered_by_the_gate(treg: Any, sdks: Any) -> None:
    from anthropic.types import MessageParam, ToolUseBlock

    use = ToolUseBlock(
        type="tool_use", id="toolu_9", name=SEARCH_TOOL, input={"query": "current time zone"}
    )
    block = answer_tool_search(treg, use, provider="anthropic")
    ranked = [s.name for s, _, _ in search_tools(treg, "current time zone")]
    assert answered_tools(block) == ranked and ranked
    assert block["tool_use_id"] == "toolu_9"
    sdk_check(MessageParam, {"role": "user", "content": [block]})
    named = answer_tool_search(
        treg,
        {"type": "tool_use", "id": "t", "name": SEARCH_TOOL, "input": {"query": "git_show"}},
        provider="anthropic",
    )
    assert answered_tools(named) == ["git_show"]
    empty = answer_tool_search(
        treg,
        {"type": "tool_use", "id": "t", "name": SEARCH_TOOL, "input": {}},
        provider="anthropic",
    )
    assert empty["is_error"] is True and answered_tools(empty) == []


def test_a_tool_named_like_the_search_tool_is_refused(sdks: Any) -> None:
    reg = rampart.BlockRegistry(tokeniser=words)
    reg.load_tools([{"name": SEARCH_TOOL, "input_schema": {"type": "object"}}])
    with pytest.raises(rampart.InvalidArgumentError, match="search tool"):
        anthropic_messages(reg.compile(), [{"role": "user", "content": "x"}], tools="deferred")
    reg.release()


@pytest.mark.parametrize(
    ("call", "provider", "match"),
    [
        ({"type": "text", "text": "x"}, "anthropic", "tool_use block"),
        ({"type": "tool_search_call", "arguments": {}}, "openai-responses", "call_id"),
        ({"id": "c"}, "openai", "function"),
        ("query", "anthropic", "call must be a dict"),
        ({"type": "tool_use", "id": "t", "input": {}}, "gemini", "provider must be one of"),
    ],
)
def test_malformed_calls_are_typed_errors(treg: Any, call: Any, provider: str, match: str) -> None:
    with pytest.raises(rampart.InvalidArgumentError, match=match):
        answer_tool_search(treg, call, provider=provider)


# ---- OpenAI Responses: tool_search (client) + namespaces ----------------------------------


def test_openai_search_body(treg: Any, sdks: Any) -> None:
    from openai.types.responses import ResponseInputItemParam
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

    result = compile_for(treg, TASKS[1])
    gated = [t["name"] for t in result.tools("openai-responses")]
    user = {"role": "user", "content": TASKS[1]}
    body = openai_responses(result, [user], model="gpt-5.4", tools="search")
    tools = body["tools"]
    assert tools[-1]["type"] == "tool_search" and tools[-1]["execution"] == "client"
    spaces = [t for t in tools if t["type"] == "namespace"]
    assert [s["name"] for s in spaces] == list(SERVERS)
    every = [f["name"] for s in spaces for f in s["tools"]]
    assert every == [t["name"] for t in result.registry_tools("openai-responses")]
    assert all(f["defer_loading"] is True for s in spaces for f in s["tools"])
    first, call, output = body["input"]
    assert first == user and call["type"] == "tool_search_call"
    assert output["type"] == "tool_search_output" and output["call_id"] == call["call_id"]
    assert answered_tools(output) == [n for n in every if n in gated]
    # a loaded namespace is described as the one in the tools array
    described = {s["name"]: s["description"] for s in spaces}
    assert all(s["description"] == described[s["name"]] for s in output["tools"])
    sdk_check(ResponseCreateParamsNonStreaming, body)
    for item in body["input"]:
        sdk_check(ResponseInputItemParam, item)


def test_openai_search_call_answered_by_the_gate(treg: Any, sdks: Any) -> None:
    from openai.types.responses import ResponseInputItemParam, ResponseToolSearchCall

    call = ResponseToolSearchCall(
        id="ts_1",
        type="tool_search_call",
        call_id="call_7",
        execution="client",
        status="completed",
        arguments={"query": "list the files of a directory"},
    )
    out = answer_tool_search(treg, call, provider="openai-responses")
    ranked = [s.name for s, _, _ in search_tools(treg, "list the files of a directory")]
    assert ranked and sorted(answered_tools(out)) == sorted(ranked)
    assert out["call_id"] == "call_7"
    sdk_check(ResponseInputItemParam, out)
    # the MCP server's find_tools(format=...) returns the same tools
    found = search_tools(treg, "list the files of a directory")
    assert search_answer(treg, found, "openai-responses") == out["tools"]


# ---- a replayed multi-turn run: the tools array never changes ----------------------------


def test_replayed_run_keeps_the_tools_array_byte_identical(treg: Any, sdks: Any) -> None:
    """Three tasks, three turns each, replayed with scripted model turns: the model
    searches, then calls the tool found, then answers. Every request of every task
    sends the same tools bytes, for both providers."""
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

    claude_tools: set[str] = set()
    openai_tools: set[str] = set()
    for n, task in enumerate(TASKS):
        result = compile_for(treg, task)
        # Anthropic
        msgs: list[Any] = [{"role": "user", "content": task}]
        search = {"type": "tool_use", "id": f"toolu_s{n}", "name": SEARCH_TOOL}
        search["input"] = {"query": task.split()[-1]}
        for turn in range(3):
            body = anthropic_messages(result, msgs, model="claude-sonnet-4-5", tools="deferred")
            sdk_check(MessageCreateParamsNonStreaming, body)
            claude_tools.add(json.dumps(body["tools"], sort_keys=False))
            if turn == 0:
                msgs.append({"role": "assistant", "content": [search]})
                answer = answer_tool_search(treg, search, provider="anthropic")
                msgs.append({"role": "user", "content": [answer]})
            elif turn == 1:
                name = (answered_tools(answer) or ["git_status"])[0]
                use = {"type": "tool_use", "id": f"toolu_c{n}", "name": name, "input": {}}
                msgs.append({"role": "assistant", "content": [use]})
                done = {"type": "tool_result", "tool_use_id": use["id"], "content": "ok"}
                msgs.append({"role": "user", "content": [done]})
        # OpenAI Responses
        items: list[Any] = [{"role": "user", "content": task}]
        for turn in range(3):
            body = openai_responses(result, items, model="gpt-5.4", tools="search")
            sdk_check(ResponseCreateParamsNonStreaming, body)
            openai_tools.add(json.dumps(body["tools"]))
            if turn == 0:
                call = {
                    "type": "tool_search_call",
                    "call_id": f"call_s{n}",
                    "execution": "client",
                    "status": "completed",
                    "arguments": {"query": task.split()[-1]},
                }
                items += [call, answer_tool_search(treg, call, provider="openai-responses")]
            elif turn == 1:
                name = (answered_tools(items[-1]) or ["git_status"])[0]
                fc = {"type": "function_call", "call_id": f"call_c{n}", "name": name}
                fc["arguments"] = "{}"
                items += [
                    fc,
                    {"type": "function_call_output", "call_id": fc["call_id"], "output": "ok"},
                ]
    assert len(claude_tools) == 1 and len(openai_tools) == 1
    # and the gated compiles did differ from task to task
    gated = {tuple(t["name"] for t in compile_for(treg, task).tools("anthropic")) for task in TASKS}
    assert len(gated) > 1


def test_async_answer_matches_the_sync_one(treg: Any) -> None:
    import asyncio

    from rampart.adapters import aanswer_tool_search

    call = {"type": "tool_use", "id": "t", "name": SEARCH_TOOL, "input": {"query": "time zone"}}
    sync = answer_tool_search(treg, call, provider="anthropic")
    assert asyncio.run(aanswer_tool_search(treg, call, provider="anthropic")) == sync


def test_agent_find_tools_is_answered_by_answer_tool_search(treg: Any) -> None:
    """The agent's find_tools call (Chat Completions form) goes through the same
    answer: the JSON rows name the tools search_tools finds."""
    from rampart.llm import ToolCall

    call = ToolCall("call_1", "find_tools", json.dumps({"query": "current time zone"}))
    msg = answer_tool_search(treg, call, provider="openai")
    assert msg["role"] == "tool" and msg["tool_call_id"] == "call_1"
    assert answered_tools(msg) == [s.name for s, _, _ in search_tools(treg, "current time zone")]


def test_a_registry_without_a_model_searches_its_tools_lexically() -> None:
    # Before the shared scorer (rampart.relevance) a model-less search found nothing.
    reg = rampart.BlockRegistry(tokeniser=words)
    for server in SERVERS:
        reg.load_tools(DATA / f"mcp_{server}_tools.json")
    found = search_tools(reg, "show me the commit log of the repository", k=3)
    assert found and found[0][0].name == "git_log" and found[0][1] == "relevance"
    assert all(score is not None and score > 0 for _, _, score in found)
    assert search_tools(reg, "zzqx unrelated", k=3) == []
