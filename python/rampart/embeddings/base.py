"""The registry's embedding plumbing: what an embedding model must offer, how
"default" resolves, and turning any model's output into the float32 matrix the
core stores (with the per-text truncation flags).

Imported by every registry at start-up, so it stays light: numpy only when a model
returns arrays, the ONNX embedder only when "default" or a model name is asked for."""

from __future__ import annotations

import sys
from typing import Any, Protocol

import rampart._args as _args
from rampart.errors import InvalidArgumentError, RampartError

__all__ = ["EmbeddingModel", "default_model", "encode_texts", "resolve_model"]

_is_array = _args.is_array
_vector = _args.vector


class EmbeddingModel(Protocol):
    """What a registry's ``embedding_model`` must offer: ``encode(text)`` returning
    one vector (any 1-d float sequence); ``encode_batch(texts)``, when present, is
    used for batches. :class:`rampart.OnnxEmbedder` is one."""

    def encode(self, text: str) -> Any:
        """The embedding of ``text``, a 1-d sequence of floats of a fixed length."""
        ...


def encode_texts(model: Any, texts: list[str]) -> tuple[bytes, int, list[bool]]:
    """Embed ``texts`` with any model: (float32 bytes of the (n, dim) matrix, dim,
    truncated flags). Uses the model's batch and truncation report when it has them."""
    report = getattr(model, "encode_batch_report", None)
    if report is not None:
        vectors, truncated = report(texts)
    else:
        batch = getattr(model, "encode_batch", None)
        vectors = batch(texts) if batch is not None else [model.encode(t) for t in texts]
        truncated = [False] * len(texts)
    if _is_array(vectors) and len(getattr(vectors, "shape", ())) == 2:
        import numpy as np

        arr = np.ascontiguousarray(vectors, dtype=np.float32)
        if arr.shape[0] != len(texts):
            raise RampartError(
                f"embedding model returned {arr.shape[0]} vectors for {len(texts)} texts"
            )
        if not np.isfinite(arr).all():
            raise RampartError("embedding model returned NaN or infinite values")
        return arr.tobytes(), int(arr.shape[1]), [bool(t) for t in truncated]
    rows = [_vector(v, "embedding model output") for v in vectors]
    if len(rows) != len(texts):
        raise RampartError(f"embedding model returned {len(rows)} vectors for {len(texts)} texts")
    dims = {len(r) // 4 for r in rows}
    if len(dims) > 1:
        raise RampartError(f"embedding model returned vectors of different lengths {dims}")
    return b"".join(rows), (dims.pop() if dims else 0), [bool(t) for t in truncated]


def resolve_model(model: Any) -> Any:
    """A registry's ``embedding_model`` argument as a model object: ``"default"`` is
    the shared default embedder, a packaged model name (``NAME`` or
    ``NAME:VARIANT``) its embedder, an object with ``encode`` itself, and None None.
    Anything else is an :class:`~rampart.errors.InvalidArgumentError`."""
    if isinstance(model, str):
        if model == "default":
            from rampart.embeddings import default_embedder

            return default_embedder()
        from rampart.embeddings.prepare import (  # light: no numpy/onnx
            MODEL_VARIANTS,
            NAMED_MODELS,
            is_model_name,
            parse_model_name,
        )

        if not is_model_name(model):
            raise InvalidArgumentError(
                f'embedding_model must be a model object, "default" or a packaged model '
                f"name ({', '.join(NAMED_MODELS)}, or NAME:{'|'.join(MODEL_VARIANTS)}), "
                f"got {model!r}"
            )
        parse_model_name(model)  # an unknown variant: its own message
        from rampart.embeddings.embedder import named_embedder

        return named_embedder(model)
    if model is not None and not callable(getattr(model, "encode", None)):
        raise InvalidArgumentError(
            "embedding_model needs an encode(text) method (and optionally encode_batch)"
        )
    return model


def default_model() -> Any:
    """The shared default embedder if it was created, without creating it (nor
    importing the embedder module, which needs numpy)."""
    return getattr(sys.modules.get("rampart.embeddings.embedder"), "_DEFAULT", None)
