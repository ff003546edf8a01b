"""The context map: what one compile sends the model, drawn (``result.context_map()``).

Built from a :class:`~rampart.block.CompileResult` (with or without a conversation):

- the request's **composition** in the window: instructions, tools, messages kept,
  summaries, excerpts, cleared stubs, recalled results, the per-request overhead
  learned from usage, the reply's reserve and what is free, in tokens;
- the **cached prefix** and what a call **costs** under the provider's price table
  (:mod:`rampart.caching`: the calls replayed through :class:`PrefixCacheModel`),
  against sending every message as it was appended;
- one **row per block and per message**: its action (included, gated out, over
  budget, tools list; kept, cleared, excerpted, compacted, dropped, recalled, or
  whatever action a later policy adds) with its reason, tokens, score and rank.

Three renderings of the same numbers: :meth:`ContextMap.text` (a terminal grid, one
glyph per 1 % of the window, coloured when asked: ``rampart compile --map``),
:meth:`ContextMap.to_dict` (plain data: ``rampart compile --json``) and
:meth:`ContextMap.html` (one self-contained page with sortable tables, no network:
``rampart compile --html FILE``, for a bug report).

How the cost is worked out, and what it assumes: the *previous call* is this
request without its newest step (the model's latest message and what followed it),
byte-identical up to the first item this compile rewrote (``result.context.
rewrites``) and in its old form after it; the calls are within the table's TTL.
Both calls are replayed through the table's cache model (Anthropic: breakpoints
where ``anthropic_messages(cache=True)`` puts them), and the second one's bill is
*this call*. *Next call* is this request sent again from a warm cache: what every
later call pays for this prefix before its own new tokens, which are the same
whatever the strategy. *Sending everything* is the same pair of calls with every
item as appended (no clearing, no compaction, no recall).

Pure: it reads the result and changes nothing; it imports only what lies below it
(the result types, the conversation's items and counters, the price tables).
"""

from __future__ import annotations

import html as _html
import json
import math
import re
import textwrap
from collections import Counter as _Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from rampart.pricing import Chunk, PrefixCacheModel, PriceTable, price_table

# The result is read, never imported: block.py's CompileResult.context_map() calls
# build(), so importing rampart.block here would close a circle.
CompileResult = Any

__all__ = [
    "CATEGORIES",
    "CELLS",
    "PAGE_TEXT_CHARS",
    "ROW_TEXT_CHARS",
    "Category",
    "ContextMap",
    "CostRow",
    "ItemRow",
    "Part",
    "RowText",
    "build",
]

#: Glyphs in the grid: one per 1 % of the window.
CELLS = 100
#: The HTML page shows at most this much of one row's text (characters) ...
ROW_TEXT_CHARS = 4_000
#: ... and of all rows' texts together: a 50 MB tool result, or 100 000 messages,
#: never make a page that size (what is cut is noted where it is cut).
PAGE_TEXT_CHARS = 400_000


@dataclass(frozen=True, slots=True)
class Category:
    """One kind of content in the window, and how the map draws it."""

    key: str
    label: str
    glyph: str  # the grid's glyph where the terminal shows Unicode
    ascii: str  # ... and where it does not
    ansi: int  # a 256-colour terminal's foreground colour
    rgb: str  # the HTML page's colour


#: In the order the grid fills: the request's parts, then the reply's reserve and
#: what is free. Plain text tells them apart by glyph alone.
CATEGORIES: tuple[Category, ...] = (
    Category("instructions", "instructions", "█", "#", 68, "#4e79a7"),
    Category("tools", "tools", "▓", "T", 137, "#9c755f"),
    Category("kept", "messages kept", "▒", "=", 71, "#59a14f"),
    Category("summary", "summaries", "≡", "s", 139, "#b07aa1"),
    Category("excerpted", "excerpts", "▞", "e", 178, "#d4a82a"),
    Category("cleared", "cleared (stubs)", "░", "c", 246, "#a39a96"),
    Category("recalled", "recalled", "◆", "R", 208, "#f28e2b"),
    Category("other", "other messages", "▪", "?", 211, "#ff9da7"),
    Category("overhead", "per-request overhead", "▫", "o", 73, "#76b7b2"),
    Category("reply", "reply reserve", "○", "r", 167, "#e15759"),
    Category("free", "free", "·", ".", 240, "#d9d9d9"),
)
_BY_KEY = {c.key: c for c in CATEGORIES}

# A message's action -> the category its tokens count under ("kept" summaries apart).
_ACTION_CATEGORY = {
    "kept": "kept",
    "cleared": "cleared",
    "excerpted": "excerpted",
    "recalled": "recalled",
}
# Actions whose item is in the request in a shorter form or not at all: what they
# took out of the window is "removed".
_REMOVING = ("cleared", "excerpted", "compacted", "dropped")
_BLOCK_ACTIONS = {
    None: "included",
    "tools": "tools list",
    "gate": "gated out",
    "budget": "over budget",
}
_RELEVANCE = re.compile(r"\s*\(relevance [^)]*\)")


@dataclass(frozen=True, slots=True)
class Part:
    """One category's share of the window (tokens in the provider's units)."""

    category: str
    label: str
    tokens: int
    percent: float
    cells: int
    items: int
    note: str


@dataclass(frozen=True, slots=True)
class ItemRow:
    """One block or message of the compile, with what was done to it and why.

    ``tokens``: what it costs in this request (a block: with the separator before
    it; a message: its stub when cleared, 0 when compacted or dropped);
    ``original_tokens``: a message's cost as appended. ``score`` and ``rank``: a
    block's gate score and rank, a tool result's relevance and rank (None where
    nothing was scored).

    A message's provider names, so a reader finds their own call: ``call_id``,
    ``tool_name`` and ``arguments`` (the call's arguments as one line, at most
    120 characters) on a tool call, its result and a recall of it; None on text
    and on blocks (``name`` is kept as it was: the block's or the tool's name)."""

    type: str  # "block" or "message"
    index: int
    id: str
    name: str
    role: str
    kind: str
    action: str
    reason: str
    tokens: int
    original_tokens: int
    score: float | None
    rank: int | None
    category: str
    call_id: str | None = None
    tool_name: str | None = None
    arguments: str | None = None


