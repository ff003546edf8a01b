"""``rampart compile --conversation``: the whole request from the command line, run as
a user would (subprocesses). Every message shape, a saved conversation, the exact
bodies, the map in the terminal and as an HTML page with the JSON report's numbers;
and bad files: one line naming the file and the entry, exit status 2, no traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rampart import Conversation

from tests.conftest import DATA, ROOT, SEEDS, needs_model
from tests.test_cli import fails, run
from tests.test_context_map import EXAMPLE, check_page

RULES = str(SEEDS / "core_rules.md")
OUTPUTS = json.loads((DATA / "mcp_tool_outputs.json").read_text("utf-8"))["outputs"]
LOG = next(o for o in OUTPUTS if o["tool"] == "git_log" and o["arguments"]["max_count"] == 15)
SHOW = next(o for o in OUTPUTS if o["tool"] == "git_show")
TASK = "Which commit changed the token counter?"


def _args(o: dict[str, Any]) -> str:
    return json.dumps(o["arguments"])


# One agent exchange (the task, two calls with real mcp-server-git results, a
# follow-up) in each of the four shapes Conversation.append takes.
SHAPES: dict[str, list[dict[str, Any]]] = {
    "openai_chat": [
        {"role": "user", "content": TASK},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "git_log", "arguments": _args(LOG)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": LOG["text"]},
        {
            "role": "assistant",
            "content": "Reading the newest commit.",
            "tool_calls": [
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "git_show", "arguments": _args(SHOW)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": SHOW["text"]},
        {"role": "user", "content": "And which files did it touch?"},
    ],
    "anthropic": [
        {"role": "user", "content": TASK},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "c1", "name": "git_log", "input": LOG["arguments"]}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": LOG["text"]}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading the newest commit."},
                {"type": "tool_use", "id": "c2", "name": "git_show", "input": SHOW["arguments"]},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c2", "content": SHOW["text"]},
                {"type": "text", "text": "And which files did it touch?"},
            ],
        },
    ],
    "responses": [
        {"role": "user", "content": TASK},
        {"type": "function_call", "call_id": "c1", "name": "git_log", "arguments": _args(LOG)},
        {"type": "function_call_output", "call_id": "c1", "output": LOG["text"]},
        {"role": "assistant", "content": "Reading the newest commit."},
        {"type": "function_call", "call_id": "c2", "name": "git_show", "arguments": _args(SHOW)},
        {"type": "function_call_output", "call_id": "c2", "output": SHOW["text"]},
        {"role": "user", "content": "And which files did it touch?"},
    ],
    "gemini": [
        {"role": "user", "parts": [{"text": TASK}]},
        {
            "role": "model",
            "parts": [{"functionCall": {"name": "git_log", "args": LOG["arguments"]}}],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "git_log", "response": {"result": LOG["text"]}}}
            ],
        },
        {
            "role": "model",
            "parts": [
                {"text": "Reading the newest commit."},
                {"functionCall": {"name": "git_show", "args": SHOW["arguments"]}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "git_show", "response": {"result": SHOW["text"]}}}
            ],
        },
        {"role": "user", "parts": [{"text": "And which files did it touch?"}]},
    ],
}


def ok(out: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert out.returncode == 0, (out.returncode, out.stdout[-2000:], out.stderr)
    assert "Traceback" not in out.stderr
    return out


def write(tmp_path: Path, name: str, data: Any, jsonl: bool = False) -> str:
    p = tmp_path / name
    if jsonl:
        p.write_text("".join(json.dumps(m) + "\n" for m in data), "utf-8")
    else:
        p.write_text(json.dumps(data), "utf-8")
    return str(p)


# ---- every shape -----------------------------------------------------------------------------


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_message_shape(shape: str, tmp_path: Path) -> None:
    f = write(tmp_path, f"{shape}.json", SHAPES[shape])
    # the tool results are ~5 000 tokens: a 4 000-token window clears the older one
    out = ok(
        run(
            "compile",
            RULES,
            "--conversation",
            f,
            "--window",
            "4000",
            "--reply-tokens",
            "500",
            "--json",
        )
    )
    d = json.loads(out.stdout)["context_map"]
    results = [m for m in d["messages"] if m["kind"] == "tool_result"]
    assert [m["name"] for m in results] == ["git_log", "git_show"]
    assert d["actions"].get("cleared", 0) + d["actions"].get("excerpted", 0) >= 1
    assert d["window"] == 4000 and d["reply_tokens"] == 500
    assert sum(p["tokens"] for p in d["composition"]) == 4000
    assert d["messages"][-1]["role"] == "user" or d["actions"].get("recalled")


@pytest.mark.parametrize(
    ("name", "wrap", "jsonl"),
    [
        ("chat.jsonl", None, True),
        ("body.json", "messages", False),
        ("responses_body.json", "input", False),
        ("gemini_body.json", "contents", False),
    ],
)
def test_jsonl_and_request_bodies(name: str, wrap: str | None, jsonl: bool, tmp_path: Path) -> None:
    shape = {"input": "responses", "contents": "gemini"}.get(wrap or "", "openai_chat")
    data: Any = SHAPES[shape] if wrap is None else {"model": "m", wrap: SHAPES[shape]}
    f = write(tmp_path, name, data, jsonl=jsonl)
    out = ok(run("compile", RULES, "--conversation", f, "--json"))
    d = json.loads(out.stdout)["context_map"]
    assert sum(1 for m in d["messages"] if m["kind"] == "tool_result") == 2
    assert d["actions"] == {"kept": len(d["messages"])}  # no window: nothing forced out


def test_saved_conversation(tmp_path: Path) -> None:
    conv = Conversation("saved")
    conv.append(SHAPES["openai_chat"])
    conv.save(tmp_path / "saved.json")
    out = ok(run("compile", RULES, "--conversation", str(tmp_path / "saved.json"), "--no-prompt"))
    assert "messages: 7 items" in out.stdout
    assert "git_show" in out.stdout and " = i0 " in out.stdout


def test_the_example_conversation_map_and_page(tmp_path: Path) -> None:
    """The main job's file, the map in the terminal, and the page against --json."""
    before = EXAMPLE.read_bytes()
    common = [
        "compile", str(SEEDS), "--max-tokens", "2048",
        "--tools", str(DATA / "mcp_git_tools.json"), "--tools", str(DATA / "mcp_time_tools.json"),
        "--conversation", str(EXAMPLE), "--window", "32000",
    ]  # fmt: skip
    shown = ok(run(*common))  # the map is the default view with a conversation
    lines = shown.stdout.splitlines()
    assert len(lines) <= 50
    text = shown.stdout
    assert "conversation: 93 items as loaded, 6 clearing steps in its log" in text
    for needle in ("instructions", "tools", "messages kept", "cleared", "recalled", "free"):
        assert needle in text
    assert "cached prefix:" in text and "sending everything" in text and "\x1b[" not in text
    page = tmp_path / "map.html"
    js = ok(run(*common, "--json", "--html", str(page)))
    assert f"wrote {page}" in js.stderr
    d = json.loads(js.stdout)["context_map"]
    check_page(page.read_text("utf-8"), d)
    assert d["actions"]["cleared"] >= 1 and d["actions"]["recalled"] >= 1
    assert EXAMPLE.read_bytes() == before  # the CLI never writes the conversation back


