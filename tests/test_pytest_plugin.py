"""The pytest plugin (rampart.pytest_plugin), run as a user's CI runs it: real pytest
sessions in a temporary project (pytester), a real registry compiled in them, golden
files and latency baselines written to and read from disk."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

pytest_plugins = ["pytester"]

PLUGIN = ("-p", "rampart.pytest_plugin", "-p", "no:xdist")


@pytest.fixture(autouse=True)
def not_an_xdist_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner sessions are no xdist workers: under `make test`'s -n, pytest-benchmark
    would read PYTEST_XDIST_WORKER, disable benchmarks, and the latency checks would
    check nothing."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)


# The user's test: a registry built from blocks.json (which the tests below edit,
# as a teammate would edit a seed file), compiled for a task with a gate, snapshotted
# with its request bodies.
USER_TEST = """
import json
from pathlib import Path

import rampart
from rampart.adapters import anthropic_messages, openai_chat

HERE = Path(__file__).parent


def build():
    spec = json.loads((HERE / "blocks.json").read_text(encoding="utf-8"))
    reg = rampart.BlockRegistry()
    for b in spec["blocks"]:
        reg.write_block(b["text"], b["name"], gated=b["gated"])
    reg.load_tools([spec["tool"]], gated=False)
    return reg


def compile_for_task(reg):
    # A deterministic gate: skill_b is the one relevant block.
    def gate(task, blocks):
        return [1.0 if b.semantic_name == "skill_b" else 0.0 for b in blocks]

    return reg.compile(task_text="bill", gate=gate, top_k=1, tools_in_prompt=False)


def test_prompt(rampart_golden):
    result = compile_for_task(build())
    rampart_golden.check(
        result,
        {
            "openai": openai_chat(result, [{"role": "user", "content": "bill it"}]),
            "anthropic": lambda r: anthropic_messages(r, model="claude-x"),
        },
    )
"""

BLOCKS: dict[str, Any] = {
    "blocks": [
        {"name": "persona", "text": "You are the billing agent of Ledgerline.", "gated": False},
        {
            "name": "house_rules",
            "text": "Money is Decimal in minor units.\nNever log card numbers.",
            "gated": False,
        },
        {"name": "skill_a", "text": "To refund, call refund(invoice_id).", "gated": True},
        {"name": "skill_b", "text": "To bill, call bill(account, amount).", "gated": True},
        {"name": "skill_c", "text": "To export, call export(format).", "gated": True},
    ],
    "tool": {
        "name": "lookup_invoice",
        "description": "Look up an invoice by id.",
        "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}},
    },
}

LATENCY_TEST = """
import pytest
import rampart


def compile_once():
    reg = rampart.BlockRegistry()
    for i in range(20):
        reg.write_block(f"rule {i}", f"r{i}")
    return reg


def test_compile_speed(rampart_latency):
    reg = compile_once()
    result = rampart_latency(reg.compile, max_tokens=None)
    assert len(result) == 20
