"""Issue 36: the promises of relevance, recall, the CLI, ``observe_usage``, the
policy and the integrations hold under hostile input. Text enters at one place
per kind: a caller's argument is refused naming it (``rampart._args.text``), a
model's text is repaired, lone surrogates as U+FFFD (``rampart._args.repaired``);
files are read through one reader (``rampart._files``). Hypothesis fuzzes the
entries whose input space is large (surrogates and odd Unicode at every entry of
relevance and recall; usage shapes), each for ``RAMPART_FUZZ_SECONDS``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import rampart
from hypothesis import given
from hypothesis import strategies as st
from rampart import ContextPolicy, Conversation
from rampart.conversation import answer_recall
from rampart.errors import InvalidArgumentError, RampartError, RegistryFileError
from rampart.relevance import LexicalIndex, PassageIndex, terms

from tests.conftest import ROOT, SEEDS, words
from tests.test_hardening import ROUND, SECONDS, run_for

np = pytest.importorskip("numpy")

SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)
#: Odd Unicode: line and paragraph separators, BOM, NUL and controls, combining
#: marks, right-to-left text, astral letters and emoji, CJK, full-width digits.
ODD = st.sampled_from(
    list("\u2028\u2029\ufeff\x00\x1f\x7f\u0301\u200d\u202e\u05d0\U0001d400\U0001f600\u4e2d\uff11")
)
TEXT = st.text(st.one_of(st.characters(), SURROGATES, ODD, st.sampled_from(list("ab_ C."))))


def _lone(s: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in s)


def _conv_with_results(tokeniser: Any = words) -> Conversation:
    c = Conversation(tokeniser=tokeniser)
    c.append({"role": "user", "content": "read the config"})
    for i, body in enumerate(["timeout = 30\nretries = 4", "def load_config(path):\n  ..."]):
        c.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "read", "arguments": '{"p": "x"}'},
                    }
                ],
            }
        )
        c.append({"role": "tool", "tool_call_id": f"c{i}", "content": body})
    return c


# ---- 1. a recall call: an error *result*, never an exception ------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        {"query": "x \ud800"},
        '{"query": "x \\ud800"}',
        {"call_id": "c0", "query": "retries \udfff"},
        '{"call_id": "c\\udc80"}',
        b'{"query": "timeout \\ud800"}',
        {"query": "\ud800"},
    ],
)
def test_a_recall_with_a_lone_surrogate_is_answered(arguments: Any) -> None:
    c = _conv_with_results()
    n = len(c.log)
    answer = answer_recall(c, arguments)
    assert isinstance(answer, str) and answer
    answer.encode("utf-8")  # text a body can carry
    assert len(c.log) == n
    if "timeout" in str(arguments):
        assert "timeout = 30" in answer  # the surrogate became U+FFFD; the rest still matches


def test_recall_takes_a_surrogate_call_id_as_the_conversation_recorded_it() -> None:
    c = Conversation(tokeniser=words)
    c.append({"role": "user", "content": "go"})
    call = {"id": "c\ud800", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    c.append({"role": "assistant", "content": None, "tool_calls": [call]})
    c.append({"role": "tool", "tool_call_id": "c\ud800", "content": "the answer"})
    assert "the answer" in answer_recall(c, '{"call_id": "c\\ud800"}')


def _fuzz_recall(c: Conversation) -> None:
    n = len(c.log)

    @ROUND
    @given(TEXT, TEXT, st.integers(0, 3))
    def fuzz(query: str, call_id: str, shape: int) -> None:
        args: Any = {"query": query, "call_id": call_id}
        if shape == 1:
            args = {"query": query}
        elif shape == 2:  # what a model writes: JSON text, surrogates as escapes
            args = json.dumps({"query": query})
        elif shape == 3:
            args = json.dumps({"call_id": call_id}).encode()
        answer = answer_recall(c, args)
        assert isinstance(answer, str)
        answer.encode("utf-8")
        assert len(c.log) == n

    fuzz()


def test_fuzz_recall_with_surrogates_and_odd_unicode() -> None:
    c = _conv_with_results()
    run_for(SECONDS, lambda: _fuzz_recall(c))


# ---- 2. relevance and compile: every error a RampartError ---------------------------------


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: terms("\ud800 abc"), "text"),
        (lambda: terms(5), "text"),
        (lambda: terms(b"abc"), "text"),
        (lambda: LexicalIndex().scores("abc \udfff"), "query"),
        (lambda: LexicalIndex().scores(None), "query"),
        (lambda: LexicalIndex().add(["fine", "bad \ud800"]), r"documents\[1\]"),
        (lambda: LexicalIndex().add([1]), r"documents\[0\]"),
        (lambda: LexicalIndex().add("one string"), "documents"),
        (lambda: LexicalIndex().add(None), "documents"),
        (lambda: PassageIndex().score("x \ud800", []), "query"),
    ],
)
def test_relevance_entries_refuse_what_is_not_text(call: Any, named: str) -> None:
    with pytest.raises(InvalidArgumentError, match=named):
        call()


def test_a_refused_add_adds_nothing() -> None:
    ix = LexicalIndex()
    ix.add(["alpha beta"])
    with pytest.raises(InvalidArgumentError):
        ix.add(["gamma", "delta \ud800"])
    assert len(ix) == 1 and ix.add(["gamma"]) == 1


def _fuzz_relevance() -> None:
    @ROUND
    @given(TEXT, st.lists(TEXT, max_size=4))
    def fuzz(query: str, docs: list[str]) -> None:
        ix = LexicalIndex()
        try:
            ix.add(["base text", *docs])
            assert not any(_lone(d) for d in docs)
        except InvalidArgumentError:
            assert any(_lone(d) for d in docs)
            assert len(ix) == 0
        for call in (lambda: terms(query), lambda: ix.scores(query)):
            try:
                out = call()
                assert not _lone(query)
                assert all(isinstance(x, (str, float)) for x in out)
            except InvalidArgumentError:
                assert _lone(query)

    fuzz()


def test_fuzz_relevance_entries_with_surrogates_and_odd_unicode() -> None:
    run_for(SECONDS, _fuzz_relevance)


@pytest.fixture
def reg() -> Any:
    r = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None)
    r.write_block("check the worktree first", "worktree")
    yield r
    r.release()


@pytest.mark.parametrize("task", ["x \ud800", {"task": 1}, 3, b"x", ["x"]])
@pytest.mark.parametrize("with_conversation", [False, True])
def test_compile_refuses_a_task_text_that_is_not_text(
    reg: Any, task: Any, with_conversation: bool
) -> None:
    import asyncio

    c = _conv_with_results()
    n = len(c.log)
    kw: dict[str, Any] = {"conversation": c, "context_window": 40} if with_conversation else {}
    with pytest.raises(InvalidArgumentError, match="task_text"):
        reg.compile(task_text=task, **kw)
    with pytest.raises(InvalidArgumentError, match="task_text"):
        asyncio.run(reg.acompile(task_text=task, **kw))
    with pytest.raises(InvalidArgumentError, match="task_text"):
        reg.compile_dry_run(task_text=task)
    assert len(c.log) == n  # nothing recorded


def _fuzz_compile(reg: Any) -> None:
    @ROUND
    @given(TEXT)
    def fuzz(task: str) -> None:
        c = _conv_with_results()
        try:
            reg.compile(task_text=task, conversation=c, context_window=30)
            assert not _lone(task)
        except InvalidArgumentError:
            assert _lone(task)
        except RampartError:  # an overflow, say: typed
            pass

    fuzz()


def test_fuzz_compile_task_text(reg: Any) -> None:
    run_for(SECONDS, lambda: _fuzz_compile(reg))


# ---- 3. the CLI reads through the one reader of untrusted files ---------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_cli_refuses_a_fifo_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "chat.json"
    os.mkfifo(fifo)
    for target in (str(fifo), "/dev/zero"):
        if not os.path.exists(target):
            continue
        proc = subprocess.run(
            [sys.executable, "-m", "rampart", "compile", str(SEEDS), "--conversation", target],
            capture_output=True,
            text=True,
            timeout=120,  # it hung for ever before
            env={**os.environ, "PYTHONPATH": str(ROOT / "python")},
        )
        assert proc.returncode == 2, proc.stderr
        assert "not a regular file" in proc.stderr and target in proc.stderr


# ---- 4. one odd count cannot swing the budget ---------------------------------------------


def _long_conversation() -> Conversation:
    c = Conversation()
    for i in range(30):
        c.append({"role": "user" if i % 2 == 0 else "assistant", "content": "word " * 240})
    return c


def test_a_zero_count_changes_nothing() -> None:
    reg = rampart.BlockRegistry(default_max_tokens=None)
    c = _long_conversation()
    before = reg.compile(conversation=c, context_window=8000, reply_tokens=500)._context.budget
    n = len(c.log)
    for usage in ({"prompt_tokens": 0}, {"input_tokens": 1}, {"promptTokenCount": 10**30}):
        assert c.observe_usage(usage) is None
        after = reg.compile(conversation=c, context_window=8000, reply_tokens=500)._context.budget
        assert after == before
    assert len(c.log) == n  # nothing learned, nothing recorded
    reg.release()


def test_one_odd_count_moves_the_budget_one_step_at_most() -> None:
    reg = rampart.BlockRegistry(default_max_tokens=None)
    c = _long_conversation()
    before = reg.compile(conversation=c, context_window=8000, reply_tokens=500)._context.budget
    predicted = c._last_compile[1]
    c.observe_usage({"prompt_tokens": int(predicted * 0.3)})  # possible, but odd
    low = reg.compile(conversation=c, context_window=8000, reply_tokens=500)._context.budget
    assert c.scale("openai") == pytest.approx(1 / 1.25)
    assert before < low <= before * 1.25 + 1
    # a real change is still learned, over a few calls
    for _ in range(6):
        c.observe_usage({"prompt_tokens": int(c._last_compile[1] * 0.5)})
        reg.compile(conversation=c, context_window=8000, reply_tokens=500)
    assert c.scale("openai") == pytest.approx(0.5, abs=0.05)
    reg.release()


COUNTS = st.one_of(
    st.integers(-5, 40_000),
    st.integers(0, 10**40),
    st.just(0),
    st.booleans(),
    st.floats(allow_nan=True),
    st.none(),
    st.text(max_size=3),
    st.integers(0, 20_000).map(np.int64),
)
KEYS = st.sampled_from(
    ["prompt_tokens", "input_tokens", "promptTokenCount", "prompt_token_count", "other"]
)


class _Usage:
    """A provider SDK's usage object (attributes, not keys)."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


