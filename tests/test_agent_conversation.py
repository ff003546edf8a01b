"""Agent.run over a rampart.Conversation: a long run stays inside its window, a
session continues across runs, and without a window nothing changes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import rampart
from rampart.agent import Agent
from rampart.llm import OpenAIBackend

from tests import fake_openai as fake

WINDOW = 6000  # in the fake server's tokens (it counts words)
REPLY = 256
OUTPUT = " ".join(f"line{i} journal write applied" for i in range(300))  # 1 200 words


def read_log(path: str) -> str:
    """Read a log file.

    Args:
        path: the log file
    """
    return OUTPUT


@pytest.fixture
def registry() -> Iterator[rampart.BlockRegistry]:
    r = rampart.BlockRegistry(default_max_tokens=None)
    r.write_block("You are the release assistant of project Zorblax.", "persona")
    yield r
    r.release()


def _agent(registry: Any, server: Any, opened: list[Any], **kw: Any) -> Agent:
    backend = OpenAIBackend(server.base_url, "fake-model", timeout=10)
    opened.append(backend)
    return Agent(
        registry,
        backend,
        [read_log],
        learn=False,
        reply_tokens=REPLY,
        max_tool_result_chars=20_000,
        **kw,
    )


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    backends: list[Any] = []
    yield backends
    for b in backends:
        b.close()


def _words(payload: dict[str, Any]) -> int:
    # What the fake server reports as prompt_tokens: the words of every message.
    return sum(len((m.get("content") or "").split()) for m in payload["messages"])


def _paired(payload: dict[str, Any]) -> bool:
    """Every tool message answers a call of the assistant message before it."""
    open_ids: set[str] = set()
    for m in payload["messages"]:
        if m["role"] == "assistant":
            open_ids = {c["id"] for c in m.get("tool_calls") or ()}
        elif m["role"] == "tool" and m["tool_call_id"] not in open_ids:
            return False
    return True


LOOP: list[Any] = [("", [("read_log", {"path": "/var/log/app.log"})])]


def test_a_long_run_stays_inside_the_window(registry: Any, opened: Any) -> None:
    steps = 40
    with fake.FakeOpenAI(fake.scripted(LOOP)) as server:
        _agent(registry, server, opened, max_steps=steps).run("When did journaling start?")
        unmanaged = [_words(p) for p in server.payloads]
    # Without a window the request grows by a call and a result a step, past it.
    assert unmanaged[-1] > 6 * WINDOW and unmanaged == sorted(unmanaged)
    with fake.FakeOpenAI(fake.scripted(LOOP)) as server:
        agent = _agent(registry, server, opened, max_steps=steps, context_window=WINDOW)
        run = agent.run("When did journaling start?")
        payloads = server.payloads
    assert len(payloads) == steps and run.stop_reason == "max_steps"
    assert max(_words(p) for p in payloads) <= WINDOW - REPLY
    assert all(_paired(p) for p in payloads)
    # The task stays; old results were cleared to stubs that name the tool.
    last = payloads[-1]["messages"]
    assert last[1] == {"role": "user", "content": "When did journaling start?"}
    stubs = [m for m in last if m["role"] == "tool" and m["content"] != OUTPUT]
    assert stubs and all("read_log" in m["content"] for m in stubs)
    assert last[-1]["content"] == OUTPUT, "the latest result is sent whole"
    report = run.steps[-1].compile.message_report
    assert {r.action for r in report} >= {"kept", "cleared"}
    # The conversation holds every message as it came (the log is append-only).
    conv = run.conversation
    assert conv is not None and len([i for i in conv.items if i.kind == "tool_result"]) == steps


def test_arun_manages_the_window_too(registry: Any, opened: Any) -> None:
    with fake.FakeOpenAI(fake.scripted(LOOP)) as server:
        agent = _agent(registry, server, opened, max_steps=25, context_window=WINDOW)
        asyncio.run(agent.arun("When did journaling start?"))
        assert max(_words(p) for p in server.payloads) <= WINDOW - REPLY


def test_a_session_continues_across_runs(registry: Any, opened: Any) -> None:
    turns: list[Any] = [
        ("", [("read_log", {"path": "a.log"})]),
        ("Journaling started in 1.4.0.", []),
        ("It was in March.", []),
    ]
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        agent = _agent(registry, server, opened, context_window=WINDOW)
        first = agent.run("When did journaling start?")
        second = agent.run("Which month?", conversation=first.conversation)
        payload = server.payloads[-1]
    assert second.conversation is first.conversation
    roles = [m["role"] for m in payload["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert payload["messages"][4]["content"] == "Journaling started in 1.4.0."
    assert second.answer == "It was in March."


def test_without_a_window_the_messages_go_as_they_came(registry: Any, opened: Any) -> None:
    with fake.FakeOpenAI(fake.scripted(LOOP)) as server:
        run = _agent(registry, server, opened, max_steps=3).run("When did journaling start?")
        payloads = server.payloads
    assert [len(p["messages"]) for p in payloads] == [2, 4, 6]
    assert all(m["content"] == OUTPUT for m in payloads[-1]["messages"] if m["role"] == "tool")
    assert all(r.action == "kept" for r in run.steps[-1].compile.message_report)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"context_window": REPLY}, "context_window must be an int above reply_tokens"),
        ({"context_window": 10.5}, "context_window"),
        ({"policy": {"keep_tool_results": 1}}, r"policy must be a rampart\.ContextPolicy"),
    ],
)
def test_bad_window_arguments(registry: Any, opened: Any, kwargs: Any, match: str) -> None:
    with fake.FakeOpenAI(fake.scripted(LOOP)) as server, pytest.raises(ValueError, match=match):
        _agent(registry, server, opened, **kwargs)


def test_a_foreign_conversation_is_refused(registry: Any, opened: Any) -> None:
    with fake.FakeOpenAI(fake.scripted(LOOP)) as server:
        agent = _agent(registry, server, opened)
        with pytest.raises(ValueError, match=r"conversation must be a rampart\.Conversation"):
            agent.run("x", conversation=[{"role": "user", "content": "hi"}])  # type: ignore[arg-type]
