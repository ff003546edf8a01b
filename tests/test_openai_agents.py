"""The real OpenAI Agents SDK, on chat completions against a local OpenAI-compatible
server, with rampart compiling its instructions and gating its tools."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import rampart
from rampart.errors import InvalidArgumentError

from tests import fake_openai as fake
from tests.conftest import import_or_skip, needs_model

agents = import_or_skip("agents", "agents")

from rampart.integrations.openai_agents import (  # noqa: E402 (after the skip)
    RampartInstructions,
    RampartTask,
    task_of,
)

agents.set_tracing_disabled(True)  # the SDK would otherwise export traces to OpenAI


@agents.function_tool
def get_weather(city: str) -> str:
    """Current weather conditions and temperature forecast for a city."""
    return json.dumps({"city": city, "celsius": 18, "sky": "cloudy"})


@agents.function_tool
def send_email(to: str, subject: str, body: str) -> str:
    """Send an email message to a recipient address."""
    return "sent"


@agents.function_tool
def read_file(path: str) -> str:
    """Read the text contents of a file on disk."""
    return "file text"


TOOLS = [get_weather, send_email, read_file]


@pytest.fixture
def registry() -> Iterator[rampart.BlockRegistry]:
    reg = rampart.BlockRegistry(embedding_model="default")
    reg.write_block("Report weather temperatures in degrees Celsius.", "weather-units", "seed")
    reg.write_block("Sign every email with 'The Ops Team'.", "email-signature", "seed")
    reg.write_block("Never read files outside the project folder.", "file-safety", "seed")
    yield reg
    reg.release()


def run(agent: Any, task: str, context: Any, server: fake.FakeOpenAI) -> Any:
    """The agent on chat completions against ``server``, in a fresh event loop, with
    its HTTP client closed at the end (Runner.run_sync keeps one loop across calls)."""
    from openai import AsyncOpenAI

    async def main() -> Any:
        async with AsyncOpenAI(
            base_url=server.base_url, api_key="test-key", max_retries=0
        ) as client:
            model = agents.OpenAIChatCompletionsModel(model="fake-model", openai_client=client)
            return await agents.Runner.run(agent.clone(model=model), task, context=context)

    return asyncio.run(main())


def tool_names(payload: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in payload.get("tools") or []]


@needs_model
def test_gated_tools_and_compiled_instructions(registry: rampart.BlockRegistry) -> None:
    task = "What's the weather like in Paris today?"
    turns: list[Any] = [
        ("", [("get_weather", {"city": "Paris"})]),
        ("It is 18 °C and cloudy in Paris.", []),
    ]
    rampart_ = RampartInstructions(registry, top_k=2, preamble="You are a helpful assistant.")
    context = RampartTask(task)
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        agent = rampart_.agent("assistant", tools=TOOLS)
        result = run(agent, task, context, server)
        payloads = server.payloads

    assert result.final_output == "It is 18 °C and cloudy in Paris."
    assert len(payloads) == 2
    first, second = payloads
    # Only the gated tool reaches the model, as a native tool (with the fallback).
    assert tool_names(first) == ["get_weather", "find_tools"] == tool_names(second)
    system = fake.system_text(first)
    assert system.startswith("You are a helpful assistant.\n\n")
    assert "degrees Celsius" in system
    assert "email" not in system and "get_weather" not in system  # no tool text in the prompt
    # The tool ran and its result went back to the model.
    tool_msgs = [m for m in second["messages"] if m["role"] == "tool"]
    assert json.loads(tool_msgs[0]["content"]) == {"city": "Paris", "celsius": 18, "sky": "cloudy"}
    assert context.last is not None
    assert context.last.included == ["weather-units"]  # tool blocks go to tools() only
    assert [t["function"]["name"] for t in context.last.tools()] == ["get_weather"]
    # Tool schemas were loaded once as tool blocks; a second agent reuses them.
    rampart_.agent("again", tools=TOOLS)
    assert sorted(b.semantic_name for b in registry.find_by_tag("tool")) == sorted(
        t.name for t in TOOLS
    )


@needs_model
def test_each_turn_compiles_again(registry: rampart.BlockRegistry) -> None:
    """A block written mid-run (say by a tool) is in the next turn's instructions."""

    @agents.function_tool
    def remember_rule(rule: str) -> str:
        """Store a weather reporting rule for later answers."""
        registry.write_block(rule, "learned", priority=0.9)
        return "stored"

    turns: list[Any] = [
        ("", [("remember_rule", {"rule": "Mention the weather wind speed too."})]),
        ("Done.", []),
    ]
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        agent = RampartInstructions(registry).agent("assistant", tools=[*TOOLS, remember_rule])
        run(agent, "Remember the wind rule", "Remember the wind rule", server)
        first, second = server.payloads
    # Ungated: every block and every tool, and the second turn sees the new block.
    assert set(tool_names(first)) == {"get_weather", "send_email", "read_file", "remember_rule"}
    assert "wind speed" not in fake.system_text(first)
    assert "wind speed" in fake.system_text(second)


