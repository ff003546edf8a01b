"""Needle in a trajectory: does a clearing policy keep what a later question needs?

Issue 30. Each task of ``tests/data/needles/tasks.json`` is an agent run on real tool
output: a user task, then 20-40 tool calls whose results are what
``mcp-server-filesystem``'s ``read_text_file`` returns for real files of this
repository (its docs, scripts and seeds, and the Apache-2.0 skills in
tests/data/skills: the file's text as is) and what ``mcp-server-git`` returned
(tests/data/mcp_tool_outputs.json), 1.5-20 KB each; then a question, in a user's
words, that only one or two lines of one or two results answer (the *needles*).
Kinds: ``old`` (the needle's result in the first half of the run), ``recent`` (among
the last three results), ``two`` (two needles in two old results, both needed).

The agent compiles before every model call — after the task and after each tool
result — so clearing happens progressively, as in an agent loop, and the cached prefix
of each request is the previous request's; then the question arrives and is compiled.
Each request is the registry's system prompt and tools (one short instruction block,
the filesystem and git tools) plus the messages, into a window of 16 000 or 8 000
tokens with 1 024 kept for the reply. Strategies:

* ``new_default``: ``rampart.ContextPolicy()`` (relevance-aware retention and recall);
* ``age_only``: ``ContextPolicy(relevance=False)``, oldest results cleared first;
* ``trim_messages``: LangChain's ``trim_messages`` to the window less the reply
  (benches/conversation_run.py's strategy (b));
* ``clear_tool_uses``: Anthropic's ``clear_tool_uses_20250919`` defaults (trigger
  100 000 input tokens, keep 3, ``clear_at_least`` 0) through LangChain's
  ``ClearToolUsesEdit``, client-side (conversation_run.py's strategy (c)): in these
  windows it never triggers, so requests outgrow the window;
* ``clear_tool_uses_fit``: the same edit with its trigger at the window less the
  reply (it clears all but the last 3 results once a request would not fit).

Measured per strategy, window and split: *evidence kept* (every needle line present
verbatim in the messages of the question's compile), by kind, and *answerable*
(evidence kept and that request within the window); the tokens of the question's
request; whether every request of the run fit the window; *prefix rewrites* (compiles
whose messages do not start with the previous compile's messages, compared message by
message as serialised JSON); and the run's cost, every request replayed through
:class:`rampart.caching.PrefixCacheModel` under the ``anthropic`` and ``openai``
(GPT-5) tables as conversation_run.py bills them (15 s apart), in uncached-token
equivalents. Every strategy's requests are counted the way rampart budgets them: the
registry's count of the system prompt and tools (``context.fixed_tokens``) plus each
message in ``o200k_base`` with 4 tokens of framing (a tool call: 8). Requests past the
window are billed as sent (a provider would refuse them: see "all fit"). Evidence is
also split by the question's label: ``paraphrase`` (no rare word shared with the
needle) or ``lexical``.

The registry carries MiniLM (``OnnxEmbedder(threads=1)``; ``--no-embed`` for BM25
alone), so ``new_default`` embeds each result's passages once per run: the whole bench
(52 tasks, two windows, five strategies) takes about a minute with the vector cache
warm and a few minutes cold, on one core.

    python benches/needle_bench.py [--split tune|holdout|all] [--strategies ...]
        [--windows 16000,8000] [--out needle_bench.json] [--md needle_bench.md]
        [--data tests/data/needles2/tasks.json]

``--data`` runs another task set of the same shape: ``tests/data/needles2`` (issue 35)
is 48 tasks on recorded ``mcp-server-fetch``, ``mcp-server-git`` and ``mcp-alchemy``
results, half of its questions in Chinese, Japanese, Spanish, German or Russian; it
names its own system prompt and tools, and evidence is also reported by the question's
language (English, other, cross-language).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NEEDLES = ROOT / "tests" / "data" / "needles" / "tasks.json"
sys.path.insert(0, str(ROOT / "benches"))

import conversation_run as cr  # noqa: E402
import rampart  # noqa: E402
from rampart.caching import Chunk, PrefixCacheModel  # noqa: E402

REPLY = 1024
WINDOWS = (16_000, 8_000)
CALL_INTERVAL_S = 15.0
TABLES = ("anthropic", "openai")
SYSTEM = (
    "You are a coding agent working in the repository at /repo. Read what you need with "
    "the tools, answer the user's questions from what the tools returned, and say so when "
    "what you read does not settle a question."
)
FS_TOOLS = ("read_text_file", "list_directory", "search_files")
GIT_TOOLS = ("git_status", "git_log", "git_show", "git_diff")
STRATEGIES = ("new_default", "age_only", "trim_messages", "clear_tool_uses", "clear_tool_uses_fit")
KINDS = ("old", "recent", "two")


# ---- the data: sources pinned by content, materialised on demand ------------------------------


def git_blob_id(data: bytes) -> str:
    """Git's object id of a file's bytes (``git hash-object``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _file_bytes(path: str, blob: str) -> bytes:
    """The file as it was recorded: the working tree's copy when it is unchanged, else
    the blob from the repository's history (the docs change; the dataset does not)."""
    f = ROOT / path
    if f.is_file():
        data = f.read_bytes()
        if git_blob_id(data) == blob:
            return data
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "cat-file", "blob", blob],
            capture_output=True,
            check=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise FileNotFoundError(
            f"{path}: changed since recorded, and blob {blob} unreadable"
        ) from e
    if git_blob_id(out) != blob:
        raise FileNotFoundError(f"{path}: blob {blob} does not match its content")
    return out


