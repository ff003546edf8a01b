"""The lexical signal: BM25 over blocks' gate texts (rare words: file names, API
names), and :class:`HybridGate`, cosine plus a weighted, per-task normalised BM25
score as a ``gate=`` callable."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rampart._view import RegistryView
from rampart.block import InstructionBlock
from rampart.errors import InvalidArgumentError
from rampart.gates.cosine import DenseGate

__all__ = ["BM25", "HybridGate", "terms"]

# Words that say nothing about which tool is meant (requests are full of them).
_STOP = frozenset(
    "a an the to of in on for and or with is are be this that it its my me i we you your "
    "our from by as at into all any what which who how do does can please so just not "
    "than then there their them those these was were will would should could have has "
    "had get give show make let".split()
)
_TOKEN = re.compile(r"[a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _stem(word: str) -> str:
    # Plural and tense endings only: enough for "files"/"file", "branches"/"branch",
    # "staged"/"stag(e)" (both sides of a match are stemmed alike).
    if len(word) > 4 and word.endswith(("ches", "shes", "sses", "xes", "zes")):
        return word[:-2]
    for suffix in ("ing", "ed", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix) and not word.endswith("ss"):
            return word[: -len(suffix)]
    return word


def terms(text: str) -> list[str]:
    """Lower-cased, stemmed word terms; ``snake_case`` and ``camelCase`` split."""
    text = _CAMEL.sub(" ", text).replace("_", " ")
    return [_stem(w) for w in _TOKEN.findall(text.lower()) if w not in _STOP]


class BM25:
    """Okapi BM25 over a fixed list of documents (k1 = 1.2, b = 0.75)."""

    def __init__(
        self,
        documents: Sequence[str],
        k1: float = 1.2,
        b: float = 0.75,
        *,
        tokenised: Sequence[list[str]] | None = None,
    ) -> None:
        """``tokenised``: the documents' :func:`terms`, when the caller has them."""
        self.k1, self.b = k1, b
        docs = list(tokenised) if tokenised is not None else [terms(d) for d in documents]
        self._lengths = [len(d) for d in docs]
        self._avg = (sum(self._lengths) / len(docs)) if docs else 0.0
        df: dict[str, int] = {}
        for d in docs:
            for w in set(d):
                df[w] = df.get(w, 0) + 1
        n = len(docs)
        self._idf = {w: math.log(1 + (n - c + 0.5) / (c + 0.5)) for w, c in df.items()}
        self._tf = [dict(Counter(d)) for d in docs]

    def scores(self, query: str) -> list[float]:
        """The BM25 score of every document for ``query``, in document order."""
        q = terms(query)
        out = []
        for tf, length in zip(self._tf, self._lengths):
            s = 0.0
            norm = self.k1 * (1 - self.b + self.b * length / self._avg) if self._avg else self.k1
            for w in q:
                f = tf.get(w)
                if f:
                    s += self._idf[w] * f * (self.k1 + 1) / (f + norm)
            out.append(s)
        return out

    def score_array(self, query: str) -> Any:
        """:meth:`scores` as a numpy array, from an inverted index built on first
        use (what a gate scoring every request wants: a few array adds per query
        term instead of a loop over every document)."""
        import numpy as np

        index = getattr(self, "_inverted", None)
        if index is None:
            postings: dict[str, tuple[list[int], list[float]]] = {}
            for i, (tf, length) in enumerate(zip(self._tf, self._lengths)):
                norm = (
                    self.k1 * (1 - self.b + self.b * length / self._avg) if self._avg else self.k1
                )
                for w, f in tf.items():
                    ids, vals = postings.setdefault(w, ([], []))
                    ids.append(i)
                    vals.append(self._idf[w] * f * (self.k1 + 1) / (f + norm))
            index = self._inverted = {
                w: (np.array(ids, dtype=np.intp), np.array(vals))
                for w, (ids, vals) in postings.items()
            }
        out = np.zeros(len(self._tf))
        for w in terms(query):
            hit = index.get(w)
            if hit is not None:
                out[hit[0]] += hit[1]
        return out


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
        self._index: BM25 | None = None

    def lexical(self, task_text: str, blocks: Sequence[InstructionBlock]) -> list[float]:
        """The BM25 part alone: each block's score for the task over the blocks'
        gate texts, divided by the best (all zeros when no term matches)."""
        # Keyed on content (cheap to read); the gate text (a tool block's is parsed
        # from its schema) is computed only when the blocks changed.
        key = tuple((b.runtime_id, b.content) for b in blocks)
        if self._index is None or key != self._key:
            self._index, self._key = BM25([b.gate_text for b in blocks]), key
        raw = self._index.scores(task_text)
        top = max(raw, default=0.0)
        return [s / top for s in raw] if top > 0 else raw

    def __call__(self, task_text: str, blocks: Sequence[InstructionBlock]) -> list[float]:
        dense = self.dense(task_text, blocks)
        if not self.lexical_weight:
            return dense
        lex = self.lexical(task_text, blocks)
        return [d + self.lexical_weight * x for d, x in zip(dense, lex)]
