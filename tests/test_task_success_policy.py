"""What the task-success bench (benches/task_success.py) checks before any model runs:
whether the question's request holds the answer. Its pure helpers, and the default
policy on the bench's tune tasks with the real MiniLM: replayed as the agent compiles
them (one compile per step, then the question), in a window as small as the bench's,
the default must send what a commit question names (its id counts as an identifier,
the recall brings the header with the Date line) where the age-only policy has
cleared it. The model-free half of the bench; the model's answers are the bench's."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import rampart
from conftest import needs_model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benches"))
import task_success as ts  # benches/ is not a package

#: The bench's window less its Qwen2.5 chat-template preamble (2 048 - 397), counted
#: here in the registry's own o200k_base tokens.
WINDOW = 1651


def test_answers_in_and_the_dry_table() -> None:
    task = {"answers": [["13:39:13"], ["CHANGELOG.md", "changelog"]]}
    msgs = [
        {"role": "user", "content": "Date:   2026-12-01 13:39:13 +0000"},
        {"role": "tool", "tool_call_id": "c", "content": "+++ b/CHANGELOG.md"},
    ]
    assert ts._answers_in(msgs, task) == [True, True]
    assert ts._answers_in(msgs[:1], task) == [True, False]
    assert ts._answers_in([{"role": "user", "content": "13:39:130"}], task) == [False, False]
    rows = [
        {
            "family": "commit",
            "condition": c,
            "needles_in_question_request": [ok],
            "answers_in_question_request": [ok],
            "question_tokens": 100,
        }
        for c, ok in (("default", True), ("full", True), ("relevance_off", False))
    ]
    table = ts.dry_table(rows)
    assert "| commit | `default` | 1/1 | 1/1 | 100 |" in table
    assert "| all | `relevance_off` | 0/1 | 0/1 | 100 |" in table


def test_the_common_task_table_compares_only_tasks_every_condition_ran() -> None:
    def row(task: str, family: str, cond: str, ok: bool, tokens: int) -> dict[str, Any]:
        return {
            "task": task,
            "family": family,
            "split": "holdout",
            "condition": cond,
            "trial": 0,
            "temperature": 0.0,
            "outcome": "correct" if ok else "wrong",
            "tokens_sent": tokens,
            "question_tokens": tokens // 2,
            "cost": {"anthropic": tokens, "openai": tokens},
            "fits_window": cond != "full",
        }

    rows = [
        row("c1", "commit", "full", True, 300),
        row("c1", "commit", "default", True, 100),
        row("c2", "commit", "full", True, 300),
        row("c2", "commit", "default", False, 100),
        row("c3", "commit", "full", False, 300),  # default has not run it: left out
        row("f1", "file", "full", False, 200),
        row("f1", "file", "default", True, 100),
        row("f1", "file", "default", False, 100) | {"split": "tune"},  # other split
        row("t1", "two", "full", True, 300),  # a family default has not reached: no column
    ]
    pts, common, seen = ts.points(rows, "holdout")
    assert (common, seen) == (3, 5)
    assert [(p["condition"], p["success"], p["tasks"]) for p in pts] == [
        ("full", 2, 3),
        ("default", 2, 3),
    ]
    assert {r["task"] for r in pts[1]["rows"]} == {"c1", "c2", "f1"}
    table = ts.common_table(rows, "holdout").splitlines()
    assert table[0].startswith("| condition | commit (2) | file (1) | all (3) |")
    assert table[2].startswith("| `full` | 2 | 0 | **2** |")
    assert table[3].startswith("| `default` | 1 | 1 | **2** |")
    assert "| 267 |" in table[2] and "| 100 |" in table[3]
    assert table[2].endswith("| no |") and table[3].endswith("| yes |")


def _trial(
    task: str, trial: int, ok: bool, condition: str = "default", family: str = "file"
) -> dict[str, Any]:
    """One row of a pass^k run, as the bench writes it (the fields the tables read)."""
    return {
        "task": task,
        "family": family,
        "split": "holdout",
        "condition": condition,
        "trial": trial,
        "temperature": 0.7,
        "outcome": "correct" if ok else "wrong",
        "tokens_sent": 10,
        "question_tokens": 5,
        "cost": {"anthropic": 10, "openai": 10},
        "prefix_rewrites": 0,
        "fits_window": True,
        "recall_tool_calls": 0,
        "needles_in_final_request": [True],
        "needles_in_question_request": [True],
        "needles_tail_recalled": 0,
    }


def test_pass_k_counts_only_tasks_with_every_trial() -> None:
    rows = [_trial("a", 0, True), _trial("a", 1, True), _trial("a", 2, True)]
    rows += [_trial("b", 0, True), _trial("b", 1, False), _trial("b", 2, True)]
    rows += [_trial("c", 0, True)]  # the run stopped after its first trial: left out
    (fam, every) = [s for s in ts.summarise(rows) if s["condition"] == "default"]
    assert fam["family"] == "file" and every["family"] == "all"
    assert (fam["tasks"], fam["trials"], fam["success"]) == (2, 3, 1)
    assert "(pass^3)" in ts.table_md([fam])


def test_pass_k_table_compares_the_tasks_both_conditions_finished() -> None:
    rows = []
    for cond, oks in (("full", (True, True, True)), ("default", (True, True, False))):
        rows += [_trial("a", i, ok, cond) for i, ok in enumerate(oks)]
    for cond in ("full", "default"):  # a commit task both finished, right every time
        rows += [_trial("b", i, True, cond, "commit") for i in range(3)]
    # the run stopped inside task c: full's three trials ran, the default's first only
    rows += [_trial("c", i, True, "full", "two") for i in range(3)]
    rows += [_trial("c", 0, True, "default", "two")]
    rows += [{**_trial("a", 0, True), "temperature": 0.0}]  # a T=0 row is not a trial
    lines = ts.pass_k_table(rows).splitlines()
    assert lines[0].startswith("pass^3 at temperature 0.7, the 2 tasks")
    head = "| condition | commit (1) | file (1) | all (2) | 95 % CI (all) | trials right |"
    assert lines[2] == head
    assert lines[4] == "| `full` | 1 | 1 | **2** | 34–100 % | 6/6 |"
    assert lines[5] == "| `default` | 1 | 0 | **1** | 9–91 % | 5/6 |"
    assert ts.pass_k_table([r for r in rows if r["temperature"] == 0]).startswith("(no run")


def _question_request(
    reg: rampart.BlockRegistry, task: dict[str, Any], doc: Any, texts: Any, pol: Any
) -> list[dict[str, Any]]:
    conv = rampart.Conversation()
    for part in ts.transcript(task, doc, texts):
        conv.append(part)
        reg.compile(
            conversation=conv,
            context_window=WINDOW,
            reply_tokens=64,
            policy=pol,
            tools_in_prompt=False,
        )
    conv.append({"role": "user", "content": task["question"]})
    res = reg.compile(
        conversation=conv,
        context_window=WINDOW,
        reply_tokens=64,
        policy=pol,
        tools_in_prompt=False,
    )
    return [dict(m) for m in res.messages("openai_chat")]


@needs_model
@pytest.mark.parametrize("family", ["commit", "file"])
def test_the_default_sends_what_the_question_asks_where_age_clears_it(family: str) -> None:
    doc = ts.load()
    texts = ts.nb.materialise(doc)
    tasks = [t for t in doc["tasks"] if t["split"] == "tune" and t["family"] == family]
    reg, _ = ts.registry(rampart.OnnxEmbedder(threads=1))
    got = {"default": 0, "age": 0}
    for task in tasks:
        for name, pol in (
            ("default", rampart.ContextPolicy()),
            ("age", rampart.ContextPolicy(relevance=False)),
        ):
            msgs = _question_request(reg, task, doc, texts, pol)
            got[name] += all(ts._answers_in(msgs, task))
    # Measured here (o200k counts, so not the bench's numbers exactly): the
    # default holds 12 of 12 commit answers and 8 of 8 file answers, the age-only
    # policy 4 and 2. Before this round's identifier weight and recall changes
    # the default held 9 and 7 (this test failed on the commit tasks).
    assert got["default"] >= len(tasks) - 1, got
    assert got["age"] <= len(tasks) // 2, got


def test_token_shares_count_the_requests_full_context_overflows() -> None:
    run = {"window": 100, "reply": 10}  # full context overflows a request over 90 tokens

    def row(task: str, cond: str, steps: list[int], question: int) -> dict[str, Any]:
        return {
            **_trial(task, 0, True, cond),
            "temperature": 0.0,
            "step_tokens": steps,
            "question_tokens": question,
            "run": run,
        }

    rows = [
        row("a", "full", [50, 80, 120, 160], 160),
        row("a", "default", [50, 80, 60, 70], 70),
        row("b", "full", [60, 200], 200),
        row("b", "default", [60, 50], 50),
        row("c", "default", [10], 10),  # no full row for c: not compared
        row("a", "trim_messages", [50, 80, 90, 90], 90),
    ]
    del rows[-1]["step_tokens"]  # a row written before every request was counted
    lines = ts.token_shares(rows).splitlines()
    # whole run 370/670; overflowing requests (120, 160, 200) 180/480; questions 120/360
    assert lines[2] == "| `default` | 2 | 55 % | 38 % | 33 % |"
    assert len(lines) == 3
    assert ts.token_shares(rows[:1]).startswith("(no condition")