@dataclass(frozen=True, slots=True)
class RowText:
    """What a row holds, for the page to show on click: ``label`` says which text
    it is (as sent, the stub sent in its place, ...), ``text`` is the whole of it
    (a reference to the string the compile holds; :meth:`ContextMap.html` shows a
    bounded preview)."""

    label: str
    text: str


@dataclass(frozen=True, slots=True)
class CostRow:
    """One request billed under the price table (tokens in the provider's units;
    cost in uncached-input-token equivalents)."""

    request: str  # "compiled" or "everything"
    tokens: int
    cached: int
    written: int
    uncached: int
    cost: float
    next_call_cost: float
    fits: bool


@dataclass(frozen=True)
class ContextMap:
    """What one compile sends: composition, cache and cost, and every item's row.

    Build it with ``result.context_map()``; ``str(m)`` or :meth:`text` draws it,
    :meth:`to_dict` gives the numbers, :meth:`html` one self-contained page.
    """

    window: int
    reply_tokens: int
    request_tokens: int
    free_tokens: int
    provider: str | None
    tokeniser: str | None
    scale: float
    constant: float
    parts: list[Part]
    blocks: list[ItemRow]
    messages: list[ItemRow]
    table: PriceTable
    costs: list[CostRow]
    cached_prefix_tokens: int
    cached_prefix_note: str
    removed_tokens: int
    everything_tokens: int
    rewrites: list[dict[str, Any]] = field(default_factory=list)
    stable_prefix_tokens: int = 0
    max_tokens: int | None = None
    query: str | None = None
    #: each row's text by "block:<id>" / "message:<id>" (the page's click; not in to_dict)
    texts: Mapping[str, RowText] = field(default_factory=dict, repr=False, compare=False)

    # ---- plain data ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Every number of the map as plain data (JSON-ready)."""
        t = self.table
        return {
            "window": self.window,
            "reply_tokens": self.reply_tokens,
            "request_tokens": self.request_tokens,
            "free_tokens": self.free_tokens,
            "provider": self.provider,
            "tokeniser": self.tokeniser,
            "scale": self.scale,
            "constant": self.constant,
            "max_tokens": self.max_tokens,
            "stable_prefix_tokens": self.stable_prefix_tokens,
            "composition": [asdict(p) for p in self.parts],
            "cache": {
                "table": t.name,
                "read": t.read,
                "write": t.write,
                "ttl_s": t.ttl_s,
                "min_tokens": t.min_tokens,
                "cached_prefix_tokens": self.cached_prefix_tokens,
                "cached_prefix": self.cached_prefix_note,
                "requests": [asdict(c) for c in self.costs],
            },
            "removed_tokens": self.removed_tokens,
            "everything_tokens": self.everything_tokens,
            "actions": dict(_Counter(r.action for r in self.messages)),
            "rewrites": list(self.rewrites),
            "query": self.query,
            "blocks": [asdict(r) for r in self.blocks],
            "messages": [asdict(r) for r in self.messages],
        }

    # ---- the terminal ------------------------------------------------------------------

    def __str__(self) -> str:
        return self.text()

    def text(self, color: bool = False, unicode: bool = True) -> str:
        """The map as terminal text: the grid with its legend, the cache and cost
        lines, and the actions in groups (every item: :meth:`to_dict`, :meth:`html`).
        ``color``: ANSI colours (callers decide: a terminal, and ``NO_COLOR`` unset);
        ``unicode=False``: ASCII glyphs only."""
        lines = [self._headline()]
        lines += self._grid_lines(color, unicode)
        lines.append(f"(one glyph: 1 % of the window, {_n(self.window / CELLS)} tokens)")
        lines += self._cost_lines()
        lines += self._action_lines()
        return "\n".join(lines) + "\n"

    def _headline(self) -> str:
        who = ", ".join(
            x
            for x in (
                self.provider,
                self.tokeniser or "",
                f"scale {self.scale:.2f}" if self.scale != 1.0 else "",
            )
            if x
        )
        free = (
            f"{_n(self.free_tokens)} free"
            if self.free_tokens >= 0
            else f"{_n(-self.free_tokens)} over"
        )
        return (
            f"request: {_n(self.request_tokens)} of {_n(self.window)} tokens"
            f"{f' ({who})' if who else ''}; reply {_n(self.reply_tokens)}; {free}"
        )

    def cells(self) -> list[str]:
        """The grid's cells, category keys in fill order (``CELLS`` of them)."""
        out: list[str] = []
        for p in self.parts:
            out += [p.category] * p.cells
        return out[:CELLS] + ["free"] * (CELLS - len(out))

    def _grid_lines(self, color: bool, unicode: bool) -> list[str]:
        cells = self.cells()
        legend = [self._legend(p, color, unicode) for p in self.parts]
        rows = max(10, len(legend))
        out = []
        for r in range(rows):
            row = cells[r * 10 : r * 10 + 10]
            grid = " ".join(_glyph(k, color, unicode) for k in row) if row else " " * 19
            extra = legend[r] if r < len(legend) else ""
            out.append(f"{grid}   {extra}".rstrip())
        return out

    def _legend(self, p: Part, color: bool, unicode: bool) -> str:
        g = _glyph(p.category, color, unicode)
        note = f"  {p.note}" if p.note else ""
        return f"{g} {p.label:<20} {_n(p.tokens):>7} {p.percent:5.1f} %{note}"

    def _cost_lines(self) -> list[str]:
        t = self.table
        ttl = "no expiry" if t.ttl_s is None else f"{t.ttl_s:g} s"
        head = (
            f"prompt cache, {t.name} table: cached input {t.read:g}x, writes {t.write:g}x, "
            f"{ttl}, from {_n(t.min_tokens)} tokens"
        )
        out = ["", head]
        out += _fit(
            f"  cached prefix: {_n(self.cached_prefix_tokens)} tokens, {self.cached_prefix_note}"
        )
        out.append(
            f"  {'':<20}{'tokens':>8}{'cached':>9}{'written':>9}{'this call':>11}{'next call':>11}"
        )
        names = {"compiled": "this request", "everything": "sending everything"}
        for c in self.costs:
            fits = "" if c.fits else "  over the window: refused"
            out.append(
                f"  {names.get(c.request, c.request):<20}{_n(c.tokens):>8}{_n(c.cached):>9}"
                f"{_n(c.written):>9}{_n(c.cost):>11}{_n(c.next_call_cost):>11}{fits}"
            )
        if self.costs:
            out.append(
                "  (cost in uncached-input-token equivalents; next call: this request again, "
                "from the cache)"
            )
        return out

    def _action_lines(self) -> list[str]:
        out = [""]
        if self.messages:
            counts = _Counter(r.action for r in self.messages)
            what = ", ".join(f"{n} {a}" for a, n in counts.most_common())
            removed = (
                f"; {_n(self.removed_tokens)} tokens out of the window"
                if self.removed_tokens
                else ""
            )
            out.append(f"messages: {len(self.messages)} items: {what}{removed}")
            groups = _groups(self.messages)
            for g in groups[:8]:
                out += ["  " + line for line in g]
            if len(groups) > 8:
                out.append(f"  … {len(groups) - 8} more groups (every item: --no-prompt or --html)")
            for r in self.rewrites:
                out += _fit(
                    f"  rewrite at item {r['at_item']} ({r['reason']}: {r['action']}, "
                    f"−{_n(r['tokens_removed'])} tok): the {_n(r['prefix_tokens'])} message "
                    "tokens before it stay cached"
                )
        out += _block_lines(self.blocks, self.max_tokens)
        return out

    # ---- the HTML page -----------------------------------------------------------------

    def html(self, title: str = "rampart context map") -> str:
        """One self-contained HTML page (inline CSS and JS, nothing fetched): the
        grid, the composition, the cache and cost, and every block and message in
        one table, sortable by any column."""
        d = self.to_dict()
        e = _html.escape
        css_cells = "".join(
            f'<div class="cell" data-category="{k}" style="background:{_BY_KEY[k].rgb}" '
            f'title="{e(_BY_KEY[k].label)}"></div>'
            for k in self.cells()
        )
        comp = "".join(
            f'<tr data-category="{e(p.category)}"><td><span class="sw" style="background:'
            f'{_BY_KEY[p.category].rgb}"></span>{e(p.label)}</td>'
            f'<td class="num" data-key="tokens">{p.tokens}</td>'
            f'<td class="num" data-key="percent">{p.percent}</td>'
            f'<td class="num" data-key="items">{p.items}</td><td>{e(p.note)}</td></tr>'
            for p in self.parts
        )
        cost = "".join(
            f'<tr data-request="{e(c.request)}">'
            + f"<td>{e(c.request)}</td>"
            + "".join(
                f'<td class="num" data-key="{k}">{_plain(getattr(c, k))}</td>'
                for k in ("tokens", "cached", "written", "uncached", "cost", "next_call_cost")
            )
            + f'<td data-key="fits">{"yes" if c.fits else "no"}</td></tr>'
            for c in self.costs
        )
        cols = (
            "type", "index", "id", "name", "call_id", "arguments", "role", "kind", "action",
            "reason", "tokens", "original_tokens", "score", "rank",
        )  # fmt: skip
        numeric = {"index", "tokens", "original_tokens", "score", "rank"}
        head = "".join(
            f'<th data-col="{i}" data-num="{int(c in numeric)}">{e(c)}</th>'
            for i, c in enumerate(cols)
        )
        rows = [*self.blocks, *self.messages]
        texts = self._page_texts(rows)
        body = "".join(
            f'<tr class="{e(r.type)}" data-category="{e(r.category)}" data-text="{k}" '
            'tabindex="0">'
            + "".join(
                f'<td data-key="{c}"{" class=num" if c in numeric else ""}>'
                f"{e(_plain(getattr(r, c)))}</td>"
                for c in cols
            )
            + "</tr>"
            for k, r in enumerate(rows)
        )
        rewrites = "".join(
            f"<li>from {e(r['at_item'])} ({e(r['reason'])}, {e(r['action'])}): "
            f"{r['tokens_removed']} tokens removed, {r['prefix_tokens']} before it stay cached</li>"
            for r in self.rewrites
        )
        summary = e(self._headline())
        # Inside <script>: no "<", ">" or "&" at all (JSON's \u escapes read the same).
        data = _script_json(d)
        return _PAGE.format(
            title=e(title),
            summary=summary,
            cells=css_cells,
            comp=comp,
            table=e(self.table.name),
            prefix=self.cached_prefix_tokens,
            prefix_note=e(self.cached_prefix_note),
            cost=cost,
            rewrites=f"<ul>{rewrites}</ul>" if rewrites else "<p>none</p>",
            head=head,
            body=body,
            data=data,
            texts=_script_json(texts, ensure_ascii=False),
        )

    def _page_texts(self, rows: Sequence[ItemRow]) -> list[dict[str, str]]:
        """Each row's text for the page, bounded: at most ``ROW_TEXT_CHARS`` of one
        row and ``PAGE_TEXT_CHARS`` of all, in the table's order, each cut noted."""
        left = PAGE_TEXT_CHARS
        out = []
        for r in rows:
            found = self.texts.get(f"{r.type}:{r.id}")
            what = _NOUNS.get(r.kind, r.kind or r.type)
            head = " · ".join(
                x
                for x in (
                    r.id,
                    f"{r.role} {what}" if r.kind == "text" else what,
                    r.name,
                    f"call {r.call_id}" if r.call_id else "",
                    r.action,
                    found.label if found is not None else "",
                )
                if x
            )
            head = _SURROGATES.sub("\ufffd", head)  # the page is UTF-8 (names: checked at append)
            if found is None:
                out.append({"head": head, "text": "", "note": "no text: not in this request"})
                continue
            text, note = _bounded(found.text, min(ROW_TEXT_CHARS, left), left < ROW_TEXT_CHARS)
            left -= len(text)
            out.append({"head": head, "text": text, "note": note})
        return out


