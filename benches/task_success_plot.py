"""Draw docs/conversation/task-success.png from a task-success JSONL: success against
tokens sent, one point per condition (mean tokens sent per task on the x axis, the
share of tasks answered right with its Wilson 95 % interval on the y axis), on the
tasks every plotted condition has run (so the points compare like with like).

    python benches/task_success_plot.py [--jsonl benches/task_success_runs/qwen-holdout.jsonl]
        [--split holdout] [--out docs/conversation/task-success.png]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benches"))

import task_success as ts  # noqa: E402

LABELS = {
    "full": "full context",
    "default": "ContextPolicy()",
    "relevance_off": "ContextPolicy(relevance=False)",
    "trim_messages": "trim_messages",
    "clear_tool_uses_edit": "ClearToolUsesEdit",
    "clear_tool_uses": "clear_tool_uses (client-side)",
    "default_recall_tool": "ContextPolicy() + recall tool",
}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--jsonl", type=Path, default=ROOT / "benches/task_success_runs/qwen-holdout.jsonl"
    )
    ap.add_argument("--split", default="holdout")
    ap.add_argument("--total", type=int, default=78, help="tasks in the split (for the title)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs/conversation/task-success.png")
    ap.add_argument(
        "--conditions",
        default=None,
        help="comma list: plot these only (a partial run compares more tasks when the "
        "conditions that ran furthest are plotted alone)",
    )
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = ts.read_rows(args.jsonl)
    wanted = None if args.conditions is None else [c for c in args.conditions.split(",") if c]
    pts, common, seen = ts.points(rows, args.split, wanted)
    model = rows[0]["run"]["model"] if rows else "?"
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    for p in pts:
        # a legend, not labels by the points: conditions often send the same tokens
        ax.errorbar(
            p["tokens"],
            100 * p["rate"],
            yerr=[[100 * (p["rate"] - p["lo"])], [100 * (p["hi"] - p["rate"])]],
            fmt="o",
            capsize=4,
            label=f"{LABELS[p['condition']]}: {p['success']}/{p['tasks']}",
        )
    ax.legend(fontsize=8, loc="best")
    ax.set_xlabel("tokens sent per task (all requests of the run, the model's tokens)")
    ax.set_ylabel("tasks answered right (%), Wilson 95 % interval")
    ax.set_ylim(-5, 105)
    partial = "" if common >= args.total else f" — partial: {common} of {args.total} tasks"
    ax.set_title(f"Task success, {args.split}, {model}{partial}", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out)
    print(f"{args.out}: {len(pts)} conditions on {common} common tasks ({seen} seen)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
