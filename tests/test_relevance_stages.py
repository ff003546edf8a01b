"""The two-stage relevance scorer: contextual passages (heading and call in BM25
and the embedding), the late-interaction rerank over the real MiniLM's token
vectors, embedding off the question's path (the background thread, fork, the
switch), and hostile inputs with bounded cost."""

from __future__ import annotations

import json
import multiprocessing
from typing import Any

import pytest
import rampart
from rampart import Conversation
from rampart.relevance import PassageIndex, background, hybrid
from rampart.relevance.passages import heading_before, headings

from tests.conftest import SKILLS, needs_model

DOC = """# Office tools

Helpers for spreadsheets and slides.

## Recalculation

def recalc(filename, timeout=30):
    # runs the office suite headless and waits for it
    return run(["soffice", "--headless", filename], timeout=timeout)

## Thumbnails

```python
# make a grid
DEFAULT_COLS = 3
```
"""


def test_headings_skip_comments_inside_fenced_code() -> None:
    marks = [h for _, h in headings(DOC, len(DOC))]
    assert marks == [
        "# Office tools",
        "## Recalculation",
        "def recalc(filename, timeout=30):",
        "# runs the office suite headless and waits for it",
        "## Thumbnails",
    ]
    assert heading_before(DOC, DOC.index("DEFAULT_COLS")) == "## Thumbnails"
    assert heading_before(DOC, 0) == ""


def test_a_passage_is_found_through_its_heading_and_its_call() -> None:
    ix = PassageIndex()
    ix.add("office", DOC, 'read_text_file {"path": "/repo/scripts/office.py"}')
    ix.add("other", "Columns of the table: name, size, owner.\n" * 3, "read_text_file notes.md")
    # "thumbnails" is only in the heading above the line that answers
    s = ix.score("thumbnails", ["office", "other"])
    assert s["office"].score > 0 and s["other"].score == 0
    p = ix.passages("office")[s["office"].best[0]]
    assert "DEFAULT_COLS" in p.text
    # the call's path finds the result; the context never enters the passage text
    s = ix.score("office.py", ["office", "other"])
    assert s["office"].score > 0 and s["other"].score == 0
    assert all("office.py" not in p.text for p in ix.passages("office"))


def test_scores_are_absolute() -> None:
    # the same passage scores the same beside 3 texts and beside 300: a floor on
    # the score means the same in both (no division by the query's best)
    small, big = PassageIndex(), PassageIndex()
    needle = "The replica failover timeout is 12 seconds."
    for ix, n in ((small, 3), (big, 300)):
        ix.add("needle", needle)
        for i in range(n):
            ix.add(f"f{i}", f"Filler text number {i} about gardens and weather.")
    a = small.score("replica failover timeout", ["needle"])["needle"]
    b = big.score("replica failover timeout", ["needle"])["needle"]
    assert 0 < a.score < 1 and 0 < b.score < 1
    assert abs(a.rare - b.rare) / a.rare < 0.5  # in units of a rare term, not of the index


@needs_model
def test_late_interaction_reads_question_and_passage_together() -> None:
    model = rampart.default_embedder()
    assert model.token_vectors
    vecs, toks = model.encode_with_tokens(
        ["The default number of columns is 3.", "the and of"], skip=hybrid._SKIP_PIECES
    )
    assert vecs.shape == (2, model.dim)
    assert toks[0] is not None and toks[0].dtype.name == "float16"
    assert toks[1] is None  # stop words only: nothing left to match
    ix = PassageIndex()
    docs = {p.parent.name: p.read_text() for p in sorted(SKILLS.glob("*/SKILL.md"))}
    for k, t in docs.items():
        ix.add(k, t, f'read_file {{"path": "{k}"}}')
    assert ix.pending() > 0
    ix.embed_pending(model)
    assert ix.pending() == 0 and ix._tok_rows > 0
    s = ix.score("how many pictures per second for a moving sticker in chat", list(docs), model)
    best = max(s.values(), key=lambda x: x.score)
    assert best.key == "slack-gif-creator"
    assert any(x.late is not None and x.late > 0 for x in s.values())


@needs_model
def test_token_rows_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hybrid, "TOKEN_ROWS", 300)
    model = rampart.default_embedder()
    ix = PassageIndex()
    for p in sorted(SKILLS.glob("*/SKILL.md"))[:3]:
        ix.add(p.parent.name, p.read_text())
    ix.embed_pending(model)
    assert 0 < ix._tok_rows <= 300
    assert sum(len(q) for q, _ in ix._tok.values()) == ix._tok_rows


