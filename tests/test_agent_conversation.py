"""Agent.run over a rampart.Conversation: a long run stays inside its window, a
session continues across runs, and without a window nothing changes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import rampart
from rampart.agent import Agent
from rampart.llm import OpenAIBackend

from tests import fake_openai as fake
from tests.conftest import import_or_skip

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


# ---- recall: what every cleared stub names, answered by the agent -----------------------


def read_file(path: str) -> str:
    """Read a file of the repository.

    Args:
        path: the file
    """
    return f"file {path}\n" + "\n".join(f"{path} row{i} journal write applied" for i in range(250))


def _unique_ids(behaviour: Any) -> Any:
    """A fresh call id per request (call_<n>_<k>), as real models give."""

    def answer(payload: dict[str, Any], n: int) -> tuple[int, bytes, float]:
        status, body, delay = behaviour(payload, n)
        data = json.loads(body)
        for c in data["choices"][0]["message"].get("tool_calls") or ():
            c["id"] = f"call_{n}_{c['id']}"
        return status, json.dumps(data).encode(), delay

    return answer


def _reads_then_recalls(n_reads: int, recall_args: Any, answer: str = "row7 is it.") -> Any:
    """Reads n_reads files, then calls recall with ``recall_args``, then answers."""
    turns: list[Any] = [("", [("read_file", {"path": f"src/f{i}.py"})]) for i in range(n_reads)]
    turns += [("", [("recall", recall_args)]), (answer, [])]
    return _unique_ids(fake.scripted(turns))


def _recall_agent(registry: Any, server: Any, opened: list[Any], **kw: Any) -> Agent:
    backend = OpenAIBackend(server.base_url, "fake-model", timeout=10)
    opened.append(backend)
    kw.setdefault("context_window", WINDOW)
    return Agent(
        registry,
        backend,
        kw.pop("tools", [read_file]),
        learn=False,
        reply_tokens=REPLY,
        max_tool_result_chars=20_000,
        **kw,
    )


def test_the_agent_recalls_a_cleared_result(registry: Any, opened: Any) -> None:
    with fake.FakeOpenAI(_reads_then_recalls(6, {"call_id": "call_0_call_0"})) as server:
        run = _recall_agent(registry, server, opened, max_steps=10).run("Find the row.")
        payloads = server.payloads
    assert run.answer == "row7 is it." and len(payloads) == 8
    # Offered from the first step, beside the agent's tool, in the wire form.
    assert [t["function"]["name"] for t in payloads[0]["tools"]] == ["read_file", "recall"]
    # The first result was cleared before the recall: its stub names the tool.
    before = [m for m in payloads[6]["messages"] if m["role"] == "tool"]
    assert before[0]["tool_call_id"] == "call_0_call_0"
    assert 'recall(call_id="call_0_call_0")' in before[0]["content"]
    assert "src/f0.py row7" not in before[0]["content"]
    # Answered by the agent from the log, never by the user's tools: the result whole.
    last = payloads[7]["messages"]
    answer = last[-1]
    assert answer["role"] == "tool" and answer["tool_call_id"] == "call_6_call_0"
    assert answer["content"].startswith("[recalled: all of the result of tool read_file")
    assert answer["content"].endswith(read_file("src/f0.py"))
    (result,) = run.steps[6].results
    assert result.call.name == "recall" and not result.is_error
    assert [r.call.name for r in run.tool_results].count("read_file") == 6
    # Recalled output is earlier tool output: untrusted, as read_file's was.
    assert run.untrusted_reads == ["read_file", "recall"]
    assert _paired(payloads[7])


def test_a_bad_recall_is_an_error_result_and_the_run_goes_on(registry: Any, opened: Any) -> None:
    with fake.FakeOpenAI(_reads_then_recalls(2, "{not json", "ok")) as server:
        agent = _recall_agent(registry, server, opened, max_steps=6)
        run = asyncio.run(agent.arun("Find the row."))
        unknown = fake.FakeOpenAI(_reads_then_recalls(1, {"call_id": "nope"}, "ok"))
        with unknown as server2:
            run2 = _recall_agent(registry, server2, opened, max_steps=6).run("Find it.")
    assert run.answer == "ok" and run2.answer == "ok"
    (bad,) = run.steps[2].results
    assert bad.is_error and bad.output.startswith("error: the recall arguments are not JSON")
    (missing,) = run2.steps[1].results
    assert missing.is_error and "no tool result with call id 'nope'" in missing.output
    assert "call_0_call_0" in missing.output  # the ids it could have asked for


def test_recall_is_offered_only_with_a_window(registry: Any, opened: Any) -> None:
    with fake.FakeOpenAI(_reads_then_recalls(1, {"call_id": "call_0_call_0"}, "ok")) as server:
        run = _recall_agent(registry, server, opened, context_window=None).run("Find it.")
        payloads = server.payloads
    assert [t["function"]["name"] for t in payloads[0]["tools"]] == ["read_file"]
    (refused,) = run.steps[1].results
    assert refused.is_error and "no tool 'recall' is available" in refused.output


def test_a_tool_of_your_own_named_recall_is_not_shadowed(registry: Any, opened: Any) -> None:
    asked: list[str] = []

    def recall(call_id: str) -> str:
        """My own recall.

        Args:
            call_id: what to recall
        """
        asked.append(call_id)
        return "mine"

    with fake.FakeOpenAI(_reads_then_recalls(1, {"call_id": "x"}, "ok")) as server:
        agent = _recall_agent(registry, server, opened, tools=[read_file, recall])
        run = agent.run("Find it.")
        payloads = server.payloads
    offered = [t["function"] for t in payloads[0]["tools"]]
    assert [f["name"] for f in offered] == ["read_file", "recall"]
    assert offered[1]["description"] == "My own recall."
    assert asked == ["x"] and run.steps[1].results[0].output == "mine"


def test_a_recall_and_its_answer_validate_in_every_provider_shape(
    registry: Any, opened: Any
) -> None:
    import_or_skip("openai", "sdks")
    import_or_skip("anthropic", "sdks")
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
    from rampart.adapters import anthropic_messages, openai_chat, openai_responses
    from rampart.conversation import recall_tool

    from tests.test_adapters import sdk_check

    with fake.FakeOpenAI(_reads_then_recalls(6, {"call_id": "call_0_call_0"})) as server:
        run = _recall_agent(registry, server, opened, max_steps=10).run("Find the row.")
    conv = run.conversation
    assert conv is not None
    r = registry.compile(conversation=conv, context_window=WINDOW, reply_tokens=REPLY)
    rendered = json.dumps(r.messages("openai_chat"))
    assert "[recalled: all of the result of tool read_file" in rendered
    assert 'recall(call_id=\\"call_0_call_0\\")' in rendered  # a stub beside it

    chat = openai_chat(r, model="gpt-4.1")
    chat["tools"] = [*chat.get("tools", []), recall_tool("openai_chat")]
    sdk_check(CompletionCreateParamsNonStreaming, chat)
    resp = openai_responses(r, model="gpt-4.1")
    responses_tool = recall_tool("openai_responses")
    assert responses_tool["strict"] is False  # the Responses API requires the key
    resp["tools"] = [*resp.get("tools", []), responses_tool]
    sdk_check(ResponseCreateParamsNonStreaming, resp)
    body = anthropic_messages(r, model="claude-sonnet-4-5")
    body["tools"] = [*body.get("tools", []), recall_tool("anthropic")]
    sdk_check(MessageCreateParamsNonStreaming, body)
    genai = import_or_skip("google.genai.types", "sdks")
    for content in r.messages("gemini"):
        genai.Content.model_validate(content)
    genai.Tool.model_validate({"function_declarations": [recall_tool("gemini")]})
