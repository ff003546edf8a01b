"""The context map (``result.context_map()``, rampart.context_map): the window's
composition, the cached prefix and a call's cost, every item's row, drawn as text,
plain data and one self-contained HTML page that shows the same numbers."""

from __future__ import annotations

import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import rampart
from rampart import ContextPolicy, Conversation
from rampart.context_map import CATEGORIES, CELLS, ContextMap

from tests.conftest import DATA, ROOT, SEEDS

EXAMPLE = ROOT / "examples" / "conversations" / "release-notes.json"


def registry() -> rampart.BlockRegistry:
    reg = rampart.BlockRegistry.from_files([SEEDS])
    reg.load_tools(DATA / "mcp_git_tools.json", gated=False)
    reg.load_tools(DATA / "mcp_time_tools.json", gated=False)
    return reg


def example_result(**policy: Any) -> rampart.CompileResult:
    """The main job's compile (make compile), without the model: BM25 scores."""
    conv = Conversation.load(EXAMPLE)
    return registry().compile(
        max_tokens=2048,
        conversation=conv,
        context_window=32_000,
        reply_tokens=4096,
        policy=ContextPolicy(**policy),
        tools_in_prompt=False,
    )


@pytest.fixture(scope="module")
def result() -> rampart.CompileResult:
    return example_result()


@pytest.fixture(scope="module")
def cmap(result: rampart.CompileResult) -> ContextMap:
    return result.context_map()


# ---- the numbers ----------------------------------------------------------------------------


def test_composition_adds_up_to_the_window(cmap: ContextMap, result: Any) -> None:
    d = cmap.to_dict()
    parts = {p["category"]: p for p in d["composition"]}
    assert d["window"] == 32_000 and d["reply_tokens"] == 4096
    assert sum(p["tokens"] for p in d["composition"]) == d["window"]
    assert d["request_tokens"] + d["reply_tokens"] + d["free_tokens"] == d["window"]
    assert sum(p["cells"] for p in d["composition"]) == CELLS
    # every category with tokens shows, however small (26 stubs are ~3 %)
    assert all(p["cells"] >= 1 for p in d["composition"] if p["tokens"])
    assert {"instructions", "tools", "kept", "cleared", "recalled", "reply", "free"} <= set(parts)
    ctx = result.context
    # scale 1 (OpenAI): the parts are the compile step's own counts
    assert parts["instructions"]["tokens"] + parts["tools"]["tokens"] == ctx.fixed_tokens
    messages = sum(p["tokens"] for k, p in parts.items() if k in ("kept", "cleared", "recalled"))
    assert messages == ctx.message_tokens
    assert d["request_tokens"] == ctx.total_tokens
    assert parts["tools"]["items"] == len(result.tools())


def test_message_rows_follow_the_report(cmap: ContextMap, result: Any) -> None:
    report = result.message_report
    assert [r.id for r in cmap.messages] == [m.id for m in report]
    assert [r.action for r in cmap.messages] == [m.action for m in report]
    assert [r.tokens for r in cmap.messages] == [m.tokens for m in report]
    assert {r.action for r in cmap.messages} >= {"kept", "cleared", "recalled"}
    recalled = [r for r in cmap.messages if r.action == "recalled"]
    assert all(r.category == "recalled" and r.name for r in recalled)  # its tool's name
    cleared = [r for r in cmap.messages if r.action == "cleared"]
    assert cmap.removed_tokens == sum(r.original_tokens - r.tokens for r in cleared)
    assert len(cmap.blocks) == len(result.report)


def test_cost_replays_the_calls(cmap: ContextMap, result: Any) -> None:
    rows = {c.request: c for c in cmap.costs}
    compiled, everything = rows["compiled"], rows["everything"]
    assert compiled.tokens == cmap.request_tokens
    assert compiled.cached == cmap.cached_prefix_tokens
    assert compiled.cached + compiled.written + compiled.uncached == compiled.tokens
    ctx = result.context
    ids = [r.id for r in cmap.messages]
    if ctx.rewrites:
        # the cache holds the tools, instructions and messages up to the first item
        # this compile rewrote
        rw = min(ctx.rewrites, key=lambda x: ids.index(x.at_item))
        assert "rewrote" in cmap.cached_prefix_note and rw.at_item in cmap.cached_prefix_note
        expected = ctx.fixed_tokens + rw.prefix_tokens
    else:
        # ... or everything the previous call sent: all before the newest step
        m = re.search(r"from item (\S+) on", cmap.cached_prefix_note)
        assert m is not None, cmap.cached_prefix_note
        new = ids.index(m.group(1))
        assert cmap.messages[new].role == "assistant"
        expected = ctx.fixed_tokens + sum(r.tokens for r in cmap.messages[:new])
    assert expected - 128 < compiled.cached <= expected  # OpenAI caches in 128-token steps
    # OpenAI's table: cached input 0.1x, no write premium
    assert compiled.cost == pytest.approx(0.1 * compiled.cached + compiled.written)
    assert compiled.next_call_cost == pytest.approx(
        0.1 * (compiled.tokens - compiled.tokens % 128) + compiled.tokens % 128
    )
    # everything: every item as appended, no recall
    appended = sum(r.original_tokens for r in cmap.messages if r.action != "recalled")
    assert everything.tokens == ctx.fixed_tokens + appended == cmap.everything_tokens
    assert not everything.fits and compiled.fits
    assert everything.next_call_cost > compiled.next_call_cost


