"""The agent loop over real HTTP: the fake OpenAI server plays scripted models."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any, Literal

import pytest
import rampart
from rampart.agent import LESSON_TAG, Agent, Run, tool_schema
from rampart.errors import InvalidArgumentError
from rampart.llm import OpenAIBackend

from tests import fake_openai as fake
from tests.conftest import import_or_skip, words
from tests.test_gate import HashingEmbedder

RULE = "Write changelog dates as DD.MM.YYYY, e.g. 05.03.2025."
GOOD = "- 05.03.2025: fixed the login bug"
BAD = "- 2025-03-05: fixed the login bug"


@pytest.fixture
def registry() -> Iterator[rampart.BlockRegistry]:
    r = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None)
    persona = "You are the release assistant of project Zorblax."
    r.write_block(persona, "persona", source="seed", evictable=False)
    yield r
    r.release()


@pytest.fixture
def backends() -> Iterator[list[OpenAIBackend]]:
    opened: list[OpenAIBackend] = []
    yield opened
    for b in opened:
        b.close()


def model(server: fake.FakeOpenAI, opened: list[OpenAIBackend]) -> OpenAIBackend:
    b = OpenAIBackend(server.base_url, "fake-model", timeout=10)
    opened.append(b)
    return b


def date_check(answer: str, run: Run) -> tuple[bool, str]:
    ok = "05.03.2025" in answer
    return ok, "" if ok else "changelog dates must be written DD.MM.YYYY (e.g. 05.03.2025)"


# ---- learning ---------------------------------------------------------------------------


def test_failure_diagnosis_rule_then_next_run_sees_it(registry: Any, backends: Any) -> None:
    behaviour = fake.convention_learner(RULE, "05.03.2025", GOOD, BAD)
    with fake.FakeOpenAI(behaviour) as server:
        agent = Agent(registry, model(server, backends), check=date_check)
        first = agent.run("Add a changelog line for the login fix of 5 March 2025.")
        assert (first.success, first.answer) == (False, BAD)
        assert "DD.MM.YYYY" in first.feedback
        # one answer call, one diagnosis call carrying the checker's reason
        assert server.calls == 2
        diagnosis = server.payloads[1]
        assert "write one rule" in diagnosis["messages"][0]["content"]
        assert "DD.MM.YYYY" in diagnosis["messages"][1]["content"] and "tools" not in diagnosis
        lesson = first.lesson
        assert lesson is not None and not lesson.updated and lesson.content == RULE
        block = registry.get_by_id(lesson.block_id)
        assert (block.source, block.trajectory_id) == ("agent", first.trajectory_id)
        assert LESSON_TAG in block.tags and agent.lessons() == [block]

        second = agent.run("Add a changelog line for the 5 March 2025 cache fix.")
        assert second.success is True and second.lesson is None
        step = second.steps[0]
        assert RULE in step.compile.prompt and block.semantic_name in step.compile.included
        assert RULE in server.payloads[2]["messages"][0]["content"]
        assert server.calls == 3  # success: no diagnosis

        # forget takes the rule back; the next run fails again
        assert agent.forget(first) == 1
        assert agent.lessons() == [] and block.runtime_id not in registry
        third = agent.run("Add a changelog line for the 5 March 2025 cache fix.")
        assert third.success is False and RULE not in third.steps[0].compile.prompt


def test_near_duplicate_rule_updates_instead_of_adding(registry: Any, backends: Any) -> None:
    rules = iter([RULE, "Write changelog dates as DD.MM.YYYY, for example 05.03.2025."])
    behaviour = fake.scripted(
        [(BAD, []), lambda p: (next(rules), []), (BAD, []), lambda p: (next(rules), [])]
    )
    with fake.FakeOpenAI(behaviour) as server:
        agent = Agent(registry, model(server, backends), check=date_check)
        a = agent.run("Changelog line for 5 March 2025.")
        b = agent.run("Changelog line for the fix of 5 March 2025.")
    assert a.lesson is not None and b.lesson is not None
    assert b.lesson.updated and b.lesson.block_id == a.lesson.block_id
    assert b.lesson.previous == RULE and b.lesson.similarity is not None
    assert [x.content for x in agent.lessons()] == [b.lesson.content]
    # forgetting the second run restores the first run's text; the first removes it
    assert agent.forget(b) == 1 and [x.content for x in agent.lessons()] == [RULE]
    assert agent.forget(a) == 1 and agent.lessons() == []


def test_near_duplicate_by_cosine_with_an_embedding_model(backends: Any) -> None:
    reg = rampart.BlockRegistry(HashingEmbedder(), tokeniser=words, default_max_tokens=None)
    reg.write_block("Unrelated: tabs are four spaces wide.", "style", source="seed")
    other = "Never call print; log with log.info instead."
    rules = iter([RULE, RULE.replace("e.g.", "like"), other])
    behaviour = fake.scripted([(BAD, []), lambda p: (next(rules), [])] * 3)
    with fake.FakeOpenAI(fake.scripted([])) as server:
        server.behaviour = lambda p, n: behaviour(p, n % 2)
        agent = Agent(reg, model(server, backends), check=date_check, top_k=5)
        runs = [agent.run(f"Changelog line number {i} for 5 March 2025.") for i in range(3)]
    assert [r.lesson.updated for r in runs if r.lesson] == [False, True, False]
    assert runs[1].lesson and runs[1].lesson.similarity and runs[1].lesson.similarity >= 0.7
    assert sorted(b.content for b in agent.lessons()) == sorted(
        [RULE.replace("e.g.", "like"), other]
    )
    reg.release()


def test_llm_judge_without_a_checker(registry: Any, backends: Any) -> None:
    behaviour = fake.convention_learner(RULE, "05.03.2025", GOOD, BAD)
    with fake.FakeOpenAI(behaviour) as server:
        agent = Agent(registry, model(server, backends))
        run = agent.run("Changelog line for 5 March 2025.")
        # answer, judge, diagnosis
        assert server.calls == 3 and server.payloads[1]["messages"][0]["content"].startswith(
            "You grade"
        )
    assert run.success is False and run.feedback.startswith("FAIL")
    assert run.lesson is not None and run.lesson.content == RULE
    assert run.tokens == run.prompt_tokens + run.completion_tokens > 0


def test_no_learning_when_learn_is_off(registry: Any, backends: Any) -> None:
    with fake.FakeOpenAI(fake.convention_learner(RULE, "05.03.2025", GOOD, BAD)) as server:
        agent = Agent(registry, model(server, backends), check=date_check, learn=False)
        run = agent.run("Changelog line for 5 March 2025.")
        assert server.calls == 1
    assert run.success is False and run.lesson is None and agent.lessons() == []
    # no checker and no learning: nothing judges the run
    with fake.FakeOpenAI(fake.scripted([("done", [])])) as server:
        run = Agent(registry, model(server, backends), learn=False).run("Say done.")
        assert server.calls == 1 and run.success is None


def test_long_rules_are_cut_and_cleaned(registry: Any, backends: Any) -> None:
    long_rule = "1. **Rule:** " + "Always write dates day first " * 30 + "\nsecond line"
    with fake.FakeOpenAI(fake.scripted([(BAD, []), (long_rule, [])])) as server:
        agent = Agent(registry, model(server, backends), check=date_check, max_rule_chars=80)
        run = agent.run("Changelog line.")
    assert run.lesson is not None
    text = run.lesson.content
    assert text.startswith("Always write dates") and len(text) <= 81 and text.endswith("…")
    assert server.payloads[1]["max_tokens"] >= 16


# ---- tools -------------------------------------------------------------------------------


def release_date(version: str, *, channel: Literal["stable", "beta"] = "stable") -> str:
    """Look up when a version was released.

    Args:
        version: The version string, e.g. "1.4.0".
        channel: Which release channel.
    """
    dates = {"1.4.0": "2025-03-05"}
    if version not in dates:
        raise KeyError(f"unknown version {version}")
    return dates[version] if channel == "stable" else "never"


def count_commits(since: str, paths: list[str] | None = None) -> dict[str, int]:
    """Count commits since a date.

    :param since: ISO date.
    :param paths: Only commits touching these paths.
    """
    return {"commits": 42, "paths": len(paths or [])}


def test_schema_from_signature_and_docstring() -> None:
    s = tool_schema(release_date)
    assert s.name == "release_date" and s.description == "Look up when a version was released."
    assert s.input_schema == {
        "type": "object",
        "properties": {
            "version": {"type": "string", "description": 'The version string, e.g. "1.4.0".'},
            "channel": {
                "enum": ["stable", "beta"],
                "description": "Which release channel.",
                "default": "stable",
            },
        },
        "required": ["version"],
    }
    c = tool_schema(count_commits).input_schema
    assert c["properties"]["paths"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "Only commits touching these paths.",
        "default": None,
    }
    assert c["properties"]["since"]["description"] == "ISO date." and c["required"] == ["since"]
    with pytest.raises(InvalidArgumentError, match="must match"):
        tool_schema(lambda: 1)
    with pytest.raises(InvalidArgumentError, match="callable"):
        tool_schema("release_date")  # type: ignore[arg-type]


def test_tool_execution_results_fed_back(registry: Any, backends: Any) -> None:
    turns: list[Any] = [
        ("", [("release_date", {"version": "1.4.0"}), ("count_commits", {"since": "2025-01-01"})]),
        ("1.4.0 shipped on 2025-03-05 after 42 commits.", []),
    ]
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        agent = Agent(registry, model(server, backends), [release_date, count_commits], learn=False)
        run = agent.run("When did 1.4.0 ship?")
        first, second = server.payloads
    # the tools go as native `tools`, not prompt text
    assert sorted(t["function"]["name"] for t in first["tools"]) == [
        "count_commits",
        "release_date",
    ]
    assert first["tool_choice"] == "auto"
    assert "release_date" not in first["messages"][0]["content"]
    assert run.steps[0].compile.report  # each step keeps its compile report
    assert [r.output for r in run.tool_results] == ["2025-03-05", '{"commits": 42, "paths": 0}']
    assert not any(r.is_error for r in run.tool_results)
    assistant, *tool_msgs = second["messages"][2:]
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == [
        "release_date",
        "count_commits",
    ]
    assert [m["role"] for m in tool_msgs] == ["tool", "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["call_0", "call_1"]
    assert tool_msgs[0]["content"] == "2025-03-05"
    assert run.answer.startswith("1.4.0 shipped") and run.stop_reason == "answer"
    assert len(run.steps) == 2 and run.success is None


def test_tool_errors_are_fed_back(registry: Any, backends: Any) -> None:
    turns: list[Any] = [
        (
            "",
            [
                ("release_date", {"version": "9.9"}),  # the tool raises
                ("release_date", "{not json"),  # malformed arguments
                ("release_date", {"nope": 1}),  # wrong parameter
                ("release_date", "[1, 2]"),  # not an object
                ("drop_tables", {}),  # no such tool
            ],
        ),
        ("I could not find it.", []),
    ]
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        agent = Agent(registry, model(server, backends), [release_date], learn=False)
        run = agent.run("When did 9.9 ship?")
        fed = [m["content"] for m in server.payloads[1]["messages"] if m["role"] == "tool"]
    outs = [r.output for r in run.tool_results]
    assert all(r.is_error for r in run.tool_results) and fed == outs
    assert outs[0] == "error: KeyError: 'unknown version 9.9'"
    assert "not JSON" in outs[1] and "TypeError" in outs[2] and "JSON object" in outs[3]
    assert "no tool 'drop_tables'" in outs[4] and "release_date" in outs[4]


def test_tool_results_are_bounded(registry: Any, backends: Any) -> None:
    def dump_log() -> str:
        """Return the whole build log."""
        return "x" * 10_000

    turns: list[Any] = [("", ["dump_log"]), ("ok", [])]
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        agent = Agent(
            registry, model(server, backends), [dump_log], learn=False, max_tool_result_chars=100
        )
        run = agent.run("Show me the log.")
        fed = server.payloads[1]["messages"][-1]["content"]
    assert fed == run.tool_results[0].output and fed.startswith("x" * 100)
    assert "[cut: 9900 more characters]" in fed and len(fed) < 150


def test_max_steps_stops_a_model_that_keeps_calling(registry: Any, backends: Any) -> None:
    turns: list[Any] = [("still looking", [("release_date", {"version": "1.4.0"})])]
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        agent = Agent(registry, model(server, backends), [release_date], max_steps=3, learn=False)
        run = agent.run("When did 1.4.0 ship?")
        assert server.calls == 3
    assert run.stop_reason == "max_steps" and len(run.steps) == 3
    assert run.answer == "still looking"
    # the conversation grows by one call and one result per step
    assert [len(p["messages"]) for p in server.payloads] == [2 + 2 * i for i in range(3)]


def test_gating_offers_only_the_relevant_tool(backends: Any) -> None:
    def rotate_cache(region: str) -> str:
        """Rotate the zorblax cache keys of a region."""
        return f"rotated {region}"

    def send_invoice(customer: str) -> str:
        """Email an invoice to a billing customer."""
        return "sent"

    reg = rampart.BlockRegistry(HashingEmbedder(), tokeniser=words, default_max_tokens=None)
    reg.write_block("Billing customers are billed monthly.", "billing", source="seed")
    reg.write_block("The zorblax cache lives in three regions.", "cache", source="seed")
    turns: list[Any] = [("", [("rotate_cache", {"region": "eu"})]), ("done", [])]
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        agent = Agent(
            reg, model(server, backends), [rotate_cache, send_invoice], top_k=2, learn=False
        )
        run = agent.run("rotate the zorblax cache keys of region eu")
        offered = [t["function"]["name"] for t in server.payloads[0]["tools"]]
    # the gated tool, and the gate's fallback beside it (tested below)
    assert offered == ["rotate_cache", "find_tools"] == run.steps[0].tools_offered
    assert run.tool_results[0].output == "rotated eu"
    assert "send_invoice" in run.steps[0].compile.excluded
    reg.release()


# ---- memory tools ---------------------------------------------------------------------------


def test_memory_tools_go_through_permissions(registry: Any, backends: Any) -> None:
    turns: list[Any] = [
        ("", [("remember", {"rule": "Tag releases as vYYYY.MM."})]),
        ("", [("forget", {"block": "persona"})]),  # a pinned seed block
        ("", [("forget", {"block": "no_such_block"})]),
        ("Tagged.", []),
    ]
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        agent = Agent(registry, model(server, backends), memory_tools=True, learn=False)
        run = agent.run("Tag the release.")
        names = [t["function"]["name"] for t in server.payloads[0]["tools"]]
        later_system = server.payloads[1]["messages"][0]["content"]
    assert names == ["remember", "forget"]
    remembered, pinned, missing = (r for r in run.tool_results)
    assert not remembered.is_error and run.memory_writes
    block = registry.get_by_id(run.memory_writes[0])
    assert block.content == "Tag releases as vYYYY.MM." and block.trajectory_id == run.trajectory_id
    assert set(block.tags) == {LESSON_TAG, "memory"}
    assert "Tag releases as vYYYY.MM." in later_system  # the next compile includes it
    assert pinned.is_error and "EvictionError" in pinned.output
    assert registry.get_by_name("persona")  # still there
    assert missing.is_error and "no block named" in missing.output
    # the model may forget what it remembered; forget(run) would too
    with fake.FakeOpenAI(
        fake.scripted([("", [("forget", {"block": block.semantic_name})]), ("ok", [])])
    ) as server:
        agent = Agent(registry, model(server, backends), memory_tools=True, learn=False)
        run2 = agent.run("Forget the tag rule.")
    assert not run2.tool_results[0].is_error and block.runtime_id not in registry


def test_memory_tools_are_off_by_default(registry: Any, backends: Any) -> None:
    turns: list[Any] = [("", [("remember", {"rule": "x"})]), ("ok", [])]
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        run = Agent(registry, model(server, backends), learn=False).run("Do it.")
        assert "tools" not in server.payloads[0]
    assert run.tool_results[0].is_error and agent_lessons(registry) == []


def agent_lessons(registry: Any) -> list[Any]:
    return registry.find_by_tag(LESSON_TAG)


# ---- async, MCP and argument checks ------------------------------------------------------


def test_arun_awaits_async_tools(registry: Any, backends: Any) -> None:
    async def fetch_status(service: str) -> dict[str, str]:
        """Status of a service."""
        await asyncio.sleep(0)
        return {"service": service, "status": "green"}

    turns: list[Any] = [("", [("fetch_status", {"service": "api"})]), ("green", [])]
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        agent = Agent(registry, model(server, backends), [fetch_status], learn=False)
        run = asyncio.run(agent.arun("Is the api green?"))
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        sync = Agent(registry, model(server, backends), [fetch_status], learn=False)
        run_sync = sync.run("Is the api green?")
    assert json.loads(run.tool_results[0].output) == {"service": "api", "status": "green"}
    assert run_sync.tool_results[0].output == run.tool_results[0].output


def test_mcp_session_tools(registry: Any, backends: Any) -> None:
    import_or_skip("mcp", "mcp")  # RAMPART_REQUIRE_MCP=1: a missing SDK fails
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    server_app = MCPServer("release-tools")

    @server_app.tool()
    def latest_tag(repo: str) -> str:
        """The newest release tag of a repository."""
        return f"{repo}: v2025.03"

    @server_app.tool()
    def broken(repo: str) -> str:
        """Always fails."""
        raise RuntimeError("disk on fire")

    turns: list[Any] = [
        ("", [("latest_tag", {"repo": "zorblax"}), ("broken", {"repo": "x"})]),
        ("v2025.03", []),
    ]

    async def main(use_session: bool) -> Run:
        async with Client(server_app) as client:
            with fake.FakeOpenAI(fake.scripted(turns)) as server:
                tools = [client.session if use_session else client]
                agent = Agent(registry, model(server, backends), tools, learn=False)
                with pytest.raises(InvalidArgumentError, match="arun"):
                    agent.run("x")
                run = await agent.arun("What is zorblax's latest tag?")
                names = sorted(t["function"]["name"] for t in server.payloads[0]["tools"])
                assert names == ["broken", "latest_tag"]
                return run

    for use_session in (True, False):
        run = asyncio.run(main(use_session))
        ok, bad = run.tool_results
        assert (ok.output, ok.is_error) == ("zorblax: v2025.03", False)
        # the SDK's server hides the exception's text; the flag and tool name come back
        assert bad.is_error and "broken" in bad.output
    assert registry.get_by_name("latest_tag")[0].tool_schema is not None


def test_session_without_mcp_package_is_a_clear_error(
    registry: Any, backends: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rampart.agent as agent_mod

    class Session:  # an MCP-shaped object while the mcp package is absent
        async def list_tools(self) -> None: ...

        async def call_tool(self, name: str, args: dict[str, Any]) -> None: ...

    monkeypatch.setattr(agent_mod, "_mcp_session_class", lambda: None)
    with fake.FakeOpenAI(fake.scripted([])) as server:
        with pytest.raises(ImportError, match="pip install mcp"):
            Agent(registry, model(server, backends), [Session()])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_steps": 0}, "max_steps"),
        ({"top_k": 3}, "no embedding model"),
        ({"top_k": 0}, "top_k"),
        ({"check": "yes"}, "check must be"),
        ({"tools": [42]}, r"tools\[0\]"),
        ({"max_rule_chars": 0}, "max_rule_chars"),
        ({"duplicate_threshold": 1.5}, "duplicate_threshold"),
        ({"tools": [release_date, release_date]}, "second tool"),
    ],
)
def test_bad_arguments(registry: Any, backends: Any, kwargs: Any, match: str) -> None:
    with fake.FakeOpenAI(fake.scripted([])) as server:
        with pytest.raises(InvalidArgumentError, match=match):
            Agent(registry, model(server, backends), **kwargs)
        agent = Agent(registry, model(server, backends))
        with pytest.raises(InvalidArgumentError, match="task"):
            agent.run("  ")
        with pytest.raises(InvalidArgumentError, match="Run"):
            agent.forget("run-1")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="BlockRegistry"):
        Agent(object(), model(server, backends))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="chat"):
        Agent(registry, object())  # type: ignore[arg-type]


# ---- text tool calls (llama.cpp) -------------------------------------------------------


def test_parse_text_tool_calls() -> None:
    from rampart.llm import parse_text_tool_calls

    known = ["git_status", "git_log"]
    text, calls = parse_text_tool_calls(
        'Let me look.\n<tool_call>\n{"name": "git_status", "arguments": {"repo_path": "."}}\n'
        '</tool_call>\n<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',
        known,
    )
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("git_status", {"repo_path": "."})
    ]
    assert text.startswith("Let me look.") and "rm_rf" in text  # unknown names stay text
    for bare in (
        '{"name": "git_log", "arguments": {"repo_path": "."}}',
        '```json\n{"name": "git_log", "arguments": {"repo_path": "."}}\n```',
    ):
        text, calls = parse_text_tool_calls(bare, known)
        assert text == "" and [c.name for c in calls] == ["git_log"]
    prose = 'Use {"name": "git_log"} in your config.'
    assert parse_text_tool_calls(prose, known) == (prose, ())
    assert parse_text_tool_calls("<tool_call>{oops</tool_call>", known)[1] == ()


# ---- the learning demo's plumbing, with a deterministic model -------------------------


MONTHS = "January February March April May June July August September October November December"


def demo_model(payload: dict[str, Any], n: int) -> tuple[int, bytes, float]:
    """Follows whichever convention rules are in its system prompt; a diagnosis turns
    the reviewer's message into a rule naming the convention's key."""
    import re

    system = fake.system_text(payload)
    user = payload["messages"][-1]["content"]
    if "write one rule" in system:
        from rampart.agent_demo import CONVENTIONS

        for key, conv in (
            ("DD.MM", "date"),
            ("zx_", "naming"),
            ("SPDX", "header"),
            ("log.", "logging"),
        ):
            if key in user.split("Why it failed:")[-1]:  # the reviewer's message
                return 200, fake.completion(f"Rule: {CONVENTIONS[conv]}", payload), 0.0
        return 200, fake.completion("Be careful.", payload), 0.0
    m = re.search(r"(\d{1,2}) (\w+) (\d{4})", user)
    if m:
        day, month = int(m.group(1)), MONTHS.split().index(m.group(2)) + 1
        iso = f"{m.group(3)}-{month:02d}-{day:02d}"
        dotted = f"{day:02d}.{month:02d}.{m.group(3)}"
        return 200, fake.completion(dotted if "DD.MM.YYYY" in system else iso, payload), 0.0
    head = "# SPDX-License-Identifier: MPL-2.0\n" if "SPDX" in system else ""
    name = "zx_run" if "zx_" in system else "run"
    say = "log.info('done')" if "log.info" in system else "print('done')"
    code = f"```python\n{head}def {name}():\n    {say}\n```"
    return 200, fake.completion(code, payload), 0.0


def test_demo_learns_with_a_model_that_follows_rules(backends: Any, tmp_path: Any) -> None:
    from rampart.agent_demo import CONVENTIONS, format_summary, run_demo, split

    train, held = split(2)
    assert len(train) == len(held) == 2 * len(CONVENTIONS)
    assert not {t.text for t in train} & {t.text for t in held}
    with fake.FakeOpenAI(demo_model) as server:
        s = run_demo(
            model(server, backends), seeds=[0, 1], per_convention=2, out=tmp_path, progress=None
        )
    assert s["before"]["mean"] == 0.0 and s["after"]["mean"] == 1.0
    assert s["given_rules"]["mean"] == 1.0 and s["gain"]["per_seed"] == [1.0, 1.0]
    for row in s["seeds"]:
        # the first training task of each convention fails and writes its rule; the
        # second already sees the rule and passes
        assert sorted(row["rules"]) == sorted(CONVENTIONS.values())
        assert [r["success"] for r in row["runs"]["training"]] == [False] * 4 + [True] * 4
    assert json.loads((tmp_path / "summary.json").read_text())["after"]["mean"] == 1.0
    assert "gain after - before: +100.0%" in format_summary(s)


def test_demo_checkers() -> None:
    from rampart.agent_demo import check_date, check_header, check_logging, check_naming

    run = Run("t", "run-x")
    assert check_date("05.03.2025")("- 05.03.2025: fix", run)[0]
    ok, why = check_date("05.03.2025")("- 2025-03-05: fix", run)
    assert not ok and "DD.MM.YYYY" in why
    assert check_naming("```python\ndef zx_a():\n    pass\n```", run)[0]
    assert not check_naming("def zx_a(): pass\ndef b(): pass", run)[0]
    assert not check_naming("no code", run)[0]
    assert check_header("```python\n# SPDX-License-Identifier: MPL-2.0\nX = 1\n```", run)[0]
    assert not check_header("X = 1\n# SPDX-License-Identifier: MPL-2.0", run)[0]
    assert check_logging("from zorblax import log\nlog.info('x')", run)[0]
    assert not check_logging("print('x')\nlog.info('x')", run)[0]


def test_demo_cli_against_a_server(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from rampart.cli import main as cli_main

    with fake.FakeOpenAI(demo_model) as server:
        argv = ["agent", "demo", "--base-url", server.base_url, "--model", "fake"]
        argv += ["--seeds", "3", "--per-convention", "1", "--no-embed", "--no-ceiling"]
        assert cli_main([*argv, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "gain after - before: +100.0%" in out and "4 held-out tasks" in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [r["seed"] for r in summary["seeds"]] == [3] and "given_rules" not in summary["seeds"][0]
