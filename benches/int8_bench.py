"""int8 against float32 for the packaged embedding model, in one process.

* cosine to sentence-transformers' float32 vectors on the 25 reference texts
  (tests/data/minilm_reference.json, mpnet_reference.json for all-mpnet-base-v2;
  the tool encoder has no such reference), and of int8 to rampart's own float32
  graph of the same model on those texts;
* tool-gate hit rates on the HOLDOUT requests only (benches/tool_gate_eval.py's
  sets: natural and indirect holdout halves, fsgit), cold (the packaged query
  adapter on both for all-MiniLM-L6-v2, the plain cosine gate for the others: the
  adapter is trained for MiniLM's vectors) and with the author examples;
* a new request's embedding: one fresh text per repetition (no vector cache),
  float32 and int8 alternated in the same loop, 1-thread sessions, medians and the
  ratio.

    python benches/int8_bench.py [--model all-MiniLM-L6-v2] [--reps 300] [--out f.json]
    (--model all-mpnet-base-v2, all-MiniLM-L6-v2:tools: the int8 graph is NAME:int8)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benches"))

import numpy as np  # noqa: E402
import rampart  # noqa: E402
import tool_gate_eval as tge  # noqa: E402
from rampart.embeddings import OnnxEmbedder  # noqa: E402
from rampart.toolgate import packaged_adapter, set_query_adapter  # noqa: E402
from rampart.tools import with_examples  # noqa: E402

DATA = ROOT / "tests" / "data"
# sentence-transformers' float32 vectors of the same 25 texts, per model
REFERENCES = {
    "all-MiniLM-L6-v2": DATA / "minilm_reference.json",
    "all-mpnet-base-v2": DATA / "mpnet_reference.json",
}


def _stats(cos: Any) -> dict[str, float]:
    return {"min": float(cos.min()), "median": float(np.median(cos)), "n": len(cos)}


def cosines(embs: dict[str, OnnxEmbedder], model: str) -> dict[str, Any]:
    reference = REFERENCES.get(model, REFERENCES["all-MiniLM-L6-v2"])
    items = json.loads(reference.read_text(encoding="utf-8"))["items"]
    texts = [it["text"] for it in items]
    got = {k: e.encode_batch(texts) for k, e in embs.items()}
    out: dict[str, Any] = {}
    if model in REFERENCES:
        ref = np.array([it["embedding"] for it in items], dtype=np.float32)
        ref /= np.linalg.norm(ref, axis=1, keepdims=True)
        out = {k: _stats((g * ref).sum(axis=1)) for k, g in got.items()}
    out["int8_to_own_float32"] = _stats((got["int8"] * got["float32"]).sum(axis=1))
    return out


def holdout_rates(emb: OnnxEmbedder, examples: bool, adapter: Any) -> dict[str, Any]:
    requests, tools, _ = tge.load()
    if examples:
        tools = with_examples(tools, tge.EXAMPLES)
    reg = rampart.BlockRegistry(embedding_model=emb)
    by_server: dict[str, list[Any]] = {}
    for t in tools:
        by_server.setdefault(tge.SERVER_OF.get(t.name, ""), []).append(t)
    for server, group in by_server.items():
        reg.load_tools(group, tags=[tge.SERVER_TAG + server] if server else None)
    reg.embed_pending()
    set_query_adapter(reg, adapter)  # the same cold gate for both variants
    rates = tge.score_sets(requests, tge.find_ranker(reg), halves=("holdout",))
    reg.release()
    return rates


def latency(embs: dict[str, OnnxEmbedder], reps: int) -> dict[str, Any]:
    words = "find stage commit the parser files branch logs time zone read list".split()
    times: dict[str, list[float]] = {k: [] for k in embs}
    for i in range(reps):
        # a new request each time: the same words, in a new order, with a counter
        text = " ".join(words[(i + j) % len(words)] for j in range(9)) + f" #{i}"
        for name, emb in embs.items():
            t0 = time.perf_counter()
            emb.encode(text)
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return {"median_ms": med, "reps": reps}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    embs = {
        "float32": OnnxEmbedder(args.model, threads=1, vector_cache=False),
        "int8": OnnxEmbedder(f"{args.model}:int8", threads=1, vector_cache=False),
    }
    out: dict[str, Any] = {"model": args.model}
    out["cosine"] = cosines(embs, args.model)
    adapter = packaged_adapter() if args.model == "all-MiniLM-L6-v2" else None
    out["query_adapter"] = adapter is not None
    out["holdout_cold"] = {k: holdout_rates(e, False, adapter) for k, e in embs.items()}
    out["holdout_examples"] = {k: holdout_rates(e, True, adapter) for k, e in embs.items()}
    out["latency"] = latency(embs, args.reps)
    med = out["latency"]["median_ms"]
    out["latency"]["ratio_int8_to_float32"] = med["int8"] / med["float32"]
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
