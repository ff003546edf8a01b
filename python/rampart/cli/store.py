"""``rampart store ls`` and ``rampart store compact``: the shared registries (and
conversations) a store holds, and a registry's checkpoint."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from rampart.cli.common import CliError
from rampart.registry import BlockRegistry


def _cmd_store_ls(args: argparse.Namespace) -> int:
    from rampart.stores import open_store, redacted

    store = open_store(args.url, create=False)
    path = getattr(store, "path", None)
    if isinstance(path, os.PathLike) and not os.path.exists(path):
        raise CliError(f"{redacted(args.url)}: no such file")
    rows = [
        {
            "name": n,
            "kind": _journal_kind(store.meta(n)),
            "entries": store.last_seq(n),
            "checkpoint": (store.checkpoint(n) or (0,))[0],
        }
        for n in store.names()
    ]
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for r in rows:
            kind = "" if r["kind"] == "registry" else f" ({r['kind']})"
            print(f"{r['name']}{kind}  {r['entries']} entries, checkpoint at {r['checkpoint']}")
        print(f"{len(rows)} shared registries and conversations in {redacted(args.url)}")
    store.close()
    return 0


def _journal_kind(meta: bytes | None) -> str:
    """``"conversation"`` for a conversation's journal (docs/specification.md
    §9), else ``"registry"``."""
    try:
        kind = json.loads(meta or b"{}").get("kind")
    except (ValueError, AttributeError):
        return "registry"
    return "conversation" if kind == "conversation" else "registry"


def _cmd_store_compact(args: argparse.Namespace) -> int:
    from rampart.stores import open_store, redacted

    store = open_store(args.url, create=False)
    where = redacted(args.url)
    path = getattr(store, "path", None)
    if isinstance(path, os.PathLike) and not os.path.exists(path):
        raise CliError(f"{where}: no such file (no registry {args.name!r})")
    if store.meta(args.name) is None:
        raise CliError(f"{where} holds no registry {args.name!r} (rampart store ls {where})")
    reg = BlockRegistry.open(store, args.name, tokeniser=args.tokeniser, label=None)
    try:
        at, dropped = reg.compact()
    finally:
        reg.close()
    print(f"{args.name}: checkpoint at entry {at}, {dropped} entries dropped")
    return 0


def add_parsers(sub: Any) -> None:
    """Add ``store ls`` and ``store compact`` to the ``rampart`` subcommands ``sub``."""
    st = sub.add_parser("store", help="shared registries in a store: list, compact")
    ssub = st.add_subparsers(dest="store_command", required=True, metavar="COMMAND")
    ls = ssub.add_parser("ls", help="the shared registries a store holds")
    ls.add_argument("url", help="sqlite:///path.db, redis://host:port/db, …")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(func=_cmd_store_ls)
    cp = ssub.add_parser("compact", help="checkpoint a registry and drop the entries it covers")
    cp.add_argument("url", help="the store URL")
    cp.add_argument("name", help="the registry's name")
    cp.add_argument("--tokeniser", default=None, help="tokenizer.json the registry counts with")
    cp.set_defaults(func=_cmd_store_compact)
