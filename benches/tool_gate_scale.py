"""Tool-gate quality against the number of tools: top-1 / top-3 at 40 … 479 tools.

Servers are added in the tiers of tests/data/tool_gate_scale.json (the six servers
of tool_gate_eval.json, then Excel and Chroma, Redis/arXiv/Wikipedia, the search
and notes servers, Atlassian, Google Workspace): 40, 99, 193, 262, 360 and 479 tools.
At each tier one registry holds every tool loaded so far, and two sets of requests
are scored:

* **base**: the 204 requests of tool_gate_eval.json (all meant for the first six
  servers), the same at every tier: how the same requests fare as distractors grow;
* **all**: base plus every request of tool_gate_scale.json whose intended tool is
  loaded: how the gate does on the tools of the tier.

Each is split into its tune and holdout halves (headline numbers are holdout); a
hit is an acceptable tool ranked first (top-1) or among the first three (top-3).
The evaluation reuses benches/tool_gate_eval.py's scoring.

Gates: the default dense gate (the registry's cosine gate, :class:`DenseGate`) with
all-MiniLM-L6-v2, ``--model all-mpnet-base-v2`` (or any model directory) for another
embedder, and ``--gate module:factory`` for any gate: ``factory(registry)`` returns
a ``(task, blocks) -> scores`` callable, e.g. ``rampart.toolgate:DenseGate``.

``--examples FILE`` (repeatable; the shape of tests/data/tool_gate_examples.json)
gives the tools author-written example requests before they are loaded
(:func:`rampart.tools.with_examples`); the registry then gates with its own default,
:class:`~rampart.toolgate.ExampleGate`, unless ``--gate`` names another. A tool with
no examples in any file keeps only its gate text.

Each server's tools are loaded with the tag ``server:NAME`` (NAME from the file
name, ``mcp_excel_tools.json`` -> ``excel``), as an agent loading several MCP
servers would tag them; gates that use the server (:class:`ServerGate`) read it.

A tool whose name an earlier server already uses is loaded under the name the data
file's ``renamed`` table gives (Google Workspace's ``create_sheet`` clashes with the
Excel server's), as an agent with many servers must do.

    python benches/tool_gate_scale.py [--model NAME] [--gate mod:factory] [--out results.json]
    python benches/tool_gate_scale.py --examples tests/data/tool_gate_examples.json \
        --examples tests/data/tool_gate_examples_scale_a.json \
        --examples tests/data/tool_gate_examples_scale_b.json --out examples.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import rampart

# Run as a script, benches/ is sys.path[0]: tool_gate_eval imports as a module.
import tool_gate_eval as base_eval
from rampart.toolgate import SERVER_TAG, DenseGate, ExampleGate
from rampart.tools import load_examples, with_examples

DATA = base_eval.DATA
SCALE = DATA / "tool_gate_scale.json"

GateFactory = Callable[[rampart.BlockRegistry], Any]


def load_scale() -> dict[str, Any]:
    """The scale data set, with the base requests (tool_gate_eval.json) under "base"."""
    doc: dict[str, Any] = json.loads(SCALE.read_text(encoding="utf-8"))
    base = json.loads((DATA / doc["base"]).read_text(encoding="utf-8"))
    doc["base_requests"] = [dict(r, style="base") for r in base["requests"]]
    return doc


def tool_defs(doc: dict[str, Any], file: str) -> list[dict[str, Any]]:
    """One server's MCP tool definitions, renamed where the data set says so."""
    raw = json.loads((DATA / file).read_text(encoding="utf-8"))
    tools = raw["tools"] if "tools" in raw else raw["result"]["tools"]
    renamed = doc.get("renamed", {}).get(file, {})
    return [dict(t, name=renamed.get(t["name"], t["name"])) for t in tools]


def server_name(file: str) -> str:
    """``mcp_excel_tools.json`` -> ``excel``: the server a tool file lists."""
    stem = Path(file).name.removesuffix(".json")
    return stem.removeprefix("mcp_").removesuffix("_tools")


