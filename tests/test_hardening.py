"""Issue 31: every documented promise of the conversation, the agent loop and the
stores holds under hostile input (docs/limits.md, "Conversations and the agent
loop"). Hypothesis explores where the input space is large — hostile tool calls
fed to the real loop, non-finite numbers in every shape's arguments, lone
surrogates in every string a conversation writes — each fuzzer running for
``RAMPART_FUZZ_SECONDS`` (default 3), like tests/test_fuzz.py; the rest are
one test per finding."""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import rampart
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rampart import Conversation
from rampart.adapters import (
    anthropic_messages,
    gemini_generate_content,
    openai_chat,
    openai_responses,
)
from rampart.agent import Agent, Quarantine, QuarantinedLesson
from rampart.agent.calls import NO_NAME
from rampart.conversation import FORMATS
from rampart.errors import (
    InvalidArgumentError,
    RampartError,
    RegistryFileError,
    UnsupportedFormatError,
)
from rampart.llm import OpenAIBackend, Reply, ToolCall

from tests import fake_openai as fake
from tests.conftest import import_or_skip, words
from tests.test_conversation_fuzz import check_anthropic, check_chat, check_responses

SECONDS = float(os.environ.get("RAMPART_FUZZ_SECONDS", "3"))
ROUND = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def run_for(seconds: float, fuzz: Callable[[], None]) -> None:
    """Hypothesis rounds of ``fuzz`` until ``seconds`` have passed (at least one)."""
    end = time.monotonic() + seconds
    while True:
        fuzz()
        if time.monotonic() >= end:
            return


# ---- what every body must be -------------------------------------------------------------


def check_bodies(conv: Conversation) -> dict[str, list[dict[str, Any]]]:
    """Render ``conv`` to the four formats and check what every provider requires:
    JSON with no NaN or Infinity, valid UTF-8, each call answered right after it."""
    out = {}
    for fmt in FORMATS:
        try:
            msgs = conv.to_messages(fmt)
        except UnsupportedFormatError as e:  # a system item, for Anthropic or Gemini
            assert fmt in ("anthropic", "gemini") and "system" in str(e)
            continue
        json.dumps(msgs, allow_nan=False, ensure_ascii=False).encode("utf-8")
        if fmt == "openai_chat":
            check_chat(msgs)
        elif fmt == "anthropic":
            check_anthropic(msgs)
        elif fmt == "openai_responses":
            check_responses(msgs)
        out[fmt] = msgs
    return out


def check_with_sdks(conv: Conversation) -> None:
    """The bodies of ``conv`` against the installed SDKs' own types."""
    import_or_skip("openai", "sdks")
    import_or_skip("anthropic", "sdks")
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

    from tests.test_adapters import sdk_check

    reg = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None)
    try:
        reg.write_block("Answer briefly.", "style")
        r = reg.compile(conversation=conv)
        sdk_check(CompletionCreateParamsNonStreaming, openai_chat(r, model="gpt-4.1"))
        sdk_check(ResponseCreateParamsNonStreaming, openai_responses(r, model="gpt-4.1"))
        body = anthropic_messages(r, model="claude-sonnet-4-5")
        sdk_check(MessageCreateParamsNonStreaming, body)
        json.dumps(body, allow_nan=False)
        genai = import_or_skip("google.genai.types", "sdks")
        for content in gemini_generate_content(r, model="gemini-2.5-flash")["contents"]:
            genai.Content.model_validate(content)
    finally:
        reg.release()


# ---- 1. the agent loop answers every call, whatever the model wrote -----------------------

RUNS: list[str] = []


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    RUNS.append(key)
    return f"value of {key}"


class Scripted:
    """A backend that replies with ``calls`` once, then answers."""

    model = "scripted"
    max_concurrency = 1

    def __init__(self, calls: list[Any], text: Any = "") -> None:
        self.calls = calls
        self.text = text
        self.requests: list[list[dict[str, Any]]] = []

    def describe(self) -> dict[str, Any]:
        return {"backend": "scripted"}

    def close(self) -> None:
        pass

    def chat(self, messages: Any, **kw: Any) -> Reply:
        self.requests.append(list(messages))
        if len(self.requests) == 1:
            return Reply(text=self.text, calls=tuple(self.calls))
        return Reply(text="done")


