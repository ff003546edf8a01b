"""Many texts' passages scored against one query: BM25 (the Rust core's
incremental index) fused with an embedder's cosine.

A text is added once under a key (a conversation item's id): its passages go
into one :class:`~rampart.relevance.lexical.LexicalIndex`, so a query costs one
walk over its terms' postings however many texts there are. With an embedder,
passages are embedded lazily — only when a query scores their text — in one
batch, and kept: a later query never embeds them again. A text with many
passages has its first ones and its lexically best ones embedded
(``dense_passages`` in all), so a 50 MB result costs a bounded batch.

Fusion (per passage): ``cosine + lexical_weight * bm25 / best_bm25`` where the
best is over every passage scored for the query; lexical only: ``bm25 /
best_bm25``. An item's score is its best passage's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from rampart.relevance.lexical import LexicalIndex
from rampart.relevance.passages import MAX_PASSAGES, Passage, split_passages

__all__ = ["DENSE_PASSAGES", "LEXICAL_WEIGHT", "ItemScore", "PassageIndex"]

#: Passages of one text embedded for a query at most (the first few and the
#: lexically best): the cost of a huge text is one bounded batch.
DENSE_PASSAGES = 24
#: Weight of the (per-query normalised) BM25 score beside the cosine.
LEXICAL_WEIGHT = 0.3
_HEAD = 4  # passages of a long text always embedded (its opening says what it is)


class ItemScore:
    """One text's relevance to a query.

    ``score``: the fused score of its best passage (cosine + weighted, normalised
    BM25; normalised BM25 alone without an embedder). ``lexical``: its best raw
    BM25 score; ``rare``: that score in units of the weight of a term found in
    one passage only. ``dense``: its best passage cosine (None without an embedder).
    ``best``: the indices of its passages that scored above 0, best first (its
    first passage when none did); worked out on first use, since a compile needs
    it for the few results it excerpts or recalls, not for every one it ranks."""

    __slots__ = ("_best", "_fused", "dense", "key", "lead", "lexical", "rare", "score")

    def __init__(
        self,
        key: str,
        score: float,
        lexical: float,
        dense: float | None,
        best: tuple[int, ...] | None = None,
        fused: Any = None,
        rare: float = 0.0,
    ) -> None:
        self.key = key
        self.score = score
        self.lexical = lexical
        #: ``lexical`` in units of one term found in a single passage of the
        #: index (the largest weight a term can have): an absolute floor on raw
        #: BM25 means more terms in a small index than in a large one
        self.rare = rare
        #: the clear lexical winner: at least twice the next text's BM25 (set by
        #: PassageIndex.score on one text at most)
        self.lead = False
        self.dense = dense
        self._best = best
        self._fused = fused  # the passages' fused scores (a list or an array)

    @property
    def best(self) -> tuple[int, ...]:
        if self._best is None:
            f = [float(x) for x in self._fused] if self._fused is not None else []
            order = sorted(range(len(f)), key=lambda j: (-f[j], j))
            self._best = tuple(j for j in order if f[j] > 0) or (0,)
        return self._best

    def __repr__(self) -> str:
        dense = None if self.dense is None else round(self.dense, 4)
        return (
            f"ItemScore({self.key!r}, score={self.score:.4f}, lexical={self.lexical:.3f}, "
            f"dense={dense})"
        )


class PassageIndex:
    """Passages of texts added under keys, scored against queries."""

    __slots__ = (
        "_dim",
        "_has",
        "_keys",
        "_lex",
        "_mat",
        "_passages",
        "_query",
        "lexical_weight",
    )

    def __init__(self, lexical_weight: float = LEXICAL_WEIGHT) -> None:
        self.lexical_weight = float(lexical_weight)
        self._lex = LexicalIndex()
        self._passages: list[Passage] = []
        self._keys: dict[str, tuple[int, int]] = {}  # key -> (first passage, count)
        self._mat: Any = None  # float32 (capacity, dim): passages' unit vectors
        self._has: Any = None  # bool (capacity,): which rows hold a vector
        self._dim = 0
        self._query: tuple[int, str, Any] | None = None  # (model id, text, vector)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: str, text: str, max_passages: int = MAX_PASSAGES) -> None:
        """Index ``text`` under ``key`` (a key already there is left as it is)."""
        if key in self._keys:
            return
        ps = split_passages(text, max_passages=max_passages)
        first = len(self._passages)
        self._lex.add([p.text for p in ps])
        self._passages.extend(ps)
        self._keys[key] = (first, len(ps))

    def passages(self, key: str) -> list[Passage]:
        """The passages of ``key``'s text, in order."""
        first, n = self._keys[key]
        return self._passages[first : first + n]

    def score(self, query: str, keys: Iterable[str], embedder: Any = None) -> dict[str, ItemScore]:
        """Each of ``keys`` (added before) scored against ``query``."""
        lex = self._lex.scores(query)
        spans = [(k, *self._keys[k]) for k in keys if k in self._keys]
        best = [max(lex[f : f + n], default=0.0) for _, f, n in spans]
        top = max(best, default=0.0)
        n_all = len(self._passages)
        # BM25's weight of a term one passage holds, at its term frequency's limit
        unit = math.log(1 + (n_all - 0.5) / 1.5) * 2.2 if n_all else 1.0
        ranked = sorted(best, reverse=True)
        lead = -1  # the index into spans of the clear lexical winner, if any
        if ranked and ranked[0] > 0 and (len(ranked) == 1 or ranked[0] >= 2 * ranked[1]):
            lead = best.index(ranked[0])
        if embedder is None or not spans:
            # lexical only: no numpy (the embedding extra is optional)
            out = {}
            for (key, f, n), b in zip(spans, best):
                fused = [x / top for x in lex[f : f + n]] if top > 0 else [0.0] * n
                out[key] = ItemScore(
                    key, b / top if top > 0 else 0.0, b, None, None, fused, b / unit
                )
            if lead >= 0:
                out[spans[lead][0]].lead = True
            return out
        import numpy as np

        dense = self._dense(query, spans, lex, embedder)
        w = self.lexical_weight
        lx = np.asarray(lex, dtype=np.float64)
        fused_all = (w / top) * lx if top > 0 else np.zeros_like(lx)
        if dense is not None:
            fused_all += np.where(np.isfinite(dense), dense, 0.0)
        out = {}
        for (key, f, n), b in zip(spans, best):
            if n == 0:
                out[key] = ItemScore(key, 0.0, 0.0, 0.0, (0,), None, 0.0)
                continue
            part = fused_all[f : f + n]
            d = float(dense[f : f + n].max()) if dense is not None else 0.0
            dense_best = d if d > -2.0 else 0.0
            out[key] = ItemScore(key, float(part.max()), b, dense_best, None, part, b / unit)
        if lead >= 0:
            out[spans[lead][0]].lead = True
        return out

    # ---- the dense part -------------------------------------------------------------------

    def _dense(
        self, query: str, spans: list[tuple[str, int, int]], lex: list[float], embedder: Any
    ) -> Any:
        """Every passage's cosine to ``query`` (-inf where not embedded; None when
        the model's vectors do not match): the passages of ``spans`` wanted for
        the query are embedded first when new."""
        import numpy as np

        from rampart.embeddings.base import encode_texts

        parts = []
        for _, first, n in spans:
            if n <= DENSE_PASSAGES:
                parts.append(np.arange(first, first + n))
                continue
            rest = np.asarray(lex[first + _HEAD : first + n])
            top = np.argsort(-rest, kind="stable")[: DENSE_PASSAGES - _HEAD] + first + _HEAD
            parts.append(np.concatenate([np.arange(first, first + _HEAD), top]))
        want = np.concatenate(parts)
        has = self._has
        if has is None:
            missing = want
        else:
            inside = want < len(has)
            missing = want[~inside | ~has[np.where(inside, want, 0)]]
        if len(missing):
            rows = missing.tolist()
            raw, dim, _ = encode_texts(embedder, [self._passages[i].text for i in rows])
            vecs = np.frombuffer(raw, dtype=np.float32).reshape(len(rows), dim)
            self._store(rows, vecs, dim)
        qv = self._query_vector(query, embedder)
        if qv is None or self._mat is None:
            return None
        out = np.full(len(self._passages), -np.inf)
        out[want] = self._mat[want] @ qv
        return out

    def _store(self, rows: list[int], vecs: Any, dim: int) -> None:
        import numpy as np

        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = vecs / np.where(norms > 0, norms, 1.0)
        need = max(rows) + 1
        m = self._mat
        if m is None or m.shape[1] != dim:
            m = np.zeros((max(need, 64), dim), dtype=np.float32)
            self._has = np.zeros(m.shape[0], dtype=bool)
            self._dim = dim
        elif m.shape[0] < need:
            size = max(need, 2 * m.shape[0])
            grown = np.zeros((size, dim), dtype=np.float32)
            grown[: m.shape[0]] = m
            m = grown
            has = np.zeros(size, dtype=bool)
            has[: len(self._has)] = self._has
            self._has = has
        idx = np.asarray(rows, dtype=np.intp)
        m[idx] = vecs
        self._has[idx] = True
        self._mat = m

    def _query_vector(self, query: str, embedder: Any) -> Any:
        import numpy as np

        from rampart.embeddings.base import encode_texts

        cached = self._query
        if cached is not None and cached[0] == id(embedder) and cached[1] == query:
            return cached[2]
        raw, dim, _ = encode_texts(embedder, [query])
        if dim != self._dim:
            return None
        v = np.frombuffer(raw, dtype=np.float32).copy()
        n = float(np.linalg.norm(v))
        v = v / n if n > 0 else v
        self._query = (id(embedder), query, v)
        return v
