"""The judge gate: an LLM reads the request and the tool list and names the tools
it needs (one model call per compile: seconds on a CPU, so for agents whose tool
lists are large and whose model calls cost more than that anyway)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rampart._view import GateFn
from rampart.block import InstructionBlock
from rampart.errors import InvalidArgumentError

if TYPE_CHECKING:
    from rampart.llm import Backend

__all__ = ["JudgeGate", "judge_prompt", "parse_picks"]


def judge_prompt(tools: Sequence[tuple[str, str]], picks: int) -> str:
    """The judge's system prompt: the tool list, in registry order (a fixed prefix,
    so a local model's prompt cache reuses it from one task to the next)."""
    lines = "\n".join(f"- {name}: {_first_sentence(desc)}" for name, desc in tools)
    return (
        f"You pick tools for requests. Reply with the names of the {picks} tools that best "
        "serve the request, best first, one per line, nothing else.\n\nTools:\n" + lines
    )


def _first_sentence(text: str) -> str:
    one = " ".join(text.split())
    cut = one.find(". ")
    return one if cut < 0 else one[: cut + 1]


def parse_picks(reply: str, names: Sequence[str], picks: int) -> list[str]:
    """Tool names in the order the reply names them (unknown words ignored)."""
    known = set(names)
    out: list[str] = []
    for word in re.findall(r"[A-Za-z0-9_-]+", reply):
        if word in known and word not in out:
            out.append(word)
            if len(out) == picks:
                break
    return out


class JudgeGate:
    """An LLM chooses the tools (any :class:`rampart.llm.Backend`).

    Per compile, one chat call: the system prompt lists every tool block (name and
    first sentence of its description), the user message is the task; the reply's
    tool names, best first, score above every other block (``2 - rank/100``).
    Blocks that are not picked get ``fallback``'s score (a :class:`DenseGate` or
    :class:`HybridGate`; without one, 0), so instruction blocks are still gated
    by relevance and the judge only has to get the tools right.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        fallback: GateFn | None = None,
        picks: int = 3,
        max_tokens: int = 48,
        seed: int = 0,
    ) -> None:
        if type(picks) is not int or picks < 1:
            raise InvalidArgumentError("JudgeGate picks must be an int >= 1")
        self.backend = backend
        self.fallback = fallback
        self.picks = picks
        self.max_tokens = max_tokens
        self.seed = seed
        self.last_reply = ""

    def choose(self, task_text: str, tools: Sequence[tuple[str, str]]) -> list[str]:
        """The judge's picks for a task among ``(name, description)`` pairs."""
        messages: list[Mapping[str, Any]] = [
            {"role": "system", "content": judge_prompt(tools, self.picks)},
            {"role": "user", "content": f"Request: {task_text}"},
        ]
        reply = self.backend.chat(
            messages, temperature=0.0, seed=self.seed, max_tokens=self.max_tokens
        )
        self.last_reply = reply.text
        return parse_picks(reply.text, [n for n, _ in tools], self.picks)

    def __call__(self, task_text: str, blocks: Sequence[InstructionBlock]) -> list[float]:
        base = list(self.fallback(task_text, blocks)) if self.fallback else [0.0] * len(blocks)
        schemas = [b.tool_schema for b in blocks]
        tools = [(s.name, s.description) for s in schemas if s is not None]
        if not tools:
            return base
        rank = {name: i for i, name in enumerate(self.choose(task_text, tools))}
        return [
            2.0 - rank[s.name] / 100 if s is not None and s.name in rank else score
            for s, score in zip(schemas, base)
        ]