def load_example_files(files: Sequence[Path]) -> dict[str, list[str]]:
    """Example requests per tool name from every file, in file order."""
    out: dict[str, list[str]] = {}
    for f in files:
        for name, examples in load_examples(f).items():
            out.setdefault(name, []).extend(examples)
    return out


def check_examples(doc: dict[str, Any], examples: dict[str, list[str]]) -> None:
    """Every tool the example files name must be one of the scale set's tools (a
    typo would otherwise leave a tool silently without its examples)."""
    names = {t["name"] for tier in doc["tiers"] for f in tier for t in tool_defs(doc, f)}
    unknown = sorted(set(examples) - names)
    if unknown:
        raise SystemExit(f"--examples name tools that no server lists: {unknown}")


def build_registry(
    doc: dict[str, Any],
    files: Sequence[str],
    model: Any,
    examples: dict[str, list[str]] | None = None,
) -> tuple[rampart.BlockRegistry, set[str]]:
    reg = rampart.BlockRegistry(embedding_model=model)
    names: set[str] = set()
    for f in files:
        defs = tool_defs(doc, f)
        here = {t["name"] for t in defs}
        tools: Any = {"tools": defs}
        if examples:
            mine = {k: v for k, v in examples.items() if k in here}
            tools = with_examples(tools, mine) if mine else tools
        reg.load_tools(tools, tags=[SERVER_TAG + server_name(f)])
        names.update(here)
    reg.embed_pending()
    return reg, names


def in_scope(requests: Sequence[dict[str, Any]], names: set[str]) -> list[dict[str, Any]]:
    """Requests whose intended tool is loaded, their acceptable tools cut to the
    loaded ones (a tool not loaded cannot be ranked)."""
    out = []
    for r in requests:
        if r["acceptable"][0] in names:
            out.append(dict(r, acceptable=[a for a in r["acceptable"] if a in names]))
    return out


def evaluate(
    doc: dict[str, Any],
    model: Any,
    factory: GateFactory | None,
    label: str,
    examples: dict[str, list[str]] | None = None,
    tiers: Sequence[int] = (),
) -> list[dict[str, Any]]:
    """One row per tier (only those numbered in ``tiers``, 1-based, when given):
    tools, requests, and base/all scores per half. ``factory`` None: the
    registry's own default gate (``find_relevant``)."""
    rows: list[dict[str, Any]] = []
    files: list[str] = []
    for number, tier in enumerate(doc["tiers"], 1):
        files.extend(tier)
        if tiers and number not in tiers:
            continue
        t0 = time.perf_counter()
        reg, names = build_registry(doc, files, model, examples)
        rank = (
            base_eval.find_ranker(reg)
            if factory is None
            else base_eval.gate_ranker(reg, factory(reg))
        )
        base = base_eval.score(doc["base_requests"], rank)
        everything = in_scope(doc["base_requests"] + doc["requests"], names)
        result = base_eval.score(everything, rank)
        indirect = [r for r in everything if r.get("style") == "indirect"]
        row = {
            "gate": label,
            "tools": len(names),
            "servers": len(files),
            "examples": sum(len(v) for k, v in (examples or {}).items() if k in names),
            "requests": len(everything),
            "base": base,
            "all": result,
            "indirect": base_eval.score(indirect, rank) if indirect else {},
            "seconds": time.perf_counter() - t0,
        }
        reg.release()
        rows.append(row)
        h, b = result["holdout"], base["holdout"]
        print(
            f"{label:32s} {row['tools']:4d} tools {row['requests']:4d} req  "
            f"base holdout {b['top1']:6.1%} {b['top3']:6.1%}   "
            f"all holdout {h['top1']:6.1%} {h['top3']:6.1%}   ({row['seconds']:.0f} s)",
            flush=True,
        )
    return rows


def previous_example_gate(registry: rampart.BlockRegistry) -> ExampleGate:
    """The example gate as it was before its weights were chosen at 479 tools (mean of
    the two best matches, 0.1 x BM25, no server or hub term), for comparison:
    ``--gate tool_gate_scale:previous_example_gate``."""
    return ExampleGate(registry, second_weight=1, lexical_weight=0.1, server_weight=0, hub_weight=0)


