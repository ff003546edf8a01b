"""Gating under prompt caching: what four layouts cost, priced and measured.

A production-shaped registry: an ungated head of about 10 000 tokens (the seed
rules, two skills as standing instructions and the 40 MCP tool schemas of
tests/data) followed by about 200 gated skill sections and lessons (the other
skills of tests/data/skills and seeds/skills, split at their headings, and
generated lessons), gated top-8 by the default embedding model. 20 different tasks,
5 model calls each (the conversation grows by an assistant step and a tool result
per call). Four layouts of the same registry:

* ``ungated``: no gate; the head and then skills in registry order up to the
  budget (16 384 tokens); the same prompt for every task;
* ``today's gate``: the registry as it was before ``gated=False`` existed: every
  block gated, top_k = head blocks + 8, so the head is ranked with the rest;
* ``cache-aware``: the head ungated (``gated=False``), lessons gated top-8;
* ``session``: :class:`rampart.caching.CacheSession` over the cache-aware registry,
  pricing its choice with the table it is billed under (``calls_per_task=5``).

(b) Cost: every request body the adapters build is replayed through
:class:`rampart.caching.PrefixCacheModel` under the Anthropic (5-minute) and OpenAI
(GPT-5, cached input 0.1x) tables; calls 15 s apart. New layout: Anthropic
``cache=True, tools="all"``; OpenAI ``tools="allowed"``. Today's layout of the
same compiles: the gated ``tools`` array and one system string (for Anthropic
marked with one ``cache_control`` at its end, and the last message marked: caching
switched on by hand, the best today's request shape allows). The floor: the
cache-aware requests under an ideal cache of the same read price (every prefix seen
before is read, nothing expires, no minimum, no write premium): what it would cost
if everything before the task-dependent tail always came from the cache.

(a) ``--llama``: the same four layouts through llama.cpp (``LlamaCppBackend``,
SmolLM2-135M, which reuses the longest common token prefix of the previous
prompt), the registries counting tokens with the model's own tokenizer; each call
prefills the chat-templated prompt and decodes one token. Measured: prompt tokens
evaluated (``n_p_eval``) and prefill time (``t_p_eval_ms``) from llama.cpp's own
counters; the reuse of each task's first call is compared with what
``stable_prefix_tokens`` predicts (template header + stable prefix).

    python benches/cache_bench.py [--llama] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
SEEDS = ROOT / "seeds"

import rampart  # noqa: E402
from rampart.adapters import anthropic_messages, openai_chat  # noqa: E402
from rampart.caching import PRICES, Chunk, PrefixCacheModel  # noqa: E402

SEP = rampart.DEFAULT_SEPARATOR
BUDGET = 16384
TOP_K = 8
CALLS = 5
GAP_S = 15.0  # seconds between model calls
HEAD_SKILLS = ("webapp-testing", "web-artifacts-builder", "brand-guidelines", "internal-comms")
VS_TODAY = "vs_today's gate"
ROWS = ("ungated", "today's gate", "cache-aware", "session", "tool gate")
TOOL_K = 5  # the "tool gate" layout: tools gated too, top_k = TOOL_K + TOP_K

TASKS = [
    "Rebase the feature branch onto main and resolve the merge conflicts in the parser",
    "Add a regression test for the date parsing bug in the Python package",
    "Make the Docker image build faster by fixing the layer caching",
    "Write a SQL migration that adds an index to the orders table without downtime",
    "Fix the CSS grid layout that breaks on narrow mobile screens",
    "Explain and fix the Rust borrow checker error in the cache module",
    "Design the retry and timeout policy for the payments HTTP client",
    "Reduce log noise in production and add structured fields to errors",
    "The CI pipeline is flaky: find the cause and make the job reliable",
    "Upgrade the web framework dependency to the next major version safely",
    "Backfill the nightly data pipeline after yesterday's failed run",
    "Review this pull request for security problems in the login flow",
    "Write the user documentation for the new export command",
    "Profile the report endpoint and remove the slow database queries",
    "Roll out the service to the Kubernetes cluster with a canary",
    "Write a status update for leadership about the migration project",
    "Build a small interactive web artifact that shows the release timeline",
    "Create a Slack GIF that celebrates the team's launch",
    "Build an MCP server that exposes the ticket tracker's search",
    "Apply the company's brand colours and fonts to the dashboard theme",
]

# The session's case: one conversation switching between four related tasks, five
# rounds (each round words them a little differently).
INTERLEAVED = [
    f"{TASKS[i]} ({word})"
    for word in ("first pass", "follow-up", "again", "one more check", "final")
    for i in range(4)
]

AREAS = {
    "git": ("rebase", "merge conflict", "branch", "force push", "commit history"),
    "python tests": ("pytest fixture", "regression test", "flaky test", "mock", "coverage"),
    "docker": ("image layer", "build cache", "base image", "multi-stage build", "container"),
    "sql migrations": ("index", "lock", "backfill", "schema change", "transaction"),
    "css layout": ("grid", "flexbox", "media query", "overflow", "mobile viewport"),
    "rust": ("borrow checker", "lifetime", "Arc", "trait object", "unsafe block"),
    "http clients": ("retry", "timeout", "idempotency key", "backoff", "connection pool"),
    "logging": ("log level", "structured field", "trace id", "noise", "error message"),
    "ci pipelines": ("flaky job", "cache key", "matrix build", "artifact", "runner"),
    "dependency upgrades": ("major version", "changelog", "lock file", "deprecation", "pin"),
    "data pipelines": ("backfill", "idempotent job", "partition", "late data", "retry"),
    "security reviews": ("login flow", "session token", "injection", "secret", "permission"),
    "documentation": ("user guide", "example", "command reference", "changelog", "tutorial"),
    "performance": ("profiler", "slow query", "N+1 query", "cache", "hot loop"),
    "kubernetes": ("canary", "rollout", "readiness probe", "resource limit", "config map"),
}
VERBS = ("check", "verify", "write down", "measure", "review", "prefer", "avoid", "document")
WHY = (
    "because the last incident started exactly there",
    "since reviewers asked for it twice",
    "or the change cannot be rolled back cleanly",
    "which saved an hour on the previous run",
    "because the symptoms hide the cause otherwise",
)


def lessons(n_per_area: int = 9) -> list[tuple[str, str]]:
    """Deterministic lessons an agent might have written: (name, text)."""
    rng = random.Random(16)
    out = []
    for area, things in AREAS.items():
        for i in range(n_per_area):
            a, b = rng.sample(things, 2)
            verb = rng.choice(VERBS)
            text = (
                f"Lesson ({area}): before touching the {a}, {verb} the {b} first, "
                f"{rng.choice(WHY)}. When the {a} still misbehaves after that, stop, "
                f"write down what you saw about the {b}, and ask before going further."
            )
            out.append((f"lesson_{area.replace(' ', '_')}_{i}", text))
    return out


def skill_sections(path: Path) -> list[tuple[str, str]]:
    """A SKILL.md split at its ## / ### headings: (name, text)."""
    text = path.read_text(encoding="utf-8")
    if text.startswith("---"):
        text = text.split("---", 2)[2]
    parts = re.split(r"(?m)^(?=#{2,3} )", text)
    skill = path.parent.name
    out = []
    for i, p in enumerate(parts):
        p = p.strip()
        if len(p) > 40:
            out.append((f"{skill}.{i}", p))
    return out


