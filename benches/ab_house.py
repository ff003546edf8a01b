"""A/B of the hot operations between two builds of rampart (issue 23: the
restructuring must not cost speed). Each round runs one child process per build,
alternately (A B A B ...); a child times every operation in-process and prints
its medians; the ratio B/A is taken per round and its median printed.

    python benches/ab_house.py --a /path/to/old/python --b python --rounds 5

``--a``/``--b`` are folders that hold a ``rampart`` package with its extension
(what goes on PYTHONPATH). Operations: a compile of a changed registry (fresh),
a repeated compile (memoised), ``write_block`` on a local registry, a shared
write (SQLite store), and a gated compile of a task never seen before (MiniLM).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, statistics, sys, tempfile, time, uuid
import rampart
from pathlib import Path

seeds = Path(sys.argv[1])

def per_call(fn, n, reps=7):
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n)
    return statistics.median(out)

res = {}
reg = rampart.BlockRegistry.from_files([seeds], label=None)
ids = reg.runtime_ids()
def fresh():
    reg.update_priority(ids[0], 0.5)  # the registry changed: no memo
    reg.compile(max_tokens=2048)
res["fresh compile (+ update_priority)"] = per_call(fresh, 2000)
res["repeat compile"] = per_call(lambda: reg.compile(max_tokens=2048), 20000)
w = rampart.BlockRegistry(label=None)
res["write_block"] = per_call(lambda: w.write_block("a note to keep", "n"), 20000)
with tempfile.TemporaryDirectory() as tmp:
    s = rampart.BlockRegistry.open(f"sqlite:///{tmp}/s.db", "ab", label=None)
    res["shared write (sqlite)"] = per_call(lambda: s.write_block("shared note", "n"), 200, reps=5)
    s.close()
g = rampart.BlockRegistry.from_files([seeds], "default", label=None)
g.compile(task_text="warm up the model", top_k=8)
def gated():
    g.compile(task_text=f"review the change {uuid.uuid4().hex}", top_k=8, max_tokens=2048)
res["gated compile, new task"] = per_call(gated, 20, reps=5)
print(json.dumps(res))
"""


def child(path: str, seeds: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, seeds], env=env, capture_output=True, text=True, check=True
    ).stdout
    return dict(json.loads(out.splitlines()[-1]))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--a", required=True, help="PYTHONPATH of build A (the baseline)")
    p.add_argument("--b", required=True, help="PYTHONPATH of build B")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    seeds = str(Path(__file__).resolve().parent.parent / "seeds")
    a_runs, b_runs = [], []
    for _ in range(args.rounds):
        a_runs.append(child(args.a, seeds))
        b_runs.append(child(args.b, seeds))
    print(f"{args.rounds} alternated rounds; per call, median over rounds")
    print(f"{'operation':36s} {'A':>11s} {'B':>11s} {'B/A':>7s}")
    for op in a_runs[0]:
        a = statistics.median(r[op] for r in a_runs)
        b = statistics.median(r[op] for r in b_runs)
        ratio = statistics.median(rb[op] / ra[op] for ra, rb in zip(a_runs, b_runs))
        unit, k = ("us", 1e6) if a < 1e-3 else ("ms", 1e3)
        print(f"{op:36s} {a * k:8.2f} {unit} {b * k:8.2f} {unit} {ratio:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
