"""The trained tool encoder (``embedding_model="all-MiniLM-L6-v2:tools"``): its packaged
weight delta and provenance, the hash check at load, the delta applied by rampart's
own ONNX builder, and a hit-rate check on a server it never saw (docs/tool-gate.md,
"A trained encoder")."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import rampart
import rampart.toolgate  # not a lazy name of rampart: this test must import it
from rampart.errors import ModelError

from tests.conftest import DATA, ROOT, needs_model
from tests.test_toolgate import hit_rates

np = pytest.importorskip("numpy")
prepare = pytest.importorskip("rampart.embeddings.prepare")
bert_onnx = pytest.importorskip("rampart.embeddings.bert_onnx")

TOOLS = prepare.TOOLS_MODEL_NAME
DELTA = Path(prepare.__file__).resolve().parent.parent / "data" / prepare.TOOLS_DELTA_FILE
TRAIN_DIR = ROOT / "experiments" / "toolgate_train"


def _module(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, TRAIN_DIR / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(TRAIN_DIR))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(TRAIN_DIR))
    return mod


def _meta() -> dict[str, Any]:
    _, meta = bert_onnx.read_delta(DELTA)
    return meta


def test_packaged_delta_is_the_released_one() -> None:
    assert DELTA.stat().st_size < 8 << 20  # small enough for the wheel
    assert hashlib.sha256(DELTA.read_bytes()).hexdigest() == prepare.TOOLS_DELTA_SHA256
    assert prepare._tools_delta() == DELTA


def test_delta_says_what_it_was_trained_on() -> None:
    """The artefact names the exact data it came from, and that data holds nothing
    of a held-out server: rebuilding the prepared data from tests/data must give
    the bytes whose sha256 the artefact records (change a training file and the
    encoder must be retrained: make toolgate-train)."""
    meta = _meta()
    split = _module("split")
    assert set(meta["split"]["HOLDOUT"]) == set(split.HOLDOUT)
    assert {"filesystem", "git", "memory", "time", "fetch", "sqlite"} <= set(split.HOLDOUT)
    assert not set(split.TRAIN) & set(split.HOLDOUT)
    for name, digest in meta["data_sha256"].items():
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, name
    prep = _module("prepare_data")
    doc = prep.build()
    assert hashlib.sha256(prep.dump(doc)).hexdigest() == meta["prepared_data_sha256"]
    held = {t["name"] for t in doc["tools"] if t["role"] == "holdout"}
    assert len(held) >= 40
    for q in doc["queries"]:
        assert split.role(q["server"]) != "holdout"
        assert not set(q["acceptable"]) & held
    # The 40-tool evaluation requests are never among the training texts.
    said = {q["text"].lower() for q in doc["queries"]}
    for f in ("tool_gate_eval.json", "tool_gate_indirect.json", "tool_gate_fsgit.json"):
        for r in json.loads((DATA / f).read_text())["requests"]:
            assert r["request"].lower() not in said


@needs_model
def test_delta_matches_the_installed_base_weights() -> None:
    weights = prepare._package_model_dir() / "model.safetensors"
    assert _meta()["base_weights_sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()


def test_a_changed_delta_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prepare, "TOOLS_DELTA_SHA256", "0" * 64)
    with pytest.raises(ModelError, match=r"tools_minilm_delta\.npz: sha256 .* expected 0{64}"):
        prepare._tools_delta()
    with pytest.raises(ModelError, match="weight delta is damaged"):
        rampart.OnnxEmbedder(TOOLS)


def test_read_delta_rejects_what_is_not_a_delta(tmp_path: Path) -> None:
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip at all")
    with pytest.raises(ValueError, match="not a weight delta file"):
        bert_onnx.read_delta(bad)
    meta = np.frombuffer(b"{}", dtype=np.uint8)
    np.savez(tmp_path / "scale.npz", **{"w:int8": np.ones((2, 3), np.int8), "__meta__": meta})
    with pytest.raises(ValueError, match="per-row w:scale"):
        bert_onnx.read_delta(tmp_path / "scale.npz")
    np.savez(tmp_path / "nan.npz", **{"b:f16": np.array([np.nan], np.float16), "__meta__": meta})
    with pytest.raises(ValueError, match="non-finite"):
        bert_onnx.read_delta(tmp_path / "nan.npz")
    np.savez(tmp_path / "nometa.npz", **{"b:f16": np.zeros(2, np.float16)})
    with pytest.raises(ValueError, match="no __meta__"):
        bert_onnx.read_delta(tmp_path / "nometa.npz")


def test_apply_delta_checks_names_and_shapes() -> None:
    base = {"a": np.zeros((2, 2), np.float32)}
    out = bert_onnx.apply_delta(base, {"a": np.ones((2, 2), np.float32)})
    assert out["a"].sum() == 4 and base["a"].sum() == 0  # the base is not written
    with pytest.raises(ValueError, match="base weights lack"):
        bert_onnx.apply_delta(base, {"b": np.ones(2, np.float32)})
    with pytest.raises(ValueError, match="has shape"):
        bert_onnx.apply_delta(base, {"a": np.ones(3, np.float32)})


@needs_model
def test_delta_for_other_base_weights_is_refused(tmp_path: Path) -> None:
    """A delta trained over other weights must not be applied to these."""
    arrays = dict(np.load(DELTA, allow_pickle=False))
    meta = json.loads(bytes(arrays["__meta__"]).decode())
    meta["base_weights_sha256"] = "f" * 64
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    other = tmp_path / "other.npz"
    np.savez(other, **arrays)
    with pytest.raises(ModelError, match="trained over weights with sha256"):
        prepare._build(prepare._package_model_dir(), True, delta=other)


@needs_model
def test_the_tool_encoder_embeds_through_the_normal_path(tmp_path: Path) -> None:
    emb = rampart.embeddings.named_embedder(TOOLS)
    assert emb.model_id.startswith(TOOLS + ":") and emb.dim == 384
    base = rampart.default_embedder()
    text = "who's been pushing changes this past week"
    v, w = emb.encode(text), base.encode(text)
    assert abs(float(np.linalg.norm(v)) - 1) < 1e-5
    # its own weights: close to MiniLM's space, not equal to it
    assert 0.5 < float(v @ w) < 0.999
    reg = rampart.BlockRegistry(embedding_model=TOOLS)
    reg.load_tools(DATA / "mcp_git_tools.json")
    found = [b.semantic_name for b, _ in reg.find_relevant("what did I stage?", top_k=3)]
    assert found and all(n.startswith("git_") for n in found)
    # MiniLM's query adapter belongs to MiniLM's model_id: never applied here
    assert rampart.toolgate.query_adapter(reg) is None
    reg.release()
    # the graph is cached apart from MiniLM's, its manifest naming the tool model
    info = rampart.embeddings.model_info(TOOLS)
    assert info["prepared"] and "tools" in Path(info["onnx_path"]).name


@needs_model
def test_held_out_servers_are_found_better_than_by_untrained_minilm() -> None:
    """The 40 tools' six servers were never trained on (split.py). On the natural
    holdout half, cold (no examples), the trained encoder must beat untrained
    MiniLM's plain cosine by a clear margin: measured 87.3 against 77.5 % top-3
    (docs/tool-gate.md, "A trained encoder"); an untrained or damaged delta fails."""
    doc = json.loads((DATA / "tool_gate_eval.json").read_text())
    held = [r for r in doc["requests"] if r["split"] == "holdout"]
    rates = {}
    for model in (TOOLS, "default"):
        reg = rampart.BlockRegistry(embedding_model=model)
        for f in doc["tool_files"]:
            reg.load_tools(DATA / f)
        rampart.toolgate.set_query_adapter(reg, None)  # MiniLM untouched; a no-op for TOOLS
        rates[model] = hit_rates(reg, held)
        reg.release()
    trained, plain = rates[TOOLS][1], rates["default"][1]
    assert trained >= 0.85 and trained >= plain + 0.05, rates
