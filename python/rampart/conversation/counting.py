"""How a conversation counts tokens: one function, :func:`counter_for`.

Counts are taken once, when an item is appended, and cached on the item, so a
compile never re-encodes a message it has seen. The counter is:

- ``"o200k_base"`` (the default): exact counts of current OpenAI models (GPT-4o,
  GPT-4.1, GPT-5, o-series), from the Rust core when it has the encoding;
  until then (an older extension) ``cl100k_base``, the nearest exact counter
  there is offline (recorded as such), and :attr:`Counter.exact` is False.
- ``"cl100k_base"``: GPT-4 / GPT-3.5.
- any tokeniser a registry takes (a callable, a ``tokenizer.json``).

Providers whose tokenizer is not public (Anthropic, Gemini) are counted with
one of these and scaled by the factor learned from the usage they return
(``Conversation.observe_usage``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import rampart._core as _core
from rampart.tokens import resolve_tokeniser

__all__ = ["ITEM_OVERHEAD", "TOOL_CALL_OVERHEAD", "Counter", "counter_for", "o200k_available"]

#: Tokens a message's framing costs beside its text (OpenAI's chat format: role
#: and separators, about 3-4 a message; Anthropic's and Gemini's are similar).
ITEM_OVERHEAD = 4
#: A tool call's framing (type, id, name and argument keys).
TOOL_CALL_OVERHEAD = 8

_O200K: bool | None = None


def o200k_available() -> bool:
    """Whether the Rust core counts ``o200k_base`` (added with the encoding
    table; an older extension counts ``cl100k_base`` only)."""
    global _O200K
    if _O200K is None:
        try:
            _core.count_tokens("a", "o200k_base")
            _O200K = True
        except (TypeError, ValueError):
            _O200K = False
    return _O200K


@dataclass(frozen=True, slots=True)
class Counter:
    """Counts texts. ``name`` is recorded with a saved or shared conversation;
    ``exact`` is False when the encoding asked for was not available and
    ``name`` is the stand-in's."""

    name: str
    count_many: Callable[[list[str]], list[int]]
    exact: bool = True

    def count(self, text: str) -> int:
        """Tokens of one text."""
        return self.count_many([text])[0]


def _rust(encoding: str) -> Callable[[list[str]], list[int]]:
    def count_many(texts: list[str]) -> list[int]:
        return list(_core.count_tokens_many(texts, encoding))

    return count_many


def counter_for(spec: Any = "o200k_base") -> Counter:
    """The counter for a conversation's ``tokeniser=`` argument."""
    if spec is None or spec == "o200k_base":
        if o200k_available():
            return Counter("o200k_base", _rust("o200k_base"))
        # Recorded under the name of what it counts: a conversation saved or
        # shared by this process is not taken for exact o200k counts elsewhere.
        return Counter("cl100k_base", lambda texts: list(_core.count_tokens_many(texts)), False)
    if spec == "cl100k_base":
        return Counter("cl100k_base", lambda texts: list(_core.count_tokens_many(texts)))
    tok = resolve_tokeniser(spec)
    return Counter(tok.name, tok.count_many)
