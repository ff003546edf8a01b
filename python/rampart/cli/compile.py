"""``rampart compile`` and ``rampart inspect``: a registry from seed files or a
shared store, compiled with a report per block, or listed."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from rampart.block import BlockReport, CompileResult
from rampart.cli.common import (
    MAX_COUNT,
    CliError,
    Parser,
    check_paths,
    finite_float,
    int_in,
    progress,
)
from rampart.registry import DEFAULT_SEPARATOR, BlockRegistry

# --format NAME -> how the body is built (rampart.adapters, loaded when asked for).
FORMATS = ("openai", "anthropic", "responses", "gemini")
PROVIDERS = ("openai", "anthropic", "gemini", "local")
# The reply's reserve when --window is given without --reply-tokens (the docs' examples).
DEFAULT_REPLY_TOKENS = 4096


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
    with progress(
        f"opening {args.name} in the store" + (" and embedding its blocks" if embed else "")
    ):
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
    check_paths(paths)
    if tokeniser is not None:
        check_paths([tokeniser])
    t0 = time.perf_counter()
    # The first run loads the ONNX model and embeds every block (seconds on a small
    # machine; later runs find the vectors in the on-disk cache).
    what = "loading the seed files" + (
        " and embedding their blocks with the default model" if embed else ""
    )
    with progress(what):
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
    # Ungated blocks take no top-k place (docs/specification.md §8): ranked apart from the gated
    # ones.
    scored = sorted(
        (r for r in report if r.score is not None and r.gated),
        key=lambda r: (-(r.score or 0.0), r.index),
    )
    return {r.index: rank for rank, r in enumerate(scored, start=1)}


def _gate_rule(r: BlockReport, rank: int | None, top_k: int | None, threshold: float | None) -> str:
    """Why the gate let a block in or kept it out, as the rule that decided it
    ("rank 13 > top-k 12", "score 0.2785 < threshold 0.3"); the core's own detail
    when the rule computed here does not account for the decision."""
    if r.score is None or rank is None or not r.gated:
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
        # Where the part no task changes ends (docs/specification.md §8): shown when a gate ran and
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


def _latest_user_text(conv: Any) -> str | None:
    for it in reversed(conv.items):
        if it.role == "user" and it.kind == "text" and it.content.strip():
            return str(it.content)
    return None


def _check_compile_args(args: argparse.Namespace) -> None:
    """Usage mistakes, before anything is read."""
    if args.conversation is None:
        for flag, given in (
            ("--window", args.window is not None),
            ("--reply-tokens", args.reply_tokens is not None),
            ("--provider", args.provider is not None),
            ("--dry-run", args.dry_run),
        ):
            if given:
                raise CliError(
                    f"{flag} needs --conversation FILE: it sets how the messages are fitted"
                )
    views = [
        flag
        for flag, on in (
            ("--json", args.json),
            ("--prompt-only", args.prompt_only),
            ("--no-prompt", args.no_prompt),
            ("--map", args.map),
            ("--format", args.format is not None),
        )
        if on
    ]
    if len(views) > 1:
        raise CliError(f"{' and '.join(views)} are alternatives: pass one")
    if args.format == "gemini" and not args.model:
        raise CliError("--format gemini needs --model NAME (a Gemini body names its model)")
    if args.model and args.format is None:
        raise CliError("--model goes with --format (it names the model in the body)")


def _cmd_compile(args: argparse.Namespace) -> int:
    _check_compile_args(args)
    conv = None
    if args.conversation is not None:
        from rampart.cli.conversation import load_conversation

        # Read first: a bad file is one line before any model is loaded.
        conv = load_conversation(args.conversation)
        args.loaded = (len(conv), sum(1 for t in conv.transformations if t.active))
    cut = args.top_k is not None or args.threshold is not None
    task = args.task
    if cut and task is None and conv is not None:
        # The step's own question: the gate keeps the blocks relevant to it.
        task = _latest_user_text(conv)
    if cut and task is None:
        flag = "--top-k" if args.top_k is not None else "--threshold"
        raise CliError(f"{flag} needs --task TEXT: the gate ranks blocks against a task")
    if args.task is not None and not cut:
        print(
            "rampart: warning: --task is ignored without --top-k or --threshold (nothing is gated)",
            file=sys.stderr,
        )
    gated = task is not None and cut
    reg, load_s = _registry(args, embed=gated)
    tools = 0
    for path in args.tools or ():
        check_paths([path])
        try:
            # Ungated: the same tools array for every task, so the provider's cache
            # of it survives (docs/caching.md); sent beside the prompt, not in it.
            tools += len(reg.load_tools(path, gated=False))
        except (ValueError, OSError) as exc:
            raise CliError(f"{path}: {exc}") from None
    separator = DEFAULT_SEPARATOR if args.separator is None else args.separator
    kwargs: dict[str, Any] = {}
    if conv is not None:
        from rampart.conversation import ContextPolicy

        reply = args.reply_tokens
        if reply is None:
            reply = DEFAULT_REPLY_TOKENS if args.window is not None else 0
        kwargs = {
            "conversation": conv,
            "context_window": args.window,
            "reply_tokens": reply,
            "policy": ContextPolicy(provider=args.provider or "openai", dry_run=args.dry_run),
        }
    if args.tools:
        kwargs["tools_in_prompt"] = False
    t0 = time.perf_counter()
    # With a conversation and the model, the first compile embeds the tool results'
    # passages to score them against the step (seconds for a long transcript).
    with progress("compiling" + (" and scoring the conversation's tool results" if conv else "")):
        result = reg.compile(
            max_tokens=args.max_tokens,
            task_text=task if gated else None,
            relevance_threshold=args.threshold,
            top_k=args.top_k,
            separator=separator,
            **kwargs,
        )
    compile_s = time.perf_counter() - t0
    sep_tokens = reg.count_tokens(separator)
    cmap = None
    if args.html is not None or args.json or args.map or (conv is not None and _default_view(args)):
        cmap = result.context_map()
    if args.html is not None:
        _write_html(args.html, cmap, args)
    if args.format is not None:
        _print_body(result, args)
        return 0
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
            "task": task if gated else args.task,
            "top_k": args.top_k,
            "threshold": args.threshold,
            "included": [r for r in rows if r["included"]],
            "excluded": [r for r in rows if not r["included"]],
            # docs/specification.md §8: the front no task changes, and where it is interrupted.
            "stable_prefix_tokens": result.stable_prefix_tokens,
            "stable_prefix_blocks": result.stable_prefix_blocks,
            "cache_notes": result.cache_notes,
            "timing_s": {"load": load_s, "compile": compile_s},
            # The whole request: composition, cache and cost, every block and
            # message (the same numbers as --map and --html).
            "context_map": cmap.to_dict() if cmap is not None else None,
        }
        json.dump(out, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    if args.map or (conv is not None and _default_view(args)):
        assert cmap is not None
        _print_map(result, cmap, args, reg, tools, load_s, compile_s, task if gated else None)
        return 0
    if not args.no_prompt:
        _print_blocks(result, separator, sep_tokens)
    _print_report(result, args, reg, sep_tokens, separator, gated, task, load_s, compile_s)
    return 0


def _default_view(args: argparse.Namespace) -> bool:
    """No view flag given: with a conversation, the map is what a screen can show."""
    return not (args.json or args.prompt_only or args.no_prompt or args.format)


def _color() -> bool:
    """Colours for a terminal that is one, unless NO_COLOR is set (no-color.org)."""
    return (
        sys.stdout.isatty()
        and not os.environ.get("NO_COLOR")
        and os.environ.get("TERM", "") != "dumb"
    )


def _print_map(
    result: CompileResult,
    cmap: Any,
    args: argparse.Namespace,
    reg: BlockRegistry,
    tools: int,
    load_s: float,
    compile_s: float,
    task: str | None,
) -> None:
    sources = ", ".join(args.paths) if args.paths else f"{args.store} {args.name}"
    what = [f"{sources} ({len(reg) - tools} blocks)"]
    if tools:
        what.append(f"{tools} tools")
    if args.conversation is not None:
        what.append(args.conversation)
    dry = " (dry run: nothing recorded)" if args.dry_run else ""
    print("compiled " + " + ".join(what) + dry)
    if args.conversation is not None:
        items, steps = args.loaded
        recorded = f", {steps} clearing steps in its log" if steps else ""
        print(f"conversation: {items} items as loaded{recorded}")
    if task is not None:
        short = task if len(task) <= 80 else task[:79] + "…"
        print(f"task: {short}")
    enc = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    sys.stdout.write(cmap.text(color=_color(), unicode=enc.startswith("utf")))
    model = reg.embedding_model
    embedded = f", embedded by {getattr(model, 'model_id', model)}" if model else ""
    print(f"loaded in {load_s * 1e3:.0f} ms{embedded}; compiled in {compile_s * 1e3:.1f} ms")


def _print_report(
    result: CompileResult,
    args: argparse.Namespace,
    reg: BlockRegistry,
    sep_tokens: int,
    separator: str,
    gated: bool,
    task: str | None,
    load_s: float,
    compile_s: float,
) -> None:
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
        print(f"task: {task}\ngate: {rule} by cosine similarity to the task")
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
    ctx = result.context
    if ctx is not None:
        from rampart.cli.conversation import message_rows

        window = "no window" if ctx.context_window is None else f"window {ctx.context_window}"
        print(
            f"messages: {len(ctx.message_report)} items, {ctx.message_tokens} tokens shown "
            f"({window}, reply {ctx.reply_tokens}, budget {ctx.budget}, "
            f"{ctx.policy.provider} scale {ctx.scale:.2f}){' (dry run)' if args.dry_run else ''}"
        )
        for line in message_rows(result):
            print(line)
        for rw in ctx.rewrites:
            print(
                f"rewrite at item {rw.at_item} ({rw.reason}: {rw.action}, "
                f"{rw.tokens_removed} tokens removed; {rw.prefix_tokens} message tokens "
                "before it stay cached)"
            )
    model = reg.embedding_model
    embedded = f", embedded by {getattr(model, 'model_id', model)}" if model else ""
    query = " (incl. embedding the task)" if gated else ""
    print(
        f"loaded {len(reg)} blocks in {load_s * 1e3:.2f} ms{embedded}; "
        f"compiled in {compile_s * 1e3:.3f} ms{query}"
    )


def _print_body(result: CompileResult, args: argparse.Namespace) -> None:
    """The exact request body for --format, as JSON (rampart.adapters builds it)."""
    from rampart import adapters

    # No conversation: a body with no messages (the adapters take them from the
    # result otherwise).
    messages: list[Any] | None = None if result.context is not None else []
    if args.format == "openai":
        body = adapters.openai_chat(result, messages, model=args.model)
    elif args.format == "responses":
        body = adapters.openai_responses(result, messages, model=args.model)
    elif args.format == "anthropic":
        reply = args.reply_tokens or (result.context.reply_tokens if result.context else 0)
        body = adapters.anthropic_messages(
            result, messages, model=args.model, max_tokens=reply or 1024, cache=True
        )
    else:
        body = adapters.gemini_generate_content(result, messages, model=args.model)
    json.dump(body, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def _write_html(path: str, cmap: Any, args: argparse.Namespace) -> None:
    sources = " ".join([*args.paths, *([args.conversation] if args.conversation else [])])
    page = cmap.html(title=f"rampart context map: {sources or args.name}")
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(page)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise CliError(f"{path}: cannot write the page ({exc.strerror or exc})") from None
    print(
        f"rampart: wrote {path} ({len(cmap.blocks)} blocks, {len(cmap.messages)} messages)",
        file=sys.stderr,
    )


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


def add_parsers(sub: Any) -> None:
    """Add ``compile`` and ``inspect`` (and the options they share) to the
    ``rampart`` subcommands ``sub``."""
    common = Parser(add_help=False)
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
        type=int_in(0, MAX_COUNT),
        default=None,
        help="token budget (default: none)",
    )
    c.add_argument(
        "--top-k",
        type=int_in(1, MAX_COUNT),
        default=None,
        help="gate: keep the k blocks most relevant to --task",
    )
    c.add_argument(
        "--threshold",
        type=finite_float,
        default=None,
        help="gate: keep blocks whose cosine score with --task is at least this",
    )
    c.add_argument(
        "--separator",
        default=None,
        help="text between blocks (default: '\\n\\n---\\n\\n', a '---' line between blank lines)",
    )
    c.add_argument(
        "--tools",
        action="append",
        metavar="FILE",
        help="tool definitions (JSON: MCP, OpenAI or Anthropic), loaded ungated and sent in "
        "the tools list; repeatable",
    )
    conv = c.add_argument_group("the whole request (docs/specification.md §9)")
    conv.add_argument(
        "--conversation",
        metavar="FILE",
        default=None,
        help="a saved conversation (Conversation.save), or a JSON/JSONL list of OpenAI Chat, "
        "OpenAI Responses, Anthropic or Gemini messages; --top-k without --task then gates "
        "for its latest user message",
    )
    conv.add_argument(
        "--window",
        type=int_in(1, MAX_COUNT),
        default=None,
        help="the model's context window in tokens (default: none, nothing is forced out)",
    )
    conv.add_argument(
        "--reply-tokens",
        type=int_in(0, MAX_COUNT),
        default=None,
        help=f"tokens kept for the reply (default: {DEFAULT_REPLY_TOKENS} with --window)",
    )
    conv.add_argument(
        "--provider",
        choices=PROVIDERS,
        default=None,
        help="how tokens are counted and cache prices billed (default: openai)",
    )
    conv.add_argument(
        "--dry-run", action="store_true", help="report what the policy would do; record nothing"
    )
    out = c.add_argument_group("what to print (one of them; --html goes with any)")
    view = out.add_mutually_exclusive_group()
    view.add_argument(
        "--no-prompt",
        action="store_true",
        help="print only the report: a line per block and message",
    )
    view.add_argument("--prompt-only", action="store_true", help="print only the exact prompt text")
    view.add_argument(
        "--map",
        action="store_true",
        help="draw the window: composition, cached prefix and cost, actions "
        "(the default with --conversation)",
    )
    view.add_argument(
        "--format", choices=FORMATS, default=None, help="print the exact request body as JSON"
    )
    out.add_argument("--model", default=None, help="the model named in the --format body")
    out.add_argument(
        "--html",
        metavar="FILE",
        default=None,
        help="also write the map and every item's report as one self-contained HTML page",
    )
    c.set_defaults(func=_cmd_compile)

    i = sub.add_parser("inspect", parents=[common], help="list the blocks of seed files")
    i.set_defaults(func=_cmd_inspect)
