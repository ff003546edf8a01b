"""`rampart mcp` driven by the MCP SDK's own stdio client, as Claude Code or Cursor
would: a real subprocess, real JSON-RPC over its stdin/stdout."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import rampart

from tests.conftest import SEEDS, import_or_skip, needs_model

mcp = import_or_skip("mcp", "mcp")

TOOLS = {
    "compile_context",
    "find_blocks",
    "list_blocks",
    "write_block",
    "evict_block",
    "find_tools",
}


async def _session(args: list[str], script: Any, errlog: Any) -> Any:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "rampart", "mcp", *args], env=dict(os.environ)
    )
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        return await script(session, init)


def run(args: list[str], script: Any, errlog: Any = sys.stderr) -> Any:
    import anyio

    return anyio.run(_session, args, script, errlog)


def data(result: Any) -> Any:
    """A tool result's structured value (a list result is wrapped as {"result": [...]})."""
    assert not result.is_error, result.content
    value = result.structured_content
    return value["result"] if isinstance(value, dict) and set(value) == {"result"} else value


def text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


@needs_model
def test_tools_over_stdio_with_the_sdk_client() -> None:
    async def script(session: Any, init: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"init": init}
        out["tools"] = {t.name: t for t in (await session.list_tools()).tools}
        out["listed"] = data(await session.call_tool("list_blocks", {}))
        out["full"] = data(await session.call_tool("compile_context", {}))
        out["written"] = data(
            await session.call_tool(
                "write_block",
                {
                    "content": "Deploy to staging with `make ship-staging`, never by hand.",
                    "name": "lesson-deploy",
                    "priority": 0.9,
                },
            )
        )
        out["found"] = data(
            await session.call_tool("find_blocks", {"task": "deploy to staging", "top_k": 2})
        )
        out["gated"] = data(
            await session.call_tool(
                "compile_context", {"task": "how do I deploy to staging?", "top_k": 1}
            )
        )
        out["budget"] = data(await session.call_tool("compile_context", {"max_tokens": 10}))
        out["evicted"] = data(
            await session.call_tool("evict_block", {"name_or_id": "lesson-deploy"})
        )
        out["after"] = data(await session.call_tool("list_blocks", {}))
        out["missing"] = await session.call_tool("evict_block", {"name_or_id": "no-such-block"})
        return out

    out = run([str(SEEDS)], script)
    assert out["init"].server_info.name == "rampart"
    assert "compile_context" in (out["init"].instructions or "")
    assert set(out["tools"]) == TOOLS
    params = out["tools"]["compile_context"].input_schema["properties"]
    assert {"task", "max_tokens", "top_k"} <= set(params)

    listed = out["listed"]
    n = len(listed)
    assert n > 3 and all(b["source"] == "seed" for b in listed)
    assert out["full"]["included"] == [b["name"] for b in listed]
    assert out["full"]["total_tokens"] > 0

    assert out["written"]["name"] == "lesson-deploy" and out["written"]["blocks"] == n + 1
    assert out["found"][0]["name"] == "lesson-deploy"
    assert out["found"][0]["score"] >= out["found"][1]["score"]
    assert out["gated"]["included"] == ["lesson-deploy"]
    assert "make ship-staging" in out["gated"]["context"]
    assert out["budget"]["total_tokens"] <= 10

    assert out["evicted"]["evicted"] == out["written"]["runtime_id"]
    assert [b["runtime_id"] for b in out["after"]] == [b["runtime_id"] for b in listed]
    # A registry error is a tool error with rampart's message; the server lives on.
    assert out["missing"].is_error
    assert "no block with runtime id or name 'no-such-block'" in text(out["missing"])


