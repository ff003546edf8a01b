"""Saving, loading and exporting a registry (``BlockRegistry.save``/``load``,
pickling, ``export_markdown``): the file checks made before any registry
exists, so a bad file creates nothing. Functions over the registry class or a
view of one, and :class:`Persistence`, the registry's methods that call them
(mixed into :class:`~rampart.registry.BlockRegistry`)."""

from __future__ import annotations

import json
import warnings
from typing import TYPE_CHECKING, Any, TypeVar

import rampart._args as _args
import rampart._core as _core
import rampart._files as _files
from rampart._export import export_text
from rampart._files import atomic_write
from rampart.embeddings.base import EmbeddingModel
from rampart.errors import InvalidArgumentError, RegistryFileError
from rampart.seeds import PathLike
from rampart.tokens import resolve_tokeniser
from rampart.tools import check_block_metadata

if TYPE_CHECKING:
    from rampart.tokens import Tokeniser

_P = TypeVar("_P", bound="Persistence")

__all__ = ["SOURCES", "Persistence", "export_markdown", "from_bytes", "read_file"]

SOURCES = ("seed", "agent", "orchestrator")


def read_file(path: Any) -> tuple[bytes, str]:
    """(the bytes of a registry file, its name for messages)."""
    p = _args.file_path(path)
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
    p = _args.file_path(path)
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


def _unpickle(
    cls: type[Any], data: bytes, tokeniser: Any, model: str | None, default_max_tokens: int | None
) -> Any:
    return cls._from_bytes(
        data, "pickled registry", model, tokeniser, None, {"default_max_tokens": default_max_tokens}
    )


class Persistence:
    """Save, load, pickle and export: the registry's methods (mixed in)."""

    __slots__ = ()

    # Provided by BlockRegistry.
    _core: _core.Registry
    _tok: Tokeniser
    _embedder: Any
    default_max_tokens: int | None

    def _settings(self) -> str:
        return json.dumps(
            {
                "tokeniser": self._tok.name,
                "default_max_tokens": self.default_max_tokens,
                "embedding_model": getattr(self._embedder, "model_id", None),
            }
        )

    def save(self, path: Any) -> None:
        """Write the whole registry (blocks, order, provenance, access counts,
        embeddings) to one versioned file, atomically: a temporary file in the
        same folder, fsync, rename. A crash mid-save leaves the previous file whole."""
        target = _args.file_path(path)  # before anything is written
        data = self._core.save_bytes(self._settings())
        atomic_write(target, data)

    @classmethod
    def load(
        cls: type[_P],
        path: PathLike,
        embedding_model: EmbeddingModel | str | None = None,
        tokeniser: Any = None,
        *,
        label: str | None = None,
        **kwargs: Any,
    ) -> _P:
        """A registry from a file ``save`` wrote, every block under a **new**
        runtime id. Vectors come back with it (no re-embedding). Blocks the saved
        registry wrote belong to the new one; other authors keep their identity
        (so nothing here can force-evict their pinned blocks). A truncated,
        damaged or newer file raises ``RegistryFileError`` and creates nothing."""
        data, where = read_file(path)
        reg: _P = cls._from_bytes(data, where, embedding_model, tokeniser, label, kwargs)
        return reg

    # The checked construction from saved bytes, as a classmethod (load, unpickle).
    _from_bytes = classmethod(from_bytes)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickling goes through the same state as save(); the copy gets a fresh
        # label (the original may still hold its own). The tokeniser travels with
        # it; of embedding models only the shared default one does (vectors
        # always do).
        from rampart.embeddings.base import default_model

        model = (
            "default" if self._embedder is not None and self._embedder is default_model() else None
        )
        data = self._core.save_bytes(self._settings())
        return (_unpickle, (type(self), data, self._tok, model, self.default_max_tokens))

    def export_markdown(
        self, path: Any, *, source: str | None = "agent", overwrite: bool = True
    ) -> int:
        """Write the chosen blocks (``source``: "agent", "orchestrator", "seed", or
        None for all) as a seed file that loads back through the ordinary parser
        with the same names, contents, priorities and tags, byte for byte;
        provenance (source, trajectory, created, author) goes into front matter.
        A name or content the Markdown form would change (outer blank space,
        ``\r``, a "---" line read as front matter) is written verbatim under the
        front-matter key ``exact``. Returns the number of blocks written; when no
        block has that ``source`` the (empty) file is written with a
        ``RuntimeWarning``.

        Example:
            >>> rid = reg.write_agent_block("Run `make lint` before committing.", "run-42")
            >>> reg.export_markdown("learned.md")  # next session: from_files([..., "learned.md"])
            1
        """
        return export_markdown(self, path, source, overwrite)
