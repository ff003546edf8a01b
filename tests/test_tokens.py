"""Tokenisers: built-in cl100k_base and o200k_base, callables, Hugging Face tokenizer.json."""

from __future__ import annotations

from pathlib import Path

import pytest
import rampart
from rampart.tokens import (
    CallableTokeniser,
    Cl100kTokeniser,
    HuggingFaceTokeniser,
    O200kTokeniser,
    encoding_for_model,
    resolve_tokeniser,
    tokeniser_for_model,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Reference counts from tiktoken's cl100k_base.
        ("", 0),
        ("hello world", 2),
        ("tiktoken is great!", 6),
    ],
)
def test_cl100k_reference_counts(text: str, expected: int) -> None:
    assert rampart.count_tokens(text) == expected


def test_cl100k_is_the_default_and_counted_in_rust() -> None:
    r = rampart.BlockRegistry()
    assert isinstance(r.tokeniser, Cl100kTokeniser) and r.tokeniser.builtin
    rid = r.write_block("tiktoken is great!", "t")
    assert r.get_by_id(rid).token_count == 6
    assert r.tokeniser.count_many(["hello world", ""]) == [2, 0]
    # separator tokens count against the budget with the same tokeniser
    r.write_block("hello world", "h")
    sep = rampart.count_tokens(rampart.DEFAULT_SEPARATOR)
    assert r.compile().total_tokens == 6 + sep + 2


# Reference counts from tiktoken 0.14 (Encoding.encode_ordinary), computed once with
# tiktoken's o200k_base/cl100k_base tables (sha256 equal to tiktoken's expected_hash);
# tiktoken itself is not needed here: it downloads its tables on first use.
_REFERENCE = [
    ("hello world", 2, 2),
    ("tiktoken is great!", 6, 6),
    ("Привет, как дела? Всё хорошо.", 9, 17),
    ("مرحبا بالعالم", 4, 10),
    ("I'm here; you're there, they'll come.", 9, 12),
    ("Résumé: naïve café — 東京で会いましょう! 🚀 def f(x):\n    return x**2  # ok\n\n\n", 28, 36),
    ('{"role": "tool", "content": "ls -la /usr/bin | wc -l => 1832"}', 25, 25),
]


@pytest.mark.parametrize(("text", "o200k", "cl100k"), _REFERENCE)
def test_o200k_reference_counts(text: str, o200k: int, cl100k: int) -> None:
    assert rampart.count_tokens(text, "o200k_base") == o200k
    assert rampart.count_tokens(text) == rampart.count_tokens(text, "cl100k_base") == cl100k
    assert O200kTokeniser().count(text) == o200k


def test_o200k_counts_in_batches_and_long_text() -> None:
    texts = [t for t, _, _ in _REFERENCE]
    assert rampart._core.count_tokens_many(texts, "o200k_base") == [n for _, n, _ in _REFERENCE]
    long = "Привет, как дела? Всё хорошо." * 4000  # > 64 KiB: counted with the GIL released
    assert 9 * 4000 * 0.9 <= rampart.count_tokens(long, "o200k_base") <= 9 * 4000


def test_unknown_encoding_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r'unknown encoding "p50k_base".*o200k_base'):
        rampart.count_tokens("x", "p50k_base")
    with pytest.raises(ValueError, match="unknown encoding"):
        rampart._core.count_tokens_many(["x"], "o200k")


def test_registry_with_o200k_counts_blocks_and_saves_its_tokeniser(tmp_path: Path) -> None:
    text = "Привет, как дела? Всё хорошо."
    r = rampart.BlockRegistry(tokeniser="o200k_base")
    assert isinstance(r.tokeniser, O200kTokeniser) and not r.tokeniser.builtin
    rid = r.write_block(text, "ru")
    assert r.get_by_id(rid).token_count == 9  # cl100k_base would say 17
    r.save(tmp_path / "r.rampart")
    back = rampart.BlockRegistry.load(tmp_path / "r.rampart", tokeniser="o200k_base")
    assert back.get_by_name("ru")[0].token_count == 9
    with pytest.raises(ValueError, match="tokeniser 'o200k_base'"):
        rampart.BlockRegistry.load(tmp_path / "r.rampart")


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("chatgpt-4o-latest", "o200k_base"),
        ("gpt-4.1", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-5-mini", "o200k_base"),
        ("gpt-5.1-codex", "o200k_base"),
        ("o1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o4-mini-2025-04-16", "o200k_base"),
        ("openai/gpt-4o", "o200k_base"),
        ("ft:gpt-4o-mini:acme::abc123", "o200k_base"),
        ("gpt-oss-120b", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo-0125", "cl100k_base"),
        ("text-embedding-3-small", "cl100k_base"),
        ("claude-sonnet-4-5", None),
        ("gemini-2.5-pro", None),
        ("o1x", None),
    ],
)
def test_encoding_for_model(model: str, encoding: str | None) -> None:
    assert encoding_for_model(model) == encoding
    tok = tokeniser_for_model(model)
    assert (tok.name if tok else None) == encoding
    if encoding:
        assert tok is resolve_tokeniser(encoding)


def test_non_ascii_and_long_text() -> None:
    text = "Grüße, 世界! " * 5000  # > 64 KiB: counted with the GIL released
    n = rampart.count_tokens(text)
    assert n > 5000
    assert rampart.count_tokens("Grüße, 世界! ") * 5000 >= n * 0.9


def test_callable_tokeniser() -> None:
    r = rampart.BlockRegistry(tokeniser=lambda s: len(s))
    rid = r.write_block("abcd", "x")
    assert r.get_by_id(rid).token_count == 4
    r.set_wrap(rid, "<", ">")
    assert r.get_by_id(rid).cost == 6
    r.update_block_content(rid, "abcdefgh")
    assert r.get_by_id(rid).token_count == 8


@pytest.mark.parametrize("bad", [-1, 1.5, "3", None, True])
def test_callable_returning_garbage_is_rejected(bad: object) -> None:
    r = rampart.BlockRegistry(tokeniser=lambda s: bad)
    with pytest.raises(ValueError, match="tokeniser"):
        r.write_block("abc", "x")
    assert len(r) == 0


def test_unusable_tokeniser_argument() -> None:
    with pytest.raises(ValueError, match="tokeniser must be"):
        rampart.BlockRegistry(tokeniser=42)


@pytest.fixture
def hf_tokenizer_json(tmp_path: Path) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]", "[CLS]"])
    tok.train_from_iterator(["run the tests before you commit", "read the file"], trainer)
    # MiniLM's tokenizer.json ships with truncation and padding baked in; a
    # counter must ignore both.
    tok.enable_truncation(max_length=4)
    tok.enable_padding(length=16, pad_token="[PAD]", pad_id=1)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_hugging_face_tokenizer_json(hf_tokenizer_json: Path) -> None:
    text = "run the tests before you commit , then read the file"
    tok = HuggingFaceTokeniser(hf_tokenizer_json)
    assert tok.count(text) == 11, "no truncation at 4, no padding to 16"
    assert tok.count_many([text, "run"]) == [11, 1]
    for spec in (hf_tokenizer_json, str(hf_tokenizer_json), hf_tokenizer_json.parent):
        r = rampart.BlockRegistry(tokeniser=spec)
        assert r.get_by_id(r.write_block(text, "t")).token_count == 11
        r.release()
    with pytest.raises(FileNotFoundError):
        HuggingFaceTokeniser(hf_tokenizer_json.parent / "missing.json")


def test_callable_wrapper_names_itself() -> None:
    def my_counter(s: str) -> int:
        return 1

    assert CallableTokeniser(my_counter).name == "my_counter"
