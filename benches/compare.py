"""rampart compile vs the pure-Python OrderedDict baseline (tests/pymodel.py), one process.

    python benches/compare.py            # full: N = 31, 200, 10k, 100k; 7 repeats (~1 min)
    python benches/compare.py --quick    # N = 31, 200, 10k; 3 repeats; smaller memory probe

timeit-style: each measurement is ``repeats`` runs of ``k`` back-to-back calls (k
calibrated so one run lasts ~``--run-ms``), with the garbage collector off, as
timeit does; the per-call median and min over the runs are reported. Both sides
get the same blocks, order and token counts, and their outputs are checked equal
(prompt, included, excluded, total) before anything is timed.

Memory: a subprocess builds a registry of N blocks through the public API and
reports RSS growth minus the content+name bytes, per block. That is an upper
bound on the Rust core's per-block overhead: it also counts Python-side transient
garbage (returned id strings, freed but kept in pymalloc arenas) and allocator slack.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _corpus  # noqa: E402
import rampart  # noqa: E402

BUDGETS: tuple[int | None, ...] = (4096, None)


def _budget_str(b: int | None) -> str:
    return "unlimited" if b is None else str(b)


def measure(fn: Callable[[], Any], repeats: int, run_s: float) -> tuple[float, float]:
    """(median, min) seconds per call over ``repeats`` runs of k calls each."""
    # calibrate k (timeit.autorange-like, but aiming at run_s per run)
    k = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        dt = time.perf_counter() - t0
        if dt >= run_s or k >= 1_000_000:
            break
        k = max(k * 2, int(k * run_s / max(dt, 1e-9) * 1.1))
    per_call: list[float] = []
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            per_call.append((time.perf_counter() - t0) / k)
    finally:
        if gc_was:
            gc.enable()
    return statistics.median(per_call), min(per_call)


def time_case(
    reg: Any, model: Any, budget: int | None, sep: str, sep_tokens: int, repeats: int, run_s: float
) -> list[tuple[float, float]]:
    """(median, min) per call for: rampart compile, dry-run, pure-Python, compile+names."""

    def r_compile() -> Any:
        return reg.compile(max_tokens=budget)

    def r_dry() -> Any:
        return reg.compile_dry_run(max_tokens=budget)

    def py_compile() -> Any:
        return model.compile(budget, sep_tokens, sep, count_access=True)

    def r_names() -> Any:
        r = reg.compile(max_tokens=budget)
        return r.prompt, r.included, r.excluded, r.total_tokens

    # rampart reuses the previous prompt while the registry is unchanged (the
    # common case in an agent loop). To time a compile that must rebuild the
    # prompt, every call first rewrites the front block's content (alternating
    # two texts of equal token count), and the write alone is timed separately
    # and subtracted.
    first = reg.runtime_ids()[0]
    original = reg.get_by_id(first).content
    variants = (original, original[:-1] + ("!" if original[-1] != "!" else "?"))
    flip = [0]

    def r_write() -> Any:
        flip[0] ^= 1
        reg.update_block_content(first, variants[flip[0]])

    def r_write_compile() -> Any:
        r_write()
        return reg.compile(max_tokens=budget)

    timings = [measure(f, repeats, run_s) for f in (r_compile, r_dry, py_compile, r_names)]
    (wc_med, wc_min), (w_med, w_min) = (
        measure(r_write_compile, repeats, run_s),
        measure(r_write, repeats, run_s),
    )
    reg.update_block_content(first, original)
    timings.append((max(wc_med - w_med, 0.0), max(wc_min - w_min, 0.0)))
    return timings


def statm_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_child(n: int) -> None:
    """Runs in a fresh interpreter: RSS growth of building an n-block registry."""
    from rampart import BlockRegistry

    items = _corpus.blocks(n)  # the Python-side strings exist before and after
    payload = sum(len(a.encode()) + len(b.encode()) for a, b in items)
    warm = BlockRegistry(default_max_tokens=None)  # load tokeniser tables, warm code paths
    warm.write_block(items[0][1], items[0][0], "agent", 0.5, "bench")
    warm.compile()
    del warm
    gc.collect()
    rss0 = statm_rss()
    reg = BlockRegistry(default_max_tokens=None)
    for name, content in items:
        reg.write_block(content, name, "agent", 0.5, "bench")
    gc.collect()
    rss1 = statm_rss()
    assert len(reg) == n
    # for reference: the pure-Python model holding the same blocks (own str copies)
    model = _corpus.baseline_from(reg)
    gc.collect()
    rss2 = statm_rss()
    assert len(model.blocks) == n
    print(json.dumps({"n": n, "payload": payload, "rampart": rss1 - rss0, "model": rss2 - rss1}))


def run_memory(n: int) -> dict[str, int]:
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--memory-child", str(n)],
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="N up to 10k, 3 repeats, 20k-block memory probe"
    )
    ap.add_argument("--repeats", type=int, help="runs per measurement (default 7, quick 3)")
    ap.add_argument("--run-ms", type=float, help="target ms per run (default 40, quick 15)")
    ap.add_argument("--no-memory", action="store_true", help="skip the memory probe")
    ap.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child is not None:
        memory_child(args.memory_child)
        return

    sizes = (31, 200, 10_000) if args.quick else _corpus.SIZES
    repeats = args.repeats or (3 if args.quick else 7)
    run_s = (args.run_ms or (15.0 if args.quick else 40.0)) / 1000
    mem_n = 20_000 if args.quick else 100_000

    print("$ " + shlex.join(["python", *sys.argv]))
    print()
    load = os.getloadavg()
    print(
        f"rampart {rampart.__version__}, Python {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs, load avg {load[0]:.2f}; "
        f"{repeats} runs x k calls (~{run_s * 1000:.0f} ms/run), GC off while timing; "
        f"blocks ~{_corpus.TARGET_TOKENS} cl100k tokens each"
    )
    print()

    t_start = time.perf_counter()
    rows: list[tuple[int, int | None, float, float, float, float, float, float]] = []
    names_rows: list[tuple[int, int | None, float, float]] = []
    changed_rows: list[tuple[int, int | None, float, float]] = []
    for n in sizes:
        reg = _corpus.build_registry(n, default_max_tokens=None)
        sep = rampart.DEFAULT_SEPARATOR
        sep_tokens = reg.count_tokens(sep)
        model = _corpus.baseline_from(reg)
        for budget in BUDGETS:
            _corpus.check_same(reg, model, budget, sep, sep_tokens)  # untimed

            (c_med, c_min), (d_med, d_min), (p_med, p_min), (nm_med, _), (ch_med, _) = time_case(
                reg, model, budget, sep, sep_tokens, repeats, run_s
            )
            rows.append((n, budget, c_med, d_med, p_med, c_min, d_min, p_min))
            changed_rows.append((n, budget, ch_med, p_med))
            names_rows.append((n, budget, nm_med, p_med))
            print(f"  measured N={n} budget={_budget_str(budget)}", file=sys.stderr, flush=True)
        del reg, model
        gc.collect()

    us = 1e6
    print("## compile: rampart vs pure-Python OrderedDict baseline (per call)")
    print()
    print("repeat compiles of an unchanged registry (rampart reuses its last prompt)")
    print()
    print(
        "| N | budget | rampart compile median (µs) | rampart dry-run median (µs) "
        "| pure-Python median (µs) | speed-up (×) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for n, b, c, d, p, *_ in rows:
        print(
            f"| {n:,} | {_budget_str(b)} | {c * us:,.1f} | {d * us:,.1f} | {p * us:,.1f} "
            f"| {p / c:,.1f} |"
        )
    print()
    print("min-of-runs (µs), same order: rampart compile / dry-run / pure-Python")
    print()
    print("| N | budget | compile min | dry-run min | pure-Python min |")
    print("|---:|---:|---:|---:|---:|")
    for n, b, _c, _d, _p, cm, dm, pm in rows:
        print(f"| {n:,} | {_budget_str(b)} | {cm * us:,.1f} | {dm * us:,.1f} | {pm * us:,.1f} |")
    print()
    print(
        "like-for-like: rampart compile then reading .prompt, .included, .excluded, "
        ".total_tokens (the baseline always builds both name lists)"
    )
    print()
    print(
        "| N | budget | rampart compile+names median (µs) | pure-Python median (µs) "
        "| speed-up (×) |"
    )
    print("|---:|---:|---:|---:|---:|")
    for n, b, nm, p in names_rows:
        print(f"| {n:,} | {_budget_str(b)} | {nm * us:,.1f} | {p * us:,.1f} | {p / nm:,.1f} |")
    print()

    print(
        "after a change: each compile follows a write that changes the prompt (the "
        "write's own time subtracted), so rampart cannot reuse its previous prompt"
    )
    print()
    print("| N | budget | rampart compile after a change (µs) | pure-Python (µs) | speed-up (×) |")
    print("|---:|---:|---:|---:|---:|")
    for n, b, ch, p in changed_rows:
        print(f"| {n:,} | {_budget_str(b)} | {ch * us:,.1f} | {p * us:,.1f} | {p / ch:,.1f} |")
    print()

    by = {(r[0], r[1]): r for r in rows}
    lo, hi = (200, 10_000) if args.quick else (200, 100_000)
    if (lo, 4096) in by and (hi, 4096) in by:
        a, z = by[(lo, 4096)], by[(hi, 4096)]
        print(f"## scaling: budgeted compile (budget 4096), N={hi:,} / N={lo:,} median ratio")
        print()
        print(f"| impl | N={lo:,} (µs) | N={hi:,} (µs) | ratio (×) |")
        print("|---|---:|---:|---:|")
        for label, i in (("rampart compile", 2), ("rampart dry-run", 3), ("pure-Python", 4)):
            print(f"| {label} | {a[i] * us:,.1f} | {z[i] * us:,.1f} | {z[i] / a[i]:,.2f} |")  # type: ignore[operator]
        print()

    if not args.no_memory:
        m = run_memory(mem_n)
        n, payload = m["n"], m["payload"]
        print(f"## memory: registry of {n:,} blocks, built in a fresh subprocess")
        print()
        print("| measure | bytes/block |")
        print("|---|---:|")
        print(f"| content + name payload | {payload / n:,.0f} |")
        print(f"| rampart RSS growth | {m['rampart'] / n:,.0f} |")
        print(
            f"| rampart overhead beyond payload (**upper bound**, includes Python-side "
            f"transient garbage) | {(m['rampart'] - payload) / n:,.0f} |"
        )
        print(
            f"| for reference: pure-Python model RSS growth, same blocks (own str copies) "
            f"| {m['model'] / n:,.0f} |"
        )
        print()

    print(f"(total {time.perf_counter() - t_start:.0f} s)")


if __name__ == "__main__":
    main()
