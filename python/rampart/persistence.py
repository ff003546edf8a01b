"""Saving, loading and exporting a registry (``BlockRegistry.save``/``load``,
pickling, ``export_markdown``): the file checks made before any registry
exists, so a bad file creates nothing. Functions over the registry class or a
view of one; the registry's methods call them."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import rampart._core as _core
import rampart._files as _files
from rampart._export import export_text
from rampart._files import atomic_write
from rampart.errors import InvalidArgumentError, RegistryFileError
from rampart.tokens import resolve_tokeniser
from rampart.tools import check_block_metadata

__all__ = ["SOURCES", "export_markdown", "from_bytes", "read_file"]

SOURCES = ("seed", "agent", "orchestrator")


def read_file(path: Any) -> tuple[bytes, str]:
    """(the bytes of a registry file, its name for messages)."""
    p = Path(os.fspath(path))
    try:
        # The magic and the length header are checked before the file is read
        # whole; FIFOs and devices are refused, not read.
        data = _files.read_registry_bytes(p)
    except _files.FileProblem as e:
        if e.missing:
            raise FileNotFoundError(f"no registry file {p}") from None
        raise RegistryFileError(f"cannot load registry file {p}: {e}") from None
    return data, str(p)


def from_bytes(
    cls: type[Any],
    data: bytes,
    where: str,
    embedding_model: Any,
    tokeniser: Any,
    label: str | None,
    kwargs: dict[str, Any],
) -> Any:
    """A new ``cls`` registry holding the saved registry ``data`` (checked first)."""
    try:
        saved = _core.decode_registry(data)
        settings = _files.registry_settings(saved.settings)
        # Block metadata is opaque to the core: checked before a registry
        # exists, so that reading it later cannot fail.
        check_block_metadata(saved.block_metadata())
    except RegistryFileError as e:
        raise RegistryFileError(f"cannot load registry file {where}: {e}") from None
    except _files.FileProblem as e:
        raise RegistryFileError(f"cannot load registry file {where}: {e}") from None
    tok = resolve_tokeniser(tokeniser)
    if tok.name != settings.get("tokeniser"):
        raise InvalidArgumentError(
            f"{where} was saved with tokeniser {settings.get('tokeniser')!r}, whose token "
            f"counts it holds; pass that tokeniser, not {tok.name!r}"
        )
    kwargs.setdefault("default_max_tokens", settings.get("default_max_tokens"))
    reg = cls(embedding_model, tok, label=label, **kwargs)
    try:
        reg._core.install(saved)
    except BaseException:
        reg._drop()
        del reg  # this frame, kept by the traceback, no longer holds it
        raise
    return reg


def export_markdown(reg: Any, path: Any, source: str | None, overwrite: bool) -> int:
    """``BlockRegistry.export_markdown``."""
    if source is not None and source not in SOURCES:
        raise InvalidArgumentError(f"source must be one of {SOURCES} or None, got {source!r}")
    p = Path(os.fspath(path))
    if not overwrite and p.exists():
        raise FileExistsError(f"{p} exists (pass overwrite=True to replace it)")
    blocks = [b for b in reg.list_blocks() if source is None or b.source == source]
    if not blocks and source is not None:
        # Usually an agent that learned nothing this session: the file is still
        # written (an empty seed file loads as no blocks), but not silently.
        warnings.warn(
            f"export_markdown: registry {reg.label!r} has no {source} blocks; "
            f"{p} holds no blocks (source=None exports every block)",
            RuntimeWarning,
            stacklevel=2,
        )
    text = export_text(blocks, p)
    atomic_write(p, text.encode("utf-8"))
    return len(blocks)