@pytest.fixture(scope="module")
def agent_registry() -> Iterator[rampart.BlockRegistry]:
    r = rampart.BlockRegistry(default_max_tokens=None)
    r.write_block("You look things up.", "persona")
    yield r
    r.release()


SURROGATE_TEXT = st.lists(
    st.sampled_from(["a", "_", "é", "\ud800", "\udfff", "\udc80", "\x00", "😀", " ", "."]),
    max_size=6,
).map("".join)
HOSTILE_IDS = st.one_of(
    st.none(),
    st.sampled_from(["", "c1", "c1", "a.b", "x" * 200, "call_0_0", "call_0_1"]),
    SURROGATE_TEXT,
    st.integers(),
)
HOSTILE_NAMES = st.one_of(
    st.sampled_from(["lookup", "lookup", "", "remember", "x y", "recall", "find_tools", "n" * 65]),
    st.none(),
    SURROGATE_TEXT,
    st.integers(),
)
NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
HOSTILE_ARGS = st.one_of(
    st.sampled_from(
        [
            '{"key": "a"}',
            '{"key": NaN}',
            '{"key": "a", "n": Infinity}',
            '{"key": -Infinity}',
            '{"key": 1e999}',
            '{"key": "\\ud800"}',
            "[" * 300 + "]" * 300,
            "[",
            "",
            "null",
            "{}",
        ]
    ),
    st.none(),
    st.fixed_dictionaries({"key": st.one_of(st.just("a"), NON_FINITE, SURROGATE_TEXT)}),
    SURROGATE_TEXT,
)
HOSTILE_CALL = st.builds(ToolCall, HOSTILE_IDS, HOSTILE_NAMES, HOSTILE_ARGS)


def _check_run(run: Any, n_calls: int, limit: int, ran: int) -> None:
    results = run.steps[0].results
    assert len(results) == n_calls, "every call answered, once"
    assert len({r.call.id for r in results}) == n_calls, "ids unique in the reply"
    assert ran <= limit, f"{ran} tool runs past max_calls_per_step={limit}"
    for r in results[limit:]:
        assert r.is_error and "not run" in r.output
    for r in results:
        if r.call.name == NO_NAME:
            assert r.is_error
        if not r.is_error and r.call.name == "lookup":
            json.loads(r.call.arguments, parse_constant=lambda t: pytest.fail(f"ran with {t}"))
    conv = run.conversation
    check_bodies(conv)
    # the request of the second step went out paired too
    second = [m for m in conv.to_messages("openai_chat")]
    check_chat(second)


@ROUND
@given(
    st.lists(HOSTILE_CALL, min_size=1, max_size=12),
    st.integers(1, 6),
    st.sampled_from([None, 100_000]),
    st.one_of(st.just(""), st.none(), SURROGATE_TEXT),
)
def _fuzz_agent(calls: list[Any], limit: int, window: int | None, text: Any) -> None:
    reg = AGENT_REGISTRY[0]
    backend = Scripted(calls, text)
    agent = Agent(
        reg, backend, [lookup], learn=False, max_calls_per_step=limit, context_window=window
    )
    RUNS.clear()
    run = agent.run("look up the keys")
    _check_run(run, len(calls), limit, len(RUNS))
    check_chat([m for m in backend.requests[-1] if m["role"] != "system"])


AGENT_REGISTRY: list[rampart.BlockRegistry] = []


def test_fuzz_the_agent_loop_with_hostile_tool_calls(agent_registry: Any) -> None:
    AGENT_REGISTRY[:] = [agent_registry]
    run_for(SECONDS, _fuzz_agent)


