"""A 200-call agent run under four ways of managing its context: cost and peak context.

The run: a system prompt compiled from the seed rules (seeds/*.md) and the tools of
two MCP reference servers (tests/data/mcp_git_tools.json, mcp_time_tools.json); one
user task; then 200 model calls, each answered by one tool call whose result is
what mcp-server-git or mcp-server-time really returned (tests/data/
mcp_tool_outputs.json, 296 B to 39 KB, recorded by benches/record_mcp_outputs.py),
drawn with a fixed seed. Calls are 15 s apart; each reply reserves 4 096 tokens.

Four ways to build each request from the same history:

(a) ``none``: every message as it came; the run stops at the call whose request
    no longer fits the window (the provider would refuse it);
(b) ``trim_messages``: LangChain's ``trim_messages(strategy="last",
    include_system=True, start_on=("human", "ai"), end_on=("human", "tool"))`` to the
    window less the reply, each call (langchain-core's own function);
(c) ``clear_tool_uses``: LangChain v1's ``ClearToolUsesEdit`` with its defaults,
    which are Anthropic's ``clear_tool_uses_20250919`` defaults (trigger 100 000
    input tokens, keep the last 3 tool results, ``clear_at_least`` 0), applied
    client-side to the history before each call, as ``ContextEditingMiddleware``
    does;
(d) ``rampart``: a :class:`rampart.Conversation` compiled with
    ``reg.compile(conversation=conv, context_window=N, reply_tokens=M,
    policy=ContextPolicy(provider=...))`` (its documented defaults: relevance-aware),
    and again with ``ContextPolicy(relevance=False)`` (the age-only policy before
    issue 30), both in the same run.

Every request is counted with the same counter (``o200k_base`` plus each message's
framing) and billed by replaying its chunks (tools, system, then one chunk per
message; for Anthropic, breakpoints on the system prompt and on the last message, as
``anthropic_messages(cache=True)`` places them) through
:class:`rampart.caching.PrefixCacheModel` under the ``anthropic`` (5-minute) table
with a 200 000-token window, and the ``openai`` (GPT-5: cached input 0.1x) and
``openai-gpt-4o`` (0.5x) tables with a 128 000-token window. Cost is in
uncached-input-token equivalents (multiply by the model's input price); Anthropic
counts its tokens with its own tokenizer, which is not public: o200k_base stands in.

    python benches/conversation_run.py [--calls 200] [--out results.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
SEEDS = ROOT / "seeds"

import rampart  # noqa: E402
from rampart.caching import Chunk, PrefixCacheModel  # noqa: E402

TASK = (
    "Review the last fifty commits of the repository at /repo: read each change, find the "
    "ones that touched the shared stores or the token counter, and write up what changed "
    "and why, with the commit ids."
)
REPLY_TOKENS = 4096
CALL_INTERVAL_S = 15.0
ITEM_OVERHEAD = 4  # a message's framing (role, separators), as OpenAI's chat format costs
CALL_OVERHEAD = 8  # a tool call's framing (id, type, name and argument keys)
TABLES = (("anthropic", 200_000), ("openai", 128_000), ("openai-gpt-4o", 128_000))


def _count(text: str) -> int:
    return rampart.count_tokens(text, "o200k_base")


class Memo:
    """Token counts of message contents, taken once (the baselines recount the whole
    history every call; a dict keeps the bench about the strategies, not counting)."""

    def __init__(self) -> None:
        self.memo: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        n = self.memo.get(text)
        if n is None:
            n = self.memo[text] = _count(text)
        return n


COUNT = Memo()


def message_tokens(m: dict[str, Any]) -> int:
    n = ITEM_OVERHEAD + COUNT(m.get("content") or "")
    for c in m.get("tool_calls") or ():
        n += CALL_OVERHEAD + COUNT(c["function"]["name"]) + COUNT(c["function"]["arguments"])
    return n


def registry() -> rampart.BlockRegistry:
    reg = rampart.BlockRegistry(tokeniser="o200k_base", default_max_tokens=None)
    for name in ("core_rules.md", "safety.md", "style.md", "tools.md"):
        reg.write_block((SEEDS / name).read_text(), name.removesuffix(".md"))
    for f in ("mcp_git_tools.json", "mcp_time_tools.json"):
        reg.load_tools(DATA / f, gated=False)
    return reg


def history(calls: int, seed: int = 24) -> list[dict[str, Any]]:
    """The run's messages in OpenAI Chat shape: the task, then per call an assistant
    tool call and its result."""
    outputs = json.loads((DATA / "mcp_tool_outputs.json").read_text())["outputs"]
    rng = random.Random(seed)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for i in range(calls):
        o = rng.choice(outputs)
        call_id = f"call_{i:04d}"
        msgs.append(
            {
                "role": "assistant",
                "content": None,
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
    return msgs


# ---- the four strategies: (history so far, call number) -> messages sent -----------------


def strategy_none(window: int, head: int) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    return lambda msgs: list(msgs)


def _to_langchain(msgs: Sequence[dict[str, Any]]) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    out: list[Any] = []
    names: dict[str, str] = {}
    for m in msgs:
        if m["role"] == "user":
            out.append(HumanMessage(m["content"]))
        elif m["role"] == "assistant":
            calls = [
                {
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "args": json.loads(c["function"]["arguments"]),
                }
                for c in m.get("tool_calls") or ()
            ]
            names.update((c["id"], c["name"]) for c in calls)
            out.append(AIMessage(m["content"] or "", tool_calls=calls))
        else:
            out.append(
                ToolMessage(
                    m["content"], tool_call_id=m["tool_call_id"], name=names[m["tool_call_id"]]
                )
            )
    return out


def _from_langchain(msgs: Sequence[Any]) -> list[dict[str, Any]]:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    out: list[dict[str, Any]] = []
    for m in msgs:
        if isinstance(m, SystemMessage):
            continue
        if isinstance(m, HumanMessage):
            out.append({"role": "user", "content": m.content})
        elif isinstance(m, AIMessage):
            out.append(
                {
                    "role": "assistant",
                    "content": m.content or None,
                    "tool_calls": [
                        {
                            "id": c["id"],
                            "type": "function",
                            "function": {"name": c["name"], "arguments": json.dumps(c["args"])},
                        }
                        for c in m.tool_calls
                    ],
                }
            )
        else:
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
    return out


def _lc_tokens(msgs: Sequence[Any]) -> int:
    return sum(message_tokens(d) for d in _from_langchain(msgs))


def strategy_trim(window: int, head: int) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    from langchain_core.messages import trim_messages

    def build(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        kept = trim_messages(
            _to_langchain(msgs),
            max_tokens=window - REPLY_TOKENS - head,
            token_counter=_lc_tokens,
            strategy="last",
            include_system=True,
            start_on=("human", "ai"),
            end_on=("human", "tool"),
        )
        return _from_langchain(kept)

    return build


def strategy_clear(
    window: int, head: int
) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    from langchain.agents.middleware.context_editing import ClearToolUsesEdit

    edit = ClearToolUsesEdit()  # trigger 100 000, keep 3, clear_at_least 0: Anthropic's

    def build(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        lc = _to_langchain(msgs)
        # The middleware counts the request (system and tools included) against the trigger.
        edit.apply(lc, count_tokens=lambda ms: head + _lc_tokens(ms))
        return _from_langchain(lc)

    return build


# ---- billing ---------------------------------------------------------------------------------


def _key(m: dict[str, Any]) -> str:
    return hashlib.blake2b(json.dumps(m, sort_keys=True).encode(), digest_size=16).hexdigest()


def chunks(
    head: Sequence[tuple[str, int]], msgs: Sequence[dict[str, Any]], explicit: bool
) -> list[Chunk]:
    out = [Chunk(k, n, explicit and i == len(head) - 1) for i, (k, n) in enumerate(head)]
    for i, m in enumerate(msgs):
        out.append(Chunk(_key(m), message_tokens(m), explicit and i == len(msgs) - 1))
    return out


def run(
    name: str,
    build: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None,
    table: str,
    window: int,
    calls: int,
    *,
    rampart_run: Callable[[int], list[dict[str, Any]]] | None = None,
    head: Sequence[tuple[str, int]],
) -> dict[str, Any]:
    full = history(calls)
    cache = PrefixCacheModel(table)
    explicit = cache.table.explicit
    head_tokens = sum(n for _, n in head)
    cost = 0.0
    peak = 0
    sizes: dict[int, int] = {}
    rewrites = 0
    prev: list[str] = []
    overflow = None
    overflow_reason = None
    for call in range(1, calls + 1):
        so_far = full[: 1 + 2 * (call - 1)]  # the task, then call-1 tool calls with results
        try:
            msgs = rampart_run(call) if rampart_run is not None else build(so_far)  # type: ignore[misc]
        except rampart.errors.ContextOverflowError as e:
            # What must be sent does not fit: the compile refuses, as the provider would.
            overflow, overflow_reason = call, str(e)
            break
        request = head_tokens + sum(message_tokens(m) for m in msgs)
        if request > window - REPLY_TOKENS:
            overflow = call
            break
        keys = [_key(m) for m in msgs]
        if prev and keys[: len(prev)] != prev:
            rewrites += 1  # an earlier message changed or went: the cache is cut there
        prev = keys
        usage = cache.request(chunks(head, msgs, explicit), now=call * CALL_INTERVAL_S)
        cost += usage.cost
        peak = max(peak, request)
        if call in (1, 10, 50, 100, 150, 200):
            sizes[call] = request
    return {
        "strategy": name,
        "table": table,
        "window": window,
        "calls_made": (overflow - 1) if overflow else calls,
        "overflow_at_call": overflow,
        "overflow_reason": overflow_reason,
        "peak_request_tokens": peak,
        "cost_token_equivalents": round(cost),
        "prefix_rewrites": rewrites,
        "request_tokens_at": sizes,
    }


def rampart_builder(
    reg: rampart.BlockRegistry, table: str, window: int, calls: int, **policy_args: Any
) -> tuple[Callable[[int], list[dict[str, Any]]], list[dict[str, Any]]]:
    """(d): the conversation grows by the same messages; each call is one compile
    (``policy_args``: ``relevance=False`` is the age-only policy of before)."""
    full = history(calls)
    conv = rampart.Conversation()
    provider = "anthropic" if table.startswith("anthropic") else "openai"
    policy = rampart.ContextPolicy(provider=provider, prices=table, **policy_args)
    appended = 0
    reports: list[dict[str, Any]] = []

    def build(call: int) -> list[dict[str, Any]]:
        nonlocal appended
        upto = 1 + 2 * (call - 1)
        if upto > appended:
            conv.append(full[appended:upto])
            appended = upto
        result = reg.compile(
            conversation=conv,
            context_window=window,
            reply_tokens=REPLY_TOKENS,
            policy=policy,
            tools_in_prompt=False,
        )
        acted = [r for r in result.message_report if r.action != "kept"]
        if acted:
            reports.append({"call": call, "transformed": len(acted)})
        return [dict(m) for m in result.messages("openai_chat")]

    return build, reports


def head_chunks(reg: rampart.BlockRegistry) -> list[tuple[str, int]]:
    result = reg.compile(tools_in_prompt=False)
    tools = json.dumps(result.tools("openai"), sort_keys=True)
    return [
        ("tools:" + _key({"t": tools}), _count(tools)),
        ("system:" + _key({"s": result.prompt}), _count(result.prompt) + ITEM_OVERHEAD),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--skip-rampart", action="store_true", help="only the three baselines")
    args = ap.parse_args(argv)
    reg = registry()
    head = head_chunks(reg)
    rows = []
    for table, window in TABLES:
        head_tokens = sum(n for _, n in head)
        for name, make in (
            ("none", strategy_none),
            ("trim_messages", strategy_trim),
            ("clear_tool_uses", strategy_clear),
        ):
            rows.append(run(name, make(window, head_tokens), table, window, args.calls, head=head))
            print(json.dumps(rows[-1]), flush=True)
        if not args.skip_rampart:
            # the default (relevance-aware), then the age-only policy of before
            for name, kw in (("rampart", {}), ("rampart (age only)", {"relevance": False})):
                build, reports = rampart_builder(reg, table, window, args.calls, **kw)
                row = run(name, None, table, window, args.calls, rampart_run=build, head=head)
                row["transformations"] = reports
                rows.append(row)
                shown = {k: v for k, v in row.items() if k != "transformations"}
                print(json.dumps(shown), flush=True)
    total = sum(message_tokens(m) for m in history(args.calls))
    out = {
        "calls": args.calls,
        "head_tokens": sum(n for _, n in head),
        "history_tokens": total,
        "rows": rows,
    }
    print(table_md(out))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


def table_md(out: dict[str, Any]) -> str:
    lines = [
        f"{out['calls']} calls; system + tools {out['head_tokens']} tokens; the whole history "
        f"{out['history_tokens']} tokens",
        "",
        "| table (window) | strategy | calls made | peak request | cost (token-eq.) | per call "
        "| prefix rewrites |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in out["rows"]:
        made = f"{r['calls_made']}" + (" (overflows)" if r["overflow_at_call"] else "")
        lines.append(
            f"| {r['table']} ({r['window'] // 1000}k) | {r['strategy']} | {made} | "
            f"{r['peak_request_tokens']:,} | {r['cost_token_equivalents']:,} | "
            f"{r['cost_token_equivalents'] // max(r['calls_made'], 1):,} | {r['prefix_rewrites']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