def test_errors_come_back_as_tool_errors(tmp_path: Path) -> None:
    seed = tmp_path / "rules.md"
    seed.write_text("# Rules\n\nAlways answer in English.\n", encoding="utf-8")
    failing = [
        ("compile_context", {"task": "x", "top_k": 1}),
        ("compile_context", {"max_tokens": -1}),
        ("find_blocks", {"task": "x"}),
        ("find_tools", {"query": "stage a file for commit"}),
        ("evict_block", {"name_or_id": "rules"}),  # a pinned seed block
        ("evict_block", {"name_or_id": "no-such-block"}),
        ("write_block", {"content": "a", "name": "n", "priority": 3}),
    ]

    async def script(session: Any, init: Any) -> dict[str, Any]:
        first = data(await session.call_tool("write_block", {"content": "a", "name": "twin"}))
        second = data(await session.call_tool("write_block", {"content": "b", "name": "twin"}))
        return {
            "ids": [first["runtime_id"], second["runtime_id"]],
            "ambiguous": await session.call_tool("evict_block", {"name_or_id": "twin"}),
            "by_id": data(
                await session.call_tool("evict_block", {"name_or_id": second["runtime_id"]})
            ),
            "ungated": await session.call_tool("compile_context", {"task": "x", "top_k": 1}),
            "bad_budget": await session.call_tool("compile_context", {"max_tokens": -1}),
            "listed": data(await session.call_tool("list_blocks", {})),
            "version": init.server_info.version,
            "failing": [await session.call_tool(n, a) for n, a in failing],
        }

    errlog = tmp_path / "stderr.txt"
    with errlog.open("w") as err:
        out = run([str(seed), "--no-gate"], script, err)
    assert out["version"] == rampart.__version__
    # Errors speak in the tools' own arguments, never in the Python API's.
    texts = [text(r) for r in out["failing"]]
    assert all(r.is_error for r in out["failing"]), texts
    for t in texts:
        for python in ("task_text", "embedding_model", "force=True", "gate=", "write_block("):
            assert python not in t, t
    assert all("restart it without --no-gate" in texts[i] for i in (0, 2, 3))
    assert "max_tokens" in texts[1] and "top_k" in texts[3]
    assert "pinned" in texts[4] and "evict_block cannot remove it" in texts[4]
    assert "priority" in texts[6]
    # One line on stderr per failed call, none of them a box or a traceback.
    lines = errlog.read_text().splitlines()
    assert all(line.startswith("rampart mcp: ") for line in lines), lines
    assert sum("failed" in line for line in lines) == len(failing) + 3  # + the 3 above
    assert out["ambiguous"].is_error
    assert "2 blocks named 'twin'" in text(out["ambiguous"])
    assert out["by_id"]["evicted"] == out["ids"][1]
    assert out["ungated"].is_error and "no embedding model" in text(out["ungated"])
    assert out["bad_budget"].is_error
    assert [b["name"] for b in out["listed"]][-1] == "twin"
    assert json.dumps(out["listed"])  # plain JSON all the way


def test_cli_refuses_a_store_without_a_name(capsys: pytest.CaptureFixture[str]) -> None:
    from rampart.cli import main

    assert main(["mcp", "--store", "sqlite:x.db"]) == 2
    assert "--store and --name go together" in capsys.readouterr().err


@pytest.mark.skipif(
    not hasattr(rampart.BlockRegistry, "open"),
    reason="shared registries (BlockRegistry.open, issue 10) are not in this build",
)
def test_store_keeps_what_a_client_wrote(tmp_path: Path) -> None:
    seed = tmp_path / "rules.md"
    seed.write_text("# Rules\n\nAlways answer in English.\n", encoding="utf-8")
    store = ["--store", f"sqlite:///{tmp_path / 'shared.db'}", "--name", "assistant", "--no-gate"]

    async def write(session: Any, init: Any) -> Any:
        return data(await session.call_tool("write_block", {"content": "Use UTC.", "name": "tz"}))

    async def listing(session: Any, init: Any) -> Any:
        return data(await session.call_tool("list_blocks", {}))

    written = run([str(seed), *store], write)
    # A second server on the same store, without seeds: it sees the first one's write.
    names = [b["name"] for b in run(store, listing)]
    assert "tz" in names and written["runtime_id"] in [b["runtime_id"] for b in run(store, listing)]


