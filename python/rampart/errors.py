"""The rampart exception hierarchy (docs/specification.md §6).

Every error derives from :class:`RampartError` *and* from the builtin an ordinary
``except`` clause would name, so ``except KeyError`` catches an unknown block and
``except ValueError`` a bad seed file. The Rust core raises these classes directly.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "BlockNotFoundError",
    "BlockPermissionError",
    "ContextOverflowError",
    "EvictionError",
    "InvalidArgumentError",
    "ModelError",
    "ModelNotFoundError",
    "OrchestratorMutationError",
    "ParseError",
    "RampartError",
    "RegistryFileError",
    "SeedMutationError",
    "StoreUnavailableError",
    "UnsupportedFormatError",
]


class RampartError(Exception):
    """Base class of every rampart error."""


class ParseError(RampartError, ValueError):
    """A seed or skill file could not be read; names the file and line."""

    def __init__(self, message: str, *, path: str | Path | None = None, line: int | None = None):
        self.path = None if path is None else str(path)
        self.line = line
        where = ""
        if self.path is not None:
            where = f"{self.path}:{line}: " if line is not None else f"{self.path}: "
        super().__init__(where + message)


class UnsupportedFormatError(RampartError, ValueError):
    """No parser is registered for a file's extension, or a tool definition is in
    no supported shape (or is invalid); names the file and entry."""


class InvalidArgumentError(RampartError, ValueError):
    """An argument outside its domain (priority out of [0, 1], duplicate ids, …)."""


class BlockNotFoundError(RampartError, KeyError):
    """A runtime id or name the registry does not hold."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class BlockPermissionError(RampartError, PermissionError):
    """The acting registry is not the author the operation requires."""


class SeedMutationError(RampartError):
    """Content replacement attempted on a seed block."""


class OrchestratorMutationError(RampartError):
    """Content replacement attempted on an orchestrator block."""


class EvictionError(RampartError):
    """Eviction of a non-evictable block without ``force=True``."""


class RegistryFileError(RampartError, ValueError):
    """A saved registry file that cannot be loaded: truncated, damaged, not a
    registry file, or written by a newer rampart. Names the file."""


class ModelNotFoundError(RampartError, FileNotFoundError):
    """An embedding model is not installed or its directory/files are missing; the
    message says what to install or which file is absent."""


class ModelError(RampartError, ValueError):
    """An embedding model's files exist but cannot be used (malformed, unsupported),
    or an embedding endpoint failed. ``retryable`` says whether trying again could
    succeed (an endpoint's timeout, 429 or 5xx); ``False`` for files."""

    retryable: bool = False


class StoreUnavailableError(RampartError, ConnectionError):
    """The store of a shared registry (SQLite file, Redis server) cannot be
    reached. A mutation that raises this left the replica as it was; the
    operation is either wholly in the journal (a reply lost on the way back:
    this replica applies it when it catches up, like every other) or absent.
    Compile keeps working on the last applied state."""


class ContextOverflowError(RampartError, ValueError):
    """What a compile must send (the compiled instructions and tools, pinned
    messages, the latest user turn) does not fit ``context_window -
    reply_tokens`` (docs/specification.md §9); names what is pinned and how much room there is."""
