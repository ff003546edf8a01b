"""Does a model still complete its task when rampart clears old tool results?

Issues 24 and 30's probe (docs/specification.md §9, docs/conversation.md, "Task success with and
without clearing"). Each task is an agent transcript on real tool output: a user asks
to see some commits of the repository, the assistant calls ``git_show`` ``--calls``
times, and every result is what ``mcp-server-git`` really returned for that commit
(tests/data/mcp_tool_outputs.json, recorded by benches/record_mcp_outputs.py). Then
the user asks for a fact found in exactly one of those results: the time of day on
the ``Date:`` line of one commit (checked in the generator: no other result of the
transcript holds that time). The asked-about result (the *needle*) is

- ``recent``: the last result, which clearing keeps (``keep_tool_results``), or
- ``old``: the first result, which clearing removes: its stub names the tool and the
  call, and the call's arguments (the commit id) stay, so the model can call the tool
  again, answer from what else it sees, or say it does not know; or
- ``two``: the first two results, both asked about ("the times on the Date lines of
  commits A and B"); the answer must hold both times (in any order).

The same tasks run under these ways of building the requests, each with the model's
reply driving a small agent loop (up to ``--steps`` model calls: a tool call the model
makes is answered from the recorded outputs, so a re-call of ``git_show`` gets what
the server returned; a call with no recorded output gets an error result saying so):

- ``full``: every message as it came (``reg.compile(conversation=conv)``, no window),
  in a model context large enough to hold it: what the task scores when nothing is
  removed. Its requests do not fit ``--window``;
- ``rampart``: ``reg.compile(conversation=conv, context_window=W, reply_tokens=M,
  policy=ContextPolicy())`` (the documented defaults: relevance-aware clearing, and
  recall of a cleared result the question needs at the tail), the adapters' messages
  (``result.messages("openai_chat")``) sent as they are;
- ``age``: the same with ``ContextPolicy(relevance=False)``, the age-only policy of
  earlier versions (oldest first, no recall): issue 24's ``rampart`` condition;
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

Outcomes, per task and condition: ``correct`` (every time asked for in the answer,
no tool called), ``correct_after_recall`` (after calling a tool), ``wrong`` (another answer),
``unknown`` (said it cannot tell), ``no_answer`` (still calling tools after the last
step), ``overflow`` (the request did not fit the model's context). Deterministic:
temperature 0, one seed, fixed task set (``--trials K --temperature T`` runs each
task K times, seeds 0..K-1: the summary's success is then pass^K).

The task set is split by needle commit into ``tune`` and ``holdout`` (the prompts'
wording was written looking at tune tasks only; no parameter is fitted to success):
quote holdout. ``--max-chars`` above 1 700 adds the larger outputs' commits as
holdout needles and leaves issue 24's tasks and split as they were (see
:func:`build_tasks`). Each row also records what the request that asked held: the
needles removed from their place, those recalled at the tail, and how many of the
answers were anywhere in it.

The saved runs: issue 24's (``experiments/conversation_clearing_qwen_before.json``,
8 holdout tasks, ``full`` and the age-only ``rampart`` of then) and issue 30's, 24
holdout tasks, one condition group after another into one file (``--resume`` keeps
the rows already there; ``runs`` in the JSON says what each invocation ran, on which
commit):

    for c in rampart,full age trim; do
      python experiments/conversation_clearing.py --model qwen2.5-coder-1.5b \\
          --threads 2 --split holdout --max-chars 2750 --conditions $c --resume \\
          --out experiments/conversation_clearing_qwen.json
    done
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Container, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import rampart
from _common import run
from rampart.errors import ContextOverflowError, InvalidArgumentError
from rampart.llm import LlamaCppBackend, parse_text_tool_calls

__all__ = [
    "CONDITIONS",
    "POSITIONS",
    "SPLITS",
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
QUESTION_TWO = (
    "What times of day (HH:MM:SS) are on the Date lines of commits {a} and {b}? "
    "Reply with the two times only, in that order."
)
#: The tools the model is given (the three it needs, of mcp-server-git's twelve: a
#: bigger schema list costs every request the same tokens and tells nothing here).
TOOLS = ("git_show", "git_log", "git_status")
CONDITIONS = ("full", "rampart", "age", "trim")
POSITIONS = ("recent", "old", "two")
SPLITS = ("tune", "holdout")
SEED = 24
#: The largest git_show output of issue 24's task set: its commits fix the split.
BASE_CHARS = 1700
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
    order), which of them are asked about (the needles), and the answers."""

    id: str
    split: str
    position: str  # "recent", "old" or "two"
    revisions: tuple[str, ...]
    needles: tuple[int, ...]  # indices into revisions
    answers: tuple[str, ...]  # HH:MM:SS, one per needle

    @property
    def question(self) -> str:
        revs = [self.revisions[i] for i in self.needles]
        if self.position == "two":
            return QUESTION_TWO.format(a=revs[0], b=revs[1])
        return QUESTION.format(revision=revs[0])