# ---- building -----------------------------------------------------------------------------


def build(result: CompileResult, prices: str | PriceTable | None = None) -> ContextMap:
    """The map of ``result``. ``prices``: the price table to bill under (default:
    the compile's policy's, else OpenAI's)."""
    ctx = result.context
    tools = _tool_tokens(result)
    blocks = _block_rows(result)
    if ctx is None:
        return _blocks_only(result, blocks, tools, prices)
    table = price_table(prices if prices is not None else ctx.policy.prices)
    scale = float(ctx.scale)
    constant = float(ctx.constant)
    instructions = max(int(ctx.fixed_tokens) - tools, 0)
    items = {it.id: it for it in ctx.conversation.items}
    rows = [_message_row(m, items.get(m.id)) for m in ctx.message_report]
    texts = {**_block_texts(result), **_message_texts(rows, ctx.shown, items)}
    units = _Units(scale, result, instructions, tools)
    by_cat: dict[str, list[int]] = {}
    for r in rows:
        if r.tokens:
            by_cat.setdefault(r.category, []).append(units(r.tokens))
    # What the budget saw in total: anything the rows do not account for shows
    # apart, never silently in another category.
    missing = int(ctx.message_tokens) - sum(r.tokens for r in rows)
    if missing > 0:
        by_cat.setdefault("other", []).append(units(missing))
    reply = int(ctx.reply_tokens or 0)
    sizes = {
        "instructions": units.stable + units.task,
        "tools": units.tools,
        **{k: sum(v) for k, v in by_cat.items()},
        "overhead": math.ceil(constant),
    }
    request = sum(sizes.values())
    window = int(ctx.context_window) if ctx.context_window else request + reply
    removed = sum(r.original_tokens - r.tokens for r in rows if r.action in _REMOVING)
    notes = _message_notes(rows)
    notes["instructions"] = _instruction_note(blocks)
    notes["tools"] = _tools_note(result)
    counts = {
        "instructions": sum(1 for b in blocks if b.action == "included"),
        "tools": len(result.tools()),
        **{k: len(v) for k, v in by_cat.items()},
    }
    parts = _parts(sizes, counts, notes, window, reply)
    costs, prefix, note = _costs(ctx, rows, items, table, units, math.ceil(constant))
    everything = next((c.tokens for c in costs if c.request == "everything"), request)
    return ContextMap(
        window=window,
        reply_tokens=reply,
        request_tokens=request,
        free_tokens=window - reply - request,
        provider=ctx.policy.provider,
        tokeniser=ctx.conversation.tokeniser,
        scale=scale,
        constant=constant,
        parts=parts,
        blocks=blocks,
        messages=rows,
        table=table,
        costs=[replace(c, fits=c.tokens + reply <= window) for c in costs],
        cached_prefix_tokens=prefix,
        cached_prefix_note=note,
        removed_tokens=removed,
        everything_tokens=everything,
        rewrites=[asdict(r) for r in ctx.rewrites],
        stable_prefix_tokens=result.stable_prefix_tokens,
        max_tokens=result.max_tokens,
        query=getattr(ctx, "query", None),
        texts=texts,
    )


