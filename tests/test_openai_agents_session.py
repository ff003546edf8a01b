"""RampartSession: the real OpenAI Agents SDK keeping its history in a
rampart.Conversation, on chat completions against a local OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import rampart

from tests import fake_openai as fake
from tests.conftest import import_or_skip

agents = import_or_skip("agents", "agents")

from rampart.integrations.openai_agents_session import RampartSession  # noqa: E402

agents.set_tracing_disabled(True)  # the SDK would otherwise export traces to OpenAI

LOG = " ".join(f"entry{i} the store journaled a write" for i in range(400))  # 2 400 words


@agents.function_tool
def read_log(path: str) -> str:
    """Read a log file."""
    return LOG


@pytest.fixture
def registry() -> Iterator[rampart.BlockRegistry]:
    reg = rampart.BlockRegistry(default_max_tokens=None)
    reg.write_block("You review the store's logs.", "persona")
    yield reg
    reg.release()


def run(
    task: str, session: Any, server: fake.FakeOpenAI, run_config: Any = None, max_turns: int = 20
) -> Any:
    from openai import AsyncOpenAI

    async def main() -> Any:
        async with AsyncOpenAI(
            base_url=server.base_url, api_key="test-key", max_retries=0
        ) as client:
            model = agents.OpenAIChatCompletionsModel(model="fake-model", openai_client=client)
            agent = agents.Agent(
                name="reviewer", instructions="Review logs.", tools=[read_log], model=model
            )
            kw: dict[str, Any] = {"session": session, "max_turns": max_turns}
            if run_config is not None:
                kw["run_config"] = run_config
            return await agents.Runner.run(agent, task, **kw)

    return asyncio.run(main())


def calls_then_answer(n_calls: int, answer: str) -> Any:
    """A model that calls read_log ``n_calls`` times in a run, then answers."""

    def turn(payload: dict[str, Any]) -> tuple[str, list[Any]]:
        msgs = payload["messages"]
        since_user = 0
        for m in reversed(msgs):
            if m["role"] == "user":
                break
            since_user += m["role"] == "tool"
        if since_user < n_calls:
            return "", [("read_log", {"path": f"/var/log/{since_user}.log"})]
        return answer, []

    def respond(payload: dict[str, Any], n: int) -> tuple[int, bytes, float]:
        text, calls = turn(payload)
        body = json.loads(fake.completion(text, payload, calls))
        # The SDK refuses a call id used before in the run: one id per request.
        for c in body["choices"][0]["message"].get("tool_calls") or ():
            c["id"] = f"call_{n}_{c['id']}"
        return 200, json.dumps(body).encode(), 0.0

    return respond


def _tool_texts(payload: dict[str, Any]) -> list[str]:
    return [m["content"] for m in payload["messages"] if m["role"] == "tool"]


def test_session_continues_across_runs_and_stays_in_the_window(
    registry: rampart.BlockRegistry,
) -> None:
    window = 6000  # o200k tokens; each log costs 3 200: two do not fit
    session = RampartSession(registry, context_window=window, reply_tokens=512)
    with fake.FakeOpenAI(calls_then_answer(2, "Two writes journaled.")) as server:
        first = run("Read two logs.", session, server)
        second = run("And two more?", session, server)
        payloads = server.payloads
    assert first.final_output == "Two writes journaled."
    assert second.final_output == "Two writes journaled."
    conv = session.conversation
    kinds = [i.kind for i in conv.items]
    assert kinds.count("tool_result") == 4 and kinds.count("tool_call") == 4
    assert [i.content for i in conv.items if i.role == "user"] == [
        "Read two logs.",
        "And two more?",
    ]
    # The second run's first request carries the first run's history, compiled: two
    # whole outputs would not fit, so the older is cleared to a stub naming the tool,
    # its call still answered.
    opening = payloads[3]
    users = [m["content"] for m in opening["messages"] if m["role"] == "user"]
    assert users == ["Read two logs.", "And two more?"]
    texts = _tool_texts(opening)
    stubs = [t for t in texts if t != LOG]
    assert len(texts) == 2 and stubs and all("read_log" in t for t in stubs)
    report = session.last.message_report
    assert {r.action for r in report} >= {"cleared", "kept"}
    assert session.last.context.message_tokens <= window - 512


def test_without_a_window_the_history_comes_back_whole(registry: rampart.BlockRegistry) -> None:
    session = RampartSession(registry)
    with fake.FakeOpenAI(calls_then_answer(1, "One.")) as server:
        run("Read a log.", session, server)
        run("Again.", session, server)
        opening = server.payloads[2]
    assert _tool_texts(opening) == [LOG]
    items = asyncio.run(session.get_items())
    assert [i.get("type", "message") for i in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert asyncio.run(session.get_items(limit=2)) == items[-2:]
    assert asyncio.run(session.get_items(limit=0)) == []


def test_model_input_filter_bounds_one_long_run(registry: rampart.BlockRegistry) -> None:
    window = 12_000
    session = RampartSession(registry, context_window=window, reply_tokens=512)
    config = agents.RunConfig(call_model_input_filter=session.call_model_input_filter)
    with fake.FakeOpenAI(calls_then_answer(12, "Done.")) as server:
        result = run("Read twelve logs.", session, server, run_config=config)
        payloads = server.payloads
    assert result.final_output == "Done." and len(payloads) == 13
    sizes = [
        sum(rampart.count_tokens(m.get("content") or "", "o200k_base") for m in p["messages"])
        for p in payloads
    ]
    assert max(sizes) <= window - 512  # twelve whole logs would be about 38 000
    assert sum(len(_tool_texts(p)) for p in payloads[-1:]) == 12, "every call answered"
    # The session stored the run's items as they came.
    outputs = [i for i in session.conversation.items if i.kind == "tool_result"]
    assert len(outputs) == 12 and all(i.content == LOG for i in outputs)


def test_pop_item_and_clear_session_hide_through_the_log(registry: rampart.BlockRegistry) -> None:
    session = RampartSession(registry)
    asyncio.run(
        session.add_items(
            [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "one"},
                {"role": "user", "content": "second"},
            ]
        )
    )
    popped = asyncio.run(session.pop_item())
    assert popped["role"] == "user" and json.dumps(popped).count("second") == 1
    items = asyncio.run(session.get_items())
    assert [json.dumps(i).count("second") for i in items] == [0, 0]
    assert len(session.conversation.items) == 3, "the log keeps what was popped"
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []
    assert asyncio.run(session.pop_item()) is None
    session.conversation.rollback()  # the last transformation (the clear) undone
    assert len(asyncio.run(session.get_items())) == 2


def test_malformed_items_are_refused_whole(registry: rampart.BlockRegistry) -> None:
    session = RampartSession(registry)
    with pytest.raises(ValueError, match="1"):
        asyncio.run(session.add_items([{"role": "user", "content": "ok"}, {"type": "bogus"}]))
    assert session.conversation.items == ()


def test_is_a_session_for_the_sdk(registry: rampart.BlockRegistry) -> None:
    from agents.memory import Session

    session = RampartSession(registry, session_id="s-1")
    assert isinstance(session, Session) and session.session_id == "s-1"
    with pytest.raises(ValueError, match="registry must be a BlockRegistry"):
        RampartSession(object())  # type: ignore[arg-type]


# ---- recall: what every cleared stub names, answered from the session -----------------------


def page(path: str) -> str:
    return f"page {path}\n" + "\n".join(f"{path} entry{i} journaled a write" for i in range(300))


@agents.function_tool
def read_page(path: str) -> str:
    """Read one page of the store's log."""
    return page(path)


