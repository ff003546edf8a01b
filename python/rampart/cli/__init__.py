"""The ``rampart`` command line: compile seed files into a prompt, list their blocks,
prepare the embedding model and rerun the paper's probes.

Every error is one line on stderr (``rampart: error: …``) and exit status 2; a
warning is one line starting ``rampart: warning:``. ``RAMPART_DEBUG=1`` shows the
traceback of an unexpected error instead.

One module per command group, each adding its parsers here:
:mod:`~rampart.cli.compile` (``compile``, ``inspect``), :mod:`~rampart.cli.model`,
:mod:`~rampart.cli.probe`, :mod:`~rampart.cli.mcp`, :mod:`~rampart.cli.store` and
:mod:`~rampart.cli.tools`. What a group needs beyond the registry (the probes,
numpy, the MCP SDK, a model backend) is imported only when its command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence

from rampart import __version__
from rampart.cli import compile, mcp, model, probe, store, tools
from rampart.cli.common import CliError, Parser
from rampart.errors import RampartError

__all__ = ["CliError", "build_parser", "main"]

_DESCRIPTION = """\
rampart: compile an agent's instruction blocks into a prompt (RAMPART).

examples:
  rampart compile seeds/ --max-tokens 2048
  rampart compile seeds/ --task "fix the failing test" --top-k 8 --max-tokens 2048
  rampart compile seeds/ --task "fix the failing test" --top-k 8 --prompt-only
  rampart compile seeds/ --conversation chat.json --window 32000 [--map | --format openai]
  rampart compile seeds/ --conversation chat.json --window 32000 --html map.html
  rampart inspect seeds/ --json
  rampart model prepare && rampart model info
  rampart probe sweep --out results/ && rampart probe report results/

`rampart COMMAND --help` describes each command.
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``rampart`` argument parser (every subcommand; errors are one line)."""
    p = Parser(
        prog="rampart",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"rampart {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # The order of `rampart --help`'s command list.
    for group in (compile, model, probe, mcp, store, tools):
        group.add_parsers(sub)
    return p


def _one_line(exc: BaseException) -> str:
    """An exception's message on one line (YAML and JSON errors span several)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return "; ".join(lines) or type(exc).__name__


def _fail(message: str) -> int:
    from rampart.stores.redact import redacted  # every error line: a store URL's secrets masked

    print(f"rampart: error: {redacted(message)}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 error, 130 interrupted)."""
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except (RampartError, CliError, OSError, ValueError, ImportError) as exc:
        # Expected failures: bad input files, a missing model, unreadable paths.
        # (InvalidArgumentError and ParseError are ValueErrors.)
        if isinstance(exc, BrokenPipeError):  # `rampart inspect … | head`
            # Point stdout at /dev/null so the interpreter's final flush is quiet.
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        return _fail(_one_line(exc))
    except KeyboardInterrupt:  # a probe run has already said how to resume
        print("rampart: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if os.environ.get("RAMPART_DEBUG"):
            raise
        return _fail(
            f"unexpected {type(exc).__name__}: {_one_line(exc)} "
            "(a bug: please report it; RAMPART_DEBUG=1 shows the traceback)"
        )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
