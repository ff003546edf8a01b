"""Tokenisers: built-in cl100k_base, callables, Hugging Face tokenizer.json."""

from __future__ import annotations

from pathlib import Path

import pytest
import rampart
from rampart.tokens import CallableTokeniser, Cl100kTokeniser, HuggingFaceTokeniser


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
