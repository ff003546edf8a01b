"""Tool-gate quality on requests by another writer: does the trained tool encoder
(``all-MiniLM-L6-v2:tools``) beat the default MiniLM when the requests are not
phrased like its training data?

The encoder was trained on author examples and scale requests of eight other
servers (experiments/toolgate_train/), short imperative requests written for
rampart. The requests here are over the same 40 tools as benches/tool_gate_eval.py
(six MCP servers, one registry) but written differently:

* ``hand``: tests/data/tool_gate_other_writer.json, 160 requests, four per tool,
  each in one of seven styles (terse commands, long rambling context, questions,
  indirect goals, non-native English, typos, the domain without the operation);
* ``qwen2.5-coder-1.5b``: tests/data/tool_gate_other_writer_qwen.json, requests a
  local model wrote from each tool's text under two personas (a non-technical
  person describing a situation; a user's one-sentence question), never the
  enrichment prompt; made with ``--generate`` (below).

Each request has a ``tune``/``holdout`` split (alternating per tool and writer);
the fusion weights below are chosen on ``tune`` only and the headline is
``holdout``. Rows, all through rampart's own registry path
(``BlockRegistry(embedding_model=...)``, each server's tools loaded with its
``server:`` tag, ``find_relevant`` as ``compile(task_text=..., top_k=...)`` ranks):

* MiniLM without the query adapter (plain cosine);
* MiniLM with the packaged query adapter (the default cold gate);
* ``all-MiniLM-L6-v2:tools`` (never mapped: the adapter is MiniLM's);
* fusions chosen on ``tune``: ``a`` x the default's score + (1 - a) x the encoder's
  + ``w`` x BM25 (HybridGate's lexical part, divided by the task's best), through a
  ``gate=`` callable (:class:`FusedGate`);
* both models with the author examples (tests/data/tool_gate_examples.json; the
  registry then gates with ``ExampleGate``).

    python benches/tool_gate_other_writer.py [--out results.json] [--md table.md]
    python benches/tool_gate_other_writer.py --generate qwen2.5-coder-1.5b --gen-out FILE

The run quoted in docs/tool-gate.md ("Requests by another writer") is
benches/tool_gate_other_writer.json (every request's rank per row).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
sys.path.insert(0, str(ROOT / "benches"))

import rampart  # noqa: E402
import tool_gate_eval as base  # noqa: E402
from rampart.embeddings.prepare import DEFAULT_MODEL_NAME, TOOLS_MODEL_NAME  # noqa: E402
from rampart.gates.lexical import HybridGate  # noqa: E402
from rampart.toolgate import SERVER_TAG, DenseGate, set_query_adapter  # noqa: E402
from rampart.tools import ToolSchema, load_examples, render_tool, with_examples  # noqa: E402

HAND = DATA / "tool_gate_other_writer.json"
QWEN = DATA / "tool_gate_other_writer_qwen.json"
FILES = (HAND, QWEN)
MIX_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)  # a: the default's share; 1 - a the encoder's
LEXICAL_WEIGHTS = (0.0, 0.05, 0.1, 0.2, 0.3)

Ranker = Callable[[str], list[str]]

# Two summary groups of styles for the docs' short table (docs/embeddings.md), drawn
# after reading the per-style rows: where the encoder gained and where it lost.
FAMILIES: dict[str, Callable[[dict[str, Any]], bool]] = {
    "short typed": lambda r: (
        r["writer"] == "hand" and r["style"] in ("terse", "typo", "non-native")
    ),
    "conversational": lambda r: (
        r["style"] == "question" or (r["writer"] == "hand" and r["style"] == "rambling")
    ),
}


# ---- data ------------------------------------------------------------------------------


def load_requests(files: Iterable[Path] = FILES) -> list[dict[str, Any]]:
    """Every request of the files that exist, in file order."""
    out: list[dict[str, Any]] = []
    for f in files:
        if f.exists():
            out.extend(json.loads(f.read_text(encoding="utf-8"))["requests"])
    return out


def load_tools() -> list[ToolSchema]:
    """The 40 tools of benches/tool_gate_eval.py (and its SERVER_OF map)."""
    _, tools, _ = base.load()
    return tools


def names_in(text: str, names: Iterable[str]) -> list[str]:
    """Tool names a request gives away (``git_log`` or ``git log``, any case)."""
    low = text.lower()
    return [n for n in names if n in low or n.replace("_", " ") in low]


# ---- scoring ---------------------------------------------------------------------------


def rank_of(r: dict[str, Any], rank: Ranker) -> int | None:
    """1-based rank of the first acceptable tool in ``rank``'s order (None: absent)."""
    ok = set(r["acceptable"])
    for i, name in enumerate(rank(r["request"]), 1):
        if name in ok:
            return i
    return None