def test_find_tools_over_the_protocol() -> None:
    """The gate's way back, through the SDK's in-memory client: a tool by its exact
    name, or by what it does, with the schema a client needs to call it."""
    import anyio
    from mcp import Client
    from rampart.mcp_server import build_server

    from tests.conftest import DATA, words
    from tests.test_gate import HashingEmbedder

    reg = rampart.BlockRegistry(HashingEmbedder(), tokeniser=words)
    reg.write_block("Commit messages are in the imperative mood.", "commits", source="seed")
    reg.load_tools(DATA / "mcp_git_tools.json")

    async def script() -> dict[str, Any]:
        async with Client(build_server(reg)) as client:
            return {
                "name": data(await client.call_tool("find_tools", {"query": "git_add"})),
                "words": data(
                    await client.call_tool(
                        "find_tools", {"query": "show the commit log history", "top_k": 2}
                    )
                ),
                "bad": await client.call_tool("find_tools", {"query": "x", "top_k": 0}),
            }

    out = anyio.run(script)
    (hit,) = out["name"]
    assert (hit["name"], hit["matched_by"], hit["score"]) == ("git_add", "name", None)
    assert "repo_path" in hit["input_schema"]["properties"]
    assert len(out["words"]) == 2 and all(f["matched_by"] == "relevance" for f in out["words"])
    assert out["words"][0]["name"] == "git_log"
    assert out["words"][0]["score"] >= out["words"][1]["score"]
    assert out["bad"].is_error and "top_k must be in 1..100" in text(out["bad"])
    reg.release()


def test_find_tools_answers_in_the_providers_tool_search_forms() -> None:
    """find_tools(format=...) returns what a client's own search tool hands the
    provider: tool_reference blocks (Anthropic) or a tool_search_output's tools
    (OpenAI Responses), for the same tools the plain rows name."""
    import anyio
    from mcp import Client
    from rampart.mcp_server import build_server
    from rampart.tool_search import answered_tools

    from tests.conftest import DATA, words
    from tests.test_gate import HashingEmbedder

    reg = rampart.BlockRegistry(HashingEmbedder(), tokeniser=words)
    reg.load_tools(DATA / "mcp_git_tools.json", tags=["server:git"])
    query = {"query": "show the commit log history", "top_k": 2}

    async def script() -> dict[str, Any]:
        async with Client(build_server(reg)) as client:
            out = {}
            for fmt in ("mcp", "anthropic", "openai-responses", "gemini"):
                out[fmt] = await client.call_tool("find_tools", {**query, "format": fmt})
            return out

    out = anyio.run(script)
    names = [row["name"] for row in data(out["mcp"])]
    refs = data(out["anthropic"])
    assert refs == [{"type": "tool_reference", "tool_name": n} for n in names]
    tools = data(out["openai-responses"])
    assert answered_tools({"type": "tool_search_output", "tools": tools}) == names
    assert tools[0]["type"] == "namespace" and tools[0]["name"] == "git"
    assert out["gemini"].is_error and "format must be" in text(out["gemini"])
    reg.release()


def test_server_log_lines_are_single_lines() -> None:
    import logging

    from rampart.mcp_server import _OneLine

    try:
        raise ValueError("first line\nsecond line")
    except ValueError:
        record = logging.LogRecord(
            "mcp",
            logging.ERROR,
            __file__,
            1,
            "Tool %r raised\nan unexpected exception",
            ("x",),
            sys.exc_info(),
        )
    line = _OneLine().format(record)
    assert "\n" not in line and "Traceback" not in line
    assert line == (
        "rampart mcp: error: Tool 'x' raised an unexpected exception "
        "(ValueError: first line second line)"
    )


# ---- recall over saved and shared conversations -------------------------------------------------


def _page(path: str) -> str:
    return f"file {path}\n" + "\n".join(f"{path} row{i} journal write applied" for i in range(250))


def _cleared_conversation(conv: Any) -> Any:
    """Four reads of pages, compiled into a window that clears the first to a stub."""
    conv.append({"role": "user", "content": "Find the row that journals."})
    for k in range(4):
        args = json.dumps({"path": f"src/f{k}.py"})
        call = {
            "id": f"c{k}",
            "type": "function",
            "function": {"name": "read_file", "arguments": args},
        }
        conv.append({"role": "assistant", "content": None, "tool_calls": [call]})
        conv.append({"role": "tool", "tool_call_id": f"c{k}", "content": _page(f"src/f{k}.py")})
    reg = rampart.BlockRegistry(default_max_tokens=None)
    result = reg.compile(conversation=conv, context_window=8000, reply_tokens=512)
    stub = next(m for m in result.messages("openai_chat") if m.get("tool_call_id") == "c0")
    assert 'recall(call_id="c0")' in stub["content"]
    reg.release()
    return conv