def test_anthropic_scale_and_breakpoints() -> None:
    m = example_result(provider="anthropic").context_map()
    d = m.to_dict()
    assert d["scale"] == pytest.approx(1.2) and d["cache"]["table"] == "anthropic"
    assert sum(p["tokens"] for p in d["composition"]) == d["window"]
    compiled = next(c for c in m.costs if c.request == "compiled")
    assert compiled.tokens == m.request_tokens
    # Anthropic's table: reads 0.1x, writes 1.25x; the next call reads what this wrote
    w = compiled
    assert w.cost == pytest.approx(0.1 * w.cached + 1.25 * w.written + w.uncached)
    assert w.next_call_cost < 0.2 * w.tokens


def test_dry_run_reports_and_records_nothing() -> None:
    conv = Conversation.load(EXAMPLE)
    before = len(conv.transformations), len(conv)
    r = registry().compile(
        max_tokens=2048,
        conversation=conv,
        context_window=32_000,
        reply_tokens=4096,
        policy=ContextPolicy(dry_run=True),
        tools_in_prompt=False,
    )
    m = r.context_map()
    assert (len(conv.transformations), len(conv)) == before
    assert m.to_dict()["actions"]["cleared"] >= 1


def test_first_call_and_no_window() -> None:
    conv = Conversation()
    conv.append({"role": "user", "content": "list the branches"})
    r = rampart.BlockRegistry.from_files([SEEDS / "core_rules.md"]).compile(conversation=conv)
    m = r.context_map()
    assert m.window == m.request_tokens and m.free_tokens == 0
    assert "first call" in m.cached_prefix_note
    compiled = m.costs[0]
    assert compiled.cached == 0 and compiled.written == compiled.tokens  # a cold cache


def test_a_compile_without_conversation() -> None:
    reg = rampart.BlockRegistry.from_files([SEEDS])
    m = reg.compile(max_tokens=1200).context_map()
    d = m.to_dict()
    assert d["window"] == 1200 and d["messages"] == [] and d["reply_tokens"] == 0
    assert sum(p["tokens"] for p in d["composition"]) == 1200
    assert {p["category"] for p in d["composition"]} == {"instructions", "free"}
    assert [b["action"] for b in d["blocks"]].count("over budget") > 0
    assert "stable head" in m.cached_prefix_note
    assert "blocks:" in m.text() and "messages:" not in m.text()


def test_unknown_actions_and_missing_fields_are_shown_generically(result: Any) -> None:
    """A policy may add actions and fields; the map reads what it finds."""
    r = example_result()
    ctx = r.context
    report = list(ctx.message_report)
    odd = report[3]
    # an action this module has never heard of, with no score/rank attributes at all
    report[3] = SimpleNamespace(
        id=odd.id,
        action="summarised",
        reason="folded into a note",
        tokens=odd.tokens,
        original_tokens=odd.original_tokens,
        index=odd.index,
        role=odd.role,
        kind=odd.kind,
    )
    ctx._report = report
    m = r.context_map()
    row = next(x for x in m.messages if x.id == odd.id)
    assert row.action == "summarised" and row.category == "other" and row.score is None
    assert "other" in {p.category for p in m.parts}
    assert "summarised" in m.text() and "summarised" in m.html()


# ---- the renderings -------------------------------------------------------------------------


def test_text_is_one_screen_and_plain_without_colour(cmap: ContextMap) -> None:
    text = cmap.text()
    lines = text.splitlines()
    assert len(lines) <= 45 and max(len(x) for x in lines) <= 100
    assert "\x1b[" not in text
    grid = [line[:19] for line in lines[1:11]]
    glyphs = {c.glyph for c in CATEGORIES}
    assert all(set(row.replace(" ", "")) <= glyphs for row in grid)
    assert sum(len(row.replace(" ", "")) for row in grid) == CELLS
    for word in ("instructions", "tools", "messages kept", "cleared", "recalled", "free"):
        assert word in text
    assert "cached prefix" in text and "sending everything" in text
    assert str(cmap) == text


def test_text_colour_and_ascii(cmap: ContextMap) -> None:
    assert "\x1b[38;5;" in cmap.text(color=True)
    plain = cmap.text(unicode=False)
    grid = "".join(line[:19] for line in plain.splitlines()[1:11])
    assert grid.isascii()


