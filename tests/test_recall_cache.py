"""The recall at the tail keeps the cache (issue 36): the question's compile sends,
before the recall, exactly what the same compile without the recall sends (a dry
run with ``recall=False``) — byte for byte in every provider's body format;
``recall_max_tokens`` caps everything recalled in one compile, headers included;
a question of several parts recalls every part's result (issue 35), the budget
shared by need. Real tool output: the SKILL.md files and the recorded
mcp-server-git results of tests/data; lexical scoring (no model) unless marked."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import rampart
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rampart import ContextPolicy, Conversation
from rampart.conversation import retention
from rampart.conversation.shapes import render
from rampart.conversation.steps import RECALL_BUDGET_PART

from tests.conftest import SKILLS, needs_model
from tests.test_retention import GIT, NEEDLE, QUESTION, _call, trajectory

FORMATS = ("openai_chat", "openai_responses", "anthropic", "gemini")
SLACK = SKILLS / "slack-gif-creator" / "SKILL.md"
WEB = SKILLS / "web-artifacts-builder" / "SKILL.md"
BRAND = SKILLS / "brand-guidelines" / "SKILL.md"
WEB_NEEDLE = "purple gradients, uniform rounded corners, and Inter font"
BRAND_NEEDLE = "Applied via python-pptx's RGBColor class"


@pytest.fixture(scope="module")
def lexreg() -> rampart.BlockRegistry:
    reg = rampart.BlockRegistry()  # no embedder: lexical only
    reg.write_block("You are a careful agent.", "intro")
    return reg


def _compile(reg: rampart.BlockRegistry, conv: Conversation, window: int, **kw: Any) -> Any:
    return reg.compile(
        conversation=conv, context_window=window, reply_tokens=512, policy=ContextPolicy(**kw)
    )


def _recall_tokens(r: Any) -> int:
    return sum(m.tokens for m in r.message_report if m.action == "recalled")


def _less_recalls(r: Any, fmt: str) -> list[dict[str, Any]]:
    """The compile's messages without its recalls (what the same compile without
    the recall sends, when the recall changed nothing else)."""
    return render([s for s in r._context.shown if s.item.kind != "recall"], fmt)


def _read_last(body: str, question: str) -> bool:
    """Whether the question is the last text of a JSON body (the recalls before it)."""
    return body.rstrip("]}").endswith(json.dumps(question))


def _open(body: str) -> str:
    """A JSON body less its closing brackets: what a longer body starts with when
    it only appended to this one (the provider's cached prefix survives)."""
    return body.rstrip("]}")


@pytest.mark.parametrize("window", [6000, 16_000])
@pytest.mark.parametrize("fmt", FORMATS)
def test_the_body_before_the_recall_is_the_previous_one_and_the_dry_runs(
    lexreg: rampart.BlockRegistry, fmt: str, window: int
) -> None:
    conv = trajectory(lexreg, ContextPolicy(), window)
    before = json.dumps(_compile(lexreg, conv, window).messages(fmt))
    assert NEEDLE not in before  # cleared while the agent read on
    conv.append({"role": "user", "content": QUESTION})
    dry = _compile(lexreg, conv, window, recall=False, dry_run=True)
    n = len(conv.log)
    r = _compile(lexreg, conv, window)
    assert r._context.recalled and not r._context.rewrites
    assert len(conv.log) == n + len(r._context.recalled)  # the recall entries alone
    body = json.dumps(r.messages(fmt))
    dry_body = json.dumps(dry.messages(fmt))
    # byte for byte: the previous body, then the recall, then the question; less
    # the recall, what the dry run without it sends
    assert dry_body.startswith(_open(before))
    assert body.startswith(_open(before)) and _read_last(body, QUESTION)
    assert _less_recalls(r, fmt) == dry.messages(fmt)
    assert NEEDLE in body[len(_open(before)) :] and NEEDLE not in dry_body
    assert r._context.message_tokens <= r._context.budget


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_question_is_read_last_and_the_next_step_extends_the_request(
    lexreg: rampart.BlockRegistry, fmt: str
) -> None:
    window = 6000
    conv = trajectory(lexreg, ContextPolicy(), window)
    conv.append({"role": "user", "content": QUESTION})
    r = _compile(lexreg, conv, window)
    assert r._context.recalled
    # the log appends the recall after the question; the messages send it before
    kinds = [it.kind for it in conv.items]
    assert kinds[-1] == "recall" and conv.items[-2].content == QUESTION
    body = json.dumps(r.messages(fmt))
    assert _read_last(body, QUESTION) and body.index(NEEDLE) < body.rindex(QUESTION)
    # the agent's next step (a call and its result) only appends: the recall stays
    # before the question, and the cached prefix holds
    _call(conv, "next", "read_file", {"path": "notes.md"}, "The FPS note is above.")
    nxt = _compile(lexreg, conv, window)
    assert not nxt._context.rewrites
    after = json.dumps(nxt.messages(fmt))
    assert after.startswith(_open(body))
    assert after.index(NEEDLE) < after.rindex(QUESTION)


# ---- the agent loop on the needle set's real tool output (tune split) -----------------------

_spec = importlib.util.spec_from_file_location(
    "needle_bench", Path(__file__).resolve().parent.parent / "benches" / "needle_bench.py"
)
assert _spec is not None and _spec.loader is not None
needle_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(needle_bench)


@pytest.fixture(scope="module")
def needles() -> tuple[dict[str, Any], dict[str, str], rampart.BlockRegistry]:
    doc = needle_bench.load()
    return doc, needle_bench.materialise(doc), needle_bench.registry(None)  # lexical only


def _agent_loop(
    needles: tuple[dict[str, Any], dict[str, str], rampart.BlockRegistry],
    task_id: str,
    window: int,
    fmt: str,
) -> tuple[str, str, str, Any]:
    """An agent compiling after every real tool result, then the question: the
    previous body, the dry run's without the recall, the question's, and its result."""
    doc, texts, reg = needles
    task = next(t for t in doc["tasks"] if t["id"] == task_id)
    assert task["split"] == "tune"
    conv = Conversation()
    pol = ContextPolicy()
    kw: dict[str, Any] = {"context_window": window, "reply_tokens": 1024, "tools_in_prompt": False}
    steps = needle_bench.steps(task, doc, texts)
    before = ""
    for new in steps[:-1]:
        conv.append(new)
        before = json.dumps(reg.compile(conversation=conv, policy=pol, **kw).messages(fmt))
    conv.append(steps[-1])
    dry = reg.compile(
        conversation=conv, policy=ContextPolicy(recall=False, dry_run=True), **kw
    ).messages(fmt)
    r = reg.compile(conversation=conv, policy=pol, **kw)
    return before, json.dumps(dry), json.dumps(r.messages(fmt)), r


# Tasks whose question's compile rewrote the body before the recall (a clear for
# price brought by the recall's tokens) before the recall ran after the fit.
_REWROTE = ("tune-old-04", "tune-old-10", "tune-two-03", "tune-recent-04")


@pytest.mark.parametrize("fmt", FORMATS)
def test_in_an_agent_loop_the_recall_rewrites_nothing(
    needles: tuple[dict[str, Any], dict[str, str], rampart.BlockRegistry], fmt: str
) -> None:
    for task_id in _REWROTE:
        before, dry, body, r = _agent_loop(needles, task_id, 16_000, fmt)
        assert r._context.recalled, task_id
        assert dry.startswith(_open(before)), task_id  # the question alone rewrote nothing
        assert body.startswith(_open(before)), task_id  # nor did the recall
        assert _less_recalls(r, fmt) == json.loads(dry), task_id
        assert r._context.message_tokens <= r._context.budget


def test_every_tune_task_sends_the_dry_runs_body_before_the_recall(
    needles: tuple[dict[str, Any], dict[str, str], rampart.BlockRegistry],
) -> None:
    # Before the recall ran after the fit, 12 of these 26 questions' compiles
    # rewrote the body (lexical scoring). Now: none beyond a room the window
    # forces for the recall, and that one from a late result.
    doc = needles[0]
    made_room = 0
    for task in doc["tasks"]:
        if task["split"] != "tune":
            continue
        _, dry, body, r = _agent_loop(needles, task["id"], 16_000, "openai_chat")
        if _less_recalls(r, "openai_chat") == json.loads(dry):
            continue
        made_room += 1
        note = r._context.rewrites[-1]
        assert (note.action, note.reason) == ("clear", "window"), task["id"]
        assert json.loads(body)[: note.at_index] == json.loads(dry)[: note.at_index]
    assert made_room <= 2, made_room


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_price_clear_keeps_its_own_schedule(lexreg: rampart.BlockRegistry, fmt: str) -> None:
    # The question's compile clears for price on its own (seven large results
    # arrived since the last compile): the recall changes neither that clear
    # nor anything else before it, and does not count in the price check.
    conv = Conversation()
    conv.append({"role": "user", "content": "Read the files, then wait."})
    _call(conv, "c0", "read_file", {"path": "slack"}, SLACK.read_text())
    _compile(lexreg, conv, 1500, excerpts=False)  # a small window clears it
    for i, o in enumerate(GIT[:7]):
        _call(conv, f"g{i}", "git_show", o["arguments"], o["text"])
    conv.append({"role": "user", "content": QUESTION})
    dry = _compile(lexreg, conv, 24_000, recall=False, dry_run=True)
    r = _compile(lexreg, conv, 24_000)
    assert [n.reason for n in dry._context.rewrites] == ["price"]
    assert r._context.rewrites == dry._context.rewrites  # the same clear, same tokens
    assert r._context.recalled
    body = json.dumps(r.messages(fmt))
    assert _less_recalls(r, fmt) == dry.messages(fmt) and _read_last(body, QUESTION)
    assert NEEDLE in body


def test_room_for_the_recall_clears_the_latest_result_the_question_does_not_need(
    lexreg: rampart.BlockRegistry,
) -> None:
    # The fit leaves less room than a useful recall: the room comes from the
    # newest older results the question does not need, so the body is rewritten
    # from as late as it can be (never a result it needs, not the recency floor
    # while older results can make the room).
    # (no clear for price here: clear_at_least past what clearing could remove;
    # no excerpt: the small window clears the GIF skill whole)
    kw: dict[str, Any] = {"clear_at_least": 100_000, "excerpts": False}
    conv = Conversation()
    conv.append({"role": "user", "content": "Read the files, then wait."})
    _call(conv, "c0", "read_file", {"path": "slack"}, SLACK.read_text())
    _compile(lexreg, conv, 1500, **kw)  # a small window clears it
    for i, o in enumerate(GIT[:7]):
        _call(conv, f"g{i}", "git_show", o["arguments"], o["text"])
    window = 24_000
    prev = _compile(lexreg, conv, window, **kw)
    assert not prev._context.rewrites
    room = prev._context.budget - prev._context.message_tokens
    n = _filler_for(QUESTION, room - 40)
    conv.append({"role": "user", "content": QUESTION + " Please be careful." * n})
    dry = _compile(lexreg, conv, window, recall=False, dry_run=True, **kw)
    assert not dry._context.rewrites  # the question alone fits ...
    assert dry._context.budget - dry._context.message_tokens <= 60  # ... and no recall
    r = _compile(lexreg, conv, window, **kw)
    ctx = r._context
    assert NEEDLE in json.dumps(r.messages()) and ctx.message_tokens <= ctx.budget
    (note,) = ctx.rewrites
    assert note.action == "clear" and note.reason == "window"
    rep = {m.id: m for m in r.message_report}
    results = [it for it in conv.items if it.kind == "tool_result"]
    git = [it.id for it in results if it.call_id and it.call_id.startswith("g")]
    # the latest git_show results outside the recency floor, from the tail back
    cleared = [i for i in git if rep[i].action == "cleared"]
    assert cleared and cleared == git[len(git) - 3 - len(cleared) : len(git) - 3]
    assert note.at_item == cleared[0]
    assert all(rep[i].action == "kept" for i in git[-3:])
    # the body before the first cleared result is the previous one, byte for byte
    before = json.dumps(r.messages()[: note.at_index])
    assert json.dumps(prev.messages()).startswith(before.rstrip("]"))


def _filler_for(question: str, tokens: int) -> int:
    """How many ' Please be careful.' make ``question`` about ``tokens`` tokens."""
    lo, hi = 0, max(tokens, 1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        probe = Conversation()
        probe.append({"role": "user", "content": question + " Please be careful." * mid})
        if probe.items[0].tokens <= tokens:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ---- recall_max_tokens is a cap ------------------------------------------------------------


def _two_results_read(question: str) -> Conversation:
    """The web artifacts and brand guides read early, cleared by the later reads."""
    conv = Conversation()
    conv.append({"role": "user", "content": "Read the guides, then wait for my question."})
    files = [WEB, BRAND] + [
        p
        for p in sorted(SKILLS.glob("*/SKILL.md"))
        if p.parent.name not in (WEB.parent.name, BRAND.parent.name)
    ]
    for i, p in enumerate(files):
        _call(conv, f"c{i}", "read_file", {"path": p.parent.name}, p.read_text())
    for i, o in enumerate(GIT[:10]):
        _call(conv, f"g{i}", "git_show", o["arguments"], o["text"])
    return conv


TWO_PART = (
    "Which font did the web artifacts guide say to avoid, and which python-pptx class "
    "applies the brand colours?"
)


@pytest.mark.parametrize("cap", [2000, 300, 150, 50, 0])
def test_recall_max_tokens_caps_everything_recalled(
    lexreg: rampart.BlockRegistry, cap: int
) -> None:
    window = 9000
    conv = _two_results_read("x")
    _compile(lexreg, conv, window, recall_max_tokens=cap)
    conv.append({"role": "user", "content": TWO_PART})
    r = _compile(lexreg, conv, window, recall_max_tokens=cap)
    got = _recall_tokens(r)
    assert got <= cap, (cap, got)
    assert r._context.message_tokens <= r._context.budget
    if cap >= 2000:
        assert len(r._context.recalled) == 2


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    st.integers(0, 3000),
    st.sampled_from([4000, 6000, 9000, 16_000]),
    st.sampled_from([QUESTION, TWO_PART, "GIFBuilder save options and the Inter font?"]),
)
def test_recall_caps_hold_for_every_cap_and_window(cap: int, window: int, question: str) -> None:
    reg = rampart.BlockRegistry()
    reg.write_block("You are a careful agent.", "intro")
    conv = _two_results_read("x")
    _call(conv, "s0", "read_file", {"path": "slack"}, SLACK.read_text())
    for i, o in enumerate(GIT[10:14]):
        _call(conv, f"h{i}", "git_show", o["arguments"], o["text"])
    _compile(reg, conv, window, recall_max_tokens=cap)
    conv.append({"role": "user", "content": question})
    dry = _compile(reg, conv, window, recall_max_tokens=cap, recall=False, dry_run=True)
    r = _compile(reg, conv, window, recall_max_tokens=cap)
    ctx = r._context
    parts = min(len(retention.query_parts(question)), 2)
    assert _recall_tokens(r) <= min(cap, ctx.budget * parts // RECALL_BUDGET_PART)
    assert ctx.message_tokens <= ctx.budget
    if len(ctx.rewrites) == len(dry._context.rewrites):  # no room was made for it
        assert _less_recalls(r, "openai_chat") == dry.messages()
    else:  # room made: one window clear more, nothing else changed
        assert len(ctx.rewrites) == len(dry._context.rewrites) + 1
        assert ctx.rewrites[-1].reason == "window"


# ---- questions of several parts ----------------------------------------------------------


def test_query_parts_splits_a_question_of_several_parts() -> None:
    qp = retention.query_parts
    assert qp("What are the timeouts of A and of B?") == [
        "What are the timeouts of A",
        "What are the timeouts of B?",
    ]
    assert qp("the timeouts of A and B") == ["the timeouts of A", "the timeouts of B"]
    assert qp("Was ist der Timeout von A und von B?") == [
        "Was ist der Timeout von A",
        "Was ist der Timeout von B?",
    ]
    assert qp("A的超时和B的超时是多少") == ["A的超时", "B的超时是多少"]
    assert qp("What is X? And what is Y?") == ["What is X?", "what is Y?"]
    assert qp("Show me X. Also tell me Y.") == ["Show me X.", "tell me Y."]
    # sentences that do not ask frame the ones that do: not parts of their own
    assert qp(
        "Two things about what you read earlier. First: which file did a1b2c3d change? "
        "Second: what is the port? Reply with the file only. Answer both, briefly."
    ) == ["First: which file did a1b2c3d change?", "Second: what is the port?"]
    assert qp("What time is on the Date line of a1b2c3d? Reply with the time only.") == [
        "What time is on the Date line of a1b2c3d? Reply with the time only."
    ]
    assert len(qp("a, b, c, d, e and f")) == retention.MAX_PARTS
    # one part: the question itself
    for q in (QUESTION, "In the deploy script, how long is the timeout?", "e.g. this", "x"):
        assert qp(q) == [q]
    assert qp("") == [] and qp("   ") == []


@settings(max_examples=200, deadline=None, database=None)
@given(st.text(max_size=300))
def test_query_parts_is_bounded_for_any_text(text: str) -> None:
    parts = retention.query_parts(text)
    assert len(parts) <= retention.MAX_PARTS
    assert all(p.strip() for p in parts)
    assert all(len(p) <= 2 * retention.MAX_QUERY_CHARS for p in parts)


def test_query_parts_of_a_huge_question_is_bounded() -> None:
    parts = retention.query_parts("the timeouts of A and of B; " * 200_000 + "\ud800")
    assert 1 <= len(parts) <= retention.MAX_PARTS


def test_a_two_part_question_recalls_both_results(lexreg: rampart.BlockRegistry) -> None:
    window = 9000
    conv = _two_results_read("x")
    prev = _compile(lexreg, conv, window)
    body = json.dumps(prev.messages())
    assert WEB_NEEDLE not in body and BRAND_NEEDLE not in body
    conv.append({"role": "user", "content": TWO_PART})
    assert len(retention.query_parts(TWO_PART)) == 2
    r = _compile(lexreg, conv, window)
    msgs = r.messages()
    assert msgs[-1]["content"] == TWO_PART
    tail = json.dumps(msgs[len(prev.messages()) : -1])
    assert WEB_NEEDLE in tail and BRAND_NEEDLE in tail
    assert len(r._context.recalled) == 2 and not r._context.rewrites
    assert _recall_tokens(r) <= ContextPolicy().recall_max_tokens
    # each part alone recalls its own result, and only it
    for part, needle, other in (
        ("Which font did the web artifacts guide say to avoid?", WEB_NEEDLE, BRAND_NEEDLE),
        ("Which python-pptx class applies the brand colours?", BRAND_NEEDLE, WEB_NEEDLE),
    ):
        conv = _two_results_read("x")
        _compile(lexreg, conv, window)
        conv.append({"role": "user", "content": part})
        one = json.dumps(_compile(lexreg, conv, window).messages())
        assert needle in one and other not in one


def test_a_short_result_leaves_the_rest_of_the_budget_to_the_other(
    lexreg: rampart.BlockRegistry,
) -> None:
    # Shared by need, not halved: the brand guide's relevant lines are short, so
    # the web guide takes the rest of the cap (an even split gives each at most
    # half). Both were cleared in a small window; the question's is large, so
    # only the cap limits. (At a cap of 1 000 the web guide's next passage, whole,
    # no longer fits beside the closing line; from 1 500 on the web guide's whole
    # need, 745 tokens, is under an even share: the cap here is where sharing by
    # need shows.)
    cap = 1200
    conv = _two_results_read("x")
    _compile(lexreg, conv, 6000, recall_max_tokens=cap)
    conv.append({"role": "user", "content": TWO_PART})
    r = _compile(lexreg, conv, 32_000, recall_max_tokens=cap)
    assert r._context.budget - r._context.message_tokens > cap
    # the last recall ends with retention.RECALL_CLOSING, inside the cap
    restated = conv._count(retention.RECALL_CLOSING)
    got = {}
    for m in r.message_report:
        if m.action == "recalled":
            text = next(i.content for i in conv.items if i.id == m.id)
            own = m.tokens - (restated if text.endswith(retention.RECALL_CLOSING) else 0)
            got["web" if "web-artifacts-builder" in text else "brand"] = own
    assert set(got) == {"web", "brand"} and sum(got.values()) + restated <= cap
    assert got["brand"] < (cap - restated) // 2 < got["web"]


@needs_model
def test_a_two_part_paraphrased_question_recalls_both_with_the_model() -> None:
    reg = rampart.BlockRegistry(embedding_model="default")
    reg.write_block("You are a careful agent.", "intro")
    conv = _two_results_read("x")
    _compile(reg, conv, 6000)
    conv.append(
        {
            "role": "user",
            "content": "Which font does the guide for web artifacts tell me to avoid, and "
            "which class puts the brand colours on slides?",
        }
    )
    r = _compile(reg, conv, 16_000)
    body = json.dumps(r.messages())
    assert WEB_NEEDLE in body and BRAND_NEEDLE in body
