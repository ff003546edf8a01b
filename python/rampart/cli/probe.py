"""``rampart probe``: the paper's experiments rerun against a real LLM (sweep,
gating, schema) and their report. :mod:`rampart.probe` is imported only when a
probe command runs, so every other command starts without it."""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from typing import Any

from rampart.cli.common import Parser
from rampart.errors import InvalidArgumentError


def _probe_backend(args: argparse.Namespace) -> Any:
    from rampart.probe import LlamaCppBackend, OpenAIBackend

    if args.base_url:
        if not args.model:
            raise InvalidArgumentError("--base-url needs --model (the server's model name)")
        return OpenAIBackend(
            args.base_url,
            args.model,
            api_key=args.api_key,
            timeout=args.timeout,
            concurrency=args.concurrency or 4,
            native_tools=args.native_tools,
        )
    backend = LlamaCppBackend(args.model or "smollm2", n_ctx=args.n_ctx, n_threads=args.threads)
    if not args.quiet:
        print(
            f"loaded {backend.describe()['model_file']} in {backend.load_s:.2f} s", file=sys.stderr
        )
    return backend


def _probe_common(args: argparse.Namespace) -> dict[str, Any]:
    # Defaults differ per experiment, so unset options are left to the API's own.
    given = {
        "trials": args.trials,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
    }
    return {
        **{k: v for k, v in given.items() if v is not None},
        "n_blocks": args.n_blocks,
        "seed": args.seed,
        "seeds": args.seeds,
        "concurrency": args.concurrency,
        "retries": args.retries,
        "progress": None if args.quiet else sys.stderr,
    }


def _print_report(rows: list[dict[str, Any]], files: list[Any]) -> None:
    from rampart.probe import format_table

    print(format_table(rows))
    for f in files:
        print(f"wrote {f}")


def _print_probe(result: Any) -> int:
    st = result.stats
    if st.harness_ms:
        med = statistics.median(st.harness_ms)
        model = statistics.median(st.model_s) if st.model_s else float("nan")
        print(
            f"ran {st.ran} trials ({st.skipped} already done, {st.failed} failed) in "
            f"{st.wall_s:.1f} s; median model call {model:.3f} s, harness {med:.3f} ms/trial"
        )
    else:
        print(f"nothing to run: all {st.planned} trials are already in {result.out}")
    _print_report(result.rows, result.files)
    return 0


def _cmd_probe_sweep(args: argparse.Namespace) -> int:
    from rampart.probe import sweep

    groups = [int(g) for g in str(args.group).split(",")]
    placements = [p.strip() for p in args.placement.split(",")]
    with contextlib.closing(_probe_backend(args)) as backend:
        result = sweep(
            backend,
            args.out,
            positions=args.positions,
            placements=placements,
            groups=groups,
            **({"task": args.task} if args.task else {}),
            **_probe_common(args),
        )
    return _print_probe(result)


def _cmd_probe_gating(args: argparse.Namespace) -> int:
    from rampart.probe import gating

    with contextlib.closing(_probe_backend(args)) as backend:
        result = gating(
            backend,
            args.out,
            positions=args.positions,
            placement=args.placement,
            # --threshold alone gates by score only; otherwise top 8 unless --top-k says
            top_k=args.top_k if args.top_k is not None or args.threshold is not None else 8,
            threshold=args.threshold,
            layout=args.layout,
            **({"task": args.task} if args.task else {}),
            **_probe_common(args),
        )
    return _print_probe(result)


def _cmd_probe_schema(args: argparse.Namespace) -> int:
    from rampart.probe import schema

    with contextlib.closing(_probe_backend(args)) as backend:
        result = schema(
            backend,
            args.out,
            placement=args.placement,
            **({"task": args.task} if args.task else {}),
            **_probe_common(args),
        )
    return _print_probe(result)


