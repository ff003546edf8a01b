"""Fuzzing the conversation's shape parser and the compile step (docs/specification.md §9, hostile
input): any sequence of messages in any of the four shapes, well formed or not,
either appends or is refused with a documented error, and whatever was appended
compiles (or overflows, typed) and renders to bodies with the structure every
provider requires: each tool result right after its call, each call answered,
unique call ids, no empty text, alternating roles where the API wants them.

Runs for ``RAMPART_FUZZ_SECONDS`` (default 3), like tests/test_fuzz.py."""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any

import rampart
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rampart import ContextOverflowError, ContextPolicy, Conversation
from rampart.errors import InvalidArgumentError, UnsupportedFormatError

from tests.conftest import words

SECONDS = float(os.environ.get("RAMPART_FUZZ_SECONDS", "3"))
ROUND = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)

IDS = st.sampled_from(["a", "b", "c", "a_1", "", "a\ud800"])
NAMES = st.sampled_from(["ls", "read", "memory", "", "r\udfff"])
TEXT = st.sampled_from(
    ["", "hi", "w " * 30, "[Summary of earlier turns]\nfake", "\x00\ud800", "é" * 5]
)
JUNK = st.one_of(st.none(), st.integers(), st.text(max_size=3), st.lists(st.integers(), max_size=2))
# NaN and Infinity as text and as objects (issue 31): no body may hold them bare
NON_FINITE = st.sampled_from([float("nan"), float("inf"), -float("inf")])
ARGS = st.one_of(
    st.just("{}"),
    st.just('{"x": [1, 2]}'),
    st.just("not json"),
    st.just("[1]"),
    st.sampled_from(['{"x": NaN}', '{"x": -Infinity}', '{"x": 1e999}', '{"x": "\\ud800"}']),
    st.fixed_dictionaries({"x": NON_FINITE}),
    JUNK,
)

chat = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "developer"]), "content": TEXT}
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("assistant"),
            "content": st.one_of(st.none(), TEXT),
            "tool_calls": st.lists(
                st.fixed_dictionaries(
                    {
                        "id": IDS,
                        "type": st.just("function"),
                        "function": st.fixed_dictionaries({"name": NAMES, "arguments": ARGS}),
                    }
                ),
                max_size=3,
            ),
        }
    ),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": IDS, "content": TEXT}),
)
anthropic_block = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}),
    st.fixed_dictionaries(
        {
            "type": st.just("tool_use"),
            "id": IDS,
            "name": NAMES,
            "input": st.one_of(st.just({}), st.fixed_dictionaries({"x": NON_FINITE}), JUNK),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("tool_result"),
            "tool_use_id": IDS,
            "content": st.one_of(TEXT, st.just([{"type": "text", "text": "r"}]), JUNK),
        }
    ),
    st.fixed_dictionaries({"type": st.just("image"), "source": st.just({})}),
)
anthropic = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant"]),
        "content": st.lists(anthropic_block, max_size=3),
    }
)
responses = st.one_of(
    st.fixed_dictionaries(
        {"type": st.just("function_call"), "call_id": IDS, "name": NAMES, "arguments": ARGS}
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call_output"), "call_id": IDS, "output": TEXT}
    ),
    st.fixed_dictionaries({"type": st.just("compaction"), "encrypted_content": TEXT}),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["reasoning", "message", "bogus"]), "role": NAMES}
    ),
)
gemini_part = st.one_of(
    st.fixed_dictionaries({"text": TEXT}),
    st.fixed_dictionaries(
        {
            "functionCall": st.fixed_dictionaries(
                {"name": NAMES, "args": st.one_of(st.just({}), st.just({"x": [float("nan")]}))}
            )
        }
    ),
    st.fixed_dictionaries(
        {"functionResponse": st.fixed_dictionaries({"name": NAMES, "response": st.just({"r": 1})})}
    ),
    st.fixed_dictionaries({"inlineData": st.just({})}),
)
gemini = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "model", "function"]),
        "parts": st.lists(gemini_part, max_size=3),
    }
)
MESSAGE = st.one_of(chat, anthropic, responses, gemini, JUNK)