def rates(ranks: Sequence[int | None]) -> dict[str, float]:
    n = len(ranks)
    top1 = sum(1 for k in ranks if k == 1)
    top3 = sum(1 for k in ranks if k is not None and k <= 3)
    return {"n": n, "top1": top1 / n if n else 0.0, "top3": top3 / n if n else 0.0}


def breakdown(requests: Sequence[dict[str, Any]], ranks: Sequence[int | None]) -> dict[str, Any]:
    """Rates per split, per writer and per style (each over holdout and over all)."""
    groups: dict[str, list[int | None]] = {}
    for r, k in zip(requests, ranks, strict=True):
        keys = [r["split"], "all"]
        # a model's personas are keyed with the model, apart from the hand styles
        style = r["style"] if r["writer"] == "hand" else f"{r['style']} ({r['writer']})"
        groups_of = [f"writer:{r['writer']}", f"style:{style}"]
        groups_of += [f"family:{name}" for name, pred in FAMILIES.items() if pred(r)]
        for group in groups_of:
            keys += [f"{group}/{r['split']}", f"{group}/all"]
        for key in keys:
            groups.setdefault(key, []).append(k)
    return {k: rates(v) for k, v in sorted(groups.items())}


def sign_test(b: int, c: int) -> float:
    """Two-sided exact sign test (McNemar's, exact) of ``b`` requests one ranker alone
    gets against ``c`` the other alone gets."""
    n, k = b + c, min(b, c)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return min(1.0, 2.0 * tail / float(2**n))


def paired(
    requests: Sequence[dict[str, Any]],
    ranks: Sequence[int | None],
    against: Sequence[int | None],
    split: str | None = "holdout",
) -> dict[str, Any]:
    """Requests this ranker alone gets into the top 1 / top 3 (``won``) and those only
    ``against`` gets (``lost``), over ``split`` (None: all), with the sign test's p."""
    out: dict[str, Any] = {}
    for label, cut in (("top1", 1), ("top3", 3)):
        won = lost = 0
        for r, k, j in zip(requests, ranks, against, strict=True):
            if split is not None and r["split"] != split:
                continue
            mine, theirs = k is not None and k <= cut, j is not None and j <= cut
            won += mine and not theirs
            lost += theirs and not mine
        out[label] = {"won": won, "lost": lost, "p": round(sign_test(won, lost), 3)}
    return out


def registry(model: str, tools: Sequence[ToolSchema]) -> rampart.BlockRegistry:
    """benches/tool_gate_eval.py's registry() with the model named: one registry,
    each server's tools with its ``server:`` tag."""
    reg = rampart.BlockRegistry(embedding_model=model)
    by_server: dict[str, list[ToolSchema]] = {}
    for t in tools:
        by_server.setdefault(base.SERVER_OF.get(t.name, ""), []).append(t)
    for server, group in by_server.items():
        reg.load_tools(group, tags=[SERVER_TAG + server] if server else None)
    reg.embed_pending()
    return reg


