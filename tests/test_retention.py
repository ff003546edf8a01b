"""Keep what the step needs (docs/specification.md §9; issue 30): relevance-aware clearing,
recall at the tail with the cached prefix kept, excerpts, the recall tool
answered from the log, the usage constant, forced drops in steps, and the
summariser's bounded view. Real tool output: the SKILL.md files and the
recorded mcp-server-git results of tests/data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import rampart
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rampart import ContextPolicy, Conversation
from rampart.conversation import answer_recall, recall_tool
from rampart.errors import InvalidArgumentError

from tests.conftest import DATA, SKILLS, import_or_skip, needs_model

SKILL_FILES = sorted(SKILLS.glob("*/SKILL.md"))
GIT = [
    o
    for o in json.loads((DATA / "mcp_tool_outputs.json").read_text())["outputs"]
    if o["tool"] == "git_show"
]
NEEDLE = "- FPS: 10-30 (lower is smaller file size)"  # slack-gif-creator/SKILL.md
# lexical only, the question shares the rare words; the model finds a paraphrase
QUESTION = "What FPS range do the Slack GIF requirements give?"
PARAPHRASE = "Going back to the notes on animated stickers: how many pictures per second?"


def _call(conv: Conversation, cid: str, name: str, args: dict[str, Any], text: str) -> None:
    conv.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": cid,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
            ],
        }
    )
    conv.append({"role": "tool", "tool_call_id": cid, "content": text})


def trajectory(reg: rampart.BlockRegistry, policy: ContextPolicy, window: int) -> Conversation:
    """The slack GIF skill read first, then the other skills and 16 git_show
    results, compiled after every result as an agent does."""
    conv = Conversation()
    conv.append({"role": "user", "content": "Read the skills and the recent commits, then wait."})
    files = [SKILLS / "slack-gif-creator" / "SKILL.md"] + [
        p for p in SKILL_FILES if p.parent.name != "slack-gif-creator"
    ]
    n = 0
    for p in files:
        _call(conv, f"c{n}", "read_file", {"path": str(p.relative_to(DATA))}, p.read_text())
        n += 1
        reg.compile(conversation=conv, context_window=window, reply_tokens=512, policy=policy)
    for o in GIT[:16]:
        _call(conv, f"c{n}", "git_show", o["arguments"], o["text"])
        n += 1
        reg.compile(conversation=conv, context_window=window, reply_tokens=512, policy=policy)
    return conv


@pytest.fixture(scope="module")
def lexreg() -> rampart.BlockRegistry:
    reg = rampart.BlockRegistry()  # no embedder: lexical only
    reg.write_block("You are a careful agent.", "intro")
    return reg


def _body(r: Any) -> str:
    return json.dumps(r.messages("openai_chat"))


def test_age_only_loses_the_old_needle_relevance_recalls_it_at_the_tail(
    lexreg: rampart.BlockRegistry,
) -> None:
    old = ContextPolicy(relevance=False)
    conv = trajectory(lexreg, old, 6000)
    conv.append({"role": "user", "content": QUESTION})
    r = lexreg.compile(conversation=conv, context_window=6000, reply_tokens=512, policy=old)
    assert NEEDLE not in _body(r)  # today's behaviour: the oldest result went first

    new = ContextPolicy()
    conv = trajectory(lexreg, new, 6000)
    before = lexreg.compile(conversation=conv, context_window=6000, reply_tokens=512, policy=new)
    assert NEEDLE not in _body(before)  # it was cleared while the agent read on
    prefix = before.messages("openai_chat")
    conv.append({"role": "user", "content": QUESTION})
    r = lexreg.compile(conversation=conv, context_window=6000, reply_tokens=512, policy=new)
    msgs = r.messages("openai_chat")
    # recalled after the previous body, before the question (which the model reads
    # last): nothing the previous request sent was rewritten
    assert not r._context.rewrites
    assert msgs[: len(prefix)] == prefix
    assert msgs[-1]["content"] == QUESTION and len(msgs) == len(prefix) + 2
    tail = msgs[len(prefix)]
    assert tail["role"] == "user" and NEEDLE in tail["content"]
    assert "call c0" in tail["content"] and "read_file" in tail["content"]
    assert r._context.message_tokens <= r._context.budget
    rep = {m.id: m for m in r.message_report}
    recalled = [m for m in r.message_report if m.action == "recalled"]
    assert recalled and recalled[0].id in r._context.recalled
    src = conv.items[2]
    assert src.call_id == "c0" and rep[src.id].action in ("cleared", "excerpted")
    assert rep[src.id].score is not None and rep[src.id].rank == 1
    # the next step (the model calls a tool): the recall stays, nothing recalled twice
    _call(conv, "c99", "git_show", GIT[20]["arguments"], GIT[20]["text"])
    r2 = lexreg.compile(conversation=conv, context_window=6000, reply_tokens=512, policy=new)
    assert r2.messages("openai_chat")[: len(msgs)] == msgs
    assert sum(NEEDLE in (m.get("content") or "") for m in r2.messages("openai_chat")) == 1


@needs_model
def test_the_embedder_recalls_a_paraphrased_question() -> None:
    reg = rampart.BlockRegistry(embedding_model="default")
    reg.write_block("You are a careful agent.", "intro")
    pol = ContextPolicy()
    conv = trajectory(reg, pol, 6000)
    assert NEEDLE not in _body(
        reg.compile(conversation=conv, context_window=6000, reply_tokens=512, policy=pol)
    )
    conv.append({"role": "user", "content": PARAPHRASE})
    r = reg.compile(conversation=conv, context_window=6000, reply_tokens=512, policy=pol)
    assert NEEDLE in r.messages()[-1]["content"] or NEEDLE in r.messages()[-2]["content"]


def test_recall_is_in_a_shape_every_provider_takes(lexreg: rampart.BlockRegistry) -> None:
    pol = ContextPolicy()
    conv = trajectory(lexreg, pol, 6000)
    conv.append({"role": "user", "content": QUESTION})
    r = lexreg.compile(conversation=conv, context_window=6000, reply_tokens=512, policy=pol)
    for fmt in ("openai_chat", "openai_responses", "anthropic", "gemini"):
        assert NEEDLE in json.dumps(r.messages(fmt))
    an = r.messages("anthropic")
    assert an[-1]["role"] == "user"
    assert all(a["role"] != b["role"] for a, b in zip(an, an[1:]))  # noqa: RUF007
    import_or_skip("openai", "sdks")
    import_or_skip("anthropic", "sdks")
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
    from rampart.adapters import (
        anthropic_messages,
        gemini_generate_content,
        openai_chat,
        openai_responses,
    )

    from tests.test_adapters import sdk_check

    sdk_check(CompletionCreateParamsNonStreaming, openai_chat(r, model="gpt-4.1"))
    sdk_check(ResponseCreateParamsNonStreaming, openai_responses(r, model="gpt-4.1"))
    sdk_check(MessageCreateParamsNonStreaming, anthropic_messages(r, model="claude-sonnet-4-5"))
    genai = import_or_skip("google.genai.types", "sdks")
    for content in gemini_generate_content(r, model="gemini-2.5-flash")["contents"]:
        genai.Content.model_validate(content)


def test_dry_run_records_no_recall_and_a_saved_log_replays_it(
    lexreg: rampart.BlockRegistry, tmp_path: Path
) -> None:
    pol = ContextPolicy()
    conv = trajectory(lexreg, pol, 6000)
    conv.append({"role": "user", "content": QUESTION})
    n = len(conv.transformations)
    dry = lexreg.compile(
        conversation=conv,
        context_window=6000,
        reply_tokens=512,
        policy=ContextPolicy(dry_run=True),
    )
    assert NEEDLE in _body(dry) and len(conv.transformations) == n
    r = lexreg.compile(conversation=conv, context_window=6000, reply_tokens=512, policy=pol)
    conv.save(tmp_path / "c.json")
    back = Conversation.load(tmp_path / "c.json")
    assert back.to_messages("anthropic") == conv.to_messages("anthropic")
    assert NEEDLE in json.dumps(back.to_messages("gemini"))
    # undo: the recall goes, everything else is untouched
    conv.rollback()
    recall = [m for m in r.messages() if str(m["content"]).startswith("[recalled for")]
    assert len(recall) == 1 and recall[0] not in conv.to_messages()
    assert conv.to_messages() == [m for m in r.messages() if m not in recall]


def _skills_read(question: str) -> Conversation:
    conv = Conversation()
    conv.append({"role": "user", "content": question})
    for i, p in enumerate(SKILL_FILES):
        _call(conv, f"c{i}", "read_file", {"path": f"skill{i}.md"}, p.read_text())
    return conv


def test_relevant_results_stay_least_relevant_go_first(lexreg: rampart.BlockRegistry) -> None:
    conv = _skills_read("Which options does the GIFBuilder save call take?")
    r = lexreg.compile(conversation=conv, context_window=6000, reply_tokens=512)
    rep = {m.id: m for m in r.message_report}
    results = [it for it in conv.items if it.kind == "tool_result"]
    slack = next(it for it in results if "GIFBuilder" in it.content)
    assert results.index(slack) < len(results) - 3  # not in the recency floor
    assert rep[slack.id].action in ("kept", "excerpted")
    assert "optimize_for_emoji" in _body(r)
    cleared = [rep[it.id] for it in results if rep[it.id].action == "cleared"]
    assert cleared and all("least relevant" in (m.reason or "") for m in cleared)
    assert min(m.rank for m in cleared if m.rank) > rep[slack.id].rank
    ranks = sorted(m.rank for m in rep.values() if m.rank is not None)
    assert ranks == list(range(1, len(results) + 1))
    # age only (one argument away): the oldest go first, whatever they hold
    conv = _skills_read("Which options does the GIFBuilder save call take?")
    old = lexreg.compile(
        conversation=conv,
        context_window=6000,
        reply_tokens=512,
        policy=ContextPolicy(relevance=False),
    )
    acts = [m.action for m in old.message_report if m.kind == "tool_result"]
    assert acts[0] == "cleared" and acts == sorted(acts)  # cleared ... then kept
    assert all(m.score is None for m in old.message_report)


def test_errors_stay_unless_the_window_forces(lexreg: rampart.BlockRegistry) -> None:
    conv = Conversation()
    conv.append({"role": "user", "content": "go"})
    conv.append(
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t0", "name": "run", "input": {"cmd": "make"}}],
        }
    )
    conv.append(
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t0",
                    "is_error": True,
                    "content": "build failed " * 600,
                }
            ],
        }
    )
    for i, p in enumerate(SKILL_FILES):
        _call(conv, f"c{i}", "read_file", {"path": p.name}, p.read_text())
    r = lexreg.compile(conversation=conv, context_window=9000, reply_tokens=512)
    err = next(m for m in r.message_report if m.id == conv.items[2].id)
    assert conv.items[2].is_error and err.action == "kept"
    assert any(m.action == "cleared" for m in r.message_report)


@needs_model
def test_excerpt_keeps_the_relevant_lines_of_a_long_result() -> None:
    reg = rampart.BlockRegistry(embedding_model="default")
    reg.write_block("You are a careful agent.", "intro")
    conv = Conversation()
    conv.append({"role": "user", "content": "How should frames be saved for an emoji-sized GIF?"})
    big = (SKILLS / "slack-gif-creator" / "SKILL.md").read_text()
    _call(conv, "c0", "read_file", {"path": "slack.md"}, big)
    for i, o in enumerate(GIT[:6]):
        _call(conv, f"g{i}", "git_show", o["arguments"], o["text"])
    pol = ContextPolicy(keep_tool_results=1, keep_relevant=1, excerpt_tokens=150, clear_at_least=0)
    # room for the calls, the stubs and half of the long one: once every other
    # result is cleared, the window forces even the most relevant to give way
    results = [it for it in conv.items if it.kind == "tool_result"]
    window = results[0].tokens // 2 + 900
    r = reg.compile(conversation=conv, context_window=window, reply_tokens=100, policy=pol)
    rep = {m.id: m for m in r.message_report}
    ex = rep[conv.items[2].id]
    assert ex.action == "excerpted" and 0 < ex.tokens < ex.original_tokens
    shown = next(m["content"] for m in r.messages() if m.get("tool_call_id") == "c0")
    assert shown.startswith("[excerpt of a tool result") and "lines " in shown
    assert 'recall(call_id="c0")' in shown and "characters cut" in shown
    assert len(shown) < len(big)


def test_the_recall_tool_answers_from_the_log() -> None:
    conv = Conversation()
    conv.append({"role": "user", "content": "read"})
    for i, p in enumerate(SKILL_FILES):
        _call(conv, f"c{i}", "read_file", {"path": p.parent.name}, p.read_text())
    whole = answer_recall(conv, {"call_id": "c0"})
    assert whole.endswith(SKILL_FILES[0].read_text()) and "read_file" in whole
    found = answer_recall(conv, json.dumps({"query": "frames per second for emoji GIFs"}))
    assert NEEDLE in found and "lines " in found
    n = len(conv.log)
    for bad in (
        {"call_id": "nope"},
        {"query": "q" * 1_048_576},
        "[" * 100_000,
        [1],
        {},
        {"call_id": 5},
        {"query": None, "call_id": None},
        b"\xff",
    ):
        out = answer_recall(conv, bad)
        assert out.startswith("error:"), (bad, out[:80])
    assert len(conv.log) == n  # nothing recorded, nothing lost
    assert answer_recall(conv, {"query": "ещё один запрос"}).startswith("no earlier")
    for fmt in ("openai_chat", "openai_responses", "anthropic", "gemini", "mcp"):
        assert "recall" in json.dumps(recall_tool(fmt))
    with pytest.raises(InvalidArgumentError):
        recall_tool("xml")


def test_hostile_results_are_bounded(lexreg: rampart.BlockRegistry) -> None:
    conv = Conversation()
    conv.append({"role": "user", "content": "read"})
    _call(conv, "big", "read_file", {"path": "x"}, "x" * (50 * 1024 * 1024))
    _call(conv, "bin", "read_file", {"path": "y"}, "".join(map(chr, range(1, 0xD000))) * 3)
    for i in range(3):
        _call(conv, f"c{i}", "read_file", {"path": str(i)}, "short result")
    conv.append({"role": "user", "content": "что было в файле x? " * 200})
    r = lexreg.compile(conversation=conv, context_window=20_000, reply_tokens=512)
    assert r._context.message_tokens <= r._context.budget
    assert len(conv.items) >= 9  # nothing lost from the log


def test_many_items(lexreg: rampart.BlockRegistry) -> None:
    conv = Conversation()
    conv.append({"role": "user", "content": "start"})
    for i in range(5000):  # 10 001 items
        _call(conv, f"c{i}", "grep", {"q": str(i)}, f"line {i}: value {i * 7} in file f{i}.py")
    conv.append({"role": "user", "content": "what value was in f17.py?"})
    r = lexreg.compile(conversation=conv, context_window=8000, reply_tokens=512)
    assert "value 119 in file f17.py" in _body(r)


def test_hostile_saved_entries_are_refused(lexreg: rampart.BlockRegistry, tmp_path: Path) -> None:
    pol = ContextPolicy()
    conv = trajectory(lexreg, pol, 6000)
    conv.append({"role": "user", "content": QUESTION})
    lexreg.compile(conversation=conv, context_window=6000, reply_tokens=512, policy=pol)
    conv.save(tmp_path / "ok.json")
    raw = json.loads((tmp_path / "ok.json").read_text())
    log = raw["log"]
    recall = next(e for e in log if e["op"] == "recall")
    src = recall["ids"][0]
    bad_entries = [
        {**recall, "spans": [[1, 2, 10**9, 5]]},  # past the result's end
        {**recall, "spans": [[1, 2, -1, 5]]},
        {**recall, "spans": "x"},
        {**recall, "ids": ["i0"]},  # not a tool result
        {**recall, "scores": {src: float("nan")}},
        {"op": "clear", "ids": [src], "excerpts": {"i0": [[1, 1, 0, 1]]}, "reason": "x"},
        {"op": "scale", "provider": "openai", "value": 1.0, "constant": -5},
    ]
    for k, bad in enumerate(bad_entries):
        data = dict(raw)
        entries = [e for e in log if e["op"] != "recall"] + [bad]
        data["log"] = entries
        path = tmp_path / f"bad{k}.json"
        path.write_text(json.dumps(data))
        with pytest.raises(rampart.RegistryFileError):
            Conversation.load(path)


# ---- observe_usage: scale and a per-request constant -------------------------------------


def _usage_run(scale: float, constant: float, sizes: list[int]) -> Conversation:
    reg = rampart.BlockRegistry()
    conv = Conversation()
    for n in sizes:
        conv.append({"role": "user", "content": "word " * n})
        reg.compile(conversation=conv, context_window=200_000)
        predicted = conv._last_compile[1]
        conv.observe_usage({"prompt_tokens": round(scale * predicted + constant)})
    return conv


def test_observe_usage_learns_a_chat_templates_constant() -> None:
    conv = _usage_run(1.05, 377, [30, 400, 1500])
    assert conv.scale("openai") == pytest.approx(1.05, abs=0.01)
    assert conv.constant("openai") == pytest.approx(377, abs=5)
    # one short request alone: the excess is a constant, not a scale of 2+
    one = _usage_run(1.0, 377, [40])
    assert one.scale("openai") <= 1.4
    reg = rampart.BlockRegistry()
    r = reg.compile(conversation=one, context_window=4096, reply_tokens=256)
    assert (
        r._context.budget
        == int((4096 - 256 - one.constant("openai")) / one.scale("openai"))
        - r._context.fixed_tokens
    )
    # the log replays both
    back = Conversation.__new__(Conversation)
    assert back is not None
    assert one.log[-1]["constant"] == one.constant("openai")
    n = len(one.log)
    for bad in ("\ud800", 5):
        with pytest.raises(InvalidArgumentError, match="provider"):
            one.observe_usage({"prompt_tokens": 10}, provider=bad)
    assert len(one.log) == n


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    st.floats(0.5, 2.0), st.floats(0, 3000), st.lists(st.integers(1, 4000), min_size=1, max_size=6)
)
def test_usage_fit_is_bounded(scale: float, constant: float, sizes: list[int]) -> None:
    from rampart.conversation.core import _fit_usage

    s, c = _fit_usage([(float(n), scale * n + constant) for n in sizes])
    assert 0.25 <= s <= 4.0 and 0 <= c <= 1e6


@settings(max_examples=80, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    st.floats(0.7, 1.4),
    st.floats(0, 800),
    st.lists(st.tuples(st.integers(200, 6000), st.floats(-0.1, 0.1)), min_size=1, max_size=16),
)
def test_usage_fit_lies_on_or_above_every_count(
    scale: float, constant: float, obs: list[tuple[int, float]]
) -> None:
    """The budget is a limit: counts that scatter around a line (a diff counts more
    per token than prose) all lie on or under the line the compile budgets with."""
    from rampart.conversation.core import _fit_usage

    pts = [(float(n), scale * n * (1 + noise) + constant) for n, noise in obs]
    s, c = _fit_usage(pts)
    if 0.25 < s < 4.0 and c < 1e6:
        assert all(s * x + c >= o - 0.01 for x, o in pts)


def _provider_count(conv: Conversation, msgs: list[dict[str, Any]]) -> float:
    """A provider that counts what the compile predicted, a 150-token template, and a
    diff's lines 30 % above o200k_base (as Qwen's tokeniser does)."""
    n = conv._last_compile[1] + 150.0
    for m in msgs:
        for line in (m.get("content") or "").splitlines():
            if line[:1] in "+-@":
                n += 0.3 * (conv._count(line) + 1)
    return n


def test_a_request_heavy_in_diffs_stays_in_the_window_by_the_providers_count() -> None:
    """Skills and real git_show results in turn, compiled (twice: an agent's retry
    compiles the same body again) and the provider's usage observed after every
    call: no request runs into the reply's tokens by the provider's count. The
    least-squares line alone let one of these requests 67 tokens into them."""
    reg = rampart.BlockRegistry()
    conv = Conversation()
    conv.append({"role": "user", "content": "Read the skills and the recent commits, then wait."})
    window, reply = 3000, 200
    over = []
    n = 0
    for path, shown in zip(SKILL_FILES, GIT):
        for name, args, text in (
            ("read_file", {"path": path.name}, path.read_text()),
            ("git_show", shown["arguments"], shown["text"]),
        ):
            _call(conv, f"c{n}", name, args, text)
            n += 1
            for _ in range(2):
                r = reg.compile(conversation=conv, context_window=window, reply_tokens=reply)
                counted = _provider_count(conv, r.messages("openai_chat"))
                over.append(counted - (window - reply))
                conv.observe_usage({"prompt_tokens": round(counted)})
    assert len(over) == 32 and max(over) > -300  # the window was in play
    assert max(over) <= 0, over


# ---- forced drops step like clears; the summariser's view ----------------------------------


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.integers(5, 120), min_size=20, max_size=60), st.integers(800, 3000))
def test_a_forced_drop_removes_at_least_clear_at_least(turns: list[int], window: int) -> None:
    reg = rampart.BlockRegistry()
    conv = Conversation()
    pol = ContextPolicy(clear_at_least=400)
    forced = 0
    for i, n in enumerate(turns):
        conv.append({"role": "user" if i % 2 == 0 else "assistant", "content": "word " * n})
        if i % 2:
            continue
        r = reg.compile(conversation=conv, context_window=window, reply_tokens=100, policy=pol)
        assert r._context.message_tokens <= r._context.budget
        for note in r._context.rewrites:
            if note.action == "drop":
                forced += 1
                assert note.tokens_removed >= 400 or note.at_index == 0
    assert forced <= max(1, sum(turns) * 1.4 // 400)


def test_the_summarisers_view_is_bounded(lexreg: rampart.BlockRegistry) -> None:
    seen: list[Any] = []

    def summarise(items: list[Any]) -> str:
        seen.extend(items)
        return "earlier: many files were read"

    conv = Conversation()
    conv.append({"role": "user", "content": "go"})
    for i in range(300):
        _call(conv, f"c{i}", "read_file", {"p": i}, "z" * 10_000)
    pol = ContextPolicy(clear_tool_results=False, compact=summarise)
    lexreg.compile(conversation=conv, context_window=60_000, reply_tokens=512, policy=pol)
    assert seen and max(len(it.content) for it in seen) <= 4000
    assert sum(len(it.content) for it in seen) <= 200_000

    def bad(items: list[Any]) -> str:
        return "summary \ud800"

    conv = Conversation()
    conv.append({"role": "user", "content": "go"})
    for i in range(300):
        _call(conv, f"c{i}", "read_file", {"p": i}, "z" * 10_000)
    n = len(conv.transformations)
    with pytest.raises(InvalidArgumentError, match="surrogate"):
        lexreg.compile(
            conversation=conv,
            context_window=60_000,
            reply_tokens=512,
            policy=ContextPolicy(clear_tool_results=False, compact=bad),
        )
    assert len(conv.transformations) == n


@pytest.mark.parametrize(
    "kw",
    [
        {"exclude_tools": 5},
        {"exclude_tools": None},
        {"exclude_tools": {"a": 1}},
        {"provider": ["openai"]},
        {"relevance": "yes"},
        {"keep_relevant": -1},
        {"recall_max_tokens": 1.5},
        {"excerpts": None},
    ],
)
def test_policy_arguments_are_typed_errors(kw: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError, match="ContextPolicy"):
        ContextPolicy(**kw)


# ---- excerpts and recalls of long lines and odd line breaks ---------------------------------

_FILLER = "lorem ipsum dolor sit amet, consectetur adipiscing elit. "
_KEY = "The deploy key rotates every seventeen days on the bastion host."


def _one_line(chars: int, at: int) -> str:
    """A single line of ``chars`` characters with ``_KEY`` near ``at``."""
    head = _FILLER * (at // len(_FILLER))
    return (head + _KEY + " " + _FILLER * ((chars - at) // len(_FILLER) + 1))[:chars]


def test_a_recall_of_a_long_line_says_which_characters_and_what_was_cut(
    lexreg: rampart.BlockRegistry,
) -> None:
    """A 2 MB single-line result cleared, then a question it answers: the recall
    names the characters of line 1 it brings back and how many it leaves out,
    its pieces cut at spaces and marked where they cut the line (before: "lines
    1 of 1", a 700-character piece cut mid-word, no note of the cut)."""
    big = _one_line(2_000_000, 100_000)
    conv = Conversation()
    conv.append({"role": "user", "content": "Read the notes, then wait."})
    _call(conv, "c0", "read_file", {"path": "notes.txt"}, big)
    lexreg.compile(conversation=conv, context_window=4000, reply_tokens=256)
    conv.append({"role": "user", "content": "How often does the deploy key rotate on the bastion?"})
    r = lexreg.compile(conversation=conv, context_window=4000, reply_tokens=256)
    msgs = r.messages()
    assert msgs[-1]["content"].startswith("How often does the deploy key")  # read last
    text = msgs[-2]["content"]
    header, body = text.split("\n", 1)
    # the compile's last recall marks where the recalled text ends
    body, tail = body.rsplit("\n", 1)
    assert tail == "[end of recalled text]"
    assert header.startswith("[recalled for the current step: characters ")
    assert "of line 1 (2 000 000 characters) of the result of tool read_file" in header
    assert "lines 1 of 1" not in header
    shown = sum(len(p) for p in body.replace("[...] ", "\n").replace(" [...]", "\n").split("\n"))
    assert f"; {2_000_000 - shown} of 2000000 characters not shown" in header
    assert _KEY in body and body.startswith("[...] ") and body.endswith(" [...]")
    for piece in body.split("\n[...]\n"):
        inner = piece.removeprefix("[...] ").removesuffix(" [...]")
        at = big.index(inner)
        assert big[at - 1] == " " and inner.endswith(" ")  # whole words


def test_an_excerpt_header_counts_the_characters_of_the_line() -> None:
    from rampart.conversation import retention
    from rampart.relevance import split_passages

    big = _one_line(2_000_000, 1_500)
    conv = Conversation()
    conv.append({"role": "user", "content": "go"})
    _call(conv, "c0", "read_file", {}, big)
    it = conv.items[-1]
    p = split_passages(big)[2]
    spans = [[p.start, p.end, p.offset, len(p.text)]]
    text = retention.excerpt_text(conv, it, spans)
    a, b = p.offset + 1, p.offset + len(p.text)
    num = retention._num
    assert f"; characters {num(a)}–{num(b)} of line 1 (2 000 000 characters) kept" in text
    assert f"{2_000_000 - len(p.text)} of 2000000 characters cut" in text
    assert text.endswith("\n[...] " + p.text + " [...]")
    # a whole line keeps the lines form, counted as str.splitlines counts
    small = "one\rtwo\rthree\r"
    assert retention.lines_of(replace_content(it, small), [[2, 2, 4, 3]]) == "lines 2 of 3"


def replace_content(it: Any, text: str) -> Any:
    from dataclasses import replace

    return replace(it, content=text)


@pytest.mark.parametrize("sep", ["\r", "\r\n", "\u2028", "\u2029", "\x85", "\x0b"])
def test_the_recall_tool_numbers_lines_as_the_text_breaks_them(sep: str) -> None:
    """A result whose lines end in CR, CRLF, U+2028 and the rest: the recall
    tool's line numbers are those str.splitlines gives, and the lines it shows
    are those lines (before: one line of a CR-only text, "lines 1 of 1")."""
    lines = [f"entry {i}: {_FILLER}" for i in range(600)]
    lines[451] = f"entry 451: {_KEY}"
    text = sep.join(lines) + sep
    conv = Conversation()
    conv.append({"role": "user", "content": "read"})
    _call(conv, "c0", "read_file", {"path": "log"}, text)
    answer = answer_recall(conv, {"call_id": "c0", "query": "deploy key rotates bastion"})
    header, body = answer.split("\n", 1)
    assert "of 600 of the result of tool read_file" in header
    first = int(header.split("lines ", 1)[1].split("-", 1)[0].split(",", 1)[0].split(" ")[0])
    assert body.splitlines()[0] == lines[first - 1]
    assert _KEY in body
