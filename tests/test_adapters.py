"""Chat adapters: request bodies for OpenAI and Anthropic from a CompileResult."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import rampart
from rampart.adapters import anthropic_messages, openai_chat, openai_responses, without_schema_uri

from tests import fake_openai as fake
from tests.conftest import import_or_skip, words

GIT = Path(__file__).resolve().parent / "data" / "mcp_git_tools.json"
USER = [{"role": "user", "content": "What changed since yesterday?"}]


@pytest.fixture
def areg() -> Any:
    r = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None, label="adapters-under-test")
    r.write_block("You are a careful release engineer.", "persona")
    r.load_tools(GIT)
    yield r
    r.release()


def test_openai_chat_body(areg: Any) -> None:
    result = areg.compile()
    body = openai_chat(result, USER, model="gpt-4o", temperature=0)
    assert list(body) == ["model", "messages", "tools", "temperature"]
    assert body["model"] == "gpt-4o" and body["temperature"] == 0
    assert body["messages"] == [{"role": "system", "content": result.prompt}, *USER]
    assert body["tools"] == result.tools("openai")
    assert body["tools"][0] == {
        "type": "function",
        "function": {
            "name": "git_status",
            "description": "Shows the working tree status",
            "parameters": {
                "type": "object",
                "title": "GitStatus",
                "properties": {"repo_path": {"type": "string", "title": "Repo Path"}},
                "required": ["repo_path"],
            },
        },
    }
    json.dumps(body)  # plain JSON, ready to post
    dev = openai_chat(result, system_role="developer")
    assert dev["messages"] == [{"role": "developer", "content": result.prompt}]
    assert "model" not in dev


def test_anthropic_messages_body(areg: Any) -> None:
    result = areg.compile()
    body = anthropic_messages(result, USER, model="claude-sonnet-4-5", max_tokens=2048, top_k=5)
    assert list(body) == ["model", "max_tokens", "system", "messages", "tools", "top_k"]
    assert body["system"] == result.prompt and body["messages"] == USER
    assert body["messages"] is not USER  # a new list, same message dicts
    assert body["tools"] == result.tools("anthropic")
    assert body["tools"][0]["input_schema"]["required"] == ["repo_path"]
    assert anthropic_messages(result)["max_tokens"] == 1024
    json.dumps(body)


def test_evicted_tool_is_absent_from_request(areg: Any) -> None:
    areg.evict(areg.get_by_name("git_reset")[0].runtime_id)
    body = anthropic_messages(areg.compile(), USER)
    assert "git_reset" not in json.dumps(body)


def test_empty_prompt_and_no_tools_are_left_out() -> None:
    reg = rampart.BlockRegistry(tokeniser=words)
    empty = reg.compile()
    assert openai_chat(empty, USER) == {"messages": USER}
    assert anthropic_messages(empty, USER) == {"max_tokens": 1024, "messages": USER}
    reg.write_block("Be brief.", "style")
    body = openai_chat(reg.compile())
    assert body == {"messages": [{"role": "system", "content": "Be brief."}]}


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda r: openai_chat("prompt"), "expected a CompileResult"),  # type: ignore[arg-type]
        (lambda r: anthropic_messages(None), "expected a CompileResult"),  # type: ignore[arg-type]
        (lambda r: openai_chat(r, {"role": "user"}), "messages must be a list"),
        (lambda r: openai_chat(r, "hi"), "messages must be a list"),
        (lambda r: openai_chat(r, [{"content": "x"}]), r"messages\[0\] must be a dict"),
        (lambda r: openai_chat(r, ["hi"]), r"messages\[0\]"),
        (lambda r: openai_chat(r, model=""), "model must be a non-empty string"),
        (lambda r: openai_chat(r, system_role="user"), "system_role"),
        (lambda r: openai_chat(r, messages=USER, system="x"), "system cannot be passed"),
        (lambda r: anthropic_messages(r, model=3), "model must be"),
        (lambda r: anthropic_messages(r, max_tokens=0), "max_tokens must be an int >= 1"),
        (lambda r: anthropic_messages(r, max_tokens=True), "max_tokens"),
        (lambda r: anthropic_messages(r, system="x"), "system cannot be passed"),
        (
            lambda r: anthropic_messages(r, [{"role": "system", "content": "x"}]),
            r"messages\[0\] has role 'system'",
        ),
    ],
)
def test_bad_arguments(areg: Any, call: Any, match: str) -> None:
    with pytest.raises(rampart.InvalidArgumentError, match=match):
        call(areg.compile())


# ---- the real SDKs' own request types ------------------------------------------------------

DATA = Path(__file__).resolve().parent / "data"
TOOL_FILES = sorted(p for p in DATA.glob("*_tools.json"))


@pytest.fixture
def sdks() -> Any:
    """The real openai and anthropic packages (skipped without them, unless
    RAMPART_REQUIRE_SDKS=1, where their absence fails)."""
    return import_or_skip("openai", "sdks"), import_or_skip("anthropic", "sdks")


def sdk_check(typed_dict: Any, value: Any) -> Any:
    """Validate ``value`` against an SDK TypedDict with pydantic, refusing keys the type
    does not declare (pydantic ignores them on TypedDicts), and consume ``Iterable``
    fields, which pydantic only checks when iterated."""
    import typing

    from pydantic import TypeAdapter, ValidationError

    members = typing.get_args(typed_dict)
    if members:  # a union (MessageParam): one member must take it, keys and all
        errors = []
        for member in members:
            try:
                return sdk_check(member, value)
            except (AssertionError, ValidationError) as exc:
                errors.append(f"{member.__name__}: {exc}")
        raise AssertionError("no member of the union takes it:\n" + "\n".join(errors))
    declared = typed_dict.__required_keys__ | typed_dict.__optional_keys__
    unknown = set(value) - declared
    assert not unknown, f"{typed_dict.__name__} has no {sorted(unknown)}"
    adapter = TypeAdapter(typed_dict)  # kept alive while its lazy iterators run
    return _consume(adapter.validate_python(value))


def _consume(v: Any) -> Any:
    """Iterate every lazily validated ``Iterable`` field, however deep."""
    if isinstance(v, dict):
        return {k: _consume(x) for k, x in v.items()}
    if isinstance(v, (str, bytes)):
        return v
    if isinstance(v, list) or hasattr(v, "__next__"):
        return [_consume(x) for x in v]
    return v


@pytest.fixture(scope="module")
def every_tool() -> Any:
    r = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None)
    seen: set[str] = set()
    for path in TOOL_FILES:  # a name two files share (get_current_time) is loaded once
        raw = json.loads(path.read_text(encoding="utf-8"))
        while isinstance(raw, dict):
            raw = raw.get("result", raw.get("tools"))
        fresh = [e for e in raw if (e.get("name") or e["function"]["name"]) not in seen]
        seen.update(e.get("name") or e["function"]["name"] for e in fresh)
        r.load_tools(fresh)
    yield r
    r.release()


def test_every_tool_is_a_valid_sdk_tool_param(every_tool: Any, sdks: Any) -> None:
    from anthropic.types import ToolParam
    from openai.types.chat import ChatCompletionFunctionToolParam
    from openai.types.responses import FunctionToolParam
    from openai.types.shared_params import FunctionDefinition

    result = every_tool.compile()
    chat, responses, claude = (result.tools(f) for f in ("openai", "openai-responses", "anthropic"))
    assert len(chat) == len(responses) == len(claude) >= 40
    for tool in chat:
        sdk_check(ChatCompletionFunctionToolParam, tool)
        sdk_check(FunctionDefinition, tool["function"])
    for tool in responses:
        sdk_check(FunctionToolParam, tool)
        assert isinstance(tool["strict"], bool)  # required by the Responses API
    for tool in claude:
        sdk_check(ToolParam, tool)
    # a source that said strict keeps it in every format
    weather = [t for t in chat if t["function"].get("strict") is True]
    assert weather and all(
        t["strict"] is True for t in claude if t["name"] == weather[0]["function"]["name"]
    )


def tool_turn_openai() -> Any:
    """A real SDK response object with a tool call, parsed by the SDK."""
    from openai.types.chat import ChatCompletion

    body = fake.completion("", {"messages": []}, [("git_status", {"repo_path": "."})])
    return ChatCompletion.model_validate(json.loads(body))


def test_openai_chat_body_is_a_valid_sdk_request(every_tool: Any, sdks: Any) -> None:
    from openai.types.chat import ChatCompletionMessageParam
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

    resp = tool_turn_openai()
    messages: list[Any] = [*USER, resp.choices[0].message]  # the SDK's own object
    messages.append({"role": "tool", "tool_call_id": "call_0", "content": "clean"})
    body = openai_chat(every_tool.compile(), messages, model="gpt-4o", tool_choice="auto")
    json.dumps(body)  # plain JSON: the SDK object became a dict
    assistant = body["messages"][2]
    assert assistant["role"] == "assistant" and "annotations" not in assistant
    assert assistant["tool_calls"][0]["function"]["name"] == "git_status"
    checked = sdk_check(CompletionCreateParamsNonStreaming, body)
    assert len(checked["messages"]) == 4 and len(checked["tools"]) == len(body["tools"])
    for m in body["messages"]:  # item by item, each against the union's members
        sdk_check(ChatCompletionMessageParam, m)


def test_anthropic_body_is_a_valid_sdk_request(every_tool: Any, sdks: Any) -> None:
    from anthropic.types import Message, MessageParam
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

    resp = Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "git_status", "input": {}},
            ],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    )
    result_msg = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "clean"}],
    }
    for assistant in (resp, {"role": "assistant", "content": resp.content}):
        body = anthropic_messages(
            every_tool.compile(), [*USER, assistant, result_msg], model="claude-sonnet-4-5"
        )
        json.dumps(body)
        assert body["messages"][1] == {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "git_status", "input": {}},
            ],
        }
        checked = sdk_check(MessageCreateParamsNonStreaming, body)
        assert len(checked["messages"]) == 3 and len(checked["tools"]) == len(body["tools"])
        for m in body["messages"]:
            sdk_check(MessageParam, m)


def test_drop_schema_uri() -> None:
    r = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None)
    r.load_tools(DATA / "mcp_filesystem_tools.json")
    r.load_tools(
        [
            {
                "name": "odd",
                "inputSchema": {
                    "$schema": "http://json-schema.org/draft-07/schema#",
                    "type": "object",
                    # a parameter that happens to be called "$schema" stays
                    "properties": {"$schema": {"type": "string", "$schema": "x"}},
                    "$defs": {"d": {"$schema": "y", "type": "string"}},
                },
            }
        ]
    )
    result = r.compile()
    kept = openai_chat(result)["tools"]
    assert "$schema" in json.dumps(kept)
    for body, key in (
        (openai_chat(result, drop_schema_uri=True)["tools"], "function"),
        (anthropic_messages(result, drop_schema_uri=True)["tools"], None),
    ):
        schemas = [t["function"]["parameters"] if key else t["input_schema"] for t in body]
        odd = schemas[-1]
        assert odd == {
            "type": "object",
            "properties": {"$schema": {"type": "string"}},
            "$defs": {"d": {"type": "string"}},
        }
        text = json.dumps(schemas[:-1])
        assert "$schema" not in text and "json-schema.org" not in text
    # nothing else changed
    stripped = without_schema_uri(kept)
    first = kept[0]["function"]["parameters"]
    assert {k: v for k, v in first.items() if k != "$schema"} == stripped[0]["function"][
        "parameters"
    ]
    assert "$schema" in kept[0]["function"]["parameters"]  # the input is not changed
    r.release()


def test_openai_sdk_client_sends_the_body_unchanged(every_tool: Any, sdks: Any) -> None:
    openai_sdk = sdks[0]
    # The SDK itself posts the adapter's body to the fake server, which records it.
    result = every_tool.compile(tools_in_prompt=False)
    with fake.FakeOpenAI(fake.scripted([("", [("git_status", {"repo_path": "."})])])) as server:
        client = openai_sdk.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        resp = client.chat.completions.create(**openai_chat(result, USER, model="m"))
        follow = [*USER, resp.choices[0].message]
        follow.append({"role": "tool", "tool_call_id": "call_0", "content": "clean"})
        client.chat.completions.create(**openai_chat(result, follow, model="m"))
        client.close()
        first, second = server.payloads
    assert first["tools"] == result.tools("openai") and first["messages"] == USER
    assert second["messages"][1]["tool_calls"][0]["function"]["name"] == "git_status"
    assert second["messages"][2] == follow[2]


# ---- tool choices and prompt caching (docs/specification.md §8) ----------------------------------


def overlap_gate(task: str, blocks: Any) -> list[float]:
    """A real relevance gate: the share of the task's words a block's text has."""
    import re

    want = set(re.findall(r"[a-z]+", task.lower()))
    return [
        len(want & set(re.findall(r"[a-z]+", b.gate_text.lower()))) / (len(want) or 1)
        for b in blocks
    ]


@pytest.fixture
def cached_reg() -> Any:
    """An ungated head (rules and the git tools) long enough to cache, then gated
    lessons and gated filesystem tools."""
    r = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None)
    r.write_block("Follow the house rules carefully. " * 260, "rules", gated=False)
    r.load_tools(GIT, gated=False)
    for i, topic in enumerate(["commit message", "branch name", "file reading", "directory tree"]):
        r.write_block(f"Lesson {i} on the {topic}: think about the {topic}. " * 5, f"lesson_{i}")
    r.load_tools(DATA / "mcp_filesystem_tools.json")
    yield r
    r.release()


def gated(r: Any, task: str, **kw: Any) -> Any:
    return r.compile(task_text=task, top_k=3, gate=overlap_gate, **kw)


def test_tools_all_is_byte_stable_across_tasks(cached_reg: Any) -> None:
    a, b = gated(cached_reg, "read the file"), gated(cached_reg, "write a commit message")
    assert a.tools("openai") != b.tools("openai")  # the gate picks other tools
    every = [blk.tool_schema.name for blk in cached_reg.list_blocks() if blk.tool_schema]
    for adapter, key in (
        (openai_chat, "tools"),
        (openai_responses, "tools"),
        (anthropic_messages, "tools"),
    ):
        one, two = (json.dumps(adapter(r, USER, tools="all")["tools"]) for r in (a, b))
        assert one == two, adapter.__name__
        names = [t.get("name") or t["function"]["name"] for t in json.loads(one)]
        assert names == every  # registry order
        gated_names = [t.get("name") or t["function"]["name"] for t in adapter(a, USER)["tools"]]
        assert gated_names == [t["function"]["name"] for t in a.tools("openai")], key
    # an evicted tool is absent whatever the choice
    cached_reg.evict(cached_reg.get_by_name("git_reset")[0].runtime_id)
    c = gated(cached_reg, "read the file")
    assert "git_reset" not in json.dumps(openai_chat(c, tools="all"))
    # same registry state, same arguments: byte-identical bodies
    assert json.dumps(anthropic_messages(c, USER, cache=True, tools="all")) == json.dumps(
        anthropic_messages(gated(cached_reg, "read the file"), USER, cache=True, tools="all")
    )


def test_allowed_tools_restricts_without_touching_tools(cached_reg: Any, sdks: Any) -> None:
    from openai.types.chat import ChatCompletionAllowedToolChoiceParam
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
    from openai.types.responses import ToolChoiceAllowedParam
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

    a, b = gated(cached_reg, "read the file"), gated(cached_reg, "list the directory tree")
    kept = [t["function"]["name"] for t in a.tools("openai")]
    assert kept and len(kept) < len(a.registry_tools("openai"))
    chat = openai_chat(a, USER, model="gpt-5", tools="allowed", prompt_cache_key="agent-7")
    assert chat["tools"] == a.registry_tools("openai")
    assert chat["tools"] == openai_chat(b, USER, tools="allowed")["tools"]
    assert chat["tool_choice"] == {
        "type": "allowed_tools",
        "allowed_tools": {
            "mode": "auto",
            "tools": [{"type": "function", "function": {"name": n}} for n in kept],
        },
    }
    assert chat["prompt_cache_key"] == "agent-7"
    sdk_check(ChatCompletionAllowedToolChoiceParam, chat["tool_choice"])
    sdk_check(CompletionCreateParamsNonStreaming, chat)
    resp = openai_responses(a, USER, model="gpt-5", tools="allowed", prompt_cache_key="agent-7")
    assert resp["tool_choice"] == {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [{"type": "function", "name": n} for n in kept],
    }
    assert resp["tools"] == a.registry_tools("openai-responses")
    sdk_check(ToolChoiceAllowedParam, resp["tool_choice"])
    sdk_check(ResponseCreateParamsNonStreaming, resp)
    # the gate kept no tool: every tool is still sent, none may be called
    only_gated = rampart.BlockRegistry(tokeniser=words)
    only_gated.load_tools(GIT)
    none = only_gated.compile(task_text="zzz", relevance_threshold=0.5, gate=overlap_gate)
    assert none.tools() == [] and len(none.registry_tools()) == 11
    assert openai_chat(none, tools="allowed")["tool_choice"] == "none"
    assert openai_responses(none, tools="allowed")["tool_choice"] == "none"
    # no tool in the registry: no tools, no tool choice
    bare = rampart.BlockRegistry(tokeniser=words)
    bare.write_block("Be brief.", "style")
    assert openai_chat(bare.compile(), tools="allowed") == {
        "messages": [{"role": "system", "content": "Be brief."}]
    }


def test_openai_responses_body_is_a_valid_sdk_request(every_tool: Any, sdks: Any) -> None:
    from openai.types.responses import Response, ResponseInputItemParam
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

    result = every_tool.compile()
    out = Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 0,
            "model": "gpt-5",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "output": [
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_1",
                    "name": "git_status",
                    "arguments": '{"repo_path": "."}',
                    "status": "completed",
                }
            ],
        }
    )
    items: list[Any] = [*USER, *out.output]  # the SDK's own output item goes back in
    items.append({"type": "function_call_output", "call_id": "call_1", "output": "clean"})
    body = openai_responses(result, items, model="gpt-5", temperature=0)
    assert list(body) == ["model", "instructions", "input", "tools", "temperature"]
    assert body["instructions"] == result.prompt
    assert body["input"][1]["type"] == "function_call" and body["input"][1]["call_id"] == "call_1"
    json.dumps(body)
    checked = sdk_check(ResponseCreateParamsNonStreaming, body)
    assert len(checked["input"]) == 3 and len(checked["tools"]) == len(body["tools"])
    for item in body["input"]:
        sdk_check(ResponseInputItemParam, item)
    empty = rampart.BlockRegistry(tokeniser=words).compile()
    assert openai_responses(empty, USER) == {"input": USER}


def system_marks(body: dict[str, Any]) -> list[bool]:
    return ["cache_control" in b for b in body["system"]]


def test_anthropic_cache_breakpoints(cached_reg: Any, sdks: Any) -> None:
    from anthropic.types import MessageParam, TextBlockParam, ToolParam
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

    r = gated(cached_reg, "read the file")
    assert 0 < r.stable_prefix_chars < len(r.prompt) and r.stable_prefix_tokens >= 1024
    assert anthropic_messages(r, USER)["system"] == r.prompt  # cache=False: as before
    body = anthropic_messages(r, USER, cache=True, tools="all", model="claude-sonnet-4-5")
    texts = [b["text"] for b in body["system"]]
    assert texts == [r.prompt[: r.stable_prefix_chars], r.prompt[r.stable_prefix_chars :]]
    assert texts[1].startswith(rampart.DEFAULT_SEPARATOR)
    assert system_marks(body) == [True, True]
    # tools="all" is stable, and the tools alone are long enough only with a low minimum
    assert "cache_control" not in body["tools"][-1]
    low = anthropic_messages(r, USER, cache=True, tools="all", min_cache_tokens=300)
    assert low["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert all("cache_control" not in t for t in low["tools"][:-1])
    assert low["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert json.dumps(low).count('"cache_control"') == 4  # tools, head, system end, message
    # the gated tools array changes with the task: no breakpoint on it
    gated_tools = anthropic_messages(r, USER, cache=True, min_cache_tokens=300)
    assert all("cache_control" not in t for t in gated_tools["tools"])
    # the last message is marked on a copy; the caller's message is not changed
    assert USER[0] == {"role": "user", "content": "What changed since yesterday?"}
    assert body["messages"][0]["content"] == [
        {
            "type": "text",
            "text": "What changed since yesterday?",
            "cache_control": {"type": "ephemeral"},
        }
    ]
    # nothing below the minimum: a 5 000-token minimum leaves no breakpoint at all
    high = anthropic_messages(r, USER, cache=True, tools="all", min_cache_tokens=5000)
    assert '"cache_control"' not in json.dumps(high)
    assert "".join(b["text"] for b in high["system"]) == r.prompt
    # an hour's TTL, and markers the caller placed count toward the four
    mark = {"type": "ephemeral"}
    texts2 = [{"type": "text", "text": t, "cache_control": mark} for t in "ab"]
    own = [{"role": "user", "content": texts2}]
    hour = anthropic_messages(r, own, cache=True, tools="all", min_cache_tokens=300, cache_ttl="1h")
    assert json.dumps(hour).count('"cache_control"') == 4
    assert hour["tools"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert system_marks(hour) == [True, False]
    # an ungated compile: one block, marked at its end
    whole = anthropic_messages(cached_reg.compile(), cache=True)
    assert len(whole["system"]) == 1 and system_marks(whole) == [True]
    for b in (body, low, hour, high, whole):
        json.dumps(b)
        sdk_check(MessageCreateParamsNonStreaming, {"model": "claude-sonnet-4-5", **b})
        for block in b["system"]:
            sdk_check(TextBlockParam, block)
        for tool in b.get("tools", []):
            sdk_check(ToolParam, tool)
        for m in b["messages"]:
            sdk_check(MessageParam, m)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda r: openai_chat(r, tools=[]), "tools must be one of"),
        (lambda r: openai_responses(r, tools="some"), "tools must be one of"),
        (lambda r: anthropic_messages(r, tools="allowed"), "allowed_tools"),
        (lambda r: openai_chat(r, prompt_cache_key=""), "prompt_cache_key"),
        (lambda r: openai_responses(r, prompt_cache_key=3), "prompt_cache_key"),
        (lambda r: openai_responses(r, "hi"), "list of Responses input items"),
        (lambda r: openai_responses(r, [{"content": "x"}]), r"messages\[0\]"),
        (lambda r: openai_responses(r, instructions="x"), "instructions cannot be passed"),
        (lambda r: anthropic_messages(r, cache=True, cache_ttl="2h"), "cache_ttl"),
        (lambda r: anthropic_messages(r, cache=True, min_cache_tokens="1"), "min_cache_tokens"),
        (
            lambda r: openai_chat(r, tools="allowed", tool_choice="auto"),
            "tool_choice cannot be passed",
        ),
    ],
)
def test_bad_cache_arguments(cached_reg: Any, call: Any, match: str) -> None:
    with pytest.raises(rampart.InvalidArgumentError, match=match):
        call(gated(cached_reg, "read the file"))


def test_tools_sent_count_toward_the_cache_minimum() -> None:
    # 700 words of rules alone are below 1 024; with the tools before them (sent as
    # JSON, counted by their blocks' text) the prefix is long enough.
    r = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None)
    r.write_block("Follow the rules. " * 233, "rules", gated=False)
    r.load_tools(DATA / "mcp_filesystem_tools.json", gated=False)
    r.write_block("Lesson: list the directory before reading files.", "lesson")
    tool_words = sum(b.token_count for b in r.list_blocks() if b.tool_schema)
    assert 699 + tool_words >= 1024 > 699
    res = r.compile(task_text="list files", top_k=1, gate=overlap_gate, tools_in_prompt=False)
    assert res.stable_prefix_tokens == 699
    body = anthropic_messages(res, USER, cache=True, tools="all")
    assert system_marks(body) == [True, True]
    alone = anthropic_messages(res, USER, cache=True, tools="gated")  # gated: not stable...
    assert system_marks(alone) == [True, True]  # ...but the same tools are sent, and count
    no_tools = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None)
    no_tools.write_block("Follow the rules. " * 233, "rules", gated=False)
    no_tools.write_block("Lesson: list the directory before reading files.", "lesson")
    bare = no_tools.compile(task_text="list files", top_k=1, gate=overlap_gate)
    assert '"cache_control"' not in json.dumps(anthropic_messages(bare, USER, cache=True))
