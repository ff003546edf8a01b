"""Chat adapters: request bodies for OpenAI and Anthropic from a CompileResult."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import rampart
from rampart.adapters import anthropic_messages, openai_chat

from tests.conftest import words

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
        (lambda r: openai_chat(r, tools=[]), "tools cannot be passed as extra"),
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
