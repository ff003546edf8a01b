"""Compile: ordered walk, budget cut, separator and wrap costs, gate, report, dry run."""

from __future__ import annotations

import pytest
import rampart

from tests.conftest import add, words


def test_empty_registry_compiles_to_nothing(reg: rampart.BlockRegistry) -> None:
    res = reg.compile(max_tokens=100)
    assert res.prompt == ""
    assert res.total_tokens == 0
    assert res.included == [] and res.excluded == [] and res.report == []


def test_prompt_joins_in_registry_order_with_default_separator(
    reg: rampart.BlockRegistry,
) -> None:
    for name in ("a", "b", "c"):
        reg.write_block(f"content of {name}", name)
    res = reg.compile()
    assert res.prompt == rampart.DEFAULT_SEPARATOR.join(
        ["content of a", "content of b", "content of c"]
    )
    assert res.included == ["a", "b", "c"]
    sep = words(rampart.DEFAULT_SEPARATOR)
    assert res.total_tokens == 9 + 2 * sep
    assert res.costs == [3, 3 + sep, 3 + sep]


def test_exact_fit_and_one_short(reg: rampart.BlockRegistry) -> None:
    for name in ("a", "b", "c"):
        add(reg, name, 10)
    # cost: 10 + (1 + 10) + (1 + 10), the separator "||" counting one word-token
    assert reg.compile(max_tokens=32, separator="||").included == ["a", "b", "c"]
    res = reg.compile(max_tokens=31, separator="||")
    assert res.included == ["a", "b"]
    assert res.total_tokens == 21
    assert res.excluded == ["c"]


def test_walk_stops_at_first_block_that_does_not_fit(reg: rampart.BlockRegistry) -> None:
    add(reg, "small", 5)
    add(reg, "huge", 100)
    add(reg, "tiny", 1)
    res = reg.compile(max_tokens=20, separator=" ")
    assert res.included == ["small"]
    assert res.excluded == ["huge", "tiny"], "order decides; no skipping ahead"
    by_name = {r.name: r for r in res.report}
    assert by_name["huge"].reason == "budget" and "exceeds" in by_name["huge"].detail
    assert by_name["tiny"].reason == "budget" and "stopped at block 'huge'" in (
        by_name["tiny"].detail
    )
    assert by_name["small"].included and by_name["small"].reason is None


def test_first_block_too_big(reg: rampart.BlockRegistry) -> None:
    add(reg, "big", 50)
    add(reg, "small", 1)
    res = reg.compile(max_tokens=49)
    assert res.prompt == "" and res.total_tokens == 0
    assert res.excluded == ["big", "small"]
    assert res.report[0].cost == 50


def test_zero_budget(reg: rampart.BlockRegistry) -> None:
    add(reg, "a", 1)
    assert reg.compile(max_tokens=0).included == []


def test_separator_cost_counts_against_budget(reg: rampart.BlockRegistry) -> None:
    add(reg, "a", 5)
    add(reg, "b", 5)
    sep = "one two three four"  # 4 word-tokens
    assert reg.compile(max_tokens=13, separator=sep).included == ["a"]
    res = reg.compile(max_tokens=14, separator=sep)
    assert res.included == ["a", "b"] and res.total_tokens == 14


def test_wrap_text_is_rendered_and_costs_tokens(reg: rampart.BlockRegistry) -> None:
    rid = add(reg, "a", 3)
    add(reg, "b", 3)
    reg.set_wrap(rid, "<critical> ", " </critical>")
    block = reg.get_by_id(rid)
    assert block.wrap_prefix == "<critical> " and block.wrap_suffix == " </critical>"
    assert block.cost == 5
    res = reg.compile(separator="\n")
    assert res.prompt == "<critical> a0 a1 a2 </critical>\nb0 b1 b2"
    assert res.total_tokens == 5 + 3  # "\n" is zero word-tokens
    assert reg.compile(max_tokens=4).included == []
    reg.set_wrap(rid)  # empty wrap removes it
    assert reg.get_by_id(rid).cost == 3


def test_access_counts_only_for_emitted_blocks(reg: rampart.BlockRegistry) -> None:
    a = add(reg, "a", 5)
    b = add(reg, "b", 50)
    reg.compile(max_tokens=10)
    reg.compile(max_tokens=10)
    assert reg.get_by_id(a).access_count == 2
    assert reg.get_by_id(b).access_count == 0