class FusedGate:
    """A ``gate=`` callable: ``a`` x ``first``'s dense score (its query adapter
    applied where it has one) + (1 - a) x ``second``'s, matched by block name,
    + ``lexical_weight`` x BM25 over ``first``'s gate texts (HybridGate's lexical
    part). Both registries hold the same tools."""

    def __init__(
        self,
        first: rampart.BlockRegistry,
        second: rampart.BlockRegistry,
        a: float,
        lexical_weight: float = 0.0,
    ) -> None:
        self.first, self.second = DenseGate(first), DenseGate(second)
        self.second_blocks = {b.semantic_name: b for b in second.list_blocks()}
        self.hybrid = HybridGate(first, lexical_weight)
        self.a, self.w = float(a), float(lexical_weight)

    def __call__(self, task_text: str, blocks: Sequence[Any]) -> list[float]:
        s1 = self.first(task_text, blocks)
        s2 = self.second(task_text, [self.second_blocks[b.semantic_name] for b in blocks])
        lex = self.hybrid.lexical(task_text, blocks) if self.w else [0.0] * len(blocks)
        return [
            self.a * x + (1 - self.a) * y + self.w * z for x, y, z in zip(s1, s2, lex, strict=True)
        ]


def score_table(reg: rampart.BlockRegistry, requests: Sequence[dict[str, Any]]) -> Any:
    """The registry's own scores (``find_relevant``) of every tool for every request,
    as a [requests, tools] array in ``list_blocks`` order, and the tool names."""
    import numpy as np

    blocks = [b for b in reg.list_blocks() if b.tool_schema is not None]
    gate = DenseGate(reg)
    m = np.asarray([gate(r["request"], blocks) for r in requests], dtype=np.float64)
    return m, [b.semantic_name for b in blocks]


def lexical_table(reg: rampart.BlockRegistry, requests: Sequence[dict[str, Any]]) -> Any:
    import numpy as np

    blocks = [b for b in reg.list_blocks() if b.tool_schema is not None]
    hybrid = HybridGate(reg, 0.0)
    return np.asarray([hybrid.lexical(r["request"], blocks) for r in requests], dtype=np.float64)


def table_ranks(m: Any, names: Sequence[str], requests: Sequence[dict[str, Any]]) -> list[Any]:
    import numpy as np

    out: list[int | None] = []
    for row, r in zip(m, requests, strict=True):
        order = [names[i] for i in np.argsort(-row, kind="stable")]
        pos = next((i for i, name in enumerate(order, 1) if name in set(r["acceptable"])), None)
        out.append(pos)
    return out


def choose_fusion(
    tables: dict[str, Any], names: Sequence[str], requests: Sequence[dict[str, Any]]
) -> tuple[tuple[float, float], dict[tuple[float, float], tuple[float, float]]]:
    """(a, w) with the best tune top-3 (top-1 breaks ties, then the plainest: the
    grid's order), and the whole tune grid."""
    tune = [i for i, r in enumerate(requests) if r["split"] == "tune"]
    reqs = [requests[i] for i in tune]
    grid: dict[tuple[float, float], tuple[float, float]] = {}
    for a in MIX_WEIGHTS:
        for w in LEXICAL_WEIGHTS:
            m = a * tables["default"] + (1 - a) * tables["tools"] + w * tables["lexical"]
            got = rates(table_ranks(m[tune], names, reqs))
            grid[(a, w)] = (got["top3"], got["top1"])
    best = max(grid, key=lambda k: grid[k])  # first of equals: max keeps the first
    return best, grid


# ---- the run ---------------------------------------------------------------------------


def pct(r: dict[str, float]) -> str:
    return f"{100 * r['top1']:.1f} / {100 * r['top3']:.1f}"


