"""The whole request's promises about the budget (docs/conversation.md, "One
budget" and "Cache-aware"): what must be sent is the pinned items and the
latest user message, and when they fit beside the instructions the compile
fits; a window-forced drop leaves room, so the next calls of a tool loop are
not forced again at once."""

from __future__ import annotations

import json
from typing import Any

import pytest
import rampart
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rampart import ContextOverflowError, ContextPolicy, Conversation
from rampart.conversation.plan import _fixed_tokens, _pinned_tokens

from tests.conftest import SKILLS, words

SKILL_TEXTS = [p.read_text() for p in sorted(SKILLS.glob("*/SKILL.md"))]


def _call(conv: Conversation, cid: str, text: str, *, pinned: bool = False, n: int = 1) -> None:
    calls = [
        {
            "id": f"{cid}_{j}",
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": cid})},
        }
        for j in range(n)
    ]
    conv.append({"role": "assistant", "content": None, "tool_calls": calls}, pinned=pinned)
    for j in range(n):
        conv.append({"role": "tool", "tool_call_id": f"{cid}_{j}", "content": text})


@pytest.fixture
def reg() -> Any:
    r = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None)
    r.write_block("You are a careful agent.", "intro", gated=False)
    yield r
    r.release()


def _fits(reg: Any, conv: Conversation, window: int, reply: int, pol: ContextPolicy) -> Any:
    r = reg.compile(conversation=conv, context_window=window, reply_tokens=reply, policy=pol)
    assert r.context.message_tokens <= r.context.budget
    return r


# ---- what must be sent fits: no ContextOverflowError -----------------------------------------


def test_a_recall_that_cannot_fit_beside_a_huge_question_does_not_overflow(reg: Any) -> None:
    """A huge question after a tool loop: the recall of the cleared result the
    question names is protected while the question stands, and it did not fit
    beside it (ContextOverflowError naming the question and the recall). The
    compile fits: the recall is planned away, or what it needs is dropped."""
    conv = Conversation(tokeniser=words)
    conv.append({"role": "user", "content": "Read the skills, then wait."})
    for i, text in enumerate(SKILL_TEXTS):
        _call(conv, f"c{i}", text)
        _fits(reg, conv, 5000, 0, ContextPolicy(clear_at_least=256))
    question = "What frame rate for a slack GIF emoji? " + "x " * 4700
    conv.append({"role": "user", "content": question})
    fixed = _fixed_tokens(conv, reg.compile())
    assert fixed + _pinned_tokens(conv._view) <= 5000  # what must be sent fits
    r = _fits(reg, conv, 5000, 0, ContextPolicy(clear_at_least=256))
    assert question in [m["content"] for m in r.messages()]


def test_a_drop_that_empties_the_tail_recalls_only_what_fits(reg: Any) -> None:
    """The latest user message is the first item and nearly fills the window; a
    forced drop takes every step after it, so the question is the latest item
    again and the recall looked for what the drop took: it must fit too."""
    pol = ContextPolicy(clear_tool_results=False, keep_tool_results=0)
    conv = Conversation(tokeniser=words)
    conv.append({"role": "user", "content": "Read the skills. " + "word " * 880})
    for i in range(3):
        _call(conv, f"c{i}", SKILL_TEXTS[2 + i][:2000])
        r = _fits(reg, conv, 1500, 512, pol)
        msgs = r.messages()
        # the user's message stays; a recall of what the drop took comes before it
        asked = [m for m in msgs if str(m["content"]).startswith("Read the skills.")]
        assert len(asked) == 1
        before = msgs[: msgs.index(asked[0])]
        assert all(str(m["content"]).startswith("[recalled for") for m in before)


def test_a_pinned_call_whose_result_does_not_fit_is_answered_by_a_stub(reg: Any) -> None:
    """A pinned assistant message with calls and unpinned results: its step was
    never dropped (it holds a pinned item), so with clear_tool_results=False
    the compile overflowed though the pinned items fit. The results go, the
    pinned calls stay, answered by the renderer's stub."""
    pol = ContextPolicy(clear_tool_results=False, keep_tool_results=0, clear_at_least=0)
    conv = Conversation(tokeniser=words)
    conv.append({"role": "user", "content": "Read the skills."}, pinned=True)
    for i in range(4):
        _call(conv, f"c{i}", SKILL_TEXTS[i][:2000], pinned=True, n=2)
        r = _fits(reg, conv, 1500, 512, pol)
    msgs = r.messages("openai_chat")
    calls = [tc["id"] for m in msgs for tc in m.get("tool_calls") or []]
    assert calls == [f"c{i}_{j}" for i in range(4) for j in range(2)]  # every pinned call
    answered = {m["tool_call_id"] for m in msgs if m["role"] == "tool"}
    assert answered == set(calls)  # each answered: by its result or a stub
    assert any("no result was recorded" in m["content"] for m in msgs if m["role"] == "tool")


