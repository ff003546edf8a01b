"""What rampart's own ``Agent.run`` sends as a run grows, without and with a window.

The setup of issue 24's measurement: a registry compiled under a 2 048-token budget
(the seed rules), one tool returning 4 KB of text each step, a scripted model on
the fake OpenAI-compatible server of the tests (tests/fake_openai.py) that calls
that tool every step, 200 steps. Each request the server receives is counted with
``o200k_base`` (the system prompt, every message's text and tool calls with 4
tokens of framing each, and the tools array), at steps 1, 10, 50, 120, 155 and 200:

* ``before``: ``Agent(...)`` as it was (no ``context_window``): every message as it
  came, the request growing by one call and one result a step;
* ``after``: ``Agent(..., context_window=128_000)``: the messages compiled from the
  run's :class:`rampart.Conversation` under ``ContextPolicy()`` defaults.

    python benches/agent_long_run.py [--steps 200] [--window 128000]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rampart  # noqa: E402
from rampart.agent import Agent  # noqa: E402
from rampart.llm import OpenAIBackend  # noqa: E402

from tests import fake_openai as fake  # noqa: E402

AT = (1, 10, 50, 120, 155, 200)
OUTPUT = ("commit 4f1c2a9: the shared store journals each write before it applies it. " * 60)[:4096]


def read_log(path: str) -> str:
    """Read the log file at path.

    Args:
        path: the log file
    """
    return OUTPUT


def request_tokens(payload: dict[str, Any]) -> int:
    n = rampart.count_tokens(json.dumps(payload.get("tools", [])), "o200k_base")
    for m in payload["messages"]:
        n += 4 + rampart.count_tokens(m.get("content") or "", "o200k_base")
        for c in m.get("tool_calls") or ():
            fn = c["function"]
            n += 8 + rampart.count_tokens(fn["name"] + fn["arguments"], "o200k_base")
    return n


def measure(steps: int, window: int | None) -> dict[int, int]:
    reg = rampart.BlockRegistry(default_max_tokens=2048)
    for name in ("core_rules.md", "safety.md", "style.md", "tools.md"):
        reg.write_block((ROOT / "seeds" / name).read_text(), name.removesuffix(".md"))
    turns: list[Any] = [("", [("read_log", {"path": "/var/log/app.log"})])]
    with fake.FakeOpenAI(fake.scripted(turns)) as server:
        backend = OpenAIBackend(server.base_url, "fake-model", timeout=30)
        try:
            agent = Agent(
                reg,
                backend,
                [read_log],
                max_steps=steps,
                learn=False,
                max_tool_result_chars=4096,
                context_window=window,
            )
            agent.run("Find when the shared store started journaling writes.")
        finally:
            backend.close()
        sizes = [request_tokens(p) for p in server.payloads]
    reg.release()
    return {s: sizes[s - 1] for s in AT if s <= len(sizes)} | {0: max(sizes)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--window", type=int, default=128_000)
    args = ap.parse_args(argv)
    before = measure(args.steps, None)
    after = measure(args.steps, args.window)
    print(f"request tokens (o200k_base) by step; after: context_window={args.window:,}\n")
    print("| step | before | after |\n|---:|---:|---:|")
    for s in AT:
        if s in before:
            print(f"| {s} | {before[s]:,} | {after[s]:,} |")
    print(f"| peak | {before[0]:,} | {after[0]:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