def _blocks_only(
    result: CompileResult, blocks: list[ItemRow], tools: int, prices: str | PriceTable | None
) -> ContextMap:
    """A compile without a conversation: the instructions and tools against the
    budget (the window, when there is one; else exactly what was sent)."""
    table = price_table(prices if prices is not None else "openai")
    instructions = result.total_tokens
    sizes = {"instructions": instructions, "tools": tools}
    request = instructions + tools
    window = request if result.max_tokens is None else max(result.max_tokens + tools, request)
    counts = {
        "instructions": sum(1 for b in blocks if b.action == "included"),
        "tools": len(result.tools()),
    }
    notes = {"instructions": _instruction_note(blocks), "tools": _tools_note(result)}
    parts = _parts(sizes, counts, notes, window, 0)
    # The previous call: the same registry for another task (the stable head cached).
    stable = min(result.stable_prefix_tokens, instructions)
    cur = _fixed_chunks(tools, stable, instructions - stable, "task", table.explicit)
    prev = _fixed_chunks(tools, stable, instructions - stable, "another task", table.explicit)
    model = PrefixCacheModel(table)
    model.request(prev)
    u = model.request(cur)
    nxt = model.estimate(cur)
    costs = [CostRow("compiled", u.total, u.cached, u.written, u.uncached, u.cost, nxt.cost, True)]
    return ContextMap(
        window=window,
        reply_tokens=0,
        request_tokens=request,
        free_tokens=window - request,
        provider=None,
        tokeniser=None,
        scale=1.0,
        constant=0.0,
        parts=parts,
        blocks=blocks,
        messages=[],
        table=table,
        costs=costs,
        cached_prefix_tokens=u.cached,
        cached_prefix_note="the tools and the instructions' stable head (the same for every task)",
        removed_tokens=0,
        everything_tokens=request,
        stable_prefix_tokens=result.stable_prefix_tokens,
        max_tokens=result.max_tokens,
        texts=_block_texts(result),
    )


