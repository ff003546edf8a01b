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
from hypothesis import given, settings
from hypothesis import strategies as st
from rampart import ContextPolicy, Conversation
from rampart.context_map import CATEGORIES, CELLS, ContextMap
from rampart.conversation.items import one_line

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
    JSON blocks by id, every tag and attribute, and anything that would fetch from
    the network."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[dict[str, str]]] = {}
        self.cells: list[str] = []
        self.external: list[str] = []
        self.tags: list[str] = []
        self.attributes: set[str] = set()
        self.scripts: dict[str, str] = {}
        self._table: str | None = None
        self._row: dict[str, str] | None = None
        self._key: str | None = None
        self._in_data: str | None = None

    @property
    def data(self) -> str:
        return self.scripts.get("data", "")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append(tag)
        self.attributes |= set(a)
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
            self._in_data = a.get("id") or ""
            self.scripts[self._in_data] = ""

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
            self._in_data = None

    def handle_data(self, data: str) -> None:
        if self._row is not None and self._key:
            self._row[self._key] += data
        if self._in_data is not None:
            self.scripts[self._in_data] += data


def _plain(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(round(v, 4))
    return str(v)


def parse(page: str) -> _Tables:
    p = _Tables()
    p.feed(page)
    p.close()
    return p


def check_page(page: str, d: dict[str, Any]) -> None:
    """The page shows the numbers of ``d`` (a map's to_dict, or the CLI's JSON)."""
    p = parse(page)
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
        for k in ("type", "id", "name", "call_id", "arguments", "action", "reason", "tokens"):
            assert row[k] == _plain(r[k]), (k, row[k], r[k])
        assert (row["score"], row["rank"]) == (_plain(r["score"]), _plain(r["rank"]))
    assert json.loads(p.data) == d
    # one text per row, in the table's order, each row pointing at its own
    texts = json.loads(p.scripts["texts"])
    assert len(texts) == len(rows)
    assert [int(r["data-text"]) for r in rows] == list(range(len(rows)))
    assert all(t["head"].startswith(r["id"]) for t, r in zip(texts, want))


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


# ---- finding one's own call: provider ids, and each row's text ------------------------------

# The keys a row had before the provider ids came: consumers of --json read them.
ROW_KEYS = {
    "type", "index", "id", "name", "role", "kind", "action", "reason", "tokens",
    "original_tokens", "score", "rank", "category",
}  # fmt: skip


def test_rows_carry_the_provider_ids(cmap: ContextMap, result: Any) -> None:
    """A call, its result and a recall of it carry the call id, the tool's name and
    the call's arguments (one bounded line), beside the item id."""
    d = cmap.to_dict()
    items = {it.id: it for it in result.conversation.items}
    calls = {it.call_id: it for it in items.values() if it.kind == "tool_call"}
    assert all(ROW_KEYS | {"call_id", "tool_name", "arguments"} <= set(r) for r in d["messages"])
    assert all(ROW_KEYS <= set(r) for r in d["blocks"])
    seen = set()
    for row, m in zip(d["messages"], result.message_report):
        it = items[row["id"]]
        assert (m.call_id, m.tool_name, m.arguments) == (
            row["call_id"],
            row["tool_name"],
            row["arguments"],
        )
        if it.kind == "text":
            assert (row["call_id"], row["tool_name"], row["arguments"]) == (None, None, None)
            continue
        assert row["call_id"] == it.call_id and row["tool_name"] == it.tool_name == row["name"]
        # a result and a recall name their call's arguments, as the call sent them
        assert row["arguments"] == " ".join(calls[it.call_id].content.split())
        assert "\n" not in row["arguments"] and len(row["arguments"]) <= 120
        seen.add(row["kind"])
    assert seen == {"tool_call", "tool_result", "recall"}
    # the user's own call id finds its call, its result and the recall that brought it back
    recalled = next(r for r in d["messages"] if r["action"] == "recalled")
    found = [r["kind"] for r in d["messages"] if r["call_id"] == recalled["call_id"]]
    assert found == ["tool_call", "tool_result", "recall"]
    assert all(r["call_id"] is None and r["arguments"] is None for r in d["blocks"])


def test_long_and_odd_arguments_make_one_short_line() -> None:
    conv = Conversation()
    conv.append({"role": "user", "content": "search"})
    args = json.dumps({"q": "a\nb\u2028c\td\x1b[31m" + "x" * 1_000_000})
    conv.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_9", "type": "function", "function": {"name": "s", "arguments": args}}
            ],
        }
    )
    conv.append({"role": "tool", "tool_call_id": "call_9", "content": "nothing found"})
    r = rampart.BlockRegistry.from_files([SEEDS / "core_rules.md"]).compile(conversation=conv)
    rows = [x for x in r.context_map().messages if x.call_id == "call_9"]
    assert [x.kind for x in rows] == ["tool_call", "tool_result"]
    for x in rows:
        assert x.arguments is not None and len(x.arguments) == 120
        assert x.arguments.startswith('{"q": "a\\nb\\u2028c\\td\\u001b[31mxxx')
        assert x.arguments.endswith("x…") and x.arguments.isprintable()