def _hostile_reply(payload: dict[str, Any], n: int) -> tuple[int, bytes, float]:
    """300 calls over real HTTP: one with a null id and an empty name, NaN and
    Infinity arguments, a duplicate id, an id Anthropic would refuse."""
    if n > 0:
        return 200, fake.completion("done", payload), 0.0
    calls: list[dict[str, Any]] = [
        {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"key": str(i)})},
        }
        for i in range(300)
    ]
    calls[5] = {"id": None, "type": "function", "function": {"name": "", "arguments": "{}"}}
    calls[6]["function"]["arguments"] = '{"key": NaN}'
    calls[7]["function"]["arguments"] = '{"key": "a", "x": Infinity}'
    calls[8]["function"]["arguments"] = '{"key": 1e999}'
    calls[9]["id"] = "c10"  # the same id as the next call
    calls[11]["id"] = "call.11/x"
    body = {
        "id": "x",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": calls},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }
    return 200, json.dumps(body).encode(), 0.0


def test_three_hundred_calls_one_without_id_or_name(agent_registry: Any) -> None:
    with fake.FakeOpenAI(_hostile_reply) as server:
        backend = OpenAIBackend(server.base_url, "fake-model", timeout=10)
        try:
            agent = Agent(agent_registry, backend, [lookup], learn=False, max_calls_per_step=40)
            RUNS.clear()
            run = agent.run("look up every key")
            payloads = server.payloads
        finally:
            backend.close()
    assert run.answer == "done"
    _check_run(run, 300, 40, len(RUNS))
    results = run.steps[0].results
    assert results[5].call.name == NO_NAME and "names no tool ('' " in results[5].output
    for k in (6, 7, 8):
        assert results[k].is_error and "not JSON" in results[k].output, results[k].output
    assert results[9].call.id != results[10].call.id
    assert results[11].call.id == "call_0_11"
    assert len(RUNS) == 40 - 4, "the bad calls ran nothing; calls past 40 were not run"
    # the second request carries all 300 calls, each answered right after
    check_chat([m for m in payloads[1]["messages"] if m["role"] != "system"])
    check_with_sdks(run.conversation)


# ---- 2. no body holds NaN or Infinity -----------------------------------------------------


def _conv() -> Conversation:
    c = Conversation(tokeniser=words)
    c.append({"role": "user", "content": "go"})
    return c


@pytest.mark.parametrize(
    "message",
    [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {"x": math.nan}}],
        },
        {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"x": [math.inf]}}}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "f", "arguments": {"x": -math.inf}},
                }
            ],
        },
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": {"x": math.nan}},
    ],
    ids=["anthropic-input", "gemini-args", "chat-object-args", "responses-object-args"],
)
def test_non_finite_arguments_objects_are_refused_naming_the_item(message: Any) -> None:
    c = _conv()
    with pytest.raises(UnsupportedFormatError, match=r"message.*NaN or Infinity") as err:
        c.append([{"role": "user", "content": "again"}, message])
    assert "message 1" in str(err.value)
    assert len(c) == 1, "nothing of the call appended"


def test_non_finite_result_object_is_refused() -> None:
    c = _conv()
    c.append({"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]})
    with pytest.raises(UnsupportedFormatError, match="NaN or Infinity"):
        c.append(
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "f", "response": {"x": math.nan}}}],
            }
        )


@pytest.mark.parametrize(
    "raw", ['{"x": NaN}', '{"x": Infinity}', '{"x": [-Infinity]}', '{"x": 1e999}', "[" * 5000]
)
def test_argument_text_that_is_not_json_travels_as_text(raw: str) -> None:
    c = _conv()
    c.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": raw}}
            ],
        }
    )
    c.append({"role": "tool", "tool_call_id": "a", "content": raw})
    bodies = check_bodies(c)
    use = bodies["anthropic"][1]["content"][0]
    assert use["input"] == {"arguments": raw}
    call = bodies["gemini"][1]["parts"][0]["functionCall"]
    assert call["args"] == {"arguments": raw}
    assert bodies["gemini"][2]["parts"][0]["functionResponse"]["response"] == {"result": raw}
    check_with_sdks(c)


JSON_LEAF = st.one_of(
    st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=3), st.none()
)
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda kids: st.one_of(
        st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=3), kids, max_size=3)
    ),
    max_leaves=8,
)
ARG_OBJECT = st.dictionaries(st.text(max_size=3), JSON_VALUE, max_size=3)


def _shapes(obj: dict[str, Any], text: str) -> list[Any]:
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": text}}
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": obj}}
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "a", "name": "f", "input": obj}],
        },
        {"role": "model", "parts": [{"functionCall": {"name": "f", "args": obj, "id": "a"}}]},
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": obj},
    ]


