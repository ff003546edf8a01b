"""Record what two public MCP reference servers return, for benches/conversation_run.py.

Runs PyPI ``mcp-server-git`` against a clone of this repository and
``mcp-server-time`` over stdio with the MCP SDK's client, and keeps each call's
text as the server returned it (tool results of 200 B to 40 KB: a status, logs,
commits shown with their diffs, branch lists, times). Written to
tests/data/mcp_tool_outputs.json; run once by hand, in a venv that has both servers:

    python -m venv /tmp/mcprec && /tmp/mcprec/bin/pip install mcp-server-git mcp-server-time
    git clone -q . /tmp/rampart-clone
    /tmp/mcprec/bin/python benches/record_mcp_outputs.py /tmp/rampart-clone
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "mcp_tool_outputs.json"
REPO_PLACEHOLDER = "/repo"
MIN_BYTES, MAX_BYTES = 200, 40_000


async def _calls(module: str, calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    params = StdioServerParameters(command=sys.executable, args=["-m", module])
    out = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for name, arguments in calls:
            result = await session.call_tool(name, arguments)
            text = "\n".join(c.text for c in result.content if getattr(c, "text", None))
            out.append(
                {
                    "server": module,
                    "tool": name,
                    "arguments": arguments,
                    "text": text,
                    "is_error": bool(result.isError) if hasattr(result, "isError") else False,
                }
            )
    return out


def main(repo: str) -> None:
    commits = subprocess.run(
        ["git", "-C", repo, "log", "--format=%H", "-n", "50"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    git: list[tuple[str, dict[str, Any]]] = [
        ("git_status", {"repo_path": repo}),
        ("git_branch", {"repo_path": repo, "branch_type": "all"}),
    ]
    for n in (3, 8, 15, 30, 60):
        git.append(("git_log", {"repo_path": repo, "max_count": n}))
    for c in commits:
        git.append(("git_show", {"repo_path": repo, "revision": c}))
    for n in (1, 2, 4):
        git.append(("git_diff", {"repo_path": repo, "target": f"HEAD~{n}"}))
    time_calls: list[tuple[str, dict[str, Any]]] = [
        ("get_current_time", {"timezone": tz})
        for tz in ("Europe/Paris", "Asia/Tokyo", "America/New_York")
    ] + [
        (
            "convert_time",
            {
                "source_timezone": "Europe/London",
                "time": "14:30",
                "target_timezone": "Australia/Sydney",
            },
        )
    ]
    rows = anyio.run(_calls, "mcp_server_git", git) + anyio.run(
        _calls, "mcp_server_time", time_calls
    )
    kept = []
    for r in rows:
        size = len(r["text"].encode())
        if r["is_error"] or not MIN_BYTES <= size <= MAX_BYTES:
            continue
        r["arguments"] = {
            k: (REPO_PLACEHOLDER if v == repo else v) for k, v in r["arguments"].items()
        }
        r["text"] = r["text"].replace(repo, REPO_PLACEHOLDER)
        del r["is_error"]
        kept.append(r)
    doc = {
        "about": "Tool results of mcp-server-git (run on a clone of this repository) and "
        "mcp-server-time, recorded by benches/record_mcp_outputs.py over stdio.",
        "servers": {
            "mcp-server-git": version("mcp-server-git"),
            "mcp-server-time": version("mcp-server-time"),
            "mcp": version("mcp"),
        },
        "outputs": kept,
    }
    OUT.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    sizes = sorted(len(r["text"].encode()) for r in kept)
    print(
        f"{len(kept)} outputs, {sizes[0]}..{sizes[-1]} bytes, median {sizes[len(sizes) // 2]}, "
        f"total {sum(sizes)}"
    )


if __name__ == "__main__":
    main(sys.argv[1])