def tool_lists() -> list[list[dict[str, Any]]]:
    seen: set[str] = set()
    out = []
    for path in sorted(DATA.glob("mcp_*_tools.json")):
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
        while isinstance(raw, dict):
            raw = raw.get("result", raw.get("tools"))
        fresh = [t for t in raw if t["name"] not in seen]
        seen.update(t["name"] for t in fresh)
        out.append(fresh)
    return out


def build(
    tokeniser: Any, embedder: Any, *, head_gated: bool, tools_gated: bool | None = None
) -> rampart.BlockRegistry:
    head = [SEEDS / f for f in ("core_rules.md", "safety.md", "style.md", "tools.md")]
    reg = rampart.BlockRegistry.from_files(
        head, embedding_model=embedder, tokeniser=tokeniser, default_max_tokens=BUDGET
    )
    for b in reg.list_blocks():
        if b.semantic_name == "README":
            reg.evict(b.runtime_id, force=True)
        elif not head_gated:
            reg.set_gated(b.runtime_id, False)
    for skill in HEAD_SKILLS:
        for name, text in skill_sections(DATA / "skills" / skill / "SKILL.md"):
            reg.write_block(text, name, gated=head_gated)
    for tools in tool_lists():
        reg.load_tools(tools, gated=head_gated if tools_gated is None else tools_gated)
    skills = sorted(
        p for p in (DATA / "skills").glob("*/SKILL.md") if p.parent.name not in HEAD_SKILLS
    )
    skills.append(SEEDS / "skills" / "release-notes" / "SKILL.md")
    gated_blocks = [s for p in skills for s in skill_sections(p)] + lessons()
    for name, text in gated_blocks:
        reg.write_block(text, name)
    reg.embed_pending()
    return reg


