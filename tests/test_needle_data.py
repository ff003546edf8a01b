"""The needle-in-trajectory dataset (tests/data/needles, read by benches/needle_bench.py)
is intact: every source it names exists as recorded, every needle line is in its result
and nowhere else in its trajectory, the splits share no needle document, and no
question gives away its needle. Data only: no model, no compile."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("needle_bench", ROOT / "benches" / "needle_bench.py")
assert _spec is not None and _spec.loader is not None
needle_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(needle_bench)


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return needle_bench.load()


@pytest.fixture(scope="module")
def texts(doc: dict[str, Any]) -> dict[str, str]:
    return needle_bench.materialise(doc)


def test_every_source_exists_as_recorded(doc: dict[str, Any], texts: dict[str, str]) -> None:
    assert set(texts) == set(doc["sources"])
    for sid, s in doc["sources"].items():
        if s["kind"] == "file":
            assert (ROOT / s["path"]).is_file(), sid
            assert s["tool"] == "read_text_file" and s["arguments"]["path"] == f"/repo/{s['path']}"
        else:
            assert s["kind"] == "mcp_output" and s["tool"] in ("git_show", "git_log"), sid
        assert 1500 <= len(texts[sid].encode()) <= 20_000, (sid, len(texts[sid].encode()))
    used = {sid for t in doc["tasks"] for sid in t["trajectory"]}
    assert used == set(doc["sources"])  # nothing unused, nothing missing


def test_counts_per_kind_and_split(doc: dict[str, Any]) -> None:
    tasks = doc["tasks"]
    assert len(tasks) >= 48
    assert len({t["id"] for t in tasks}) == len(tasks)
    kinds = Counter(t["kind"] for t in tasks)
    assert kinds["old"] >= 20 and kinds["recent"] >= 12 and kinds["two"] >= 12, kinds
    assert set(kinds) == {"old", "recent", "two"}
    splits = Counter(t["split"] for t in tasks)
    assert set(splits) == {"tune", "holdout"}
    assert abs(splits["tune"] - splits["holdout"]) <= len(tasks) // 10, splits
    per = Counter((t["split"], t["kind"]) for t in tasks)
    for split in ("tune", "holdout"):
        for kind in ("old", "recent", "two"):
            assert per[split, kind] >= 5, (split, kind, per)
    labels = Counter(t["label"] for t in tasks)
    assert set(labels) == {"paraphrase", "lexical"} and labels["lexical"] >= 8, labels


def test_trajectories_and_needles(doc: dict[str, Any], texts: dict[str, str]) -> None:
    for t in doc["tasks"]:
        traj = t["trajectory"]
        n = len(traj)
        assert 20 <= n <= 40, t["id"]
        assert len(set(traj)) == n, t["id"]  # no result read twice
        steps = [x["step"] for x in t["needles"]]
        assert len(t["needles"]) == (2 if t["kind"] == "two" else 1), t["id"]
        assert len({x["source"] for x in t["needles"]}) == len(t["needles"]), t["id"]
        if t["kind"] == "recent":
            assert all(s >= n - 3 for s in steps), t["id"]
        else:
            assert all(s < n // 2 for s in steps), t["id"]
        for x in t["needles"]:
            assert traj[x["step"]] == x["source"], t["id"]
            result = texts[x["source"]]
            others = [texts[s] for i, s in enumerate(traj) if i != x["step"]]
            assert x["lines"], t["id"]
            for line in x["lines"]:
                assert line in result.split("\n"), (t["id"], line)  # a whole line, verbatim
                assert len(line.strip()) >= 8, (t["id"], line)
                assert not any(line.strip() in o for o in others), (t["id"], line)
        # the answer is in the needles' results only (some markers only exclude others)
        needle_steps = set(steps)
        assert t["unique"], t["id"]
        assert any(u in texts[traj[s]] for u in t["unique"] for s in needle_steps), t["id"]
        for u in t["unique"]:
            assert not any(u in texts[s] for i, s in enumerate(traj) if i not in needle_steps), (
                t["id"],
                u,
            )


def test_splits_share_no_needle_document(doc: dict[str, Any]) -> None:
    by_split: dict[str, set[str]] = {"tune": set(), "holdout": set()}
    for t in doc["tasks"]:
        by_split[t["split"]] |= {x["source"] for x in t["needles"]}
    assert not by_split["tune"] & by_split["holdout"]
    # the git logs overlap one another: all of them on one side
    logs = {s for s, srcs in by_split.items() for x in srcs if x.startswith("git_log:")}
    assert len(logs) <= 1


def test_questions_do_not_give_the_needle_away(doc: dict[str, Any]) -> None:
    for t in doc["tasks"]:
        q = t["question"]
        assert q.strip() and t["answer"].strip() and t["task"].strip(), t["id"]
        assert "call_" not in q, t["id"]
        for x in t["needles"]:
            s = doc["sources"][x["source"]]
            for line in x["lines"]:
                assert line.strip() not in q and line.strip() not in t["task"], t["id"]
            if s["kind"] == "file":
                for name in (s["path"], s["arguments"]["path"], Path(s["path"]).name):
                    assert name not in q, (t["id"], name)
            else:
                rev = s["arguments"].get("revision")
                assert rev is None or rev[:7] not in q, t["id"]
        for u in t["unique"]:
            assert u not in q and u not in t["task"], (t["id"], u)


def test_messages_are_openai_chat_pairs(doc: dict[str, Any], texts: dict[str, str]) -> None:
    t = doc["tasks"][0]
    steps = needle_bench.steps(t, doc, texts)
    assert steps[0] == [{"role": "user", "content": t["task"]}]
    assert steps[-1] == [{"role": "user", "content": t["question"]}]
    call, result = steps[1]
    assert call["tool_calls"][0]["id"] == result["tool_call_id"]
    assert result["content"] == texts[t["trajectory"][0]]
    # the evidence check finds a needle in a message and misses it elsewhere
    x = t["needles"][0]
    found = needle_bench.evidence([{"role": "tool", "content": texts[x["source"]]}], t)
    assert found[0] is True
    assert needle_bench.evidence([{"role": "user", "content": t["question"]}], t)[0] is False
