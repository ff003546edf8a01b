"""The rampart command line, run as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import SEEDS


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rampart", *args], capture_output=True, text=True, timeout=120
    )


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


def test_compile_text_report() -> None:
    out = run("compile", str(SEEDS), "--max-tokens", "500", "--task", "fix the bug")
    assert out.returncode == 0, out.stderr
    assert "included" in out.stdout and "[budget]" in out.stdout
    assert "task: fix the bug" in out.stdout and "compiled in" in out.stdout


def test_inspect() -> None:
    out = run("inspect", str(SEEDS))
    assert out.returncode == 0, out.stderr
    assert "31 blocks" in out.stdout and "tool_shell" in out.stdout
    data = json.loads(run("inspect", str(SEEDS), "--json").stdout)
    assert len(data) == 31 and data[0]["source"] == "seed"


def test_errors_are_reported_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.md"
    bad.write_text("---\nname: x\npriority: 3\n---\nbody\n")
    out = run("compile", str(bad))
    assert out.returncode == 2
    assert f"{bad}:3:" in out.stderr and "Traceback" not in out.stderr
    out = run("compile", str(SEEDS), "--top-k", "3")
    assert out.returncode == 2 and "task" in out.stderr