def test_a_pinned_message_inside_a_step_does_not_pin_the_step(reg: Any) -> None:
    """An assistant note pinned between calls: the calls and results around it
    can go, the note stays."""
    pol = ContextPolicy(clear_tool_results=False)
    conv = Conversation(tokeniser=words)
    conv.append({"role": "user", "content": "Go."})
    for i in range(6):
        conv.append(
            {
                "role": "assistant",
                "content": f"note {i}: keep this",
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": "{}"},
                    }
                ],
            },
            pinned=True,
        )
        conv.append({"role": "tool", "tool_call_id": f"c{i}", "content": "w " * 400})
        r = _fits(reg, conv, 1200, 0, pol)
    text = json.dumps(r.messages())
    assert all(f"note {i}: keep this" in text for i in range(6))


_piece = st.one_of(
    st.tuples(st.just("call"), st.integers(5, 900), st.booleans(), st.integers(1, 3)),
    st.tuples(st.just("user"), st.integers(1, 1500), st.booleans(), st.just(0)),
    st.tuples(st.just("note"), st.integers(1, 400), st.booleans(), st.just(0)),
)


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    pieces=st.lists(_piece, min_size=1, max_size=14),
    window=st.integers(300, 4000),
    reply=st.sampled_from([0, 100, 512]),
    clear=st.booleans(),
    relevance=st.booleans(),
    keep=st.integers(0, 3),
    at_least=st.sampled_from([0, 100, 2048]),
    question=st.integers(0, 3000),
)
def test_what_must_be_sent_fits_so_the_compile_fits(
    pieces: list[tuple[str, int, bool, int]],
    window: int,
    reply: int,
    clear: bool,
    relevance: bool,
    keep: int,
    at_least: int,
    question: int,
) -> None:
    """Any conversation, compiled after every message as an agent does, then a
    question: the compile raises ContextOverflowError exactly when the pinned
    items and the latest user message do not fit beside the instructions."""
    reg = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None)
    reg.write_block("You are a careful agent.", "intro", gated=False)
    pol = ContextPolicy(
        clear_tool_results=clear,
        relevance=relevance,
        keep_tool_results=keep,
        clear_at_least=at_least,
    )
    conv = Conversation(tokeniser=words)
    conv.append({"role": "user", "content": "Read the skills and fix the bug."})
    fixed = _fixed_tokens(conv, reg.compile())
    texts = iter(SKILL_TEXTS * 4)
    steps = [*pieces, ("user", question, False, 0)]
    try:
        for i, (kind, size, pinned, n) in enumerate(steps):
            if kind == "call":
                _call(conv, f"c{i}", next(texts)[: size * 6], pinned=pinned, n=n)
            elif kind == "user":
                conv.append(
                    {"role": "user", "content": "gif frame rate " + "q " * size}, pinned=pinned
                )
            else:
                conv.append({"role": "assistant", "content": "ok " * size}, pinned=pinned)
            must = fixed + _pinned_tokens(conv._view)
            log = conv.log
            try:
                _fits(reg, conv, window, reply, pol)
            except ContextOverflowError:
                assert must > window - reply, "overflow although what must be sent fits"
                assert conv.log == log  # nothing recorded
                return
            assert must <= window - reply
    finally:
        reg.release()


# ---- a forced drop leaves room: the next calls are not forced again at once ------------------


def _forced_pattern(reg: Any, pol: ContextPolicy, window: int, result_words: int) -> str:
    conv = Conversation(tokeniser=words)
    conv.append({"role": "user", "content": "Read the files and fix the bug."})
    out = ""
    for i in range(60):
        _call(conv, f"c{i}", f"file {i}: " + "w " * result_words)
        r = _fits(reg, conv, window, 512, pol)
        out += "F" if any(n.reason == "window" for n in r.context.rewrites) else "."
    return out


@pytest.mark.parametrize("result_words", [1000, 2300, 3000, 6000])
@pytest.mark.parametrize("clear", [False, True])
def test_a_forced_step_is_not_followed_by_two_forced_calls(
    reg: Any, clear: bool, result_words: int
) -> None:
    """A tool loop in a 32k window with results of 1 000 to 6 000 tokens. Before,
    with clear_tool_results=False and results over clear_at_least (2 048), the
    drop took one step (what the window needed, rounded to a step) and every
    later call was forced again: ``FFFFF…``; so did the default policy's clear
    with results of 6 000 tokens."""
    pol = ContextPolicy(clear_tool_results=clear)
    pattern = _forced_pattern(reg, pol, 32_000, result_words)
    assert "F" in pattern or clear  # clearing pays before the window forces it
    assert "FF" not in pattern, pattern


def test_clear_at_least_zero_asks_for_no_room(reg: Any) -> None:
    """clear_at_least=0: only what the window needs goes (every call past the
    window is forced, one step each) — the documented opt-out."""
    pol = ContextPolicy(clear_tool_results=False, clear_at_least=0)
    pattern = _forced_pattern(reg, pol, 8_000, 700)
    assert pattern.rstrip("F").endswith(".") and pattern.endswith("FFFF")
