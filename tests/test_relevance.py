"""rampart.relevance: the Rust BM25 index and term rule against the pure-Python
model (property tests), passages' bounds and offsets, and hybrid scoring with
the real MiniLM model."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rampart.relevance import BM25, LexicalIndex, PassageIndex, split_passages, terms
from rampart.relevance.lexical import py_terms
from rampart.relevance.passages import MAX_PASSAGES

from tests.conftest import SKILLS, needs_model

PROPS = settings(max_examples=300, deadline=None, database=None)

# Text that exercises the rule: camelCase, snake_case, digits, stop words,
# endings that stem, non-ASCII letters whose lower case is ASCII (KELVIN SIGN),
# and every kind of script: bigram scripts (Han, kana, Hangul, Thai) beside
# spaced ones (Cyrillic, Arabic, Devanagari with its marks), digits of other
# scripts, a lone combining mark, full-width letters.
ALPHABET = st.sampled_from(
    list("aAbBzZ09_ -\n.")
    + ["ing", "ches", "ss", "ed", "the", "K", "İ", "é", "Σ", "ß", "字", "\ud7ff"]
    + ["超时", "時間", "です", "カタカナ", "서버", "ภาษา", "Ключ", "مفتاح", "हिन्दी", "٣", "\u0301"]
    + ["Ｒｅｄｉｓ", "ｶﾀ", "、", "。", "\u3000", "𠀋", "ǅ", "8e50c42f76c0f7f6543", "abcdef"]
)
# every assigned character but lone surrogates (which the wrappers repair or refuse)
ANY_CHAR = st.characters(blacklist_categories=("Cs", "Cn"))
TEXT = (
    st.lists(ALPHABET, max_size=40).map("".join)
    | st.text(max_size=60)
    | st.text(ANY_CHAR, max_size=60)
)


def test_the_python_model_reads_the_same_unicode_version() -> None:
    import unicodedata

    import rampart._core as core

    # the Rust table was generated from this version (scripts/gen_unicode_tables.py);
    # on another, newly assigned characters could differ between the two
    assert core.TERMS_UNICODE_VERSION == unicodedata.unidata_version


@PROPS
@given(TEXT)
def test_rust_terms_match_the_python_model(text: str) -> None:
    assert terms(text) == py_terms(text)


def test_every_script_is_text() -> None:
    assert terms("使用Redis缓存的超时时间") == [
        "使用", "redi", "缓存", "存的", "的超", "超时", "时时", "时间"
    ]  # fmt: skip
    assert terms("猫") == ["猫"]
    assert terms("Ключ доступа مفتاح الوصول हिन्दी") == [
        "ключ", "доступа", "مفتاح", "الوصول", "हिन्दी"
    ]  # fmt: skip
    assert terms("naïve café") == ["naïve", "café"]
    assert terms("タイムアウトは30秒です") == [
        "タイ", "イム", "ムア", "アウ", "ウト", "トは", "30", "秒で", "です"
    ]  # fmt: skip


def test_a_chinese_question_finds_the_chinese_passage() -> None:
    ix = LexicalIndex()
    ix.add(
        [
            "The build runs on two cores and caches the wheel.",
            "数据库连接池的最大连接数默认为 20，超时时间为 30 秒。",
            "日志文件保存在 /var/log 目录下，每天轮换一次。",
        ]
    )
    s = ix.scores("连接池的超时时间是多少？")
    assert s[1] > 0 and s[1] > s[2] and s[0] == 0


@PROPS
@given(st.lists(TEXT, min_size=1, max_size=12), TEXT, st.integers(0, 11))
def test_rust_bm25_matches_the_python_model_built_at_once_or_grown(
    docs: list[str], query: str, split: int
) -> None:
    model = BM25(docs).scores(query)
    at_once = LexicalIndex()
    at_once.add(docs)
    grown = LexicalIndex()
    grown.add(docs[:split])
    grown.scores(query)  # a query between additions changes nothing
    grown.add(docs[split:])
    for got in (at_once.scores(query), grown.scores(query)):
        assert got == pytest.approx(model, rel=1e-12, abs=1e-12)


def test_bm25_ranks_the_rare_term_first() -> None:
    ix = LexicalIndex()
    ix.add(["the cache keeps the prefix", "replica failover timeout", "window budget"])
    s = ix.scores("what is the failover timeout?")
    assert s.index(max(s)) == 1 and s[0] == 0.0


def _line_of(text: str, offset: int) -> int:
    """The pure-Python model: the 1-based line of ``offset`` as str.splitlines
    cuts ``text`` (a line break belongs to the line it ends)."""
    at = 0
    for n, line in enumerate(text.splitlines(keepends=True), 1):
        at += len(line)
        if offset < at:
            return n
    return len(text.splitlines()) + 1


#: Every line break str.splitlines knows, \r\n, spaces, and words.
_ODD = st.sampled_from(
    ["a", "bc", " ", "  ", "\t", "\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e",
     "\x85", "\u2028", "\u2029", "word ", "é", "x" * 90, "y" * 300]
)  # fmt: skip


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_ODD, max_size=200).map("".join), st.integers(5, 120), st.integers(1, 12))
def test_passages_are_slices_with_their_line_numbers(text: str, width: int, lines: int) -> None:
    """Texts with odd line breaks and long lines: every passage is a slice of the
    source, at most ``width`` characters, not blank, in order, and its first and
    last line are those str.splitlines gives."""
    end = 0
    for p in split_passages(text, max_chars=width, max_lines=lines):
        assert text[p.offset : p.offset + len(p.text)] == p.text
        assert p.text.strip() and len(p.text) <= width and p.offset >= end
        assert p.start == _line_of(text, p.offset)
        assert p.end == _line_of(text, p.offset + len(p.text) - 1)
        end = p.offset + len(p.text)


def test_a_long_line_is_cut_at_a_space_near_the_end_of_a_piece() -> None:
    text = "lorem ipsum dolor " * 100_000  # 1.8 MB, one line
    ps = split_passages(text)
    assert len(ps) == MAX_PASSAGES and all(p.start == p.end == 1 for p in ps)
    assert all(p.text.endswith(" ") and len(p.text) > 700 * 3 // 4 for p in ps)
    assert all(text[p.offset - 1] == " " for p in ps[1:])  # each starts on a word
    # no space in reach: cut where the passage is full
    assert [len(p.text) for p in split_passages("x" * 2_000)] == [700, 700, 600]


def test_passages_of_hostile_text_are_bounded() -> None:
    """At most MAX_PASSAGES passages, and at most MAX_PASSAGES x 700 x 4
    characters looked at: text past that is not scored (blank lines make no
    passage, so a text of them alone is read only that far)."""
    for text in (
        "x" * 20_000_000,
        "\n" * 5_000_000,
        "a\n" * 2_000_000,
        "\u2028" * 5_000_000,
        " \r" * 3_000_000,
        "\r\n" * 3_000_000 + "needle",
    ):
        ps = split_passages(text)
        assert len(ps) <= MAX_PASSAGES
        assert sum(len(p.text) for p in ps) <= MAX_PASSAGES * 700
        assert all(p.offset < MAX_PASSAGES * 700 * 4 for p in ps)
    one = split_passages("x" * 50_000)
    assert all(p.start == p.end == 1 for p in one) and one[1].offset == 700
    # blank lines are skipped in runs, their lines still counted
    tail = split_passages("\n\n\r\n\u2028 \n" + "last")
    assert [(p.start, p.text) for p in tail] == [(6, "last")]


def test_passage_index_lexical_only() -> None:
    ix = PassageIndex()
    docs = {p.parent.name: p.read_text() for p in sorted(SKILLS.glob("*/SKILL.md"))}
    for k, t in docs.items():
        ix.add(k, t)
    ix.add("slack-gif-creator", "not added twice")
    scores = ix.score("what frame rate should an emoji GIF use?", list(docs))
    best = max(scores.values(), key=lambda s: s.score)
    assert best.key == "slack-gif-creator" and best.dense is None and best.lexical > 0
    p = ix.passages(best.key)[best.best[0]]
    assert "GIF" in p.text
    assert all(s.score == 0.0 for s in ix.score("", list(docs)).values())


@needs_model
def test_passage_index_hybrid_finds_a_paraphrase() -> None:
    import rampart

    model = rampart.default_embedder()
    ix = PassageIndex()
    docs = {p.parent.name: p.read_text() for p in sorted(SKILLS.glob("*/SKILL.md"))}
    for k, t in docs.items():
        ix.add(k, t)
    # no word of the answer's line ("FPS: 10-30") is in the question
    scores = ix.score(
        "how many pictures per second for a moving sticker in chat", list(docs), model
    )
    best = max(scores.values(), key=lambda s: s.score)
    assert best.key == "slack-gif-creator" and best.dense is not None
    # vectors are kept: a second query embeds only itself
    calls = []

    class Counting:
        def __getattr__(self, name: str) -> object:
            return getattr(model, name)

        def encode_batch_report(self, texts: list[str]) -> object:
            calls.append(len(texts))
            return model.encode_batch_report(texts)

        def encode_with_tokens(self, texts: list[str], skip: frozenset[str]) -> object:
            calls.append(len(texts))
            return model.encode_with_tokens(texts, skip)

    ix.score("brand colours of the company", list(docs), Counting())
    assert calls == [1]
