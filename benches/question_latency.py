"""The latency a user sees when a question arrives after an agent's tool loop.

An agent loop of file reads (the needle benchmark's trajectories,
tests/data/needles, and the second set's where given) is compiled after every
read into a 16 000-token window, with the model's call time between steps (a
sleep of ``--model-seconds``: the background embedder works then, as it would
while a real model answers); then the user's question is appended and that
compile is timed: the number a user waits for before the model call. Measured
cold: ``RAMPART_VECTOR_CACHE=0`` is set before rampart is imported (new tool
output is never in a vector cache), every run uses a new conversation, and the
question's own embedding is never cached.

Printed per condition (median, min, max over the tasks, in ms):

- ``question``: the question's compile, background embedding on (the default);
- ``question_sync``: the same with ``RAMPART_BACKGROUND_EMBED=0`` (each step's
  compile embeds what arrived; the question's compile embeds nothing new);
- ``question_lazy``: nothing embedded before the question (``--lazy``: what a
  scorer that embeds on demand pays, the behaviour before this release);
- ``steady``: a compile at 200 items with nothing new to score (the hot path).

    python benches/question_latency.py [--tasks 6] [--model-seconds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ["RAMPART_VECTOR_CACHE"] = "0"  # cold: before rampart is imported

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benches"))

import needle_bench as nb  # noqa: E402
import rampart  # noqa: E402
from rampart.relevance import background  # noqa: E402

WINDOW = 16_000


def run_task(
    reg: rampart.BlockRegistry,
    task: dict[str, Any],
    doc: dict[str, Any],
    texts: dict[str, str],
    model_seconds: float,
    mode: str,
) -> float:
    """The question's compile time (ms) after the task's trajectory."""
    conv = rampart.Conversation()
    pol = rampart.ContextPolicy()
    msgs = nb.steps(task, doc, texts)
    for step in msgs[:-1]:
        conv.append(step)
        if mode != "lazy":
            reg.compile(conversation=conv, context_window=WINDOW, reply_tokens=nb.REPLY, policy=pol)
            # the model's call: the background embedder works meanwhile
            t_end = time.perf_counter() + model_seconds
            background.wait_idle(model_seconds)
            time.sleep(max(0.0, t_end - time.perf_counter()))
    conv.append(msgs[-1])
    t0 = time.perf_counter()
    reg.compile(conversation=conv, context_window=WINDOW, reply_tokens=nb.REPLY, policy=pol)
    return (time.perf_counter() - t0) * 1000


def steady(reg: rampart.BlockRegistry, doc: dict[str, Any], texts: dict[str, str]) -> list[float]:
    """Compiles at 200 items with nothing new to score: the per-step overhead."""
    conv = rampart.Conversation()
    pol = rampart.ContextPolicy()
    src = list(doc["sources"])
    conv.append({"role": "user", "content": "read these"})
    i = 0
    while len(conv.items) < 200:
        sid = src[i % len(src)]
        conv.append(
            [
                nb.call_message(i, doc["sources"][sid]),
                {"role": "tool", "tool_call_id": f"call_{i:03d}", "content": texts[sid][:600]},
            ]
        )
        i += 1
    conv.append({"role": "user", "content": "which file sets the default window?"})
    reg.compile(conversation=conv, context_window=10**6, reply_tokens=nb.REPLY, policy=pol)
    background.wait_idle(600)
    out = []
    for _ in range(30):
        t0 = time.perf_counter()
        reg.compile(conversation=conv, context_window=10**6, reply_tokens=nb.REPLY, policy=pol)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def stats(xs: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(xs), 1),
        "min_ms": round(min(xs), 1),
        "max_ms": round(max(xs), 1),
        "n": len(xs),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=6, help="tasks per data set (tune split)")
    ap.add_argument("--model-seconds", type=float, default=3.0)
    ap.add_argument(
        "--needles",
        action="append",
        type=Path,
        default=None,
        help="a tasks.json (default: tests/data/needles, and needles2 if present)",
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    paths = args.needles or [
        p for p in (nb.NEEDLES, ROOT / "tests/data/needles2/tasks.json") if p.exists()
    ]
    embedder = rampart.OnnxEmbedder()
    reg = nb.registry(embedder)
    out: dict[str, Any] = {"window": WINDOW, "model_seconds": args.model_seconds, "sets": {}}
    for path in paths:
        doc = nb.load(path)
        texts = nb.materialise(doc)
        tasks = [t for t in doc["tasks"] if t["split"] == "tune"][: args.tasks]
        res: dict[str, Any] = {}
        for mode in ("background", "sync", "lazy"):
            os.environ["RAMPART_BACKGROUND_EMBED"] = "0" if mode == "sync" else "1"
            some = tasks[:2] if mode == "lazy" else tasks  # lazy is slow: two tasks show it
            times = [run_task(reg, t, doc, texts, args.model_seconds, mode) for t in some]
            res[
                {"background": "question", "sync": "question_sync", "lazy": "question_lazy"}[mode]
            ] = stats(times)
            print(path.parent.name, mode, res, flush=True)
        os.environ["RAMPART_BACKGROUND_EMBED"] = "1"
        res["steady"] = stats(steady(reg, doc, texts))
        out["sets"][path.parent.name] = res
        print(path.parent.name, json.dumps(res), flush=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