def _cmd_probe_report(args: argparse.Namespace) -> int:
    from rampart.probe import report

    _print_report(*report(args.out))
    return 0


def add_parsers(sub: Any) -> None:
    """Add ``probe sweep|gating|schema|report`` to the ``rampart`` subcommands ``sub``."""
    pr = sub.add_parser("probe", help="rerun the paper's experiments against a real LLM")
    psub = pr.add_subparsers(dest="probe_command", required=True)
    common = Parser(add_help=False)
    common.add_argument(
        "--base-url",
        default=None,
        help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1 "
        "(default: llama-cpp-python in process)",
    )
    common.add_argument(
        "--model",
        default=None,
        help="server model name; in process: smollm2 (default), qwen2.5-coder-1.5b or a .gguf path",
    )
    common.add_argument(
        "--seeds", nargs="+", default=None, help="filler seed files (default: built-in)"
    )
    common.add_argument("--n-blocks", type=int, default=31, help="registry size N (default 31)")
    common.add_argument(
        "--trials", type=int, default=None, help="trials per condition and position (3; schema 10)"
    )
    common.add_argument(
        "--temperature",
        type=float,
        default=None,
        # rampart.probe.experiments.DEFAULT_TEMPERATURE; not imported here, so that
        # every other command starts without loading the probes
        help="sampling (default 0.3)",
    )
    common.add_argument(
        "--seed", type=int, default=0, help="sampling seed of trial 0 (+1 per trial)"
    )
    common.add_argument("--out", default="probe-results", help="results folder (resumable)")
    common.add_argument("--task", default=None, help="replace the built-in task text")
    common.add_argument(
        "--max-tokens", type=int, default=None, help="answer length cap (48; schema 64)"
    )
    common.add_argument("--concurrency", type=int, default=None, help="calls in flight (HTTP: 4)")
    common.add_argument("--retries", type=int, default=3, help="retries of a failed call")
    common.add_argument("--timeout", type=float, default=120.0, help="seconds per HTTP call")
    common.add_argument("--api-key", default=None, help="default: $OPENAI_API_KEY")
    common.add_argument(
        "--native-tools", action="store_true", help="also send tool schemas in the request"
    )
    common.add_argument("--n-ctx", type=int, default=4096, help="in-process context size")
    common.add_argument("--threads", type=int, default=None, help="in-process CPU threads")
    common.add_argument("--quiet", action="store_true", help="no progress bar")

    s = psub.add_parser("sweep", parents=[common], help="critical block at every position")
    s.add_argument("--positions", default=None, help="e.g. 0-6,15,30 (default: all)")
    s.add_argument(
        "--placement", default="after,before", help="task after, before or both (comma list)"
    )
    s.add_argument("--group", default="0", help="promote with K neighbours; comma list, e.g. 0,3")
    s.set_defaults(func=_cmd_probe_sweep)

    g = psub.add_parser("gating", parents=[common], help="gated vs full vs promoted registry")
    g.add_argument("--positions", default=None, help="e.g. 0,10,20,30 (default: all)")
    g.add_argument("--placement", default="after")
    g.add_argument("--top-k", type=int, default=None, help="gate: keep the k most relevant (8)")
    g.add_argument("--threshold", type=float, default=None, help="gate: minimum cosine score")
    g.add_argument(
        "--layout",
        choices=["today", "cache-aware"],
        default="today",
        help="today: full / gated / promoted; cache-aware: the house rules as an ungated "
        "head, interleaved vs in front of the gated blocks (docs/probes.md)",
    )
    g.set_defaults(func=_cmd_probe_gating)

    c = psub.add_parser("schema", parents=[common], help="tool schema present vs evicted")
    c.add_argument("--placement", default="after")
    c.set_defaults(func=_cmd_probe_schema)

    r = psub.add_parser("report", help="summary.csv and plots from a results folder")
    r.add_argument("out", help="results folder")
    r.set_defaults(func=_cmd_probe_report)
