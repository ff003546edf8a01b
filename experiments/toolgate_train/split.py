"""The server-level split of the tool-gate data (docs/tool-gate.md, "A trained encoder").

Whole MCP servers are either trained on or held out: a held-out server's tools, its
author examples and every request meant for it are never seen in training.

* **holdout**: the six servers of the 40-tool evaluation sets (tool_gate_eval.json,
  tool_gate_indirect.json, tool_gate_fsgit.json), so those sets are reported as
  they are; and Redis, Chroma and Zotero from the scale set, chosen (before any
  training run) as servers with no near twin among the training servers (a
  key-value store, a vector database, a reference manager), so the 479-tool
  measurement has held-out requests beyond the 40 tools.
* **dev**: Obsidian, never trained on either; the only set the recipe's choices
  (epochs, learning rate) may look at.
* **train**: the other eight servers (Excel, arXiv, Wikipedia, Elasticsearch,
  OpenSearch, tree-sitter, Atlassian, Google Workspace): 355 tools.
"""

from __future__ import annotations

HOLDOUT = (
    "filesystem",
    "git",
    "memory",
    "time",
    "fetch",
    "sqlite",
    "redis",
    "chroma",
    "zotero",
)
DEV = ("obsidian",)
TRAIN = (
    "excel",
    "arxiv",
    "wikipedia",
    "elasticsearch",
    "opensearch",
    "tree_sitter",
    "atlassian",
    "workspace",
)


def role(server: str) -> str:
    """ "train", "dev" or "holdout" for a server name (``mcp_NAME_tools.json``)."""
    if server in TRAIN:
        return "train"
    if server in DEV:
        return "dev"
    if server in HOLDOUT:
        return "holdout"
    raise KeyError(f"server {server!r} is in no split")