def test_dry_run_matches_compile_and_changes_nothing(reg: rampart.BlockRegistry) -> None:
    ids = [add(reg, n, k) for n, k in (("a", 4), ("b", 6), ("c", 8))]
    dry = reg.compile_dry_run(max_tokens=15, separator="|")
    assert [reg.get_by_id(i).access_count for i in ids] == [0, 0, 0]
    res = reg.compile(max_tokens=15, separator="|")
    assert dry.included == list(zip(res.included, res.costs))
    assert dry.included == [("a", 4), ("b", 7)]
    assert dry.excluded == res.excluded == ["c"]
    assert dry.total_tokens == res.total_tokens == 11
    assert [r.reason for r in dry.report] == [None, None, "budget"]


def test_compile_never_reorders(reg: rampart.BlockRegistry) -> None:
    ids = [add(reg, n, 2) for n in "abcde"]
    reg.compile(max_tokens=3)
    assert reg.runtime_ids() == ids


def test_default_max_tokens_applies() -> None:
    r = rampart.BlockRegistry(tokeniser=words, default_max_tokens=5)
    add(r, "a", 3)
    add(r, "b", 3)
    assert r.compile().included == ["a"]
    assert r.compile(max_tokens=100).included == ["a", "b"]
    assert r.compile().max_tokens == 5


@pytest.mark.parametrize("bad", [-1, 1.5, "10", True])
def test_bad_budget_is_a_value_error(reg: rampart.BlockRegistry, bad: object) -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        reg.compile(max_tokens=bad)  # type: ignore[arg-type]


def _keyword_gate(task: str, blocks: object) -> list[float]:
    return [1.0 if task in b.content else 0.0 for b in blocks]  # type: ignore[attr-defined]


def test_gate_callable_with_threshold(reg: rampart.BlockRegistry) -> None:
    reg.write_block("use git status first", "git")
    reg.write_block("format with black", "style")
    reg.write_block("git commit messages are imperative", "commits")
    res = reg.compile(task_text="git", relevance_threshold=0.5, gate=_keyword_gate)
    assert res.included == ["git", "commits"]
    assert res.excluded == ["style"]
    style = next(r for r in res.report if r.name == "style")
    assert style.reason == "gate" and style.score == 0.0
    assert next(r for r in res.report if r.name == "git").score == 1.0


def test_gate_top_k_ties_keep_registry_order(reg: rampart.BlockRegistry) -> None:
    for n in "abcd":
        reg.write_block(n, n)
    scores = {"a": 0.2, "b": 0.9, "c": 0.9, "d": 0.9}

    def gate(task: str, blocks: object) -> list[float]:
        return [scores[b.semantic_name] for b in blocks]  # type: ignore[attr-defined]

    assert reg.compile(task_text="t", top_k=2, gate=gate).included == ["b", "c"]
    assert reg.compile(task_text="t", top_k=0, gate=gate).included == []
    both = reg.compile(task_text="t", top_k=3, relevance_threshold=0.5, gate=gate)
    assert both.included == ["b", "c", "d"]


def test_gated_blocks_then_budget(reg: rampart.BlockRegistry) -> None:
    add(reg, "x_one", 5)
    add(reg, "y_two", 5)
    add(reg, "x_three", 5)

    def gate(task: str, blocks: object) -> list[float]:
        return [1.0 if b.semantic_name.startswith("x") else 0.0 for b in blocks]  # type: ignore[attr-defined]

    res = reg.compile(max_tokens=8, task_text="t", relevance_threshold=0.5, gate=gate)
    assert res.included == ["x_one"]
    reasons = {r.name: r.reason for r in res.report}
    assert reasons == {"x_one": None, "y_two": "gate", "x_three": "budget"}


def test_gate_needs_a_task(reg: rampart.BlockRegistry) -> None:
    with pytest.raises(ValueError, match="task"):
        reg.compile(top_k=3)
    with pytest.raises(ValueError, match="task"):
        reg.compile_dry_run(relevance_threshold=0.3)


def test_gate_returning_wrong_length_or_nan(reg: rampart.BlockRegistry) -> None:
    reg.write_block("a", "a")
    with pytest.raises(ValueError, match="1 blocks"):
        reg.compile(task_text="t", top_k=1, gate=lambda t, b: [1.0, 2.0])
    with pytest.raises(ValueError, match="expected a number"):
        reg.compile(task_text="t", top_k=1, gate=lambda t, b: [float("nan")])


def test_default_gate_without_embedding_model_is_a_clear_error(
    reg: rampart.BlockRegistry,
) -> None:
    reg.write_block("a", "a")
    with pytest.raises(rampart.RampartError, match="no embedding model"):
        reg.compile(task_text="t", top_k=1)


class _BagOfWords:
    """A deterministic embedding model: counts of a fixed vocabulary."""

    vocab = ("git", "test", "style", "commit", "file")

    def encode(self, text: str) -> list[float]:
        low = text.lower()
        return [float(low.count(w)) for w in self.vocab]