def _outputs() -> list[dict[str, Any]]:
    return list(json.loads((DATA / "mcp_tool_outputs.json").read_text())["outputs"])


def _commit_time(text: str) -> str:
    m = _DATE.search(text)
    if m is None:
        raise InvalidArgumentError(f"a git_show output without a Date line: {text[:80]!r}")
    return m.group(1)


def build_tasks(
    *,
    calls: int = 4,
    max_chars: int = 1700,
    tune: int = 5,
    seed: int = SEED,
    two: bool = True,
) -> list[Task]:
    """The fixed task set. Every ``git_show`` output of at most ``max_chars``
    characters is the needle of a ``recent`` and an ``old`` task, and the first needle
    of a ``two`` task (with ``calls >= 3`` and ``two``): the commits of at most
    ``BASE_CHARS`` characters in a seeded order, then the larger ones in a seeded order
    of their own; the first ``tune`` of them are the tune split, the rest the holdout.
    The other commits of a transcript are drawn with ``seed`` from those of at most
    ``BASE_CHARS`` characters, so up to ``BASE_CHARS`` the task set, split and draws are
    issue 24's exactly, and a larger ``max_chars`` only adds holdout tasks. A ``two``
    task asks about its needle commit and the next needle commit of the same split,
    shown first and second (both older than the ``calls - 2`` commits after them)."""
    shows = {
        o["arguments"]["revision"]: o["text"]
        for o in _outputs()
        if o["tool"] == "git_show" and len(o["text"]) <= max_chars
    }
    base = sorted(r for r in shows if len(shows[r]) <= BASE_CHARS)
    if calls < 2 or calls > len(base):
        raise InvalidArgumentError(
            f"--calls must be 2..{len(base)} with --max-chars {max_chars}, got {calls}"
        )
    rng = random.Random(seed)
    order = base[:]
    rng.shuffle(order)
    larger = sorted(r for r in shows if len(shows[r]) > BASE_CHARS)
    random.Random(seed + 1).shuffle(larger)
    order += larger
    split_of = {rev: "tune" if k < tune else "holdout" for k, rev in enumerate(order)}
    answer_of = {rev: _commit_time(shows[rev]) for rev in order}
    rng_two = random.Random(seed + 2)

    def unique(revs: Sequence[str], needles: Sequence[int]) -> None:
        # Each answer is in its needle's result and in no other: a correct answer was
        # read from it (or from a re-call of it), never from a neighbour.
        for i in needles:
            assert sum(answer_of[revs[i]] in shows[r] for r in revs) == 1

    tasks: list[Task] = []
    for rev in order:
        split, answer = split_of[rev], answer_of[rev]
        others = [r for r in base if r != rev and answer not in shows[r]]
        for position in ("recent", "old"):
            fill = rng.sample(others, calls - 1)
            revs = (*fill, rev) if position == "recent" else (rev, *fill)
            needle = calls - 1 if position == "recent" else 0
            unique(revs, (needle,))
            tasks.append(Task(f"{rev[:7]}-{position}", split, position, revs, (needle,), (answer,)))
        if not two or calls < 3:
            continue
        same = [r for r in order if split_of[r] == split]
        after = same[same.index(rev) + 1 :] + same[: same.index(rev)]
        pair = next(
            (
                r
                for r in after
                if answer_of[r] != answer
                and answer not in shows[r]
                and answer_of[r] not in shows[rev]
            ),
            None,
        )
        if pair is None:
            continue
        pool = [
            r
            for r in base
            if r not in (rev, pair) and answer not in shows[r] and answer_of[pair] not in shows[r]
        ]
        revs = (rev, pair, *rng_two.sample(pool, calls - 2))
        unique(revs, (0, 1))
        tasks.append(
            Task(
                f"{rev[:7]}+{pair[:7]}-two",
                split,
                "two",
                revs,
                (0, 1),
                (answer, answer_of[pair]),
            )
        )
    return tasks


