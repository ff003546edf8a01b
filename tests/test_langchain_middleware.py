"""RampartMiddleware in a real LangChain v1 agent (create_agent, LangGraph underneath),
its model a ChatOpenAI against the local OpenAI-compatible server: the system prompt
from the compile, the tools the gate kept, the messages the policy compiled."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import rampart

from tests import fake_openai as fake
from tests.conftest import import_or_skip
from tests.test_gate import HashingEmbedder

import_or_skip("langchain.agents", "langchain")
import_or_skip("langchain_openai", "langchain")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from rampart.integrations.langchain_middleware import RampartMiddleware  # noqa: E402

LOG = " ".join(f"entry{i} the store journaled a write" for i in range(400))  # 3 200 tokens


@tool
def read_log(path: str) -> str:
    """Read a log file of the store and return its text."""
    return LOG


@tool
def send_email(to: str, subject: str) -> str:
    """Send an email message to a recipient address."""
    return "sent"


def reads_then_answers(n_calls: int, answer: str) -> Any:
    """Calls read_log until ``n_calls`` results follow the last user message, then answers;
    a fresh call id per request (LangChain matches results by id)."""

    def respond(payload: dict[str, Any], n: int) -> tuple[int, bytes, float]:
        since = 0
        for m in reversed(payload["messages"]):
            if m["role"] == "user":
                break
            since += m["role"] == "tool"
        calls = [("read_log", {"path": f"/log/{since}"})] if since < n_calls else None
        body = json.loads(fake.completion("" if calls else answer, payload, calls))
        for c in body["choices"][0]["message"].get("tool_calls") or ():
            c["id"] = f"call_{n}"
        return 200, json.dumps(body).encode(), 0.0

    return respond


@pytest.fixture
def registry() -> Iterator[rampart.BlockRegistry]:
    reg = rampart.BlockRegistry(embedding_model=HashingEmbedder(), default_max_tokens=None)
    reg.write_block("Quote log entries by their number, e.g. entry12.", "quote-entries")
    reg.write_block("Sign every email with 'The Ops Team'.", "email-signature")
    yield reg
    reg.release()


def _model(server: fake.FakeOpenAI) -> Any:
    return ChatOpenAI(
        model="fake-model", base_url=server.base_url, api_key="test-key", max_retries=0
    )


def _tool_names(payload: dict[str, Any]) -> list[str]:
    return sorted(t["function"]["name"] for t in payload.get("tools") or [])


def test_system_prompt_tools_and_messages_come_from_the_compile(
    registry: rampart.BlockRegistry,
) -> None:
    window = 9000
    mw = RampartMiddleware(registry, top_k=2, context_window=window, reply_tokens=512)
    mw.load_tools([read_log, send_email])
    with fake.FakeOpenAI(reads_then_answers(6, "entry3 is the first write.")) as server:
        agent = create_agent(
            _model(server), [read_log, send_email], middleware=[mw], system_prompt="Be brief."
        )
        out = agent.invoke({"messages": [{"role": "user", "content": "Read the store log."}]})
        payloads = server.payloads
    assert out["messages"][-1].content == "entry3 is the first write."
    assert len(payloads) == 7
    first = payloads[0]
    system = first["messages"][0]
    assert system["role"] == "system"
    assert "Quote log entries" in system["content"] and system["content"].endswith("Be brief.")
    # The gate (top_k=2 over two rules and two tools) kept the log tool, not the email one;
    # rampart's recall (a window: stubs name it) is not a registry tool, and passes.
    assert _tool_names(first) == ["read_log", "recall"]
    # Six whole logs would be 19 000 tokens: each request fits, old results are stubs.
    for p in payloads:
        size = sum(
            rampart.count_tokens(m.get("content") or "", "o200k_base") for m in p["messages"]
        )
        assert size <= window - 512
    last = payloads[-1]["messages"]
    results = [m["content"] for m in last if m["role"] == "tool"]
    # Six identical logs all score alike for the question: the two kept as relevant
    # outlast the recency floor, so a result in the request is whole or a stub that
    # names how to bring it back (docs/conversation.md, "Clearing").
    assert len(results) == 6 and LOG in results
    assert all(r == LOG or ("read_log" in r and "recall(call_id=" in r) for r in results)
    assert any(r != LOG for r in results)
    # The agent's state keeps every result as it came; the request alone is edited.
    assert [m.content for m in out["messages"] if m.type == "tool"] == [LOG] * 6
    assert {r.action for r in mw.last.message_report} >= {"kept", "cleared"}


def test_one_conversation_per_thread_keeps_its_edits(registry: rampart.BlockRegistry) -> None:
    mw = RampartMiddleware(registry, context_window=9000, reply_tokens=512)
    with fake.FakeOpenAI(reads_then_answers(4, "done")) as server:
        agent = create_agent(_model(server), [read_log], middleware=[mw])
        agent.invoke({"messages": [{"role": "user", "content": "Read the log."}]})
        payloads = server.payloads
    assert len(mw._threads) == 1
    (thread,) = mw._threads.values()
    # Appended once each, in order: four calls, four results, the task and the answer.
    kinds = [i.kind for i in thread.conversation.items]
    assert kinds.count("tool_result") == 4 and kinds[0] == "text"
    # A result cleared once stays cleared in every later request (a stable prefix).
    cleared_at: dict[int, int] = {}
    for n, p in enumerate(payloads):
        for k, m in enumerate(x for x in p["messages"] if x["role"] == "tool"):
            if m["content"] != LOG:
                cleared_at.setdefault(k, n)
    for k, n in cleared_at.items():
        later = [[x for x in p["messages"] if x["role"] == "tool"] for p in payloads[n:]]
        assert all(ms[k]["content"] != LOG for ms in later)


def test_without_a_window_messages_and_tools_pass_through(
    registry: rampart.BlockRegistry,
) -> None:
    mw = RampartMiddleware(registry)
    with fake.FakeOpenAI(reads_then_answers(2, "ok")) as server:
        agent = create_agent(_model(server), [read_log, send_email], middleware=[mw])
        asyncio.run(agent.ainvoke({"messages": [{"role": "user", "content": "Read it."}]}))
        payloads = server.payloads
    # The registry knows neither tool (no load_tools): both pass through.
    assert _tool_names(payloads[0]) == ["read_log", "send_email"]
    assert [m["content"] for m in payloads[-1]["messages"] if m["role"] == "tool"] == [LOG] * 2
    assert payloads[0]["messages"][0]["content"].startswith("Quote log entries")


def test_bad_arguments(registry: rampart.BlockRegistry) -> None:
    with pytest.raises(ValueError, match="registry must be a BlockRegistry"):
        RampartMiddleware(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_threads"):
        RampartMiddleware(registry, max_threads=0)


# ---- recall: what every cleared stub names, answered from the thread's log ---------------


@tool
def read_page(path: str) -> str:
    """Read one page of the store's log."""
    return f"page {path}\n" + "\n".join(f"{path} entry{i} journaled a write" for i in range(300))