@ROUND
@given(ARG_OBJECT, st.integers(0, 4))
def _fuzz_non_finite(obj: dict[str, Any], shape: int) -> None:
    text = json.dumps(obj)  # Python writes NaN and Infinity bare
    c = _conv()
    try:
        c.append(_shapes(obj, text)[shape])
    except UnsupportedFormatError as e:
        assert "NaN or Infinity" in str(e)
        assert shape > 0, "argument text is never refused"
    else:
        c.append({"role": "tool", "tool_call_id": "a", "content": text})
    check_bodies(c)  # json.dumps(..., allow_nan=False) of every format


def test_fuzz_non_finite_numbers_in_every_shape() -> None:
    run_for(SECONDS, _fuzz_non_finite)


def test_a_saved_file_with_nan_or_a_bad_native_item_is_refused(tmp_path: Path) -> None:
    c = _conv()
    c.append({"type": "reasoning", "id": "rs_1", "summary": []})
    p = tmp_path / "c.json"
    c.save(p)
    text = p.read_text(encoding="utf-8")
    nan = tmp_path / "nan.json"
    nan.write_text(text.replace('"time":', '"time":NaN,"t0":', 1), encoding="utf-8")
    with pytest.raises(RegistryFileError, match="NaN"):
        Conversation.load(nan, tokeniser=words)
    data = json.loads(text)
    for bad in ('{"x": NaN}', "[1]", "not json"):
        entry = data["log"][1]
        entry["groups"][0][0]["content"] = bad
        edited = tmp_path / "native.json"
        edited.write_text(json.dumps(data), encoding="utf-8")
        with pytest.raises(RegistryFileError, match="log entry 1: a openai_responses item"):
            Conversation.load(edited, tokeniser=words)


# ---- 5. lone surrogates: refused at the boundary, nothing written -------------------------


def test_surrogates_in_conversation_arguments_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="conversation_id"):
        Conversation("run\ud800")
    c = _conv()
    with pytest.raises(InvalidArgumentError, match="trajectory_id"):
        c.append({"role": "user", "content": "x"}, trajectory_id="t\udfff")
    assert len(c) == 1

    def named(text: str) -> int:
        return len(text)

    named.__name__ = "count\ud800"
    with pytest.raises(InvalidArgumentError, match="tokeniser"):
        Conversation(tokeniser=named)


def test_surrogates_in_messages_become_replacement_characters(tmp_path: Path) -> None:
    c = _conv()
    c.append(
        {
            "role": "assistant",
            "content": "a\ud800",
            "tool_calls": [
                {
                    "id": "c\udc80",
                    "type": "function",
                    "function": {"name": "f\ud800", "arguments": '{"k": "\\ud800"}'},
                }
            ],
        }
    )
    c.append({"role": "tool", "tool_call_id": "c\udc80", "content": "\udfff"})
    call = c.items[2]
    assert (call.call_id, call.tool_name) == ("c\ufffd", "f\ufffd")
    check_bodies(c)
    c.save(tmp_path / "c.json")
    again = Conversation.load(tmp_path / "c.json", tokeniser=words)
    assert again.to_messages("anthropic") == c.to_messages("anthropic")


STRING_FIELDS = st.sampled_from(["content", "call_id", "tool_name", "trajectory_id", "id"])