def test_embedding_model_drives_default_gate_and_find_relevant() -> None:
    r = rampart.BlockRegistry(embedding_model=_BagOfWords(), tokeniser=words)
    r.write_block("run the test suite", "tests")
    r.write_block("git commit with a message", "commits")
    r.write_block("style guide", "style")
    hits = r.find_relevant("git commit", top_k=2)
    assert [b.semantic_name for b, _ in hits] == ["commits", "tests"]
    assert hits[0][1] == pytest.approx(1.0)
    res = r.compile(task_text="git commit", top_k=1)
    assert res.included == ["commits"]
    # A block written after the first gate is embedded before the next one.
    r.write_block("git rebase and git commit", "late")
    assert "late" in r.compile(task_text="git", top_k=2).included
    res = r.compile(task_embedding=[1.0, 0, 0, 0, 0], relevance_threshold=0.5)
    assert set(res.included) == {"commits", "late"}
    # A content change is re-embedded before the next gate.
    tests_id = r.get_by_name("tests")[0].runtime_id
    r.update_block_content(tests_id, "git git git")
    assert r.find_relevant("git", top_k=1)[0][0].semantic_name == "tests"


def test_result_report_covers_every_block_once(reg: rampart.BlockRegistry) -> None:
    for k in range(10):
        add(reg, f"b{k}", k + 1)
    res = reg.compile(max_tokens=20)
    assert [r.index for r in res.report] == list(range(10))
    assert [r.name for r in res.report if r.included] == res.included
    assert [r.name for r in res.report if not r.included] == res.excluded
    assert sum(r.cost for r in res.report if r.included) == res.total_tokens
    assert len(res) == len(res.included)
    assert [b.semantic_name for b in res.included_blocks] == res.included
    assert res.included_ids == [b.runtime_id for b in res.included_blocks]


def test_result_is_stable_after_registry_changes(reg: rampart.BlockRegistry) -> None:
    ids = [add(reg, n, 2) for n in "abc"]
    res = reg.compile(max_tokens=3)
    reg.evict(ids[2])
    reg.write_block("new", "d")
    assert res.excluded == ["b", "c"], "the report describes the registry as compiled"


def test_repeat_compiles_reflect_every_change(reg: rampart.BlockRegistry) -> None:
    """The binding reuses the last prompt while nothing that shapes it changed;
    every kind of change must still show up in the next compile."""
    a = reg.write_agent_block("alpha one", "run", "a")
    b = reg.write_agent_block("beta two", "run", "b")

    def prompt(**kw: object) -> str:
        return reg.compile(separator="|", **kw).prompt  # type: ignore[arg-type]

    assert prompt() == "alpha one|beta two"
    assert prompt() == "alpha one|beta two"
    reg.update_block_content(a, "alpha changed")
    assert prompt() == "alpha changed|beta two"
    reg.set_wrap(b, "<", ">")
    assert prompt() == "alpha changed|<beta two>"
    reg.promote(b, to_front=True)
    assert prompt() == "<beta two>|alpha changed"
    reg.update_priority(a, 0.9)  # a new version of the block, same text
    assert prompt() == "<beta two>|alpha changed"
    assert prompt(max_tokens=4) == "<beta two>"
    reg.write_block("gamma three four", "c")  # beyond that budget
    assert prompt(max_tokens=4) == "<beta two>"
    assert prompt() == "<beta two>|alpha changed|gamma three four"
    assert reg.compile(separator="+").prompt == "<beta two>+alpha changed+gamma three four"
    reg.evict(b)
    assert prompt() == "alpha changed|gamma three four"
    snap = reg.snapshot()
    reg.write_block("delta", "d")
    reg.restore(snap)
    assert prompt() == "alpha changed|gamma three four"
    assert reg.get_by_name("a")[0].access_count == 10


def test_precomputed_embeddings_skip_the_model() -> None:
    class Counting(_BagOfWords):
        calls = 0

        def encode(self, text: str) -> list[float]:
            Counting.calls += 1
            return super().encode(text)

    r = rampart.BlockRegistry(embedding_model=Counting(), tokeniser=words)
    r.write_block("anything", "git_rules", embedding=[1.0, 0, 0, 0, 0])
    r.write_block("anything", "style_rules", embedding=[0, 0, 1.0, 0, 0])
    res = r.compile(task_embedding=[1.0, 0.1, 0, 0, 0], top_k=1)
    assert res.included == ["git_rules"] and Counting.calls == 0
    for bad in ([], [float("nan")], ["x"], 3):
        with pytest.raises(ValueError, match="embedding"):
            r.write_block("x", "x", embedding=bad)  # type: ignore[arg-type]
    assert len(r) == 2