"""

# pytest-benchmark with a tiny time budget: these tests check the plugin's logic,
# not the speed of anything.
QUICK = (
    "--benchmark-max-time=0.002",
    "--benchmark-min-rounds=3",
    "--benchmark-warmup=off",
    "--benchmark-disable-gc",
)


def project(pytester: pytest.Pytester, blocks: dict[str, Any] = BLOCKS) -> Path:
    pytester.makepyfile(test_prompt=USER_TEST)
    write_blocks(pytester, blocks)
    return pytester.path / "__rampart__" / "test_prompt" / "test_prompt.json"


def write_blocks(pytester: pytest.Pytester, blocks: dict[str, Any]) -> None:
    (pytester.path / "blocks.json").write_text(json.dumps(blocks), encoding="utf-8")


def edited(name: str, **change: Any) -> dict[str, Any]:
    spec = json.loads(json.dumps(BLOCKS))
    for b in spec["blocks"]:
        if b["name"] == name:
            b.update(change)
    return spec


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", *args)


def test_entry_point_is_declared() -> None:
    tomllib = pytest.importorskip("tomllib")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    eps = meta["project"]["entry-points"]["pytest11"]
    # The entry point is the small package outside rampart (rampart is imported
    # only by a test that uses a fixture), named after the module users register.
    assert eps == {"rampart.pytest_plugin": "rampart_pytest"}
    assert "rampart_pytest" in meta["tool"]["maturin"]["python-packages"]


def test_golden_is_written_then_passes_unchanged(pytester: pytest.Pytester) -> None:
    golden = project(pytester)
    res = run(pytester)
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*no golden file*--rampart-update*"])
    assert not golden.exists()

    res = run(pytester, "--rampart-update")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*rampart*", "wrote __rampart__/test_prompt/test_prompt.json"])
    data = json.loads(golden.read_text(encoding="utf-8"))
    assert data["rampart"] == "rampart-golden/1"
    assert data["prompt"].startswith("You are the billing agent of Ledgerline.")
    assert "To bill, call bill(account, amount)." in data["prompt"]
    assert "refund" not in data["prompt"]  # gated out
    assert [b["name"] for b in data["blocks"]] == ["persona", "house_rules", "skill_b"]
    assert data["prompt"][: data["stable_prefix_chars"]].endswith("Never log card numbers.")
    assert set(data["bodies"]) == {"openai", "anthropic"}
    assert data["bodies"]["openai"]["tools"][0]["function"]["name"] == "lookup_invoice"
    before = golden.read_bytes()

    res = run(pytester)
    res.assert_outcomes(passed=1)
    res.stdout.no_fnmatch_line("*= rampart =*")  # nothing written, nothing to say
    # an update with nothing changed rewrites nothing
    res = run(pytester, "--rampart-update")
    res.assert_outcomes(passed=1)
    assert "wrote" not in res.stdout.str()
    assert golden.read_bytes() == before


def test_a_stable_prefix_change_fails_naming_the_block(pytester: pytest.Pytester) -> None:
    project(pytester)
    run(pytester, "--rampart-update").assert_outcomes(passed=1)
    changed = "Money is Decimal in minor units.\nNever log card or bank numbers."
    write_blocks(pytester, edited("house_rules", text=changed))

    res = run(pytester)
    res.assert_outcomes(failed=1)
    out = res.stdout.str()
    assert "inside block 'house_rules'" in out
    assert "inside the stable prefix" in out and "cached prefix would be rebuilt" in out
    assert "block 'house_rules' changed (stable prefix)" in out
    res.stdout.fnmatch_lines(
        [
            "*--- golden 'house_rules'",
            "*+++ current 'house_rules'",
            "*-Never log card numbers.",
            "*+Never log card or bank numbers.",
        ]
    )
    # the bodies carry the same text: their difference is traced to the block too
    assert "body 'openai': .messages[0].content: string differs" in out
    assert "body 'anthropic': .system: string differs" in out
    assert out.count("inside block 'house_rules'") >= 3
    assert "--rampart-update" in out

    res = run(pytester, "--rampart-update")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["wrote __rampart__/test_prompt/test_prompt.json"])
    run(pytester).assert_outcomes(passed=1)


def test_a_tail_change_is_told_apart_from_a_cache_bust(pytester: pytest.Pytester) -> None:
    project(pytester)
    run(pytester, "--rampart-update").assert_outcomes(passed=1)
    write_blocks(pytester, edited("skill_b", text="To bill, call bill_v2(account, amount)."))
    res = run(pytester)
    res.assert_outcomes(failed=1)
    out = res.stdout.str()
    assert "inside block 'skill_b'" in out and "task-dependent tail" in out
    assert "block 'skill_b' changed (task-dependent tail)" in out
    assert "stable prefix (characters" not in out


def test_the_stable_prefix_boundary_moving_fails(pytester: pytest.Pytester) -> None:
    """Same bytes, but house_rules became gated: it leaves the prompt (gated out) and
    the cacheable prefix ends after persona."""
    project(pytester)
    run(pytester, "--rampart-update").assert_outcomes(passed=1)
    write_blocks(pytester, edited("house_rules", gated=True))
    res = run(pytester)
    res.assert_outcomes(failed=1)
    out = res.stdout.str()
    assert "block 'house_rules' removed" in out
    res.stdout.fnmatch_lines(
        [
            "*stable prefix: * characters (2 blocks, ending with block 'house_rules') in the "
            "golden file, * characters (1 blocks, ending with block 'persona') now"
        ]
    )


def test_a_tool_schema_change_names_the_tool(pytester: pytest.Pytester) -> None:
    project(pytester)
    run(pytester, "--rampart-update").assert_outcomes(passed=1)
    spec = json.loads(json.dumps(BLOCKS))
    spec["tool"]["description"] = "Look up one invoice by its id."
    write_blocks(pytester, spec)
    res = run(pytester)
    res.assert_outcomes(failed=1)
    out = res.stdout.str()
    # tools_in_prompt=False: the prompt is unchanged, only the tools array differs
    assert "prompt: first difference" not in out
    assert (
        "body 'openai': .tools[0].function.description: string differs from character 8, "
        "in tool 'lookup_invoice'" in out
    )


def test_golden_files_live_next_to_the_test(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nrampart_dir = goldens\n")
    sub = pytester.mkpydir("pkg")
    (sub / "test_names.py").write_text(
        "import pytest, rampart\n\n"
        "@pytest.mark.parametrize('k', ['a b', 'c'])\n"
        "def test_two(rampart_golden, k):\n"
        "    reg = rampart.BlockRegistry()\n"
        "    reg.write_block('text ' + k, 'b')\n"
        "    r = reg.compile()\n"
        "    rampart_golden.check(r, {})\n"
        "    rampart_golden.check(r, {}, name='again')\n"
        "    rampart_golden.check(r, {}, name='again')\n",
        encoding="utf-8",
    )
    res = run(pytester, "--rampart-update")
    res.assert_outcomes(failed=2)
    res.stdout.fnmatch_lines(["*already checked in this test; give each check its own name=*"])
    names = sorted(p.name for p in (sub / "goldens" / "test_names").iterdir())
    assert names == [
        "test_two[a%20b].again.json",
        "test_two[a%20b].json",
        "test_two[c].again.json",
        "test_two[c].json",
    ]
    data = json.loads((sub / "goldens" / "test_names" / "test_two[c].json").read_text())
    assert data["prompt"] == "text c" and data["bodies"] == {}


def test_a_corrupt_golden_file_fails_with_its_path(pytester: pytest.Pytester) -> None:
    golden = project(pytester)
    golden.parent.mkdir(parents=True)
    golden.write_text("{not json", encoding="utf-8")
    res = run(pytester)
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*test_prompt.json: unreadable*--rampart-update*"])


# ---- compile latency ------------------------------------------------------------------


def latency_project(pytester: pytest.Pytester, median: float | None) -> Path:
    pytest.importorskip("pytest_benchmark")
    pytester.makepyfile(test_speed=LATENCY_TEST)
    path = pytester.path / "__rampart__" / "test_speed" / "test_compile_speed.latency.json"
    if median is not None:
        path.parent.mkdir(parents=True)
        baseline = {"rampart": "rampart-latency/1", "median_s": median, "machine": {}}
        path.write_text(json.dumps(baseline), encoding="utf-8")
    return path


def test_latency_update_saves_a_baseline(pytester: pytest.Pytester) -> None:
    path = latency_project(pytester, None)
    res = run(pytester, *QUICK)
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*no latency baseline*--rampart-update*"])
    res = run(pytester, *QUICK, "--rampart-update")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*median * saved as the baseline"])
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved["median_s"] > 0 and saved["rounds"] >= 3
    assert saved["machine"]["cpus"] == os.cpu_count()
    assert saved["machine"]["python"].endswith(platform.python_version())


def test_latency_past_the_ratio_fails(pytester: pytest.Pytester) -> None:
    # A baseline no compile can match (1 ps): the ratio is enormous, deterministically.
    latency_project(pytester, 1e-12)
    res = run(pytester, *QUICK)
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(
        [
            "*compile latency regressed: *median * = *x the baseline 0.001 ns (limit 1.5x), "
            "set by the rampart_latency_ratio ini option; the baseline was saved on {}*"
        ]
    )


def test_latency_within_the_ratio_passes(pytester: pytest.Pytester) -> None:
    latency_project(pytester, 1e3)  # a baseline of 1000 s: any compile is faster
    res = run(pytester, *QUICK, "-rA")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*test_compile_speed: median * = 0.00x the baseline 1e+03 s*"])


def test_latency_ratio_from_ini_and_marker(pytester: pytest.Pytester) -> None:
    path = latency_project(pytester, 1e-12)
    # ini: a limit no ratio reaches
    pytester.makeini("[pytest]\nrampart_latency_ratio = 1e30\n")
    run(pytester, *QUICK).assert_outcomes(passed=1)
    # the marker wins over the ini option
    pytester.makepyfile(
        test_speed=LATENCY_TEST.replace(
            "def test_compile_speed",
            "@pytest.mark.rampart_latency(ratio=2)\ndef test_compile_speed",
        )
    )
    res = run(pytester, *QUICK)
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*(limit 2x), set by the rampart_latency marker*"])
    pytester.makeini("[pytest]\nrampart_latency_ratio = fast\n")
    pytester.makepyfile(test_speed=LATENCY_TEST)
    res = run(pytester, *QUICK)
    assert res.ret != 0
    res.stdout.no_fnmatch_line("*1 passed*")
    assert "ratio 'fast' is not a number" in res.stdout.str() + res.stderr.str()
    assert path.exists()


def test_latency_not_compared_when_benchmarks_are_disabled(pytester: pytest.Pytester) -> None:
    latency_project(pytester, 1e-12)
    res = run(pytester, "--benchmark-disable")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*latency not checked (benchmarks are disabled)"])


def test_the_plugin_stays_out_of_the_way(pytester: pytest.Pytester) -> None:
    """Loaded, it changes nothing for tests that do not use it: no summary section,
    no fixture run, the marker registered for --strict-markers."""
    pytester.makepyfile(
        "import pytest\n\n"
        "@pytest.mark.rampart_latency(ratio=3)\n"
        "def test_plain():\n"
        "    assert 1 + 1 == 2\n"
    )
    res = run(pytester, "--strict-markers")
    res.assert_outcomes(passed=1)
    res.stdout.no_fnmatch_line("*= rampart =*")
    res = run(pytester, "--fixtures")
    res.stdout.fnmatch_lines(["rampart_golden*", "*Snapshot a compile*"])


# ---- issue 26: one file per test id, files refused as limits.md says, a lazy plugin ------


def test_ids_that_differ_only_in_unsafe_characters_get_their_own_golden_files(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_ids=(
            "import pytest, rampart\n\n"
            "@pytest.mark.parametrize('k', ['a/b', 'a_b', 'a:b', 'a%2Fb', 'é'])\n"
            "def test_ids(rampart_golden, k):\n"
            "    reg = rampart.BlockRegistry()\n"
            "    reg.write_block('text ' + k, 'b')\n"
            "    rampart_golden.check(reg.compile(), {})\n"
        )
    )
    run(pytester, "--rampart-update").assert_outcomes(passed=5)
    folder = pytester.path / "__rampart__" / "test_ids"
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(
        [
            "test_ids[a%2Fb].json",
            "test_ids[a_b].json",
            "test_ids[a%3Ab].json",
            "test_ids[a%252Fb].json",
            # pytest writes non-ASCII ids escaped (\xe9); the backslash is escaped too
            "test_ids[%5Cxe9].json",
        ]
    )
    prompts = {json.loads((folder / n).read_text(encoding="utf-8"))["prompt"] for n in names}
    assert len(prompts) == 5
    # Every test compares with its own file: all five pass (before, two of a/b, a_b
    # and a:b could never pass).
    run(pytester).assert_outcomes(passed=5)


def test_the_name_latency_is_kept_for_the_baseline(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        "import rampart\n\n"
        "def test_x(rampart_golden):\n"
        "    rampart_golden.check(rampart.BlockRegistry().compile(), {}, name='latency')\n"
    )
    res = run(pytester, "--rampart-update")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*name 'latency' is the latency baseline's*"])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_golden_file_that_is_a_fifo_or_a_device_fails_clearly(
    pytester: pytest.Pytester,
) -> None:
    golden = project(pytester)
    golden.parent.mkdir(parents=True)
    os.mkfifo(golden)
    res = run(pytester)
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*test_prompt.json: unreadable (is not a regular file*"])
    golden.unlink()
    golden.symlink_to("/dev/zero")
    res = run(pytester)
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*test_prompt.json: unreadable (is not a regular file*"])
    # --rampart-update replaces what it cannot read with a golden file
    run(pytester, "--rampart-update").assert_outcomes(passed=1)
    assert golden.is_file() and not golden.is_symlink()
    run(pytester).assert_outcomes(passed=1)


@pytest.mark.parametrize("median", ["Infinity", "true", "1e999", '"0.5"', "-1", "0"])
def test_a_baseline_must_be_a_finite_positive_number(
    pytester: pytest.Pytester, median: str
) -> None:
    path = latency_project(pytester, None)
    path.parent.mkdir(parents=True)
    path.write_text(
        f'{{"rampart": "rampart-latency/1", "median_s": {median}, "machine": {{}}}}',
        encoding="utf-8",
    )
    res = run(pytester, *QUICK)
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*test_compile_speed.latency.json: median_s must be a *"])


def test_a_session_that_uses_no_fixture_never_imports_rampart(tmp_path: Path) -> None:
    """A real pytest process with only the plugin's entry-point module loaded (no
    other plugin, which might import numpy itself): rampart, its registry and numpy
    are not imported by the time a plain test runs; a later test that uses a fixture
    gets a working one in the same session."""
    import subprocess
    import sys

    (tmp_path / "test_a_plain.py").write_text(
        "import sys\n\n"
        "def test_plain():\n"
        "    loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('rampart', 'numpy'))\n"
        "    assert loaded == [], loaded\n"
        "    assert 'rampart_pytest' in sys.modules\n",
        encoding="utf-8",
    )
    (tmp_path / "test_b_golden.py").write_text(
        # rampart imported in the test, not at collection (which precedes every test)
        "def test_golden(rampart_golden):\n"
        "    import rampart\n\n"
        "    rampart_golden.check(rampart.BlockRegistry().compile(), {})\n",
        encoding="utf-8",
    )
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "rampart_pytest"]
    done = subprocess.run(
        [*argv, "--rampart-update", "-W", "ignore"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    assert (tmp_path / "__rampart__" / "test_b_golden" / "test_golden.json").is_file()