def _tool_tokens(result: CompileResult) -> int:
    """Tokens of the tool schemas sent beside the prompt, as the compile step
    counts them (rampart.conversation.plan: the tool blocks' own counts)."""
    sel = result._sel
    n = 0
    for b in [*sel.included_blocks(), *sel.tools_only_blocks()]:
        raw = b.metadata_json
        if raw is not None and "tool_schema" in raw:
            n += b.token_count
    return n


def _gate_ranks(result: CompileResult) -> dict[int, int]:
    scored = sorted(
        (r for r in result.report if r.score is not None and r.gated),  # ungated: no place
        key=lambda r: (-(r.score or 0.0), r.index),
    )
    return {r.index: k for k, r in enumerate(scored, start=1)}


def _block_rows(result: CompileResult) -> list[ItemRow]:
    ranks = _gate_ranks(result)
    rows = []
    for r in result.report:
        action = _BLOCK_ACTIONS.get(r.reason, str(r.reason))
        reason = r.detail or ("" if r.gated else "ungated")
        if not r.gated and reason != "ungated":
            reason += "; ungated"
        rows.append(
            ItemRow(
                type="block",
                index=r.index,
                id=r.runtime_id,
                name=r.name,
                role="",
                kind="tool" if r.reason == "tools" else "block",
                action=action,
                reason=reason,
                tokens=r.cost if r.included else 0,
                original_tokens=r.cost,
                score=None if r.score is None else round(float(r.score), 4),
                rank=ranks.get(r.index),
                category="tools"
                if r.reason == "tools"
                else ("instructions" if r.included else "none"),
            )
        )
    return rows


def _message_row(m: Any, item: Any) -> ItemRow:
    action = str(getattr(m, "action", "kept"))
    kind = str(getattr(m, "kind", "") or "")
    tokens = int(getattr(m, "tokens", 0) or 0)
    if action == "kept" and kind == "summary":
        category = "summary"
    else:
        category = _ACTION_CATEGORY.get(action, "other" if tokens else "none")
    score = getattr(m, "score", None)
    name = ""
    if item is not None:
        name = item.tool_name or ""
    # The report's provider names; a report without them (another policy's rows)
    # still has the item's own.
    call_id = getattr(m, "call_id", None) or (item.call_id if item is not None else None)
    tool_name = getattr(m, "tool_name", None) or (name or None)
    return ItemRow(
        type="message",
        index=int(getattr(m, "index", 0) or 0),
        id=str(m.id),
        name=name,
        role=str(getattr(m, "role", "") or ""),
        kind=kind,
        action=action,
        reason=str(getattr(m, "reason", None) or ""),
        tokens=tokens,
        original_tokens=int(getattr(m, "original_tokens", tokens) or 0),
        score=None if score is None else round(float(score), 4),
        rank=getattr(m, "rank", None),
        category=category,
        call_id=call_id,
        tool_name=tool_name,
        arguments=getattr(m, "arguments", None),
    )


# What a row's text is, by the item's action (the page's label for it).
_TEXT_LABELS = {
    "kept": "as sent",
    "cleared": "the stub sent in its place",
    "excerpted": "its relevant lines, as sent",
    "recalled": "the recalled lines, as sent",
}


def _message_texts(
    rows: Sequence[ItemRow], shown: Sequence[Any], items: Mapping[str, Any]
) -> dict[str, RowText]:
    """Each message's text as this request sends it (the stub, the excerpt, the
    recalled lines, the text); one not sent, as appended."""
    sent = {s.item.id: s.content for s in shown}
    out = {}
    for r in rows:
        if r.id in sent:
            label = _TEXT_LABELS.get(r.action, "as sent")
            out[f"message:{r.id}"] = RowText(label, sent[r.id])
        elif r.id in items:
            out[f"message:{r.id}"] = RowText(
                f"not sent ({r.action}); as appended", items[r.id].content
            )
    return out


def _block_texts(result: CompileResult) -> dict[str, RowText]:
    """The blocks in the prompt and the tools list, as they are there (a block
    left out has no text in this request)."""
    sel = result._sel
    out = {
        f"block:{b.runtime_id}": RowText("in the prompt", b.content) for b in sel.included_blocks()
    }
    for b in sel.tools_only_blocks():
        out[f"block:{b.runtime_id}"] = RowText("in the tools list", b.content)
    return out


def _message_notes(rows: Sequence[ItemRow]) -> dict[str, str]:
    notes: dict[str, str] = {}
    by = _Counter(r.category for r in rows if r.tokens)
    cleared = [r for r in rows if r.action == "cleared"]
    if cleared:
        gone = sum(r.original_tokens - r.tokens for r in cleared)
        notes["cleared"] = f"{len(cleared)} stubs for {_n(gone)} tokens"
    ex = [r for r in rows if r.action == "excerpted"]
    if ex:
        notes["excerpted"] = f"{len(ex)} results cut to their relevant lines"
    if by.get("recalled"):
        notes["recalled"] = f"{by['recalled']} at the tail"
    if by.get("kept"):
        results = sum(1 for r in rows if r.category == "kept" and r.kind == "tool_result")
        notes["kept"] = f"{by['kept']} items ({results} tool result{'' if results == 1 else 's'})"
    if by.get("summary"):
        notes["summary"] = f"{by['summary']} summaries"
    return notes


def _instruction_note(blocks: Sequence[ItemRow]) -> str:
    total = sum(1 for b in blocks if b.kind == "block")
    n = sum(1 for b in blocks if b.action == "included")
    return f"{n} of {total} blocks"


