"""Turning ``trials.jsonl`` into ``summary.csv`` and PNG plots.

summary.csv has one row per (experiment, condition, position) and one ``all`` row
per (experiment, condition): trials, answered, hits, success rate (of answered
trials), failed calls, mean prompt and context tokens, median model latency and
median harness overhead. Plots (matplotlib, headless): success rate by position,
one line per condition (a 5-position moving average over the raw per-position dots
once a condition has 9 or more positions), for the sweep and gating probes; bars
for the schema probe.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rampart._files import atomic_write
from rampart.probe.runner import TRIALS_FILE, ProbeError, read_records

SUMMARY_FILE = "summary.csv"
COLUMNS = (
    "experiment",
    "condition",
    "position",
    "trials",
    "answered",
    "hits",
    "success_rate",
    "failed",
    "mean_prompt_tokens",
    "mean_context_tokens",
    "median_latency_s",
    "median_harness_ms",
    "mean_stable_prefix_tokens",
)


def load_trials(out: str | Path) -> list[dict[str, Any]]:
    """The latest record of every trial in ``out/trials.jsonl``."""
    path = Path(out) / TRIALS_FILE
    if not path.is_file():
        raise ProbeError(f"{path}: no trials here (run `rampart probe sweep --out {out}` first)")
    return list(read_records(path)[0].values())


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 2) if values else None


def _median(values: Sequence[float], digits: int) -> float | None:
    return round(statistics.median(values), digits) if values else None


def _row(
    experiment: str, condition: str, position: str, recs: list[dict[str, Any]]
) -> dict[str, Any]:
    answered = [r for r in recs if r.get("success") is not None]
    hits = sum(1 for r in answered if r["success"])
    return {
        "experiment": experiment,
        "condition": condition,
        "position": position,
        "trials": len(recs),
        "answered": len(answered),
        "hits": hits,
        "success_rate": round(hits / len(answered), 4) if answered else None,
        "failed": len(recs) - len(answered),
        "mean_prompt_tokens": _mean(
            [r["prompt_tokens"] for r in answered if r.get("prompt_tokens")]
        ),
        "mean_context_tokens": _mean([r["context_tokens"] for r in recs if "context_tokens" in r]),
        "median_latency_s": _median([r["latency_s"] for r in answered], 3),
        "median_harness_ms": _median([r["harness_ms"] for r in recs if "harness_ms" in r], 4),
        # The cacheable part of the context across tasks (records before it: absent).
        "mean_stable_prefix_tokens": _mean(
            [r["stable_prefix_tokens"] for r in recs if r.get("stable_prefix_tokens") is not None]
        ),
    }


def summarise(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Summary rows: per position, then an ``all`` row per condition."""
    by_cond: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_cond[(r["experiment"], r["condition"])].append(r)
    rows: list[dict[str, Any]] = []
    for (exp, cond), recs in sorted(by_cond.items()):
        by_pos: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for r in recs:
            by_pos[int(r["position"])].append(r)
        for pos in sorted(by_pos):
            rows.append(_row(exp, cond, str(pos), by_pos[pos]))
        rows.append(_row(exp, cond, "all", recs))
    return rows


