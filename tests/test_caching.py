"""Prompt caching: price tables, the prefix-cache model, and CacheSession."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import rampart
from rampart.adapters import anthropic_messages, openai_chat
from rampart.caching import (
    PRICES,
    CacheSession,
    Chunk,
    PrefixCacheModel,
    PriceTable,
    SessionResult,
    price_table,
)

from tests.conftest import words

DATA = Path(__file__).resolve().parent / "data"
SEP = rampart.DEFAULT_SEPARATOR
TOPICS = [
    "python tests",
    "git rebase",
    "docker build",
    "sql migration",
    "css layout",
    "rust borrow",
]


def overlap_gate(task: str, blocks: Sequence[Any]) -> list[float]:
    """A real, deterministic relevance gate: the share of the task's words a block has."""
    want = set(re.findall(r"[a-z]+", task.lower()))
    return [
        len(want & set(re.findall(r"[a-z]+", b.content.lower()))) / (len(want) or 1) for b in blocks
    ]


class Clock:
    """A clock the test moves by hand (the session's TTL decisions read it)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def build(head_words: int = 1200, label: str | None = None) -> rampart.BlockRegistry:
    r = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None, label=label)
    r.write_block("Follow the house rules. " * (head_words // 4), "rules", gated=False)
    r.load_tools(DATA / "mcp_git_tools.json", gated=False)
    for i, topic in enumerate(TOPICS):
        r.write_block(f"Lesson {i} about {topic}: check the {topic} twice. " * 6, f"lesson_{i}")
    return r


@pytest.fixture
def creg() -> Iterator[rampart.BlockRegistry]:
    r = build()
    yield r
    r.release()


def session(reg: rampart.BlockRegistry, clock: Clock, **kw: Any) -> CacheSession:
    opts: dict[str, Any] = {"top_k": 2, "gate": overlap_gate, "calls_per_task": 5, "clock": clock}
    opts.update(kw)
    return reg.session(**opts)


def rendered(reg: rampart.BlockRegistry, ids: list[str]) -> str:
    blocks = [reg.get_by_id(i) for i in ids]
    return SEP.join(b.wrap_prefix + b.content + b.wrap_suffix for b in blocks)


# ---- price tables ---------------------------------------------------------------------------


def test_price_tables_are_data_with_sources() -> None:
    a, o, local = PRICES["anthropic"], PRICES["openai"], PRICES["local"]
    assert (a.read, a.write, a.ttl_s, a.min_tokens, a.explicit) == (0.1, 1.25, 300.0, 1024, True)
    assert (PRICES["anthropic-1h"].write, PRICES["anthropic-1h"].ttl_s) == (2.0, 3600.0)
    assert (o.write, o.min_tokens, o.granularity, o.explicit) == (1.0, 1024, 128, False)
    assert {PRICES[n].read for n in ("openai", "openai-gpt-4.1", "openai-gpt-4o")} == {
        0.1,
        0.25,
        0.5,
    }
    assert (local.read, local.scope, local.ttl_s) == (0.0, "last", None)
    for t in PRICES.values():
        assert "http" in t.source or "llama" in t.source, t.name
    assert price_table("openai") is o and price_table(a) is a
    with pytest.raises(rampart.InvalidArgumentError, match="unknown price table 'bard'"):
        price_table("bard")
    for bad in (
        {"read": -0.1},
        {"write": float("nan")},
        {"min_tokens": -1},
        {"granularity": 0},
        {"scope": "all"},
        {"ttl_s": 0},
    ):
        args: dict[str, Any] = {
            "name": "x",
            "read": 0.1,
            "write": 1.0,
            "ttl_s": 60.0,
            "min_tokens": 0,
            **bad,
        }
        with pytest.raises(rampart.InvalidArgumentError, match="PriceTable"):
            PriceTable(**args)
    assert a.cost(1000, 100, 10) == pytest.approx(100 + 125 + 10)
    assert (o.cacheable(1023), o.cacheable(1300), o.cacheable(1024)) == (0, 1280, 1024)


# ---- the prefix-cache model -------------------------------------------------------------------


def chunks(*spec: tuple[str, int, bool]) -> list[Chunk]:
    return [Chunk(k, n, bp) for k, n, bp in spec]


def test_anthropic_model_writes_at_breakpoints_and_reads_them_back() -> None:
    m = PrefixCacheModel("anthropic")
    head = ("head", 2000, True)
    first = m.request(chunks(head, ("task-a", 300, True), ("msg", 50, False)), now=0)
    assert (first.cached, first.written, first.uncached) == (0, 2300, 50)
    assert first.cost == pytest.approx(2300 * 1.25 + 50)
    same = m.request(chunks(head, ("task-a", 300, True), ("msg2", 60, False)), now=10)
    assert (same.cached, same.written, same.uncached) == (2300, 0, 60)
    other = m.request(chunks(head, ("task-b", 400, True), ("msg", 50, False)), now=20)
    assert (other.cached, other.written, other.uncached) == (2000, 400, 50)
    # no breakpoint, no cache: the same prefix is plain input
    bare = m.request(chunks(("head", 2000, False), ("task-b", 400, False)), now=30)
    assert (bare.cached, bare.written) == (0, 0) and bare.cost == 2400
    # entries expire five minutes after their last use ...
    late = m.request(chunks(head, ("task-b", 400, True)), now=20 + 301)
    assert late.cached == 0 and late.written == 2400
    # ... and a hit refreshes them
    assert m.request(chunks(head, ("task-c", 10, True)), now=20 + 301 + 299).cached == 2000


def test_anthropic_model_minimum_and_lookback() -> None:
    m = PrefixCacheModel("anthropic")
    short = m.request(chunks(("a", 500, True), ("b", 400, True)), now=0)
    assert (short.cached, short.written, short.uncached) == (0, 0, 900)  # below 1 024
    assert m.request(chunks(("a", 500, True), ("b", 400, True)), now=1).cached == 0
    # A hit is looked for at most 20 blocks before a breakpoint.
    m = PrefixCacheModel("anthropic")
    m.request(chunks(("head", 2000, True)), now=0)
    near = [("head", 2000, False), *((f"m{i}", 10, False) for i in range(19)), ("end", 1, True)]
    assert m.request(chunks(*near), now=1).cached == 2000
    far = [("head", 2000, False), *((f"n{i}", 10, False) for i in range(25)), ("end", 1, True)]
    assert m.request(chunks(*far), now=2).cached == 0


def test_automatic_and_local_models() -> None:
    m = PrefixCacheModel("openai")
    m.request(chunks(("head", 1500, False), ("a", 300, False)), now=0)
    hit = m.request(chunks(("head", 1500, False), ("b", 300, False)), now=1)
    assert (hit.cached, hit.written) == (1408, 392)  # 128-token steps
    assert hit.cost == pytest.approx(140.8 + 392)
    small = PrefixCacheModel("openai")
    small.request(chunks(("x", 1000, False), ("y", 10, False)), now=0)
    assert small.request(chunks(("x", 1000, False), ("z", 10, False)), now=1).cached == 0
    # llama-cpp-python: only the previous prompt's prefix is reused, and it is free.
    local = PrefixCacheModel("local")
    local.request(chunks(("head", 900, False), ("a", 100, False)), now=0)
    local.request(chunks(("other", 50, False)), now=1)
    back = local.request(chunks(("head", 900, False), ("a", 100, False)), now=2)
    assert back.cached == 0 and back.cost == 1000
    again = local.request(chunks(("head", 900, False), ("b", 100, False)), now=3)
    assert (again.cached, again.cost) == (900, 100)
    vllm = PrefixCacheModel("local-vllm")  # any earlier prefix, in 16-token blocks
    vllm.request(chunks(("head", 900, False), ("a", 100, False)), now=0)
    vllm.request(chunks(("other", 50, False)), now=1)
    assert vllm.request(chunks(("head", 900, False), ("c", 1, False)), now=2).cached == 896
    with pytest.raises(rampart.InvalidArgumentError, match=r"Chunk\.tokens"):
        local.request([Chunk("x", -1)])


def test_estimate_leaves_the_cache_alone_and_memory_is_bounded() -> None:
    m = PrefixCacheModel("openai")
    req = chunks(("head", 1500, False), ("a", 300, False))
    assert m.estimate(req, now=0).cached == 0 and len(m) == 0
    m.request(req, now=0)
    seen = len(m)
    assert m.estimate(req, now=1).cached == 1792 and len(m) == seen
    assert m.estimate(req, now=1000).cached == 0  # expired by then
    small = PrefixCacheModel("local-vllm", max_entries=50)
    for i in range(40):  # hostile: every request new, 10 chunks each
        small.request([Chunk(f"r{i}-{j}", 16) for j in range(10)], now=i)
    assert len(small) == 50
    with pytest.raises(rampart.InvalidArgumentError, match="max_entries"):
        PrefixCacheModel("local", max_entries=0)


def test_ideal_table_is_the_floor() -> None:
    ideal = PRICES["anthropic"].ideal()
    assert (ideal.read, ideal.write, ideal.min_tokens, ideal.explicit, ideal.ttl_s) == (
        0.1,
        1.0,
        0,
        False,
        None,
    )
    m = PrefixCacheModel(ideal)
    m.request(chunks(("head", 10, False), ("a", 5, False)), now=0)
    u = m.request(chunks(("head", 10, False), ("b", 5, False)), now=10**9)
    assert (u.cached, u.written, u.cost) == (10, 5, pytest.approx(6.0))


# ---- sessions -------------------------------------------------------------------------------


def test_first_compile_is_the_fresh_compile(creg: rampart.BlockRegistry) -> None:
    s = session(creg, Clock())
    r = s.compile("git rebase went wrong")
    plain = creg.compile(task_text="git rebase went wrong", top_k=2, gate=overlap_gate)
    assert isinstance(r, SessionResult) and r.decision == "fresh"
    assert r.prompt == plain.prompt and r.included == plain.included
    assert r.total_tokens == plain.total_tokens
    assert r.stable_prefix_chars == plain.stable_prefix_chars
    assert r.cached_tokens == 0 and r.uncached_tokens == r.total_tokens  # cold
    assert r.alternative_cost is None and r.kept == r.appended == r.dropped == []
    assert r.cache_points == [(plain.stable_prefix_chars, plain.stable_prefix_tokens)]
    assert r.compile.included == plain.included


def test_a_new_task_keeps_the_previous_blocks_and_appends(creg: rampart.BlockRegistry) -> None:
    clock = Clock()
    s = session(creg, clock)
    first = s.compile("git rebase went wrong")
    clock.now = 30
    second = s.compile("docker build is slow")
    fresh = creg.compile(task_text="docker build is slow", top_k=2, gate=overlap_gate)
    assert second.decision == "extend"
    assert second.prompt.startswith(first.prompt + SEP)  # the whole previous prompt is a prefix
    # every block the fresh compile selected is there, none twice
    assert set(fresh.included_ids) <= set(second.included_ids)
    assert len(set(second.included_ids)) == len(second.included_ids)
    assert second.included_ids[: len(first.included_ids)] == first.included_ids
    # rendered from the blocks' own fields, exactly as compile renders them
    assert second.prompt == rendered(creg, second.included_ids)
    assert second.appended == [n for n in fresh.included if n not in first.included]
    assert second.kept and set(second.kept) <= set(first.included) - set(fresh.included)
    # the prediction: the previous prompt is read, the rest written
    assert second.cached_tokens == first.total_tokens
    assert second.uncached_tokens == second.total_tokens - first.total_tokens
    t, n = PRICES["anthropic"], 5
    expected = t.cost(second.cached_tokens, second.uncached_tokens, 0) + (n - 1) * t.read * (
        second.total_tokens
    )
    assert second.cost == pytest.approx(expected)
    assert second.alternative_cost is not None and second.alternative_cost > second.cost
    heads = [p for p in second.cache_points]
    assert heads == [
        (fresh.stable_prefix_chars, fresh.stable_prefix_tokens),
        (len(first.prompt), first.total_tokens),
    ]


def test_wraps_render_as_compile_renders_them(creg: rampart.BlockRegistry) -> None:
    lesson = creg.get_by_name("lesson_2")[0].runtime_id
    creg.set_wrap(lesson, "<critical>\n", "\n</critical>")
    clock = Clock()
    s = session(creg, clock)
    s.compile("git rebase went wrong")
    r = s.compile("docker build is slow")
    assert "<critical>\nLesson 2" in r.prompt and r.prompt == rendered(creg, r.included_ids)
    assert r.decision == "extend"
    # the fresh compile renders the same block identically
    fresh = creg.compile(task_text="docker build is slow", top_k=2, gate=overlap_gate)
    piece = rendered(creg, [lesson])
    assert piece in fresh.prompt and piece in r.prompt


def test_expired_cache_or_changed_head_start_fresh(creg: rampart.BlockRegistry) -> None:
    clock = Clock()
    s = session(creg, clock)
    s.compile("git rebase went wrong")
    clock.now = 301  # past Anthropic's five minutes: nothing to keep warm
    late = s.compile("docker build is slow")
    assert late.decision == "fresh" and late.cached_tokens == 0
    clock.now = 330
    creg.write_block("A new standing rule for everyone. " * 3, "new_rule", gated=False, position=1)
    changed = s.compile("sql migration failed")
    assert changed.decision == "fresh"
    fresh = creg.compile(task_text="sql migration failed", top_k=2, gate=overlap_gate)
    assert changed.prompt == fresh.prompt and "new_rule" in changed.included


def test_evicted_or_edited_kept_block_is_not_kept(creg: rampart.BlockRegistry) -> None:
    clock = Clock()
    s = session(creg, clock)
    a = creg.write_agent_block("Lesson about css layout: grid first. " * 6, "run-1", "css_note")
    first = s.compile("css layout broke")
    assert "css_note" in first.included
    creg.update_block_content(a, "Lesson about css layout: flexbox first. " * 6)
    clock.now = 10
    second = s.compile("python tests fail")
    # the old text is not a prefix any more: the edited block is not kept as it was
    assert "grid first" not in second.prompt
    assert second.prompt == rendered(creg, second.included_ids)
    assert "lesson_0" in second.included
    creg.evict(creg.get_by_name("lesson_0")[0].runtime_id)
    clock.now = 20
    third = s.compile("rust borrow checker")
    assert "lesson_0" not in third.included and "lesson_0" in third.dropped
    assert third.prompt == rendered(creg, third.included_ids)


def test_budget_bounds_the_kept_prompt(creg: rampart.BlockRegistry) -> None:
    clock = Clock()
    plain = creg.compile(task_text="git rebase went wrong", top_k=2, gate=overlap_gate)
    budget = plain.total_tokens + 130  # room for about two more lessons
    s = session(creg, clock, max_tokens=budget)
    decisions = []
    for i, topic in enumerate(TOPICS):
        clock.now = 10.0 * i
        r = s.compile(f"{topic} problem")
        assert r.total_tokens <= budget
        fresh = creg.compile(budget, f"{topic} problem", top_k=2, gate=overlap_gate)
        assert set(fresh.included_ids) <= set(r.included_ids)
        decisions.append(r.decision)
    assert "extend" in decisions and decisions.count("fresh") >= 2


def test_price_table_decides(creg: rampart.BlockRegistry) -> None:
    # lesson_3 is relevant to both tasks: kept in place it is read, started afresh it
    # moves up and is processed again.
    tasks = ["git rebase and sql migration", "sql migration and rust borrow"]
    local = session(creg, Clock(), prices="local")
    first, second = (local.compile(t) for t in tasks)
    assert first.included[-2:] == ["lesson_1", "lesson_3"]
    assert second.compile.included[-2:] == ["lesson_3", "lesson_5"]
    assert second.decision == "extend" and second.included[-3:] == [
        "lesson_1",
        "lesson_3",
        "lesson_5",
    ]
    lesson_5 = creg.get_by_name("lesson_5")[0].cost + creg.count_tokens(SEP)
    assert second.cost == lesson_5 and second.alternative_cost == lesson_5 * 2
    # a cache that saves nothing never pays for carrying old blocks
    flat = PriceTable("flat", read=1.0, write=1.0, ttl_s=None, min_tokens=0)
    none = session(creg, Clock(), prices=flat)
    assert [none.compile(t).decision for t in tasks] == ["fresh", "fresh"]
    # the other tables weigh the same choice with their own numbers
    for name in ("anthropic", "openai-gpt-4o"):
        s = session(creg, Clock(), prices=name)
        r = [s.compile(t) for t in tasks][1]
        assert r.alternative_cost is not None and r.cost <= r.alternative_cost, name


def test_sessions_are_deterministic_and_reset(creg: rampart.BlockRegistry) -> None:
    tasks = [f"{t} problem" for t in TOPICS] * 2
    runs = []
    for _ in range(2):
        clock = Clock()
        s = session(creg, clock)
        out = []
        for i, t in enumerate(tasks):
            clock.now = 20.0 * i
            out.append(s.compile(t).prompt)
        runs.append(out)
    assert runs[0] == runs[1]
    clock = Clock()
    s = session(creg, clock)
    s.compile(tasks[0])
    s.reset()
    assert s.compile(tasks[1]).decision == "fresh"


def test_session_arguments_are_checked(creg: rampart.BlockRegistry) -> None:
    with pytest.raises(rampart.InvalidArgumentError, match="needs a gate"):
        creg.session()
    with pytest.raises(rampart.InvalidArgumentError, match="calls_per_task"):
        creg.session(top_k=2, calls_per_task=0)
    with pytest.raises(rampart.InvalidArgumentError, match="unknown price table"):
        creg.session(top_k=2, prices="nope")
    with pytest.raises(rampart.InvalidArgumentError, match="BlockRegistry"):
        CacheSession("reg", top_k=2)  # type: ignore[arg-type]


def test_one_session_from_many_threads(creg: rampart.BlockRegistry) -> None:
    s = creg.session(top_k=2, gate=overlap_gate, calls_per_task=3)
    errors: list[BaseException] = []
    results: list[SessionResult] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        try:
            for j in range(8):
                task = f"{TOPICS[(i + j) % len(TOPICS)]} problem"
                r = s.compile(task)
                fresh = r.compile
                assert set(fresh.included_ids) <= set(r.included_ids)
                assert r.prompt == rendered(creg, r.included_ids)
                with lock:
                    results.append(r)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and len(results) == 32


def test_session_on_a_shared_registry(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cache.db"
    a = rampart.BlockRegistry.open(url, "fleet", tokeniser=words, label=None)
    b = rampart.BlockRegistry.open(url, "fleet", tokeniser=words, label=None)
    try:
        a.write_block("Follow the house rules. " * 300, "rules", gated=False)
        for i, topic in enumerate(TOPICS):
            a.write_block(f"Lesson {i} about {topic}: check the {topic} twice. " * 6, f"l{i}")
        b.sync()
        prompts = []
        for reg in (a, b):
            clock = Clock()
            s = session(reg, clock, max_tokens=None)
            out = []
            for i, t in enumerate(["git rebase", "docker build", "sql migration"]):
                clock.now = 10.0 * i
                out.append(s.compile(t).prompt)
            prompts.append(out)
        assert prompts[0] == prompts[1]
    finally:
        a.close()
        b.close()


def test_session_result_goes_through_the_adapters(creg: rampart.BlockRegistry) -> None:
    clock = Clock()
    s = session(creg, clock)
    first = s.compile("git rebase went wrong")
    clock.now = 5
    r = s.compile("docker build is slow")
    body = anthropic_messages(r, [{"role": "user", "content": "go"}], cache=True, tools="all")
    texts = [blk["text"] for blk in body["system"]]
    assert "".join(texts) == r.prompt and len(texts) == 3
    assert texts[0] == r.prompt[: r.stable_prefix_chars]
    assert "".join(texts[:2]) == first.prompt  # the previous prompt ends a block
    assert all("cache_control" in blk for blk in body["system"])
    markers = json.dumps(body).count('"cache_control"')
    assert markers <= 4
    # with a breakpoint on the tools too there are five candidates: the kept
    # prefix gives way (the end-of-system breakpoint's lookback finds it), the
    # conversation's breakpoint does not
    low = anthropic_messages(
        r, [{"role": "user", "content": "go"}], cache=True, tools="all", min_cache_tokens=200
    )
    assert "cache_control" in low["tools"][-1]
    assert ["cache_control" in blk for blk in low["system"]] == [True, False, True]
    assert "cache_control" in low["messages"][-1]["content"][-1]
    chat = openai_chat(r, tools="allowed")
    names = [t["function"]["name"] for t in chat["tools"]]
    assert names == [t["function"]["name"] for t in r.registry_tools("openai")]
    assert [t["name"] for t in r.tools("anthropic")] == [
        n for n in r.included if n.startswith("git_")
    ]


# ---- the same choice in the integrations ------------------------------------------------------


def test_mcp_compile_context_tool_choice(creg: rampart.BlockRegistry) -> None:
    from rampart.mcp_server import tool_choice

    creg.load_tools(DATA / "mcp_time_tools.json")  # gated tools after the lessons
    r = creg.compile(task_text="convert the time zone", top_k=1, gate=overlap_gate)
    every = [t["name"] for t in r.registry_tools("mcp")]
    kept = [t["name"] for t in r.tools("mcp")]
    assert len(kept) < len(every)
    assert [t["name"] for t in tool_choice(r, "gated")["tools"]] == kept
    assert [t["name"] for t in tool_choice(r, "all")["tools"]] == every
    allowed = tool_choice(r, "allowed")
    assert [t["name"] for t in allowed["tools"]] == every and allowed["allowed_tools"] == kept
    assert "inputSchema" in allowed["tools"][0]
    with pytest.raises(rampart.InvalidArgumentError, match="tools must be one of"):
        tool_choice(r, "some")


def test_openai_agents_tools_all_keeps_every_tool_enabled() -> None:
    from tests.conftest import import_or_skip
    from tests.test_gate import HashingEmbedder

    agents = import_or_skip("agents", "agents")
    import anyio
    from rampart.integrations.openai_agents import RampartInstructions

    def weather(city: str) -> str:
        """Current weather conditions and temperature forecast for a city."""
        return city

    def email(to: str) -> str:
        """Send an email message to a recipient address."""
        return to

    tools = [agents.function_tool(f) for f in (weather, email)]
    reg = rampart.BlockRegistry(embedding_model=HashingEmbedder())
    reg.write_block("Report temperatures in degrees Celsius.", "units", gated=False)
    ctx = agents.RunContextWrapper(context="weather forecast for a city")

    async def enabled(instr: RampartInstructions) -> list[bool]:
        return [bool(await t.is_enabled(ctx, None)) for t in instr.gate(tools)]

    assert anyio.run(enabled, RampartInstructions(reg, top_k=1)) == [True, False]
    assert anyio.run(enabled, RampartInstructions(reg, top_k=1, tools="all")) == [True, True]
    with pytest.raises(rampart.InvalidArgumentError, match="allowed_tools"):
        RampartInstructions(reg, top_k=1, tools="allowed")
    reg.release()
