"""Build examples/conversations/release-notes.json: a real agent transcript for the
main job (``make compile``).

An agent asked to write the release notes reads the repository with the tools of
mcp-server-git and mcp-server-time: the branches, the log, 26 commits one by one, the
last diff and a time conversion (30 calls). Every tool result is what those servers
really returned on a clone of this repository (tests/data/mcp_tool_outputs.json,
recorded by benches/record_mcp_outputs.py); the assistant's words between the calls
name the commit it reads next, from the log's own messages. The user then asks a
follow-up about one early commit, so the compile has a question to score the old
results against. About 76 000 tokens of tool output in a 32 000-token window.

The agent compiled its request before every call, as ``rampart.Agent`` does: seeds/
and the two servers' tools (tests/data/mcp_git_tools.json, mcp_time_tools.json), a
2 048-token instruction budget, a 32 000-token window less 4 096 for the reply, the
default ``ContextPolicy()``. So the file holds the clearing steps those compiles
recorded (the log keeps every original: ``conv.rollback()`` restores them); the
follow-up is the one step not compiled yet, which ``make compile`` compiles.

The file is a saved :class:`rampart.Conversation` (``Conversation.load`` reads it;
``rampart compile seeds/ --conversation FILE`` compiles it). Rerun after the
recorded outputs change:

    python examples/conversations/make_release_notes.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import rampart

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OUT = HERE / "release-notes.json"

TASK = (
    "Write release notes for the changes since the last tag, then commit them. The "
    "repository is at /repo; group the changes by area and give each its commit id."
)
FOLLOW_UP = (
    "Before you write them: which commit changed the Rust token counter, and what "
    "exactly did it add for OpenAI models?"
)
SHOWS = 26  # commits read one by one: with the other four calls, 30 calls
WINDOW = 32_000
REPLY_TOKENS = 4_096
MAX_TOKENS = 2_048
TOOLS = ("mcp_git_tools.json", "mcp_time_tools.json")


def _subjects(log_text: str) -> dict[str, str]:
    """Commit id -> the first sentence of its message, from a git_log result."""
    out = {}
    for sha, message in re.findall(r"Commit: ([0-9a-f]{40}).*?Message: ([^\n]*)", log_text, re.S):
        out[sha] = message.split(";")[0].split(" (")[0][:90]
    return out


def messages() -> list[dict[str, Any]]:
    """The transcript, in OpenAI Chat shape."""
    data = json.loads((ROOT / "tests" / "data" / "mcp_tool_outputs.json").read_text("utf-8"))
    outputs = data["outputs"]
    by_tool: dict[str, list[dict[str, Any]]] = {}
    for o in outputs:
        by_tool.setdefault(o["tool"], []).append(o)
    log = max(by_tool["git_log"], key=lambda o: o["arguments"]["max_count"])
    subjects = _subjects(log["text"])
    steps: list[tuple[str, dict[str, Any]]] = [
        (
            "I'll start with the branches, to see where the last release was cut.",
            *by_tool["git_branch"][:1],
        ),
        (
            "Now the history since then.",
            next(o for o in by_tool["git_log"] if o["arguments"]["max_count"] == 30),
        ),
    ]
    for o in by_tool["git_show"][:SHOWS]:
        sha = o["arguments"]["revision"]
        steps.append((f"Reading {sha[:7]}: {subjects.get(sha, 'the next commit')}.", o))
    steps.append(
        ("And the last change as a diff, to check nothing is uncommitted.", by_tool["git_diff"][0])
    )
    steps.append(
        (
            "The maintainers are in Sydney: the release time in their zone.",
            by_tool["convert_time"][0],
        )
    )
    msgs: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for n, (say, o) in enumerate(steps, start=1):
        call_id = f"call_{n:02d}"
        msgs.append(
            {
                "role": "assistant",
                "content": say,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": o["tool"], "arguments": json.dumps(o["arguments"])},
                    }
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": call_id, "content": o["text"]})
    msgs.append(
        {
            "role": "assistant",
            "content": f"I have read the {SHOWS} commits since the last tag; drafting now.",
        }
    )
    msgs.append({"role": "user", "content": FOLLOW_UP})
    return msgs


def main() -> None:
    # No embedding model: the agent's compiles score by BM25 alone, so the file is
    # the same on every machine (make compile's own compile uses the model).
    reg = rampart.BlockRegistry.from_files([ROOT / "seeds"])
    for name in TOOLS:
        reg.load_tools(ROOT / "tests" / "data" / name, gated=False)
    msgs = messages()
    conv = rampart.Conversation("release-notes")
    conv.append(msgs[0])
    step = 1
    while step < len(msgs) - 1:  # each assistant message with the result of its call
        n = 2 if msgs[step].get("tool_calls") else 1
        conv.append(msgs[step : step + n])
        step += n
        reg.compile(
            max_tokens=MAX_TOKENS,
            conversation=conv,
            context_window=WINDOW,
            reply_tokens=REPLY_TOKENS,
            tools_in_prompt=False,
        )
    conv.append(msgs[-1])  # the follow-up question: the step make compile compiles
    conv.save(OUT)
    calls = sum(1 for it in conv.items if it.kind == "tool_call")
    steps = sum(1 for t in conv.transformations if t.active)
    print(
        f"wrote {OUT.relative_to(ROOT)}: {len(conv)} items, {calls} tool calls, "
        f"{sum(it.tokens for it in conv.items)} tokens appended ({conv.tokeniser}), "
        f"{steps} clearing steps recorded, {conv.shown_tokens} tokens shown"
    )


if __name__ == "__main__":
    main()
