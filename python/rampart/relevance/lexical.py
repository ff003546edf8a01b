"""The lexical signal: BM25 over rare words (file names, API names, flags).

:class:`LexicalIndex` is the Rust core's incremental index (``_core.Bm25Index``):
documents are added once and every query walks only its terms' postings, so a
conversation that grows by a few tool results per step never re-indexes its
history. :class:`BM25` and :func:`py_terms` are the pure-Python model of the
same rule (k1 = 1.2, b = 0.75; the term rule of ``rust/src/lexical.rs``): the
property tests compare the two, and the example gate uses the model where it
keeps its own memo of terms.
"""

from __future__ import annotations

import itertools
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from typing import Any

import rampart._args as _args
import rampart._core as _core
from rampart.errors import InvalidArgumentError

__all__ = ["BM25", "LexicalIndex", "py_terms", "terms"]

# Words that say nothing about which text is meant (requests are full of them).
# The same list is in rust/src/lexical.rs.
STOP = frozenset(
    "a an the to of in on for and or with is are be this that it its my me i we you your "
    "our from by as at into all any what which who how do does can please so just not "
    "than then there their them those these was were will would should could have has "
    "had get give show make let".split()
)
_TOKEN = re.compile(r"[a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

#: Scripts written without spaces between words (their runs are indexed as
#: character bigrams): the ranges of rust/src/lexical.rs's is_bigram_script.
BIGRAM_RANGES = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x1780, 0x17FF),  # Khmer
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3130, 0x318F),  # Hangul compatibility Jamo
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA960, 0xA97F),  # Hangul Jamo extended A
    (0xAC00, 0xD7FF),  # Hangul syllables, Jamo extended B
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # half-width Katakana
    (0x20000, 0x3134F),  # CJK extensions B..G
)


def _stem(word: str) -> str:
    # Plural and tense endings only: enough for "files"/"file", "branches"/"branch",
    # "staged"/"stag(e)" (both sides of a match are stemmed alike).
    if len(word) > 4 and word.endswith(("ches", "shes", "sses", "xes", "zes")):
        return word[:-2]
    for suffix in ("ing", "ed", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix) and not word.endswith("ss"):
            return word[: -len(suffix)]
    return word


_HEX = re.compile(r"[0-9a-f]{16,}")


def _hex_prefixes(w: str) -> list[str]:
    """A word of 16 or more hex digits with a digit and a letter (a commit or
    object id) also gives its prefixes of 7..12 characters: the short forms."""
    if _HEX.fullmatch(w) and any(c.isdigit() for c in w) and any(c.isalpha() for c in w):
        return [w[:n] for n in range(7, 13)]
    return []


def _word_char(c: str) -> bool:
    return unicodedata.category(c)[0] in "LMN"


def _bigram_script(c: str) -> bool:
    cp = ord(c)
    return any(lo <= cp <= hi for lo, hi in BIGRAM_RANGES) and _word_char(c)


def py_terms(text: str) -> list[str]:
    """:func:`terms` in pure Python: the model the Rust rule is checked against.
    A word is a run of letters, marks and digits of any script, lower-cased a
    character at a time; scripts without spaces give character bigrams."""
    if text.isascii():  # the common case, by regular expressions (same rule)
        text = _CAMEL.sub(" ", text).replace("_", " ")
        found: list[str] = []
        for w in _TOKEN.findall(text.lower()):
            if w not in STOP:
                found.append(_stem(w))
                found.extend(_hex_prefixes(w))
        return found
    out: list[str] = []
    word: list[str] = []
    run: list[str] = []
    prev = False  # the previous character was an ASCII lower-case letter or digit

    def flush() -> None:
        if word:
            w = "".join(word)
            if w not in STOP:
                out.append(_stem(w) if w.isascii() else w)
                out.extend(_hex_prefixes(w))
            word.clear()
        if len(run) == 1:
            out.append(run[0])
        else:
            out.extend(a + b for a, b in itertools.pairwise(run))
        run.clear()

    for c in text:
        if c.isascii():
            if prev and "A" <= c <= "Z":
                flush()
            prev = "a" <= c <= "z" or "0" <= c <= "9"
            if c.isalnum():
                if run:
                    flush()
                word.append(c.lower())
            else:
                flush()
            continue
        prev = False
        if _bigram_script(c):
            if word:
                flush()
            run.append(c)
        elif _word_char(c):
            if run:
                flush()
            word.append(c.lower())
        else:
            flush()
    flush()
    return out


def terms(text: str) -> list[str]:
    """Lower-cased, stemmed word terms; ``snake_case`` and ``camelCase`` split.
    ``text`` that is not a str, or holds a lone surrogate, is an
    InvalidArgumentError (as every string argument of rampart)."""
    try:
        return _core.terms(text)
    except (TypeError, UnicodeEncodeError) as exc:  # checked only on failure: free
        raise _refused(exc, "text", text) from None


def _refused(exc: Exception, what: str, value: Any) -> InvalidArgumentError:
    """The InvalidArgumentError naming ``what`` for a string argument the core
    refused (``exc``: its TypeError or UnicodeEncodeError)."""
    try:
        _args.text(value, what)
    except InvalidArgumentError as err:
        return err
    return InvalidArgumentError(f"{what} is not text: {exc}")


class LexicalIndex:
    """BM25 over documents added one at a time, in the Rust core. Scores are
    those of the documents added so far (document frequencies and the average
    length included), in document order."""

    __slots__ = ("_ix",)

    def __init__(self, k1: float = 1.2, b: float = 0.75) -> None:
        self._ix = _core.Bm25Index(k1, b)

    def __len__(self) -> int:
        return len(self._ix)

    def add(self, documents: Sequence[str]) -> int:
        """Add ``documents`` in order; returns the index of the first. A
        document that is not text is an InvalidArgumentError naming it, and
        none of them is added."""
        if isinstance(documents, (str, bytes)):
            raise InvalidArgumentError(
                f"documents must be a list of strings, not one {type(documents).__name__}"
            )
        try:
            docs = list(documents)
        except TypeError:
            raise InvalidArgumentError(
                f"documents must be a list of strings, got {type(documents).__name__}"
            ) from None
        try:
            return self._ix.add(docs)
        except (TypeError, UnicodeEncodeError) as exc:
            raise _args.not_text(exc, documents=docs) from None

    def scores(self, query: str) -> list[float]:
        """Every document's BM25 score for ``query`` (InvalidArgumentError when
        it is not text)."""
        try:
            return self._ix.scores(query)
        except (TypeError, UnicodeEncodeError) as exc:
            raise _refused(exc, "query", query) from None


class BM25:
    """Okapi BM25 over a fixed list of documents (k1 = 1.2, b = 0.75), in pure
    Python: the model :class:`LexicalIndex` is checked against."""

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
        docs = list(tokenised) if tokenised is not None else [py_terms(d) for d in documents]
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
        q = py_terms(query)
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
