"""The lexical signal for blocks: :class:`HybridGate`, cosine plus a weighted,
per-task normalised BM25 score over the blocks' gate texts (rare words: file
names, API names) as a ``gate=`` callable. BM25 itself is
:mod:`rampart.relevance.lexical` (re-exported here), the scorer the
conversation's retention policy uses too."""

from __future__ import annotations

from collections.abc import Sequence

from rampart._view import RegistryView
from rampart.block import InstructionBlock
from rampart.errors import InvalidArgumentError
from rampart.gates.cosine import DenseGate
from rampart.relevance.lexical import BM25, LexicalIndex, terms

__all__ = ["BM25", "HybridGate", "terms"]


class HybridGate:
    """Cosine + ``lexical_weight`` x BM25, BM25 divided by its best score for the
    task (so the weight means the same for every task). The BM25 index is rebuilt
    when the blocks' gate texts change."""

    def __init__(self, registry: RegistryView, lexical_weight: float = 0.1) -> None:
        if not (isinstance(lexical_weight, (int, float)) and lexical_weight >= 0):
            raise InvalidArgumentError("HybridGate lexical_weight must be a number >= 0")
        self.dense = DenseGate(registry)
        self.lexical_weight = float(lexical_weight)
        self._key: tuple[tuple[str, str], ...] = ()
        self._index: LexicalIndex | None = None

    def lexical(self, task_text: str, blocks: Sequence[InstructionBlock]) -> list[float]:
        """The BM25 part alone: each block's score for the task over the blocks'
        gate texts, divided by the best (all zeros when no term matches)."""
        # Keyed on content (cheap to read); the gate text (a tool block's is parsed
        # from its schema) is computed only when the blocks changed.
        key = tuple((b.runtime_id, b.content) for b in blocks)
        if self._index is None or key != self._key:
            index = LexicalIndex()
            index.add([b.gate_text for b in blocks])
            self._index, self._key = index, key
        raw = self._index.scores(task_text)
        top = max(raw, default=0.0)
        return [s / top for s in raw] if top > 0 else raw

    def __call__(self, task_text: str, blocks: Sequence[InstructionBlock]) -> list[float]:
        dense = self.dense(task_text, blocks)
        if not self.lexical_weight:
            return dense
        lex = self.lexical(task_text, blocks)
        return [d + self.lexical_weight * x for d, x in zip(dense, lex)]