def _tools_note(result: CompileResult) -> str:
    n = len(result.tools())
    return f"{n} tool{'' if n == 1 else 's'}" if n else ""


def _parts(
    sizes: Mapping[str, int],
    counts: Mapping[str, int],
    notes: Mapping[str, str],
    window: int,
    reply: int,
) -> list[Part]:
    """The categories with tokens, then the reply's reserve and what is free, each
    with its share of the grid: largest remainders, at least one cell for any
    category that has tokens (so a few stubs still show)."""
    shown = [(k, v) for k, v in ((c.key, sizes.get(c.key, 0)) for c in CATEGORIES) if v > 0]
    free = max(window - reply - sum(v for _, v in shown), 0)
    shown += [*([("reply", reply)] if reply else []), ("free", free)]
    cells = _cells([v for _, v in shown], window)
    out = []
    for (k, v), c in zip(shown, cells):
        out.append(
            Part(
                category=k,
                label=_BY_KEY[k].label,
                tokens=v,
                percent=round(100.0 * v / window, 1) if window else 0.0,
                cells=c,
                items=counts.get(k, 0),
                note=notes.get(k, ""),
            )
        )
    return out


def _cells(sizes: Sequence[int], window: int) -> list[int]:
    total = max(window, sum(sizes), 1)
    exact = [CELLS * s / total for s in sizes]
    cells = [math.floor(x) for x in exact]
    for i, s in enumerate(sizes):
        if s > 0 and cells[i] == 0:
            cells[i] = 1
    order = sorted(range(len(sizes)), key=lambda i: -(exact[i] - math.floor(exact[i])))
    k = 0
    while sum(cells) < CELLS and order:
        i = order[k % len(order)]
        if sizes[i] > 0:
            cells[i] += 1
        k += 1
        if k > 10 * CELLS:
            break
    while sum(cells) > CELLS:  # the minimum of one cell overfilled: take from the largest
        i = max(range(len(cells)), key=lambda j: cells[j])
        cells[i] -= 1
    return cells


# ---- the cost -----------------------------------------------------------------------------


def _fixed_chunks(
    tools: int, stable: int, task_part: int, task_key: str, explicit: bool
) -> list[Chunk]:
    """Tools, the instructions' stable head and their task-dependent rest, with
    Anthropic's breakpoints where ``anthropic_messages(cache=True)`` puts them."""
    out = []
    if tools:
        out.append(Chunk(("tools",), tools, explicit))
    if stable:
        out.append(Chunk(("system", "stable"), stable, explicit))
    if task_part:
        out.append(Chunk(("system", task_key), task_part, explicit))
    return out


def _new_step(rows: Sequence[ItemRow], items: Mapping[str, Any]) -> int:
    """Where this request's newest step starts: the model's latest message (and
    whatever followed it). The previous call ended just before it."""
    last = None
    for k in range(len(rows) - 1, -1, -1):
        if rows[k].role == "assistant":
            last = k
            break
    if last is None:
        return 0
    group = getattr(items.get(rows[last].id), "group", None)
    while (
        last > 0
        and rows[last - 1].role == "assistant"
        and getattr(items.get(rows[last - 1].id), "group", None) == group
    ):
        last -= 1
    return last


class _Units:
    """Counts in the provider's units: the conversation's counts times the learned
    scale, each chunk rounded up once, so the composition and the billed requests
    add up to the same totals."""

    def __init__(self, scale: float, result: CompileResult, instructions: int, tools: int) -> None:
        self.scale = scale
        total = result.total_tokens
        frac = min(result.stable_prefix_tokens / total, 1.0) if total else 1.0
        stable = round(instructions * frac)
        self.stable = self(stable)
        self.task = self(instructions - stable)
        self.tools = self(tools)

    def __call__(self, n: int) -> int:
        return math.ceil(n * self.scale) if n > 0 else 0


def _costs(
    ctx: Any,
    rows: Sequence[ItemRow],
    items: Mapping[str, Any],
    table: PriceTable,
    units: _Units,
    overhead: int,
) -> tuple[list[CostRow], int, str]:
    explicit = table.explicit
    head = ([Chunk(("overhead",), overhead)] if overhead else []) + _fixed_chunks(
        units.tools, units.stable, units.task, "task", explicit
    )
    new = _new_step(rows, items)
    first = {r.id: k for k, r in enumerate(rows)}
    rewrites = sorted(ctx.rewrites, key=lambda x: first.get(x.at_item, len(rows)))
    at = first.get(rewrites[0].at_item, len(rows)) if rewrites else None

    def chunks(seq: list[tuple[Any, int]]) -> list[Chunk]:
        out = list(head)
        for k, (key, n) in enumerate(seq):
            out.append(Chunk(key, n, explicit and k == len(seq) - 1))
        return out

    shown = [(k, r) for k, r in enumerate(rows) if r.tokens > 0]
    cur = chunks([((r.id, r.action, r.tokens), units(r.tokens)) for _, r in shown])
    prev_seq: list[tuple[Any, int]] = []
    for k, r in shown:
        if k >= new:
            break
        if at is not None and k >= at:  # its form before this compile's rewrite
            prev_seq.append((("before", r.id), units(r.original_tokens)))
        else:
            prev_seq.append(((r.id, r.action, r.tokens), units(r.tokens)))
    compiled = _bill(table, chunks(prev_seq) if new else None, cur, "compiled")
    every = [
        (k, r)
        for k, r in enumerate(rows)
        if r.kind not in ("recall", "summary") and r.action != "recalled"
    ]
    all_cur = chunks([(("all", r.id), units(r.original_tokens)) for _, r in every])
    all_prev = chunks([(("all", r.id), units(r.original_tokens)) for k, r in every if k < new])
    everything = _bill(table, all_prev if new else None, all_cur, "everything")
    if at is not None and (not new or at < new):
        rw = rewrites[0]
        note = (
            f"up to item {rw.at_item}, where this compile rewrote the body ({rw.reason}: "
            f"{rw.action})"
        )
    elif new:
        note = f"everything before the newest step (from item {rows[new].id} on)"
    else:
        note = "nothing: the first call of the conversation"
    return [compiled, everything], compiled.cached, note


