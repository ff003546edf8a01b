"""Many texts' passages scored against one query, in two stages.

**Stage 1, contextual passages.** A text is added once under a key (a
conversation item's id) with its *context* (for a tool result: the tool's name
and the call's arguments). Each passage is indexed and embedded as that
context, the nearest heading or definition above it in the text
(:func:`~rampart.relevance.passages.headings`), then the passage — in
BM25 (the Rust core's incremental index) and in the embedding alike, so
"the thumbnail script's column count" reaches ``DEFAULT_COLS = 3`` through the
file name and the function it sits in. The stage-1 score of a passage is
``cosine + LEXICAL_WEIGHT * rare / (rare + RARE_HALF)``, ``rare`` being its
BM25 score in units of a term one passage holds: absolute, so a floor means the
same in 4 results and in 400, and saturating, so no lexical match outweighs the
meaning (lexical only without an embedder: ``rare / (rare + RARE_HALF)``).

**Stage 2, late interaction.** The best :data:`RERANK_K` passages of stage 1
are reordered by reading the question and each passage together, token by
token: for every content token of the question, its best-matching token of the
passage (cosine of the encoder's last-layer token vectors), averaged — MaxSim,
as late-interaction retrievers score. The passage side's token vectors come
out of the same model pass that embeds the passage, so the question's compile
encodes only the question. See docs/relevance.md for why this and not a
cross-encoder (measured: a cross-encoder reads every candidate on the
question's path, seconds on two cores).

**Off the question's path.** :meth:`PassageIndex.add` only indexes (BM25, in
the Rust core); :meth:`PassageIndex.embed_pending` embeds what arrived since
(passage and token vectors, in one pass), and is what a background worker
(:mod:`rampart.relevance.background`) or the next compile calls, so a question
compiled after thirty reads finds their vectors made. A passage still missing
when a query needs it is embedded then (bounded: :data:`ARRIVAL_PASSAGES` per
text, and :data:`QUERY_PASSAGES` more that the query's BM25 picks).
"""

from __future__ import annotations

import bisect
import math
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from rampart.relevance.lexical import STOP, LexicalIndex, terms
from rampart.relevance.passages import (
    HEADING_REACH,
    MAX_PASSAGES,
    Passage,
    headings,
    split_passages,
)

__all__ = [
    "ARRIVAL_PASSAGES",
    "IDENTIFIER_WEIGHT",
    "LATE_WEIGHT",
    "LEXICAL_WEIGHT",
    "QUERY_PASSAGES",
    "RARE_HALF",
    "RERANK_K",
    "TOKEN_ROWS",
    "ItemScore",
    "PassageIndex",
]

#: Passages of one text embedded when it arrives (its opening and, for most
#: results, all of it: 48 passages are about 33 KB).
ARRIVAL_PASSAGES = 48
#: Passages past those that one query may embed per text (the lexically best).
QUERY_PASSAGES = 8
#: Weight of the lexical part beside the cosine ...
LEXICAL_WEIGHT = 0.3
#: ... which is half its weight at this many rare terms' worth of BM25
#: (ItemScore.rare).
RARE_HALF = 1.0
#: Added to a passage that holds an identifier the question names (a commit id,
#: a version: :func:`_identifiers`), or whose call's arguments do: the cosine
#: of "the Date line of commit a43f326" is as high for every commit's header,
#: and the saturating lexical part gave the named commit 0.05 over another's,
#: less than the cosine's noise (task-success bench: the wrong commit recalled
#: in 2 of 11 commit questions it missed).
IDENTIFIER_WEIGHT = 0.2
#: Passages the second stage reads with the question (the best of stage 1).
RERANK_K = 24
#: Weight of the late-interaction score in a reranked passage's score.
LATE_WEIGHT = 0.5
#: Token vectors kept per index at most (int8 rows of the model's width, 384
#: bytes each for MiniLM: 25 MB). Past it the oldest texts' are dropped and
#: their passages are reranked by stage 1 alone.
TOKEN_ROWS = 65_536
#: Characters of context (tool, arguments, heading) put before a passage at most.
CONTEXT_CHARS = 300

# Word pieces that carry no meaning of their own in a question or a passage
# (stop words, punctuation): left out of the token vectors, which saves memory
# and keeps MaxSim from rewarding every passage for matching "the".
_SKIP_PIECES = STOP | frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


