"""Step 1 of ``make toolgate-train``: the training and dev texts, from tests/data.

Run with the project's venv (it needs rampart for :func:`rampart.tools.tool_gate_text`,
so the tool texts are exactly what a registry embeds). Writes one JSON file:

* ``tools``: every tool of every server: name, server, role (split.py), gate text;
* ``queries``: author examples (tool_gate_examples*.json) and scale requests
  (tool_gate_scale.json, both halves) of the **train and dev servers only**, each
  with the tools that would serve it;
* ``data_sha256``: the sha256 of every file read, so the trained artefact names
  the exact data it came from.

Nothing of a held-out server is written except its tools' names and texts, which
the trainer never reads (it filters by role) and the evaluation does not need.

    python experiments/toolgate_train/prepare_data.py --out build/toolgate-data.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from rampart.tools import parse_tools, tool_gate_text

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from split import role  # noqa: E402

ROOT = HERE.parents[1]
DATA = ROOT / "tests" / "data"
SCALE = "tool_gate_scale.json"
EXAMPLE_FILES = (
    "tool_gate_examples.json",
    "tool_gate_examples_scale_a.json",
    "tool_gate_examples_scale_b.json",
)


def server_name(file: str) -> str:
    return file.removesuffix(".json").removeprefix("mcp_").removesuffix("_tools")


def build() -> dict[str, Any]:
    """The prepared data (see the module docstring), from the files in tests/data."""
    read: list[str] = []

    def load(name: str) -> Any:
        read.append(name)
        return json.loads((DATA / name).read_text(encoding="utf-8"))

    scale = load(SCALE)
    tools: list[dict[str, Any]] = []
    server_of: dict[str, str] = {}
    for tier in scale["tiers"]:
        for file in tier:
            raw = load(file)
            defs = raw["tools"] if "tools" in raw else raw["result"]["tools"]
            renamed = scale.get("renamed", {}).get(file, {})
            defs = [dict(t, name=renamed.get(t["name"], t["name"])) for t in defs]
            server = server_name(file)
            for schema in parse_tools({"tools": defs}):
                tools.append(
                    {
                        "name": schema.name,
                        "server": server,
                        "role": role(server),
                        "text": tool_gate_text(schema),
                    }
                )
                server_of[schema.name] = server

    queries: list[dict[str, Any]] = []
    for file in EXAMPLE_FILES:
        for name, examples in load(file)["examples"].items():
            server = server_of[name]
            if role(server) == "holdout":
                continue
            for text in examples:
                queries.append(
                    {"text": text, "acceptable": [name], "server": server, "source": "example"}
                )
    for r in scale["requests"]:
        server = server_of[r["acceptable"][0]]
        if role(server) == "holdout":
            continue
        ok = [a for a in r["acceptable"] if role(server_of[a]) != "holdout"]
        queries.append(
            {"text": r["request"], "acceptable": ok, "server": server, "source": "request"}
        )
    return {
        "description": "training and dev texts for the tool encoder (experiments/toolgate_train)",
        "data_sha256": {
            f: hashlib.sha256((DATA / f).read_bytes()).hexdigest() for f in sorted(set(read))
        },
        "tools": tools,
        "queries": queries,
    }


def dump(doc: dict[str, Any]) -> bytes:
    """The file's bytes: its sha256 is recorded in the trained artefact."""
    return json.dumps(doc, indent=1, ensure_ascii=False).encode("utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    doc = build()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(dump(doc))
    by_role: dict[str, int] = {}
    for q in doc["queries"]:
        key = role(q["server"])
        by_role[key] = by_role.get(key, 0) + 1
    n_tools = {k: sum(t["role"] == k for t in doc["tools"]) for k in ("train", "dev", "holdout")}
    print(f"{args.out}: tools {n_tools}, queries {by_role}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