def _message(field: str, s: str) -> tuple[list[Any], str | None]:
    cid = s if field == "call_id" else "c1"
    name = s if field == "tool_name" else "f"
    text = s if field == "content" else "text"
    msgs = [
        {"role": "user", "content": text},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": text}}
            ],
        },
        {"role": "tool", "tool_call_id": cid, "content": text},
        {"role": "model", "parts": [{"functionCall": {"name": name, "args": {"q": text}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": name, "response": {"r": text}}}]},
    ]
    return msgs, s if field == "trajectory_id" else None


@ROUND
@given(st.lists(st.tuples(STRING_FIELDS, SURROGATE_TEXT), min_size=1, max_size=4))
def _fuzz_surrogates(edits: list[tuple[str, str]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        url = f"sqlite:///{d}/s.db"
        local = Conversation(tokeniser=words)
        shared = Conversation.open(url, "c", tokeniser=words)
        try:
            for field, s in edits:
                msgs, traj = _message(field, s)
                outcomes = []
                for conv in (local, shared):
                    try:
                        conv.append(msgs, trajectory_id=traj)
                        outcomes.append(None)
                    except (InvalidArgumentError, UnsupportedFormatError) as e:
                        outcomes.append(type(e))
                assert outcomes[0] == outcomes[1], "a shared append is refused as a local one"
            bodies = check_bodies(local)
            assert check_bodies(shared) == bodies
            path = Path(d) / "c.json"
            local.save(path)
            assert check_bodies(Conversation.load(path, tokeniser=words)) == bodies
        finally:
            shared.close()
        # Every later open reads the whole journal: nothing was written that it skips.
        seen: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
        logger = logging.getLogger("rampart.shared")
        logger.addHandler(handler)
        try:
            again = Conversation.open(url, "c", tokeniser=words)
            assert check_bodies(again) == bodies
            again.close()
        finally:
            logger.removeHandler(handler)
        assert not seen, seen


def test_fuzz_surrogates_in_every_string_local_shared_and_saved() -> None:
    run_for(SECONDS, _fuzz_surrogates)


def test_a_shared_append_refused_writes_no_journal_entry(tmp_path: Path, caplog: Any) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    conv = Conversation.open(url, "c", tokeniser=words)
    conv.append({"role": "user", "content": "hi"})
    with pytest.raises(InvalidArgumentError, match="trajectory_id"):
        conv.append({"role": "user", "content": "x"}, trajectory_id="\ud800")
    conv.close()
    with caplog.at_level(logging.WARNING, logger="rampart.shared"):
        again = Conversation.open(url, "c", tokeniser=words)
    assert len(again) == 1 and not caplog.records
    again.close()


def _string_leaves(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _string_leaves(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _string_leaves(v, (*path, i))
    elif isinstance(node, str):
        yield path


def test_a_surrogate_escape_anywhere_in_a_saved_file_is_refused(tmp_path: Path) -> None:
    reg = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None)
    c = Conversation(tokeniser=words)
    c.append({"role": "user", "content": "read the logs"}, trajectory_id="run-1")
    for i in range(6):
        c.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "read", "arguments": "{}"},
                    }
                ],
            }
        )
        c.append({"role": "tool", "tool_call_id": f"c{i}", "content": "line " * 300})
    c.append({"role": "user", "content": "and now?"})
    pol = rampart.ContextPolicy(keep_tool_results=1, clear_at_least=1)
    reg.compile(conversation=c, context_window=1200, reply_tokens=10, policy=pol)
    c.observe_usage({"prompt_tokens": 900})
    reg.release()
    ops = {e["op"] for e in c.log}
    assert {"append", "clear", "scale"} <= ops, ops
    p = tmp_path / "c.json"
    c.save(p)
    data = json.loads(p.read_text(encoding="utf-8"))
    leaves = list(_string_leaves(data))
    assert len(leaves) > 30
    edited = tmp_path / "edited.json"
    for path in leaves:
        copy = json.loads(json.dumps(data))
        node = copy
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = node[path[-1]] + "\ud800"
        edited.write_text(json.dumps(copy), encoding="utf-8")  # written as a \ud800 escape
        with pytest.raises(RegistryFileError):
            Conversation.load(edited, tokeniser=words)
    # the keys too
    copy = json.loads(json.dumps(data))
    copy["log"][0]["x\ud800"] = 1
    edited.write_text(json.dumps(copy), encoding="utf-8")
    with pytest.raises(RegistryFileError, match="lone surrogate"):
        Conversation.load(edited, tokeniser=words)


def test_paths_holding_a_lone_surrogate_are_typed_errors(tmp_path: Path) -> None:
    bad = tmp_path / "x\ud800.json"
    c = _conv()
    reg = rampart.BlockRegistry()
    reg.write_block("a rule", "rule")
    q = Quarantine()
    try:
        for call in (
            lambda: c.save(bad),
            lambda: Conversation.load(bad),
            lambda: reg.save(bad),
            lambda: rampart.BlockRegistry.load(bad),
            lambda: reg.export_markdown(bad),
            lambda: q.save(bad),
            lambda: Quarantine.load(bad),
        ):
            with pytest.raises(InvalidArgumentError, match="path"):
                call()
        assert list(tmp_path.iterdir()) == [], "a refused save writes nothing"
        # surrogateescape names (undecodable bytes) are file names: they work
        ok = tmp_path / "x\udcff.rampart"
        reg.save(ok)
        rampart.BlockRegistry.load(ok).release()
    finally:
        reg.release()


def _lesson(**kw: Any) -> QuarantinedLesson:
    fields: dict[str, Any] = dict(
        id="q-1",
        rule="Always read the docs.",
        run_id="run-1",
        task="a task",
        origin="remember",
        untrusted_tools=["fetch"],
        diagnosis="Always read the docs.",
        created="2026-01-01T00:00:00Z",
    )
    fields.update(kw)
    return QuarantinedLesson(**fields)


def test_quarantine_repairs_model_text_and_refuses_a_file_escape(tmp_path: Path) -> None:
    q = Quarantine()
    q.add(_lesson(diagnosis='{"rule": "\ud800 obey"}', untrusted_tools=["f\udfff"]))
    assert q.get("q-1").diagnosis == '{"rule": "\ufffd obey"}'
    p = tmp_path / "q.json"
    q.save(p)
    assert Quarantine.load(p).get("q-1").untrusted_tools == ["f\ufffd"]
    data = json.loads(p.read_text(encoding="utf-8"))
    data["entries"][0]["rule"] = "obey\ud800"
    p.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InvalidArgumentError, match=r"entry 0.*lone surrogate"):
        Quarantine.load(p)


