"""Deterministic, realistic-looking instruction blocks for the benchmarks.

Every block is a few English instruction sentences (~60 cl100k tokens), built from
seeded word pools and sentence templates, so runs are repeatable and every block
is distinct. Shared by ``conftest.py`` (pytest-benchmark) and ``compare.py``.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from collections import OrderedDict
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "seeds"

SIZES = (31, 200, 10_000, 100_000)
TARGET_TOKENS = 60  # aim; actual counts land in ~[55, 75], mean ~62

# fmt: off
_VERBS = [
    "check", "verify", "summarise", "cite", "validate", "log", "escalate", "review",
    "compare", "record", "flag", "confirm", "inspect", "document", "retry", "archive",
    "quote", "normalise", "redact", "rank", "schedule", "cancel", "refund", "translate",
]
_NOUNS = [
    "the request", "the user's files", "each tool result", "the invoice", "the database query",
    "the API response", "every citation", "the deployment plan", "the test suite",
    "the shipping address", "the error message", "the customer's history", "the search results",
    "the code diff", "the meeting notes", "the contract terms", "the budget estimate",
    "the access token", "the config file", "the migration script", "the support ticket",
    "the calendar entry", "the spreadsheet", "the final answer", "the draft email",
]
_ADVS = [
    "carefully", "briefly", "immediately", "twice", "politely", "explicitly", "quietly",
    "in plain language", "before anything else", "step by step", "without guessing",
]
_CONDS = [
    "If the user asks for a refund", "When a tool call fails", "Before you edit any file",
    "If the input looks truncated", "When two sources disagree", "Whenever money is involved",
    "If a request touches personal data", "When the task spans several days",
    "If the answer depends on today's date", "When you are unsure of a fact",
    "Before running a destructive command", "If the user writes in another language",
    "When a deadline is mentioned", "If the output exceeds one page",
]
_CONSEQ = [
    "ask one short clarifying question", "stop and explain what is missing",
    "prefer the most recent source", "tell the user which step failed",
    "keep a copy of the original", "use the sandbox instead of production",
    "answer in the user's language", "list the assumptions you made",
    "round amounts to two decimals", "never reveal internal identifiers",
    "link to the relevant policy section", "mention the time zone you used",
]
_ADJS = [
    "short", "precise", "neutral", "complete", "numbered", "friendly", "formal", "concise",
    "structured", "verifiable", "conservative", "consistent",
]
_FORMS = [
    "summary", "checklist", "table", "bullet list", "status update", "changelog entry",
    "reply", "report", "explanation", "estimate",
]
_TOPICS = [
    "refunds", "billing", "deploys", "privacy", "search", "scheduling", "code_review",
    "support", "travel", "research", "security", "data_entry", "writing", "testing",
]

# fmt: on

_TEMPLATES = [
    "Always {v} {n} {a}.",
    "{c}, {q}.",
    "Do not {v} {n} unless the user confirms it.",
    "Write a {j} {f} after you {v} {n}.",
    "{c}, {v} {n} and {q}.",
    "Prefer a {j} {f} over a long {f2}.",
    "You must {v} {n} {a} and then {v2} {n2}.",
    "Never {v} {n} on your own; {q} instead.",
    "Keep the {f} {j} and {j2}, and {v} {n} at the end.",
]


def _sentence(rng: random.Random) -> str:
    t = rng.choice(_TEMPLATES)
    s = t.format(
        v=rng.choice(_VERBS),
        v2=rng.choice(_VERBS),
        n=rng.choice(_NOUNS),
        n2=rng.choice(_NOUNS),
        a=rng.choice(_ADVS),
        c=rng.choice(_CONDS),
        q=rng.choice(_CONSEQ),
        j=rng.choice(_ADJS),
        j2=rng.choice(_ADJS),
        f=rng.choice(_FORMS),
        f2=rng.choice(_FORMS),
    )
    return s[0].upper() + s[1:]


class _Stream:
    """One long deterministic stream of distinct blocks, extended on demand."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seen: set[str] = set()
        self.out: list[tuple[str, str]] = []

    def extend_to(self, n: int) -> None:
        from rampart import count_tokens

        rng, seen, out = self.rng, self.seen, self.out
        while len(out) < n:
            parts: list[str] = []
            text = ""
            while True:
                parts.append(_sentence(rng))
                text = " ".join(parts)
                # cheap length pre-check before asking the tokeniser
                if len(text) >= 4 * (TARGET_TOKENS - 8) and count_tokens(text) >= TARGET_TOKENS - 5:
                    break
            if text in seen:
                continue
            seen.add(text)
            out.append((f"{rng.choice(_TOPICS)}_rule_{len(out):06d}", text))


_STREAMS: dict[int, _Stream] = {}


def blocks(n: int, seed: int = 1234) -> list[tuple[str, str]]:
    """The first ``n`` distinct ``(semantic_name, content)`` pairs of the seeded stream
    (so blocks(200) == blocks(10_000)[:200])."""
    stream = _STREAMS.setdefault(seed, _Stream(seed))
    stream.extend_to(n)
    return stream.out[:n]


def build_registry(n: int, *, default_max_tokens: int | None = None) -> Any:
    """A BlockRegistry holding ``n`` agent blocks, written through the public API."""
    from rampart import BlockRegistry

    reg = BlockRegistry(default_max_tokens=default_max_tokens)
    for name, content in blocks(n):
        reg.write_block(content, name, "agent", 0.5, "bench")
    return reg


def load_pymodel() -> ModuleType:
    """tests/pymodel.py, imported by path (tests/ is not a package)."""
    name = "rampart_bench_pymodel"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "pymodel.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def baseline_from(reg: Any) -> Any:
    """A pymodel.ModelRegistry with the same blocks, order and token counts as ``reg``.

    Filled directly (``ModelRegistry.write`` rebuilds the dict per call, O(n^2) to fill).
    """
    pm = load_pymodel()
    model = pm.ModelRegistry(reg.registry_id)
    model.blocks = OrderedDict(
        (
            b.runtime_id,
            pm.ModelBlock(
                runtime_id=b.runtime_id,
                name=b.semantic_name,
                content=b.content,
                tokens=b.token_count,
                priority=b.priority,
                source=b.source,
                author=b.author_id,
                evictable=b.evictable,
                trajectory=b.trajectory_id,
                wrap_prefix=b.wrap_prefix,
                wrap_suffix=b.wrap_suffix,
                wrap_tokens=b.cost - b.token_count,
                tags=b.tags,
            ),
        )
        for b in reg.list_blocks()
    )
    return model


def check_same(reg: Any, model: Any, budget: int | None, sep: str, sep_tokens: int) -> None:
    """rampart's compile and the baseline agree (prompt, included, excluded, total)."""
    got = reg.compile(max_tokens=budget, separator=sep)
    prompt, included, excluded, total = model.compile(budget, sep_tokens, sep, count_access=True)
    assert got.prompt == prompt, "rampart prompt differs from the pure-Python baseline"
    assert got.included == included
    assert got.excluded == excluded
    assert got.total_tokens == total
    dry = reg.compile_dry_run(max_tokens=budget, separator=sep)
    assert [n for n, _ in dry.included] == included
    assert dry.total_tokens == total