@given(text=st.text(), limit=st.integers(1, 300))
@settings(max_examples=300, deadline=None)
def test_one_line_is_one_bounded_printable_line(text: str, limit: int) -> None:
    line = one_line(text, limit)
    assert len(line) <= limit and line.isprintable()  # the space is printable, no other
    assert "  " not in line and line == line.strip()
    line.encode("utf-8")  # no lone surrogate
    flat = " ".join(text.split())
    if len(flat) <= limit and len(text) <= 4 * limit and flat.isprintable():
        assert line == flat  # nothing to cut: the text itself, its spaces folded


def _texts(page: str) -> list[dict[str, str]]:
    return list(json.loads(parse(page).scripts["texts"]))


def test_the_page_holds_each_rows_text(cmap: ContextMap, result: Any) -> None:
    """The stub, the recalled lines, the text as sent; a block's text in the prompt."""
    page = cmap.html()
    texts = _texts(page)
    rows = [*cmap.blocks, *cmap.messages]
    sent = {s.item.id: s.content for s in result.context.shown}
    labels = {
        "kept": "as sent",
        "cleared": "the stub sent in its place",
        "recalled": "the recalled lines, as sent",
    }
    for row, t in zip(rows, texts):
        if row.type == "message":
            assert t["head"].startswith(row.id) and labels[row.action] in t["head"]
            assert t["text"] == sent[row.id][: len(t["text"])]
            assert bool(t["note"]) == (len(sent[row.id]) > len(t["text"]))
        if row.action == "cleared":
            assert t["text"].startswith("[tool result cleared to save context")
            assert f"call {row.call_id}" in t["head"] and f"call {row.call_id}" in t["text"]
        if row.action == "recalled":
            assert t["text"].startswith("[recalled for the current step")
    included = {b.runtime_id: b.content for b in result.included_blocks}
    for row, t in zip(rows, texts):
        if row.type == "block" and row.action == "included":
            assert t["text"] == included[row.id] and "in the prompt" in t["head"]
        elif row.type == "block" and row.action == "gated out":
            assert t["text"] == "" and t["note"]


# A stand-in for the browser's DOM, just enough for the page's script to run under
# node: the click shows the row's text through textContent, never as markup.
CLICK = r"""
const fs = require("fs");
const [script, texts, rows] = JSON.parse(fs.readFileSync(0, "utf8"));
const els = {};
function el(id) {
  return els[id] || (els[id] = {
    id, textContent: "", hidden: true, listeners: {}, dataset: {},
    classList: {add() {}, remove() {}},
    addEventListener(type, f) { this.listeners[type] = f; },
    set innerHTML(v) { throw new Error("markup set: " + id); },
  });
}
el("texts").textContent = texts;
const body = el("tbody");
el("items").querySelectorAll = () => [];
el("items").tBodies = [body];
global.document = {getElementById: el};
eval(script);
const out = [];
for (let k = 0; k < rows; k++) {
  const tr = {dataset: {text: String(k)}, classList: {add() {}, remove() {}}, tagName: "TR"};
  tr.closest = () => tr;
  body.listeners.click({target: tr});
  out.push([el("text").hidden, el("text-head").textContent, el("text-body").textContent,
            el("text-note").textContent]);
}
process.stdout.write(JSON.stringify(out));
"""