def _bill(table: PriceTable, prev: list[Chunk] | None, cur: list[Chunk], name: str) -> CostRow:
    model = PrefixCacheModel(table)
    if prev:
        model.request(prev)
    u = model.request(cur)
    nxt = model.estimate(cur)
    return CostRow(name, u.total, u.cached, u.written, u.uncached, u.cost, nxt.cost, True)


# ---- text helpers -------------------------------------------------------------------------


def _n(x: float) -> str:
    """A count as the docs write it: digits grouped by spaces ("25 608")."""
    return f"{round(x):,}".replace(",", " ")


def _script_json(value: Any, ensure_ascii: bool = True) -> str:
    """``value`` as JSON to sit inside a <script> element: no "<", ">" or "&" at
    all (JSON's \\u escapes read the same), so no text can close the element."""
    return (
        json.dumps(value, ensure_ascii=ensure_ascii)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
    )


_SURROGATES = re.compile(r"[\ud800-\udfff]")


def _bounded(text: str, limit: int, page_spent: bool) -> tuple[str, str]:
    """The first ``limit`` characters of ``text`` (a lone surrogate as U+FFFD: the
    page is UTF-8) and a note of what was cut, "" when nothing was.
    ``page_spent``: the limit is what is left of the page's, not a row's."""
    if len(text) <= limit:
        return _SURROGATES.sub("\ufffd", text), ""
    rest = len(text) - limit
    # the lines the cut part runs over (the first one partly shown when cut mid-line)
    lines = text.count("\n", limit) + (0 if text.endswith("\n") else 1)
    why = (
        f"the page shows at most {_n(PAGE_TEXT_CHARS)} characters of text in all"
        if page_spent
        else f"the page shows at most {_n(ROW_TEXT_CHARS)} characters of a row"
    )
    word = "line" if lines == 1 else "lines"
    if not limit:
        return "", f"not shown: {_n(rest)} characters ({_n(lines)} {word}); {why}"
    shown = _SURROGATES.sub("\ufffd", text[:limit])
    return shown, f"… cut here: {_n(rest)} more characters ({_n(lines)} {word}) not shown; {why}"


