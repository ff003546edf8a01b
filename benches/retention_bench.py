"""What relevance-aware retention costs a compile (issue 30; docs/conversation.md,
"Keep what the step needs").

(1) Nothing transformed: the registry of 200 corpus blocks compiled with and
without a 1 000-message conversation that fits (benches/conversation_bench.py's
overhead measure, alternating in one process; the target: <= 50 µs over the
plain compile). Relevance costs nothing here: no result is scored while nothing
was ever cleared.

(2) A new question: a 200-item conversation (a user task, 99 ``read_file`` steps
on real documentation: this repository's docs/ and tests/data/skills, cut to
1.5-20 KB) compiled into a 16 000-token window, so most results were cleared by
earlier compiles and the question's needle must be found among them. Then, per
sample, a new question (never seen before) is appended and compiled with
``ContextPolicy(dry_run=True)`` (the whole decision — the query embedded, every
result scored, the recall planned — with nothing recorded, so every sample sees
the same 200-item state plus its question). MiniLM on one thread
(``OnnxEmbedder(threads=1)``), its passages embedded before the samples (as an
agent's earlier compiles did). Quoted: the median compile, and the median of the
query's embedding alone in the same process (the part a model costs).

    python benches/retention_bench.py [--samples 40] [--out retention_bench.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benches"))

import conversation_bench  # noqa: E402
import rampart  # noqa: E402
from rampart import ContextPolicy, Conversation  # noqa: E402

QUESTIONS = [
    "which setting decides how many recent tool outputs survive clearing?",
    "what happens to a SQLite store when two workers open the same fresh file?",
    "how large may one seed file be before it is refused?",
    "which price does the cache table give for a write on Anthropic?",
    "how do I keep the tools array byte-identical across tasks?",
    "what frame rate should an emoji GIF use in Slack?",
    "how are tool examples learned from runs?",
    "where is the OpenTelemetry span attribute for cleared items documented?",
]


def _docs() -> list[str]:
    paths = sorted((ROOT / "docs").glob("*.md")) + sorted(
        (ROOT / "tests" / "data" / "skills").glob("*/SKILL.md")
    )
    out = []
    for p in paths:
        t = p.read_text()
        if len(t) >= 1500:
            out.append(t[:20_000])
    return out


def build(n_steps: int = 99) -> Conversation:
    docs = _docs()
    conv = Conversation()
    conv.append({"role": "user", "content": "Read the documentation, then answer my questions."})
    for i in range(n_steps):
        conv.append(conversation_bench._step(i, docs[i % len(docs)]))
    return conv


def new_question(samples: int, model_dir: str | None = None) -> dict[str, Any]:
    model = rampart.OnnxEmbedder(model_dir, threads=1)
    reg = rampart.BlockRegistry(embedding_model=model)
    reg.write_block("You are a careful agent.", "intro")
    conv = build()
    pol = ContextPolicy()
    for _ in range(3):  # the agent's earlier compiles: clears recorded, passages embedded
        reg.compile(conversation=conv, context_window=16_000, reply_tokens=1024, policy=pol)
    conv.append({"role": "user", "content": QUESTIONS[0]})
    reg.compile(conversation=conv, context_window=16_000, reply_tokens=1024, policy=pol)
    dry = ContextPolicy(dry_run=True)
    times, embeds = [], []
    for s in range(samples):
        # a word never seen: the embedder's vector cache cannot answer it
        q = f"{QUESTIONS[s % len(QUESTIONS)]} ({uuid.uuid4().hex[:8]})"
        conv.append({"role": "user", "content": q})
        t0 = time.perf_counter()
        r = reg.compile(conversation=conv, context_window=16_000, reply_tokens=1024, policy=dry)
        times.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        model.encode_batch_report([f"{q} {uuid.uuid4().hex[:8]}"])
        embeds.append((time.perf_counter() - t0) * 1e3)
        assert r.context.message_tokens <= r.context.budget
    return {
        "model": model_dir or "all-MiniLM-L6-v2",
        "items": len(conv.items) - samples,
        "results": sum(1 for it in conv.items if it.kind == "tool_result"),
        "cleared_or_excerpted": sum(
            1 for m in r.message_report if m.action in ("cleared", "excerpted")
        ),
        "samples": samples,
        "compile_ms_median": round(statistics.median(times), 3),
        "query_embedding_ms_median": round(statistics.median(embeds), 3),
        "compile_without_embedding_ms": round(
            statistics.median(times) - statistics.median(embeds), 3
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--models", default="all-MiniLM-L6-v2,all-MiniLM-L6-v2:int8")
    a = ap.parse_args(argv)
    out: dict[str, Any] = {"nothing_transformed": conversation_bench.overhead()}
    out["new_question"] = [new_question(a.samples, m) for m in a.models.split(",")]
    print(json.dumps(out, indent=2))
    if a.out:
        a.out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
