"""``rampart`` command line: compile seed files into a prompt, or list their blocks.

rampart compile seeds/ --max-tokens 2048
rampart compile seeds/ --task "fix the failing test" --top-k 8 --json
rampart inspect seeds/
rampart model prepare          # build and cache the embedding model's ONNX graph
rampart model info --json
rampart probe sweep --out results/            # SmolLM2 in process (llama-cpp-python)
rampart probe sweep --base-url http://127.0.0.1:8080/v1 --model qwen --out results/
rampart probe report results/
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from rampart import __version__
from rampart.block import CompileResult
from rampart.errors import InvalidArgumentError, RampartError
from rampart.probe.experiments import DEFAULT_TEMPERATURE
from rampart.registry import DEFAULT_SEPARATOR, BlockRegistry


def _load(
    paths: Sequence[str], tokeniser: str | None, *, embed: bool = False
) -> tuple[BlockRegistry, float]:
    """Cold start; with ``embed`` every block is embedded by the default model
    (ONNX MiniLM, prepared by ``rampart model prepare``) for the relevance gate."""
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
        }
        for r in result.report
    ]


def _cmd_compile(args: argparse.Namespace) -> int:
    gated = args.task is not None and (args.top_k is not None or args.threshold is not None)
    reg, load_s = _load(args.paths, args.tokeniser, embed=gated)
    separator = DEFAULT_SEPARATOR if args.separator is None else args.separator
    t0 = time.perf_counter()
    result = reg.compile(
        max_tokens=args.max_tokens,
        task_text=args.task,
        relevance_threshold=args.threshold,
        top_k=args.top_k,
        separator=separator,
    )
    compile_s = time.perf_counter() - t0
    rows = _report_rows(result)
    if args.json:
        out = {
            "prompt": result.prompt,
            "total_tokens": result.total_tokens,
            "max_tokens": result.max_tokens,
            "task": args.task,
            "included": [r for r in rows if r["included"]],
            "excluded": [r for r in rows if not r["included"]],
            "timing_s": {"load": load_s, "compile": compile_s},
        }
        json.dump(out, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    if not args.no_prompt:
        sys.stdout.write(result.prompt + "\n")
        sys.stdout.write("\n" + "=" * 72 + "\n")
    budget = "unlimited" if result.max_tokens is None else str(result.max_tokens)
    print(
        f"included {len(result)} of {len(reg)} blocks, {result.total_tokens} tokens "
        f"(budget {budget})"
    )
    if args.task:
        print(f"task: {args.task}")
    width = max((len(r["name"]) for r in rows), default=4)
    for r in rows:
        mark = "+" if r["included"] else "-"
        score = "" if r["score"] is None else f" score={r['score']:.3f}"
        why = "" if r["included"] else f"  [{r['reason']}] {r['detail']}"
        print(f" {mark} {r['index']:>4}  {r['name']:<{width}}  {r['cost']:>6} tok{score}{why}")
    model = reg.embedding_model
    embedded = f", embedded by {getattr(model, 'model_id', model)}" if model else ""
    query = " (incl. embedding the task)" if gated else ""
    print(
        f"loaded {len(reg)} blocks in {load_s * 1e3:.2f} ms{embedded}; "
        f"compiled in {compile_s * 1e3:.3f} ms{query}"
    )
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    reg, load_s = _load(args.paths, args.tokeniser)
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
        print(
            f"{i:>4}  {b.semantic_name:<{width}}  {b.priority:4.2f}  {b.token_count:>6}  "
            f"{', '.join(b.tags)}"
        )
    total = sum(b.token_count for b in blocks)
    print(f"{len(blocks)} blocks, {total} tokens, loaded in {load_s * 1e3:.2f} ms")
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
    return 0 if info.get("installed") else 1


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
    given = {"trials": args.trials, "max_tokens": args.max_tokens}
    return {
        **{k: v for k, v in given.items() if v is not None},
        "n_blocks": args.n_blocks,
        "temperature": args.temperature,
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
    common = argparse.ArgumentParser(add_help=False)
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
        default=DEFAULT_TEMPERATURE,
        help=f"sampling (default {DEFAULT_TEMPERATURE})",
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
    g.set_defaults(func=_cmd_probe_gating)

    c = psub.add_parser("schema", parents=[common], help="tool schema present vs evicted")
    c.add_argument("--placement", default="after")
    c.set_defaults(func=_cmd_probe_schema)

    r = psub.add_parser("report", help="summary.csv and plots from a results folder")
    r.add_argument("out", help="results folder")
    r.set_defaults(func=_cmd_probe_report)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rampart", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--version", action="version", version=f"rampart {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("paths", nargs="+", help="seed files or directories of them")
    common.add_argument(
        "--tokeniser", default=None, help="tokenizer.json path (default: cl100k_base)"
    )
    common.add_argument("--json", action="store_true", help="machine-readable output")

    c = sub.add_parser("compile", parents=[common], help="compile seed files into a prompt")
    c.add_argument("--task", default=None, help="task text for the relevance gate")
    c.add_argument("--max-tokens", type=int, default=None, help="token budget (default: none)")
    c.add_argument("--top-k", type=int, default=None, help="gate: keep the k most relevant")
    c.add_argument("--threshold", type=float, default=None, help="gate: minimum cosine score")
    c.add_argument("--separator", default=None, help="text between blocks")
    c.add_argument("--no-prompt", action="store_true", help="print only the report")
    c.set_defaults(func=_cmd_compile)

    i = sub.add_parser("inspect", parents=[common], help="list the blocks of seed files")
    i.set_defaults(func=_cmd_inspect)

    m = sub.add_parser("model", help="the embedding model: prepare its ONNX graph, show info")
    msub = m.add_subparsers(dest="model_command", required=True)
    model_common = argparse.ArgumentParser(add_help=False)
    model_common.add_argument(
        "--model-dir", default=None, help="model directory (default: packaged all-MiniLM-L6-v2)"
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
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (RampartError, FileNotFoundError, ImportError) as exc:
        print(f"rampart: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a probe run has already said how to resume
        print("rampart: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `rampart inspect … | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