def test_dry_run(tmp_path: Path) -> None:
    out = ok(
        run(
            "compile",
            RULES,
            "--conversation",
            str(EXAMPLE),
            "--window",
            "20000",
            "--dry-run",
            "--map",
        )
    )
    assert "dry run: nothing recorded" in out.stdout
    assert "cleared" in out.stdout


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "responses", "gemini"])
def test_format_prints_the_exact_body(fmt: str, tmp_path: Path) -> None:
    f = write(tmp_path, "chat.json", SHAPES["openai_chat"])
    args = ["compile", RULES, "--conversation", f, "--window", "4000", "--reply-tokens", "500"]
    args += ["--format", fmt]
    if fmt == "gemini":
        args += ["--model", "gemini-2.5-flash"]
    body = json.loads(ok(run(*args)).stdout)
    key = {
        "openai": "messages",
        "anthropic": "messages",
        "responses": "input",
        "gemini": "contents",
    }
    msgs = body[key[fmt]]
    assert msgs and "cleared to save context" in json.dumps(msgs)
    if fmt == "openai":
        assert msgs[0]["role"] == "system" and msgs[0]["content"].startswith("Never modify")
    if fmt == "anthropic":
        assert body["system"] and body["max_tokens"] == 500  # the reply's reserve
    if fmt == "gemini":
        assert body["model"] == "gemini-2.5-flash"


def test_providers_scale_the_counts(tmp_path: Path) -> None:
    f = write(tmp_path, "chat.json", SHAPES["openai_chat"])
    out = {}
    for provider in ("openai", "anthropic", "gemini", "local"):
        r = ok(run("compile", RULES, "--conversation", f, "--provider", provider, "--json"))
        out[provider] = json.loads(r.stdout)["context_map"]
    assert out["anthropic"]["scale"] == pytest.approx(1.2) and out["openai"]["scale"] == 1.0
    assert out["anthropic"]["request_tokens"] > out["openai"]["request_tokens"]
    assert out["anthropic"]["cache"]["table"] == "anthropic"
    assert out["local"]["cache"]["table"] == "local"


