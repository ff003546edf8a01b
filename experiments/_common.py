"""What the agent experiments share: model options, the backend they pick, seeds.

The experiments live outside the package (docs/design.md, House rules, "Experiments outside the
package"): run them with ``make agent-demo`` / ``make agent-tools-demo`` or
``python experiments/<name>.py --help``; they may read the checkout (tests/data).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from rampart.errors import InvalidArgumentError, RampartError
from rampart.llm import Backend


def model_args(p: argparse.ArgumentParser) -> None:
    """The model options every agent experiment takes."""
    p.add_argument(
        "--model",
        default="qwen2.5-coder-1.5b",
        help="GGUF alias or path, or a model name with --base-url",
    )
    p.add_argument("--base-url", default=None, help="OpenAI-compatible server instead of llama.cpp")
    p.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default 1)")


def parse_seeds(seeds: str) -> list[int]:
    """``--seeds 0,1,2`` of the agent experiments."""
    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise InvalidArgumentError(f"--seeds must be a comma list of ints, got {seeds!r}") from None
    if not seed_list:
        raise InvalidArgumentError("--seeds names no seed")
    return seed_list


def experiment_backend(
    model: str, base_url: str | None, threads: int | None, n_ctx: int
) -> Backend:
    """The model of a agent experiment: an OpenAI-compatible server, or
    llama.cpp in process."""
    from rampart.llm import LlamaCppBackend, OpenAIBackend

    if base_url:
        return OpenAIBackend(base_url, model, concurrency=1)
    # One thread by default: on a shared or small machine, llama.cpp's worker
    # threads spin-wait at every barrier, and two threads on a contended pair of
    # cores ran ~4x slower than one (docs/agent.md).
    return LlamaCppBackend(model, n_ctx=n_ctx, n_threads=threads or 1)


def run(prog: str, experiment: Callable[[], int]) -> int:
    """Run an experiment's command: a refused argument or a failed model call is
    one line on stderr and exit status 2, as the ``rampart`` command does."""
    try:
        return experiment()
    except RampartError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
