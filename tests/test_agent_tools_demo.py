"""The find_tools experiment (experiments/agent_tools_demo.py): its sandbox tools really act
(git, SQLite, files, a graph file, a 127.0.0.1 page), each task's checker fails on a
fresh sandbox and passes once the task's tool did its job, and the three-condition
runner counts gate misses, find_tools calls and recoveries right (a scripted model
over real HTTP). The last test runs one task with the real llama.cpp model."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from agent_tools_demo import (
    CONDITIONS,
    TASKS,
    StatusPage,
    ToolTask,
    base_registry,
    format_summary,
    gate_misses,
    run_tools_demo,
    sandbox,
    tool_definitions,
)
from rampart.agent import TOOL_SEARCH
from rampart.errors import InvalidArgumentError
from rampart.llm import OpenAIBackend

from tests import fake_openai as fake
from tests.test_gate import HashingEmbedder

DATA = Path(__file__).parent / "data"

# What a competent model would call for each task: (tool, arguments), with PROJECT
# standing for the project folder the persona names.
PROJECT = "<project>"
REFERENCE: dict[str, tuple[str, dict[str, Any]]] = {
    "stage": ("git_add", {"repo_path": PROJECT, "files": ["notes.txt"]}),
    "cat": ("read_text_file", {"path": "README.md"}),
    "new-branch": (
        "git_create_branch",
        {"repo_path": PROJECT, "branch_name": "release-2.0", "base_branch": "main"},
    ),
    "switch": ("git_checkout", {"repo_path": PROJECT, "branch_name": "dev"}),
    "commit": ("git_commit", {"repo_path": PROJECT, "message": "Update changelog"}),
    "write": ("write_file", {"path": "greeting.txt", "content": "hello world"}),
    "edit": (
        "edit_file",
        {"path": "config.ini", "edits": [{"oldText": "port = 8080", "newText": "port = 9090"}]},
    ),
    "mkdir": ("create_directory", {"path": "build/output"}),
    "mv": ("move_file", {"source": "draft.md", "destination": "final.md"}),
    "find-file": ("search_files", {"path": PROJECT, "pattern": "**/settings.yaml"}),
    "count": ("read_query", {"query": "SELECT COUNT(*) FROM orders"}),
    "insert": (
        "write_query",
        {"query": "INSERT INTO customers (name, city) VALUES ('Ada Lovelace', 'London')"},
    ),
    "tables": ("list_tables", {}),
    "convert": (
        "convert_time",
        {"source_timezone": "America/New_York", "time": "09:30", "target_timezone": "Asia/Kolkata"},
    ),
    "now": ("get_current_time", {"timezone": "Asia/Tokyo"}),
    "remember": (
        "create_entities",
        {"entities": [{"name": "Bob", "entityType": "person", "observations": ["on call"]}]},
    ),
    "fetch": ("fetch", {"url": "<url>"}),
    "last-commit": ("git_log", {"repo_path": PROJECT, "max_count": 1}),
    "diff": ("git_diff_unstaged", {"repo_path": PROJECT}),
}


def _fill(args: dict[str, Any], project: str, url: str) -> dict[str, Any]:
    text = json.dumps(args).replace(PROJECT, project).replace("<url>", url)
    return dict(json.loads(text))


def _answer_from(output: str) -> str:
    """What a model would say after the tool: its output, with ISO times spelled as
    the clock times they hold (the time tasks' checkers read clock times)."""
    times = re.findall(r"T(\d{2}:\d{2}):\d{2}", output)
    return output + (" -> " + ", ".join(times) if times else "")


def test_forty_tools_with_the_servers_names() -> None:
    schemas = tool_definitions(DATA)
    assert len(schemas) == 40 and len({s.name for s in schemas}) == 40
    with sandbox() as sb:
        fns = {f.__name__: f for f in sb.tools()}
    assert set(fns) == {s.name for s in schemas}
    for t in TASKS:
        assert t.tools and all(n in fns for n in t.tools), t.name
    assert set(REFERENCE) == {t.name for t in TASKS}
    with pytest.raises(InvalidArgumentError, match="MCP tool lists"):
        tool_definitions(DATA / "skills")


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_each_checker_fails_fresh_and_passes_after_its_tool(task: ToolTask) -> None:
    with sandbox() as sb, StatusPage() as page:
        assert not task.check(sb, "")[0], "a fresh sandbox must fail the checker"
        fns = {f.__name__: f for f in sb.tools()}
        name, args = REFERENCE[task.name]
        assert name == task.tools[0]
        output = fns[name](**_fill(args, str(sb.project), page.url))
        ok, why = task.check(sb, _answer_from(str(output)))
        assert ok, why


def test_sandbox_tools_refuse_what_a_server_would() -> None:
    with sandbox() as sb:
        fns = {f.__name__: f for f in sb.tools()}
        with pytest.raises(RuntimeError, match="outside allowed directories"):
            fns["read_text_file"](path="/etc/passwd")
        with pytest.raises(RuntimeError, match="outside allowed directories"):
            fns["write_file"](path="../escape.txt", content="x")
        assert not (sb.root / "escape.txt").exists()
        with pytest.raises(RuntimeError, match="not a git repository"):
            fns["git_status"](repo_path="/tmp")
        with pytest.raises(RuntimeError, match="invalid branch name"):
            fns["git_checkout"](repo_path=str(sb.project), branch_name="--orphan=x")
        with pytest.raises(RuntimeError, match="Only SELECT"):
            fns["read_query"](query="DELETE FROM orders")
        assert sb.query("SELECT COUNT(*) FROM orders") == [(17,)]
        with pytest.raises(RuntimeError, match=r"only http://127\.0\.0\.1"):
            fns["fetch"](url="http://example.org/")
        with pytest.raises(RuntimeError, match="Invalid timezone"):
            fns["get_current_time"](timezone="Mars/Olympus")
        with pytest.raises(RuntimeError, match="exact match"):
            fns["edit_file"](path="config.ini", edits=[{"oldText": "nope", "newText": "x"}])
        # reset rebuilds the same state at the same path
        fns["git_checkout"](repo_path=".", branch_name="dev")
        root = sb.project
        sb.reset()
        assert sb.project == root and sb.current_branch() == "main"
        assert sb.staged() == ["CHANGELOG.md"] and sb.head_message() == "Add the release draft"


# ---- the runner, with a scripted model over real HTTP --------------------------------


def oracle(payload: dict[str, Any], n: int) -> tuple[int, bytes, float]:
    """Calls the task's reference tool when it is offered; else asks find_tools for
    it by name when that is offered; else answers without a tool. After a tool ran,
    answers with its output."""
    msgs = payload["messages"]
    offered = [t["function"]["name"] for t in payload.get("tools", [])]
    project = re.search(r"The project is the folder (\S+) ", fake.system_text(payload))
    assert project is not None
    user = next(m["content"] for m in msgs if m["role"] == "user")
    url = (re.findall(r"http://127\.0\.0\.1:\d+/status", user) or [""])[0]
    task = next(t for t in TASKS if t.text.format(url=url) == user)
    name, args = REFERENCE[task.name]
    last = msgs[-1]
    if last["role"] == "tool" and not last["content"].startswith('{"found"'):
        return 200, fake.completion(_answer_from(last["content"]), payload), 0.0
    if name in offered:
        call = (name, _fill(args, project.group(1), url))
        return 200, fake.completion("", payload, [call]), 0.0
    if TOOL_SEARCH in offered and last["role"] != "tool":
        return 200, fake.completion("", payload, [(TOOL_SEARCH, {"query": name})]), 0.0
    return 200, fake.completion("I have no tool for that.", payload), 0.0


def test_runner_counts_misses_and_recoveries(tmp_path: Path) -> None:
    emb = HashingEmbedder()
    with fake.FakeOpenAI(oracle) as server:
        backend = OpenAIBackend(server.base_url, "oracle", timeout=30)
        try:
            s = run_tools_demo(
                backend,
                top_k=3,
                embedding_model=emb,
                data_dir=DATA,
                out=tmp_path,
                progress=None,
            )
        finally:
            backend.close()
    reg = base_registry(emb, tmp_path / "project", DATA)
    try:
        offered = gate_misses(reg, TASKS, 3, "http://127.0.0.1:1/status")
    finally:
        reg.release()
    missed = [t.name for t in TASKS if not any(n in offered[t.name] for n in t.tools)]
    assert s["gate_missed"] == missed and missed, "the hashing gate misses some task"
    c = s["conditions"]
    assert list(c) == list(CONDITIONS)
    n = len(TASKS)
    # no gate: every task succeeds; gated only: exactly the tasks whose reference tool
    # the gate offered (the oracle calls no other); with find_tools every one recovers
    assert c["all"]["success"] == 1.0 and c["all"]["tools_offered_first_step"] == 40
    found = [t.name for t in TASKS if REFERENCE[t.name][0] in offered[t.name]]
    assert c["gated"]["success"] == pytest.approx(len(found) / n)
    assert c["gated"]["success_on_gate_misses"] == 0.0 and c["gated"]["find_tools_runs"] == 0
    assert c["gated+find_tools"]["success"] == 1.0
    assert c["gated+find_tools"]["find_tools_runs"] == n - len(found)
    assert c["gated+find_tools"]["find_tools_found_needed"] == n - len(found)
    assert c["gated+find_tools"]["recovered"] == len(missed)  # a miss: no acceptable tool
    assert c["gated"]["prompt_tokens_per_call"] < c["all"]["prompt_tokens_per_call"]
    rows = [r for r in s["runs"] if r["condition"] == "gated+find_tools"]
    assert {r["task"] for r in rows if r["recovered"]} == set(missed)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["conditions"]["gated"]["success"] == c["gated"]["success"]
    table = format_summary(s)
    assert f"gate missed the needed tool on {len(missed)} of {n} tasks" in table
    assert all(cond in table for cond in CONDITIONS)


def test_runner_and_cli_refuse_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    from agent_tools_demo import main

    with pytest.raises(InvalidArgumentError, match="conditions"):
        run_tools_demo(object(), conditions=["gated", "nope"], embedding_model=HashingEmbedder())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="at least one task"):
        run_tools_demo(object(), tasks=[], embedding_model=HashingEmbedder())  # type: ignore[arg-type]
    argv = ["--base-url", "http://127.0.0.1:9", "--tasks", "stage,nope"]
    assert main(argv) == 2
    assert "unknown ['nope']" in capsys.readouterr().err
