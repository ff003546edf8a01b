"""The whole request (docs/specification.md §9): what compiling a conversation costs, and what the
policy saves over a long agent run.

(1) Overhead. The same registry (200 corpus blocks, budget 4 096) compiled with
and without a 1 000-message conversation (500 tool steps, every result kept: the
window is large, nothing is transformed) in the same process, alternating; each
sample is the mean of a batch of calls, medians of the samples are quoted, and
the difference is the compile step's cost (the target: <= 50 µs).

(2) A 200-call agent run: a user task, then 200 steps of one tool call and its
result (200 B - 40 KB, log-uniform, text of tests/data/skills), a 128k window,
4 096 reply tokens. Each call's request is replayed through
:class:`rampart.caching.PrefixCacheModel` (one chunk per message, 15 s apart)
under the Anthropic (5-minute; breakpoints after the system prompt and on the
last message) and OpenAI (GPT-5) tables. Strategies:

* ``none``: every message sent as it came (overflows the window at some call);
* ``clear_tool_uses``: Anthropic's ``clear_tool_uses_20250919`` defaults applied
  client-side (trigger at 100 000 input tokens, keep 3 tool uses, no
  ``clear_at_least``: it clears everything clearable once triggered, every call);
* ``rampart``: ``ContextPolicy()`` defaults for that provider.

Reported: total input cost in token-equivalents (an uncached token costs 1),
peak request size, number of prefix rewrites, and the call where ``none``
overflows (its cost counted up to there).

    python benches/conversation_bench.py [--out conversation_bench.json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benches"))

import _corpus  # noqa: E402
import rampart  # noqa: E402
from rampart import ContextPolicy, Conversation  # noqa: E402
from rampart.caching import Chunk, PrefixCacheModel  # noqa: E402

WINDOW = 128_000
REPLY = 4096


def _step(i: int, result: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {
                        "name": "read_file",
                        "arguments": json.dumps({"path": f"f{i}.md"}),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"call_{i}", "content": result},
    ]


def overhead(samples: int = 60, batch: int = 50) -> dict[str, Any]:
    reg = _corpus.build_registry(200, default_max_tokens=4096)
    conv = Conversation()
    conv.append({"role": "user", "content": "fix the failing test"})
    text = "result line with some words in it\n" * 6
    for i in range(500):
        conv.append(_step(i, text))
    assert len(conv.items) == 1001
    policy = ContextPolicy()

    def plain() -> None:
        reg.compile()

    def with_conv() -> None:
        reg.compile(conversation=conv, context_window=1_000_000, policy=policy)

    r = reg.compile(conversation=conv, context_window=1_000_000, policy=policy)
    assert not r.context.rewrites  # nothing transformed: the steady state
    for f in (plain, with_conv):
        for _ in range(batch):
            f()
    a: list[float] = []
    b: list[float] = []
    for _ in range(samples):
        for f, out in ((plain, a), (with_conv, b)):
            t0 = time.perf_counter()
            for _ in range(batch):
                f()
            out.append((time.perf_counter() - t0) / batch * 1e6)
    ma, mb = statistics.median(a), statistics.median(b)
    # rendering the messages (what an adapter does per call) is measured apart
    t0 = time.perf_counter()
    for _ in range(20):
        r.messages("openai_chat")
    render_us = (time.perf_counter() - t0) / 20 * 1e6
    reg.release()
    return {
        "messages": len(conv.items),
        "compile_us": round(ma, 2),
        "compile_with_conversation_us": round(mb, 2),
        "overhead_us": round(mb - ma, 2),
        "ratio": round(mb / ma, 3),
        "render_openai_chat_us": round(render_us, 1),
    }


def _results(n: int, seed: int = 7) -> list[str]:
    corpus = "\n".join(
        p.read_text(encoding="utf-8") for p in sorted((ROOT / "tests/data/skills").rglob("*.md"))
    )
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        size = int(math.exp(rng.uniform(math.log(200), math.log(40_000))))
        start = rng.randrange(0, max(len(corpus) - size, 1))
        out.append(corpus[start : start + size])
    return out


def _chunks(
    body_msgs: list[dict[str, Any]], system_tokens: int, count: Any, explicit: bool
) -> list[Chunk]:
    chunks = [Chunk(("system",), system_tokens, explicit)]
    for k, m in enumerate(body_msgs):
        key = json.dumps(m, sort_keys=True)
        chunks.append(Chunk(key, count(key), explicit and k == len(body_msgs) - 1))
    return chunks


def run(strategy: str, provider: str, calls: int = 200) -> dict[str, Any]:
    reg = rampart.BlockRegistry(default_max_tokens=None)
    for name, text in _corpus.blocks(30):
        reg.write_block(text, name, gated=False)
    conv = Conversation()
    counter = conv._counter
    cache_tokens: dict[str, int] = {}

    def count(key: str) -> int:
        n = cache_tokens.get(key)
        if n is None:
            n = cache_tokens[key] = counter.count(key)
        return n

    table = "anthropic" if provider == "anthropic" else "openai"
    model = PrefixCacheModel(table)
    conv.append({"role": "user", "content": "Read the project's docs and fix the failing test."})
    results = _results(calls)
    cost = 0.0
    peak = 0
    rewrites = 0
    overflow_at = None
    cleared_upto = 0  # clear_tool_uses: results before this index are cleared
    for i in range(calls):
        conv.append(_step(i, results[i]))
        r = reg.compile()
        system_tokens = count(r.prompt)
        if strategy == "rampart":
            res = reg.compile(
                conversation=conv,
                context_window=WINDOW,
                reply_tokens=REPLY,
                policy=ContextPolicy(provider=provider),
            )
            msgs = res.messages("openai_chat")
            rewrites += len(res.context.rewrites)
        else:
            msgs = conv.to_messages("openai_chat")
            if strategy == "clear_tool_uses":
                total = system_tokens + sum(count(json.dumps(m, sort_keys=True)) for m in msgs)
                tool_idx = [k for k, m in enumerate(msgs) if m["role"] == "tool"]
                if total > 100_000:
                    keep = set(tool_idx[-3:])
                    new_upto = max((k for k in tool_idx if k not in keep), default=-1) + 1
                    if new_upto > cleared_upto:
                        rewrites += 1
                        cleared_upto = new_upto
                for k in tool_idx:
                    if k < cleared_upto:
                        msgs[k] = {**msgs[k], "content": "[cleared]"}
        chunks = _chunks(msgs, system_tokens, count, provider == "anthropic")
        size = sum(c.tokens for c in chunks)
        if size > WINDOW - REPLY and overflow_at is None:
            overflow_at = i + 1
            if strategy == "none":
                break
        peak = max(peak, size)
        cost += model.request(chunks, now=15.0 * i).cost
    reg.release()
    return {
        "strategy": strategy,
        "provider": provider,
        "calls": calls if overflow_at is None or strategy != "none" else overflow_at - 1,
        "cost": round(cost),
        "peak_tokens": peak,
        "rewrites": rewrites,
        "overflow_at_call": overflow_at,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    out: dict[str, Any] = {"overhead": overhead()}
    print(json.dumps(out["overhead"]), flush=True)
    out["runs"] = []
    for provider in ("anthropic", "openai"):
        for strategy in ("none", "clear_tool_uses", "rampart"):
            row = run(strategy, provider, args.calls)
            out["runs"].append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