def head_count(reg: rampart.BlockRegistry) -> int:
    """The ungated head's blocks (all in front)."""
    return sum(1 for b in reg.list_blocks() if not b.gated)


def conversation(task: str, call: int) -> list[dict[str, Any]]:
    """The messages of model call ``call`` (0-based) of a task: the task, then one
    assistant step and one tool result per earlier call."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for j in range(call):
        msgs.append(
            {
                "role": "assistant",
                "content": f"Step {j + 1}: I looked at the relevant files for '{task[:40]}' "
                "and will run the next check to narrow the problem down.",
            }
        )
        msgs.append(
            {
                "role": "user",
                "content": f"Result of step {j + 1}: 3 files matched, 1 test failed "
                f"(test_case_{j}), exit status 1; the log shows a timeout after 30 s.",
            }
        )
    return msgs


# ---- compiles per layout ------------------------------------------------------------------


Compile = Callable[[str], Any]


def layouts(
    aware: rampart.BlockRegistry,
    today: rampart.BlockRegistry,
    tool_gated: rampart.BlockRegistry | None,
    prices: str,
    tip: bool,
) -> dict[str, Compile]:
    n_head = head_count(aware)  # today's registry ranks these with the rest
    session = aware.session(
        top_k=TOP_K,
        max_tokens=BUDGET,
        prices=prices,
        calls_per_task=CALLS,
        tools_in_prompt=tip,
        clock=_BenchClock.now,
    )
    out: dict[str, Compile] = {
        "ungated": lambda task: aware.compile(BUDGET, tools_in_prompt=tip),
        "today's gate": lambda task: today.compile(
            BUDGET, task, top_k=n_head + TOP_K, tools_in_prompt=tip
        ),
        "cache-aware": lambda task: aware.compile(BUDGET, task, top_k=TOP_K, tools_in_prompt=tip),
        "session": session.compile,
    }
    if tool_gated is not None:
        out["tool gate"] = lambda task: tool_gated.compile(
            BUDGET, task, top_k=TOOL_K + TOP_K, tools_in_prompt=tip
        )
    return out


class _BenchClock:
    t = 0.0

    @classmethod
    def now(cls) -> float:
        return cls.t


# ---- (b) hosted prices ----------------------------------------------------------------------


class Counter:
    def __init__(self, reg: rampart.BlockRegistry) -> None:
        self.reg = reg
        self.memo: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        n = self.memo.get(text)
        if n is None:
            n = self.memo[text] = self.reg.count_tokens(text)
        return n


def _strip(d: Any) -> Any:
    return {k: v for k, v in d.items() if k != "cache_control"} if isinstance(d, dict) else d


def anthropic_chunks(body: dict[str, Any], count: Counter) -> list[Chunk]:
    out = []
    for t in body.get("tools", []):
        text = json.dumps(_strip(t), sort_keys=True)
        out.append(Chunk(("tool", text), count(text), "cache_control" in t))
    system = body.get("system", [])
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    for s in system:
        out.append(Chunk(("system", s["text"]), count(s["text"]), "cache_control" in s))
    for m in body["messages"]:
        blocks = m["content"] if isinstance(m["content"], list) else [m["content"]]
        for blk in blocks:
            text = blk if isinstance(blk, str) else blk.get("text", json.dumps(_strip(blk)))
            bp = isinstance(blk, dict) and "cache_control" in blk
            out.append(Chunk(("msg", m["role"], text), count(text), bp))
    return out


def openai_chunks(body: dict[str, Any], count: Counter, *, tool_choice: bool = True) -> list[Chunk]:
    """Tools, then the system prompt block by block (OpenAI matches prefixes token by
    token; block boundaries are where two prompts of one registry can part), then the
    messages; ``tool_choice`` last (assumed outside the cached prefix, as
    allowed_tools is meant to be)."""
    out = []
    for t in body.get("tools", []):
        text = json.dumps(t, sort_keys=True)
        out.append(Chunk(("tool", text), count(text)))
    msgs = body["messages"]
    if msgs and msgs[0]["role"] in ("system", "developer"):
        pieces = msgs[0]["content"].split(SEP)
        for i, p in enumerate(pieces):
            text = p if i == 0 else SEP + p
            out.append(Chunk(("system", text), count(text)))
        msgs = msgs[1:]
    for m in msgs:
        out.append(Chunk(("msg", m["role"], m["content"]), count(m["content"])))
    if tool_choice and "tool_choice" in body:
        text = json.dumps(body["tool_choice"])
        out.append(Chunk(("choice", text), count(text)))
    return out


def today_anthropic(res: Any, msgs: list[dict[str, Any]]) -> dict[str, Any]:
    """Today's request shape with caching switched on by hand: one system block
    marked at its end, the gated tools, the last message marked."""
    body = anthropic_messages(res, msgs)
    mark = {"type": "ephemeral"}
    if "system" in body:
        body["system"] = [{"type": "text", "text": body["system"], "cache_control": mark}]
    last = dict(body["messages"][-1])
    last["content"] = [{"type": "text", "text": last["content"], "cache_control": mark}]
    body["messages"] = [*body["messages"][:-1], last]
    return body


def price_rows(embedder: Any, tasks: Sequence[str] = TASKS) -> dict[str, Any]:
    reg_today = build(None, embedder, head_gated=True)
    reg = build(None, embedder, head_gated=False)
    reg_tools = build(None, embedder, head_gated=False, tools_gated=True)
    count = Counter(reg)
    first = reg.compile(BUDGET, TASKS[0], top_k=TOP_K, tools_in_prompt=False)
    tools_tokens = sum(count(json.dumps(t, sort_keys=True)) for t in first.registry_tools())
    info = {
        "blocks": len(reg),
        "head_blocks": head_count(reg),
        "gated_blocks": len(reg) - head_count(reg),
        "head_system_tokens": first.stable_prefix_tokens,
        "tools_json_tokens": tools_tokens,
        "cache_notes": first.cache_notes,
    }
    out: dict[str, Any] = {"registry": info, "tables": {}}
    for table_name in ("anthropic", "openai", "local"):
        table = PRICES[table_name]
        rows: dict[str, dict[str, float]] = {}
        floor_model = PrefixCacheModel(table.ideal())
        floor = 0.0
        for row, compile_ in layouts(reg, reg_today, reg_tools, table_name, False).items():
            new, old = PrefixCacheModel(table), PrefixCacheModel(table)
            cost_new = cost_old = 0.0
            tokens = cached = extends = 0
            _BenchClock.t = 0.0
            i = 0
            for task in tasks:
                _BenchClock.t = GAP_S * i
                res = compile_(task)
                extends += getattr(res, "decision", "") == "extend"
                for call in range(CALLS):
                    now = GAP_S * i
                    i += 1
                    msgs = conversation(task, call)
                    if table_name == "anthropic":
                        body = anthropic_messages(res, msgs, cache=True, tools="all")
                        u = new.request(anthropic_chunks(body, count), now)
                        o = old.request(anthropic_chunks(today_anthropic(res, msgs), count), now)
                    else:
                        body = openai_chat(res, msgs, tools="allowed", prompt_cache_key="fleet")
                        u = new.request(openai_chunks(body, count), now)
                        o = old.request(openai_chunks(openai_chat(res, msgs), count), now)
                    cost_new += u.cost
                    cost_old += o.cost
                    tokens += u.total
                    cached += u.cached
                    if row == "cache-aware":
                        plain = openai_chat(res, msgs, tools="all")
                        floor += floor_model.request(openai_chunks(plain, count), now).cost
            rows[row] = {
                "cost": cost_new,
                "today_layout_cost": cost_old,
                "input_tokens": tokens,
                "cached_tokens": cached,
                "session_extends": extends,
            }
        for r in rows.values():
            r["vs_floor"] = r["cost"] / floor
            r["vs_today_layout"] = r["cost"] / r["today_layout_cost"]
            r["vs_ungated"] = r["cost"] / rows["ungated"]["cost"]
            r["vs_today_gate"] = r["cost"] / rows["today's gate"]["today_layout_cost"]
        out["tables"][table_name] = {"floor": floor, "rows": rows, "source": table.source}
    for r in (reg, reg_today, reg_tools):
        r.release()
    return out


# ---- (a) llama.cpp ---------------------------------------------------------------------------


def llama_rows(embedder: Any, n_threads: int | None, rows: Sequence[str]) -> dict[str, Any]:
    import llama_cpp
    from rampart.llm import LlamaCppBackend

    backend = LlamaCppBackend("smollm2", n_ctx=BUDGET + 4096, n_threads=n_threads)
    llm = backend._llm

    def tok(text: str) -> int:
        return len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    ctx = llm._ctx.ctx
    header = len(llm.tokenize(b"<|im_start|>system\n", add_bos=False, special=True))
    reg_today = build(tok, embedder, head_gated=True)
    reg = build(tok, embedder, head_gated=False)
    out: dict[str, Any] = {
        "model": backend.describe(),
        "threads": n_threads,
        "header_tokens": header,
        "head_tokens": reg.compile(BUDGET, TASKS[0], top_k=TOP_K).stable_prefix_tokens,
        "rows": {},
    }
    seqs: dict[str, list[list[int]]] = {}
    for row, compile_ in layouts(reg, reg_today, None, "local", True).items():
        if row not in rows:
            continue
        llm.reset()  # each layout starts cold
        counted = by_prefix = 0
        ms = wall = 0.0
        total = 0
        reuse_dev: list[float] = []
        seqs[row] = []
        i = 0
        for task in TASKS:
            _BenchClock.t = GAP_S * i
            res = compile_(task)
            for call in range(CALLS):
                i += 1
                msgs = [{"role": "system", "content": res.prompt}, *conversation(task, call)]
                before = [int(t) for t in llm._input_ids[: llm.n_tokens]]
                llama_cpp.llama_perf_context_reset(ctx)
                t0 = time.perf_counter()
                reply = llm.create_chat_completion(messages=msgs, max_tokens=1, temperature=0.0)
                wall += time.perf_counter() - t0
                perf = llama_cpp.llama_perf_context(ctx)
                n_prompt = int(reply["usage"]["prompt_tokens"])
                ids = [int(t) for t in llm._input_ids[:n_prompt]]
                seqs[row].append(ids)
                # llama.cpp counts a batch of one token as eval, longer ones as prompt
                # eval; the sampled token is never evaluated (max_tokens=1).
                counted += int(perf.n_p_eval) + int(perf.n_eval)
                ms += float(perf.t_p_eval_ms) + float(perf.t_eval_ms)
                reused = min(_lcp(before, ids), n_prompt - 1)  # llama-cpp-python's rule
                by_prefix += n_prompt - reused
                total += n_prompt
                if call == 0 and i > 1 and row in ("cache-aware", "session"):
                    predicted = header + (
                        res.cached_tokens if row == "session" else res.stable_prefix_tokens
                    )
                    reuse_dev.append((reused - predicted) / predicted)
        out["rows"][row] = {
            "prompt_tokens": total,
            "prefilled_tokens": counted,
            "prefilled_by_prefix": by_prefix,
            "prefill_ms": ms,
            "wall_s": wall,
            "reuse_deviation_mean": sum(abs(d) for d in reuse_dev) / len(reuse_dev)
            if reuse_dev
            else None,
            "reuse_deviation_max": max((abs(d) for d in reuse_dev), default=None),
            "reuse_deviation_signed": reuse_dev,
        }
    # The floor: the cache-aware prompts with every earlier prefix reused.
    floor = 0
    seen: list[list[int]] = []
    for s in seqs.get("cache-aware", []):
        best = max((_lcp(s, p) for p in seen), default=0)
        floor += len(s) - min(best, len(s) - 1)
        seen.append(s)
    out["floor_prefilled_tokens"] = floor
    got = out["rows"]
    for r in got.values():
        r["vs_floor"] = r["prefilled_tokens"] / floor if floor else None
        for base in ("ungated", "today's gate"):
            if base in got:
                r[f"vs_{base}"] = r["prefilled_tokens"] / got[base]["prefilled_tokens"]
                r[f"ms_vs_{base}"] = r["prefill_ms"] / got[base]["prefill_ms"]
    backend.close()
    return out


def llama_quick(embedder: Any, n_threads: int | None, n_tasks: int, calls: int) -> dict[str, Any]:
    """A small version of (a) that fits a loaded CPU: one seed file as the ungated
    head, the lessons gated top-8, ``n_tasks`` tasks x ``calls`` calls, the
    cache-aware layout and the session. It checks the reuse llama.cpp measures on
    each task's first call against ``stable_prefix_tokens`` (the session:
    ``cached_tokens``), not the 10k-token cost rows."""
    import llama_cpp
    from rampart.llm import LlamaCppBackend

    backend = LlamaCppBackend("smollm2", n_ctx=8192, n_threads=n_threads)
    llm = backend._llm

    def tok(text: str) -> int:
        return len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    ctx = llm._ctx.ctx
    header = len(llm.tokenize(b"<|im_start|>system\n", add_bos=False, special=True))
    reg = rampart.BlockRegistry.from_files(
        [SEEDS / "core_rules.md"], embedding_model=embedder, tokeniser=tok, default_max_tokens=6144
    )
    for b in reg.list_blocks():
        reg.set_gated(b.runtime_id, False)
    for name, text in lessons():
        reg.write_block(text, name)
    reg.embed_pending()
    session = reg.session(top_k=TOP_K, prices="local", calls_per_task=calls, clock=_BenchClock.now)
    rows = {
        "cache-aware": lambda task: reg.compile(None, task, top_k=TOP_K),
        "session": session.compile,
    }
    out: dict[str, Any] = {"header_tokens": header, "rows": {}}
    for row, compile_ in rows.items():
        llm.reset()
        checks = []
        prefilled = total = 0
        i = 0
        for task in TASKS[:n_tasks]:
            res = compile_(task)
            for call in range(calls):
                i += 1
                msgs = [{"role": "system", "content": res.prompt}, *conversation(task, call)]
                llama_cpp.llama_perf_context_reset(ctx)
                reply = llm.create_chat_completion(messages=msgs, max_tokens=1, temperature=0.0)
                perf = llama_cpp.llama_perf_context(ctx)
                n_prompt = int(reply["usage"]["prompt_tokens"])
                evaluated = int(perf.n_p_eval) + int(perf.n_eval)
                prefilled += evaluated
                total += n_prompt
                if call == 0 and i > 1:
                    predicted = header + (
                        res.cached_tokens if row == "session" else res.stable_prefix_tokens
                    )
                    reused = n_prompt - evaluated
                    checks.append(
                        {
                            "task": task[:40],
                            "prompt": n_prompt,
                            "reused": reused,
                            "predicted": predicted,
                            "deviation": (reused - predicted) / predicted,
                        }
                    )
        out["rows"][row] = {"prompt_tokens": total, "prefilled": prefilled, "checks": checks}
    backend.close()
    return out


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


# ---- report ---------------------------------------------------------------------------------


def table_md(results: dict[str, Any]) -> str:
    lines = []
    if "prices" in results:
        reg = results["prices"]["registry"]
        lines.append(
            f"Registry: {reg['blocks']} blocks ({reg['head_blocks']} ungated head, "
            f"{reg['gated_blocks']} gated); head = {reg['head_system_tokens']} system tokens "
            f"+ {reg['tools_json_tokens']} tokens of tool JSON; {len(TASKS)} tasks x {CALLS} "
            "calls."
        )
    for key, title in (
        ("prices", "20 different tasks"),
        ("prices_interleaved", "4 related tasks, interleaved, 5 rounds"),
    ):
        if key not in results:
            continue
        lines.append("")
        lines.append(f"{title}:")
        lines.append("")
        lines.append(
            "| layout | table | input tokens | cached | cost (token-eq.) | vs floor "
            "| vs today's layout | vs ungated | vs today's gate |"
        )
        lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, t in results[key]["tables"].items():
            for row, r in t["rows"].items():
                ext = f" ({r['session_extends']} kept)" if row == "session" else ""
                lines.append(
                    f"| {row}{ext} | {name} | {r['input_tokens']:,} | {r['cached_tokens']:,} "
                    f"| {r['cost']:,.0f} | {r['vs_floor']:.3f} | {r['vs_today_layout']:.3f} "
                    f"| {r['vs_ungated']:.3f} | {r['vs_today_gate']:.3f} |"
                )
            lines.append(f"| floor | {name} | | | {t['floor']:,.0f} | 1.000 | | | |")
    if "llama" in results:
        ll = results["llama"]
        lines.append("")
        lines.append(
            f"llama.cpp ({ll['model']['model_file']}, {ll['threads'] or 'all'} threads; head "
            f"{ll['head_tokens']} tokens + {ll['header_tokens']} of chat template):"
        )
        lines.append("")
        lines.append(
            "| layout | prompt tokens | prefilled | prefill s | vs floor "
            "| vs ungated | vs today's gate | reuse vs prediction (mean / max) |"
        )
        lines.append("|---|---:|---:|---:|---:|---:|---:|---|")
        for row, r in ll["rows"].items():
            dev = (
                f"{r['reuse_deviation_mean'] * 100:.2f} % / {r['reuse_deviation_max'] * 100:.2f} %"
                if r["reuse_deviation_mean"] is not None
                else ""
            )

            def ratio(key: str, r: dict[str, Any] = r) -> str:
                v = r.get(key)
                return "" if v is None else f"{v:.3f}"

            lines.append(
                f"| {row} | {r['prompt_tokens']:,} | {r['prefilled_tokens']:,} "
                f"| {r['prefill_ms'] / 1000:.1f} | {ratio('vs_floor')} | {ratio('vs_ungated')} "
                f"| {ratio(VS_TODAY)} | {dev} |"
            )
        lines.append(f"| floor | | {ll['floor_prefilled_tokens']:,} | | 1.000 | | | |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument("--llama", action="store_true", help="also measure with llama.cpp")
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads")
    ap.add_argument(
        "--llama-rows",
        nargs="+",
        default=["ungated", "today's gate", "cache-aware", "session"],
        help="layouts to measure with llama.cpp",
    )
    ap.add_argument("--no-prices", action="store_true", help="skip (b), the priced part")
    ap.add_argument(
        "--llama-quick",
        nargs=2,
        type=int,
        metavar=("TASKS", "CALLS"),
        default=None,
        help="the small reuse check instead of (a)",
    )
    args = ap.parse_args(argv)
    embedder = rampart.default_embedder()
    t0 = time.perf_counter()
    results: dict[str, Any] = {}
    if not args.no_prices:
        results["prices"] = price_rows(embedder)
        results["prices_interleaved"] = price_rows(embedder, INTERLEAVED)
    if args.llama:
        results["llama"] = llama_rows(embedder, args.threads, args.llama_rows)
    if args.llama_quick:
        results["llama_quick"] = llama_quick(embedder, args.threads, *args.llama_quick)
        print(json.dumps(results["llama_quick"], indent=1))
    results["seconds"] = time.perf_counter() - t0
    print(table_md(results))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
