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

from collections.abc import Iterable
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class ItemScore:
    """One text's relevance to a query.

    ``score``: the fused score of its best passage (cosine + weighted, normalised
    BM25; normalised BM25 alone without an embedder). ``lexical``: its best raw
    BM25 score. ``dense``: its best passage cosine (None without an embedder).
    ``best``: the indices of its passages that scored above 0, best first (its
    first passage when none did)."""

    key: str
    score: float
    lexical: float
    dense: float | None
    best: tuple[int, ...]


class PassageIndex:
    """Passages of texts added under keys, scored against queries."""

    __slots__ = ("_dim", "_keys", "_lex", "_mat", "_owner", "_passages", "_query", "lexical_weight")

    def __init__(self, lexical_weight: float = LEXICAL_WEIGHT) -> None:
        self.lexical_weight = float(lexical_weight)
        self._lex = LexicalIndex()
        self._passages: list[Passage] = []
        self._keys: dict[str, tuple[int, int]] = {}  # key -> (first passage, count)
        self._owner: list[str] = []
        self._mat: Any = None  # float32 (capacity, dim); rows of embedded passages
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
        self._owner.extend([key] * len(ps))
        self._keys[key] = (first, len(ps))

    def passages(self, key: str) -> list[Passage]:
        """The passages of ``key``'s text, in order."""
        first, n = self._keys[key]
        return self._passages[first : first + n]

    def score(self, query: str, keys: Iterable[str], embedder: Any = None) -> dict[str, ItemScore]:
        """Each of ``keys`` (added before) scored against ``query``."""
        lex = self._lex.scores(query)
        spans = [(k, *self._keys[k]) for k in keys if k in self._keys]
        best_lex = max((max(lex[f : f + n], default=0.0) for _, f, n in spans), default=0.0)
        dense: dict[int, float] = {}
        if embedder is not None and spans:
            dense = self._dense(query, spans, lex, embedder)
        w = self.lexical_weight if dense else 1.0
        out: dict[str, ItemScore] = {}
        for key, first, n in spans:
            rows = []
            for j in range(n):
                x = lex[first + j]
                d = dense.get(first + j)
                fused = (w * x / best_lex if best_lex > 0 else 0.0) + (d or 0.0)
                rows.append((fused, -j, x, d))
            if not rows:
                out[key] = ItemScore(key, 0.0, 0.0, None if not dense else 0.0, ())
                continue
            rows.sort(reverse=True)
            ds = [r[3] for r in rows if r[3] is not None]
            out[key] = ItemScore(
                key,
                rows[0][0],
                max(r[2] for r in rows),
                max(ds) if ds else (None if not dense else 0.0),
                tuple(-r[1] for r in rows if r[0] > 0) or (-rows[0][1],),
            )
        return out

    # ---- the dense part -------------------------------------------------------------------

    def _dense(
        self, query: str, spans: list[tuple[str, int, int]], lex: list[float], embedder: Any
    ) -> dict[int, float]:
        import numpy as np

        from rampart._embedding import encode_texts

        want: list[int] = []
        for _, first, n in spans:
            if n <= DENSE_PASSAGES:
                want.extend(range(first, first + n))
                continue
            head = list(range(first, first + _HEAD))
            rest = sorted(range(first + _HEAD, first + n), key=lambda i: -lex[i])
            want.extend(head + rest[: DENSE_PASSAGES - _HEAD])
        missing = [i for i in want if not self._has(i)]
        if missing:
            raw, dim, _ = encode_texts(embedder, [self._passages[i].text for i in missing])
            vecs = np.frombuffer(raw, dtype=np.float32).reshape(len(missing), dim)
            self._store(missing, vecs, dim)
        qv = self._query_vector(query, embedder)
        if qv is None or self._mat is None:
            return {}
        idx = np.asarray(want, dtype=np.intp)
        sims = self._mat[idx] @ qv
        return dict(zip(want, sims.astype(float).tolist()))

    def _has(self, i: int) -> bool:
        m = self._mat
        return m is not None and i < m.shape[0] and bool(m[i, 0] == m[i, 0])  # NaN: not yet

    def _store(self, rows: list[int], vecs: Any, dim: int) -> None:
        import numpy as np

        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = vecs / np.where(norms > 0, norms, 1.0)
        need = max(rows) + 1
        m = self._mat
        if m is None or m.shape[1] != dim:
            m = np.full((max(need, 64), dim), np.nan, dtype=np.float32)
            self._dim = dim
        elif m.shape[0] < need:
            grown = np.full((max(need, 2 * m.shape[0]), dim), np.nan, dtype=np.float32)
            grown[: m.shape[0]] = m
            m = grown
        m[np.asarray(rows, dtype=np.intp)] = vecs
        self._mat = m

    def _query_vector(self, query: str, embedder: Any) -> Any:
        import numpy as np

        from rampart._embedding import encode_texts

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
