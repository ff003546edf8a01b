"""Writing files so that a crash or a concurrent reader never sees half of one, and
reading untrusted ones without hanging or running out of memory."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
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


class FileProblem(Exception):
    """Why a file could not be read; the caller names the file in its own error class."""


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
        raise FileProblem("file not found") from None
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
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise FileProblem(f"is {kind} (a FIFO, socket or device is never read)")
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