def _head(text: str, n: int | None) -> str:
    # mcp-server-filesystem's read_text_file(head=N): the first N lines, joined by "\n".
    return text if n is None else "\n".join(text.split("\n")[:n])


def load(path: Path = NEEDLES) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _outputs(file: str) -> list[dict[str, Any]]:
    """A file of recorded tool outputs (``{"outputs": [...]}``), gzipped or not."""
    path = ROOT / file
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return json.load(f)["outputs"]
    return json.loads(path.read_text(encoding="utf-8"))["outputs"]


def materialise(doc: dict[str, Any]) -> dict[str, str]:
    """Source id -> the tool result's text, exactly as the server returned it."""
    outputs: dict[str, list[dict[str, Any]]] = {}
    texts: dict[str, str] = {}
    for sid, s in doc["sources"].items():
        if s["kind"] == "file":
            text = _file_bytes(s["path"], s["blob"]).decode("utf-8")
            texts[sid] = _head(text, s["arguments"].get("head"))
        else:
            if s["file"] not in outputs:
                outputs[s["file"]] = _outputs(s["file"])
            (hit,) = [
                o["text"]
                for o in outputs[s["file"]]
                if o["tool"] == s["tool"] and o["arguments"] == s["arguments"]
            ]
            if hashlib.sha256(hit.encode()).hexdigest() != s["sha256"]:
                raise ValueError(f"{sid}: the recorded output changed")
            texts[sid] = hit
    return texts


def call_message(i: int, source: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{i:03d}",
                "type": "function",
                "function": {"name": source["tool"], "arguments": json.dumps(source["arguments"])},
            }
        ],
    }


def steps(task: dict[str, Any], doc: dict[str, Any], texts: dict[str, str]) -> list[list[Any]]:
    """The run's messages in OpenAI Chat shape: [task], then one [call, result] per step,
    then [question]."""
    out: list[list[Any]] = [[{"role": "user", "content": task["task"]}]]
    for i, sid in enumerate(task["trajectory"]):
        out.append(
            [
                call_message(i, doc["sources"][sid]),
                {"role": "tool", "tool_call_id": f"call_{i:03d}", "content": texts[sid]},
            ]
        )
    out.append([{"role": "user", "content": task["question"]}])
    return out


def _contents(msgs: Sequence[dict[str, Any]]) -> list[str]:
    out = []
    for m in msgs:
        c = m.get("content")
        if isinstance(c, str):
            out.append(c)
        elif isinstance(c, list):
            out.extend(p.get("text", "") for p in c if isinstance(p, dict))
    return out


