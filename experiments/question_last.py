"""Does a small model read a question better above or below the text recalled for it?

At the default condition's question request of each task-success task
(benches/task_success.py), one model call per variant, temperature 0, from an
empty KV cache: ``A`` the request as rampart sent it at b0b38a2 (the question, then
the recall ending "[end of recalled text: answer the user's question above]"), ``B``
the same text with the recalls moved before the question (their closing line
"[end of recalled text]"), ``C`` the recalls after the question, the closing line
restating the question. Tasks whose request holds no recall get ``A`` only.

    python experiments/question_last.py TASK_ID,... OUT.jsonl

Run at b0b38a2 (before rampart put the recalls before the question) on the first
31 held-out tasks; rows in experiments/question_last.jsonl. At a later rampart the
request already has the recalls before the question, so ``B`` and ``C`` find no
recall after it and only ``A`` runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "benches"), str(ROOT / "experiments")]

import conversation_clearing as cc  # noqa: E402
import needle_bench as nb  # type: ignore[import-not-found]  # noqa: E402
import rampart  # noqa: E402
import task_success as ts  # type: ignore[import-not-found]  # noqa: E402
from rampart.llm import LlamaCppBackend  # noqa: E402

RECALLED = "[recalled for the current step"
#: the closing line of the last recall at b0b38a2
OLD_CLOSING = "[end of recalled text: answer the user's question above]"


class _Stop(Exception):
    """Raised after the question's first call: the variants are all this measures."""


def variants(
    task: dict[str, Any], doc: dict[str, Any], texts: dict[str, str], model: Any, embedder: Any
) -> dict[str, tuple[str, str]]:
    """Each variant's (answer, outcome) at the task's default question request."""
    real = model.backend.chat
    got: dict[str, tuple[str, str]] = {}
    question = task["question"]

    def call(msgs: list[dict[str, Any]], name: str, **kw: Any) -> None:
        model.llm.reset()
        text = real(msgs, **kw).text.strip()
        got[name] = (text, ts.judge(text, task["answers"], False))

    def chat(sent: list[dict[str, Any]], **kw: Any) -> Any:
        q = max(
            i for i, m in enumerate(sent) if m["role"] == "user" and question in str(m["content"])
        )
        call(sent, "A", **kw)
        tail = sent[q + 1 :]
        if tail and all(
            m["role"] == "user" and str(m["content"]).startswith(RECALLED) for m in tail
        ):
            before = [dict(m) for m in tail]
            before[-1]["content"] = before[-1]["content"].replace(
                OLD_CLOSING, "[end of recalled text]"
            )
            call([*sent[:q], *before, sent[q]], "B", **kw)
            restated = [dict(m) for m in tail]
            restated[-1]["content"] = restated[-1]["content"].replace(
                OLD_CLOSING, f"[end of recalled text. The user's question: {question}]"
            )
            call([*sent[: q + 1], *restated], "C", **kw)
        raise _Stop

    model.backend.chat = chat
    try:
        ts.run_task(
            model, task, doc, texts, "default", window=2048, reply=64, steps=3, embedder=embedder
        )
    except _Stop:
        pass
    finally:
        model.backend.chat = real
    return got


def main() -> None:
    ids, out = sys.argv[1].split(","), Path(sys.argv[2])
    doc = ts.load()
    texts = nb.materialise(doc)
    model = cc.Model(LlamaCppBackend("qwen2.5-coder-1.5b", n_ctx=8192, n_threads=2))
    embedder = rampart.OnnxEmbedder(threads=1)
    by_id = {t["id"]: t for t in doc["tasks"]}
    with out.open("a") as f:
        for tid in ids:
            got = variants(by_id[tid], doc, texts, model, embedder)
            print(tid, got, flush=True)
            f.write(json.dumps({"task": tid, **got}) + "\n")
            f.flush()


if __name__ == "__main__":
    main()
