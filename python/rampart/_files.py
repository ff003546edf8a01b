"""Writing files so that a crash or a concurrent reader never sees half of one, and
reading untrusted ones without hanging or running out of memory."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

FILE_MODE = 0o644  # mkstemp's 0o600 would hide saved registries and cached models


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``: a temporary file beside it, fsync, rename over the
    target, fsync of the folder. A reader, or the disk after a crash, sees the old
    file or the new one, never a mix; a failed write leaves no temporary file."""
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # not every platform can open a folder
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def cache_dir() -> Path:
    """``$RAMPART_CACHE_DIR``, else ``$XDG_CACHE_HOME/rampart``, else ``~/.cache/rampart``."""
    env = os.environ.get("RAMPART_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "rampart"


def sha256_file(path: Path) -> str:
    """The SHA-256 of a regular file (model weights: gigabytes are fine, read in
    4 MiB chunks). A FIFO or a device is refused with an OSError naming the path,
    which every caller already handles as an unreadable file: hashing /dev/zero
    would never end, and a FIFO would wait for a writer."""
    try:
        fd = open_regular(path)
    except FileProblem as exc:
        if exc.missing:
            raise FileNotFoundError(f"{path}: {exc}") from None
        raise OSError(f"{path}: {exc}") from None
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


SMALL_FILE_BYTES = 16 << 20
"""The most read of a small JSON file rampart keeps beside its data (cache
manifests and memos, model configs, golden files, latency baselines): real ones
are kilobytes."""


class FileProblem(Exception):
    """Why a file could not be read; the caller names the file in its own error class.
    ``missing``: the file does not exist (callers may keep FileNotFoundError for it)."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


# O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


def open_regular(path: Path) -> int:
    """A descriptor for ``path`` if it is a regular file (symlinks followed), else
    FileProblem. Directories, FIFOs, sockets and devices such as /dev/zero are
    refused after open, by fstat of the opened file, so nothing can swap the file
    between the check and the read."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise FileProblem("file not found", missing=True) from None
    except IsADirectoryError:
        raise FileProblem("is a directory, not a file") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise FileProblem(f"cannot open: {exc}") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise FileProblem(f"cannot stat: {exc}") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise FileProblem("is a directory, not a file")
        raise FileProblem("is not a regular file (a FIFO, socket or device is never read)")
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return fd


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, else FileProblem.
    Reads at most ``limit + 1`` bytes whatever the file claims, so a file that
    grows while it is read cannot exceed the limit either."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size > limit:
                raise FileProblem(f"is {size} bytes; at most {limit} are read")
            data = f.read(limit + 1)
        except OSError as exc:
            raise FileProblem(f"cannot read: {exc}") from None
    if len(data) > limit:
        raise FileProblem(f"is larger than {limit} bytes, the most that is read")
    return data


# ---- saved registries -------------------------------------------------------------------

# The frame of a saved registry (rust/src/persist.rs): magic, format version u32,
# payload length u64, payload, crc32 u32, little-endian. Only the frame is checked
# here, so that a file that is not one, or whose size disagrees with its header,
# is refused before it is read into memory; the core checks everything else.
REGISTRY_MAGIC = b"RAMPART\0"
_HEADER = 8 + 4 + 8
_TRAILER = 4
MAX_SAVED_JSON_DEPTH = 128
"""Deepest nesting accepted in a saved registry's settings and block metadata."""


def read_registry_bytes(path: Path) -> bytes:
    """The bytes of a saved registry file whose magic and length header agree
    with its size, else FileProblem (what is wrong, in the core's words)."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        try:
            size = os.fstat(f.fileno()).st_size
            head = f.read(_HEADER)
            if len(head) < 8 or head[:8] != REGISTRY_MAGIC:
                raise FileProblem("it is not a rampart registry file (bad magic bytes)")
            if len(head) < _HEADER:
                raise FileProblem(f"it is truncated ({size} bytes, shorter than its header)")
            length = int.from_bytes(head[12:20], "little")
            if size - _HEADER - _TRAILER != length:
                raise FileProblem(
                    f"it is truncated or has trailing bytes (header says {length} payload "
                    f"bytes, file holds {max(size - _HEADER - _TRAILER, 0)})"
                )
            # The whole file in one read into one buffer (`head + rest` would copy
            # a large registry a second time); the header is read twice, 20 bytes.
            f.seek(0)
            data = f.read(size + 1)
        except OSError as exc:
            raise FileProblem(f"cannot read: {exc}") from None
    if len(data) != size or data[:_HEADER] != head:  # it changed while being read
        raise FileProblem("it changed while being read")
    return data


def _depth_at_most(value: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            kids: Any = v.values()
        elif isinstance(v, list):
            kids = v
        else:
            continue
        if depth >= limit:
            return False
        stack.extend((k, depth + 1) for k in kids)
    return True


def json_object(text: str, what: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object nesting at most MAX_SAVED_JSON_DEPTH
    levels, else FileProblem naming ``what``. Deeper text is refused by json's own
    recursion guard (a RecursionError, turned into a FileProblem here)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise FileProblem(f"{what} is not valid JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(value, dict):
        raise FileProblem(f"{what} must be a JSON object, got {type(value).__name__}")
    # Nesting needs a bracket per level: text with few brackets needs no walk.
    few = text.count("{") + text.count("[") <= MAX_SAVED_JSON_DEPTH
    if not few and not _depth_at_most(value, MAX_SAVED_JSON_DEPTH):
        raise FileProblem(f"{what} nests deeper than {MAX_SAVED_JSON_DEPTH} levels")
    return value


def registry_settings(text: str) -> dict[str, Any]:
    """The binding's settings from a saved registry, every field checked."""
    settings = json_object(text, "its settings")
    tok = settings.get("tokeniser")
    if not isinstance(tok, str):
        raise FileProblem(f"its settings name no tokeniser (got {type(tok).__name__})")
    budget = settings.get("default_max_tokens")
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, int) or not 0 <= budget < 2**63
    ):
        raise FileProblem(f"its settings hold a bad default_max_tokens {budget!r:.60}")
    model = settings.get("embedding_model")
    if model is not None and not isinstance(model, str):
        raise FileProblem(f"its settings hold a bad embedding_model {model!r:.60}")
    return settings
