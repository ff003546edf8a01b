"""Step 3 of ``make toolgate-train``: the trained encoder against MiniLM, held-out
servers only (split.py).

Every number here is on servers the encoder never saw: the 40-tool sets (natural,
indirect, fs/git; their six servers are held out whole) and, at each tier of the
scale set up to 479 tools, the base requests plus the requests of the held-out
scale servers (Redis, Chroma, Zotero). Requests of training servers are never
scored (they, or their tools' examples, were trained on). Both models are run
through rampart's normal path: ``BlockRegistry(embedding_model=NAME)``, each
server's tools loaded with its ``server:`` tag, the registry's own default gate
(``find_relevant``: MiniLM maps the task with the packaged query adapter, the
trained encoder is never mapped: the adapter belongs to MiniLM's ``model_id``).

* cold: tools without examples; enriched: every tool with its author examples
  (tool_gate_examples*.json; the registry then gates with ``ExampleGate``);
* the instruction-block check (tests/data/instruction_gate_tasks.json): the 42 tasks
  ranked among the 31 seed blocks and the 40 tools, plain cosine;
* latency of a new request on one thread: tokenize, encode (onnxruntime), and the
  gate's scoring at 479 tools once the vector is known, both models alternated in
  one process.

    python experiments/toolgate_train/evaluate.py --out toolgate-train-eval.json
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "benches"))

import rampart  # noqa: E402
import tool_gate_eval as base_eval  # noqa: E402
import tool_gate_scale as scale  # noqa: E402
from rampart.embeddings.prepare import DEFAULT_MODEL_NAME, TOOLS_MODEL_NAME  # noqa: E402
from rampart.toolgate import default_gate, packaged_adapter, set_query_adapter  # noqa: E402
from rampart.tools import with_examples  # noqa: E402
from split import HOLDOUT, role  # noqa: E402

# label -> (embedding model, query adapter on). "no adapter" is MiniLM untouched:
# the packaged adapter was trained on requests for the scale servers' tools, Redis,
# Chroma and Zotero among them, so on those it is not a held-out baseline.
MODELS = {
    DEFAULT_MODEL_NAME: (DEFAULT_MODEL_NAME, True),
    DEFAULT_MODEL_NAME + " (no adapter)": (DEFAULT_MODEL_NAME, False),
    TOOLS_MODEL_NAME: (TOOLS_MODEL_NAME, True),
}


def _registry(label: str) -> rampart.BlockRegistry:
    return rampart.BlockRegistry(embedding_model=MODELS[label][0])


def _adapter(label: str, reg: rampart.BlockRegistry) -> None:
    if not MODELS[label][1]:
        set_query_adapter(reg, None)


EXAMPLE_FILES = [
    base_eval.DATA / f
    for f in (
        "tool_gate_examples.json",
        "tool_gate_examples_scale_a.json",
        "tool_gate_examples_scale_b.json",
    )
]


def pct(r: dict[str, float]) -> str:
    return f"{100 * r['top1']:5.1f} / {100 * r['top3']:5.1f} ({r['n']})"


def forty(model: str, examples: dict[str, list[str]] | None) -> dict[str, Any]:
    """The 40-tool sets, both halves (all six servers are held out whole)."""
    requests, tools, _ = base_eval.load()
    if examples:
        mine = {k: v for k, v in examples.items() if k in base_eval.SERVER_OF}
        tools = with_examples(tools, mine)
    # benches/tool_gate_eval.py's registry(), with the model named
    reg = _registry(model)
    by_server: dict[str, list[Any]] = {}
    for t in tools:
        by_server.setdefault(base_eval.SERVER_OF[t.name], []).append(t)
    for server, group in by_server.items():
        reg.load_tools(group, tags=[base_eval.SERVER_TAG + server])
    reg.embed_pending()
    _adapter(model, reg)
    rank = base_eval.find_ranker(reg)
    out = base_eval.score_sets(requests, rank, ("tune", "holdout"))
    reg.release()
    return out


def tiers(model: str, examples: dict[str, list[str]] | None) -> list[dict[str, Any]]:
    """Per tier: base requests and the held-out scale servers' requests."""
    doc = scale.load_scale()
    server_of = {}
    for tier in doc["tiers"]:
        for f in tier:
            for t in scale.tool_defs(doc, f):
                server_of[t["name"]] = scale.server_name(f)
    held = [r for r in doc["requests"] if role(server_of[r["acceptable"][0]]) == "holdout"]
    dev = [r for r in doc["requests"] if role(server_of[r["acceptable"][0]]) == "dev"]
    rows = []
    files: list[str] = []
    for number, tier in enumerate(doc["tiers"], 1):
        files.extend(tier)
        t0 = time.perf_counter()
        reg, names = scale.build_registry(doc, files, MODELS[model][0], examples)
        _adapter(model, reg)
        rank = base_eval.find_ranker(reg)
        base = base_eval.score(doc["base_requests"], rank)
        mine = scale.in_scope(held, names)
        pooled = base_eval.score(
            [r for r in doc["base_requests"] if r["split"] == "holdout"] + mine, rank
        )
        row: dict[str, Any] = {
            "tier": number,
            "tools": len(names),
            "base": base,
            "heldout_scale": base_eval.score(mine, rank) if mine else {},
            "heldout_indirect": base_eval.score(
                [r for r in mine if r.get("style") == "indirect"], rank
            )
            if any(r.get("style") == "indirect" for r in mine)
            else {},
            "pooled_holdout": pooled,
            "dev": base_eval.score(scale.in_scope(dev, names), rank)
            if scale.in_scope(dev, names)
            else {},
            "seconds": time.perf_counter() - t0,
        }
        reg.release()
        rows.append(row)
        print(
            f"  {model:24s} {'enriched' if examples else 'cold':8s} {len(names):4d} tools  "
            f"base holdout {pct(base['holdout'])}  held-out scale (both halves) "
            f"{pct(row['heldout_scale']['all']) if mine else '-':>20s}  "
            f"pooled holdout {pct(pooled['all'])}  ({row['seconds']:.0f} s)",
            flush=True,
        )
    return rows