def judge(answer: str, expected: str | Sequence[str], called: bool) -> str:
    """The outcome of a final answer (see the module doc): correct when every
    expected time is in it."""
    wanted = (expected,) if isinstance(expected, str) else tuple(expected)
    if wanted and all(e in answer for e in wanted):
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
        return len(self.prompt_token_ids(messages, tools))

    def prompt_token_ids(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> list[int]:
        """The request's prompt as ``create_chat_completion`` tokenises it: the GGUF's
        template, no BOS added, special tokens read."""
        from rampart.llm import _template_message

        fmt: Any = self.format  # llama-cpp-python types messages as its TypedDicts
        resp = fmt(
            messages=[_template_message(m) for m in messages],
            tools=list(tools) if self.native and tools else None,
        )
        return list(self.llm.tokenize(resp.prompt.encode(), add_bos=False, special=True))


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
    expected: list[str]
    calls_made: list[str] = field(default_factory=list)
    request_tokens: list[int] = field(default_factory=list)  # the model's count, per call
    fits_window: bool = True
    # In the request that asked the question: the tool results the policy cleared,
    # the needles gone from their place (cleared, excerpted, dropped or trimmed away),
    # the needles brought back at the tail (recall), and the task's answers anywhere
    # in the request's messages (whether the model could read them).
    cleared: int = 0
    needles_removed: int = 0
    needles_recalled: int = 0
    answers_in_request: int = 0
    trial: int = 0
    temperature: float = 0.0


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
    """The policy of a condition (None: no window, or trimmed outside rampart):
    ``rampart`` the defaults (relevance-aware clearing and recall at the tail),
    ``age`` the age-only policy of earlier versions (``relevance=False``)."""
    if condition == "rampart":
        return rampart.ContextPolicy()
    if condition == "age":
        return rampart.ContextPolicy(relevance=False)
    return None


def run_task(
    model: Model,
    task: Task,
    condition: str,
    *,
    window: int,
    reply: int,
    steps: int,
    seed: int = 0,
    temperature: float = 0.0,
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
    needle_calls = {f"call_{i}" for i in task.needles}
    needle_ids = {
        it.id for it in conv.items if it.kind == "tool_result" and it.call_id in needle_calls
    }
    assert len(needle_ids) == len(task.needles)

    out = Outcome(
        task.id,
        task.split,
        task.position,
        condition,
        "no_answer",
        "",
        list(task.answers),
        trial=seed,
        temperature=temperature,
    )
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
        if step == 0:  # what the model saw when asked
            text = "\n".join(str(m.get("content") or "") for m in sent)
            out.answers_in_request = sum(a in text for a in task.answers)
        if step == 0 and policy is not None:
            report = res.message_report
            out.cleared = sum(r.action in ("cleared", "excerpted") for r in report)
            out.needles_removed = sum(r.id in needle_ids and r.action != "kept" for r in report)
            shown_recalls = {r.id for r in report if r.action == "recalled"}
            recalled = {
                i
                for t in conv.transformations
                if t.active and t.kind == "recall" and t.summary_id in shown_recalls
                for i in t.ids
            }
            out.needles_recalled = len(recalled & needle_ids)
        elif step == 0 and condition == "trim":
            shown = {m.get("tool_call_id") for m in sent}
            out.needles_removed = len(needle_calls - shown)
        if n + reply > n_ctx:
            out.outcome = "overflow"
            break
        r = model.backend.chat(
            sent, temperature=temperature, seed=seed, max_tokens=reply, tools=tools or None
        )
        conv.observe_usage({"prompt_tokens": (r.prompt_tokens or n) - preamble})
        calls = list(r.calls)
        if not calls and not model.native:
            calls = list(parse_text_tool_calls(r.text, names)[1])
        out.answer = r.text.strip()
        if not calls:
            out.outcome = judge(out.answer, task.answers, bool(out.calls_made))
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
    trials: int = 1,
    temperature: float = 0.0,
    tool_names: Sequence[str] = TOOLS,
    skip: Container[tuple[str, str, int]] = (),
    progress: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Every task under every condition, task by task, ``trials`` times each (seeds
    ``seed`` ... ``seed + trials - 1``), but the ``(task, condition, seed)`` rows in
    ``skip``; each row is a function of its task, condition and seed only (see
    :func:`run_task`)."""
    rows = []
    for task in tasks:
        for condition in conditions:
            for s in range(seed, seed + trials):
                if (task.id, condition, s) in skip:
                    continue
                row = run_task(
                    model,
                    task,
                    condition,
                    window=window,
                    reply=reply,
                    steps=steps,
                    seed=s,
                    temperature=temperature,
                    tool_names=tool_names,
                )
                rows.append(row)
                if progress is not None:
                    progress(row)
    return rows


SUCCESS = ("correct", "correct_after_recall")


def _entry(rows: Sequence[Outcome]) -> dict[str, Any]:
    by_task: dict[str, list[Outcome]] = {}
    for r in rows:
        by_task.setdefault(r.task, []).append(r)
    return {
        "tasks": len(by_task),
        "trials": max((len(v) for v in by_task.values()), default=0),
        # one trial per task at temperature 0: the tasks answered right; with k trials,
        # the tasks answered right every time (pass^k) and the right rows
        "success": sum(all(r.outcome in SUCCESS for r in v) for v in by_task.values()),
        "success_rows": sum(r.outcome in SUCCESS for r in rows),
        "needle_removed": sum(r.needles_removed > 0 for r in rows),
        "needle_recalled": sum(r.needles_recalled > 0 for r in rows),
        "answers_in_request": sum(r.answers_in_request == len(r.expected) for r in rows),
        "outcomes": dict(Counter(r.outcome for r in rows)),
    }


def summarise(rows: Sequence[Outcome]) -> dict[str, Any]:
    """Per split, condition and needle position: tasks, successes (with several trials
    of a task: pass^k, every trial right), outcome counts, the rows whose needle was
    removed, recalled, or whose answers were all in the request, peak request tokens,
    whether every request fit the window."""
    out: dict[str, Any] = {}
    for split in sorted({r.split for r in rows}):
        for cond in [c for c in CONDITIONS if any(r.condition == c for r in rows)]:
            sel = [r for r in rows if r.split == split and r.condition == cond]
            if not sel:
                continue
            entry = _entry(sel)
            entry["peak_request_tokens"] = max(
                (max(r.request_tokens, default=0) for r in sel), default=0
            )
            entry["all_fit_window"] = all(r.fits_window for r in sel)
            for pos in POSITIONS:
                p = [r for r in sel if r.position == pos]
                if p:
                    entry[pos] = _entry(p)
            out[f"{split}/{cond}"] = entry
    return out


def format_summary(summary: dict[str, Any]) -> str:
    lines = [
        "| split | condition | success | recent | old (removed, recalled) "
        "| two (removed, recalled) | peak request | fits |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]

    def cell(e: dict[str, Any] | None, removed: bool) -> str:
        if e is None:
            return "-"
        s = f"{e['success']}/{e['tasks']}"
        return f"{s} ({e['needle_removed']}, {e['needle_recalled']})" if removed else s

    for key, e in summary.items():
        split, cond = key.split("/")
        lines.append(
            f"| {split} | {cond} | {e['success']}/{e['tasks']} | "
            f"{cell(e.get('recent'), False)} | {cell(e.get('old'), True)} | "
            f"{cell(e.get('two'), True)} | "
            f"{e['peak_request_tokens']:,} | {'yes' if e['all_fit_window'] else 'no'} |"
        )
    return "\n".join(lines)


def _revision() -> str:
    """The checkout's commit, ``+dirty`` when python/ has changes (what a run measured:
    the library may change between the runs of a resumed file)."""
    import subprocess

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


SETTINGS = ("calls", "max_chars", "window", "reply", "steps", "split")
#: What selects an invocation's tasks (kept per run: a resumed file may add others).
SELECTION = ("positions", "limit", "tasks")


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
    ap.add_argument("--positions", default=",".join(POSITIONS), help="needle positions run")
    ap.add_argument("--limit", type=int, default=None, help="the first N tasks of the split")
    ap.add_argument("--tasks", default=None, help="only these task ids (comma list)")
    ap.add_argument("--conditions", default="full,rampart,age,trim")
    ap.add_argument("--trials", type=int, default=1, help="runs of each task (seeds 0..)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--n-ctx", type=int, default=8192, help="the model's context (holds full)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--resume",
        action="store_true",
        help="keep the rows already in --out (same settings) and run only the others",
    )
    args = ap.parse_args(argv)
    conditions = [c for c in args.conditions.split(",") if c]
    bad = [c for c in conditions if c not in CONDITIONS]
    if bad:
        raise InvalidArgumentError(f"--conditions: unknown {bad}; choose from {CONDITIONS}")
    positions = [p for p in args.positions.split(",") if p]
    if not positions or any(p not in POSITIONS for p in positions):
        raise InvalidArgumentError(f"--positions: choose from {POSITIONS}, got {positions}")
    if args.trials < 1:
        raise InvalidArgumentError(f"--trials must be at least 1, got {args.trials}")
    every = [
        t
        for t in build_tasks(calls=args.calls, max_chars=args.max_chars)
        if args.split == "all" or t.split == args.split
    ]
    ids = None if args.tasks is None else {i for i in args.tasks.split(",") if i}
    if ids is not None and ids - {t.id for t in every}:
        raise InvalidArgumentError(f"--tasks: unknown {sorted(ids - {t.id for t in every})}")
    tasks = [t for t in every if t.position in positions and (ids is None or t.id in ids)][
        : args.limit
    ]
    settings = {k: getattr(args, k) for k in SETTINGS} | {
        "n_ctx": args.n_ctx,
        "seed": SEED,
        "trials": args.trials,
        "temperature": args.temperature,
    }

    done: list[Outcome] = []
    runs: list[dict[str, Any]] = []
    if args.resume and args.out is not None and args.out.exists():
        prev = json.loads(args.out.read_text())
        before = {k: v for k, v in prev.get("settings", {}).items() if k not in SELECTION}
        if prev.get("model") != args.model or before != settings:
            raise InvalidArgumentError(
                f"--resume: {args.out} was run with other settings: {prev.get('settings')}"
            )
        done = [Outcome(**r) for r in prev["rows"]]
        runs = list(prev.get("runs", []))
    skip = {(r.task, r.condition, r.trial) for r in done}
    backend = LlamaCppBackend(args.model, n_ctx=args.n_ctx, n_threads=args.threads)
    model = Model(backend)
    t0 = time.perf_counter()
    runs.append(
        {
            "conditions": conditions,
            "positions": positions,
            "limit": args.limit,
            "tasks": None if ids is None else sorted(ids),
            "threads": args.threads,
            "rampart": _revision(),
            "rows": 0,
            "wall_s": 0.0,
        }
    )

    def write() -> None:
        if args.out is None:
            return
        ran = [c for c in CONDITIONS if any(r.condition == c for r in done)]
        have = Counter((r.task, r.condition) for r in done)
        runs[-1]["wall_s"] = round(time.perf_counter() - t0, 1)
        doc = {
            "model": args.model,
            "settings": settings,
            "policy": {c: repr(p) for c in ran if (p := policy_for(c))},
            "conditions": ran,
            # every task under every condition that ran, each with all its trials
            "complete": all(have[(t.id, c)] == args.trials for t in every for c in ran),
            "tasks": [asdict(t) | {"question": t.question} for t in every],
            "summary": summarise(done),
            "rows": [asdict(r) for r in done],
            "runs": runs,
            "wall_s": round(sum(r["wall_s"] for r in runs), 1),
        }
        args.out.write_text(json.dumps(doc, indent=1) + "\n")

    def show(r: Outcome) -> None:
        done.append(r)
        runs[-1]["rows"] += 1
        print(
            f"{r.task:24s} {r.condition:8s} {r.trial} {r.outcome:20s} tokens {r.request_tokens} "
            f"removed {r.needles_removed} recalled {r.needles_recalled} "
            f"seen {r.answers_in_request}/{len(r.expected)} calls {r.calls_made} "
            f"answer {r.answer[:60]!r} ({time.perf_counter() - t0:.0f} s)",
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
        trials=args.trials,
        temperature=args.temperature,
        skip=skip,
        progress=show,
    )
    backend.close()
    print(format_summary(summarise(done)))
    return 0


if __name__ == "__main__":
    sys.exit(run("conversation_clearing", main))
