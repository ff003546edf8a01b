"""Choosing the relevance floors and the recall's reach on the *tune* half of the
needle benchmark (tests/data/needles; benches/needle_bench.py), never the holdout.

A grid over ``RELEVANT_COSINE`` / ``RELEVANT_BM25`` (conversation/retention.py: when
a result counts as relevant to the step at all) and the recall's reach
(conversation/steps.py: how many of the best-scoring results, and how close to the
best, a question may recall), each setting run on every tune task in both windows
with ``ContextPolicy()``. Printed per setting: evidence kept (all, old, recent,
two), the share of runs whose every request fit, and the Anthropic-table cost; the
chosen setting is the one with the most evidence kept, ties to the cheaper. Then
write the chosen values into the modules by hand and quote
``needle_bench.py --split holdout`` (once).

    python benches/needle_tune.py [--out needle_tune.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benches"))

import needle_bench as nb  # noqa: E402
import rampart  # noqa: E402
from rampart.conversation import retention, steps  # noqa: E402

KEYS = (
    "evidence_kept",
    "evidence_old",
    "evidence_recent",
    "evidence_two",
    "held_all",
    "prefix_rewrites_mean",
    "cost_anthropic_mean",
)
GRID = {
    "cosine": (0.30, 0.36, 0.42),
    "bm25": (0.45, 0.6, 0.75),  # in rare terms (ItemScore.rare); absolute BM25 before
    "top": (2, 3),
    "ratio": (0.6, 0.8),
    "min_recall": (256, 512, 768),
}


def evaluate(
    reg: rampart.BlockRegistry,
    doc: dict[str, Any],
    texts: dict[str, str],
    tasks: list[dict[str, Any]],
    head: Any,
) -> dict[str, Any]:
    rows = []
    for window in nb.WINDOWS:
        for task in tasks:
            pol, _ = nb.policy("new_default")
            build = nb.rampart_builder(reg, pol, window)
            rows.append(nb.run_task(task, doc, texts, build, window, head))
    return nb.summarise(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--first", type=int, default=0, help="only the first N settings")
    ap.add_argument(
        "--around", default="", help="cosine,bm25,top,ratio,min_recall: vary one at a time"
    )
    a = ap.parse_args(argv)
    doc = nb.load()
    texts = nb.materialise(doc)
    tasks = [t for t in doc["tasks"] if t["split"] == "tune"]
    reg = nb.registry(rampart.OnnxEmbedder(threads=1))
    head = nb.head_chunks(reg)
    results = []
    grid = list(itertools.product(*GRID.values()))
    if a.around:  # the neighbourhood of a setting: one value changed at a time
        base = dict(zip(GRID, (float(x) for x in a.around.split(","))))
        grid = [
            tuple(v if k == name else base[k] for k in GRID)
            for name, values in GRID.items()
            for v in values
        ]
        grid = list(dict.fromkeys(grid))
    if a.first:
        grid = grid[: a.first]
    for cos, bm, top, ratio, least in grid:
        retention.RELEVANT_COSINE, retention.RELEVANT_BM25 = cos, bm
        steps._RECALL_TOP, steps._RECALL_RATIO = int(top), ratio
        steps.MIN_RECALL_TOKENS = int(least)
        s = evaluate(reg, doc, texts, tasks, head)
        row = {"cosine": cos, "bm25": bm, "top": top, "ratio": ratio, "min_recall": least, **s}
        results.append(row)
        print(
            json.dumps({k: row[k] for k in ("cosine", "bm25", "top", "ratio")}),
            json.dumps({k: v for k, v in s.items() if k in KEYS}),
            flush=True,
        )
    best = max(results, key=lambda r: (r["evidence_kept"], -r["cost_anthropic_mean"]))
    print("chosen:", json.dumps({k: best[k] for k in GRID}))
    if a.out:
        a.out.write_text(json.dumps({"grid": GRID, "results": results, "chosen": best}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
