"""Choose the example gate's weights on the tune halves only (docs/tool-gate.md, Selection).

The objective, fixed before any number was seen: the most top-3 hits summed over
the 40-tool tune halves (natural + indirect of benches/tool_gate_eval.py, 162
requests) and the 479-tool "all" tune half of benches/tool_gate_scale.py (296
requests, author examples from the three example files), ties broken by summed
top-1 hits, then by the simpler setting (fewer non-zero terms). The grid:
second_weight {1, 2} x lexical_weight {0.1, 0.2} x server_weight {0, 0.1} x
hub_weight {0, 0.5}. Each registry is built once (the default model, so the
packaged query adapter is on); only the gate varies. No holdout request is scored.

    python benches/tool_gate_select.py [--out selection.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import rampart

# Run as a script, benches/ is sys.path[0].
import tool_gate_eval as base_eval
import tool_gate_scale as scale
from rampart.toolgate import ExampleGate
from rampart.tools import load_examples, with_examples

SECOND = (1.0, 2.0)
LEXICAL = (0.1, 0.2)
SERVER = (0.0, 0.1)
HUB = (0.0, 0.5)
EXAMPLE_FILES = [
    base_eval.DATA / "tool_gate_examples.json",
    base_eval.DATA / "tool_gate_examples_scale_a.json",
    base_eval.DATA / "tool_gate_examples_scale_b.json",
]


def hits(requests: Sequence[dict[str, Any]], rank: base_eval.Ranker) -> tuple[int, int]:
    """(top-3 hits, top-1 hits) over the tune half of ``requests``."""
    got = [base_eval._hit(r, rank) for r in requests if r["split"] == "tune"]
    return sum(b for _, b in got), sum(a for a, _ in got)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write the table as JSON here")
    args = ap.parse_args(argv)

    requests, tools, _ = base_eval.load()
    small_reqs = requests["natural"] + requests["indirect"]
    small = base_eval.registry(with_examples(tools, load_examples(base_eval.EXAMPLES)))

    doc = scale.load_scale()
    examples = scale.load_example_files(EXAMPLE_FILES)
    scale.check_examples(doc, examples)
    files = [f for tier in doc["tiers"] for f in tier]
    big, names = scale.build_registry(doc, files, rampart.default_embedder(), examples)
    big_reqs = scale.in_scope(doc["base_requests"] + doc["requests"], names)

    n40 = sum(r["split"] == "tune" for r in small_reqs)
    n479 = sum(r["split"] == "tune" for r in big_reqs)
    print(f"tune requests: {n40} at {len(tools)} tools, {n479} at {len(names)} tools")
    rows = []
    for sw, lw, vw, hw in itertools.product(SECOND, LEXICAL, SERVER, HUB):
        kw = {"second_weight": sw, "lexical_weight": lw, "server_weight": vw, "hub_weight": hw}
        s3, s1 = hits(small_reqs, base_eval.gate_ranker(small, ExampleGate(small, **kw)))
        b3, b1 = hits(big_reqs, base_eval.gate_ranker(big, ExampleGate(big, **kw)))
        terms = sum(1 for v in (sw, lw, vw, hw) if v)
        row = {**kw, "top3_40": s3, "top1_40": s1, "top3_479": b3, "top1_479": b1}
        row.update(n40=n40, n479=n479, top3=s3 + b3, top1=s1 + b1, terms=terms)
        rows.append(row)
        print(
            f"second {sw} lexical {lw} server {vw} hub {hw}: 40 tools {s3}/{s1}, "
            f"479 tools {b3}/{b1}, sum top-3 {s3 + b3} top-1 {s1 + b1}",
            flush=True,
        )
    # Most top-3, then most top-1, then fewest non-zero terms (then the smaller
    # weights, so the choice is deterministic).
    best = max(
        rows,
        key=lambda r: (
            r["top3"],
            r["top1"],
            -r["terms"],
            -r["second_weight"],
            -r["lexical_weight"],
            -r["server_weight"],
            -r["hub_weight"],
        ),
    )
    print(
        "chosen: "
        + ", ".join(
            f"{k}={best[k]}"
            for k in ("second_weight", "lexical_weight", "server_weight", "hub_weight")
        )
    )
    small.release()
    big.release()
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "chosen": best}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
