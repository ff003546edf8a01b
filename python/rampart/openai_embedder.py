"""Where :class:`~rampart.embeddings.openai.OpenAIEmbedder` was first published.

Everything about embeddings now lives in :mod:`rampart.embeddings`; this module
keeps ``from rampart.openai_embedder import OpenAIEmbedder`` working for code
written against earlier releases. The class is the same object either way.
"""

from __future__ import annotations

from rampart.embeddings.openai import MAX_COMPONENT, MIN_MAX_BODY, OpenAIEmbedder

__all__ = ["OpenAIEmbedder"]

# Module constants that were importable from here too (not part of __all__).
_COMPAT = (MAX_COMPONENT, MIN_MAX_BODY)
