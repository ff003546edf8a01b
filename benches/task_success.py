"""Task success: does the agent still answer right when its context is managed?

Issue 37. Each task of ``tests/data/task_success/tasks.json`` is an agent transcript on
real tool output: a user's request, then 6-8 tool calls whose results are what
``mcp-server-filesystem``'s ``read_text_file`` returns for files of this repository
and what ``mcp-server-git`` returned for its commits (0.5-3 KB each), then a question
with a checkable answer, written by hand (tests/data/task_success/README.md). Three
families: ``commit`` (a detail of one commit: the time on its Date line, or a file it
changed), ``file`` (a fact in an earlier file read, asked as a paraphrase), ``two``
(two facts from two earlier results, both needed).

Conditions (``--conditions``), each run, none inferred from another:

- ``full``: every message as it came (no window; the model's context holds it);
- ``default``: ``ContextPolicy()``, rampart's defaults, compiled to ``--window``;
- ``relevance_off``: ``ContextPolicy(relevance=False)``, the age-only policy;
- ``trim_messages``: LangChain's ``trim_messages`` (langchain-core's own function;
  its default ``strategy="last"``, with ``start_on=("human", "ai")`` and
  ``end_on=("human", "tool")`` so the request stays a valid chat) to the window less
  the reply;
- ``clear_tool_uses_edit``: LangChain's ``ClearToolUsesEdit`` (its defaults: keep 3,
  ``clear_at_least`` 0, placeholder ``[cleared]``) with its trigger at the window less
  the reply, applied to the full history before each call as
  ``ContextEditingMiddleware`` does;
- ``clear_tool_uses``: Anthropic's ``clear_tool_uses_20250919`` applied client-side
  (:func:`anthropic_clear_tool_uses`, an implementation of its documented semantics,
  not Anthropic's code): when the request's input tokens exceed ``trigger``, the
  oldest tool results are replaced by a placeholder, all but the ``keep`` (3) most
  recent tool uses; tool inputs stay (``clear_tool_inputs`` false); with
  ``clear_at_least`` set, nothing is cleared unless that many tokens would be. Its
  default trigger (100 000 input tokens) never fires in these windows, so the trigger
  is at the window less the reply, as for ``ClearToolUsesEdit``;
- ``default_recall_tool``: the defaults, with rampart's ``recall`` tool offered to
  the model beside the others and answered by
  :func:`rampart.conversation.answer_recall` (does the model use it when a stub names
  it?).

The baselines count their budget exactly, in the model's tokens (the chat template
rendered and tokenised by llama.cpp, system prompt and tool schemas included): the
strongest form of each. rampart counts with ``o200k_base`` and learns the model's
ratio from usage, as an agent loop does (experiments/conversation_clearing.py's
replay: each earlier step's request is compiled and its count observed; the
template's fixed tokens around the system prompt and tools come off the window).

The agent compiles before every model call of the transcript (after the request and
after each result), then the question arrives; the model's replies drive up to
``--steps`` calls (a tool call is answered from the recorded outputs, so a re-read of
a file or a re-``git_show`` gets what the server returned; ``recall`` from the
conversation's log).

Scores, per row: the outcome (``correct``; ``correct_after_tool`` after a tool call;
``wrong``; ``unknown``; ``no_answer``; ``overflow``), every request's tokens (the
model's own count), *tokens sent* (the sum over the run: the transcript's steps and
the question's calls), the run's cost under :mod:`rampart.pricing`'s ``anthropic`` and
``openai`` tables (every request replayed through
:class:`rampart.caching.PrefixCacheModel`, 15 s apart, counted as rampart counts:
``o200k_base`` plus framing; token-equivalents, an uncached input token = 1), *prefix
rewrites* (requests whose messages do not extend the previous request's), whether
each needle line was in the question's request, removed, brought back (tail recall,
the ``recall`` tool or a re-read), and in the last request the model answered from.
A failure's cause (summary): ``wrong_in_full_too`` (``full`` failed the same task and
trial), ``cleared_not_recalled``, ``recalled_answered_wrong``, ``in_view_answered_wrong``.

Rows are appended to ``--out`` (JSONL) as they finish, keyed by (task, condition,
trial, temperature); a rerun skips the keys already there. ``--report`` prints the
tables of a JSONL without running anything (each condition's tokens as a share of
full context's: the whole run, the requests full context overflows, the question's;
with trials at a temperature above 0, pass^k side by side on the tasks every
condition has finished);
benches/task_success_plot.py draws the docs' plot from it.

    make task-success                       # the holdout, every condition
    python benches/task_success.py --split holdout --conditions full,default \\
        --trials 3 --temperature 0.7 --out runs/passk.jsonl     # pass^3
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from itertools import zip_longest
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "tests" / "data" / "task_success" / "tasks.json"
sys.path.insert(0, str(ROOT / "benches"))
sys.path.insert(0, str(ROOT / "experiments"))

import conversation_run as cr  # noqa: E402
import needle_bench as nb  # noqa: E402
import rampart  # noqa: E402
from rampart.caching import PrefixCacheModel  # noqa: E402
from rampart.conversation import answer_recall, recall_tool  # noqa: E402
from rampart.errors import ContextOverflowError, InvalidArgumentError, ParseError  # noqa: E402

SYSTEM = (
    "You are a coding agent working in the repository at /repo. You see it only "
    "through the tools. Answer the user's question from what the tools returned, with "
    "just the value asked for, in one short line."
)
FS_TOOLS = ("read_text_file",)
GIT_TOOLS = ("git_show", "git_log")
CONDITIONS = (
    "full",
    "default",
    "relevance_off",
    "trim_messages",
    "clear_tool_uses_edit",
    "clear_tool_uses",
    "default_recall_tool",
)
RAMPART_CONDITIONS = ("default", "relevance_off", "default_recall_tool")
FAMILIES = ("commit", "file", "two")
TABLES = ("anthropic", "openai")
CALL_INTERVAL_S = 15.0
SUCCESS = ("correct", "correct_after_tool")
PLACEHOLDER = "[tool result cleared to save context]"
_UNKNOWN = re.compile(
    r"(don't|do not|cannot|can't|unable|not (?:available|present|visible|shown|provided)"
    r"|no longer|cleared|removed|need to call|call the tool)",
    re.IGNORECASE,
)


# ---- data ------------------------------------------------------------------------------------


def load(path: Path = TASKS) -> dict[str, Any]:
    """The task set at ``path``, its shape checked (:func:`check_tasks`): another
    writer's set runs on the same recorded sources, and a mistake in it is named
    here, by file and task, not found as a KeyError hours into a run."""
    try:
        with path.open("rb") as f:
            raw = f.read(_MAX_SET_BYTES + 1)
        if len(raw) > _MAX_SET_BYTES:
            raise ValueError(f"larger than {_MAX_SET_BYTES} bytes")
        doc = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        # UnicodeDecodeError and JSONDecodeError are ValueErrors; RecursionError is
        # a set nested past the parser's depth.
        raise ParseError(f"cannot read the task set: {e}", path=path) from None
    check_tasks(doc, path)
    return doc


# The shipped set is 136 KB; a set a thousand times larger is a mistake, not a
# benchmark, and is refused before it is parsed.
_MAX_SET_BYTES = 128 * 1024 * 1024
_TASK_FIELDS = {"id": str, "family": str, "split": str, "task": str, "question": str}
_POSITIONS = ("old", "recent", "two")
_HEX = re.compile(r"[0-9a-f]+")


def _inside_repo(path: Any) -> bool:
    # A source is read from this repository (the working tree or its history): an
    # absolute path or a ".." would read whatever the set's writer pointed at.
    return (
        isinstance(path, str)
        and bool(path)
        and not path.startswith(("/", "\\"))
        and ".." not in Path(path).parts
    )


def _source_problem(src: Any) -> str | None:
    """What is wrong with one recorded source (tests/data/task_success/README.md's
    ``file`` and ``mcp_output`` kinds), or None. Checked before needle_bench's
    ``materialise`` reads it: a blob id goes to ``git cat-file`` as an argument, so it
    must be a blob id, not an option."""
    if not isinstance(src, dict) or src.get("kind") not in ("file", "mcp_output"):
        return "must be an object whose 'kind' is 'file' or 'mcp_output'"
    args = src.get("arguments")
    if not isinstance(args, dict) or not isinstance(src.get("tool"), str) or not src["tool"]:
        return "'tool' must be a non-empty string and 'arguments' an object"
    if src["kind"] == "file":
        if not _inside_repo(src.get("path")):
            return "'path' must be a relative path inside the repository"
        blob = src.get("blob")
        if not isinstance(blob, str) or len(blob) not in (40, 64) or not _HEX.fullmatch(blob):
            return "'blob' must be a git blob id (40 or 64 lowercase hex digits)"
        head = args.get("head")
        if head is not None and (not isinstance(head, int) or isinstance(head, bool) or head < 1):
            return f"'arguments.head' must be a positive line count, got {head!r}"
        return None
    if not _inside_repo(src.get("file")):
        return "'file' must be a relative path inside the repository"
    digest = src.get("sha256")
    if not isinstance(digest, str) or len(digest) != 64 or not _HEX.fullmatch(digest):
        return "'sha256' must be 64 lowercase hex digits"
    return None


def check_tasks(doc: Any, path: Path | str = "<tasks>") -> None:
    """``ParseError`` (naming ``path`` and the task) unless ``doc`` is a task set of
    tests/data/task_success/README.md's shape: ``sources`` a mapping, ``tasks`` a
    list of tasks with unique ids, a known family and split, a trajectory of known
    sources, needles whose ``source`` is the trajectory's result at ``step``, and
    answer groups of spellings. Whether the needle lines are in their sources is
    :func:`texts_of` (it needs the texts)."""

    def bad(where: str, what: str) -> ParseError:
        return ParseError(f"{where}: {what}", path=path)

    if not isinstance(doc, dict) or not isinstance(doc.get("sources"), dict):
        raise bad("the set", "must be an object with 'sources' (an object) and 'tasks'")
    for sid, src in doc["sources"].items():
        problem = _source_problem(src)
        if problem:
            raise bad(f"source {sid!r}", problem)
    tasks = doc.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise bad("the set", "'tasks' must be a non-empty list")
    seen: set[str] = set()
    for n, t in enumerate(tasks):
        where = f"task {n}" + (f" ({t['id']!r})" if isinstance(t, dict) and "id" in t else "")
        if not isinstance(t, dict):
            raise bad(where, "must be an object")
        for field, kind in _TASK_FIELDS.items():
            if not isinstance(t.get(field), kind) or not t[field]:
                raise bad(where, f"{field!r} must be a non-empty string")
        if t["id"] in seen:
            raise bad(where, "the id is used twice")
        seen.add(t["id"])
        if t["family"] not in FAMILIES:
            raise bad(where, f"family must be one of {FAMILIES}, got {t['family']!r}")
        if t["split"] not in ("tune", "holdout"):
            raise bad(where, f"split must be 'tune' or 'holdout', got {t['split']!r}")
        if t.get("position") not in _POSITIONS:
            raise bad(where, f"position must be one of {_POSITIONS}, got {t.get('position')!r}")
        traj = t.get("trajectory")
        if not isinstance(traj, list) or not traj or not all(isinstance(x, str) for x in traj):
            raise bad(where, "'trajectory' must be a non-empty list of source ids")
        unknown = [x for x in traj if x not in doc["sources"]]
        if unknown:
            raise bad(where, f"the trajectory names sources the set does not hold: {unknown[:3]}")
        needles = t.get("needles")
        if not isinstance(needles, list) or not needles:
            raise bad(where, "'needles' must be a non-empty list")
        for nd in needles:
            step = nd.get("step") if isinstance(nd, dict) else None
            if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < len(traj):
                raise bad(where, f"a needle's 'step' must index the trajectory, got {step!r}")
            if nd.get("source") != traj[step]:
                raise bad(where, f"needle {step}: 'source' is not the trajectory's result there")
            lines = nd.get("lines")
            if (
                not isinstance(lines, list)
                or not lines
                or not all(isinstance(x, str) and x.strip() for x in lines)
            ):
                raise bad(where, f"needle {step}: 'lines' must be a non-empty list of lines")
        answers = t.get("answers")
        if (
            not isinstance(answers, list)
            or not answers
            or not all(
                isinstance(g, list) and g and all(isinstance(a, str) and a for a in g)
                for g in answers
            )
        ):
            raise bad(where, "'answers' must be a non-empty list of groups of spellings")


# The question prompt last evaluated, and llama.cpp's state right after it: one slot,
# (llama object, prompt tokens, state); a state is the KV cache, ~30 KB a token here.
_question_state: list[Any] = [None, None, None]


def share_question_prompt(
    model: Any, sent: list[dict[str, Any]], tools: list[Any], seed: int
) -> None:
    """The question's prompt evaluated once for the k trials of a task and condition
    (the prompt is ~90 % of a row's time): from an empty cache, whole, then llama.cpp's
    state saved; a later trial restores that state.

    A row stays a function of its key (task, condition, seed). Seed 0 runs on the
    evaluation itself, as every row did before this was shared (its answers are the
    recorded ones; T=0 rows are unchanged). A later seed always runs on a restored
    state, the one left by seed 0 or, in a resumed run, one saved and restored here:
    a restored state samples other answers from long prompts than the evaluation it
    was saved from (3 of 12 recorded rows' answers, none of their outcomes), so the
    restore is not skipped when it could be. The call evaluates the prompt's last
    token again on its own (llama-cpp-python always does) and samples with the seed.
    Were the prompt tokenised otherwise than ``create_chat_completion`` does,
    llama.cpp would evaluate from where the two differ: slower, the same rows."""
    llm = model.llm
    toks = model.prompt_token_ids(sent, tools)
    if _question_state[0] is llm and _question_state[1] == toks:
        llm.load_state(_question_state[2])
        return
    _question_state[:] = [None, None, None]  # a big state is not kept past its prompt
    llm.reset()
    llm.eval(toks)
    _question_state[:] = [llm, toks, llm.save_state()]
    if seed:
        llm.load_state(_question_state[2])


def texts_of(doc: dict[str, Any], path: Path | str) -> dict[str, str]:
    """Source id -> its text (needle_bench's ``materialise``), a source that cannot
    be read and a needle line its source does not hold named as a ``ParseError``
    (the bench would report such a needle absent from every request, whatever the
    policy did)."""
    try:
        texts = nb.materialise(doc)
    except (KeyError, TypeError, AttributeError, ValueError, OSError, EOFError, RuntimeError) as e:
        # A recorded-outputs file of another shape, a truncated gzip, a blob that
        # does not decode: the set's mistake, named, not a traceback.
        raise ParseError(f"a source cannot be read as recorded: {e!r}", path=path) from None
    for t in doc["tasks"]:
        for nd in t["needles"]:
            text = texts[nd["source"]]
            missing = [x for x in nd["lines"] if x.strip() not in text]
            if missing:
                raise ParseError(
                    f"task {t['id']!r}: the needle line {missing[0][:80]!r} is not in "
                    f"{nd['source']}",
                    path=path,
                )
    return texts


def mentions(text: str, alternative: str) -> bool:
    """``alternative`` in ``text`` as a whole token, case-insensitively (the data's rule,
    tests/data/task_success/make_tasks.py: "72" is not in "1722", "480" is in
    "480x480")."""
    a = alternative
    left = r"(?<![0-9.])" if a[:1].isdigit() else r"(?<![0-9A-Za-z_])"
    right = r"(?![0-9]|\.[0-9])" if a[-1:].isdigit() else r"(?![0-9A-Za-z_])"
    return re.search(left + re.escape(a) + right, text, re.IGNORECASE) is not None


def judge(answer: str, groups: Sequence[Sequence[str]], called: bool) -> str:
    """``correct`` when every answer group has a spelling in the reply."""
    if groups and all(any(mentions(answer, a) for a in g) for g in groups):
        return "correct_after_tool" if called else "correct"
    if _UNKNOWN.search(answer) and not any(mentions(answer, a) for g in groups for a in g):
        return "unknown"
    return "wrong"


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of ``k`` successes in ``n`` (95 % by default)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, mid - half), min(1.0, mid + half))


def transcript(task: dict[str, Any], doc: dict[str, Any], texts: dict[str, str]) -> list[Any]:
    """[request], then one [call, result] per step (OpenAI Chat shape)."""
    return nb.steps(task, doc, texts)[:-1]


class Replayer:
    """A tool call answered from what was recorded: ``read_text_file`` of a file the
    dataset pins (head/tail as the server applies them), ``git_show`` of a recorded
    revision (a unique prefix of 7+ characters), ``git_log`` of a recorded count;
    anything else an error result saying so."""

    def __init__(self, doc: dict[str, Any], texts: dict[str, str]) -> None:
        outputs = json.loads((ROOT / "tests/data/mcp_tool_outputs.json").read_text())["outputs"]
        self.shows = {
            o["arguments"]["revision"]: o["text"] for o in outputs if o["tool"] == "git_show"
        }
        self.logs = {
            o["arguments"]["max_count"]: o["text"] for o in outputs if o["tool"] == "git_log"
        }
        self.files: dict[str, str] = {}
        for s in doc["sources"].values():
            if s["kind"] == "file":
                whole = nb._file_bytes(s["path"], s["blob"]).decode("utf-8")
                self.files[s["path"]] = whole
        del texts

    def __call__(self, name: str, arguments: str) -> str:
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return f"error: the arguments are not JSON: {arguments[:200]}"
        if not isinstance(args, dict):
            return "error: the arguments must be an object"
        if name == "read_text_file":
            path = str(args.get("path", "")).removeprefix("/repo/").lstrip("/")
            if path not in self.files:
                return f"error: no recorded read of {path!r}"
            lines = self.files[path].split("\n")
            head, tail = args.get("head"), args.get("tail")
            if isinstance(head, int) and head > 0:
                lines = lines[:head]
            elif isinstance(tail, int) and tail > 0:
                lines = lines[-tail:]
            return "\n".join(lines)
        if name == "git_show":
            rev = str(args.get("revision", ""))
            hits = [r for r in self.shows if len(rev) >= 7 and r.startswith(rev)]
            if len(hits) == 1:
                return str(self.shows[hits[0]])
            return f"error: unknown revision {rev!r} (no recorded git_show output for it)"
        if name == "git_log" and args.get("max_count") in self.logs:
            return str(self.logs[args["max_count"]])
        return f"error: no recorded output of {name} for these arguments: {arguments[:200]}"


def registry(embedder: Any = None) -> tuple[rampart.BlockRegistry, list[dict[str, Any]]]:
    reg = rampart.BlockRegistry(
        embedding_model=embedder, tokeniser="o200k_base", default_max_tokens=None
    )
    reg.write_block(SYSTEM, "agent")
    fs = json.loads((cr.DATA / "mcp_filesystem_tools.json").read_text())["result"]["tools"]
    git = json.loads((cr.DATA / "mcp_git_tools.json").read_text())["tools"]
    tools = [t for t in fs if t["name"] in FS_TOOLS] + [t for t in git if t["name"] in GIT_TOOLS]
    reg.load_tools(tools, gated=False)
    return reg, tools


# ---- the baselines ------------------------------------------------------------------------------

Counter_ = Callable[[list[dict[str, Any]]], int]


def anthropic_clear_tool_uses(
    msgs: list[dict[str, Any]],
    count: Counter_,
    *,
    trigger: int = 100_000,
    keep: int = 3,
    clear_at_least: int = 0,
    exclude_tools: Sequence[str] = (),
    clear_tool_inputs: bool = False,
) -> list[dict[str, Any]]:
    """Anthropic's ``clear_tool_uses_20250919`` as its documentation describes it,
    applied client-side to an OpenAI Chat history (a new list; ``msgs`` is left as
    is). When the request's input tokens (``count``) exceed ``trigger``, the oldest
    tool results are cleared first, in order, keeping the ``keep`` most recent tool
    uses; a cleared result's content becomes a placeholder telling the model it was
    removed (the wording is not documented; ours is :data:`PLACEHOLDER`); tools named
    in ``exclude_tools`` are never cleared; with ``clear_tool_inputs`` the call's
    arguments are cleared too. With ``clear_at_least``, the edit applies only when it
    clears at least that many tokens. Each request is edited anew from the full
    history (the server edits; the client keeps everything)."""
    if count(msgs) <= trigger:
        return msgs
    uses: list[tuple[int, int, str]] = []  # (assistant index, result index, tool name)
    where = {m["tool_call_id"]: i for i, m in enumerate(msgs) if m["role"] == "tool"}
    for i, m in enumerate(msgs):
        for c in m.get("tool_calls") or ():
            if c["id"] in where:
                uses.append((i, where[c["id"]], c["function"]["name"]))
    candidates = uses[: max(0, len(uses) - keep)]
    out = copy.deepcopy(msgs)
    for ai, ri, name in candidates:
        if name in exclude_tools or out[ri]["content"] == PLACEHOLDER:
            continue
        out[ri]["content"] = PLACEHOLDER
        if clear_tool_inputs:
            for c in out[ai].get("tool_calls") or ():
                if c["function"]["name"] == name:
                    c["function"]["arguments"] = "{}"
    if clear_at_least and count(msgs) - count(out) < clear_at_least:
        return msgs
    return out


def baseline(
    condition: str, limit: int, count: Counter_
) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """A baseline's request builder: history -> messages sent, counting with ``count``
    (the whole request in the model's tokens) against ``limit`` (window less reply)."""
    if condition == "full":
        return lambda msgs: list(msgs)
    if condition == "clear_tool_uses":
        return lambda msgs: anthropic_clear_tool_uses(msgs, count, trigger=limit)
    if condition == "trim_messages":
        from langchain_core.messages import trim_messages

        def trim(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
            kept = trim_messages(
                cr._to_langchain(msgs),
                max_tokens=limit,
                token_counter=lambda ms: count(cr._from_langchain(ms)),
                strategy="last",
                start_on=("human", "ai"),
                end_on=("human", "tool"),
            )
            return cr._from_langchain(kept)

        return trim
    if condition == "clear_tool_uses_edit":
        from langchain.agents.middleware.context_editing import ClearToolUsesEdit

        edit = ClearToolUsesEdit(trigger=limit)

        def clear(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
            lc = cr._to_langchain(msgs)
            edit.apply(lc, count_tokens=lambda ms: count(cr._from_langchain(ms)))
            return cr._from_langchain(lc)

        return clear
    raise InvalidArgumentError(f"not a baseline condition: {condition!r}")


# ---- one task under one condition ------------------------------------------------------------


def _contents(msgs: Sequence[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in msgs)


def _answers_in(msgs: Sequence[dict[str, Any]], task: dict[str, Any]) -> list[bool]:
    """Each answer group: a spelling of it in the request (a needle line cut in
    half, or the answer in another line — a file name in the commit's subject —
    still lets the model answer)."""
    text = _contents(msgs)
    return [any(mentions(text, a) for a in g) for g in task["answers"]]


def _needles_in(msgs: Sequence[dict[str, Any]], task: dict[str, Any]) -> list[bool]:
    text = _contents(msgs)
    return [all(line.strip() in text for line in n["lines"]) for n in task["needles"]]


def run_task(
    model: Any,
    task: dict[str, Any],
    doc: dict[str, Any],
    texts: dict[str, str],
    condition: str,
    *,
    window: int,
    reply: int,
    steps: int,
    seed: int = 0,
    temperature: float = 0.0,
    embedder: Any = None,
    dry: bool = False,
) -> dict[str, Any]:
    """One task under one condition: the transcript replayed (one request per step,
    as the agent would have sent it), the question, then up to ``steps`` model calls.
    ``dry``: stop at the question's request (what reaches the model, no answer)."""
    import conversation_clearing as cc  # experiments/: the model wrapper and text form

    if condition not in CONDITIONS:
        raise InvalidArgumentError(f"condition must be one of {CONDITIONS}, got {condition!r}")
    t0 = time.perf_counter()
    reg, tools_def = registry(embedder if condition in RAMPART_CONDITIONS else None)
    replay = Replayer(doc, texts)
    policy = {
        "default": rampart.ContextPolicy(),
        "default_recall_tool": rampart.ContextPolicy(),
        "relevance_off": rampart.ContextPolicy(relevance=False),
    }.get(condition)
    offer_recall = condition == "default_recall_tool"
    conv = rampart.Conversation()
    history = transcript(task, doc, texts)
    head = nb.head_chunks(reg)
    caches = {t: PrefixCacheModel(t) for t in TABLES}
    cost = dict.fromkeys(TABLES, 0.0)
    conv.append(history[0])
    first = reg.compile(conversation=conv, tools_in_prompt=False)
    system_prompt = first.prompt
    wire_tools = list(first.tools("openai"))
    del tools_def
    if offer_recall:
        wire_tools.append(recall_tool("openai_chat"))

    def render(msgs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        if model.native:
            return [{"role": "system", "content": system_prompt}, *msgs], wire_tools
        system = f"{system_prompt} {cc.TEXT_CALLS}\n\nTools:\n{json.dumps(wire_tools)}"
        return [{"role": "system", "content": system}, *cc.text_form(msgs)], []

    def count(msgs: list[dict[str, Any]]) -> int:
        sent, tools = render(msgs)
        return int(model.prompt_tokens(sent, tools))

    # The template's fixed tokens around the system prompt and the tool schemas come
    # off rampart's window (a sum, not a ratio: see experiments/conversation_clearing.py).
    preamble = max(0, count([]) - first.context.fixed_tokens)
    build = None if policy is not None else baseline(condition, window - reply, count)
    last_res: Any = None

    def request(msgs_all: list[dict[str, Any]]) -> list[dict[str, Any]]:
        nonlocal last_res
        if build is not None:
            return build(msgs_all)
        for _ in range(5):
            res = reg.compile(
                conversation=conv,
                context_window=window - preamble,
                reply_tokens=reply,
                policy=policy,
                tools_in_prompt=False,
            )
            msgs = [dict(m) for m in res.messages("openai_chat")]
            n = count(msgs)
            last_res = res
            if n + reply <= window:
                break
            # A local model's count is free: a request over the window is observed as
            # usage and compiled again (the learned ratio trails a change of text mix).
            conv.observe_usage({"prompt_tokens": n - preamble})
        return msgs

    row: dict[str, Any] = {
        "task": task["id"],
        "family": task["family"],
        "position": task["position"],
        "split": task["split"],
        "condition": condition,
        "trial": seed,
        "temperature": temperature,
        "outcome": "no_answer",
        "answer": "",
        "expected": task["answers"],
        "calls_made": [],
        "request_tokens": [],
        "question_tokens": None,
        "tokens_sent": 0,
        "step_tokens": [],  # every request of the run, transcript steps first
        "fits_window": True,
        "prefix_rewrites": 0,
        "needles_in_question_request": [],
        "answers_in_question_request": [],
        "needles_removed": 0,
        "needles_tail_recalled": 0,
        "needles_in_final_request": [],
        "recall_tool_calls": 0,
        "rereads": 0,
    }
    prev: list[str] | None = None
    sent_count = 0

    def send(msgs: list[dict[str, Any]]) -> int:
        nonlocal prev, sent_count
        n = count(msgs)
        row["step_tokens"].append(n)
        row["tokens_sent"] += n
        row["fits_window"] = row["fits_window"] and n + reply <= window
        keys = [cr._key(m) for m in msgs]
        if prev is not None and keys[: len(prev)] != prev:
            row["prefix_rewrites"] += 1
        prev = keys
        for t, cache in caches.items():
            usage = cache.request(
                nb.chunks(head, msgs, cache.table.explicit), now=sent_count * CALL_INTERVAL_S
            )
            cost[t] += usage.cost
        sent_count += 1
        return n

    msgs_all: list[dict[str, Any]] = []
    for k, part in enumerate(history):  # the transcript's requests, one per model call
        msgs_all.extend(part)
        if k:  # the request is in the conversation already
            conv.append(part)
        try:
            msgs = request(msgs_all)
        except ContextOverflowError:
            row["outcome"] = "overflow"
            break
        n = send(msgs)
        if policy is not None:
            conv.observe_usage({"prompt_tokens": n - preamble})
    question = {"role": "user", "content": task["question"]}
    msgs_all.append(question)
    conv.append(question)
    needle_calls = {f"call_{n['step']:03d}" for n in task["needles"]}
    names = [t["function"]["name"] for t in wire_tools]
    for step in range(steps if row["outcome"] != "overflow" else 0):
        try:
            msgs = request(msgs_all)
        except ContextOverflowError:
            row["outcome"] = "overflow"
            break
        n = send(msgs)
        row["request_tokens"].append(n)
        row["needles_in_final_request"] = _needles_in(msgs, task)
        if step == 0:
            row["question_tokens"] = n
            row["needles_in_question_request"] = row["needles_in_final_request"]
            row["answers_in_question_request"] = _answers_in(msgs, task)
            if policy is not None and last_res is not None:
                report = last_res.message_report
                ids = {
                    it.id
                    for it in conv.items
                    if it.kind == "tool_result" and it.call_id in needle_calls
                }
                row["needles_removed"] = sum(r.id in ids and r.action != "kept" for r in report)
                shown = {r.id for r in report if r.action == "recalled"}
                back = {
                    i
                    for t in conv.transformations
                    if t.active and t.kind == "recall" and t.summary_id in shown
                    for i in t.ids
                }
                row["needles_tail_recalled"] = len(back & ids)
            else:
                kept = {m.get("tool_call_id") for m in msgs if m.get("content") != PLACEHOLDER}
                placeholders = {"[cleared]", PLACEHOLDER}
                row["needles_removed"] = sum(
                    c not in kept
                    or any(
                        m.get("tool_call_id") == c and m.get("content") in placeholders
                        for m in msgs
                    )
                    for c in needle_calls
                )
        if dry:
            row["outcome"] = "dry"
            break
        sent, tools = render(msgs)
        if n + reply > model.llm.n_ctx():
            row["outcome"] = "overflow"
            break
        if step == 0:
            share_question_prompt(model, sent, tools, seed)
        r = model.backend.chat(
            sent, temperature=temperature, seed=seed, max_tokens=reply, tools=tools or None
        )
        calls = list(r.calls)
        if not calls and not model.native:
            from rampart.llm import parse_text_tool_calls

            calls = list(parse_text_tool_calls(r.text, names)[1])
        row["answer"] = r.text.strip()
        if policy is not None:
            conv.observe_usage({"prompt_tokens": (r.prompt_tokens or n) - preamble})
        if not calls:
            row["outcome"] = judge(row["answer"], task["answers"], bool(row["calls_made"]))
            break
        tool_calls, results = [], []
        for j, c in enumerate(calls):
            cid = f"step{step}_{j}"
            tool_calls.append(
                {
                    "id": cid,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
            )
            if c.name == "recall" and offer_recall:
                row["recall_tool_calls"] += 1
                out = answer_recall(conv, c.arguments, reg.embedding_model)
            else:
                row["rereads"] += 1
                out = replay(c.name, c.arguments)
            results.append({"role": "tool", "tool_call_id": cid, "content": out})
            row["calls_made"].append(f"{c.name}({c.arguments})"[:300])
        turn = [
            {"role": "assistant", "content": r.text or None, "tool_calls": tool_calls},
            *results,
        ]
        msgs_all.extend(turn)
        conv.append(turn)
    row["cost"] = {t: round(c) for t, c in cost.items()}
    row["requests"] = sent_count
    row["wall_s"] = round(time.perf_counter() - t0, 1)
    return row


# ---- summaries -------------------------------------------------------------------------------


def cause(row: dict[str, Any], full: dict[str, Any] | None) -> str | None:
    """Where a failure came from (None for a success)."""
    if row["outcome"] in SUCCESS:
        return None
    if full is not None and full["outcome"] not in SUCCESS and row["condition"] != "full":
        return "wrong_in_full_too"
    if row["condition"] == "full":
        return "wrong_in_full"
    if not all(row["needles_in_final_request"] or [False]):
        return "cleared_not_recalled"
    if not all(row["needles_in_question_request"] or [False]) or row["needles_tail_recalled"]:
        return "recalled_answered_wrong"
    return "in_view_answered_wrong"


def summarise(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per split, family (and ``all``) and condition: tasks, successes with a Wilson
    95 % interval (with several trials of a task: pass^k, every trial right), mean
    tokens sent and question tokens, cost, rewrites, failure causes."""
    full = {(r["task"], r["trial"], r["temperature"]): r for r in rows if r["condition"] == "full"}
    groups: dict[tuple[str, str, str, float], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        for fam in (r["family"], "all"):
            groups[(r["split"], fam, r["condition"], r["temperature"])].append(r)
    out = []
    for (split, fam, cond, temp), sel in sorted(
        groups.items(),
        key=lambda kv: (
            kv[0][0],
            kv[0][3],
            (*FAMILIES, "all").index(kv[0][1]),
            CONDITIONS.index(kv[0][2]),
        ),
    ):
        by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in sel:
            by_task[r["task"]].append(r)
        # A run stopped between a task's trials: pass^k counts the tasks with every
        # trial run (fewer trials would make pass^k easier for that task alone).
        k = max(len(v) for v in by_task.values())
        by_task = {t: v for t, v in by_task.items() if len(v) == k}
        sel = [r for v in by_task.values() for r in v]
        ok = sum(all(r["outcome"] in SUCCESS for r in v) for v in by_task.values())
        n = len(by_task)
        lo, hi = wilson(ok, n)
        causes = Counter(
            c for r in sel if (c := cause(r, full.get((r["task"], r["trial"], r["temperature"]))))
        )
        out.append(
            {
                "split": split,
                "family": fam,
                "condition": cond,
                "temperature": temp,
                "tasks": n,
                "trials": k,
                "success": ok,
                "rate": round(ok / n, 3) if n else None,
                "wilson95": [round(lo, 3), round(hi, 3)],
                "tokens_sent_mean": round(sum(r["tokens_sent"] for r in sel) / len(sel)),
                "question_tokens_mean": round(
                    sum(r["question_tokens"] or 0 for r in sel) / len(sel)
                ),
                "cost_anthropic_mean": round(sum(r["cost"]["anthropic"] for r in sel) / len(sel)),
                "cost_openai_mean": round(sum(r["cost"]["openai"] for r in sel) / len(sel)),
                "prefix_rewrites_mean": round(sum(r["prefix_rewrites"] for r in sel) / len(sel), 2),
                "all_fit_window": all(r["fits_window"] for r in sel),
                "recall_tool_used": sum(r["recall_tool_calls"] > 0 for r in sel),
                "causes": dict(causes),
            }
        )
    return out


def table_md(summary: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| split | family | condition | T | success | 95 % CI | tokens sent | question request "
        "| cost anthropic | cost openai | rewrites | fits | failures: cleared, not recalled "
        "/ recalled, wrong / wrong in full too / other |",
        "|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for s in summary:
        c = s["causes"]
        other = sum(c.values()) - sum(
            c.get(x, 0)
            for x in ("cleared_not_recalled", "recalled_answered_wrong", "wrong_in_full_too")
        )
        k = f" (pass^{s['trials']})" if s["trials"] > 1 else ""
        lines.append(
            f"| {s['split']} | {s['family']} | `{s['condition']}` | {s['temperature']} | "
            f"{s['success']}/{s['tasks']}{k} | {100 * s['wilson95'][0]:.0f}–"
            f"{100 * s['wilson95'][1]:.0f} % | {s['tokens_sent_mean']:,} | "
            f"{s['question_tokens_mean']:,} | {s['cost_anthropic_mean']:,} | "
            f"{s['cost_openai_mean']:,} | {s['prefix_rewrites_mean']} | "
            f"{'yes' if s['all_fit_window'] else 'no'} | {c.get('cleared_not_recalled', 0)} / "
            f"{c.get('recalled_answered_wrong', 0)} / {c.get('wrong_in_full_too', 0)} / {other} |"
        )
    return "\n".join(lines)


def dry_table(rows: Sequence[dict[str, Any]]) -> str:
    """Per family and condition: tasks whose question request holds every needle, and
    the request's mean tokens (``--dry``: what reaches the model)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        for fam in (r["family"], "all"):
            groups[(fam, r["condition"])].append(r)
    lines = [
        "| family | condition | needles reach the model | answers reach the model "
        "| question request |",
        "|---|---|---:|---:|---:|",
    ]
    for (fam, cond), sel in sorted(
        groups.items(),
        key=lambda kv: ((*FAMILIES, "all").index(kv[0][0]), CONDITIONS.index(kv[0][1])),
    ):
        ok = sum(all(r["needles_in_question_request"] or [False]) for r in sel)
        ans = sum(all(r.get("answers_in_question_request") or [False]) for r in sel)
        mean = round(sum(r["question_tokens"] or 0 for r in sel) / len(sel))
        lines.append(f"| {fam} | `{cond}` | {ok}/{len(sel)} | {ans}/{len(sel)} | {mean:,} |")
    return "\n".join(lines)


def points(
    rows: Sequence[dict[str, Any]], split: str, conditions: Sequence[str] | None = None
) -> tuple[list[dict[str, Any]], int, int]:
    """Per condition (``conditions``: those only) on the common tasks, those every
    selected condition has run (temperature 0, trial 0): tasks, right, Wilson
    interval, mean tokens sent and the rows themselves; and the common and seen task
    counts. A partial run compares like with like this way."""
    sel = [
        r
        for r in rows
        if r["split"] == split
        and r["temperature"] == 0
        and r["trial"] == 0
        and (conditions is None or r["condition"] in conditions)
    ]
    by_cond: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in sel:
        by_cond[r["condition"]][r["task"]] = r
    if not by_cond:
        return [], 0, 0
    common = set.intersection(*(set(v) for v in by_cond.values()))
    out = []
    for cond in CONDITIONS:
        if cond not in by_cond:
            continue
        rs = [by_cond[cond][t] for t in sorted(common)]
        ok = sum(r["outcome"] in SUCCESS for r in rs)
        lo, hi = wilson(ok, len(rs))
        out.append(
            {
                "condition": cond,
                "tasks": len(rs),
                "success": ok,
                "rate": ok / len(rs) if rs else 0.0,
                "lo": lo,
                "hi": hi,
                "tokens": sum(r["tokens_sent"] for r in rs) / len(rs) if rs else 0.0,
                "rows": rs,
            }
        )
    return out, len(common), len({r["task"] for r in sel})


def common_table(rows: Sequence[dict[str, Any]], split: str = "holdout") -> str:
    """Every condition on the tasks all conditions have run (temperature 0, trial 0),
    one row a condition: right per family and in all with its interval, and means per
    task. The table that answers "ahead of every other policy?" while a run is partial."""
    pts, common, _ = points(rows, split)
    if not common:
        return "(no task every condition has run)"
    # The families are counted on the common tasks themselves, so a family some
    # condition has not reached yet has no column rather than a column of other tasks.
    in_fam = Counter(r["family"] for r in pts[0]["rows"])
    fams = [f for f in FAMILIES if in_fam[f]]
    fam_head = " | ".join(f"{f} ({in_fam[f]})" for f in fams)
    lines = [
        f"| condition | {fam_head} | all ({common}) | 95 % CI (all) | tokens sent "
        "| question request | cost anthropic | fits the window |",
        "|---|" + "---:|" * (len(fams) + 1) + "---|---:|---:|---:|---|",
    ]
    for p in pts:
        rs = p["rows"]
        right = Counter(r["family"] for r in rs if r["outcome"] in SUCCESS)
        cells = " | ".join(str(right[f]) for f in fams)
        q = sum(r["question_tokens"] or 0 for r in rs) / len(rs)
        cost = sum(r["cost"]["anthropic"] for r in rs) / len(rs)
        fits = "yes" if all(r["fits_window"] for r in rs) else "no"
        lines.append(
            f"| `{p['condition']}` | {cells} | **{p['success']}** | {100 * p['lo']:.0f}–"
            f"{100 * p['hi']:.0f} % | {round(p['tokens']):,} | {round(q):,} | "
            f"{round(cost):,} | {fits} |"
        )
    return "\n".join(lines)


def token_shares(rows: Sequence[dict[str, Any]], split: str = "holdout") -> str:
    """Tokens each condition sends as a share of ``full``'s on the same tasks
    (temperature 0, trial 0, rows with every request counted): over the whole run,
    over the requests where full context overflows the window (the only ones any
    policy has to manage: before them every condition sends the same), and the
    question's request alone."""
    sel = [
        r
        for r in rows
        if r["split"] == split and r["temperature"] == 0 and r["trial"] == 0 and "step_tokens" in r
    ]
    full = {r["task"]: r for r in sel if r["condition"] == "full"}
    lines = [
        "| condition | tasks | whole run | requests full context overflows | question request |",
        "|---|---:|---:|---:|---:|",
    ]
    for cond in CONDITIONS[1:]:
        pairs = [(full[r["task"]], r) for r in sel if r["condition"] == cond and r["task"] in full]
        if not pairs:
            continue
        whole = [0, 0]
        over = [0, 0]
        quest = [0, 0]
        for f, r in pairs:
            room = f["run"]["window"] - f["run"]["reply"]
            for a, b in zip(f["step_tokens"], r["step_tokens"]):
                whole[0] += a
                whole[1] += b
                if a > room:
                    over[0] += a
                    over[1] += b
            quest[0] += f["question_tokens"] or 0
            quest[1] += r["question_tokens"] or 0
        cells = " | ".join(f"{100 * b / a:.0f} %" if a else "–" for a, b in (whole, over, quest))
        lines.append(f"| `{cond}` | {len(pairs)} | {cells} |")
    return "\n".join(lines) if len(lines) > 2 else "(no condition beside full with its rows)"


def pass_k_table(rows: Sequence[dict[str, Any]], split: str = "holdout") -> str:
    """pass^k side by side: per temperature above 0, the tasks on which every
    condition there has all ``k`` trials (``k`` the most any row's task has), so a
    run stopped inside a task compares whole tasks alike. Per family and in all:
    tasks passed (every trial right) with a Wilson interval, and trials right."""
    groups: dict[float, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["split"] == split and r["temperature"] > 0:
            groups[r["temperature"]].append(r)
    out: list[str] = []
    for temp, sel in sorted(groups.items()):
        runs: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for r in sel:
            runs[(r["task"], r["condition"])].append(r)
        k = max(len(v) for v in runs.values())
        present = {c for _, c in runs}
        conds = [c for c in CONDITIONS if c in present]
        tasks = {t for t, _ in runs if all(len(runs.get((t, c), ())) == k for c in conds)}
        family = {r["task"]: r["family"] for r in sel}
        fams = [f for f in FAMILIES if any(family[t] == f for t in tasks)]
        out.append(
            f"pass^{k} at temperature {temp}, the {len(tasks)} tasks every condition has "
            f"run {k} times (passed / trials right):\n"
        )
        head = " | ".join(f"{f} ({sum(family[t] == f for t in tasks)})" for f in fams)
        out.append(f"| condition | {head} | all ({len(tasks)}) | 95 % CI (all) | trials right |")
        out.append("|---|" + "---:|" * (len(fams) + 1) + "---|---:|")
        for c in conds:
            passed = {t for t in tasks if all(r["outcome"] in SUCCESS for r in runs[(t, c)])}
            right = sum(r["outcome"] in SUCCESS for t in tasks for r in runs[(t, c)])
            cells = " | ".join(str(sum(family[t] == f for t in passed)) for f in fams)
            lo, hi = wilson(len(passed), len(tasks))
            out.append(
                f"| `{c}` | {cells} | **{len(passed)}** | {100 * lo:.0f}–{100 * hi:.0f} % "
                f"| {right}/{k * len(tasks)} |"
            )
        out.append("")
    return "\n".join(out).rstrip() or "(no run at a temperature above 0)"


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError:  # a row cut off by a killed run: run it again
                continue
    return rows


def _revision() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "python/"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"
    return head + ("+dirty" if dirty else "") if head else "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="GGUF alias or path")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--data",
        type=Path,
        default=TASKS,
        help="the task set (tests/data/task_success/tasks.json; another of the same shape "
        "runs tasks of its own on the same recorded sources)",
    )
    ap.add_argument("--split", choices=("tune", "holdout", "all"), default="holdout")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--conditions", default=",".join(CONDITIONS))
    ap.add_argument("--limit", type=int, default=None, help="the first N tasks of the selection")
    ap.add_argument("--tasks", default=None, help="only these task ids (comma list)")
    ap.add_argument("--window", type=int, default=2048, help="context window (model tokens)")
    ap.add_argument("--reply", type=int, default=64, help="reply tokens reserved (and generated)")
    ap.add_argument("--steps", type=int, default=3, help="model calls after the question at most")
    ap.add_argument("--trials", type=int, default=1, help="runs of each task (seeds 0..)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--n-ctx", type=int, default=8192, help="the model's context (holds full)")
    ap.add_argument("--no-embed", action="store_true", help="rampart without MiniLM (BM25 only)")
    ap.add_argument(
        "--out", type=Path, default=ROOT / "benches/task_success_runs/qwen-holdout.jsonl"
    )
    ap.add_argument("--report", action="store_true", help="print the tables of --out, run nothing")
    ap.add_argument(
        "--dry",
        action="store_true",
        help="stop each row at the question's request: print whether the needles reach "
        "the model, write nothing (minutes, not hours)",
    )
    ap.add_argument(
        "--no-memo",
        action="store_true",
        help="embed every row's texts anew (the vectors are the same; only slower)",
    )
    args = ap.parse_args(argv)
    if args.report:
        rows = read_rows(args.out)
        print(table_md(summarise(rows)))
        if any(r["temperature"] == 0 for r in rows):
            print(f"\nEvery condition on the {args.split} tasks all of them ran:\n")
            print(common_table(rows, args.split))
            print("\nTokens sent as a share of full context's, request by request:\n")
            print(token_shares(rows, args.split))
        if any(r["temperature"] > 0 for r in rows):
            print()
            print(pass_k_table(rows, args.split))
        return 0
    conditions = [c for c in args.conditions.split(",") if c]
    families = [f for f in args.families.split(",") if f]
    bad = [c for c in conditions if c not in CONDITIONS] + [
        f for f in families if f not in FAMILIES
    ]
    if bad:
        raise InvalidArgumentError(f"unknown conditions/families {bad}: {CONDITIONS} / {FAMILIES}")
    if args.trials < 1:
        raise InvalidArgumentError(f"--trials must be at least 1, got {args.trials}")
    doc = load(args.data)
    texts = texts_of(doc, args.data)
    ids = None if args.tasks is None else {i for i in args.tasks.split(",") if i}
    tasks = [
        t
        for t in doc["tasks"]
        if (args.split == "all" or t["split"] == args.split)
        and t["family"] in families
        and (ids is None or t["id"] in ids)
    ]
    # Families in turn (commit, file, two, commit, ...): a run stopped early has
    # measured every family alike.
    per = [[t for t in tasks if t["family"] == f] for f in FAMILIES]
    tasks = [t for group in zip_longest(*per) for t in group if t is not None][: args.limit]
    done = (
        set()
        if args.dry
        else {
            (r["task"], r["condition"], r["trial"], r["temperature"]) for r in read_rows(args.out)
        }
    )
    todo = [
        (t, c, s)
        for t in tasks
        for c in conditions
        for s in range(args.trials)
        if (t["id"], c, s, args.temperature) not in done
    ]
    print(f"{len(todo)} rows to run ({len(done)} in {args.out})", flush=True)
    if not todo:
        print(table_md(summarise(read_rows(args.out))))
        return 0
    import conversation_clearing as cc
    from rampart.llm import LlamaCppBackend

    embedder = None
    if not args.no_embed and set(conditions) & set(RAMPART_CONDITIONS):
        embedder = rampart.OnnxEmbedder(threads=1)
        if not args.no_memo:
            embedder = nb.MemoEmbedder(embedder)
    backend = LlamaCppBackend(args.model, n_ctx=args.n_ctx, n_threads=args.threads)
    model = cc.Model(backend)
    meta = {
        "model": args.model,
        "window": args.window,
        "reply": args.reply,
        "steps": args.steps,
        "n_ctx": args.n_ctx,
        "threads": args.threads,
        "embedder": None if embedder is None else "all-MiniLM-L6-v2 (OnnxEmbedder, 1 thread)",
        "rampart": _revision(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    dry_rows: list[dict[str, Any]] = []
    for i, (t, c, s) in enumerate(todo):
        row = run_task(
            model,
            t,
            doc,
            texts,
            c,
            window=args.window,
            reply=args.reply,
            steps=args.steps,
            seed=s,
            temperature=args.temperature,
            embedder=embedder,
            dry=args.dry,
        )
        if args.dry:
            dry_rows.append(row)
            print(
                f"{t['id']:50s} {c:22s} q={row['question_tokens']} "
                f"needles={row['needles_in_question_request']} "
                f"answers={row['answers_in_question_request']}",
                flush=True,
            )
            continue
        row["run"] = meta
        with args.out.open("a", encoding="utf-8") as f:  # one line a row: a kill loses one
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
        el = time.perf_counter() - t0
        print(
            f"[{i + 1}/{len(todo)} {el:.0f}s] {t['id']:50s} {c:22s} {s} {row['outcome']:18s} "
            f"q={row['question_tokens']} sent={row['tokens_sent']} "
            f"needles={row['needles_in_question_request']} ans={row['answer'][:50]!r}",
            flush=True,
        )
    backend.close()
    if args.dry:
        print(dry_table(dry_rows))
        return 0
    print(table_md(summarise(read_rows(args.out))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