def load_factory(spec: str) -> GateFactory:
    module, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit(f"--gate wants module:factory, got {spec!r}")
    factory: GateFactory = getattr(importlib.import_module(module), attr)
    return factory


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The docs/tool-gate.md table: holdout top-1 / top-3 per tier."""
    lines = [
        "| gate | tools | base holdout | all holdout (n) | indirect, both halves (n) "
        "| all tune (n) |",
        "| --- | ---: | --- | --- | --- | --- |",
    ]

    def pct(x: dict[str, float]) -> str:
        return f"{100 * x['top1']:.1f} / {100 * x['top3']:.1f}"

    for r in rows:
        b, a, t = r["base"]["holdout"], r["all"]["holdout"], r["all"]["tune"]
        ind = r["indirect"].get("all")
        indirect = f"{pct(ind)} ({ind['n']})" if ind else "–"
        lines.append(
            f"| {r['gate']} | {r['tools']} | {pct(b)} | {pct(a)} ({a['n']}) "
            f"| {indirect} | {pct(t)} ({t['n']}) |"
        )
    return "\n".join(lines)


def latency(names: Sequence[str], rounds: int = 60) -> list[dict[str, Any]]:
    """Median milliseconds to embed one new request (no vector cache, so every text
    is new to the model; onnxruntime's default per-run thread choice), per model,
    interleaved so that both see the same machine load."""
    import statistics

    doc = load_scale()
    texts = [r["request"] for r in doc["requests"]][:rounds]
    models = []
    for name in names:
        emb = (
            rampart.OnnxEmbedder(vector_cache=False)
            if name == "default"
            else rampart.OnnxEmbedder(name, vector_cache=False)
        )
        emb.encode("warm up")
        models.append((name, emb, []))
    for t in texts:
        for _, emb, times in models:
            t0 = time.perf_counter()
            emb.encode(t)
            times.append((time.perf_counter() - t0) * 1e3)
    out = []
    for _name, emb, times in models:
        row = {"model": emb.name, "median_ms": statistics.median(times), "n": len(times)}
        print(f"new request, {row['model']}: median {row['median_ms']:.1f} ms over {len(times)}")
        out.append(row)
    return out


def gate_latency(
    doc: dict[str, Any], examples: dict[str, list[str]] | None, rounds: int = 60
) -> dict[str, Any]:
    """Milliseconds of the registry's default gate at the largest tier, in process:
    for a new request once it is embedded (the embedding is timed by ``--latency``),
    the gate's scoring (``ExampleGate.scores``, what the registry's compile calls)
    and a whole ``compile(task_text, top_k=5)`` of another new request; for a
    repeated request, both again. Medians over ``rounds`` requests, wall clock and
    this process's CPU time (on a shared machine the wall clock also counts waiting
    for a core)."""
    import statistics

    from rampart.toolgate import default_gate

    files = [f for tier in doc["tiers"] for f in tier]
    reg, names = build_registry(doc, files, rampart.default_embedder(), examples)
    gate = default_gate(reg) or DenseGate(reg)
    blocks = reg.list_blocks()
    requests = [r["request"] for r in doc["requests"]]
    texts = requests[:rounds]
    others = requests[rounds : 2 * rounds]  # new requests for the compile timing
    reg.compile(task_text="warm up", top_k=5, tools_in_prompt=False)  # builds the layout
    scores = getattr(gate, "scores", None) or (lambda t: gate(t, blocks))
    # Baseline in the same loop: the example gate without its scale terms (the
    # default before the 479-tool tuning).
    plain = ExampleGate(reg, second_weight=1, lexical_weight=0.1, server_weight=0, hub_weight=0)
    plain.scores("warm up")
    times: dict[str, list[float]] = {}

    def timed(key: str, call: Callable[[], Any]) -> None:
        w0, c0 = time.perf_counter(), time.process_time()
        call()
        w1, c1 = time.perf_counter(), time.process_time()
        times.setdefault(key + "_ms", []).append((w1 - w0) * 1e3)
        times.setdefault(key + "_cpu_ms", []).append((c1 - c0) * 1e3)

    for t, other in zip(texts, others):
        # The embeddings, kept by the registry (a few dozen tasks): not timed here;
        # the pause lets the model's worker threads, which spin a while after each
        # run, go idle, as they are by the time an agent's next request arrives.
        reg._gate.query(reg, t)
        reg._gate.query(reg, other)
        time.sleep(0.05)
        timed("new_request_gate", lambda t=t: scores(t))
        timed("repeated_request_gate", lambda t=t: scores(t))
        timed("new_request_plain_gate", lambda t=t: plain.scores(t))
        timed("new_request_compile", lambda o=other: reg.compile(task_text=o, top_k=5))
        timed("repeated_request_compile", lambda o=other: reg.compile(task_text=o, top_k=5))
    layout = getattr(gate, "_layout", None)
    row: dict[str, Any] = {
        "gate": type(gate).__name__,
        "tools": len(names),
        "vectors": int(layout.vectors.shape[0]) if layout is not None else len(blocks),
        "n": len(texts),
        **{k: statistics.median(v) for k, v in times.items()},
    }
    print(
        f"{row['gate']} over {row['tools']} tools ({row['vectors']} vectors), medians over "
        f"{row['n']} requests, wall / CPU ms:"
    )
    for key in (
        "new_request_gate",
        "new_request_plain_gate",
        "repeated_request_gate",
        "new_request_compile",
    ):
        print(f"  {key:26s} {row[key + '_ms']:8.3f} / {row[key + '_cpu_ms']:.3f}")
    key = "repeated_request_compile"
    print(f"  {key:26s} {row[key + '_ms']:8.3f} / {row[key + '_cpu_ms']:.3f}")
    reg.release()
    return row


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model",
        action="append",
        default=None,
        help="embedding model: 'default', a packaged name (all-mpnet-base-v2) or a "
        "model directory; repeat to compare (default: default)",
    )
    ap.add_argument("--gate", default=None, help="module:factory, factory(registry) -> gate")
    ap.add_argument(
        "--examples",
        type=Path,
        action="append",
        default=None,
        help="author example requests ({'examples': {tool: [...]}}); repeatable; "
        "the registry's default gate is then the example gate",
    )
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument(
        "--latency",
        action="store_true",
        help="only time one new request per --model (median ms) and exit",
    )
    ap.add_argument(
        "--tiers",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[],
        help="only these tiers, 1-based and comma-separated (e.g. 1,6: 40 and 479 tools)",
    )
    ap.add_argument(
        "--gate-latency",
        action="store_true",
        help="only time the default gate at the largest tier (with --examples: the "
        "example gate) for new and repeated requests, and exit",
    )
    args = ap.parse_args(argv)
    if args.latency:
        latency(args.model or ["default"])
        return 0

    doc = load_scale()
    rows: list[dict[str, Any]] = []
    examples = load_example_files(args.examples) if args.examples else None
    if examples:
        check_examples(doc, examples)
    if args.gate_latency:
        got = gate_latency(doc, examples)
        if args.out:
            args.out.write_text(json.dumps(got, indent=1) + "\n")
        return 0
    factory: GateFactory | None = load_factory(args.gate) if args.gate else None
    if factory is None and not examples:
        factory = DenseGate  # the core's cosine gate, as a callable
    gate_name = args.gate or ("examples" if examples else "dense")
    for name in args.model or ["default"]:
        model: Any
        if name == "default":
            model, label = rampart.default_embedder(), "all-MiniLM-L6-v2"
        else:
            model = rampart.OnnxEmbedder(name)
            label = model.name
        rows += evaluate(doc, model, factory, f"{gate_name} {label}", examples, args.tiers)
    print()
    print(markdown(rows))
    if args.out:
        meta = {
            "scale_requests": len(doc["requests"]),
            "base_requests": len(doc["base_requests"]),
            "example_files": [str(f) for f in args.examples or ()],
            "python": sys.version.split()[0],
        }
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