def _fuzz_usage(reg: Any) -> None:
    @ROUND
    @given(
        st.lists(
            st.tuples(
                st.dictionaries(
                    st.one_of(
                        KEYS,
                        st.sampled_from(["cache_creation_input_tokens", "cache_read_input_tokens"]),
                    ),
                    COUNTS,
                    max_size=4,
                ),
                st.booleans(),
            ),
            min_size=1,
            max_size=5,
        ),
        st.sampled_from(["openai", "anthropic", "gemini", "local"]),
    )
    def fuzz(usages: list[tuple[dict[str, Any], bool]], provider: str) -> None:
        c = Conversation()
        c.append({"role": "user", "content": "word " * 300})
        pol = ContextPolicy(provider=provider)
        for usage, as_object in usages:
            r = reg.compile(conversation=c, context_window=8000, policy=pol)
            scale, const = r._context.scale, c.constant(provider)
            predicted = c._last_compile[1]
            try:
                c.observe_usage(_Usage(**usage) if as_object else usage)
            except InvalidArgumentError:
                continue
            s, k = c._scale.get(provider, scale), c.constant(provider)
            assert 0.25 <= s <= 4 and 0 <= k <= 1e6
            assert scale / 1.25 - 1e-6 <= s <= scale * 1.25 + 1e-6
            assert abs(k - const) <= max(256, predicted / 8) + 1e-6
        # the log replays: every scale entry it recorded passes the load checks
        again = Conversation(tokeniser=c.tokeniser)
        again._replay(c.log, "fuzz")
        assert again._scale == c._scale

    fuzz()