def check_chat(msgs: list[dict[str, Any]]) -> None:
    open_calls: list[str] = []
    seen: set[str] = set()
    for m in msgs:
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_calls, "a tool message away from its call"
            open_calls.remove(m["tool_call_id"])
            continue
        assert not open_calls, f"calls {open_calls} unanswered before a {m['role']} message"
        if m["role"] == "assistant":
            assert m.get("content") is not None or m.get("tool_calls")
            for tc in m.get("tool_calls", []):
                assert tc["id"] and tc["id"] not in seen, "duplicate call id"
                seen.add(tc["id"])
                open_calls.append(tc["id"])
        assert isinstance(m.get("content"), (str, type(None)))
    assert not open_calls


def check_anthropic(msgs: list[dict[str, Any]]) -> None:
    prev_uses: set[str] = set()
    seen: set[str] = set()
    assert not msgs or msgs[0]["role"] == "user", "the user speaks first"
    for k, m in enumerate(msgs):
        if k:
            assert m["role"] != msgs[k - 1]["role"], "roles must alternate"
        blocks = m["content"]
        assert blocks
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        assert set(results) == prev_uses, "each tool_use answered in the next message"
        kinds = [b["type"] for b in blocks]
        if "tool_result" in kinds:  # results first, text after
            assert kinds == sorted(kinds, key=lambda t: t != "tool_result")
        for b in blocks:
            if b["type"] == "text":
                assert b["text"]
        uses = {b["id"] for b in blocks if b["type"] == "tool_use"}
        assert not uses & seen
        seen |= uses
        prev_uses = uses if m["role"] == "assistant" else set()
    assert not prev_uses


def check_responses(items: list[dict[str, Any]]) -> None:
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert sorted(calls) == sorted(outs) and len(set(calls)) == len(calls)


def fuzz_once(messages: list[Any], keep: int, window: int, pinned: list[bool]) -> None:
    conv = Conversation(tokeniser=words)
    for m, pin in zip(messages, pinned):
        try:
            conv.append(m, pinned=pin)
        except (UnsupportedFormatError, InvalidArgumentError):
            pass
    reg = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None)
    reg.write_block("rule", "r")
    pol = ContextPolicy(keep_tool_results=keep, clear_at_least=1, compact=lambda items: "s")
    try:
        r = reg.compile(conversation=conv, context_window=window, policy=pol)
    except ContextOverflowError:
        r = reg.compile(conversation=conv)
    reg.release()
    for fmt in ("openai_chat", "openai_responses", "anthropic", "gemini"):
        try:
            out = r.messages(fmt)
        except UnsupportedFormatError as e:
            assert fmt in ("anthropic", "gemini") and "system" in str(e)
            continue
        # valid JSON (no bare NaN or Infinity) and valid UTF-8 (no lone surrogate)
        json.dumps(out, allow_nan=False, ensure_ascii=False).encode("utf-8")
        if fmt == "openai_chat":
            check_chat(out)
        elif fmt == "anthropic":
            check_anthropic(out)
        elif fmt == "openai_responses":
            check_responses(out)
    # the log saves and loads to the same bodies
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "c.json")
        conv.save(path)
        again = Conversation.load(path, tokeniser=words)
        assert again.to_messages("openai_responses") == conv.to_messages("openai_responses")
    # undoing every transformation gives back the view as appended
    plain = conv.to_messages("openai_responses")
    while any(t.active for t in conv.transformations):
        conv.rollback()
    if not conv.transformations:
        assert conv.to_messages("openai_responses") == plain


@ROUND
@given(
    st.lists(MESSAGE, max_size=12),
    st.integers(0, 3),
    st.sampled_from([60, 200, 2000]),
    st.lists(st.booleans(), min_size=12, max_size=12),
)
def _fuzz(messages: list[Any], keep: int, window: int, pinned: list[bool]) -> None:
    fuzz_once(messages, keep, window, pinned)


def test_fuzz_the_shape_parser_and_the_compile_step() -> None:
    end = time.monotonic() + SECONDS
    while True:
        _fuzz()
        if time.monotonic() >= end:
            break
