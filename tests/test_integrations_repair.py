"""The LangChain middleware and the Agents SDK session give the model's tool calls
the repair the Agent gives them (rampart.tools.calls.prepare): a null, empty or
repeated call id becomes ``call_<step>_<n>``, a name no tool can have becomes
``invalid_tool_name``, and each output stays with its own call (issue 36).
Through the real packages, against the local OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import rampart

from tests import fake_openai as fake
from tests.conftest import import_or_skip
from tests.test_conversation_fuzz import check_chat


def _malformed_reply(payload: dict[str, Any], n: int) -> tuple[int, bytes, float]:
    """First a reply of four calls: a null id, one id twice, an empty name; then an answer."""
    if n:
        return 200, fake.completion("done", payload), 0.0
    calls = [("read_log", {"path": p}) for p in "abcd"]
    body = json.loads(fake.completion("", payload, calls))
    tcs = body["choices"][0]["message"]["tool_calls"]
    tcs[0]["id"] = None
    tcs[1]["id"] = tcs[2]["id"] = "dup"
    tcs[3]["function"]["name"] = ""
    return 200, json.dumps(body).encode(), 0.0


def test_langchain_middleware_repairs_the_models_calls() -> None:
    import_or_skip("langchain.agents", "langchain")
    import_or_skip("langchain_openai", "langchain")
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from rampart.integrations.langchain_middleware import RampartMiddleware

    @tool
    def read_log(path: str) -> str:
        """Read a log file."""
        return f"log of {path}"

    reg = rampart.BlockRegistry(default_max_tokens=None)
    mw = RampartMiddleware(reg, context_window=9000, reply_tokens=512)
    with fake.FakeOpenAI(_malformed_reply) as server:
        model = ChatOpenAI(
            model="fake-model", base_url=server.base_url, api_key="test-key", max_retries=0
        )
        agent = create_agent(model, [read_log], middleware=[mw])
        # before: LangGraph's tool node failed on the null id (a TypeError out of invoke)
        out = agent.invoke({"messages": [{"role": "user", "content": "read the logs"}]})
        payloads = server.payloads
    assert out["messages"][-1].content == "done"
    ai = next(m for m in out["messages"] if m.type == "ai" and m.tool_calls)
    ids = [c["id"] for c in ai.tool_calls]
    assert ids[1] == "dup" and len(set(ids)) == 4 and all(ids)
    assert ai.tool_calls[3]["name"] == "invalid_tool_name"
    answered = {m.tool_call_id: m.content for m in out["messages"] if m.type == "tool"}
    assert [answered[i] for i in ids[:3]] == ["log of a", "log of b", "log of c"]
    assert "invalid_tool_name" in answered[ids[3]]  # an error the model reads
    check_chat([m for m in payloads[1]["messages"] if m["role"] != "system"])
    reg.release()


def _sdk_items(agents: Any) -> list[Any]:
    """A turn as the SDK's own item types: calls with one id twice, an empty id, an
    empty name, and their outputs in the order the calls were made."""
    from openai.types.responses import ResponseFunctionToolCall

    def call(cid: str, name: str, path: str) -> Any:
        return ResponseFunctionToolCall(
            type="function_call", call_id=cid, name=name, arguments=json.dumps({"path": path})
        )

    return [
        {"role": "user", "content": "read the logs"},
        call("dup", "read_log", "a"),
        call("dup", "read_log", "b"),
        call("", "read_log", "c"),
        call("ok_1", "", "d"),
        {"type": "function_call_output", "call_id": "dup", "output": "log of a"},
        {"type": "function_call_output", "call_id": "dup", "output": "log of b"},
        {"type": "function_call_output", "call_id": "", "output": "log of c"},
        {"type": "function_call_output", "call_id": "ok_1", "output": "error: no such tool"},
        {"role": "assistant", "content": "read them"},
    ]


def test_agents_sdk_session_repairs_the_models_calls() -> None:
    agents = import_or_skip("agents", "agents")
    from openai import AsyncOpenAI
    from rampart.integrations.openai_agents_session import RampartSession

    agents.set_tracing_disabled(True)

    @agents.function_tool
    def read_log(path: str) -> str:
        """Read a log file."""
        return f"log of {path}"

    reg = rampart.BlockRegistry(default_max_tokens=None)
    session = RampartSession(reg, context_window=9000)
    items = _sdk_items(agents)
    # before: an empty id or name refused the whole batch; a repeated id paired
    # "log of a" with the second call
    asyncio.run(session.add_items(items[:5]))  # the calls in one batch, outputs in the next
    asyncio.run(session.add_items(items[5:]))
    results = {
        it.call_id: it.content for it in session.conversation.items if it.kind == "tool_result"
    }
    calls = [it for it in session.conversation.items if it.kind == "tool_call"]
    assert [c.call_id for c in calls][:1] == ["dup"] and len({c.call_id for c in calls}) == 4
    assert [results[c.call_id] for c in calls] == [
        "log of a",
        "log of b",
        "log of c",
        "error: no such tool",
    ]
    assert calls[3].tool_name == "invalid_tool_name"

    # the SDK continues the session: the history it sends is well formed
    with fake.FakeOpenAI(lambda payload, n: (200, fake.completion("ok", payload), 0.0)) as server:

        async def main() -> Any:
            async with AsyncOpenAI(
                base_url=server.base_url, api_key="test-key", max_retries=0
            ) as client:
                model = agents.OpenAIChatCompletionsModel(model="fake-model", openai_client=client)
                agent = agents.Agent(name="r", instructions="Read.", tools=[read_log], model=model)
                return await agents.Runner.run(agent, "and now?", session=session)

        result = asyncio.run(main())
        sent = server.payloads[0]["messages"]
    assert result.final_output == "ok"
    check_chat([m for m in sent if m["role"] != "system"])
    tool_msgs = [m["content"] for m in sent if m["role"] == "tool"]
    assert tool_msgs == ["log of a", "log of b", "log of c", "error: no such tool"]
    reg.release()


def test_a_refused_batch_leaves_the_pairing_as_it_was() -> None:
    import_or_skip("agents", "agents")
    from rampart.integrations.openai_agents_session import RampartSession

    reg = rampart.BlockRegistry(default_max_tokens=None)
    session = RampartSession(reg)
    call = {"type": "function_call", "call_id": "dup", "name": "f", "arguments": "{}"}
    asyncio.run(session.add_items([{"role": "user", "content": "go"}, call, dict(call)]))
    before = {k: list(v) for k, v in session._waiting.items()}
    with pytest.raises(ValueError):
        asyncio.run(
            session.add_items(
                [{"type": "function_call_output", "call_id": "dup"}, {"type": "bogus"}]
            )
        )
    assert session._waiting == before
    reg.release()