def markdown(rows: list[dict[str, Any]], requests: Sequence[dict[str, Any]]) -> str:
    """The holdout table (with each row's requests won and lost against the default
    cold gate, paired), then per writer and style (holdout and all requests)."""
    lines = [
        "| variant | holdout top-1 / top-3 | tune top-1 / top-3 | all top-1 / top-3 "
        "| holdout won / lost against the baseline\\*: top-1; top-3 (sign test p) |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        res = row["result"]
        vs = row.get("paired", {}).get("holdout")
        cell = (
            "; ".join(
                f"+{vs[k]['won']} / -{vs[k]['lost']} ({vs[k]['p']:.2f})" for k in ("top1", "top3")
            )
            if vs
            else "-"
        )
        lines.append(
            f"| {row['variant']} | {pct(res['holdout'])} | {pct(res['tune'])} "
            f"| {pct(res['all'])} | {cell} |"
        )
    keys = sorted(
        {
            k.rsplit("/", 1)[0]
            for k in rows[0]["result"]
            if k.startswith(("writer:", "style:", "family:"))
        }
    )
    short = [row for row in rows if row.get("in_breakdown")]
    lines += [
        "",
        "\\* the default cold gate (MiniLM + query adapter); for the example gate's "
        ":tools row, the default's example gate.",
        "",
        "Per writer and style, top-3 on the holdout half · top-1 / top-3 on all requests "
        "(no choice but the fusion's weights was made on the tune half):",
        "",
        "| group (n holdout / all) | " + " | ".join(row["in_breakdown"] for row in short) + " |",
        "|---|" + "---|" * len(short),
    ]
    for key in keys:
        h = short[0]["result"].get(f"{key}/holdout", {"n": 0})
        a = short[0]["result"][f"{key}/all"]
        cells = []
        for row in short:
            rh = row["result"].get(f"{key}/holdout")
            ra = row["result"][f"{key}/all"]
            held = f"{100 * rh['top3']:.0f}" if rh else "-"
            cells.append(f"{held} · {100 * ra['top1']:.0f} / {100 * ra['top3']:.0f}")
        lines.append(f"| {key} ({h['n']} / {a['n']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def evaluate(args: argparse.Namespace) -> int:
    import numpy as np

    tools = load_tools()
    requests = load_requests()
    n = {
        w: sum(1 for r in requests if r["writer"] == w)
        for w in sorted({r["writer"] for r in requests})
    }
    print(f"{len(requests)} requests {n}, {len(tools)} tools", flush=True)
    rows: list[dict[str, Any]] = []

    def add(variant: str, ranks: list[int | None], against: int = 1, **kw: Any) -> None:
        """A row; paired against row ``against`` (the default cold gate, or for the
        example gate's :tools row the default's example gate)."""
        res = breakdown(requests, ranks)
        row = {"variant": variant, "result": res, "ranks": ranks, **kw}
        if len(rows) > against:
            row["against"] = rows[against]["variant"]
            row["paired"] = {
                "holdout": paired(requests, ranks, rows[against]["ranks"]),
                "all": paired(requests, ranks, rows[against]["ranks"], None),
            }
        rows.append(row)
        print(f"{variant:70s} tune {pct(res['tune'])}  HOLDOUT {pct(res['holdout'])}", flush=True)

    t0 = time.perf_counter()
    plain = registry(DEFAULT_MODEL_NAME, tools)
    set_query_adapter(plain, None)
    default = registry(DEFAULT_MODEL_NAME, tools)
    trained = registry(TOOLS_MODEL_NAME, tools)
    add(
        "MiniLM, no query adapter (plain cosine)",
        [rank_of(r, base.find_ranker(plain)) for r in requests],
        in_breakdown="MiniLM plain",
    )
    add(
        "MiniLM + query adapter (the default cold gate)",
        [rank_of(r, base.find_ranker(default)) for r in requests],
        in_breakdown="default",
    )
    add(
        f"{TOOLS_MODEL_NAME} (cold)",
        [rank_of(r, base.find_ranker(trained)) for r in requests],
        in_breakdown=":tools",
    )

    # Fusion, chosen on tune: the registries' own scores in one array each.
    tables: dict[str, Any] = {}
    tables["default"], names = score_table(default, requests)
    tables["tools"], names2 = score_table(trained, requests)
    tables["plain"], names3 = score_table(plain, requests)
    tables["lexical"] = lexical_table(default, requests)
    assert names == names2 == names3
    (a, w), grid = choose_fusion(tables, names, requests)
    print(
        "  tune grid (a = default's share, w = BM25) -> top-3/top-1: "
        + ", ".join(f"{k}: {100 * v[0]:.1f}/{100 * v[1]:.1f}" for k, v in grid.items())
    )
    print(f"  chosen on tune: a={a}, w={w}")
    # The chosen fusion through the registry's path: a gate= callable.
    fused = FusedGate(default, trained, a, w)
    add(
        f"fusion (tuned): {a} x default + {1 - a} x :tools + {w} x BM25",
        [rank_of(r, base.gate_ranker(default, fused)) for r in requests],
        in_breakdown="fusion",
        a=a,
        lexical_weight=w,
        tune_grid={f"{k[0]},{k[1]}": v for k, v in grid.items()},
    )
    # Each encoder with BM25 alone (w tuned on its own slice of the grid: a = 1 or 0),
    # and the even mix without BM25, for the reader.
    for label, a_only, t in (("default", 1.0, "default"), (":tools", 0.0, "tools")):
        w1 = max((k for k in grid if k[0] == a_only), key=lambda k: grid[k])[1]
        if not w1:
            continue  # the encoder's own row above
        add(
            f"{label} + {w1} x BM25 (w tuned; HybridGate's sum)",
            table_ranks(tables[t] + w1 * tables["lexical"], names, requests),
        )
    if (a, w) != (0.5, 0.0):
        add(
            "0.5 x default + 0.5 x :tools, no BM25",
            table_ranks(0.5 * tables["default"] + 0.5 * tables["tools"], names, requests),
        )
    # Sanity: the array path equals the gate path for the chosen weights.
    m = a * tables["default"] + (1 - a) * tables["tools"] + w * tables["lexical"]
    assert table_ranks(m, names, requests) == [
        rank_of(r, base.gate_ranker(default, fused)) for r in requests
    ], "array and gate= paths disagree"
    for reg in (plain, default, trained):
        reg.release()

    # With the author examples: each registry's default gate (ExampleGate).
    examples = load_examples(base.EXAMPLES)
    enriched = with_examples(tools, examples)
    for label, model in (("MiniLM + adapter", DEFAULT_MODEL_NAME), (":tools", TOOLS_MODEL_NAME)):
        reg = registry(model, enriched)
        against = len(rows) - 1 if model == TOOLS_MODEL_NAME else 1
        add(
            f"author examples (ExampleGate): {label}",
            [rank_of(r, base.find_ranker(reg)) for r in requests],
            against=against,
        )
        reg.release()
    took = time.perf_counter() - t0

    table = markdown(rows, requests)
    print()
    print(table)
    if args.md:
        args.md.write_text(table, encoding="utf-8")
    if args.out:
        meta = {
            "requests": n,
            "tools": len(tools),
            "files": [f.name for f in FILES if f.exists()],
            "mix_weights": MIX_WEIGHTS,
            "lexical_weights": LEXICAL_WEIGHTS,
            "seconds": round(took, 1),
            "python": sys.version.split()[0],
            "numpy": np.__version__,
        }
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


# ---- generating the model-written requests ----------------------------------------------

# Two personas, neither the enrichment prompt (rampart.toolgate.ENRICH_PROMPT) nor the
# short imperative requests the encoder was trained on. Sent after the tool's text in
# one user message, as the enrichment prompt is (the order Qwen2.5-Coder-1.5B follows).
PERSONAS = {
    "situation": (
        "Someone who has never heard of this tool and knows no technical terms is "
        "writing to an AI assistant. Write the one message they send: two or three "
        "sentences that explain their situation and what they want to end up with, "
        "with made-up but concrete details (a file, a person, a city, a table or a "
        "link). Do not use the tool's name. Reply with the message only."
    ),
    "question": (
        "A user asks an AI assistant one question, and to answer it the assistant would "
        "need the tool above. Write that question as the user would: one sentence, about "
        "their own concrete case (a real-looking file, person, city, table, commit or "
        "link), without the tool's name and without copying its description. Reply with "
        "the question only."
    ),
}
ATTEMPTS = 4


def _clean(text: str) -> str:
    """One line: the reply's lines joined, enclosing quotes and a 'Message:' label off."""
    line = " ".join(x.strip() for x in text.strip().splitlines() if x.strip())
    for label in ("message:", "user:", "user message:"):
        if line.lower().startswith(label):
            line = line[len(label) :].strip()
    if len(line) >= 2 and line[0] + line[-1] in ('""', "''", "“”"):
        line = line[1:-1].strip()
    return line


def generate(args: argparse.Namespace) -> int:
    """Two requests per tool (one per persona) from a local llama.cpp model, at
    temperature 0.7 with a fixed seed per (tool, persona, attempt); a reply that
    names a tool or is empty is asked again with the next seed (at most 4). The
    acceptable tools start as the intended one alone; alternatives are added by hand
    after reading (tests/data/README.md)."""
    from rampart.llm import LlamaCppBackend

    tools = load_tools()
    all_names = [t.name for t in tools]
    backend = LlamaCppBackend(args.generate, n_ctx=2048, n_threads=args.threads, native_tools=False)
    described = backend.describe()
    out: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for i, tool in enumerate(tools):
        order = list(PERSONAS) if i % 2 == 0 else list(PERSONAS)[::-1]
        for j, persona in enumerate(order):
            text, seed = "", 0
            for attempt in range(ATTEMPTS):
                seed = 1000 * i + 10 * list(PERSONAS).index(persona) + attempt
                messages = [
                    {"role": "user", "content": f"{render_tool(tool)}\n\n{PERSONAS[persona]}"}
                ]
                reply = backend.chat(messages, temperature=0.7, seed=seed, max_tokens=120)
                text = _clean(str(reply.text or ""))
                if text and not names_in(text, all_names):
                    break
                text = ""
            print(f"  {tool.name:26s} {persona:9s} seed {seed:5d}: {text!r}", flush=True)
            if text:
                out.append(
                    {
                        "request": text,
                        "acceptable": [tool.name],
                        "server": base.SERVER_OF[tool.name],
                        "style": persona,
                        "writer": args.generate,
                        "split": "tune" if j == 0 else "holdout",
                        "seed": seed,
                    }
                )
    backend.close()
    for k, r in enumerate(out, 1):
        r["id"] = k
    doc = {
        "description": (
            "Requests over the 40 tools of tool_gate_eval.json written by a local model "
            "under two personas unlike the trained encoder's training data; see "
            "tests/data/README.md and benches/tool_gate_other_writer.py."
        ),
        "licence": "Model output (Apache-2.0 model), collected for rampart (Apache-2.0).",
        "made_with": {
            "model": args.generate,
            "backend": described,
            "temperature": 0.7,
            "max_tokens": 120,
            "personas": PERSONAS,
            "seconds": round(time.perf_counter() - t0),
        },
        "requests": [{"id": r.pop("id"), **r} for r in out],
    }
    args.gen_out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(out)} requests to {args.gen_out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument("--md", type=Path, default=None, help="write the markdown tables here")
    ap.add_argument("--generate", default=None, help="llama.cpp alias or GGUF: write requests")
    ap.add_argument("--gen-out", type=Path, default=QWEN, help="where --generate writes")
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads")
    args = ap.parse_args(argv)
    return generate(args) if args.generate else evaluate(args)


if __name__ == "__main__":
    raise SystemExit(main())
