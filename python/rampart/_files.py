"""Writing files so that a crash or a concurrent reader never sees half of one."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

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
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()