class _Tables(HTMLParser):
    """Rows of every table by id (cells by their data-key), the grid's cells, the
    JSON data block and anything that would fetch from the network."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[dict[str, str]]] = {}
        self.cells: list[str] = []
        self.external: list[str] = []
        self.data = ""
        self._table: str | None = None
        self._row: dict[str, str] | None = None
        self._key: str | None = None
        self._in_data = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for k in ("src", "href"):
            if a.get(k):
                self.external.append(f"{tag} {k}={a[k]}")
        if tag in ("link", "iframe", "img", "object", "embed"):
            self.external.append(tag)
        if tag == "table":
            self._table = a.get("id") or ""
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self._row = {k: v or "" for k, v in a.items() if k.startswith("data-")}
        elif tag == "td" and self._row is not None:
            self._key = a.get("data-key")
            if self._key:
                self._row[self._key] = ""
        elif tag == "div" and a.get("class") == "cell":
            self.cells.append(a.get("data-category") or "")
        elif tag == "script" and a.get("type") == "application/json":
            self._in_data = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            if any(not k.startswith("data-") for k in self._row):
                self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "td":
            self._key = None
        elif tag == "script":
            self._in_data = False

    def handle_data(self, data: str) -> None:
        if self._row is not None and self._key:
            self._row[self._key] += data
        if self._in_data:
            self.data += data


def _plain(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(round(v, 4))
    return str(v)


def check_page(page: str, d: dict[str, Any]) -> None:
    """The page shows the numbers of ``d`` (a map's to_dict, or the CLI's JSON)."""
    p = _Tables()
    p.feed(page)
    p.close()
    assert p.external == [], p.external  # self-contained: nothing to fetch
    assert "http://" not in page and "https://" not in page
    comp = p.tables["composition"]
    assert [r["data-category"] for r in comp] == [c["category"] for c in d["composition"]]
    assert [int(r["tokens"]) for r in comp] == [c["tokens"] for c in d["composition"]]
    assert [float(r["percent"]) for r in comp] == [c["percent"] for c in d["composition"]]
    cells = [c["category"] for c in d["composition"] for _ in range(c["cells"])]
    assert p.cells == cells
    cost = p.tables["cost"]
    assert [r["data-request"] for r in cost] == [c["request"] for c in d["cache"]["requests"]]
    for row, c in zip(cost, d["cache"]["requests"]):
        for k in ("tokens", "cached", "written", "uncached", "cost", "next_call_cost"):
            assert row[k] == _plain(c[k]), (k, row[k], c[k])
    rows = p.tables["items"]
    want = [*d["blocks"], *d["messages"]]
    assert len(rows) == len(want) > 0
    for row, r in zip(rows, want):
        for k in ("type", "id", "name", "action", "reason", "tokens", "score", "rank"):
            assert row[k] == _plain(r[k]), (k, row[k], r[k])
    assert json.loads(p.data) == d


def test_html_page_shows_the_same_numbers(cmap: ContextMap, tmp_path: Path) -> None:
    page = cmap.html(title="a <bug> report")
    assert page.startswith("<!DOCTYPE html>") and "a &lt;bug&gt; report" in page
    check_page(page, json.loads(json.dumps(cmap.to_dict())))


def test_html_escapes_what_items_hold() -> None:
    conv = Conversation()
    conv.append({"role": "user", "content": "</script><script>alert(1)</script>"})
    r = rampart.BlockRegistry.from_files([SEEDS / "core_rules.md"]).compile(conversation=conv)
    page = r.context_map().html()
    assert "<script>alert(1)" not in page
    check_page(page, json.loads(json.dumps(r.context_map().to_dict())))


def test_the_sort_script_parses(cmap: ContextMap, tmp_path: Path) -> None:
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("node not installed (the page's script is checked for syntax with it)")
    script = re.findall(r"<script>(.*?)</script>", cmap.html(), re.S)
    assert len(script) == 1
    (tmp_path / "sort.js").write_text(script[0])
    out = subprocess.run([node, "--check", str(tmp_path / "sort.js")], capture_output=True)
    assert out.returncode == 0, out.stderr


# ---- the example conversation ---------------------------------------------------------------


def test_example_conversation_is_the_recorded_run() -> None:
    """examples/conversations/release-notes.json is what make_release_notes.py
    builds: 30 calls answered with what the MCP servers really returned."""
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        import make_release_notes as build
    finally:
        sys.path.remove(str(EXAMPLE.parent))
    conv = Conversation.load(EXAMPLE)
    items = conv.items
    recorded = {
        o["text"] for o in json.loads((DATA / "mcp_tool_outputs.json").read_text())["outputs"]
    }
    results = [it for it in items if it.kind == "tool_result"]
    assert len(results) == 30 and all(it.content in recorded for it in results)
    assert items[-1].role == "user" and items[-1].content == build.FOLLOW_UP
    fresh = Conversation()
    fresh.append(build.messages())
    assert [(it.role, it.kind, it.content) for it in fresh.items] == [
        (it.role, it.kind, it.content) for it in items
    ]
    # the clearing steps the agent's own compiles recorded, and the window they kept
    assert sum(1 for t in conv.transformations if t.active) >= 3
    assert conv.shown_tokens < build.WINDOW < sum(it.tokens for it in items)