def reads_then_recalls(n_reads: int, recall_args: Any, answer: str = "done") -> Any:
    """The shared scripted model (tests/fake_openai.py), with this file's answer."""
    return fake.reads_then_recalls(n_reads, recall_args, answer)


def _first_call_id(payload: dict[str, Any]) -> dict[str, Any]:
    """recall's arguments: the call id of the first tool result since the user spoke."""
    msgs = payload["messages"]
    last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
    first = next(m for m in msgs[last_user:] if m["role"] == "tool")
    return {"call_id": first["tool_call_id"]}


def test_recall_is_answered_from_the_threads_log(registry: rampart.BlockRegistry) -> None:
    window = 6000  # a page is ~2 400 tokens: the first is cleared by the fourth
    mw = RampartMiddleware(registry, context_window=window, reply_tokens=512)
    with fake.FakeOpenAI(reads_then_recalls(4, _first_call_id)) as server:
        agent = create_agent(_model(server), [read_page], middleware=[mw])
        first = agent.invoke({"messages": [{"role": "user", "content": "Read thread a."}]})
        n_first = len(server.payloads)
        second = asyncio.run(
            agent.ainvoke({"messages": [{"role": "user", "content": "Read thread b."}]})
        )
        payloads = server.payloads
    assert len(mw._threads) == 2
    assert _tool_names(payloads[0]) == ["read_page", "recall"]
    for out, prefix, at in ((first, "a", n_first - 1), (second, "b", len(payloads) - 1)):
        # Before the recall its result was a stub naming the call; then it came back.
        asked = next(m for m in payloads[at - 1]["messages"] if m["role"] == "tool")
        assert f'recall(call_id="{asked["tool_call_id"]}")' in asked["content"]
        (msg,) = [m for m in out["messages"] if m.type == "tool" and m.name == "recall"]
        assert msg.status == "success"
        assert msg.content.startswith("[recalled: all of the result of tool read_page")
        assert msg.content.endswith(read_page.invoke({"path": f"{prefix}/0"}))
        sent = payloads[at]["messages"][-1]
        assert sent["role"] == "tool" and sent["content"] == msg.content
    # The tool's own function answers too: from the thread compiled last (b).
    (recall_tool,) = mw.tools
    latest = second["messages"][1].tool_calls[0]["id"]
    assert "b/0 entry7" in recall_tool.invoke({"call_id": latest})
    assert recall_tool.invoke({"call_id": "call_0"}).startswith("error: no tool result")
    assert "entry12" in recall_tool.invoke({"query": "b/2 entry12 journaled"})