def _skills_conversation(reg: rampart.BlockRegistry) -> Conversation:
    conv = Conversation()
    conv.append({"role": "user", "content": "Read the skills, then wait for my question."})
    for i, path in enumerate(sorted(SKILLS.glob("*/SKILL.md"))[:4]):
        call = {"name": "read_file", "arguments": json.dumps({"path": path.parent.name})}
        conv.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"c{i}", "type": "function", "function": call}],
            }
        )
        conv.append({"role": "tool", "tool_call_id": f"c{i}", "content": path.read_text()})
        reg.compile(conversation=conv, context_window=200_000, reply_tokens=512)
    return conv


class _Counting:
    """The real model, counting the texts each call encodes."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.calls: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def encode(self, text: str) -> Any:
        self.calls.append(1)
        return self.model.encode(text)

    def encode_with_tokens(self, texts: list[str], skip: frozenset[str] = frozenset()) -> Any:
        self.calls.append(len(texts))
        return self.model.encode_with_tokens(texts, skip)


@needs_model
@pytest.mark.parametrize("switch", ["1", "0"])
def test_the_question_embeds_only_itself(monkeypatch: pytest.MonkeyPatch, switch: str) -> None:
    monkeypatch.setenv("RAMPART_BACKGROUND_EMBED", switch)
    model = _Counting(rampart.default_embedder())
    reg = rampart.BlockRegistry(embedding_model=model)
    reg.write_block("You are a careful agent.", "role")
    conv = _skills_conversation(reg)
    assert background.wait_idle(120)
    rel = conv._relevance
    assert rel is not None and rel.index.pending() == 0
    before = list(model.calls)
    conv.append({"role": "user", "content": "How many pictures per second for a chat sticker?"})
    result = reg.compile(conversation=conv, context_window=200_000, reply_tokens=512)
    assert result.message_report  # scored
    assert model.calls[len(before) :] == [1]  # the question alone


def _child(q: Any) -> None:
    reg = rampart.BlockRegistry(embedding_model="default")
    reg.write_block("You are a careful agent.", "role")
    conv = _skills_conversation(reg)
    q.put(background.wait_idle(120) and conv._relevance.index.pending() == 0)


@needs_model
def test_a_forked_child_embeds_in_its_own_thread() -> None:
    # the parent's thread exists before the fork and not in the child
    reg = rampart.BlockRegistry(embedding_model="default")
    reg.write_block("You are a careful agent.", "role")
    _skills_conversation(reg)
    assert background.wait_idle(120)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    try:
        assert q.get(timeout=300) is True
    finally:
        p.join(60)
    assert p.exitcode == 0


@needs_model
def test_hostile_inputs_cost_a_bounded_batch() -> None:
    model = rampart.default_embedder()
    ix = PassageIndex()
    ix.add("huge", "A" * 50_000_000, "read_file big.bin")  # one 50 MB line
    ix.add("binary", bytes(range(256)).decode("latin-1") * 4000)
    ix.add("mixed", "超时时间为30秒。Timeout is 30 s. مهلة الاتصال ٣٠ ثانية\n" * 50)
    question = "超时 timeout " + "q" * 1_000_000  # a 1 MB question
    s = ix.score(question, ["huge", "binary", "mixed"], model)
    assert max(s.values(), key=lambda x: x.score).key == "mixed"
    # embedded: at most the arrival passages of each text, never the 50 MB
    assert int(ix._has.sum()) <= 3 * hybrid.ARRIVAL_PASSAGES
    for i in range(10_000):  # 10 000 results more, BM25 only
        ix.add(f"r{i}", f"result {i}: nothing to see")
    keys = ["huge", "binary", "mixed", *[f"r{i}" for i in range(10_000)]]
    s = ix.score(question, keys)
    assert set(s) == set(keys)
    assert max(s.values(), key=lambda x: x.score).key == "mixed"


def test_add_refuses_what_is_not_text() -> None:
    ix = PassageIndex()
    for bad in ((1, "x", ""), ("k", 5, ""), ("k", "x", b"ctx")):
        with pytest.raises(rampart.InvalidArgumentError, match="must be a str"):
            ix.add(*bad)  # type: ignore[arg-type]
    assert len(ix) == 0
