"""A planner and an executor in two OS processes, coordinating through shared
registries (docs/specification.md §7) — one method call, zero coordination tokens, across the
process boundary.

The planner (this process) opens its own registry "planner" and the executor's
registry "executor" in the same store; it pins a plan into the executor
(orchestrator block, not evictable, authored by "planner"). The executor (a child
process) compiles its context — the plan is in front — "does" the work, writes
what it learned as an agent block, and tries to drop the plan (refused: only its
author may). The planner sees the lesson, retracts the plan itself, and the
executor's next compile no longer holds it.

The example leaves the store as it found it: at the end the executor rolls back
the run's lesson, and at the start anything an interrupted earlier run left (a
pinned plan, a lesson) is removed first, so every run against the same store
prints the same lines.

Run: python examples/shared_agents.py [STORE_URL]   (default: a SQLite file in a
temporary folder; pass redis://127.0.0.1:6379/0 for Redis)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import rampart

SEEDS = Path(__file__).resolve().parent.parent / "seeds"
RUN = "exec-run-1"  # the executor's trajectory id: what the run wrote, to roll back

EXECUTOR = """
import sys, rampart
url = sys.argv[1]
me = rampart.BlockRegistry.open(url, "executor", label="executor")
first = me.compile(max_tokens=400)
print(f"executor: compiled {len(first)} blocks, first: {first.included[0]!r}")
plan = me.get_by_name("plan")[0]
try:
    me.evict(plan.runtime_id, force=True)
except rampart.BlockPermissionError as e:
    print("executor: cannot drop the plan:", type(e).__name__)
me.write_agent_block("tests/test_api.py needs the API server fixture.", sys.argv[2],
                     semantic_name="lesson_fixture")
print("executor: wrote a lesson")
me.close()
"""


def clear_leftovers(planner: rampart.BlockRegistry, executor: rampart.BlockRegistry) -> int:
    """Remove what an interrupted earlier run left in the executor: plans the
    planner pinned, and the run's lesson. ``executor`` here is a replica of the
    shared registry "executor", so its id is the one that wrote the lesson."""
    plans = [b for b in executor.get_by_name("plan") if b.author_id == planner.registry_id]
    for b in plans:
        executor.evict(b.runtime_id, force=True, by=planner)
    return len(plans) + executor.rollback_trajectory(RUN)


def main(url: str) -> None:
    planner = rampart.BlockRegistry.open(url, "planner", label="planner")
    executor = rampart.BlockRegistry.open(url, "executor", label="executor-view", seeds=[SEEDS])
    cleared = clear_leftovers(planner, executor)
    if cleared:  # not part of the example's own output: a re-run prints the same lines
        print(f"(cleared {cleared} blocks an interrupted earlier run left)", file=sys.stderr)
    plan = executor.write_block(
        "Plan: fix only tests/test_api.py, then run the suite.",
        "plan",
        source="orchestrator",
        evictable=False,
        author=planner,
    )
    print(f"planner: pinned the plan into the executor ({len(executor)} blocks)")
    out = subprocess.run([sys.executable, "-c", EXECUTOR, url, RUN], capture_output=True, text=True)
    sys.stdout.write(out.stdout)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise SystemExit(out.returncode)
    executor.sync()  # everything the executor appended before now
    lesson = executor.get_by_name("lesson_fixture")[0]
    print(f"planner: read the executor's lesson: {lesson.content!r} ({lesson.source})")
    executor.evict(plan, force=True, by=planner)  # only the author may
    print(f"planner: retracted the plan; executor has {len(executor)} blocks")
    # The lesson is the executor's own write (it authored the shared "executor"):
    # rolling its run back leaves the store as the example found it.
    gone = executor.rollback_trajectory(RUN)
    print(f"executor: rolled back run {RUN!r} ({gone} block); executor has {len(executor)} blocks")
    planner.close()
    executor.close()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as d:
            t = time.perf_counter()
            main(f"sqlite:///{d}/agents.db")
            print(f"done in {time.perf_counter() - t:.2f} s")
