"""Opening a shared registry (``BlockRegistry.open``): the store's meta record,
the latest usable checkpoint, the journal tail replayed, seeds loaded by the
creator, and the replica's follower started."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable
from typing import Any

import rampart._core as _core
from rampart.errors import InvalidArgumentError, RegistryFileError
from rampart.shared.replica import Replica, _install_checkpoint, _replay_instead
from rampart.stores import Store, check_name, opened_for, redacted

__all__ = ["META_FORMAT", "open_shared"]

#: The version of a shared registry's meta record in its store.
META_FORMAT = 1

#: The origin of the creator's seed entries (no replica's: every replica
#: applies them).
_SEED_ORIGIN = b"\0" * 16


def open_shared(
    cls: type[Any],
    store: str | Store,
    name: str,
    embedding_model: Any,
    tokeniser: Any,
    label: str | None,
    seeds: Iterable[Any] | None,
    kwargs: dict[str, Any],
    create: bool = True,
) -> Any:
    """``BlockRegistry.open``: create or join the shared registry ``name`` as an
    instance of ``cls`` (``create=False``: join only; a missing registry, or
    SQLite file, is InvalidArgumentError naming the store and the name)."""
    from rampart.seeds import load_sources

    check_name(name)
    with opened_for(store, create=create) as st:
        if not create:
            path = getattr(st, "path", None)  # a store kept in a file: SQLite
            if isinstance(path, os.PathLike) and not os.path.exists(path):
                raise InvalidArgumentError(
                    f"store {redacted(st.url)}: no such file (no registry {name!r})"
                )
            if st.meta(name) is None:
                where = redacted(st.url)
                raise InvalidArgumentError(
                    f"store {where} holds no registry {name!r} (rampart store ls {where})"
                )
        if label is None:
            from rampart._labels import get_by_label

            label = name if get_by_label(name) is None else None
        probe = cls(embedding_model, tokeniser, label=label, **kwargs)
        try:
            settings = json.loads(probe._settings())
            raw = st.meta(name)
            entries: list[bytes] = []
            if raw is None:
                meta = {
                    "format": META_FORMAT,
                    "registry_id": str(uuid.uuid4()),
                    "settings": settings,
                }
                if seeds is not None:
                    # The seed load, encoded by the core's ordinary write method
                    # before the registry exists in the store; never applied here.
                    seeder = cls._with_id(
                        embedding_model, tokeniser, meta["registry_id"], None, kwargs
                    )
                    seeder._core.attach_journal(_SEED_ORIGIN)
                    pending = seeder._insert_seeds(load_sources(seeds))
                    seeder._drop()
                    if isinstance(pending, _core.PendingEntry):
                        entries = [pending.data]
                if not st.create(name, json.dumps(meta).encode(), entries):
                    raw = st.meta(name)  # another process created it first: join it
            if raw is not None:
                meta = _check_meta(raw, name, settings, st)
        finally:
            probe._drop()
        # The registry is built under the shared id from the start: its core object
        # is never replaced afterwards.
        reg = cls._with_id(embedding_model, tokeniser, meta["registry_id"], label, kwargs)
        try:
            rep = Replica(reg, st, name, meta)
            rep._genesis = reg._core.checkpoint_bytes(reg._settings())
            ck = _usable_checkpoint(st, name)
            if ck is not None:
                try:
                    _install_checkpoint(reg._core, meta["registry_id"], ck[1], name)
                    rep.position = ck[0]
                except RegistryFileError as e:  # decoded nothing into the core: replay
                    _replay_instead(name, e)
            reg._replica = rep
            rep.catch_up()
            reg._core.attach_journal(rep.origin)
            reg._embed_written()  # publishes what no replica has embedded yet
            rep.start()
        except BaseException:
            reg._drop()
            raise
        return reg


def _usable_checkpoint(st: Store, name: str) -> tuple[int, bytes] | None:
    """The checkpoint a new replica starts from (None: replay the journal)."""
    try:
        return st.checkpoint(name)
    except RegistryFileError as e:
        _replay_instead(name, e)
        return None


def _check_meta(raw: bytes, name: str, settings: dict[str, Any], st: Store) -> dict[str, Any]:
    try:
        meta = json.loads(raw)
        ok = (
            isinstance(meta, dict)
            and meta.get("format") == META_FORMAT
            and isinstance(meta.get("registry_id"), str)
            and isinstance(meta.get("settings"), dict)
        )
    except ValueError:
        ok = False
    if not ok:
        raise RegistryFileError(
            f"store {redacted(st.url)}: registry {name!r} has a damaged metadata record"
        )
    theirs = meta["settings"]
    if theirs.get("tokeniser") != settings.get("tokeniser"):
        raise InvalidArgumentError(
            f"shared registry {name!r} counts tokens with {theirs.get('tokeniser')!r}; open it "
            f"with that tokeniser, not {settings.get('tokeniser')!r} (counts would disagree "
            "between replicas)"
        )
    mine, created = settings.get("embedding_model"), theirs.get("embedding_model")
    if mine is not None and created is not None and mine != created:
        raise InvalidArgumentError(
            f"shared registry {name!r} was created with embedding model {created!r}; open it "
            f"with that model (or none), not {mine!r} (vectors would disagree between replicas)"
        )
    return dict(meta)