def test_fuzz_usage_shapes() -> None:
    reg = rampart.BlockRegistry(default_max_tokens=None)
    try:
        run_for(SECONDS, lambda: _fuzz_usage(reg))
    finally:
        reg.release()


def test_numpy_counts_are_counts() -> None:
    reg = rampart.BlockRegistry(default_max_tokens=None)
    c = _long_conversation()
    reg.compile(conversation=c, context_window=8000)
    predicted = c._last_compile[1]
    assert c.observe_usage({"prompt_tokens": np.int64(int(predicted * 1.1))}) == pytest.approx(
        1.1, rel=1e-3
    )
    with pytest.raises(InvalidArgumentError):
        c.observe_usage({"prompt_tokens": float(predicted)})
    reg.release()


# ---- 5. numpy scalars are numbers ---------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "keep_relevant",
        "recall_max_tokens",
        "excerpt_tokens",
        "keep_tool_results",
        "clear_at_least",
        "horizon_calls",
        "compact_max_tokens",
    ],
)
def test_policy_counts_take_numpy_integers(name: str) -> None:
    for value in (np.int64(3), np.int32(3), np.uint8(3)):
        pol = ContextPolicy(**{name: value})
        assert getattr(pol, name) == 3 and type(getattr(pol, name)) is int
    for bad in (True, np.bool_(True), 3.0, np.float64(3), "3", -1, np.int64(-1)):
        with pytest.raises(InvalidArgumentError, match=name):
            ContextPolicy(**{name: bad})