class ItemScore:
    """One text's relevance to a query.

    ``score``: its best passage's final score (stage 1, plus the late-interaction
    score where the passage was reranked). ``lexical``: its best raw BM25 score;
    ``rare``: that in units of a term one passage holds. ``dense``: its best
    passage cosine (None without an embedder). ``late``: its best reranked
    passage's MaxSim above the worst reranked passage's (None when none was).
    ``best``: the indices of its passages that scored above 0, best first (its
    first passage when none did); worked out on first use."""

    __slots__ = (
        "_best",
        "_fused",
        "dense",
        "key",
        "late",
        "lead",
        "lexical",
        "rare",
        "score",
    )

    def __init__(
        self,
        key: str,
        score: float,
        lexical: float,
        dense: float | None,
        best: tuple[int, ...] | None = None,
        fused: Any = None,
        rare: float = 0.0,
        late: float | None = None,
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
        self.late = late
        self._best = best
        self._fused = fused  # the passages' final scores (a list or an array)

    @property
    def passage_scores(self) -> list[float]:
        """Each passage's final score, in passage order (empty when not kept)."""
        return [float(x) for x in self._fused] if self._fused is not None else []

    @property
    def best(self) -> tuple[int, ...]:
        if self._best is None:
            f = self.passage_scores
            order = sorted(range(len(f)), key=lambda j: (-f[j], j))
            self._best = tuple(j for j in order if f[j] > 0) or (0,)
        return self._best

    def __repr__(self) -> str:
        dense = None if self.dense is None else round(self.dense, 4)
        late = None if self.late is None else round(self.late, 4)
        return (
            f"ItemScore({self.key!r}, score={self.score:.4f}, lexical={self.lexical:.3f}, "
            f"dense={dense}, late={late})"
        )


class PassageIndex:
    """Passages of texts added under keys, scored against queries. Safe to share
    between threads: a background worker embeds while queries score."""

    __slots__ = (
        "__weakref__",  # the background worker holds the index weakly
        "_context",
        "_ctx_doc",
        "_ctx_lex",
        "_dim",
        "_done",
        "_flight",
        "_has",
        "_keys",
        "_lex",
        "_lock",
        "_mat",
        "_model",
        "_passages",
        "_pending",
        "_query",
        "_tok",
        "_tok_rows",
        "lexical_weight",
    )

    def __init__(self, lexical_weight: float = LEXICAL_WEIGHT) -> None:
        self.lexical_weight = float(lexical_weight)
        self._lex = LexicalIndex()  # one document per passage (under its heading)
        self._ctx_lex = LexicalIndex()  # one document per text: its context
        self._ctx_doc: dict[str, int] = {}
        self._passages: list[Passage] = []
        self._context: list[str] = []  # per passage: what is put before it
        self._keys: dict[str, tuple[int, int]] = {}  # key -> (first passage, count)
        self._mat: Any = None  # float32 (capacity, dim): passages' unit vectors
        self._has: Any = None  # bool (capacity,): which rows hold a vector
        self._dim = 0
        self._model: Any = None  # _model_key() of the embedder the vectors came from
        # row -> (int8 (k, dim) token vectors, float32 (k,) scales), oldest first
        self._tok: OrderedDict[int, tuple[Any, Any]] = OrderedDict()
        self._tok_rows = 0
        self._pending: list[int] = []  # rows to embed on arrival, in order
        self._query: tuple[Any, str, Any, Any] | None = None  # (model, text, vec, tokens)
        # Held while the vectors change or are read for a score; the model runs
        # outside it. Rows a thread is embedding are in _flight: another thread
        # that needs them waits on _done instead of embedding them twice.
        self._lock = threading.RLock()
        self._done = threading.Condition(self._lock)
        self._flight: set[int] = set()

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: str, text: str, context: str = "", max_passages: int = MAX_PASSAGES) -> None:
        """Index ``text`` under ``key`` (a key already there is left as it is),
        each passage with ``context`` and its nearest heading before it."""
        if key in self._keys:
            return
        for v, what in ((key, "key"), (text, "text"), (context, "context")):
            if not isinstance(v, str):
                from rampart.errors import InvalidArgumentError

                raise InvalidArgumentError(
                    f"PassageIndex.add: {what} must be a str, got {type(v).__name__}"
                )
        ps = split_passages(text, max_passages=max_passages)
        context = " ".join(context.split())[:CONTEXT_CHARS]
        ctx = []
        heads = []
        marks = headings(text, ps[-1].offset) if ps else []
        at = [m[0] for m in marks]
        for p in ps:
            k = bisect.bisect_left(at, p.offset) - 1  # the last one before the passage
            head = marks[k][1] if k >= 0 and p.offset - at[k] <= HEADING_REACH else ""
            heads.append(head)
            c = f"{context}\n{head}" if head and context else (head or context)
            ctx.append(c[: 2 * CONTEXT_CHARS])
        # BM25 reads each passage under its heading; the call's context is one
        # document of its own whose score every passage of the text shares, so a
        # file name in the question finds the file without making each of its
        # passages alike (which would blur the ranking inside it).
        docs = [f"{h}\n{p.text}" if h else p.text for h, p in zip(heads, ps)]
        with self._lock:
            first = len(self._passages)
            self._lex.add(docs)
            self._ctx_doc[key] = self._ctx_lex.add([context])
            self._passages.extend(ps)
            self._context.extend(ctx)
            self._keys[key] = (first, len(ps))
            self._pending.extend(range(first, first + min(len(ps), ARRIVAL_PASSAGES)))

    def passages(self, key: str) -> list[Passage]:
        """The passages of ``key``'s text, in order."""
        first, n = self._keys[key]
        return self._passages[first : first + n]

    def _doc(self, row: int) -> str:
        c = self._context[row]
        t = self._passages[row].text
        return f"{c}\n{t}" if c else t

    # ---- embedding (on arrival, or when a query needs it) ---------------------------------

    def pending(self) -> int:
        """Passages added and not yet embedded on arrival."""
        return len(self._pending)

    def embed_pending(self, embedder: Any, max_rows: int | None = None) -> int:
        """Embed up to ``max_rows`` (all by default) of the passages waiting since
        they arrived; returns how many were embedded. Thread-safe: what another
        thread embeds meanwhile is not embedded twice."""
        with self._lock:
            if self._model != _model_key(embedder):
                self._reset_vectors(embedder)
            take = self._pending[: max_rows if max_rows is not None else len(self._pending)]
            del self._pending[: len(take)]
            rows = [r for r in take if not self._has_row(r) and r not in self._flight]
            self._flight.update(rows)
        if rows:
            self._embed(rows, embedder)
        return len(rows)

    def _ensure(self, rows: list[int], embedder: Any) -> None:
        """Vectors for ``rows``: embedded here where nobody is embedding them,
        waited for where another thread is."""
        with self._lock:
            mine = [r for r in rows if not self._has_row(r) and r not in self._flight]
            self._flight.update(mine)
            theirs = [r for r in rows if r in self._flight and r not in mine]
        if mine:
            self._embed(mine, embedder)
        if theirs:
            with self._done:
                self._done.wait_for(lambda: not any(r in self._flight for r in theirs), 30.0)

    def _has_row(self, row: int) -> bool:
        return self._has is not None and row < len(self._has) and bool(self._has[row])

    def _reset_vectors(self, embedder: Any) -> None:
        # another model: its vectors mean nothing beside these
        self._mat = self._has = None
        self._tok.clear()
        self._tok_rows = 0
        self._model = _model_key(embedder)
        self._query = None

    def _embed(self, rows: list[int], embedder: Any) -> None:
        import numpy as np

        from rampart.embeddings.base import encode_texts

        try:
            texts = [self._doc(r) for r in rows]
            toks: list[Any] = [None] * len(rows)
            with_tokens = getattr(embedder, "encode_with_tokens", None)
            if with_tokens is not None and getattr(embedder, "token_vectors", False):
                vecs, toks = with_tokens(texts, skip=_SKIP_PIECES)
                vecs = np.asarray(vecs, dtype=np.float32)
                dim = int(vecs.shape[1])
            else:
                raw, dim, _ = encode_texts(embedder, texts)
                vecs = np.frombuffer(raw, dtype=np.float32).reshape(len(rows), dim)
            with self._lock:
                if self._model != _model_key(embedder):
                    return  # the model changed while this batch ran
                self._store(rows, vecs, dim)
                for r, t in zip(rows, toks):
                    if t is not None and r not in self._tok:
                        self._keep_tokens(r, t)
        finally:
            with self._done:
                self._flight.difference_update(rows)
                self._done.notify_all()

    def _keep_tokens(self, row: int, t: Any) -> None:
        import numpy as np

        t = np.asarray(t, dtype=np.float32)
        scale = np.maximum(np.abs(t).max(axis=1), 1e-12) / 127.0
        q = np.round(t / scale[:, None]).astype(np.int8)
        self._tok[row] = (q, scale.astype(np.float32))
        self._tok_rows += len(q)
        while self._tok_rows > TOKEN_ROWS and self._tok:
            _, (old, _) = self._tok.popitem(last=False)
            self._tok_rows -= len(old)

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

    # ---- scoring ---------------------------------------------------------------------------

    def score(self, query: str, keys: Iterable[str], embedder: Any = None) -> dict[str, ItemScore]:
        """Each of ``keys`` (added before) scored against ``query``."""
        lex = self._lex.scores(query)
        named = _identifiers(query)
        hits: list[float] | None = None  # passages holding a named identifier
        if named:
            # an identifier the question names counts twice (see _identifiers)
            own = self._lex.scores(named)
            lex = [a + b for a, b in zip(lex, own)]
            hits = [1.0 if b > 0 else 0.0 for b in own]
        spans = [(k, *self._keys[k]) for k in keys if k in self._keys]
        if self._ctx_doc:
            ctx = self._ctx_lex.scores(query)
            ctx_named = self._ctx_lex.scores(named) if named else None
            if ctx_named is not None:
                ctx = [a + b for a, b in zip(ctx, ctx_named)]
            for k, f, n in spans:
                c = ctx[self._ctx_doc[k]]
                if c > 0:
                    lex[f : f + n] = [x + c for x in lex[f : f + n]]
                if hits is not None and ctx_named is not None and ctx_named[self._ctx_doc[k]] > 0:
                    hits[f : f + n] = [1.0] * n
        best = [max(lex[f : f + n], default=0.0) for _, f, n in spans]
        n_all = len(lex)
        unit = _unit(n_all)
        ranked = sorted(best, reverse=True)
        lead = -1  # the index into spans of the clear lexical winner, if any
        if ranked and ranked[0] > 0 and (len(ranked) == 1 or ranked[0] >= 2 * ranked[1]):
            lead = best.index(ranked[0])
        half = unit * RARE_HALF
        if embedder is None or not spans:
            # lexical only: no numpy (the embedding extra is optional)
            out = {}
            for (key, f, n), b in zip(spans, best):
                fused = [x / (x + half) for x in lex[f : f + n]]
                out[key] = ItemScore(key, b / (b + half), b, None, None, fused, b / unit)
            if lead >= 0:
                out[spans[lead][0]].lead = True
            return out
        import numpy as np

        lx = np.asarray(lex, dtype=np.float64)
        final = self.lexical_weight * lx / (lx + half)  # the lexical part, then + cosine
        if hits is not None:
            final += IDENTIFIER_WEIGHT * np.asarray(hits, dtype=np.float64)
        dense, late = self._dense(query, spans, lx, final, embedder)
        if dense is not None:
            final += np.where(np.isfinite(dense), dense, 0.0)
        if late is not None:
            final += LATE_WEIGHT * np.nan_to_num(late, nan=0.0)
        out = {}
        for (key, f, n), b in zip(spans, best):
            if n == 0:
                out[key] = ItemScore(key, 0.0, 0.0, 0.0, (0,), None, 0.0)
                continue
            part = final[f : f + n]
            d = float(dense[f : f + n].max()) if dense is not None else 0.0
            lt = None
            if late is not None:
                seg = late[f : f + n]
                if not np.isnan(seg).all():
                    lt = float(np.nanmax(seg))
            out[key] = ItemScore(
                key, float(part.max()), b, d if d > -2.0 else 0.0, None, part, b / unit, lt
            )
        if lead >= 0:
            out[spans[lead][0]].lead = True
        return out

    def _wanted(self, spans: list[tuple[str, int, int]], lex: Any) -> Any:
        import numpy as np

        parts = []
        for _, first, n in spans:
            head = min(n, ARRIVAL_PASSAGES)
            parts.append(np.arange(first, first + head))
            if n > head:
                rest = lex[first + head : first + n]
                top = np.argsort(-rest, kind="stable")[:QUERY_PASSAGES] + first + head
                parts.append(top[rest[top - first - head] > 0])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.intp)

    def _dense(
        self, query: str, spans: list[tuple[str, int, int]], lex: Any, lexical: Any, embedder: Any
    ) -> Any:
        """Every passage's cosine to ``query`` (-inf where not wanted) and its
        late-interaction bonus (NaN where not reranked); (None, None) when the
        model's vectors do not match the query's."""
        import numpy as np

        with self._lock:
            if self._model != _model_key(embedder):
                self._reset_vectors(embedder)
        want = self._wanted(spans, lex).astype(np.intp)
        # what the background has not embedded yet: the question pays for it
        self._ensure([int(r) for r in want], embedder)
        qv, qt = self._query_vectors(query, embedder)
        with self._lock:
            if qv is None or self._mat is None:
                return None, None
            n = len(self._passages)
            cos = np.full(n, -np.inf)
            cos[want] = self._mat[want] @ qv
            late = np.full(n, np.nan)
            if qt is None or not self._tok or RERANK_K <= 0:
                return cos, None
            # stage 2 over the best of stage 1 that have token vectors
            stage1 = cos[want] + lexical[want]  # the stage-1 score score() adds up
            order = want[np.argsort(-stage1, kind="stable")]
            picked = [int(r) for r in order[:RERANK_K] if int(r) in self._tok]
            if not picked:
                return cos, None
            qf = qt.astype(np.float32)
            for r in picked:
                q8, scale = self._tok[r]
                sim = qf @ (q8.astype(np.float32) * scale[:, None]).T
                late[r] = float(sim.max(axis=1).mean())
            # the bonus of a reranked passage is how far it reads better than the
            # worst reranked one: the rest keep their stage-1 scores, and the
            # score's scale (what the recall's ratio to the best compares) stays
            return cos, late - float(np.nanmin(late[picked]))

    def _query_vectors(self, query: str, embedder: Any) -> tuple[Any, Any]:
        import numpy as np

        from rampart.embeddings.base import encode_texts

        cached = self._query
        if cached is not None and cached[0] == _model_key(embedder) and cached[1] == query:
            return cached[2], cached[3]
        tokens = None
        with_tokens = getattr(embedder, "encode_with_tokens", None)
        if with_tokens is not None and getattr(embedder, "token_vectors", False):
            vecs, toks = with_tokens([query], skip=_SKIP_PIECES)
            v = np.asarray(vecs[0], dtype=np.float32).copy()
            tokens = toks[0]
        else:
            raw, _, _ = encode_texts(embedder, [query])
            v = np.frombuffer(raw, dtype=np.float32).copy()
        if len(v) != self._dim and self._mat is not None:
            return None, None
        n = float(np.linalg.norm(v))
        v = v / n if n > 0 else v
        self._query = (_model_key(embedder), query, v, tokens)
        return v, tokens


def _identifiers(query: str) -> str:
    """The terms of ``query`` that name one thing — a commit id, a version, a
    ticket: at least five characters with a digit, and a letter unless seven or
    more — joined by spaces ('' when none). They count twice in the lexical
    score: "commit bbe509c" shares "commit" with every git result and a
    paraphrase's words with many passages, and only the id says which one; once
    counted, the id weighed less than a file's chance matches of "file" and
    "change" (the task-success bench's tune split)."""
    out = []
    for t in dict.fromkeys(terms(query[:4000])):
        if len(t) >= 5 and any(ch.isdigit() for ch in t):
            if len(t) >= 7 or any(ch.isalpha() for ch in t):
                out.append(t)
    return " ".join(out)


def _unit(n_all: int) -> float:
    """BM25's weight of a term one passage of ``n_all`` holds, at its term
    frequency's limit: the unit of ItemScore.rare."""
    return math.log(1 + (n_all - 0.5) / 1.5) * 2.2 if n_all else 1.0


def _model_key(embedder: Any) -> Any:
    """What identifies an embedder's vectors: its ``model_id`` where it has one
    (stable across wrappers and processes), else the object itself."""
    mid = getattr(embedder, "model_id", None)
    return mid if isinstance(mid, str) else id(embedder)