def instructions(model: str) -> dict[str, Any]:
    """The instruction tasks among the seed blocks and the 40 tools, plain cosine (and
    mapped by the packaged adapter where it belongs to the model)."""
    name = MODELS[model][0]
    emb = rampart.OnnxEmbedder(None if name == DEFAULT_MODEL_NAME else name)
    seeds = rampart.BlockRegistry.from_files(
        [*sorted(glob.glob(str(ROOT / "seeds" / "*.md"))), str(ROOT / "seeds" / "skills")],
        None,
        default_max_tokens=None,
    )
    blocks = [b for b in seeds.list_blocks() if b.semantic_name != "README"]
    names = [b.semantic_name for b in blocks]
    texts = [b.gate_text for b in blocks]
    seeds.release()
    _, tools, _ = base_eval.load()
    reg = rampart.BlockRegistry()
    reg.load_tools(tools)
    for b in reg.list_blocks():
        names.append(b.semantic_name)
        texts.append(b.gate_text)
    reg.release()
    tasks = json.loads((base_eval.DATA / "instruction_gate_tasks.json").read_text())["tasks"]
    m = np.asarray(emb.encode_batch(texts), dtype=np.float32)
    q = np.asarray(emb.encode_batch([t["task"] for t in tasks]), dtype=np.float32)
    out: dict[str, Any] = {}
    adapter = packaged_adapter()
    variants = {"plain": q}
    if MODELS[model][1] and adapter is not None and adapter.model_id == emb.model_id:
        variants["adapter"] = np.vstack(
            [np.frombuffer(adapter.map(v.tobytes()), dtype=np.float32) for v in q]
        )
    for label, qq in variants.items():
        order = np.argsort(-(qq @ m.T), axis=1, kind="stable")[:, :3]
        top1 = sum(names[o[0]] == t["block"] for t, o in zip(tasks, order, strict=True))
        top3 = sum(t["block"] in {names[i] for i in o} for t, o in zip(tasks, order, strict=True))
        out[label] = {"top1": top1 / len(tasks), "top3": top3 / len(tasks), "n": len(tasks)}
    return out


def latency(rounds: int = 60) -> dict[str, Any]:
    """A new request on one thread, split: tokenize, encode (the session run), and the
    registry's default gate scoring at 479 tools with its examples, the task's vector
    already computed. Both models alternate request by request in one process."""
    doc = scale.load_scale()
    examples = scale.load_example_files(EXAMPLE_FILES)
    files = [f for tier in doc["tiers"] for f in tier]
    texts = [r["request"] for r in doc["requests"]][:rounds]
    setups = []
    for model in (DEFAULT_MODEL_NAME, TOOLS_MODEL_NAME):
        emb = rampart.OnnxEmbedder(
            None if model == DEFAULT_MODEL_NAME else model, threads=1, vector_cache=False
        )
        reg, _ = scale.build_registry(doc, files, model, examples)
        gate = default_gate(reg)
        assert gate is not None
        gate.scores("warm up")
        emb.encode("warm up")
        setups.append((model, emb, reg, gate, {"tokenize": [], "encode": [], "score": []}))
    for t in texts:
        for _, emb, reg, gate, times in setups:
            t0 = time.perf_counter()
            ids = emb._truncate(emb._ids([t])[0])
            t1 = time.perf_counter()
            emb._run([ids])
            t2 = time.perf_counter()
            reg._gate.query(reg, t)  # the registry's own embedding of it, not timed
            time.sleep(0.02)
            t3 = time.perf_counter()
            gate.scores(t)
            t4 = time.perf_counter()
            times["tokenize"].append((t1 - t0) * 1e3)
            times["encode"].append((t2 - t1) * 1e3)
            times["score"].append((t4 - t3) * 1e3)
    out: dict[str, Any] = {}
    for model, _, reg, _, times in setups:
        med = {k: statistics.median(v) for k, v in times.items()}
        med["total"] = sum(med.values())
        out[model] = med
        print(
            f"  {model:24s} new request, 1 thread, medians over {len(texts)}: "
            + "  ".join(f"{k} {v:.2f} ms" for k, v in med.items()),
            flush=True,
        )
        reg.release()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--skip-tiers", action="store_true", help="40 tools only")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--models", default=",".join(MODELS), help="labels, comma-separated")
    args = ap.parse_args(argv)
    assert set(HOLDOUT) >= {"filesystem", "git", "memory", "time", "fetch", "sqlite"}
    examples = scale.load_example_files(EXAMPLE_FILES)
    result: dict[str, Any] = {"models": {}}
    for model in args.models.split(","):
        r: dict[str, Any] = {}
        for label, ex in (("cold", None), ("enriched", examples)):
            r[f"forty_{label}"] = f = forty(model, ex)
            print(
                f"{model:24s} {label:8s} 40 tools: "
                + "  ".join(
                    f"{k} {pct(f[k])}"
                    for k in ("natural/holdout", "indirect/holdout", "fsgit/holdout", "holdout")
                ),
                flush=True,
            )
            if not args.skip_tiers:
                r[f"tiers_{label}"] = tiers(model, ex)
        r["instructions"] = instructions(model)
        print(f"{model:24s} instruction tasks: {r['instructions']}", flush=True)
        result["models"][model] = r
    if not args.skip_latency:
        result["latency"] = latency()
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