def evidence(msgs: Sequence[dict[str, Any]], task: dict[str, Any]) -> list[bool]:
    """Per needle: whether every one of its lines is in some message, verbatim."""
    contents = _contents(msgs)
    return [
        all(any(line.strip() in c for c in contents) for line in n["lines"])
        for n in task["needles"]
    ]


# ---- the request: system prompt and tools --------------------------------------------------


class MemoEmbedder:
    """The real model, remembering each text's vectors for the whole run: every
    task is a new conversation over the same sources, so without it each task
    embeds them again. The vectors are the model's own, so every number the
    bench reports is what it would be without the memo; only the run is faster.
    (benches/question_latency.py measures the cold path.)"""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._memo: dict[tuple[str, frozenset[str]], tuple[Any, Any]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def encode_with_tokens(self, texts: Any, skip: frozenset[str] = frozenset()) -> Any:
        import numpy as np

        texts = list(texts)
        todo = sorted({t for t in texts if (t, skip) not in self._memo})
        if todo:
            vecs, toks = self.model.encode_with_tokens(todo, skip)
            for t, v, k in zip(todo, vecs, toks, strict=True):
                self._memo[(t, skip)] = (v, k)
        got = [self._memo[(t, skip)] for t in texts]
        return np.stack([v for v, _ in got]), [k for _, k in got]


def registry(embedder: Any = None, doc: dict[str, Any] | None = None) -> rampart.BlockRegistry:
    """The request's fixed part: a data set may name its own system prompt and tools
    (the second set's agent fetches pages, reads git and queries SQL); the first set's
    are the filesystem and git servers' tools."""
    doc = doc or {}
    reg = rampart.BlockRegistry(
        embedding_model=embedder, tokeniser="o200k_base", default_max_tokens=None
    )
    reg.write_block(doc.get("system", SYSTEM), "agent")
    if "tools" in doc:
        tools = doc["tools"]
    else:
        fs = json.loads((cr.DATA / "mcp_filesystem_tools.json").read_text())["result"]["tools"]
        git = json.loads((cr.DATA / "mcp_git_tools.json").read_text())["tools"]
        tools = [t for t in fs if t["name"] in FS_TOOLS]
        tools += [t for t in git if t["name"] in GIT_TOOLS]
    reg.load_tools(tools, gated=False)
    return reg


def policy(name: str) -> tuple[rampart.ContextPolicy, str | None]:
    if name == "new_default":
        return rampart.ContextPolicy(), None
    try:
        return rampart.ContextPolicy(relevance=False), None
    except TypeError:
        return (
            rampart.ContextPolicy(),
            "ContextPolicy has no relevance argument: age_only ran the default",
        )


Builder = Callable[[list[dict[str, Any]], int], list[dict[str, Any]]]


def rampart_builder(reg: rampart.BlockRegistry, pol: rampart.ContextPolicy, window: int) -> Builder:
    """The conversation grows by the new messages; each call is one compile."""
    conv = rampart.Conversation()
    appended = 0

    def build(msgs: list[dict[str, Any]], _head_tokens: int) -> list[dict[str, Any]]:
        nonlocal appended
        if len(msgs) > appended:
            conv.append(msgs[appended:])
            appended = len(msgs)
        if pol.recall and msgs and msgs[-1].get("role") == "user" and len(msgs) > 1:
            # the question: what the same compile without the recall sends (a dry run),
            # to tell what the recall itself rewrote (run_task's "recall_rewrote")
            dry = reg.compile(
                conversation=conv,
                context_window=window,
                reply_tokens=REPLY,
                policy=dataclasses.replace(pol, recall=False, dry_run=True),
                tools_in_prompt=False,
            )
            DRY[id(build)] = [dict(m) for m in dry.messages("openai_chat")]
        result = reg.compile(
            conversation=conv,
            context_window=window,
            reply_tokens=REPLY,
            policy=pol,
            tools_in_prompt=False,
        )
        return [dict(m) for m in result.messages("openai_chat")]

    return build


#: A rampart builder's dry run of the question without the recall, by id(build).
DRY: dict[int, list[dict[str, Any]]] = {}
RECALLED = "[recalled for the current step"


def baseline_builder(name: str, window: int, head_tokens: int) -> Builder:
    if name == "trim_messages":
        # conversation_run's trim keeps window - its REPLY_TOKENS - head: shift to ours
        f = cr.strategy_trim(window + cr.REPLY_TOKENS - REPLY, head_tokens)
    elif name == "clear_tool_uses":
        f = cr.strategy_clear(window, head_tokens)
    elif name == "clear_tool_uses_fit":
        from langchain.agents.middleware.context_editing import ClearToolUsesEdit

        edit = ClearToolUsesEdit(trigger=window - REPLY)

        def f(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
            lc = cr._to_langchain(msgs)
            edit.apply(lc, count_tokens=lambda ms: head_tokens + cr._lc_tokens(ms))
            return cr._from_langchain(lc)

    else:
        raise ValueError(name)
    return lambda msgs, _h: f(msgs)


def head_chunks(reg: rampart.BlockRegistry) -> list[tuple[str, int]]:
    """The request's fixed part (tools, then the system prompt) as the registry counts it
    for the budget (``result.context.fixed_tokens``): every strategy gets the same."""
    conv = rampart.Conversation()
    conv.append({"role": "user", "content": "."})
    result = reg.compile(
        conversation=conv, context_window=10**6, reply_tokens=0, tools_in_prompt=False
    )
    fixed, system = result.context.fixed_tokens, result.total_tokens
    tools = json.dumps(result.tools("openai"), sort_keys=True)
    return [
        ("tools:" + cr._key({"t": tools}), fixed - system),
        ("system:" + cr._key({"s": result.prompt}), system),
    ]


def message_tokens(m: dict[str, Any]) -> int:
    """A message as rampart counts it for the budget: ``o200k_base``, 4 tokens a message
    of framing, a tool call 8 beside its name and arguments (an assistant message holding
    only calls is its calls)."""
    calls = m.get("tool_calls") or ()
    content = m.get("content") or ""
    n = cr.COUNT(content) + cr.ITEM_OVERHEAD if content or not calls else 0
    for c in calls:
        n += cr.COUNT(f"{c['function']['name']} {c['function']['arguments']}") + cr.CALL_OVERHEAD
    return n


def chunks(
    head: Sequence[tuple[str, int]], msgs: Sequence[dict[str, Any]], explicit: bool
) -> list[Chunk]:
    """conversation_run.chunks with this counter: the head, then one chunk per message;
    explicit breakpoints (Anthropic) after the system prompt and on the last message."""
    out = [Chunk(k, n, explicit and i == len(head) - 1) for i, (k, n) in enumerate(head)]
    for i, m in enumerate(msgs):
        out.append(Chunk(cr._key(m), message_tokens(m), explicit and i == len(msgs) - 1))
    return out


# ---- one run -----------------------------------------------------------------------------------


def run_task(
    task: dict[str, Any],
    doc: dict[str, Any],
    texts: dict[str, str],
    build: Builder,
    window: int,
    head: Sequence[tuple[str, int]],
) -> dict[str, Any]:
    head_tokens = sum(n for _, n in head)
    caches = {t: PrefixCacheModel(t) for t in TABLES}
    cost = dict.fromkeys(TABLES, 0.0)
    history: list[dict[str, Any]] = []
    prev: list[str] | None = None
    rewrites = 0
    held_all = True
    overflow_errors = 0
    final: dict[str, Any] = {}
    run_steps = steps(task, doc, texts)
    for i, new in enumerate(run_steps):
        history.extend(new)
        try:
            msgs: list[dict[str, Any]] | None = build(history, head_tokens)
        except rampart.errors.ContextOverflowError:
            msgs, held_all = None, False
            overflow_errors += 1
        last = i == len(run_steps) - 1
        if msgs is None:
            if last:
                final = {
                    "tokens": None,
                    "held": False,
                    "evidence": [False] * len(task["needles"]),
                    "rewrote": None,
                    "recall_rewrote": None,
                }
            continue
        request = head_tokens + sum(message_tokens(m) for m in msgs)
        held = request <= window - REPLY
        held_all &= held
        keys = [cr._key(m) for m in msgs]
        rewrote = prev is not None and keys[: len(prev)] != prev
        rewrites += rewrote
        prev = keys
        for t, cache in caches.items():
            usage = cache.request(chunks(head, msgs, cache.table.explicit), now=i * CALL_INTERVAL_S)
            cost[t] += usage.cost
        if last:
            dry = DRY.pop(id(build), None)
            # the body before the recall is what the compile without it sends
            before = [m for m in msgs if not str(m.get("content") or "").startswith(RECALLED)]
            final = {
                "recall_rewrote": None if dry is None else before != dry,
                "tokens": request,
                "held": held,
                "evidence": evidence(msgs, task),
                "rewrote": rewrote,
            }
    kept = all(final["evidence"])
    return {
        "task": task["id"],
        "kind": task["kind"],
        "split": task["split"],
        "label": task["label"],
        **{k: task[k] for k in ("lang", "cross_language") if k in task},
        "compiles": len(run_steps),
        "evidence_kept": kept,
        "needles_kept": final["evidence"],
        "answerable": kept and final["held"],
        "final_tokens": final["tokens"],
        "final_held": final["held"],
        "held_all": held_all,
        "overflow_errors": overflow_errors,
        "prefix_rewrites": rewrites,
        "question_rewrote": final["rewrote"],
        "recall_rewrote": final["recall_rewrote"],
        "cost": {t: round(c) for t, c in cost.items()},
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def share(rs: list[dict[str, Any]], key: str) -> float | None:
        return round(sum(bool(r[key]) for r in rs) / len(rs), 3) if rs else None

    tokens = [r["final_tokens"] for r in rows if r["final_tokens"] is not None]
    out: dict[str, Any] = {
        "tasks": len(rows),
        "evidence_kept": share(rows, "evidence_kept"),
        "answerable": share(rows, "answerable"),
    }
    for k in KINDS:
        out[f"evidence_{k}"] = share([r for r in rows if r["kind"] == k], "evidence_kept")
    for lab in ("paraphrase", "lexical"):
        out[f"evidence_{lab}"] = share([r for r in rows if r["label"] == lab], "evidence_kept")
    if any("lang" in r for r in rows):
        # sets with questions in several languages: by the question's language
        out["evidence_english"] = share([r for r in rows if r["lang"] == "en"], "evidence_kept")
        out["evidence_non_english"] = share([r for r in rows if r["lang"] != "en"], "evidence_kept")
        out["evidence_cross_language"] = share(
            [r for r in rows if r.get("cross_language")], "evidence_kept"
        )
    out["final_tokens_mean"] = round(statistics.mean(tokens)) if tokens else None
    out["final_held"] = share(rows, "final_held")
    out["held_all"] = share(rows, "held_all")
    out["prefix_rewrites_mean"] = round(statistics.mean(r["prefix_rewrites"] for r in rows), 2)
    out["question_rewrote"] = share(rows, "question_rewrote")
    with_dry = [r for r in rows if r.get("recall_rewrote") is not None]
    out["recall_rewrote"] = share(with_dry, "recall_rewrote") if with_dry else None
    for t in TABLES:
        out[f"cost_{t}_mean"] = round(statistics.mean(r["cost"][t] for r in rows))
    return out


def table_md(out: dict[str, Any]) -> str:
    pct = lambda v: "–" if v is None else f"{100 * v:.0f} %"  # noqa: E731
    lines = [
        "| window | split | strategy | evidence | old | recent | two | paraphrase | lexical "
        "| answerable | final tokens | all fit | rewrites | cost anthropic | cost openai |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in out["summary"]:
        lines.append(
            f"| {s['window']:,} | {s['split']} ({s['tasks']}) | {s['strategy']} | "
            f"{pct(s['evidence_kept'])} | {pct(s['evidence_old'])} | {pct(s['evidence_recent'])} | "
            f"{pct(s['evidence_two'])} | {pct(s['evidence_paraphrase'])} | "
            f"{pct(s['evidence_lexical'])} | {pct(s['answerable'])} | {s['final_tokens_mean']:,} | "
            f"{pct(s['held_all'])} | {s['prefix_rewrites_mean']} | "
            f"{s['cost_anthropic_mean']:,} | {s['cost_openai_mean']:,} |"
        )
    if any("evidence_non_english" in s for s in out["summary"]):
        lines += [
            "",
            "| window | split | strategy | English questions | other languages | cross-language |",
            "|---:|---|---|---:|---:|---:|",
        ]
        for s in out["summary"]:
            lines.append(
                f"| {s['window']:,} | {s['split']} ({s['tasks']}) | {s['strategy']} | "
                f"{pct(s['evidence_english'])} | {pct(s['evidence_non_english'])} | "
                f"{pct(s['evidence_cross_language'])} |"
            )
    notes = out.get("notes") or []
    return "\n".join(lines + [""] + [f"- {n}" for n in notes])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=("tune", "holdout", "all"), default="all")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--windows", default=",".join(str(w) for w in WINDOWS))
    ap.add_argument("--tasks", default=None, help="comma list of task ids (default: all)")
    ap.add_argument(
        "--data",
        type=Path,
        default=NEEDLES,
        help="the task set (default tests/data/needles/tasks.json; the second set is "
        "tests/data/needles2/tasks.json)",
    )
    ap.add_argument("--no-embed", action="store_true", help="registry without MiniLM (BM25 only)")
    ap.add_argument(
        "--no-memo",
        action="store_true",
        help="embed every task's passages anew (same numbers, many times slower)",
    )
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--md", type=Path, default=None)
    args = ap.parse_args(argv)
    doc = load(args.data)
    texts = materialise(doc)
    tasks = [t for t in doc["tasks"] if args.split in ("all", t["split"])]
    if args.tasks:
        wanted = set(args.tasks.split(","))
        tasks = [t for t in tasks if t["id"] in wanted]
    names = [s for s in args.strategies.split(",") if s]
    for s in names:
        if s not in STRATEGIES:
            ap.error(f"unknown strategy {s!r} (known: {', '.join(STRATEGIES)})")
    embedder = None if args.no_embed else rampart.OnnxEmbedder(threads=1)
    if embedder is not None and not args.no_memo:
        embedder = MemoEmbedder(embedder)
    reg = registry(embedder, doc)
    head = head_chunks(reg)
    head_tokens = sum(n for _, n in head)
    notes: list[str] = []
    rows: list[dict[str, Any]] = []
    summary: list[dict[str, Any]] = []
    for window in (int(w) for w in args.windows.split(",")):
        for name in names:
            t0 = time.perf_counter()
            these = []
            for task in tasks:
                if name in ("new_default", "age_only"):
                    pol, note = policy(name)
                    if note and note not in notes:
                        notes.append(note)
                    build = rampart_builder(reg, pol, window)
                else:
                    build = baseline_builder(name, window, head_tokens)
                row = run_task(task, doc, texts, build, window, head)
                row.update(strategy=name, window=window)
                these.append(row)
            rows.extend(these)
            took = time.perf_counter() - t0
            splits = ("tune", "holdout") if args.split == "all" else (args.split,)
            for split in (*splits, "all") if args.split == "all" else splits:
                rs = [r for r in these if split in ("all", r["split"])]
                if rs:
                    s = {"window": window, "strategy": name, "split": split, **summarise(rs)}
                    summary.append(s)
            print(
                f"window {window}, {name}: {len(these)} tasks in {took:.1f} s; "
                + json.dumps(summarise(these)),
                file=sys.stderr,
                flush=True,
            )
    out = {
        "data": str(args.data.resolve().relative_to(ROOT)),
        "split": args.split,
        "reply_tokens": REPLY,
        "head_tokens": head_tokens,
        "embedder": None if embedder is None else "all-MiniLM-L6-v2 (OnnxEmbedder, 1 thread)",
        "notes": notes,
        "summary": summary,
        "rows": rows,
    }
    md = table_md(out)
    print(md)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    if args.md:
        args.md.write_text(md + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
