"""Does a model still complete its task when rampart clears old tool results?

Issue 24's probe (SPEC §9, docs/conversation.md, "Task success with and without
clearing"). Each task is an agent transcript on real tool output: a user asks to see
some commits of the repository, the assistant calls ``git_show`` ``--calls`` times,
and every result is what ``mcp-server-git`` really returned for that commit
(tests/data/mcp_tool_outputs.json, recorded by benches/record_mcp_outputs.py). Then
the user asks for a fact found in exactly one of those results: the time of day on
the ``Date:`` line of one commit (checked in the generator: no other result of the
transcript holds that time). The asked-about result (the *needle*) is

- ``recent``: the last result, which clearing keeps (``keep_tool_results``), or
- ``old``: the first result, which clearing removes: its stub names the tool and the
  call, and the call's arguments (the commit id) stay, so the model can call the tool
  again, answer from what else it sees, or say it does not know.

The same tasks run under these ways of building the requests, each with the model's
reply driving a small agent loop (up to ``--steps`` model calls: a tool call the model
makes is answered from the recorded outputs, so a re-call of ``git_show`` gets what
the server returned; a call with no recorded output gets an error result saying so):

- ``full``: every message as it came (``reg.compile(conversation=conv)``, no window),
  in a model context large enough to hold it: what the task scores when nothing is
  removed. Its requests do not fit ``--window``;
- ``rampart``: ``reg.compile(conversation=conv, context_window=W, reply_tokens=M,
  policy=ContextPolicy())`` (the documented defaults), the adapters' messages
  (``result.messages("openai_chat")``) sent as they are;
- ``trim`` (needs langchain-core): LangChain's ``trim_messages(strategy="last")`` to
  the same window, the baseline most framework users have.

Tokens are the model's own (the chat template rendered and tokenised by llama.cpp).
rampart counts with ``o200k_base``. The template's fixed tokens around the system
prompt and the tool schemas (Qwen2.5's tool preamble, ~380 tokens) come off the
window; the ratio of the rest is learned the way an agent loop learns it: the
transcript's earlier steps are replayed, each step's request compiled and its count
observed as that call's usage (``conv.observe_usage``). A local model's count is
free, so a request still over the window (the learned ratio trails a request whose
mix of text differs from the earlier ones') is observed and compiled again.

The window is chosen from token counts alone, before any model ran: every ``full``
request exceeds it, and the latest result still fits beside the instructions.

Outcomes, per task and condition: ``correct`` (the time in the answer, no tool
called), ``correct_after_recall`` (after calling a tool), ``wrong`` (another answer),
``unknown`` (said it cannot tell), ``no_answer`` (still calling tools after the last
step), ``overflow`` (the request did not fit the model's context). Deterministic:
temperature 0, one seed, fixed task set.

The task set is split by commit into ``tune`` and ``holdout`` (the prompts' wording
was written looking at tune tasks only; no parameter is fitted to success): quote
holdout. The saved run (``make conversation-clearing``, 28 min on 2 shared cores):

    python experiments/conversation_clearing.py --model qwen2.5-coder-1.5b --threads 2 \\
        --split holdout --conditions full,rampart \\
        --out experiments/conversation_clearing_qwen.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import rampart
from _common import run
from rampart.errors import ContextOverflowError, InvalidArgumentError
from rampart.llm import LlamaCppBackend, parse_text_tool_calls

__all__ = [
    "CONDITIONS",
    "Task",
    "build_tasks",
    "judge",
    "run_probe",
    "summarise",
]

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"

SYSTEM = (
    "You are a code-review assistant for the git repository at /repo. You see the "
    "repository only through the tools. Answer the user's question with exactly the "
    "value asked for, on one line."
)
TASK = (
    "I am reviewing recent commits of the repository at /repo. Show me these commits, "
    "one by one; I will ask you about them afterwards."
)
QUESTION = (
    "What time of day (HH:MM:SS) is on the Date line of commit {revision}? "
    "Reply with the time only."
)
#: The tools the model is given (the three it needs, of mcp-server-git's twelve: a
#: bigger schema list costs every request the same tokens and tells nothing here).
TOOLS = ("git_show", "git_log", "git_status")
CONDITIONS = ("full", "rampart", "trim")
SEED = 24
_TIME = re.compile(r"\b(\d{2}:\d{2}:\d{2})\b")
_DATE = re.compile(r"^Date:\s+\d{4}-\d{2}-\d{2} (\d{2}:\d{2}:\d{2})", re.MULTILINE)
_UNKNOWN = re.compile(
    r"(don't|do not|cannot|can't|unable|not (?:available|present|visible|shown|provided)"
    r"|no longer|cleared|removed|need to call|call the tool)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Task:
    """One transcript: the commits shown (their recorded ``git_show`` outputs, in call
    order), which of them is asked about, and the answer."""

    id: str
    split: str
    position: str  # "recent" or "old"
    revisions: tuple[str, ...]
    needle: int  # index into revisions
    answer: str  # HH:MM:SS

    @property
    def question(self) -> str:
        return QUESTION.format(revision=self.revisions[self.needle])


def _outputs() -> list[dict[str, Any]]:
    return list(json.loads((DATA / "mcp_tool_outputs.json").read_text())["outputs"])


def _commit_time(text: str) -> str:
    m = _DATE.search(text)
    if m is None:
        raise InvalidArgumentError(f"a git_show output without a Date line: {text[:80]!r}")
    return m.group(1)


def build_tasks(
    *, calls: int = 4, max_chars: int = 1700, tune: int = 5, seed: int = SEED
) -> list[Task]:
    """The fixed task set: every ``git_show`` output of at most ``max_chars`` characters
    is the needle of two tasks (``recent``, ``old``), the other ``calls - 1`` commits
    drawn from the same pool with ``seed``; the first ``tune`` needle commits (in a
    seeded order) are the tune split, the rest the holdout."""
    shows = {
        o["arguments"]["revision"]: o["text"]
        for o in _outputs()
        if o["tool"] == "git_show" and len(o["text"]) <= max_chars
    }
    pool = sorted(shows)
    if calls < 2 or calls > len(pool):
        raise InvalidArgumentError(
            f"--calls must be 2..{len(pool)} with --max-chars {max_chars}, got {calls}"
        )
    rng = random.Random(seed)
    order = pool[:]
    rng.shuffle(order)
    tasks: list[Task] = []
    for k, rev in enumerate(order):
        split = "tune" if k < tune else "holdout"
        answer = _commit_time(shows[rev])
        others = [r for r in pool if r != rev and answer not in shows[r]]
        for position in ("recent", "old"):
            fill = rng.sample(others, calls - 1)
            revs = (*fill, rev) if position == "recent" else (rev, *fill)
            needle = calls - 1 if position == "recent" else 0
            # The answer is in the needle's result and in no other: a correct answer
            # was read from it (or from a re-call of it), never from a neighbour.
            assert sum(answer in shows[r] for r in revs) == 1
            tasks.append(Task(f"{rev[:7]}-{position}", split, position, revs, needle, answer))
    return tasks


def judge(answer: str, expected: str, called: bool) -> str:
    """The outcome of a final answer (see the module doc)."""
    if expected in _TIME.findall(answer) or expected in answer:
        return "correct_after_recall" if called else "correct"
    if not _TIME.search(answer) and _UNKNOWN.search(answer):
        return "unknown"
    return "wrong"


# ---- the model: exact prompt counts, and the text form for models without tool syntax --


class Model:
    """A llama.cpp model with its chat template at hand, so any request's prompt
    tokens can be counted without evaluating it (what the replayed steps' usage is)."""

    def __init__(self, backend: LlamaCppBackend) -> None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.backend = backend
        llm = backend._llm
        self.llm: Any = llm
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise InvalidArgumentError(f"{backend.model}: the GGUF has no chat template")
        tok = llm._model
        self.format = Jinja2ChatFormatter(
            template=template,
            eos_token=tok.token_get_text(llm.token_eos()),
            bos_token=tok.token_get_text(llm.token_bos()),
        )

    @property
    def native(self) -> bool:
        return self.backend.native_tools

    def prompt_tokens(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> int:
        from rampart.llm import _template_message

        fmt: Any = self.format  # llama-cpp-python types messages as its TypedDicts
        resp = fmt(
            messages=[_template_message(m) for m in messages],
            tools=list(tools) if self.native and tools else None,
        )
        return len(self.llm.tokenize(resp.prompt.encode(), add_bos=False, special=True))


def text_form(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI Chat messages for a chat template with no tool syntax (SmolLM2's): a
    call becomes the assistant's ``<tool_call>`` text, a result a user turn naming
    the call (what the model is told to write, and read back by
    ``parse_text_tool_calls``)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "tool":
            out.append(
                {"role": "user", "content": f"[result of {m['tool_call_id']}]\n{m['content']}"}
            )
        elif m.get("tool_calls"):
            calls = "\n".join(
                "<tool_call>"
                + json.dumps(
                    {
                        "name": c["function"]["name"],
                        "arguments": json.loads(c["function"]["arguments"]),
                    }
                )
                + "</tool_call>"
                for c in m["tool_calls"]
            )
            out.append(
                {"role": "assistant", "content": ((m.get("content") or "") + "\n" + calls).strip()}
            )
        else:
            out.append({"role": m["role"], "content": m.get("content") or ""})
    return out


TEXT_CALLS = (
    'To call a tool, reply with <tool_call>{"name": "<tool>", "arguments": {...}}'
    "</tool_call> and nothing else."
)


# ---- one task under one condition --------------------------------------------------------


@dataclass
class Outcome:
    task: str
    split: str
    position: str
    condition: str
    outcome: str
    answer: str
    expected: str
    calls_made: list[str] = field(default_factory=list)
    request_tokens: list[int] = field(default_factory=list)  # the model's count, per call
    fits_window: bool = True
    # In the request that asked the question: the tool results the policy cleared,
    # and whether the needle was gone (cleared, dropped or trimmed away).
    cleared: int = 0
    needle_cleared: bool = False


def registry(
    native: bool, tool_names: Sequence[str] = TOOLS
) -> tuple[rampart.BlockRegistry, list[dict[str, Any]]]:
    tools = [
        t
        for t in json.loads((DATA / "mcp_git_tools.json").read_text())["tools"]
        if t["name"] in tool_names
    ]
    reg = rampart.BlockRegistry(tokeniser="o200k_base", default_max_tokens=None)
    reg.write_block(SYSTEM if native else SYSTEM + " " + TEXT_CALLS, "role")
    reg.load_tools(tools, gated=False)
    return reg, tools


class Replayer:
    """Tool calls answered from the recorded server outputs: ``git_show`` of a
    revision (a unique prefix of at least 7 characters, as git resolves one) gets what
    mcp-server-git returned for it; anything else, an error result saying no output
    was recorded for the call."""

    def __init__(self) -> None:
        self.outputs = _outputs()
        self.shows = {
            o["arguments"]["revision"]: o["text"] for o in self.outputs if o["tool"] == "git_show"
        }

    def show(self, revision: str) -> str:
        return str(self.shows[revision])

    def __call__(self, name: str, arguments: str) -> str:
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return f"error: the arguments are not JSON: {arguments[:200]}"
        if name == "git_show" and isinstance(args, dict):
            rev = str(args.get("revision", ""))
            hits = [r for r in self.shows if len(rev) >= 7 and r.startswith(rev)]
            if len(hits) == 1:
                return str(self.shows[hits[0]])
            return f"error: unknown revision {rev!r} (no recorded git_show output for it)"
        for o in self.outputs:
            if o["tool"] == name and o["arguments"] == args:
                return str(o["text"])
        return f"error: no recorded output of {name} for these arguments: {arguments[:200]}"


def _transcript(task: Task, replay: Replayer) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for i, rev in enumerate(task.revisions):
        cid = f"call_{i}"
        args = json.dumps({"repo_path": "/repo", "revision": rev})
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": "git_show", "arguments": args},
                    }
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": cid, "content": replay.show(rev)})
    return msgs


def _trimmer() -> Callable[[list[dict[str, Any]], int], list[dict[str, Any]]] | None:
    """LangChain's ``trim_messages`` to a budget of o200k tokens (the window in the
    model's units, scaled as rampart's is), or None without langchain-core."""
    try:
        from langchain_core.messages import trim_messages
    except ImportError:
        return None
    sys.path.insert(0, str(ROOT / "benches"))
    import conversation_run as cr  # type: ignore[import-not-found]  # benches/, by path

    def build(msgs: list[dict[str, Any]], max_tokens: int) -> list[dict[str, Any]]:
        kept = trim_messages(
            cr._to_langchain(msgs),
            max_tokens=max_tokens,
            token_counter=cr._lc_tokens,
            strategy="last",
            start_on=("human", "ai"),
            end_on=("human", "tool"),
        )
        out: list[dict[str, Any]] = cr._from_langchain(kept)
        return out

    return build


def policy_for(condition: str) -> rampart.ContextPolicy | None:
    """The policy of a condition (None: no window, or trimmed outside rampart)."""
    return rampart.ContextPolicy() if condition == "rampart" else None


def run_task(
    model: Model,
    task: Task,
    condition: str,
    *,
    window: int,
    reply: int,
    steps: int,
    seed: int = 0,
    tool_names: Sequence[str] = TOOLS,
) -> Outcome:
    """One task under one condition: the transcript replayed, then up to ``steps``
    model calls (a tool call is answered and the model called again)."""
    if condition not in CONDITIONS:
        raise InvalidArgumentError(f"condition must be one of {CONDITIONS}, got {condition!r}")
    reg, tools_def = registry(model.native, tool_names)
    names = [t["name"] for t in tools_def]
    replay = Replayer()
    policy = policy_for(condition)
    conv = rampart.Conversation()
    trim = _trimmer() if condition == "trim" else None
    if condition == "trim" and trim is None:
        raise InvalidArgumentError("the trim condition needs langchain-core")
    history = _transcript(task, replay)

    # The chat template's own tokens around the system prompt and the tool schemas
    # (Qwen2.5's tool preamble: ~300 tokens rampart's count of the schemas does not
    # hold). They are a fixed sum, not a ratio, so they come off the window the way a
    # provider's own system prompt would; the ratio of the rest is learned from usage.
    preamble = 0

    def build() -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
        if policy is not None:
            res = reg.compile(
                conversation=conv,
                context_window=window - preamble,
                reply_tokens=reply,
                policy=policy,
                tools_in_prompt=False,
            )
        else:
            res = reg.compile(conversation=conv, tools_in_prompt=False)
        msgs = res.messages("openai_chat")
        tools = res.tools("openai")
        if trim is not None:
            scale = conv.scale("openai") or 1.0
            msgs = trim(msgs, int((window - preamble - reply) / scale) - res.context.fixed_tokens)
        if model.native:
            return [{"role": "system", "content": res.prompt}, *msgs], tools, res
        # No tool syntax in the template: the schemas rampart counted go in the system
        # prompt as JSON, what the budget holds for them.
        system = f"{res.prompt}\n\nTools:\n{json.dumps(tools)}"
        return [{"role": "system", "content": system}, *text_form(msgs)], [], res

    def request() -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
        """The request, compiled; a local model's count is free, so one over the
        window is counted, observed as usage and compiled again (the learned ratio
        trails a request whose mix of text differs from the earlier ones')."""
        sent, tools, res = build()
        for _ in range(4):
            if policy is None:
                break
            n = model.prompt_tokens(sent, tools)
            if n + reply <= window:
                break
            conv.observe_usage({"prompt_tokens": n - preamble})
            sent, tools, res = build()
        return sent, tools, res

    conv.append(history[0])
    head = reg.compile(conversation=conv, tools_in_prompt=False)
    head_sent = request()[0][:1]  # the system message (with the schemas when not native)
    preamble = max(
        0,
        model.prompt_tokens(head_sent, head.tools("openai")) - head.context.fixed_tokens,
    )
    # The transcript's earlier steps, replayed: the request before each recorded call
    # is compiled and its count in the model's tokens observed as that call's usage,
    # as an agent loop observes it (so the policy budgets in the model's units).
    for k in range(1, len(history), 2):
        sent, tools, _ = request()
        conv.observe_usage({"prompt_tokens": model.prompt_tokens(sent, tools) - preamble})
        conv.append(history[k : k + 2])
    conv.append({"role": "user", "content": task.question})
    needle_id = next(
        it.id
        for it in conv.items
        if it.kind == "tool_result" and it.call_id == f"call_{task.needle}"
    )

    out = Outcome(task.id, task.split, task.position, condition, "no_answer", "", task.answer)
    n_ctx = model.llm.n_ctx()
    # Each task and condition starts from an empty KV cache: llama.cpp's numbers for
    # a reused prefix differ in the last bits from a fresh evaluation, and a row must
    # not depend on which row ran before it. (The steps of one row still reuse.)
    model.llm.reset()
    for step in range(steps):
        try:
            sent, tools, res = request()
        except ContextOverflowError:  # a re-called result left no room
            out.outcome = "overflow"
            break
        n = model.prompt_tokens(sent, tools)
        out.request_tokens.append(n)
        out.fits_window = out.fits_window and n + reply <= window
        if step == 0 and policy is not None:  # what the model saw when asked
            report = res.message_report
            out.cleared = sum(r.action == "cleared" for r in report)
            out.needle_cleared = any(r.id == needle_id and r.action != "kept" for r in report)
        elif step == 0 and condition == "trim":
            shown = {m.get("tool_call_id") for m in sent}
            out.needle_cleared = f"call_{task.needle}" not in shown
        if n + reply > n_ctx:
            out.outcome = "overflow"
            break
        r = model.backend.chat(
            sent, temperature=0.0, seed=seed, max_tokens=reply, tools=tools or None
        )
        conv.observe_usage({"prompt_tokens": (r.prompt_tokens or n) - preamble})
        calls = list(r.calls)
        if not calls and not model.native:
            calls = list(parse_text_tool_calls(r.text, names)[1])
        out.answer = r.text.strip()
        if not calls:
            out.outcome = judge(out.answer, task.answer, bool(out.calls_made))
            break
        tool_calls = []
        results = []
        for j, c in enumerate(calls):
            cid = f"step{step}_{j}"
            tool_calls.append(
                {
                    "id": cid,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
            )
            results.append(
                {"role": "tool", "tool_call_id": cid, "content": replay(c.name, c.arguments)}
            )
            out.calls_made.append(f"{c.name}({c.arguments})")
        conv.append(
            [{"role": "assistant", "content": r.text or None, "tool_calls": tool_calls}, *results]
        )
    return out


def run_probe(
    model: Model,
    tasks: Sequence[Task],
    conditions: Sequence[str],
    *,
    window: int,
    reply: int,
    steps: int,
    seed: int = 0,
    tool_names: Sequence[str] = TOOLS,
    progress: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Every task under every condition, task by task; each row is a function of its
    task and condition only (see :func:`run_task`)."""
    rows = []
    for task in tasks:
        for condition in conditions:
            row = run_task(
                model,
                task,
                condition,
                window=window,
                reply=reply,
                steps=steps,
                seed=seed,
                tool_names=tool_names,
            )
            rows.append(row)
            if progress is not None:
                progress(row)
    return rows


SUCCESS = ("correct", "correct_after_recall")


def summarise(rows: Sequence[Outcome]) -> dict[str, Any]:
    """Per split, condition and needle position: tasks, successes, outcome counts,
    peak and median request tokens, whether every request fit the window."""
    out: dict[str, Any] = {}
    for split in sorted({r.split for r in rows}):
        for cond in [c for c in CONDITIONS if any(r.condition == c for r in rows)]:
            sel = [r for r in rows if r.split == split and r.condition == cond]
            entry: dict[str, Any] = {
                "tasks": len(sel),
                "success": sum(r.outcome in SUCCESS for r in sel),
                "peak_request_tokens": max(
                    (max(r.request_tokens, default=0) for r in sel), default=0
                ),
                "all_fit_window": all(r.fits_window for r in sel),
                "outcomes": dict(Counter(r.outcome for r in sel)),
            }
            for pos in ("recent", "old"):
                p = [r for r in sel if r.position == pos]
                entry[pos] = {
                    "tasks": len(p),
                    "success": sum(r.outcome in SUCCESS for r in p),
                    "needle_removed": sum(r.needle_cleared for r in p),
                    "outcomes": dict(Counter(r.outcome for r in p)),
                }
            out[f"{split}/{cond}"] = entry
    return out


def format_summary(summary: dict[str, Any]) -> str:
    lines = [
        "| split | condition | success | recent | old (needle removed) | peak request | fits |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for key, e in summary.items():
        split, cond = key.split("/")
        old = e["old"]
        lines.append(
            f"| {split} | {cond} | {e['success']}/{e['tasks']} | "
            f"{e['recent']['success']}/{e['recent']['tasks']} | "
            f"{old['success']}/{old['tasks']} ({old['needle_removed']}) | "
            f"{e['peak_request_tokens']:,} | {'yes' if e['all_fit_window'] else 'no'} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="GGUF alias or path")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=4, help="git_show calls in each transcript")
    ap.add_argument("--max-chars", type=int, default=1700, help="largest git_show output used")
    ap.add_argument("--window", type=int, default=2048, help="context window (model tokens)")
    ap.add_argument("--reply", type=int, default=48, help="reply tokens reserved (and generated)")
    ap.add_argument("--steps", type=int, default=3, help="model calls per task at most")
    ap.add_argument("--split", choices=("tune", "holdout", "all"), default="holdout")
    ap.add_argument("--limit", type=int, default=None, help="the first N tasks of the split")
    ap.add_argument("--conditions", default="full,rampart,trim")
    ap.add_argument("--n-ctx", type=int, default=8192, help="the model's context (holds full)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    conditions = [c for c in args.conditions.split(",") if c]
    bad = [c for c in conditions if c not in CONDITIONS]
    if bad:
        raise InvalidArgumentError(f"--conditions: unknown {bad}; choose from {CONDITIONS}")
    tasks = [
        t
        for t in build_tasks(calls=args.calls, max_chars=args.max_chars)
        if args.split == "all" or t.split == args.split
    ][: args.limit]
    backend = LlamaCppBackend(args.model, n_ctx=args.n_ctx, n_threads=args.threads)
    model = Model(backend)
    t0 = time.perf_counter()

    done: list[Outcome] = []

    def write() -> None:
        if args.out is None:
            return
        doc = {
            "model": args.model,
            "settings": {
                k: getattr(args, k)
                for k in ("calls", "max_chars", "window", "reply", "steps", "split", "limit")
            }
            | {"n_ctx": args.n_ctx, "threads": args.threads, "seed": SEED},
            "policy": {c: repr(p) for c in conditions if (p := policy_for(c))},
            "complete": len(done) == len(tasks) * len(conditions),
            "tasks": [asdict(t) | {"question": t.question} for t in tasks],
            "summary": summarise(done),
            "rows": [asdict(r) for r in done],
            "wall_s": round(time.perf_counter() - t0, 1),
        }
        args.out.write_text(json.dumps(doc, indent=1) + "\n")

    def show(r: Outcome) -> None:
        done.append(r)
        print(
            f"{r.task:16s} {r.condition:16s} {r.outcome:20s} tokens {r.request_tokens} "
            f"calls {r.calls_made} answer {r.answer[:60]!r}",
            flush=True,
        )
        write()  # after every row: a run stopped early keeps what it measured

    run_probe(
        model,
        tasks,
        conditions,
        window=args.window,
        reply=args.reply,
        steps=args.steps,
        progress=show,
    )
    backend.close()
    print(format_summary(summarise(done)))
    return 0


if __name__ == "__main__":
    sys.exit(run("conversation_clearing", main))