def write_summary(out: str | Path, rows: Sequence[dict[str, Any]]) -> Path:
    """Write ``rows`` (from :func:`summarise`) as ``summary.csv`` in ``out``; returns
    the file's path."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if row[k] is None else row[k]) for k in COLUMNS})
    path = Path(out) / SUMMARY_FILE
    atomic_write(path, buf.getvalue().encode())
    return path


SMOOTH_FROM = 9  # positions; below this the line joins the raw rates
SMOOTH_HALF = 2  # moving average over 2 * 2 + 1 = 5 positions


def _moving_rate(points: Sequence[dict[str, Any]]) -> list[float]:
    """Success rate (%) pooled over each point and its SMOOTH_HALF neighbours each side."""
    out = []
    for i in range(len(points)):
        window = points[max(0, i - SMOOTH_HALF) : i + SMOOTH_HALF + 1]
        hits = sum(r["hits"] for r in window)
        answered = sum(r["answered"] for r in window)
        out.append(100 * hits / answered if answered else 0.0)
    return out


def plot(out: str | Path, rows: Sequence[dict[str, Any]]) -> list[Path]:
    """One PNG per experiment present; needs matplotlib (the ``probe`` extra)."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and CI
    import matplotlib.pyplot as plt

    out = Path(out)
    written: list[Path] = []
    experiments = sorted({r["experiment"] for r in rows})
    for exp in experiments:
        mine = [r for r in rows if r["experiment"] == exp]
        fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
        if exp == "schema":
            totals = [r for r in mine if r["position"] == "all"]
            names = [r["condition"] for r in totals]
            rates = [100 * (r["success_rate"] or 0) for r in totals]
            ax.bar(names, rates, color=["#3a7", "#c44"][: len(names)])
            for i, r in enumerate(totals):
                ax.text(i, rates[i] + 1, f"{rates[i]:.0f}% (n={r['answered']})", ha="center")
            ax.set_ylabel("tool called (%)")
            ax.set_title("schema probe: target tool's block present vs evicted")
        else:
            wide = len({r["position"] for r in mine}) > 2  # "all" and at least 2 positions
            for cond in sorted({r["condition"] for r in mine}):
                pts = [r for r in mine if r["condition"] == cond and r["position"] != "all"]
                pts = [r for r in pts if r["success_rate"] is not None]
                if not pts:
                    continue
                xs = [int(r["position"]) for r in pts]
                ys = [100 * r["success_rate"] for r in pts]
                tok = next(
                    (
                        r["mean_context_tokens"]
                        for r in mine
                        if r["condition"] == cond and r["position"] == "all"
                    ),
                    None,
                )
                label = cond if tok is None else f"{cond} (~{tok:.0f} context tokens)"
                if len(xs) == 1 and wide:
                    # A position-independent condition (gating's "promoted") is a level
                    # to compare the curves with, not a point at position 0.
                    ax.axhline(ys[0], linestyle="--", color="0.35", label=label)
                elif len(xs) >= SMOOTH_FROM:
                    # A few trials per position make a jagged line; the moving average
                    # (pooled over neighbouring positions) shows the trend, dots the data.
                    (dots,) = ax.plot(xs, ys, "o", markersize=3, alpha=0.35)
                    ax.plot(xs, _moving_rate(pts), "-", color=dots.get_color(), label=label)
                else:
                    ax.plot(xs, ys, "o" if len(xs) == 1 else "o-", label=label, markersize=4)
            ax.set_xlabel("critical block position in the registry")
            ax.set_ylabel("success (%)")
            ax.set_title(f"{exp} probe: success by position")
            if ax.get_lines():
                ax.legend(fontsize=8)
            else:
                ax.text(0.5, 0.5, "no answered trials yet", ha="center", transform=ax.transAxes)
        ax.set_ylim(-3, 108)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = out / f"{exp}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


def report(
    out: str | Path,
    *,
    plots: bool = True,
    records: Iterable[dict[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], list[Path]]:
    """Write ``summary.csv`` (and PNGs, when matplotlib is installed) for a results folder.

    ``records``: the folder's trials when the caller holds them already (a run's
    store), instead of reading ``trials.jsonl`` again. Returns the summary rows and
    the files written. Without matplotlib the CSV is still written and the missing
    plots are reported by a RuntimeWarning.
    """
    rows = summarise(load_trials(out) if records is None else records)
    files = [write_summary(out, rows)]
    if plots:
        try:
            files += plot(out, rows)
        except ImportError:
            import warnings

            warnings.warn(
                "matplotlib is not installed, so no plots were drawn: "
                "pip install 'rampart-registry[probe]'",
                RuntimeWarning,
                stacklevel=2,
            )
    return rows, files


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The ``all`` rows as an aligned text table, for the terminal."""
    lines = [
        f"{'experiment':<10} {'condition':<18} {'trials':>6} {'hits':>5} {'success':>8} "
        f"{'failed':>6} {'ctx tok':>8} {'stable':>7} {'latency':>8}"
    ]
    for r in rows:
        if r["position"] != "all":
            continue
        rate = "-" if r["success_rate"] is None else f"{100 * r['success_rate']:.1f}%"
        tok = "-" if r["mean_context_tokens"] is None else f"{r['mean_context_tokens']:.0f}"
        lat = "-" if r["median_latency_s"] is None else f"{r['median_latency_s']:.2f}s"
        st = r.get("mean_stable_prefix_tokens")
        stable = "-" if st is None else f"{st:.0f}"
        lines.append(
            f"{r['experiment']:<10} {r['condition']:<18} {r['trials']:>6} {r['hits']:>5} "
            f"{rate:>8} {r['failed']:>6} {tok:>8} {stable:>7} {lat:>8}"
        )
    return "\n".join(lines)