def test_colour_only_on_a_terminal_without_no_color(tmp_path: Path) -> None:
    pty = pytest.importorskip("pty")
    f = write(tmp_path, "chat.json", SHAPES["openai_chat"])
    for no_color, want in (("", True), ("1", False)):
        leader, follower = pty.openpty()
        env = {**os.environ, "NO_COLOR": no_color, "TERM": "xterm-256color"}
        if not no_color:
            env.pop("NO_COLOR")
        proc = subprocess.run(
            [sys.executable, "-m", "rampart", "compile", RULES, "--conversation", f],
            stdin=subprocess.DEVNULL,
            stdout=follower,
            stderr=subprocess.PIPE,
            env=env,
            timeout=120,
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(leader)
        assert proc.returncode == 0, proc.stderr
        assert (b"\x1b[38;5;" in b"".join(chunks)) is want


@needs_model
def test_make_compile_command() -> None:
    """What `make compile` runs: the seeds gated for the conversation's latest
    question, in one screen."""
    command = (
        "compile seeds/ --top-k 12 --max-tokens 2048 --tools tests/data/mcp_git_tools.json "
        "--tools tests/data/mcp_time_tools.json --conversation "
        "examples/conversations/release-notes.json --window 32000 --reply-tokens 4096 "
        "--provider openai --map"
    )
    out = ok(run(*command.split(), cwd=ROOT))
    text = out.stdout
    assert len(text.splitlines()) <= 50
    assert "task: Before you write them" in text
    assert "12 of 31 in the prompt" in text and "19 gated out" in text
    assert "recalled" in text and "cached prefix:" in text


# ---- bad files and usage: one line, exit status 2 --------------------------------------------


_USER = '{"role": "user", "content": "a"}'
BAD_FILES = [
    ("empty.json", "", ["empty"]),
    ("garbage.json", "{not json", ["not JSON"]),
    ("binary.json", b"\xff\xfe\x00", ["not UTF-8"]),
    ("number.json", "42", ["not a list of messages"]),
    ("object.json", '{"model": "m"}', ["no message list"]),
    ("other.json", '{"format": "something-else"}', ["not a saved conversation"]),
    ("lines.jsonl", f"{_USER}\n\n{_USER}\n{{oops\n", ["line 4", "not JSON"]),
    ("role.json", f'[{_USER}, {{"role": "boss", "content": "b"}}]', ["message 1", "'boss'"]),
    (
        "orphan.json",
        f'[{_USER}, {{"role": "tool", "tool_call_id": "x", "content": "r"}}]',
        ["message 1", "no earlier tool call"],
    ),
    ("shape.json", f"[{_USER}, 7]", ["message 1"]),
    ("none.json", "[]", ["no messages"]),
    (
        "image.jsonl",
        '{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}\n',
        ["message 0", "image"],
    ),
]


@pytest.mark.parametrize(("name", "content", "needles"), BAD_FILES)
def test_bad_conversation_files(
    name: str, content: str | bytes, needles: list[str], tmp_path: Path
) -> None:
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content, "utf-8")
    fails(run("compile", RULES, "--conversation", str(p)), str(p), *needles)


def test_bad_saved_conversation_names_the_entry(tmp_path: Path) -> None:
    conv = Conversation("c")
    conv.append(SHAPES["openai_chat"])
    conv.save(tmp_path / "c.json")
    data = json.loads((tmp_path / "c.json").read_text("utf-8"))
    data["log"][0]["op"] = "explode"
    (tmp_path / "c.json").write_text(json.dumps(data), "utf-8")
    fails(
        run("compile", RULES, "--conversation", str(tmp_path / "c.json")), "c.json", "log entry 0"
    )


def test_missing_and_directory(tmp_path: Path) -> None:
    fails(
        run("compile", RULES, "--conversation", str(tmp_path / "nope.json")),
        "nope.json",
        "no such file",
    )
    fails(run("compile", RULES, "--conversation", str(tmp_path)), "a directory")


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--window", "100"], ["--window needs --conversation"]),
        (["--dry-run"], ["--dry-run needs --conversation"]),
        (["--conversation", str(EXAMPLE), "--format", "gemini"], ["--model"]),
        (["--conversation", str(EXAMPLE), "--map", "--json"], ["alternatives"]),
        (["--conversation", str(EXAMPLE), "--provider", "acme"], ["invalid choice"]),
        (["--conversation", str(EXAMPLE), "--window", "10"], ["does not fit a 10-token window"]),
        (["--tools", str(DATA / "README.md")], ["README.md"]),
    ],
)
def test_usage_errors(args: list[str], needles: list[str]) -> None:
    fails(run("compile", RULES, *args), *needles)


def test_progress_line_for_slow_steps(capsys: pytest.CaptureFixture[str]) -> None:
    import time

    from rampart.cli.common import progress

    with progress("a fast step", after=0.5):
        pass
    assert capsys.readouterr().err == ""
    with progress("a slow step", after=0.05, every=0.05):
        time.sleep(0.3)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "rampart: a slow step …"
    assert err[-1].startswith("rampart: a slow step: done in ")
    with pytest.raises(RuntimeError), progress("a failing step", after=0.05):
        time.sleep(0.15)
        raise RuntimeError("x")
    assert "done" not in capsys.readouterr().err  # the error line is the last word
