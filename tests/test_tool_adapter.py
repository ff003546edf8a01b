"""The cold tool gate's query adapter (rampart.toolgate.QueryAdapter): the packaged
file and its provenance, where the registry applies it (tool registries with the
default model, text tasks only), and its hit rate on the held-out requests."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import rampart
from rampart.errors import InvalidArgumentError, ModelError

from tests.conftest import DATA, needs_model
from tests.test_toolgate import hit_rates

np = pytest.importorskip("numpy")
toolgate = pytest.importorskip("rampart.toolgate")

EVALUATION_FILES = {
    "tool_gate_eval.json",
    "tool_gate_indirect.json",
    "tool_gate_fsgit.json",
    "tool_gate_examples.json",
    "tool_gate_stream.json",
}


def _unit(v: Any) -> Any:
    return v / np.linalg.norm(v)


def test_packaged_adapter_says_what_it_was_trained_on() -> None:
    adapter = toolgate.packaged_adapter()
    assert adapter is not None and adapter.dim == 384
    assert adapter.a.dtype == np.float32 and np.isfinite(adapter.a).all()
    meta = adapter.meta
    assert meta["model_id"].startswith("all-MiniLM-L6-v2:") and meta["made_by"]
    # Never trained on an evaluation set (docs/tool-gate.md) ...
    sources = meta["data_sha256"]
    assert sources and not set(sources) & EVALUATION_FILES
    assert not any(f in s for s in meta["trained_on"] for f in EVALUATION_FILES)
    # ... and on the files as they are: a changed training file means a stale
    # adapter (retrain with benches/tool_gate_adapter.py --write).
    for name, digest in sources.items():
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, name
    # The training requests target none of the 40 evaluation tools.
    evaluated = {
        t.name
        for f in json.loads((DATA / "tool_gate_eval.json").read_text())["tool_files"]
        for t in rampart.parse_tools(DATA / f)
    }
    assert len(evaluated) == 40
    scale = json.loads((DATA / "tool_gate_scale.json").read_text())["requests"]
    assert not any(set(r["acceptable"]) & evaluated for r in scale if r["split"] == "tune")
    for name in sources:
        doc = json.loads((DATA / name).read_text())
        if "examples" in doc:
            assert not set(doc["examples"]) & evaluated, name


def test_adapter_maps_to_a_unit_vector_and_refuses_bad_input(tmp_path: Path) -> None:
    a = np.zeros((4, 4), dtype=np.float32)
    a[0, 1] = 1.0  # W = I + A: e1 -> e1 + e0
    path = tmp_path / "adapter.npz"
    np.savez(path, a=a, meta=np.array(json.dumps({"model_id": "m:1"})))
    adapter = toolgate.QueryAdapter(path)
    got = np.frombuffer(adapter.map(np.array([0, 1, 0, 0], np.float32).tobytes()), np.float32)
    np.testing.assert_allclose(got, _unit(np.array([1.0, 1.0, 0, 0])), rtol=1e-6)
    with pytest.raises(InvalidArgumentError, match="maps 4-d vectors, got 3-d"):
        adapter.map(np.zeros(3, np.float32).tobytes())

    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file" * 10)
    with pytest.raises(ModelError, match="not a query adapter file"):
        toolgate.QueryAdapter(bad)
    np.savez(bad, a=np.zeros((4, 3), np.float32), meta=np.array("{}"))
    with pytest.raises(ModelError, match="shape"):
        toolgate.QueryAdapter(bad)
    np.savez(bad, a=np.zeros((4, 4), np.float32), meta=np.array("{}"))
    with pytest.raises(ModelError, match="model_id"):
        toolgate.QueryAdapter(bad)
    obj = np.array([{"model_id": "m"}], dtype=object)
    np.savez(bad, a=np.zeros((4, 4), np.float32), meta=obj)
    with pytest.raises(ModelError, match="not a query adapter file"):
        toolgate.QueryAdapter(bad)  # pickled objects are refused, not loaded
    with pytest.raises(InvalidArgumentError, match="QueryAdapter or None"):
        toolgate.set_query_adapter(rampart.BlockRegistry(), "yes")


@needs_model
def test_tool_registries_gate_with_the_mapped_task_and_others_do_not() -> None:
    adapter = toolgate.packaged_adapter()
    emb = rampart.default_embedder()
    task = "who has been pushing changes this past week"
    q = np.asarray(emb.encode(task), dtype=np.float32)

    def cosines(reg: rampart.BlockRegistry, v: Any) -> dict[str, float]:
        return {
            b.semantic_name: float(_unit(reg.embedding(b.runtime_id)) @ _unit(v))
            for b in reg.list_blocks()
        }

    # Instruction blocks only: the plain cosine gate, no adapter looked up twice.
    reg = rampart.BlockRegistry(embedding_model="default")
    reg.write_block("Write commit messages in the imperative mood.", "commits")
    reg.write_block("Never print secrets or tokens.", "secrets")
    plain = dict((b.semantic_name, s) for b, s in reg.find_relevant(task))
    assert toolgate.query_adapter(reg) is None and reg._gate.adapter is False
    for name, s in cosines(reg, q).items():
        assert plain[name] == pytest.approx(s, abs=1e-5)

    # Tools arrive through load_tools: the same registry now maps the task.
    reg.load_tools(DATA / "mcp_git_tools.json")
    reg.embed_pending()
    assert toolgate.query_adapter(reg) is adapter
    mapped = q + adapter.a @ q
    want = cosines(reg, mapped)
    got = reg.find_relevant(task)
    assert [b.semantic_name for b, _ in got] == sorted(want, key=lambda n: -want[n])
    for b, s in got:
        assert s == pytest.approx(want[b.semantic_name], abs=1e-5)
        assert reg.score_block(b.runtime_id, task) == pytest.approx(s, abs=1e-6)
    res = reg.compile(task_text=task, top_k=3)  # included: in registry order
    assert set(res.included) == {b.semantic_name for b, _ in got[:3]}
    # A caller's own vector is never mapped (it may come from any model).
    raw = dict((b.semantic_name, s) for b, s in reg.find_relevant(None, task_embedding=q))
    for name, s in cosines(reg, q).items():
        assert raw[name] == pytest.approx(s, abs=1e-5)

    # Turned off: the plain gate again, and load_tools does not turn it back on.
    toolgate.set_query_adapter(reg, None)
    off = dict((b.semantic_name, s) for b, s in reg.find_relevant(task))
    assert off == pytest.approx(raw)
    reg.load_tools(DATA / "mcp_time_tools.json")
    assert toolgate.query_adapter(reg) is None
    reg.release()


@needs_model
def test_another_model_is_never_mapped() -> None:
    """The adapter belongs to the default model's vectors: a registry whose model
    has another model_id (here a 384-d toy) keeps the plain cosine gate."""

    class Toy:
        dim = 384
        model_id = "toy:0"

        def encode(self, text: str) -> Any:
            v = np.zeros(384, np.float32)
            for i, ch in enumerate(text.encode()):
                v[(ch * 7 + i) % 384] += 1.0
            return v

    reg = rampart.BlockRegistry(embedding_model=Toy())
    reg.load_tools(DATA / "mcp_time_tools.json")
    reg.find_relevant("time in Tokyo")
    assert toolgate.query_adapter(reg) is None
    reg.release()


@needs_model
def test_async_gate_maps_like_the_sync_gate() -> None:
    reg = rampart.BlockRegistry(embedding_model="default")
    reg.load_tools(DATA / "mcp_git_tools.json")
    task = "what did I change but not stage yet?"

    async def main() -> tuple[Any, Any, float]:
        ranked = await reg.afind_relevant(task)
        res = await reg.acompile(task_text=task, top_k=2)
        return ranked, res, await reg.ascore_block(ranked[0][0].runtime_id, task)

    ranked, res, score = asyncio.run(main())
    want = reg.find_relevant(task)
    assert [(b.runtime_id, s) for b, s in ranked] == [(b.runtime_id, s) for b, s in want]
    assert res.included == reg.compile(task_text=task, top_k=2).included
    assert set(res.included) == {b.semantic_name for b, _ in want[:2]}
    assert score == reg.score_block(want[0][0].runtime_id, task) == want[0][1]
    assert toolgate.query_adapter(reg) is not None
    reg.release()


@needs_model
def test_cold_gate_hit_rate_with_the_adapter_on_the_holdout() -> None:
    """A floor under the measured cold numbers with the adapter (docs/tool-gate.md),
    through the registry's own find_relevant, and above the plain gate's."""
    doc = json.loads((DATA / "tool_gate_eval.json").read_text(encoding="utf-8"))
    holdout = [
        r
        for f in ("tool_gate_eval.json", "tool_gate_indirect.json", "tool_gate_fsgit.json")
        for r in json.loads((DATA / f).read_text(encoding="utf-8"))["requests"]
        if r["split"] == "holdout"
    ]
    reg = rampart.BlockRegistry(embedding_model="default")
    for f in doc["tool_files"]:
        reg.load_tools(DATA / f)
    assert toolgate.query_adapter(reg) is not None
    with_adapter = hit_rates(reg, holdout)
    toolgate.set_query_adapter(reg, None)
    without = hit_rates(reg, holdout)
    reg.release()
    assert with_adapter[1] > without[1], (with_adapter, without)
    # Measured: 52.9 / 77.7 % (206 requests) against 41.7 / 71.4 % without.
    assert with_adapter[1] >= 0.77 and with_adapter[0] >= 0.52, with_adapter


@needs_model
def test_example_gate_scores_own_texts_with_the_mapped_task_and_examples_plainly() -> None:
    from rampart.tools import with_examples

    reg = rampart.BlockRegistry(embedding_model="default")
    rule = reg.write_block("Write commit messages in the imperative mood.", "commits")
    reg.load_tools(with_examples(DATA / "mcp_git_tools.json", {"git_log": ["who pushed lately"]}))
    reg.embed_pending()
    adapter = toolgate.query_adapter(reg)
    assert adapter is not None and toolgate.default_gate(reg) is not None
    task = "who pushed lately"
    q = np.asarray(rampart.default_embedder().encode(task), dtype=np.float32)
    own = _unit(reg.embedding(rule))
    by_id = dict((b.runtime_id, s) for b, s in reg.find_relevant(task))
    # A block with one vector (its own) scores its cosine with the mapped task ...
    assert by_id[rule] == pytest.approx(float(own @ _unit(q + adapter.a @ q)), abs=1e-5)
    # ... and an example is matched with the plain task: here word for word.
    log = reg.get_by_name("git_log")[0].runtime_id
    assert "example 'who pushed lately' (cosine 1.000)" in toolgate.ExampleGate(reg).explain(
        task
    ).get(log, "")
    # Turned off: the registry's own gate forgets the scores it made with the map.
    toolgate.set_query_adapter(reg, None)
    plain = dict((b.runtime_id, s) for b, s in reg.find_relevant(task))
    assert plain[rule] == pytest.approx(float(own @ _unit(q)), abs=1e-5)
    reg.release()