def _plain(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(round(v, 4))
    return str(v)


def _glyph(key: str, color: bool, unicode: bool) -> str:
    c = _BY_KEY.get(key, _BY_KEY["other"])
    g = c.glyph if unicode else c.ascii
    return f"\x1b[38;5;{c.ansi}m{g}\x1b[0m" if color else g


def _ids(rows: Sequence[ItemRow]) -> str:
    if len(rows) <= 3:
        return ", ".join(r.id for r in rows)
    return f"{rows[0].id} … {rows[-1].id}"


_NOUNS = {
    "tool_result": "tool result",
    "tool_call": "tool call",
    "recall": "recall",
    "summary": "summary",
    "text": "text",
}
_WIDTH = 100  # the text view's widest line


def _fit(line: str, width: int = _WIDTH, indent: int = 4) -> list[str]:
    """``line`` wrapped at ``width``, continuation lines indented by ``indent``."""
    return textwrap.wrap(line, width, subsequent_indent=" " * indent, break_on_hyphens=False) or [
        line
    ]


def _groups(rows: Sequence[ItemRow]) -> list[list[str]]:
    """The messages' actions in groups of one action and one reason (relevance
    numbers aside), in order of first appearance: tool results, recalls,
    summaries and anything not simply kept (plain kept text is left out)."""
    groups: dict[tuple[str, str], list[ItemRow]] = {}
    for r in rows:
        if r.action == "kept" and r.kind not in ("tool_result", "summary"):
            continue
        key = (r.action, _RELEVANCE.sub("", r.reason).strip())
        groups.setdefault(key, []).append(r)
    out = []
    for (action, reason), rs in groups.items():
        kinds = {r.kind for r in rs}
        noun = _NOUNS.get(rs[0].kind, "item") if len(kinds) == 1 else "item"
        if len(rs) != 1:
            noun = "summaries" if noun == "summary" else noun + "s"
        names = _Counter(r.name for r in rs if r.name).most_common(2)
        tools = f" ({', '.join(n for n, _ in names)})" if names else ""
        scores = [r.score for r in rs if r.score is not None]
        rel = ""
        if scores:
            lo, hi = min(scores), max(scores)
            rel = f"relevance {lo:.2f}" + (f"–{hi:.2f}" if hi != lo else "")
        if len(rs) == 1 and reason != rs[0].reason:
            reason, rel = rs[0].reason, ""  # alone: its own words, numbers included
        if action in _REMOVING:
            delta = f"−{_n(sum(r.original_tokens - r.tokens for r in rs))}"
        else:
            delta = f"{_n(sum(r.tokens for r in rs))}"
        why = f": {reason}" if reason else ""
        if rel:
            why += f" ({rel})" if why else f": {rel}"
        line = f"{action:<9} {_ids(rs):<13} {delta:>8} tok  {len(rs)} {noun}{tools}{why}"
        out.append(_fit(line, _WIDTH - 2, 38))
    return out


def _block_lines(blocks: Sequence[ItemRow], max_tokens: int | None) -> list[str]:
    if not blocks:
        return []
    own = [b for b in blocks if b.kind == "block"]
    by = _Counter(b.action for b in own)
    budget = "" if max_tokens is None else f"{_n(max_tokens)}-token budget"
    parts = [
        f"{by.get('included', 0)} of {len(own)} in the prompt" + (f" ({budget})" if budget else "")
    ]
    if by.get("gated out"):
        parts.append(f"{by['gated out']} gated out")
    if by.get("over budget"):
        parts.append(f"{by['over budget']} over the budget")
    tools = sum(1 for b in blocks if b.kind == "tool")
    if tools:
        parts.append(f"{tools} tools in the tools list")
    lines = _fit("blocks: " + ", ".join(parts))
    inside = [b for b in own if b.action == "included"]
    if inside:
        # the prompt's order; the gate's score beside each name when a gate ran
        names = [b.name + (f" {b.score:.2f}" if b.score is not None else "") for b in inside]
        line = "  in: " + ", ".join(names)
        if len(line) > _WIDTH:
            kept, n = "  in: ", 0
            for name in names:
                tail = f", … {len(names) - n - 1} more"
                if len(kept) + len(name) + 2 + len(tail) > _WIDTH:
                    break
                kept += ("" if n == 0 else ", ") + name
                n += 1
            line = kept + f", … {len(names) - n} more"
        lines.append(line)
    out = [b for b in own if b.action not in ("included", "tools list")]
    if out:
        why = _Counter(b.action for b in out)
        lines.append(
            "  left out: "
            + ", ".join(f"{n} {a}" for a, n in why.most_common())
            + " (each block's rule: --no-prompt)"
        )
    return lines


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body{{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}}
h1{{font-size:1.3em}} h2{{font-size:1.1em;margin-top:1.5em}}
.grid{{display:grid;grid-template-columns:repeat(10,22px);gap:3px;float:left;margin:0 2em 1em 0}}
.cell{{width:22px;height:22px;border-radius:3px}}
.sw{{display:inline-block;width:12px;height:12px;margin-right:6px;border-radius:2px}}
table{{border-collapse:collapse}} td,th{{padding:2px 8px;border-bottom:1px solid #ddd;
text-align:left;vertical-align:top}}
.num{{text-align:right;font-variant-numeric:tabular-nums}}
th{{cursor:pointer;background:#f3f3f3;position:sticky;top:0}}
tr.block td{{background:#f7f9fc}} .clear{{clear:both}}
#items tbody tr{{cursor:pointer}} #items tbody tr.chosen td{{background:#fff3c4}}
#text{{position:fixed;left:0;right:0;bottom:0;max-height:45vh;overflow:auto;background:#fff;
border-top:2px solid #888;padding:.5em 1.5em;box-shadow:0 -2px 8px #0002}}
#text pre{{white-space:pre-wrap;word-break:break-word;margin:.3em 0;font-size:13px}}
#text-note{{color:#a33}} #text-close{{float:right}} #items{{margin-bottom:50vh}}
</style></head><body>
<h1>{title}</h1>
<p id="summary">{summary}</p>
<div class="grid" id="grid">{cells}</div>
<table id="composition"><thead><tr><th>category</th><th>tokens</th><th>%</th>
<th>items</th><th>note</th></tr></thead><tbody>{comp}</tbody></table>
<div class="clear"></div>
<h2>Prompt cache and cost ({table} price table)</h2>
<p>cached prefix: <span id="cached-prefix">{prefix}</span> tokens, {prefix_note}</p>
<table id="cost"><thead><tr><th>request</th><th>tokens</th><th>cached</th><th>written</th>
<th>uncached</th><th>this call</th><th>next call</th><th>fits</th></tr></thead>
<tbody>{cost}</tbody></table>
<p>Cost in uncached-input-token equivalents; next call: this request again, from the cache.</p>
<h2>Where this compile rewrote the body</h2>
{rewrites}
<h2>Every block and message (click a column to sort, a row to read its text)</h2>
<table id="items"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
<div id="text" hidden><button id="text-close" type="button">close</button>
<p id="text-head"></p><pre id="text-body"></pre><p id="text-note"></p></div>
<script type="application/json" id="data">{data}</script>
<script type="application/json" id="texts">{texts}</script>
<script>
(function(){{
  var t=document.getElementById("items");
  // A row's text: set as textContent, never parsed as HTML, whatever it holds.
  var texts=JSON.parse(document.getElementById("texts").textContent);
  var box=document.getElementById("text"), chosen=null;
  function show(tr){{
    var x=texts[+tr.dataset.text]; if(!x) return;
    document.getElementById("text-head").textContent=x.head;
    document.getElementById("text-body").textContent=x.text;
    document.getElementById("text-note").textContent=x.note;
    if(chosen) chosen.classList.remove("chosen");
    chosen=tr; tr.classList.add("chosen"); box.hidden=false;
  }}
  t.tBodies[0].addEventListener("click",function(ev){{
    var tr=ev.target.closest("tr"); if(tr) show(tr);
  }});
  t.tBodies[0].addEventListener("keydown",function(ev){{
    if(ev.key==="Enter"&&ev.target.tagName==="TR") show(ev.target);
  }});
  document.getElementById("text-close").addEventListener("click",function(){{
    box.hidden=true; if(chosen) chosen.classList.remove("chosen"); chosen=null;
  }});
  t.querySelectorAll("th").forEach(function(th){{
    th.addEventListener("click",function(){{
      var col=+th.dataset.col, num=th.dataset.num==="1", body=t.tBodies[0];
      var dir=th.dataset.dir==="asc"?-1:1; th.dataset.dir=dir===1?"asc":"desc";
      var rows=Array.prototype.slice.call(body.rows);
      rows.sort(function(a,b){{
        var x=a.cells[col].textContent, y=b.cells[col].textContent;
        if(num){{x=x===""?-Infinity:+x; y=y===""?-Infinity:+y; return dir*(x-y);}}
        return dir*x.localeCompare(y);
      }});
      rows.forEach(function(r){{body.appendChild(r);}});
    }});
  }});
}})();
</script>
</body></html>
"""