def click_every_row(page: str) -> list[list[Any]]:
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("node not installed (the page's script runs under it)")
    p = parse(page)
    script = re.findall(r"<script>(.*?)</script>", page, re.S)
    assert len(script) == 1
    for word in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert word not in script[0]
    n = len(p.tables["items"])
    out = subprocess.run(
        [node, "-e", CLICK],
        input=json.dumps([script[0], p.scripts["texts"], n]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return list(json.loads(out.stdout))


def test_a_click_shows_the_rows_text(cmap: ContextMap) -> None:
    page = cmap.html()
    shown = click_every_row(page)
    texts = _texts(page)
    assert len(shown) == len(texts) == len(cmap.blocks) + len(cmap.messages)
    for (hidden, head, text, note), t in zip(shown, texts):
        assert not hidden and (head, text, note) == (t["head"], t["text"], t["note"])


HOSTILE = (
    '</script><script>alert(1)</script><img src=x onerror="alert(2)">'
    "<!-- <script> --> ]]> &lt;b&gt; \u2028\u2029 \x00\x1b[31m"
)


def test_hostile_tool_output_stays_text() -> None:
    """A tool's output, name, call id and arguments that hold markup are shown as
    text: the page's tags, attributes and scripts are its own."""
    conv = Conversation()
    conv.append({"role": "user", "content": HOSTILE})
    conv.append(
        {
            "role": "assistant",
            "content": HOSTILE,
            "tool_calls": [
                {
                    "id": "c<b>1</b>",
                    "type": "function",
                    "function": {"name": "x<i>y", "arguments": json.dumps({"q": HOSTILE})},
                }
            ],
        }
    )
    conv.append({"role": "tool", "tool_call_id": "c<b>1</b>", "content": HOSTILE * 3})
    r = rampart.BlockRegistry.from_files([SEEDS / "core_rules.md"]).compile(conversation=conv)
    m = r.context_map()
    page = m.html()
    page.encode("utf-8")
    benign = parse(example_result().context_map().html())
    p = parse(page)
    assert set(p.tags) <= set(benign.tags) and p.tags.count("script") == 3
    assert p.attributes <= benign.attributes and "onerror" not in p.attributes
    assert "<script>alert" not in page and "<img" not in page and "<b>" not in page
    check_page(page, json.loads(json.dumps(m.to_dict())))
    texts = _texts(page)
    result_text = next(t for t in texts if "tool result" in t["head"])
    assert result_text["text"] == HOSTILE * 3  # verbatim, as text
    assert any(r["call_id"] == "c<b>1</b>" for r in p.tables["items"])
    shown = click_every_row(page)
    assert [s[2] for s in shown] == [t["text"] for t in texts]


def test_a_50_mb_result_makes_a_small_page() -> None:
    """The page shows a bounded preview of each row's text and says what it cut."""
    from rampart.context_map import PAGE_TEXT_CHARS, ROW_TEXT_CHARS

    conv = Conversation()
    conv.append({"role": "user", "content": "read the log"})
    line = "2026-12-01 14:30 worker 7: retry 3 of 5 <ok> & done\n"
    big = line * (50_000_000 // len(line))
    for k in range(3):
        call = {"id": f"c{k}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        conv.append({"role": "assistant", "content": None, "tool_calls": [call]})
        conv.append({"role": "tool", "tool_call_id": f"c{k}", "content": big if k == 1 else "ok"})
    conv.append({"role": "user", "content": "what failed?"})
    r = rampart.BlockRegistry.from_files([SEEDS / "core_rules.md"]).compile(conversation=conv)
    page = r.context_map().html()
    assert len(page.encode("utf-8")) < 1_000_000
    t = next(x for x in _texts(page) if len(x["text"]) == ROW_TEXT_CHARS)
    assert t["text"] == big[:ROW_TEXT_CHARS]
    rest = len(big) - ROW_TEXT_CHARS
    assert f"{rest:,} more characters".replace(",", " ") in t["note"]
    assert "at most 4 000 characters of a row" in t["note"]
    # many rows: the page's whole budget, then a note on each row left out
    conv2 = Conversation()
    conv2.append({"role": "user", "content": "go"})
    for k in range(150):
        call = {"id": f"c{k}", "type": "function", "function": {"name": "r", "arguments": "{}"}}
        conv2.append({"role": "assistant", "content": None, "tool_calls": [call]})
        conv2.append({"role": "tool", "tool_call_id": f"c{k}", "content": line * 200})
    r2 = rampart.BlockRegistry.from_files([SEEDS / "core_rules.md"]).compile(
        conversation=conv2, policy=ContextPolicy(clear_tool_results=False)
    )
    texts = _texts(r2.context_map().html())
    assert sum(len(x["text"]) for x in texts) == PAGE_TEXT_CHARS
    assert texts[-1]["text"] == "" and "characters of text in all" in texts[-1]["note"]


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
