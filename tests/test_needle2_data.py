"""The second needle set (tests/data/needles2, read by benches/needle_bench.py --data) is
intact: every recorded MCP output matches its sha256 pin, every needle line is a whole
line of its result at the step stated and occurs in no other result of the trajectory,
the splits share no needle document, at least ten questions are in a language other
than English (asked of a document in that language), and tasks.json is what
make_tasks.py builds from the recorded outputs. Data only: no model, no compile."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import rampart

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "needles2"
TASKS = DATA / "tasks.json"
_spec = importlib.util.spec_from_file_location("needle_bench", ROOT / "benches" / "needle_bench.py")
assert _spec is not None and _spec.loader is not None
needle_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(needle_bench)

SERVERS = {
    "mcp-server-fetch": {"fetch"},
    "mcp-server-git": {"git_show"},
    "mcp-alchemy": {"execute_query", "schema_definitions"},
}
# The question's script, by language: a Chinese question is written in Han characters,
# a Russian one in Cyrillic, and so on (an English question about a Chinese page is a
# cross-language task, labelled as such).
SCRIPT = {
    "zh": re.compile(r"[\u4e00-\u9fff]"),
    "ja": re.compile(r"[\u3040-\u30ff]"),
    "ru": re.compile(r"[\u0400-\u04ff]"),
    "de": re.compile(r"[äöüßÄÖÜ]|\b(?:die|der|und|ich|wie|wir|nicht|Sie|ist|ein|mit)\b"),
    "es": re.compile(r"[¿ñáéíóú]|\b(?:el|la|los|las|que|qué|de|como|si|se)\b"),
}


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return needle_bench.load(TASKS)


@pytest.fixture(scope="module")
def texts(doc: dict[str, Any]) -> dict[str, str]:
    return needle_bench.materialise(doc)


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    with gzip.open(DATA / "outputs.json.gz", "rt", encoding="utf-8") as f:
        return json.load(f)


def test_recorded_outputs_match_their_pins(recorded: dict[str, Any]) -> None:
    outputs = recorded["outputs"]
    assert len({o["id"] for o in outputs}) == len(outputs)
    for o in outputs:
        assert hashlib.sha256(o["text"].encode()).hexdigest() == o["sha256"], o["id"]
        assert o["tool"] in SERVERS[o["server"]], o["id"]
    # one call per (tool, arguments): the bench finds a result by them
    keys = [(o["tool"], json.dumps(o["arguments"], sort_keys=True)) for o in outputs]
    assert len(set(keys)) == len(keys)
    assert set(recorded["servers"]) >= {"mcp", "mcp-server-fetch", "mcp-server-git", "mcp-alchemy"}


def test_every_source_exists_as_recorded(doc: dict[str, Any], texts: dict[str, str]) -> None:
    assert set(texts) == set(doc["sources"])
    for sid, s in doc["sources"].items():
        assert s["kind"] == "mcp_output" and s["file"] == "tests/data/needles2/outputs.json.gz"
        assert s["tool"] in SERVERS[s["server"]], sid
        assert hashlib.sha256(texts[sid].encode()).hexdigest() == s["sha256"], sid
        assert 1500 <= len(texts[sid].encode()) <= 18_000, (sid, len(texts[sid].encode()))
    used = {sid for t in doc["tasks"] for sid in t["trajectory"]}
    assert used == set(doc["sources"])
    servers = Counter(s["server"] for s in doc["sources"].values())
    assert set(servers) == set(SERVERS), servers


def test_a_changed_output_is_refused(doc: dict[str, Any]) -> None:
    sid, s = next(iter(doc["sources"].items()))
    bad = {"sources": {sid: {**s, "sha256": "0" * 64}}}
    with pytest.raises(ValueError, match="changed"):
        needle_bench.materialise(bad)


def test_counts_per_kind_split_and_language(doc: dict[str, Any]) -> None:
    tasks = doc["tasks"]
    assert len(tasks) >= 40
    assert len({t["id"] for t in tasks}) == len(tasks)
    assert set(Counter(t["kind"] for t in tasks)) == {"old", "recent", "two"}
    splits = Counter(t["split"] for t in tasks)
    assert set(splits) == {"tune", "holdout"} and splits["tune"] == splits["holdout"], splits
    per = Counter((t["split"], t["kind"]) for t in tasks)
    for split in ("tune", "holdout"):
        for kind in ("old", "recent", "two"):
            assert per[split, kind] >= 5, (split, kind, per)
    labels = Counter(t["label"] for t in tasks)
    assert set(labels) == {"paraphrase", "lexical"} and labels["lexical"] >= 8, labels
    foreign = [t for t in tasks if t["lang"] != "en"]
    assert len(foreign) >= 10
    for split in ("tune", "holdout"):
        assert sum(t["split"] == split for t in foreign) >= 5, split
    assert len({t["lang"] for t in foreign}) >= 4
    cross = [t for t in tasks if t["cross_language"]]
    assert {t["split"] for t in cross} == {"tune", "holdout"}


def test_languages_are_what_they_say(doc: dict[str, Any]) -> None:
    for t in doc["tasks"]:
        langs = {doc["sources"][x["source"]]["lang"] for x in t["needles"]}
        assert sorted(langs) == t["doc_lang"], t["id"]
        # a question in a language asks of a document in that language; an English
        # question of a non-English document is cross-language, and labelled so
        assert t["cross_language"] == (t["lang"] not in langs), t["id"]
        if t["lang"] == "en":
            assert t["question"].isascii(), t["id"]
        else:
            assert SCRIPT[t["lang"]].search(t["question"]), t["id"]
            for x in t["needles"]:
                line = " ".join(x["lines"])
                assert SCRIPT[t["lang"]].search(line), (t["id"], x["id"])


def test_trajectories_and_needles(doc: dict[str, Any], texts: dict[str, str]) -> None:
    for t in doc["tasks"]:
        traj = t["trajectory"]
        n = len(traj)
        assert 20 <= n <= 40, t["id"]
        assert len(set(traj)) == n, t["id"]
        total = sum(rampart.count_tokens(texts[s], "o200k_base") for s in traj)
        assert 36_000 <= total <= 84_000, (t["id"], total)
        assert total == t["result_tokens"], t["id"]
        steps = [x["step"] for x in t["needles"]]
        assert len(t["needles"]) == (2 if t["kind"] == "two" else 1), t["id"]
        assert len({x["source"] for x in t["needles"]}) == len(t["needles"]), t["id"]
        if t["kind"] == "recent":
            assert all(s >= n - 3 for s in steps), t["id"]
        else:
            assert all(s < n // 2 for s in steps), t["id"]
        for x in t["needles"]:
            assert traj[x["step"]] == x["source"], t["id"]  # exactly where stated
            result = texts[x["source"]]
            others = [texts[s] for i, s in enumerate(traj) if i != x["step"]]
            assert x["lines"], t["id"]
            for line in x["lines"]:
                assert line in result.split("\n"), (t["id"], line)  # a whole line, verbatim
                assert len(line.strip()) >= 8, (t["id"], line)
                assert not any(line.strip() in o for o in others), (t["id"], line)
        needle_steps = set(steps)
        assert t["unique"], t["id"]
        for u in t["unique"]:
            assert any(u in texts[traj[s]] for s in needle_steps), (t["id"], u)
            assert not any(u in texts[s] for i, s in enumerate(traj) if i not in needle_steps), (
                t["id"],
                u,
            )


def test_splits_share_no_needle_document(doc: dict[str, Any]) -> None:
    by_split: dict[str, set[str]] = {"tune": set(), "holdout": set()}
    for t in doc["tasks"]:
        by_split[t["split"]] |= {x["source"] for x in t["needles"]}
    assert by_split["tune"] and by_split["holdout"]
    assert not by_split["tune"] & by_split["holdout"]


def test_questions_do_not_give_the_needle_away(doc: dict[str, Any]) -> None:
    for t in doc["tasks"]:
        q = t["question"]
        assert q.strip() and t["answer"].strip() and t["task"].strip(), t["id"]
        assert "call_" not in q and "http://127.0.0.1" not in q, t["id"]
        for x in t["needles"]:
            s = doc["sources"][x["source"]]
            for line in x["lines"]:
                assert line.strip() not in q and line.strip() not in t["task"], t["id"]
            rev = s["arguments"].get("revision")
            assert rev is None or rev[:7] not in q, t["id"]
            url = s["arguments"].get("url")
            assert url is None or url.rstrip("/").rsplit("/", 1)[-1] not in q, t["id"]
        for u in t["unique"]:
            assert u not in q and u not in t["task"], (t["id"], u)


def test_the_bench_uses_the_sets_own_prompt_and_tools(doc: dict[str, Any]) -> None:
    reg = needle_bench.registry(None, doc)
    conv = rampart.Conversation()
    conv.append({"role": "user", "content": "."})
    result = reg.compile(conversation=conv, context_window=10**6, tools_in_prompt=False)
    names = {t["function"]["name"] for t in result.tools("openai")}
    assert names == {t["name"] for t in doc["tools"]}
    assert {"fetch", "git_show", "execute_query"} <= names
    assert doc["system"] in result.prompt
    # the first set keeps its own: the filesystem and git servers' tools
    first = needle_bench.registry(None, needle_bench.load())
    result = first.compile(conversation=conv, context_window=10**6, tools_in_prompt=False)
    assert "read_text_file" in {t["function"]["name"] for t in result.tools("openai")}


def test_tasks_json_is_what_make_tasks_builds(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_tasks2", DATA / "make_tasks.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("needle_bench", needle_bench)
    spec.loader.exec_module(mod)
    out = tmp_path / "tasks.json"
    assert mod.main([str(out)]) == 0
    assert out.read_bytes() == TASKS.read_bytes()
