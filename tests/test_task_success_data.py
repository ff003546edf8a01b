"""The task-success dataset (tests/data/task_success, read by benches/task_success.py) is
intact: every source exists as recorded and is 0.5-3 KB, every answer is on its
needle line and in no other result of its trajectory, the splits share no needle
source, no question or request gives an answer away, and the counts are what the
README says. Data and the bench's pure helpers only: no model, no compile."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benches"))
_spec = importlib.util.spec_from_file_location("task_success", ROOT / "benches" / "task_success.py")
assert _spec is not None and _spec.loader is not None
ts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ts)


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return ts.load()


@pytest.fixture(scope="module")
def texts(doc: dict[str, Any]) -> dict[str, str]:
    return ts.nb.materialise(doc)


def test_sources_exist_as_recorded_and_are_small(
    doc: dict[str, Any], texts: dict[str, str]
) -> None:
    assert set(texts) == set(doc["sources"])
    for sid, s in doc["sources"].items():
        if s["kind"] == "file":
            assert s["tool"] == "read_text_file" and s["arguments"]["path"] == f"/repo/{s['path']}"
            head = s["arguments"].get("head")
            assert sid == f"file:{s['path']}" + (f"#head={head}" if head else "")
        else:
            assert s["kind"] == "mcp_output" and s["tool"] in ("git_show", "git_log"), sid
        assert 500 <= len(texts[sid].encode()) <= 3072, (sid, len(texts[sid].encode()))


def test_counts_splits_and_families(doc: dict[str, Any]) -> None:
    tasks = doc["tasks"]
    assert len({t["id"] for t in tasks}) == len(tasks)
    by = Counter((t["split"], t["family"]) for t in tasks)
    assert by[("holdout", "commit")] == 30 and by[("holdout", "file")] == 24
    assert by[("holdout", "two")] == 24 and sum(by[("tune", f)] for f in ts.FAMILIES) == 28
    for f in ts.FAMILIES:
        assert by[("holdout", f)] >= 24 and by[("tune", f)] >= 8
    needles: dict[str, set[str]] = {"tune": set(), "holdout": set()}
    for t in tasks:
        assert t["id"].startswith(t["split"] + "-" + t["family"] + "-")
        needles[t["split"]].update(n["source"] for n in t["needles"])
    assert not needles["tune"] & needles["holdout"]  # split by source


def test_each_answer_is_on_its_needle_line_and_nowhere_else(
    doc: dict[str, Any], texts: dict[str, str]
) -> None:
    for t in doc["tasks"]:
        traj = t["trajectory"]
        assert 6 <= len(traj) <= 8 and len(set(traj)) == len(traj), t["id"]
        assert len(t["needles"]) == (2 if t["family"] == "two" else 1)
        for n in t["needles"]:
            assert traj[n["step"]] == n["source"]
            for line in n["lines"]:
                assert line in texts[n["source"]].split("\n"), (t["id"], line)
        if t["position"] == "recent":
            assert t["needles"][0]["step"] == len(traj) - 1
        else:  # old and two: the first half of the run
            assert all(n["step"] < len(traj) // 2 for n in t["needles"]), t["id"]
        lines = "\n".join(line for n in t["needles"] for line in n["lines"])
        for group in t["answers"]:
            assert any(ts.mentions(lines, a) for a in group), (t["id"], group)
        for a in t["exclusive"]:
            holders = [s for s in traj if ts.mentions(texts[s], a)]
            # a spelling of an answer is in a needle's result or nowhere ("thirty-one")
            assert set(holders) <= {n["source"] for n in t["needles"]}, (t["id"], a, holders)
            assert not ts.mentions(t["question"], a) and not ts.mentions(t["task"], a)


def test_generator_reproduces_the_file(tmp_path: Path) -> None:
    """make_tasks.py is what wrote tasks.json: rerun, the same tasks."""
    script = ROOT / "tests" / "data" / "task_success" / "make_tasks.py"
    out = tmp_path / "tasks.json"
    subprocess.run([sys.executable, str(script), "--out", str(out)], check=True, cwd=ROOT)
    assert json.loads(out.read_text()) == ts.load()


def test_judge_and_wilson() -> None:
    assert ts.judge("The limit is 72 characters.", [["72"]], called=False) == "correct"
    assert ts.judge("1722", [["72"]], called=False) == "wrong"
    assert ts.judge("Lora, falling back to Georgia", [["lora"], ["georgia"]], True) == (
        "correct_after_tool"
    )
    assert ts.judge("Lora", [["lora"], ["georgia"]], called=False) == "wrong"
    assert ts.judge("I cannot tell: it was cleared.", [["72"]], called=False) == "unknown"
    assert ts.mentions("480x480", "480") and not ts.mentions("10.95", "0.95")
    lo, hi = ts.wilson(21, 24)
    assert 0.68 < lo < 0.70 and 0.95 < hi < 0.96  # the textbook interval of 21/24
    assert ts.wilson(0, 0) == (0.0, 1.0)


def test_anthropic_clear_tool_uses_semantics() -> None:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(5):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "t", "arguments": "{}"}}
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "x" * 100},
        ]

    def count(ms: list[dict[str, Any]]) -> int:
        return sum(len(str(m.get("content") or "")) for m in ms)

    assert ts.anthropic_clear_tool_uses(msgs, count, trigger=10_000) is msgs  # under trigger
    out = ts.anthropic_clear_tool_uses(msgs, count, trigger=100)
    cleared = [m["tool_call_id"] for m in out if m.get("content") == ts.PLACEHOLDER]
    assert cleared == ["c0", "c1"]  # the oldest, all but the last 3 uses
    assert msgs[2]["content"] == "x" * 100  # the history is left as it was
    assert [m.get("tool_calls") for m in out] == [m.get("tool_calls") for m in msgs]  # inputs stay
    # clear_at_least: nothing unless that much would go
    assert ts.anthropic_clear_tool_uses(msgs, count, trigger=100, clear_at_least=500) is msgs
    excl = ts.anthropic_clear_tool_uses(msgs, count, trigger=100, exclude_tools=("t",))
    assert excl == msgs


def _first(doc: dict[str, Any], kind: str) -> dict[str, Any]:
    """The first source of ``kind`` in the set (to break it)."""
    return next(s for s in doc["sources"].values() if s["kind"] == kind)


def _one_task(doc: dict[str, Any]) -> dict[str, Any]:
    """A task set of one real task (a two-part one: two needles), deep-copied."""
    task = next(t for t in doc["tasks"] if t["family"] == "two")
    return json.loads(json.dumps({**doc, "tasks": [task]}))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("sources"), "'sources'"),
        (lambda d: d.update(tasks=[]), "'tasks' must be a non-empty list"),
        (lambda d: d["tasks"][0].update(family="three"), "family must be one of"),
        (lambda d: d["tasks"][0].update(split="train"), "split must be"),
        (lambda d: d["tasks"][0].pop("question"), "'question' must be a non-empty string"),
        (lambda d: d["tasks"].append(dict(d["tasks"][0])), "the id is used twice"),
        (lambda d: d["tasks"][0]["trajectory"].append("file:nowhere.md"), "does not hold"),
        (lambda d: d["tasks"][0]["needles"][1].update(step=99), "must index the trajectory"),
        (lambda d: d["tasks"][0]["needles"][1].update(step=True), "must index the trajectory"),
        (lambda d: d["tasks"][0]["needles"][0].update(step=1), "'source' is not the trajectory"),
        (lambda d: d["tasks"][0]["needles"][0].update(lines=[" "]), "'lines' must be"),
        (lambda d: d["tasks"][0].update(answers=[["31"], []]), "'answers' must be"),
        (lambda d: d["tasks"][0].pop("position"), "position must be one of"),
        (lambda d: _first(d, "file").update(kind="http"), "'kind' is 'file' or 'mcp_output'"),
        (lambda d: _first(d, "file").update(path="../../etc/passwd"), "inside the repository"),
        (lambda d: _first(d, "file").update(path="/etc/passwd"), "inside the repository"),
        (lambda d: _first(d, "file").update(blob="--batch"), "must be a git blob id"),
        (lambda d: _first(d, "file")["arguments"].update(head=0), "positive line count"),
        (lambda d: _first(d, "file").update(arguments=["path"]), "'arguments' an object"),
        (lambda d: _first(d, "mcp_output").update(file="/tmp/x.json"), "inside the repository"),
        (lambda d: _first(d, "mcp_output").update(sha256="ab" * 31), "64 lowercase hex"),
    ],
)
def test_a_bad_task_set_is_named_by_file_and_task(
    doc: dict[str, Any], tmp_path: Path, mutate: Any, message: str
) -> None:
    bad = _one_task(doc)
    name = bad["tasks"][0]["id"]
    mutate(bad)
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(ts.ParseError, match=message) as e:
        ts.load(path)
    assert e.value.path == str(path) and str(path) in str(e.value)
    assert repr(name) in str(e.value) or "the set" in str(e.value) or "source '" in str(e.value)


def test_a_needle_its_source_does_not_hold_and_an_unreadable_set(
    doc: dict[str, Any], tmp_path: Path
) -> None:
    good = _one_task(doc)
    ts.check_tasks(good)  # the real task passes
    assert set(ts.texts_of(good, "t.json")) == set(doc["sources"])
    good["tasks"][0]["needles"][0]["lines"] = ["a line no source holds"]
    with pytest.raises(ts.ParseError, match=r"is not in (file|git_)"):
        ts.texts_of(good, "t.json")
    path = tmp_path / "cut.json"
    path.write_text('{"sources": {}, "tasks": [', encoding="utf-8")
    with pytest.raises(ts.ParseError, match="cannot read the task set") as e:
        ts.load(path)
    assert str(path) in str(e.value)


def _nodes(x: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document, as the keys and indexes that reach it."""
    out = [at]
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
    for k, v in items:
        out += _nodes(v, (*at, k))
    return out


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 99) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=5,
)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_mangled_task_set_is_loaded_or_named_never_a_traceback(
    data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Another writer's set is input from a stranger: whatever one mangled place in a
    # real task does to it, loading it gives the set or a ParseError naming the
    # file, never a KeyError or TypeError from deep in the bench.
    doc = _one_task(ts.load())
    task = doc["tasks"][0]
    doc["sources"] = {k: v for k, v in doc["sources"].items() if k in task["trajectory"]}
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.sampled_from(_nodes(doc)[1:]))
        parent = doc
        for k in at[:-1]:
            parent = parent[k]
        if data.draw(st.booleans()):
            parent[at[-1]] = data.draw(_JSON)
        else:
            del parent[at[-1]]
    path = tmp_path_factory.mktemp("set") / "tasks.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    try:
        texts = ts.texts_of(ts.load(path), path)
    except ts.ParseError as e:
        assert str(path) in str(e)
    else:
        assert set(texts) == set(doc["sources"])


def test_a_set_too_deep_or_too_large_is_refused_before_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(ts.ParseError, match="cannot read the task set"):
        ts.load(deep)
    monkeypatch.setattr(ts, "_MAX_SET_BYTES", 1000)
    with pytest.raises(ts.ParseError, match="larger than 1000 bytes"):
        ts.load(ROOT / "tests/data/task_success/tasks.json")