def test_a_bad_recall_is_an_error_message_and_the_agent_goes_on(
    registry: rampart.BlockRegistry,
) -> None:
    mw = RampartMiddleware(registry, context_window=6000, reply_tokens=512)
    with fake.FakeOpenAI(reads_then_recalls(1, {"call_id": "nope"}, "ok")) as server:
        agent = create_agent(_model(server), [read_page], middleware=[mw])
        out = agent.invoke({"messages": [{"role": "user", "content": "Read a."}]})
    (msg,) = [m for m in out["messages"] if m.type == "tool" and m.name == "recall"]
    assert msg.status == "error" and "no tool result with call id 'nope'" in msg.content
    assert out["messages"][-1].content == "ok"


def test_recall_off_without_a_window_or_when_asked(registry: rampart.BlockRegistry) -> None:
    assert RampartMiddleware(registry).tools == []
    assert RampartMiddleware(registry, context_window=9000, recall=False).tools == []
    with pytest.raises(ValueError, match="recall must be a bool"):
        RampartMiddleware(registry, context_window=9000, recall="yes")  # type: ignore[arg-type]


def test_an_agents_own_recall_tool_takes_the_calls(registry: rampart.BlockRegistry) -> None:
    @tool("recall")
    def my_recall(call_id: str) -> str:
        """My own recall."""
        return f"mine: {call_id}"

    mw = RampartMiddleware(registry, context_window=6000, reply_tokens=512)
    with fake.FakeOpenAI(reads_then_recalls(1, {"call_id": "x"}, "ok")) as server:
        agent = create_agent(_model(server), [read_page, my_recall], middleware=[mw])
        out = agent.invoke({"messages": [{"role": "user", "content": "Read a."}]})
        payloads = server.payloads
    offered = [t["function"] for t in payloads[0]["tools"] if t["function"]["name"] == "recall"]
    assert [f["description"] for f in offered] == ["My own recall."]
    (msg,) = [m for m in out["messages"] if m.type == "tool" and m.name == "recall"]
    assert msg.content == "mine: x"