def reads_then_recalls(n_reads: int, recall_args: Any, answer: str = "Found it.") -> Any:
    """The shared scripted model (tests/fake_openai.py), with this file's answer."""
    return fake.reads_then_recalls(n_reads, recall_args, answer)


def _first_output_id(payload: dict[str, Any]) -> dict[str, Any]:
    msgs = payload["messages"]
    last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
    return {"call_id": next(m for m in msgs[last_user:] if m["role"] == "tool")["tool_call_id"]}


def run_with(task: str, session: Any, server: fake.FakeOpenAI, tools: list[Any], **kw: Any) -> Any:
    from openai import AsyncOpenAI

    async def main() -> Any:
        async with AsyncOpenAI(
            base_url=server.base_url, api_key="test-key", max_retries=0
        ) as client:
            model = agents.OpenAIChatCompletionsModel(model="fake-model", openai_client=client)
            agent = agents.Agent(name="reviewer", instructions="Review.", tools=tools, model=model)
            return await agents.Runner.run(agent, task, session=session, max_turns=20, **kw)

    return asyncio.run(main())


def test_recall_tool_brings_back_a_cleared_output(registry: rampart.BlockRegistry) -> None:
    session = RampartSession(registry, context_window=6000, reply_tokens=512)
    config = agents.RunConfig(call_model_input_filter=session.call_model_input_filter)
    tools = [read_page, session.recall_tool()]
    with fake.FakeOpenAI(reads_then_recalls(3, _first_output_id)) as server:
        result = run_with("Read pages a.", session, server, tools, run_config=config)
        payloads = server.payloads
    assert result.final_output == "Found it."
    assert sorted(t["function"]["name"] for t in payloads[0]["tools"]) == ["read_page", "recall"]
    # The first page was a stub naming the call when the model asked for it back.
    asked = next(m for m in payloads[3]["messages"] if m["role"] == "tool")
    assert f'recall(call_id="{asked["tool_call_id"]}")' in asked["content"]
    answer = payloads[4]["messages"][-1]
    assert answer["role"] == "tool"
    assert answer["content"].startswith("[recalled: all of the result of tool read_page")
    assert answer["content"].endswith(page("a/0"))
    # The session holds the recall and its answer like any other call.
    names = [i.tool_name for i in session.conversation.items if i.kind == "tool_result"]
    assert names == ["read_page"] * 3 + ["recall"]


def test_recall_tool_answers_from_the_session_and_errors_are_results(
    registry: rampart.BlockRegistry,
) -> None:
    session = RampartSession(registry, context_window=6000, reply_tokens=512)
    with fake.FakeOpenAI(reads_then_recalls(2, {"call_id": "nope"}, "ok")) as server:
        result = run_with("Read pages b.", session, server, [read_page, session.recall_tool()])
    assert result.final_output == "ok"
    results = [i for i in session.conversation.items if i.kind == "tool_result"]
    (bad,) = [i for i in results if i.tool_name == "recall"]
    assert bad.content.startswith("error: no tool result with call id 'nope'")
    # A later call (the tool's own function) finds what the session holds.
    whole = session.answer_recall({"call_id": results[0].call_id})
    assert whole.endswith(page("b/0"))
    assert "b/1 entry42" in session.answer_recall(json.dumps({"query": "b/1 entry42"}))
    assert session.answer_recall("{not json").startswith("error:")
    tool = session.recall_tool()
    assert tool.name == "recall" and tool.strict_json_schema is False
    assert set(tool.params_json_schema["properties"]) == {"call_id", "query"}