def test_recall_over_saved_conversations(tmp_path: Path) -> None:
    seed = tmp_path / "rules.md"
    seed.write_text("# Rules\n\nAlways answer in English.\n", encoding="utf-8")
    saved = tmp_path / "conversations"
    saved.mkdir()
    _cleared_conversation(rampart.Conversation("session-1")).save(saved / "session-1.json")
    (tmp_path / "outside.json").write_text("{}", encoding="utf-8")

    async def script(session: Any, init: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"init": init}
        out["tools"] = {t.name: t for t in (await session.list_tools()).tools}
        call = session.call_tool
        out["whole"] = await call("recall", {"conversation": "session-1", "call_id": "c0"})
        out["query"] = await call(
            "recall", {"conversation": "session-1", "query": "src/f2.py row40"}
        )
        out["unknown_id"] = await call("recall", {"conversation": "session-1", "call_id": "c9"})
        out["nothing"] = await call("recall", {"conversation": "session-1"})
        out["no_conv"] = await call("recall", {"conversation": "session-2", "call_id": "c0"})
        out["escape"] = await call("recall", {"conversation": "../outside", "call_id": "c0"})
        return out

    out = run([str(seed), "--no-gate", "--conversations", str(saved)], script)
    assert set(out["tools"]) == TOOLS | {"recall"}
    assert set(out["tools"]["recall"].input_schema["properties"]) == {
        "conversation",
        "call_id",
        "query",
    }
    assert "recall" in (out["init"].instructions or "")
    whole = text(out["whole"])
    assert not out["whole"].is_error
    assert whole.startswith("[recalled: all of the result of tool read_file (call c0")
    assert whole.endswith(_page("src/f0.py"))
    assert "src/f2.py row40 journal" in text(out["query"])
    for key, words_in_error in (
        ("unknown_id", "no tool result with call id 'c9'"),
        ("nothing", "recall needs a call_id"),
        ("no_conv", "no conversation named 'session-2'"),
        ("escape", "conversation is a name of"),
    ):
        assert out[key].is_error and words_in_error in text(out[key]), key


def test_without_conversations_no_recall_is_offered() -> None:
    from rampart.mcp_server import build_server

    reg = rampart.BlockRegistry(default_max_tokens=None)

    async def names() -> set[str]:
        return {t.name for t in await build_server(reg).list_tools()}

    import anyio

    assert anyio.run(names) == TOOLS
    reg.release()


@pytest.mark.skipif(
    not hasattr(rampart.BlockRegistry, "open"),
    reason="shared registries (BlockRegistry.open, issue 10) are not in this build",
)
def test_recall_over_the_stores_conversations(tmp_path: Path) -> None:
    seed = tmp_path / "rules.md"
    seed.write_text("# Rules\n\nAlways answer in English.\n", encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    conv = _cleared_conversation(
        rampart.Conversation.open(url, "session-1", tokeniser="cl100k_base")
    )

    async def script(session: Any, init: Any) -> dict[str, Any]:
        call = session.call_tool
        first = await call("recall", {"conversation": "session-1", "call_id": "c3"})
        # A writer appends after the server opened it: the next answer catches up.
        args = json.dumps({"path": "late.py"})
        late = {
            "id": "c4",
            "type": "function",
            "function": {"name": "read_file", "arguments": args},
        }
        conv.append({"role": "assistant", "content": None, "tool_calls": [late]})
        conv.append({"role": "tool", "tool_call_id": "c4", "content": _page("late.py")})
        return {
            "first": first,
            "late": await call("recall", {"conversation": "session-1", "call_id": "c4"}),
            "registry": await call("recall", {"conversation": "assistant", "call_id": "c0"}),
        }

    out = run([str(seed), "--store", url, "--name", "assistant", "--no-gate"], script)
    conv.close()
    assert text(out["first"]).endswith(_page("src/f3.py"))
    assert text(out["late"]).endswith(_page("late.py"))
    assert out["registry"].is_error and "not a conversation" in text(out["registry"])
