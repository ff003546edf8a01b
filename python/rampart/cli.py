"""The ``rampart`` command line: compile seed files into a prompt, list their blocks,
prepare the embedding model and rerun the paper's probes.

Every error is one line on stderr (``rampart: error: …``) and exit status 2; a
warning is one line starting ``rampart: warning:``. ``RAMPART_DEBUG=1`` shows the
traceback of an unexpected error instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from rampart import __version__
from rampart.block import BlockReport, CompileResult
from rampart.errors import InvalidArgumentError, RampartError
from rampart.registry import DEFAULT_SEPARATOR, BlockRegistry

_DESCRIPTION = """\
rampart: compile an agent's instruction blocks into a prompt (RAMPART).

examples:
  rampart compile seeds/ --max-tokens 2048
  rampart compile seeds/ --task "fix the failing test" --top-k 8 --max-tokens 2048
  rampart compile seeds/ --task "fix the failing test" --top-k 8 --prompt-only
  rampart inspect seeds/ --json
  rampart model prepare && rampart model info
  rampart probe sweep --out results/ && rampart probe report results/

`rampart COMMAND --help` describes each command.
"""


class CliError(Exception):
    """A usage mistake the command line itself detects (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the message and where to find help, no usage
    block (the rule for every CLI error is one line on stderr, exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _int_in(low: int, high: int) -> Any:
    """An argparse type: an integer in low..high (argparse names the flag)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        if value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {value}")
        return value

    return parse


def _finite_float(text: str) -> float:
    """An argparse type: a finite number (NaN would silently gate out everything)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


# Budgets and counts go to the core as 64-bit integers.
_MAX_COUNT = 2**63 - 1


def _check_paths(paths: Sequence[str]) -> None:
    for p in paths:
        if not os.path.lexists(p):
            raise CliError(f"{p}: no such file or directory")
        if not os.path.exists(p):
            raise CliError(f"{p}: broken symbolic link")


def _registry(args: argparse.Namespace, *, embed: bool = False) -> tuple[BlockRegistry, float]:
    """The registry a command reads: seed files (PATHS) or a shared registry
    (--store URL --name NAME), never both."""
    if args.store is None and args.name is None:
        if not args.paths:
            raise CliError("give seed PATHS, or --store URL --name NAME for a shared registry")
        return _load(args.paths, args.tokeniser, embed=embed)
    if args.paths:
        raise CliError("give seed PATHS or --store/--name, not both")
    if args.store is None or args.name is None:
        raise CliError("--store URL and --name NAME go together")
    t0 = time.perf_counter()
    reg = BlockRegistry.open(
        args.store,
        args.name,
        "default" if embed else None,
        tokeniser=args.tokeniser,
        default_max_tokens=None,
        create=False,  # a read command: a misspelt name or file creates nothing
    )
    # The command reads a replica; it counts no accesses into the shared journal.
    reg.close()
    return reg, time.perf_counter() - t0


def _load(
    paths: Sequence[str], tokeniser: str | None, *, embed: bool = False
) -> tuple[BlockRegistry, float]:
    """Cold start; with ``embed`` every block is embedded by the default model
    (ONNX MiniLM, prepared by ``rampart model prepare``) for the relevance gate."""
    _check_paths(paths)
    if tokeniser is not None:
        _check_paths([tokeniser])
    t0 = time.perf_counter()
    reg = BlockRegistry.from_files(
        list(paths),
        "default" if embed else None,
        tokeniser=tokeniser,
        default_max_tokens=None,
    )
    return reg, time.perf_counter() - t0


def _report_rows(result: CompileResult) -> list[dict[str, Any]]:
    return [
        {
            "index": r.index,
            "name": r.name,
            "runtime_id": r.runtime_id,
            "included": r.included,
            "cost": r.cost,
            "reason": r.reason,
            "score": r.score,
            "detail": r.detail,
            "gated": r.gated,
        }
        for r in result.report
    ]


def _gate_ranks(report: Sequence[BlockReport]) -> dict[int, int]:
    """Rank of each scored block as the core's gate sees it: higher score first,
    ties by registry position (rust/src/embeddings.rs, ``admit_scores``)."""
    scored = sorted(
        (r for r in report if r.score is not None), key=lambda r: (-(r.score or 0.0), r.index)
    )
    return {r.index: rank for rank, r in enumerate(scored, start=1)}


def _gate_rule(r: BlockReport, rank: int | None, top_k: int | None, threshold: float | None) -> str:
    """Why the gate let a block in or kept it out, as the rule that decided it
    ("rank 13 > top-k 12", "score 0.2785 < threshold 0.3"); the core's own detail
    when the rule computed here does not account for the decision."""
    if r.score is None or rank is None:
        return r.detail
    below = threshold is not None and r.score < threshold
    outranked = top_k is not None and rank > top_k
    if r.reason == "gate":
        if below:
            return f"score {r.score:.4f} < threshold {threshold:g}"
        if outranked:
            return f"rank {rank} > top-k {top_k}"
        return r.detail
    if not r.included:
        return r.detail
    rules = []
    if top_k is not None:
        rules.append(f"rank {rank} <= top-k {top_k}")
    if threshold is not None:
        rules.append(f"score >= {threshold:g}")
    return ", ".join(rules)


def _boundary_marks() -> tuple[str, str]:
    # Box-drawing characters never occur in Markdown syntax, so a block boundary
    # cannot be mistaken for a `---` rule inside a skill body; plain ASCII where
    # the terminal cannot show them.
    enc = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    return ("━━━━┫", "┣━━━━") if enc.startswith("utf") else ("#### <<", ">> ####")


def _separator_words(separator: str, tokens: int) -> str:
    """How the report names the separator: its text (escaped) and token count."""
    what = ": a '---' line between blank lines" if separator == DEFAULT_SEPARATOR else ""
    # repr() escapes line ends and tabs; the quotes show where the text starts and ends.
    return f"{separator!r} ({tokens} token{'' if tokens == 1 else 's'}{what})"


def _print_blocks(result: CompileResult, separator: str, sep_tokens: int) -> None:
    """The prompt block by block, each under an unmistakable header line; the
    exact prompt text is what ``--prompt-only`` / ``--json`` print. A block's
    header gives its own tokens and, after the first, the separator's."""
    blocks = result.included_blocks
    if not blocks:
        sys.stdout.write("(the prompt is empty: no block was included)\n\n")
        return
    pieces = [b.wrap_prefix + b.content + b.wrap_suffix for b in blocks]
    left, right = _boundary_marks()
    if separator.join(pieces) != result.prompt:
        # Not expected; never show a block view that is not the real prompt.
        sys.stdout.write(f"{left} prompt ({result.total_tokens} tokens) {right}\n")
        sys.stdout.write(result.prompt + "\n")
    else:
        # Where the part no task changes ends (SPEC §8): shown when a gate ran and
        # something task-dependent follows it.
        stable = result.stable_prefix_blocks if result.stable_prefix_blocks < len(blocks) else -1
        for k, (b, piece, cost) in enumerate(zip(blocks, pieces, result.costs), start=1):
            if k - 1 == stable:
                sys.stdout.write(
                    f"{left} stable prefix ends here: the {result.stable_prefix_tokens} tokens "
                    f"above are the same for every task (a provider can cache them); what "
                    f"follows depends on the task {right}\n"
                )
            own = cost - sep_tokens if k > 1 else cost
            tokens = f"{own} + {sep_tokens} separator tokens" if k > 1 else f"{cost} tokens"
            sys.stdout.write(
                f"{left} block {k}/{len(blocks)}: {b.semantic_name} ({tokens}) {right}\n"
            )
            sys.stdout.write(piece + "\n")
        sys.stdout.write(
            f"{left} end of prompt: blocks joined by {_separator_words(separator, sep_tokens)}; "
            f"exact text: --prompt-only {right}\n\n"
        )


def _cmd_compile(args: argparse.Namespace) -> int:
    cut = args.top_k is not None or args.threshold is not None
    if cut and args.task is None:
        flag = "--top-k" if args.top_k is not None else "--threshold"
        raise CliError(f"{flag} needs --task TEXT: the gate ranks blocks against a task")
    if args.task is not None and not cut:
        print(
            "rampart: warning: --task is ignored without --top-k or --threshold (nothing is gated)",
            file=sys.stderr,
        )
    if args.json and args.prompt_only:
        raise CliError("--json and --prompt-only are alternatives: pass one")
    gated = args.task is not None and cut
    reg, load_s = _registry(args, embed=gated)
    separator = DEFAULT_SEPARATOR if args.separator is None else args.separator
    t0 = time.perf_counter()
    result = reg.compile(
        max_tokens=args.max_tokens,
        task_text=args.task if gated else None,
        relevance_threshold=args.threshold,
        top_k=args.top_k,
        separator=separator,
    )
    compile_s = time.perf_counter() - t0
    sep_tokens = reg.count_tokens(separator)
    if args.prompt_only:
        sys.stdout.write(result.prompt)
        if result.prompt and not result.prompt.endswith("\n"):
            sys.stdout.write("\n")
        return 0
    rows = _report_rows(result)
    if args.json:
        out = {
            "prompt": result.prompt,
            "total_tokens": result.total_tokens,
            "max_tokens": result.max_tokens,
            # Each cost after the first block's includes this (the separator before it).
            "separator_tokens": sep_tokens,
            "task": args.task,
            "top_k": args.top_k,
            "threshold": args.threshold,
            "included": [r for r in rows if r["included"]],
            "excluded": [r for r in rows if not r["included"]],
            # SPEC §8: the front no task changes, and where it is interrupted.
            "stable_prefix_tokens": result.stable_prefix_tokens,
            "stable_prefix_blocks": result.stable_prefix_blocks,
            "cache_notes": result.cache_notes,
            "timing_s": {"load": load_s, "compile": compile_s},
        }
        json.dump(out, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    if not args.no_prompt:
        _print_blocks(result, separator, sep_tokens)
    budget = "unlimited" if result.max_tokens is None else f"{result.max_tokens} tokens"
    print(
        f"included {len(result)} of {len(reg)} blocks, {result.total_tokens} tokens "
        f"(budget {budget})"
    )
    if gated:
        rule = " and ".join(
            part
            for part in (
                f"the top {args.top_k}" if args.top_k is not None else "",
                f"score >= {args.threshold:g}" if args.threshold is not None else "",
            )
            if part
        )
        print(f"task: {args.task}\ngate: {rule} by cosine similarity to the task")
        print(
            f"stable prefix: {result.stable_prefix_tokens} of {result.total_tokens} tokens, "
            f"{result.stable_prefix_blocks} blocks (the same for every task: cacheable)"
        )
        for note in result.cache_notes:
            print(f"note: {note}")
    report = result.report
    ranks = _gate_ranks(report)
    width = max((len(r.name) for r in report), default=4)
    for r in report:
        mark = "+" if r.included else "-"
        score = "" if r.score is None else f"  score {r.score:.3f}"
        rule = _gate_rule(r, ranks.get(r.index), args.top_k, args.threshold)
        why = f"  {rule}" if r.included else f"  [{r.reason}] {rule}"
        if not r.gated:
            why += "  (ungated)"
        print(f" {mark} {r.index:>4}  {r.name:<{width}}  {r.cost:>6} tok{score}{why}".rstrip())
    if sep_tokens and len(report) > 1:
        # inspect lists blocks alone; here a block's cost is what it adds to the prompt.
        print(
            "tok: the block's own tokens plus, for every block after the first, the "
            f"separator before it, {_separator_words(separator, sep_tokens)}; "
            "`rampart inspect` counts blocks alone"
        )
    model = reg.embedding_model
    embedded = f", embedded by {getattr(model, 'model_id', model)}" if model else ""
    query = " (incl. embedding the task)" if gated else ""
    print(
        f"loaded {len(reg)} blocks in {load_s * 1e3:.2f} ms{embedded}; "
        f"compiled in {compile_s * 1e3:.3f} ms{query}"
    )
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    reg, load_s = _registry(args)
    blocks = reg.list_blocks()
    if args.json:
        json.dump(
            [
                {
                    "index": i,
                    "name": b.semantic_name,
                    "runtime_id": b.runtime_id,
                    "priority": b.priority,
                    "tokens": b.token_count,
                    "cost": b.cost,
                    "tags": list(b.tags),
                    "source": b.source,
                    "metadata": b.metadata,
                }
                for i, b in enumerate(blocks)
            ],
            sys.stdout,
            indent=2,
            ensure_ascii=False,
        )
        sys.stdout.write("\n")
        return 0
    width = max((len(b.semantic_name) for b in blocks), default=4)
    print(f"{'#':>4}  {'name':<{width}}  prio  tokens  tags")
    for i, b in enumerate(blocks):
        # cost: content plus wrap text, what the block costs in a prompt (no separator).
        print(
            f"{i:>4}  {b.semantic_name:<{width}}  {b.priority:4.2f}  {b.cost:>6}  "
            f"{', '.join(b.tags)}"
        )
    total = sum(b.cost for b in blocks)
    sep = reg.count_tokens(DEFAULT_SEPARATOR)
    together = ""
    if len(blocks) > 1:
        # What `rampart compile` reports for all of them: one separator between blocks.
        together = (
            f" ({total + sep * (len(blocks) - 1)} compiled together: `rampart compile` adds "
            f"the separator, {sep} tokens, before every block after the first)"
        )
    print(f"{len(blocks)} blocks, {total} tokens{together}, loaded in {load_s * 1e3:.2f} ms")
    return 0


def _cmd_model_prepare(args: argparse.Namespace) -> int:
    from rampart.embeddings import prepare_model  # numpy/onnx only for this command

    p = prepare_model(args.model_dir, force=args.force)
    if args.json:
        out = {
            "model_dir": str(p.model_dir),
            "onnx_path": str(p.onnx_path),
            "weights_sha256": p.weights_sha256,
            "built": p.built,
            "seconds": p.seconds,
        }
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(f"{'built' if p.built else 'cached'}: {p.onnx_path}")
    print(f"weights sha256: {p.weights_sha256}")
    print(f"{'built' if p.built else 'checked'} in {p.seconds:.2f} s")
    return 0


def _cmd_model_info(args: argparse.Namespace) -> int:
    from rampart.embeddings import model_info

    info = model_info(args.model_dir, providers=args.providers)
    if args.json:
        json.dump(info, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        width = max(len(k) for k in info)
        for key, value in info.items():
            shown = ", ".join(value) if isinstance(value, list) else value
            print(f"{key:<{width}}  {shown}")
    if not info.get("installed"):
        raise CliError(f"the embedding model is not installed: {info.get('install', '')}".strip())
    return 0


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


def _add_probe_parser(sub: Any) -> None:
    pr = sub.add_parser("probe", help="rerun the paper's experiments against a real LLM")
    psub = pr.add_subparsers(dest="probe_command", required=True)
    common = _Parser(add_help=False)
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


def _cmd_mcp(args: argparse.Namespace) -> int:
    from rampart.mcp_server import serve

    _check_paths(args.paths)
    serve(
        args.paths,
        store=args.store,
        name=args.name,
        tokeniser=args.tokeniser,
        gate=not args.no_gate,
    )
    return 0


def _add_mcp_parser(sub: Any) -> None:
    mc = sub.add_parser(
        "mcp",
        help="serve a registry to MCP clients over stdio",
        description="Serve a registry over stdio with the MCP SDK (pip install "
        '"rampart-registry[mcp]"): tools compile_context, find_blocks, list_blocks, '
        "write_block, evict_block.",
    )
    mc.add_argument("paths", nargs="*", help="seed files or directories of them")
    mc.add_argument("--store", default=None, help="shared registry store URL (with --name)")
    mc.add_argument("--name", default=None, help="registry name inside --store")
    mc.add_argument("--tokeniser", default=None, help="tokenizer.json path (default: cl100k_base)")
    mc.add_argument("--no-gate", action="store_true", help="no embedding model (no top_k)")
    mc.set_defaults(func=_cmd_mcp)


def build_parser() -> argparse.ArgumentParser:
    """The ``rampart`` argument parser (every subcommand; errors are one line)."""
    p = _Parser(
        prog="rampart",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"rampart {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    common = _Parser(add_help=False)
    common.add_argument("paths", nargs="*", help="seed files or directories of them")
    common.add_argument(
        "--store", default=None, help="a shared registry's store URL (with --name, no PATHS)"
    )
    common.add_argument("--name", default=None, help="the shared registry's name in --store")
    common.add_argument(
        "--tokeniser", default=None, help="tokenizer.json path (default: cl100k_base)"
    )
    common.add_argument("--json", action="store_true", help="machine-readable output")

    c = sub.add_parser(
        "compile",
        parents=[common],
        help="compile seed files into a prompt, with a report per block",
        description="Compile seed files into a prompt. The human view shows each block "
        "under a header line and a report row per block (+ included, - left out, with "
        "the rule that decided); --prompt-only prints the exact prompt text.",
    )
    c.add_argument("--task", default=None, help="task text for the relevance gate")
    c.add_argument(
        "--max-tokens",
        type=_int_in(0, _MAX_COUNT),
        default=None,
        help="token budget (default: none)",
    )
    c.add_argument(
        "--top-k",
        type=_int_in(1, _MAX_COUNT),
        default=None,
        help="gate: keep the k blocks most relevant to --task",
    )
    c.add_argument(
        "--threshold",
        type=_finite_float,
        default=None,
        help="gate: keep blocks whose cosine score with --task is at least this",
    )
    c.add_argument(
        "--separator",
        default=None,
        help="text between blocks (default: '\\n\\n---\\n\\n', a '---' line between blank lines)",
    )
    out = c.add_mutually_exclusive_group()
    out.add_argument("--no-prompt", action="store_true", help="print only the report")
    out.add_argument("--prompt-only", action="store_true", help="print only the exact prompt text")
    c.set_defaults(func=_cmd_compile)

    i = sub.add_parser("inspect", parents=[common], help="list the blocks of seed files")
    i.set_defaults(func=_cmd_inspect)

    m = sub.add_parser("model", help="the embedding model: prepare its ONNX graph, show info")
    msub = m.add_subparsers(dest="model_command", required=True, metavar="COMMAND")
    model_common = _Parser(add_help=False)
    model_common.add_argument(
        "--model-dir",
        default=None,
        help="model directory or packaged name, NAME:int8 for its int8 graph "
        "(default: packaged all-MiniLM-L6-v2)",
    )
    model_common.add_argument("--json", action="store_true", help="machine-readable output")
    mp = msub.add_parser(
        "prepare", parents=[model_common], help="build the ONNX graph into the cache (once)"
    )
    mp.add_argument("--force", action="store_true", help="rebuild even if cached")
    mp.set_defaults(func=_cmd_model_prepare)
    mi = msub.add_parser("info", parents=[model_common], help="model, cache and provider report")
    mi.add_argument("--providers", default=None, help="comma list to check, e.g. cuda,cpu")
    mi.set_defaults(func=_cmd_model_info)
    _add_probe_parser(sub)
    _add_mcp_parser(sub)
    _add_store_parser(sub)
    _add_tools_parser(sub)
    return p


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


def _add_tools_parser(sub: Any) -> None:
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
    e.add_argument("-n", type=_int_in(1, 64), default=5, help="examples per tool (default 5)")
    e.add_argument("--out", default=None, help="write the JSON here (default: stdout)")
    e.add_argument(
        "--threads",
        type=_int_in(1, 256),
        default=None,
        help="llama.cpp threads (default: all cores; 1 is faster on a busy machine)",
    )
    e.add_argument("--no-cache", action="store_true", help="ask the model even when cached")
    e.set_defaults(func=_cmd_tools_enrich)


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
    """``"conversation"`` for a conversation's journal (SPEC §9), else ``"registry"``."""
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


def _add_store_parser(sub: Any) -> None:
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
