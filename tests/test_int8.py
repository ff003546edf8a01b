"""The int8 variants of the packaged models (``"all-MiniLM-L6-v2:int8"``): names,
typed errors, the cached graph, and its vectors against sentence-transformers'."""

from __future__ import annotations

import json
from typing import Any

import pytest
import rampart
from rampart.embeddings.prepare import (
    DEFAULT_MODEL_NAME,
    MPNET_MODEL_NAME,
    TOOLS_MODEL_NAME,
    is_model_name,
    parse_model_name,
)

from tests.conftest import MINILM_REFERENCE, needs_model

INT8 = f"{DEFAULT_MODEL_NAME}:int8"


def test_names_parse() -> None:
    assert parse_model_name(DEFAULT_MODEL_NAME) == (DEFAULT_MODEL_NAME, None)
    assert parse_model_name(INT8) == (DEFAULT_MODEL_NAME, "int8")
    assert parse_model_name(f"{MPNET_MODEL_NAME}:int8") == (MPNET_MODEL_NAME, "int8")
    assert parse_model_name(TOOLS_MODEL_NAME) == (TOOLS_MODEL_NAME, None)
    assert parse_model_name(f"{TOOLS_MODEL_NAME}:int8") == (TOOLS_MODEL_NAME, "int8")
    assert is_model_name(INT8) and is_model_name(f"{DEFAULT_MODEL_NAME}:fp4")
    assert not is_model_name("C:\\models\\minilm") and not is_model_name("./all-MiniLM-L6-v2")
    assert not is_model_name(None)


@pytest.mark.parametrize(
    ("name", "match"),
    [
        (f"{DEFAULT_MODEL_NAME}:int4", "unknown variant 'int4'.*known variants: int8"),
        (f"{DEFAULT_MODEL_NAME}:", "unknown variant ''"),
        (
            f"{TOOLS_MODEL_NAME}:int4",
            "unknown variant 'int4' of embedding model 'all-MiniLM-L6-v2:tools'",
        ),
        ("all-MiniLM-L12-v2:int8", "unknown embedding model name"),
    ],
)
def test_unknown_names_are_typed_errors(name: str, match: str) -> None:
    with pytest.raises(rampart.InvalidArgumentError, match=match):
        parse_model_name(name)
    if is_model_name(name):  # the registry and the embedder say the same
        with pytest.raises(rampart.InvalidArgumentError, match=match):
            rampart.BlockRegistry(embedding_model=name)
        from rampart.embeddings import named_embedder

        with pytest.raises(rampart.InvalidArgumentError, match=match):
            named_embedder(name)


@pytest.fixture(scope="module")
def int8_embedder() -> Any:
    from rampart.embeddings import OnnxEmbedder

    return OnnxEmbedder(INT8, vector_cache=False)


@needs_model
def test_int8_is_prepared_into_the_cache(int8_embedder: Any) -> None:
    from rampart.embeddings import model_info, prepare_model

    p = prepare_model(INT8)
    assert p.variant == "int8" and not p.contrib_ops and not p.built  # the embedder built it
    assert p.onnx_path == int8_embedder.onnx_path and "int8" in p.onnx_path.name
    assert model_info(INT8)["prepared"] is True
    assert int8_embedder.model_id.startswith(INT8 + ":")  # its own vector-cache key
    import onnx

    ops = {n.op_type for n in onnx.load(str(p.onnx_path), load_external_data=False).graph.node}
    assert ops & {"DynamicQuantizeMatMul", "MatMulInteger", "DynamicQuantizeLinear"}
    assert "Attention" not in ops  # quantized from the standard-op graph


@needs_model
def test_int8_vectors_stay_close_to_float32(int8_embedder: Any) -> None:
    """Against sentence-transformers' float32 vectors of the 25 reference texts.
    Measured (benches/int8_bench.py): median 0.990, worst 0.97 (three-token texts);
    the 0.99-everywhere target of issue 25 is not met, so int8 is not the default."""
    import numpy as np

    items = json.loads(MINILM_REFERENCE.read_text(encoding="utf-8"))["items"]
    got = int8_embedder.encode_batch([it["text"] for it in items])
    ref = np.array([it["embedding"] for it in items], dtype=np.float32)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    cos = (got * ref).sum(axis=1)
    assert float(np.median(cos)) >= 0.985
    assert float(cos.min()) >= 0.95
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


@needs_model
def test_tool_encoder_int8_stays_close_to_its_float32() -> None:
    """``all-MiniLM-L6-v2:tools:int8``: the trained delta applied, then quantized; its
    own model_id (never MiniLM's int8 vectors). Against the tool encoder's float32
    graph on the 25 reference texts, measured (benches/int8_bench_tools.json): median
    0.990, worst 0.973."""
    import numpy as np
    from rampart.embeddings import OnnxEmbedder

    texts = [it["text"] for it in json.loads(MINILM_REFERENCE.read_text(encoding="utf-8"))["items"]]
    q = OnnxEmbedder(f"{TOOLS_MODEL_NAME}:int8", threads=1, vector_cache=False)
    f = OnnxEmbedder(TOOLS_MODEL_NAME, threads=1, vector_cache=False)
    plain = OnnxEmbedder(INT8, threads=1, vector_cache=False)
    assert q.model_id.startswith(f"{TOOLS_MODEL_NAME}:int8:")
    assert q.onnx_path != plain.onnx_path and "tools" in q.onnx_path.name
    got, ref = q.encode_batch(texts), f.encode_batch(texts)
    cos = (got * ref).sum(axis=1)
    assert float(np.median(cos)) >= 0.985
    assert float(cos.min()) >= 0.95
    # the delta is in the int8 graph: closer to its own float32 than MiniLM's int8 is
    other = (plain.encode_batch(texts) * ref).sum(axis=1)
    assert float(np.median(cos)) > float(np.median(other))
