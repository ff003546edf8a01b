"""``rampart mcp``: a registry served to MCP clients over stdio (the MCP SDK is
imported only when the command runs)."""

from __future__ import annotations

import argparse
from typing import Any

from rampart.cli.common import check_paths


def _cmd_mcp(args: argparse.Namespace) -> int:
    from rampart.mcp_server import serve

    check_paths(args.paths)
    serve(
        args.paths,
        store=args.store,
        name=args.name,
        tokeniser=args.tokeniser,
        gate=not args.no_gate,
        conversations=args.conversations,
    )
    return 0


def add_parsers(sub: Any) -> None:
    """Add ``mcp`` to the ``rampart`` subcommands ``sub``."""
    mc = sub.add_parser(
        "mcp",
        help="serve a registry to MCP clients over stdio",
        description="Serve a registry over stdio with the MCP SDK (pip install "
        '"rampart-registry[mcp]"): tools compile_context, find_blocks, list_blocks, '
        "write_block, evict_block, find_tools; recall with --conversations or --store.",
    )
    mc.add_argument("paths", nargs="*", help="seed files or directories of them")
    mc.add_argument("--store", default=None, help="shared registry store URL (with --name)")
    mc.add_argument("--name", default=None, help="registry name inside --store")
    mc.add_argument("--tokeniser", default=None, help="tokenizer.json path (default: cl100k_base)")
    mc.add_argument("--no-gate", action="store_true", help="no embedding model (no top_k)")
    mc.add_argument(
        "--conversations",
        default=None,
        metavar="DIR",
        help="serve recall over the conversations saved in DIR (<name>.json files)",
    )
    mc.set_defaults(func=_cmd_mcp)
