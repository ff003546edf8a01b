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