def test_a_policy_of_numpy_integers_compiles(reg: Any) -> None:
    c = _conv_with_results()
    pol = ContextPolicy(keep_relevant=np.int64(1), excerpt_tokens=np.int64(5))
    r = reg.compile(conversation=c, context_window=60, policy=pol)
    assert r.messages("openai_chat")


# ---- 6. a conversation file: a NaN names its entry ----------------------------------------


def _saved(tmp_path: Path) -> Path:
    c = _conv_with_results("o200k_base")  # a tokeniser the CLI can name too
    path = tmp_path / "c.json"
    c.save(path)
    return path


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda log: log[2].__setitem__("time", "NaN"), r"log entry 2: entry\.time is NaN"),
        (lambda log: log[1].__setitem__("time", "-Infinity"), r"log entry 1: entry\.time"),
        (
            lambda log: log[3]["groups"][0][0].__setitem__("extra", "Infinity"),
            r"log entry 3: entry\.groups\[0\]\[0\]\.extra is Infinity",
        ),
    ],
)
def test_a_non_finite_number_in_a_file_names_the_entry(
    tmp_path: Path, edit: Any, named: str
) -> None:
    path = _saved(tmp_path)
    data = json.loads(path.read_text())
    edit(data["log"])
    text = json.dumps(data)
    for token in ("NaN", "-Infinity", "Infinity"):
        text = text.replace(f'"{token}"', token)
    path.write_text(text)
    with pytest.raises(RegistryFileError, match=named):
        Conversation.load(path)
    # the CLI says the same, in one line
    proc = subprocess.run(
        [sys.executable, "-m", "rampart", "compile", str(SEEDS), "--conversation", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "python")},
    )
    assert proc.returncode == 2
    assert "log entry" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_an_infinite_float_in_a_file_names_the_entry(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    text = path.read_text().replace('"time":', '"time":1e999,"was":', 1)
    path.write_text(text)
    with pytest.raises(RegistryFileError, match="log entry 0: time must be a finite number"):
        Conversation.load(path)
