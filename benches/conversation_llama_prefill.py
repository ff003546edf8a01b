"""How much of each request llama.cpp can reuse from the one before (issue 24, 9d):
the same 200-call history as benches/conversation_run.py (real MCP tool output),
each request rendered to one prompt and prefilled by llama-cpp-python with
SmolLM2-135M in process. llama.cpp keeps the previous prompt's KV cache and
evaluates only what follows the longest common token prefix (the ``local`` price
table), so the figure that matters is how many tokens each call must prefill.

Two ways of fitting the history into the window, alternated call by call in one
process (one model instance each, so neither evicts the other's cache):

- ``trim``: LangChain's ``trim_messages`` to the window each call (what most
  framework users do): the oldest kept message moves, so the prefix is rewritten;
- ``rampart``: the conversation compiled by ``reg.compile(conversation=...,
  context_window=..., policy=ContextPolicy(prices="local"))``.

Printed: per strategy, prompt tokens per call (llama's tokenizer), tokens reused,
tokens prefilled, and the median prefill time per call.

    .venv/bin/python benches/conversation_llama_prefill.py --calls 40 --window 6000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import conversation_run as cr
import rampart
from rampart import gguf


def render(system: str, msgs: list[dict[str, Any]]) -> str:
    """A ChatML prompt (SmolLM2's template) of an OpenAI Chat message list."""
    out = [f"<|im_start|>system\n{system}<|im_end|>\n"]
    for m in msgs:
        role = m["role"]
        if role == "tool":
            text = f"[result of {m.get('tool_call_id')}]\n{m.get('content') or ''}"
            role = "user"
        elif m.get("tool_calls"):
            text = "\n".join(
                f"call {c['function']['name']}({c['function']['arguments']})"
                for c in m["tool_calls"]
            )
        else:
            text = str(m.get("content") or "")
        out.append(f"<|im_start|>{role}\n{text}<|im_end|>\n")
    out.append("<|im_start|>assistant\n")
    return "".join(out)


class Prefiller:
    """One llama.cpp context: prefill a prompt, reusing the previous one's prefix."""

    def __init__(self, n_ctx: int) -> None:
        from llama_cpp import Llama

        self.llm = Llama(str(gguf.smollm2_path()), n_ctx=n_ctx, n_threads=2, verbose=False)
        self.prev: list[int] = []

    def prefill(self, prompt: str) -> tuple[int, int, float]:
        """(prompt tokens, tokens reused, seconds): the llama.cpp eval of what follows
        the common prefix, as ``Llama.generate`` does."""
        toks = self.llm.tokenize(prompt.encode(), add_bos=False, special=True)
        n = 0
        for a, b in zip(self.prev, toks):
            if a != b:
                break
            n += 1
        n = min(n, len(toks) - 1)  # the last token is always evaluated
        t0 = time.perf_counter()
        self.llm.n_tokens = n  # keep the KV cache of the shared prefix
        self.llm.eval(toks[n:])
        dt = time.perf_counter() - t0
        self.prev = toks
        return len(toks), n, dt


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=40)
    p.add_argument("--window", type=int, default=6000, help="context window (o200k tokens)")
    p.add_argument("--reply", type=int, default=256)
    args = p.parse_args()
    cr.REPLY_TOKENS = args.reply
    reg = cr.registry()
    system = reg.compile(tools_in_prompt=False).prompt
    head = sum(t for _, t in cr.head_chunks(reg))
    full = cr.history(args.calls)
    trim = cr.strategy_trim(args.window, head)
    conv = rampart.Conversation()
    policy = rampart.ContextPolicy(provider="openai", prices="local")
    appended = 0
    engines = {"trim": Prefiller(12288), "rampart": Prefiller(12288)}
    rows: dict[str, list[tuple[int, int, float]]] = {k: [] for k in engines}
    for call in range(1, args.calls + 1):
        upto = 1 + 2 * (call - 1)
        msgs = full[:upto]
        if upto > appended:
            conv.append(full[appended:upto])
            appended = upto
        result = reg.compile(
            conversation=conv,
            context_window=args.window,
            reply_tokens=args.reply,
            policy=policy,
            tools_in_prompt=False,
        )
        built = {
            "trim": trim(msgs),
            "rampart": [dict(m) for m in result.messages("openai_chat")],
        }
        for name, engine in engines.items():
            rows[name].append(engine.prefill(render(system, built[name])))
    print(f"{args.calls} calls, window {args.window}, SmolLM2-135M (llama.cpp, 2 threads)")
    print(f"{'':8s} {'prompt/call':>11s} {'reused':>8s} {'prefilled':>10s} {'ms/call':>8s}")
    for name, r in rows.items():
        prompt = statistics.mean(x[0] for x in r)
        reused = sum(x[1] for x in r) / max(1, sum(x[0] for x in r))
        filled = statistics.mean(x[0] - x[1] for x in r)
        ms = statistics.median(x[2] for x in r) * 1000
        print(f"{name:8s} {prompt:11.0f} {reused:8.1%} {filled:10.0f} {ms:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
