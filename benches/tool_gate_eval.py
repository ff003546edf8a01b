"""Tool-gate quality: top-1 / top-3 hit rates on tests/data/tool_gate_eval.json.

Every tool of the six MCP servers in the set is loaded into one registry (40 tool
blocks); each request is a task; a hit is an acceptable tool ranked first (top-1)
or among the first three (top-3). Rates are reported for the tune half (where
choices were made), the held-out half (never tuned on) and all requests.

Variants:

* dense gates with the default model (all-MiniLM-L6-v2), by what a tool block is
  embedded from: its prompt rendering (the old default), name + description, and
  :func:`rampart.tools.tool_gate_text` (the default: the registry's own gate);
* :class:`rampart.toolgate.HybridGate`: dense + w x BM25, w picked on the tune half;
* ``--openai URL MODEL``: another embedding model behind an OpenAI-compatible
  endpoint (:class:`rampart.OpenAIEmbedder`; ``--asymmetric`` sends ``input_type``
  query/passage, for e5-style models);
* ``--judge MODEL``: :class:`rampart.toolgate.JudgeGate` with a local llama.cpp
  model (``qwen2.5-coder-1.5b``), on the first ``--judge-limit`` requests of each
  half (a model call per request is slow on a CPU).

    python benches/tool_gate_eval.py [--out results.json] [--judge qwen2.5-coder-1.5b]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
EVAL = DATA / "tool_gate_eval.json"
SPLITS = ("tune", "holdout", "all")
WEIGHTS = (0.05, 0.1, 0.2, 0.3, 0.5)

import rampart  # noqa: E402
from rampart.toolgate import DenseGate, HybridGate, JudgeGate  # noqa: E402
from rampart.tools import ToolSchema, parse_tools, render_tool, tool_gate_text  # noqa: E402

Ranker = Callable[[str], list[str]]  # task -> tool names, best first


def load() -> tuple[list[dict[str, Any]], list[ToolSchema], list[str]]:
    doc = json.loads(EVAL.read_text(encoding="utf-8"))
    files = doc["tool_files"]
    tools = [t for f in files for t in parse_tools(DATA / f)]
    return doc["requests"], tools, files


def score(requests: Sequence[dict[str, Any]], rank: Ranker) -> dict[str, dict[str, float]]:
    hits: dict[str, list[tuple[bool, bool]]] = {s: [] for s in SPLITS}
    for r in requests:
        top = rank(r["request"])[:3]
        ok = set(r["acceptable"])
        hit = (bool(top) and top[0] in ok, bool(ok & set(top)))
        hits[r["split"]].append(hit)
        hits["all"].append(hit)
    return {
        s: {
            "n": len(h),
            "top1": sum(a for a, _ in h) / len(h),
            "top3": sum(b for _, b in h) / len(h),
        }
        for s, h in hits.items()
        if h
    }


def matrix_ranker(embed_q: Any, embed_d: Any, texts: list[str], names: list[str]) -> Ranker:
    import numpy as np

    d = np.asarray(embed_d(texts), dtype=np.float32)
    d /= np.linalg.norm(d, axis=1, keepdims=True)

    def rank(task: str) -> list[str]:
        q = np.asarray(embed_q([task])[0], dtype=np.float32)
        s = d @ (q / np.linalg.norm(q))
        return [names[i] for i in np.argsort(-s, kind="stable")]

    return rank


def registry(files: list[str]) -> rampart.BlockRegistry:
    reg = rampart.BlockRegistry(embedding_model="default")
    for f in files:
        reg.load_tools(DATA / f)
    reg.embed_pending()
    return reg


def gate_ranker(reg: rampart.BlockRegistry, gate: Any) -> Ranker:
    blocks = reg.list_blocks()

    def rank(task: str) -> list[str]:
        scores = gate(task, blocks)
        order = sorted(range(len(blocks)), key=lambda i: -scores[i])
        return [blocks[i].semantic_name for i in order]

    return rank


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument("--openai", nargs=2, metavar=("URL", "MODEL"), default=None)
    ap.add_argument("--asymmetric", action="store_true", help="input_type query/passage")
    ap.add_argument("--judge", default=None, help="llama.cpp model alias or GGUF path")
    ap.add_argument("--judge-limit", type=int, default=30, help="requests per half")
    args = ap.parse_args(argv)

    requests, tools, files = load()
    names = [t.name for t in tools]
    emb = rampart.default_embedder()
    rows: list[dict[str, Any]] = []

    def add(
        variant: str, rank: Ranker, subset: Sequence[dict[str, Any]] = requests, **kw: Any
    ) -> None:
        t0 = time.perf_counter()
        result = score(subset, rank)
        # Wall time per task, caches included (the embedder's vector cache answers a
        # repeated text): meaningful for the judge only. benches/test_bench_toolgate.py
        # times the gate properly.
        per = (time.perf_counter() - t0) / len(subset) * 1e3
        rows.append({"variant": variant, "result": result, "ms_per_task": per, **kw})
        cells = "  ".join(f"{s} {v['top1']:6.1%} {v['top3']:6.1%}" for s, v in result.items())
        print(f"{variant:44s} {cells}  ({per:.0f} ms/task)", flush=True)

    print(f"{len(requests)} requests, {len(tools)} tools from {len(files)} servers")
    print(f"{'variant':44s} {'   top-1 / top-3 per half':>30s}")
    add(
        "dense MiniLM: prompt rendering (old default)",
        matrix_ranker(emb.encode_batch, emb.encode_batch, [render_tool(t) for t in tools], names),
    )
    add(
        "dense MiniLM: name + description",
        matrix_ranker(
            emb.encode_batch,
            emb.encode_batch,
            [f"{t.name.replace('_', ' ')}: {t.description}" for t in tools],
            names,
        ),
    )
    add(
        "dense MiniLM: description only",
        matrix_ranker(emb.encode_batch, emb.encode_batch, [t.description for t in tools], names),
    )
    add(
        "dense MiniLM: tool_gate_text (direct)",
        matrix_ranker(
            emb.encode_batch, emb.encode_batch, [tool_gate_text(t) for t in tools], names
        ),
    )

    reg = registry(files)
    add("default gate (registry, tool_gate_text)", gate_ranker(reg, DenseGate(reg)))

    # Hybrid: pick the BM25 weight on the tune half only, then report every half.
    tune = [r for r in requests if r["split"] == "tune"]
    best_w, best = 0.0, (-1.0, -1.0)
    for w in WEIGHTS:
        res = score(tune, gate_ranker(reg, HybridGate(reg, w)))["tune"]
        print(f"  hybrid w={w}: tune {res['top1']:.1%} / {res['top3']:.1%}")
        if (res["top3"], res["top1"]) > best:
            best_w, best = w, (res["top3"], res["top1"])
    add(
        f"hybrid dense + {best_w} x BM25 (w tuned)",
        gate_ranker(reg, HybridGate(reg, best_w)),
        weight=best_w,
    )

    if args.openai:
        url, model = args.openai
        extra_q = {"input_type": "query"} if args.asymmetric else None
        extra_d = {"input_type": "passage"} if args.asymmetric else None
        q_emb = rampart.OpenAIEmbedder(url, model, extra_body=extra_q)
        d_emb = rampart.OpenAIEmbedder(url, model, extra_body=extra_d)
        for label, texts in (
            ("prompt rendering", [render_tool(t) for t in tools]),
            ("tool_gate_text", [tool_gate_text(t) for t in tools]),
        ):
            add(
                f"dense {model}: {label}",
                matrix_ranker(q_emb.encode_batch, d_emb.encode_batch, texts, names),
            )

    if args.judge:
        from rampart.llm import LlamaCppBackend

        backend = LlamaCppBackend(args.judge, n_ctx=4096, native_tools=False)
        judge = JudgeGate(backend, fallback=DenseGate(reg))
        subset = [
            r
            for half in ("tune", "holdout")
            for r in [x for x in requests if x["split"] == half][: args.judge_limit]
        ]
        dense_same = score(subset, gate_ranker(reg, DenseGate(reg)))
        same = ", ".join(
            f"{half} {v['top1']:.1%}/{v['top3']:.1%}" for half, v in dense_same.items()
        )
        print(f"  (default gate on the judge's subset: {same})")
        add(
            f"LLM judge {args.judge} + dense fallback",
            gate_ranker(reg, judge),
            subset,
            subset_default=dense_same,
        )
        backend.close()
    reg.release()

    if args.out:
        meta = {
            "requests": len(requests),
            "tools": len(tools),
            "servers": len(files),
            "python": sys.version.split()[0],
            "median_ms": statistics.median(r["ms_per_task"] for r in rows),
        }
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
