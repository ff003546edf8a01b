"""``rampart tools enrich``: example requests written for every tool by an LLM,
for the relevance gate (the model backend and the tool gate are imported only
when the command runs)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rampart.cli.common import int_in
from rampart.errors import InvalidArgumentError


def _cmd_tools_enrich(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rampart._files import atomic_write
    from rampart.embeddings.cache import ExampleCache
    from rampart.llm import LlamaCppBackend, OpenAIBackend
    from rampart.toolgate import generate_examples
    from rampart.tools import parse_tools

    schemas = [s for path in args.tools for s in parse_tools(path)]
    backend: Any
    if args.base_url:
        if not args.model:
            raise InvalidArgumentError("--base-url needs --model (the server's model name)")
        backend = OpenAIBackend(args.base_url, args.model, native_tools=False)
    else:
        backend = LlamaCppBackend(
            args.model or "smollm2", n_ctx=2048, n_threads=args.threads, native_tools=False
        )
    cache = None if args.no_cache else ExampleCache()
    out: dict[str, list[str]] = {}
    try:
        for schema in schemas:
            out[schema.name] = generate_examples(schema, backend, n=args.n, cache=cache)
            print(f"{schema.name}: {len(out[schema.name])} examples", file=sys.stderr)
    finally:
        backend.close()
    doc = {"generator": backend.describe(), "examples": out}
    text = json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
    if args.out:
        atomic_write(Path(args.out), text.encode("utf-8"))
    else:
        sys.stdout.write(text)
    return 0


def add_parsers(sub: Any) -> None:
    """Add ``tools enrich`` to the ``rampart`` subcommands ``sub``."""
    t = sub.add_parser("tools", help="tool schemas: generate example requests for the gate")
    tsub = t.add_subparsers(dest="tools_command", required=True, metavar="COMMAND")
    e = tsub.add_parser(
        "enrich",
        help="write example requests for every tool with an LLM (cached by schema)",
        description="Ask a model for example requests per tool (rampart.toolgate."
        "generate_examples; cached beside the vector cache, so a rerun asks nothing) and "
        "print them as JSON for rampart.tools.with_examples / load_tools.",
    )
    e.add_argument("tools", nargs="+", help="tools JSON files (OpenAI, Anthropic or MCP shape)")
    e.add_argument("--model", default=None, help="smollm2 (default), a .gguf path or server model")
    e.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint instead")
    e.add_argument("-n", type=int_in(1, 64), default=5, help="examples per tool (default 5)")
    e.add_argument("--out", default=None, help="write the JSON here (default: stdout)")
    e.add_argument(
        "--threads",
        type=int_in(1, 256),
        default=None,
        help="llama.cpp threads (default: all cores; 1 is faster on a busy machine)",
    )
    e.add_argument("--no-cache", action="store_true", help="ask the model even when cached")
    e.set_defaults(func=_cmd_tools_enrich)