def test_tools_disabled_by_their_owner_stay_disabled() -> None:
    reg = rampart.BlockRegistry()
    off = agents.function_tool(lambda x: x, name_override="never", is_enabled=False)
    gated = RampartInstructions(reg).gate([off, get_weather])
    ctx = agents.RunContextWrapper(context="anything")
    import anyio

    async def check() -> list[bool]:
        return [bool(await t.is_enabled(ctx, None)) for t in gated]

    assert anyio.run(check) == [False, True]
    assert off.is_enabled is False and get_weather.is_enabled is True  # originals untouched
    reg.release()


def test_task_from_the_context() -> None:
    assert task_of("plain") == "plain"
    assert task_of(RampartTask("t")) == "t"
    assert task_of({"task": "m"}) == "m"
    with pytest.raises(InvalidArgumentError, match="needs the run's task"):
        task_of(None)
    with pytest.raises(InvalidArgumentError, match="needs a BlockRegistry"):
        RampartInstructions("not a registry")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="drop instructions="):
        RampartInstructions(rampart.BlockRegistry()).agent("a", instructions="x")


def test_one_compile_per_turn_and_none_shared_between_runs() -> None:
    reg = rampart.BlockRegistry()
    reg.write_block("First rule.", "first")
    instructions = RampartInstructions(reg)
    run1 = agents.RunContextWrapper(context="same task")
    first = instructions.compile(run1)
    assert instructions.compile(run1) is first  # instructions and tool gate share it
    reg.write_block("Second rule.", "second")
    assert instructions.compile(run1) is first  # same turn: same compile
    run1.usage.requests += 1  # the next model call of the run compiles again
    assert "Second rule." in instructions.compile(run1).prompt
    run2 = agents.RunContextWrapper(context="same task")  # a new run never reuses one
    assert "Second rule." in instructions(run2, None)  # type: ignore[arg-type]
    reg.release()


def unique_call_ids(behaviour: Any) -> Any:
    """``behaviour`` with each tool call id unique across the run (the SDK refuses a
    reused id; the fake server numbers calls per reply)."""

    def answer(payload: dict[str, Any], n: int) -> tuple[int, bytes, float]:
        status, body, delay = behaviour(payload, n)
        reply = json.loads(body)
        for call in reply["choices"][0]["message"].get("tool_calls") or []:
            call["id"] = f"call_{n}_{call['id']}"
        return status, json.dumps(reply).encode(), delay

    return answer


def test_find_tools_enables_a_tool_the_gate_hid() -> None:
    """The gate's way back in the SDK: the model asks for a hidden tool by name, and
    from its next call on that tool is offered and runs."""
    from tests.conftest import words
    from tests.test_gate import HashingEmbedder

    reg = rampart.BlockRegistry(HashingEmbedder(), tokeniser=words)
    task = "What is the weather forecast in Paris?"
    turns: list[Any] = [
        ("", [("find_tools", {"query": "send_email"})]),
        ("", [("send_email", {"to": "ops@example.com", "subject": "Paris", "body": "18 C"})]),
        ("Sent.", []),
    ]
    instructions = RampartInstructions(reg, top_k=1)
    with fake.FakeOpenAI(unique_call_ids(fake.scripted(turns))) as server:
        agent = instructions.agent("assistant", tools=TOOLS)
        result = run(agent, task, task, server)
        offered = [tool_names(p) for p in server.payloads]
        fed = [m["content"] for m in server.payloads[1]["messages"] if m["role"] == "tool"]
    assert result.final_output == "Sent."
    assert offered[0] == ["get_weather", "find_tools"]
    assert offered[1] == ["get_weather", "send_email", "find_tools"] == offered[2]
    found = json.loads(fed[0])["found"]
    assert found == [
        {
            "name": "send_email",
            "description": "Send an email message to a recipient address.",
            "matched_by": "name",
        }
    ]
    tool_msgs = [m for m in server.payloads[2]["messages"] if m["role"] == "tool"]
    assert tool_msgs[-1]["content"] == "sent"
    # a new run starts from the gate again: what one run found stays in that run
    with fake.FakeOpenAI(fake.scripted([("ok", [])])) as server:
        run(agent, task, task, server)
        assert tool_names(server.payloads[0]) == ["get_weather", "find_tools"]
    # off when asked, and off without a gate
    plain = RampartInstructions(reg, top_k=1, tool_search=False).agent("a", tools=TOOLS)
    assert "find_tools" not in [t.name for t in plain.tools]
    ungated = RampartInstructions(reg).agent("b", tools=TOOLS)
    assert "find_tools" not in [t.name for t in ungated.tools]
    clash = agents.function_tool(lambda query: query, name_override="find_tools")
    with pytest.raises(InvalidArgumentError, match="tool_search=False"):
        RampartInstructions(reg, top_k=1).agent("c", tools=[clash])
    reg.release()


def test_find_tools_refuses_arguments_nested_past_the_bound() -> None:
    """Arguments are model-written JSON: nesting past any recursion limit is an
    error string fed back to the model, not a RecursionError in the runner."""
    import asyncio

    from tests.conftest import words
    from tests.test_gate import HashingEmbedder

    reg = rampart.BlockRegistry(HashingEmbedder(), tokeniser=words)
    tool = RampartInstructions(reg, top_k=1).find_tools_tool()
    for raw in ("[" * 100_000, "{oops"):
        out = asyncio.run(tool.on_invoke_tool(None, raw))
        assert out.startswith("error: the arguments of find_tools are not JSON"), out
    reg.release()
