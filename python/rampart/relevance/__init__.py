"""Relevance scoring: one component for everything in rampart that ranks text
against a request — the tool gate's lexical signal (:mod:`rampart.gates`), tool
search, and the conversation's retention policy and recall
(:mod:`rampart.conversation`).

It sits below all of them and imports none of them back (docs/design.md):

- :mod:`~rampart.relevance.lexical`: the term rule and BM25 — an incremental
  index in the Rust core (:class:`LexicalIndex`) and the small pure-Python
  model the property tests compare it with (:class:`BM25`);
- :mod:`~rampart.relevance.passages`: a text cut into passages with their line
  ranges (what is scored, excerpted and recalled), bounded for hostile input;
- :mod:`~rampart.relevance.hybrid`: :class:`PassageIndex`, many texts' passages
  scored against one query by BM25 fused with an embedder's cosine (passages
  embedded once, lazily, and cached).
"""

from __future__ import annotations

from rampart.relevance.hybrid import ItemScore, PassageIndex
from rampart.relevance.lexical import BM25, LexicalIndex, terms
from rampart.relevance.passages import Passage, split_passages

__all__ = [
    "BM25",
    "ItemScore",
    "LexicalIndex",
    "Passage",
    "PassageIndex",
    "split_passages",
    "terms",
]