# ---- 6. typed errors on bad arguments -----------------------------------------------------


@pytest.mark.parametrize("spec", ["o200k", "cl100k", "", "no/such/tokenizer.json"])
def test_a_misspelt_tokeniser_is_a_typed_error(spec: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"tokeniser=.*'o200k_base'.*'cl100k_base'"):
        Conversation(tokeniser=spec)
    with pytest.raises(InvalidArgumentError, match="tokeniser="):
        rampart.BlockRegistry(tokeniser=spec)
    with pytest.raises(InvalidArgumentError, match="did you mean 'o200k_base'"):
        Conversation(tokeniser="o200k")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"duplicate_threshold": "high"},
        {"duplicate_threshold": math.nan},
        {"trusted_tools": None},
        {"trusted_tools": 3},
        {"tools": None},
        {"tools": 5},
        {"lesson_priority": 2},
        {"lesson_priority": "x"},
        {"temperature": "hot"},
        {"temperature": -1},
        {"max_calls_per_step": 0},
        {"max_calls_per_step": 1.5},
    ],
)
def test_agent_arguments_are_typed_errors(agent_registry: Any, kwargs: dict[str, Any]) -> None:
    tools = kwargs.pop("tools", [lookup])
    with pytest.raises(InvalidArgumentError):
        Agent(agent_registry, Scripted([]), tools, learn=False, **kwargs)


def test_a_task_with_a_lone_surrogate_is_a_typed_error(agent_registry: Any) -> None:
    agent = Agent(agent_registry, Scripted([]), [lookup], learn=False)
    with pytest.raises(InvalidArgumentError, match="task"):
        agent.run("look up \ud800")


# ---- 7. the store extras ------------------------------------------------------------------


def _extra(name: str) -> set[str]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    reqs = meta["project"]["optional-dependencies"][name]
    return {r.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip() for r in reqs}


def test_the_postgres_extra_brings_what_the_store_imports() -> None:
    # stores/postgres.py imports psycopg and psycopg_pool (the distributions
    # psycopg and psycopg-pool); the redis store imports redis.
    assert {"psycopg", "psycopg-pool"} <= _extra("postgres")
    assert "redis" in _extra("redis")


@pytest.mark.parametrize(
    ("module", "url", "extra"),
    [
        ("psycopg_pool", "postgresql://u@127.0.0.1:1/db", "postgres"),
        ("psycopg", "postgresql://u@127.0.0.1:1/db", "postgres"),
        ("redis", "redis://127.0.0.1:1/0", "redis"),
    ],
)
def test_a_missing_store_package_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, url: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # a real ImportError on import
    want = rf"needs {module.replace('_', '-')}.*pip install \"rampart-registry\[{extra}\]\""
    if module == "redis":
        want = rf"needs redis-py.*pip install \"rampart-registry\[{extra}\]\""
    with pytest.raises(InvalidArgumentError, match=want) as err:
        Conversation.open(url, "c")
    assert isinstance(err.value, RampartError)
    with pytest.raises(InvalidArgumentError, match=want):
        rampart.BlockRegistry.open(url, "r")
