"""Stage 1, the relevance gate: Rust scoring against numpy, the int8 mode against
float32, gate semantics, lazy embedding of written blocks, snapshots, threads."""

from __future__ import annotations

import hashlib
import itertools
import re
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rampart import BlockRegistry, InvalidArgumentError, RampartError

from tests.conftest import SEEDS


class HashingEmbedder:
    """A small real embedder: hashed bag of words, L2-normalised. Counts the texts
    it embeds so tests can see when the registry (re-)embeds."""

    dim = 64

    def __init__(self) -> None:
        self.calls = 0
        self.texts: list[str] = []
        self.lock = threading.Lock()

    def _one(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float32)
        for w in re.findall(r"[a-z0-9]+", text.lower()):
            h = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=4).digest(), "little")
            v[h % self.dim] += 1.0
        n = np.linalg.norm(v)
        return v / n if n else v

    def encode(self, text: str) -> np.ndarray:
        return self._one(text)

    def encode_batch(self, texts: list[str]) -> np.ndarray:
        with self.lock:
            self.calls += 1
            self.texts.extend(texts)
        return np.stack([self._one(t) for t in texts]) if texts else np.zeros((0, self.dim))


def unit(m: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(m, axis=-1, keepdims=True)
    return np.where(n == 0, m, m / np.where(n == 0, 1, n))


def filled(matrix: np.ndarray, **kwargs: object) -> tuple[BlockRegistry, list[str]]:
    reg = BlockRegistry(default_max_tokens=None, **kwargs)  # type: ignore[arg-type]
    ids = [reg.write_block(f"text {i}", f"b{i}", embedding=row) for i, row in enumerate(matrix)]
    return reg, ids


matrices = st.integers(1, 300).flatmap(
    lambda n: st.sampled_from([3, 8, 33, 384]).flatmap(
        lambda d: st.integers(0, 2**32 - 1).map(
            lambda seed: np.random.default_rng(seed).standard_normal((n, d), dtype=np.float32)
        )
    )
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=matrices, k=st.integers(0, 20), rounding=st.booleans())
def test_rust_scores_and_ranking_equal_numpy(m: np.ndarray, k: int, rounding: bool) -> None:
    if rounding:  # many exact ties: ranking must fall back to registry order
        m = np.round(m)
        m[np.all(m == 0, axis=1), 0] = 1.0
    q = m[len(m) // 2] + 0.1
    reg, ids = filled(m)
    expect = unit(m) @ unit(q)
    hits = reg.find_relevant(None, task_embedding=q)
    got = {b.runtime_id: s for b, s in hits}
    assert len(hits) == len(m)
    np.testing.assert_allclose([got[i] for i in ids], expect, atol=2e-5)
    # Descending; ties (within float noise) in registry order.
    pos = {rid: i for i, rid in enumerate(ids)}
    for (a, sa), (b, sb) in itertools.pairwise(hits):
        assert sa >= sb
        if sa == sb:
            assert pos[a.runtime_id] < pos[b.runtime_id]
    # top_k agrees with numpy's ranking wherever numpy's scores are well separated.
    top = reg.find_relevant(None, top_k=k, task_embedding=q)
    assert len(top) == min(k, len(m))
    if 0 < k < len(m):
        kth = np.sort(expect)[::-1][k - 1]
        for b, _ in top:
            assert expect[pos[b.runtime_id]] >= kth - 1e-4
        for i in np.flatnonzero(expect > kth + 1e-4):
            assert ids[i] in {b.runtime_id for b, _ in top}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    m=matrices,
    k=st.one_of(st.none(), st.integers(0, 30)),
    t=st.one_of(st.none(), st.floats(-0.5, 0.9)),
)
def test_quantised_mode_admits_exactly_what_float32_admits(
    m: np.ndarray, k: int | None, t: float | None
) -> None:
    q = m[0] * 0.5 + m[-1]
    exact, _ = filled(m)
    quant, _ = filled(m, quantise_embeddings=True)
    assert quant.embedding_info()["quantised"]
    if k is None and t is None:
        k = 5
    a = exact.compile_dry_run(task_embedding=q, top_k=k, relevance_threshold=t)
    b = quant.compile_dry_run(task_embedding=q, top_k=k, relevance_threshold=t)
    assert [n for n, _ in a.included] == [n for n, _ in b.included]
    ra = exact.find_relevant(None, top_k=k, threshold=t, task_embedding=q)
    rb = quant.find_relevant(None, top_k=k, threshold=t, task_embedding=q)
    assert [(x.semantic_name, s) for x, s in ra] == [(x.semantic_name, s) for x, s in rb]


@pytest.mark.parametrize("n", [3000, 70_000])
def test_large_registries_score_like_numpy(n: int) -> None:
    # 3 000 blocks release the GIL; 70 000 rows split the scan across threads.
    m = np.random.default_rng(n).standard_normal((n, 16), dtype=np.float32)
    reg = BlockRegistry(default_max_tokens=None, quantise_embeddings=True)
    reg._core.insert_many([(f"b{i}", "x", 0.5, [], None, 1) for i in range(n)], "seed", False)
    pending = reg._core.unembedded()
    assert len(pending) == n
    reg._core.attach_embeddings(pending, m.tobytes(), 16, [False] * n)
    q = m[123]
    expect = unit(m) @ unit(q)
    top = reg.find_relevant(None, top_k=10, task_embedding=q)
    want = np.argsort(-expect, kind="stable")[:10]
    assert [b.semantic_name for b, _ in top] == [f"b{i}" for i in want]
    np.testing.assert_allclose([s for _, s in top], expect[want], atol=2e-5)
    reg.quantise_embeddings(False)
    assert [b.semantic_name for b, _ in reg.find_relevant(None, top_k=10, task_embedding=q)] == [
        f"b{i}" for i in want
    ]


def test_gate_semantics_and_report() -> None:
    model = HashingEmbedder()
    reg = BlockRegistry(model, default_max_tokens=None)
    for name, text in [
        ("git", "commit the change with git and a clear message"),
        ("tests", "run the tests before you commit"),
        ("style", "prefer short sentences in prose"),
        ("deploy", "deploy with the release script"),
    ]:
        reg.write_block(text, name)
    task = "git commit message"
    scores = {b.semantic_name: s for b, s in reg.find_relevant(task)}
    assert scores["git"] > scores["tests"] > scores["style"]
    r = reg.compile(task_text=task, top_k=2)
    assert r.included == ["git", "tests"]  # registry order among the admitted
    rows = {x.name: x for x in r.report}
    assert rows["style"].reason == "gate" and rows["style"].score == pytest.approx(
        scores["style"], abs=1e-6
    )
    assert rows["git"].included and rows["git"].score == pytest.approx(scores["git"], abs=1e-6)
    r = reg.compile(task_text=task, relevance_threshold=scores["tests"])
    assert r.included == ["git", "tests"]
    # Both: the threshold, then the k best.
    r = reg.compile(task_text=task, relevance_threshold=scores["tests"], top_k=1)
    assert r.included == ["git"]
    assert reg.compile(task_text=task, top_k=0).included == []
    # Gate and budget: the report tells them apart.
    cost_git = reg.get_by_name("git")[0].cost
    r = reg.compile(max_tokens=cost_git, task_text=task, top_k=2)
    assert r.included == ["git"]
    reasons = {x.name: x.reason for x in r.report}
    assert reasons == {"git": None, "tests": "budget", "style": "gate", "deploy": "gate"}
    # A task without a cut does not gate (docs/specification.md §3: gate only with threshold/top_k).
    assert reg.compile(task_text=task).included == ["git", "tests", "style", "deploy"]
    assert reg.score_block(reg.get_by_name("git")[0].runtime_id, task) == pytest.approx(
        scores["git"], abs=1e-6
    )


def test_written_and_changed_blocks_are_embedded_before_the_next_gate() -> None:
    model = HashingEmbedder()
    reg = BlockRegistry.from_files([SEEDS], model)
    n = len(reg)
    assert model.calls == 1 and len(model.texts) == n  # one batch at cold start
    assert all(b.embedded for b in reg.list_blocks())
    rid = reg.write_agent_block("zebra giraffe savanna", "run-1", "animals")
    assert not reg.get_by_id(rid).embedded
    hits = reg.find_relevant("zebra giraffe", top_k=1)
    assert hits[0][0].runtime_id == rid
    assert model.calls == 2 and model.texts[-1] == "zebra giraffe savanna"
    assert reg.get_by_id(rid).embedded
    # Unchanged registry: nothing is embedded again.
    reg.compile(task_text="zebra", top_k=3)
    assert model.calls == 2
    # New content, new vector.
    before = reg.embedding(rid)
    reg.update_block_content(rid, "volcano lava eruption")
    assert reg.embedding(rid) is None
    assert reg.compile(task_text="lava volcano", top_k=1).included == ["animals"]
    assert model.calls == 3
    after = reg.embedding(rid)
    assert after is not None and before is not None and not np.allclose(before, after)
    # A priority change keeps the vector (same text).
    reg.update_priority(rid, 0.9)
    reg.compile(task_text="lava", top_k=1)
    assert model.calls == 3
    np.testing.assert_array_equal(reg.embedding(rid), after)


def test_snapshot_restore_keeps_vectors_and_eviction_frees_rows() -> None:
    model = HashingEmbedder()
    reg = BlockRegistry(model, default_max_tokens=None)
    for i in range(40):
        reg.write_block(f"note {i} about topic{i % 7}", f"n{i}")
    reg.embed_pending()
    calls = model.calls
    snap = reg.snapshot()
    ranked = [(b.semantic_name, s) for b, s in reg.find_relevant("topic3", top_k=8)]
    # Evict half and write new blocks: rows are reused, the snapshot unaffected.
    for b in reg.list_blocks()[::2]:
        reg.evict(b.runtime_id)
    for i in range(30):
        reg.write_block(f"fresh {i} topic3 topic3", f"f{i}")
    assert reg.embedding_info()["embedded"] < 70
    hits = reg.find_relevant("topic3", top_k=5)
    assert all(b.semantic_name.startswith("f") for b, _ in hits)
    calls_after_writes = model.calls
    reg.restore(snap)
    assert model.calls == calls_after_writes
    again = [(b.semantic_name, s) for b, s in reg.find_relevant("topic3", top_k=8)]
    assert again == ranked
    assert model.calls == calls_after_writes  # restored blocks kept their vectors
    assert calls < calls_after_writes


def test_explicit_vectors_without_a_model() -> None:
    reg = BlockRegistry(default_max_tokens=None)
    a = reg.write_block("alpha", "a", embedding=[1.0, 0.0, 0.0])
    reg.write_block("beta", "b", embedding=np.array([0.0, 2.0, 0.0]))
    r = reg.compile(task_embedding=[0.1, 1.0, 0.0], top_k=1)
    assert r.included == ["b"]
    np.testing.assert_allclose(reg.embedding(a), [1.0, 0.0, 0.0])
    # Stored unit length: the gate is a cosine.
    assert reg.score_block(a, task_embedding=[3.0, 0.0, 0.0]) == pytest.approx(1.0)
    with pytest.raises(InvalidArgumentError, match="3-dimensional"):
        reg.compile(task_embedding=[1.0, 0.0], top_k=1)
    with pytest.raises(InvalidArgumentError, match="dimensions"):
        reg.write_block("gamma", "c", embedding=[1.0, 2.0])
    assert len(reg) == 2  # the failed write left nothing behind
    with pytest.raises(InvalidArgumentError, match=r"NaN|finite"):
        reg.write_block("gamma", "c", embedding=[1.0, float("nan"), 0.0])
    with pytest.raises(InvalidArgumentError):
        reg.write_block("gamma", "c", embedding=np.zeros((2, 3)))
    # A block without a vector and no model: a clear error, not a silent miss.
    reg.write_block("delta", "d")
    with pytest.raises(RampartError, match="no embedding model"):
        reg.compile(task_embedding=[1.0, 0.0, 0.0], top_k=1)
    with pytest.raises(RampartError, match="no embedding model"):
        reg.find_relevant("alpha")


def test_custom_gate_replaces_cosine() -> None:
    reg = BlockRegistry(default_max_tokens=None)
    for name in ["short", "a much longer block of text", "mid length"]:
        reg.write_block(name, name)
    seen: list[int] = []

    def by_length(task: str, blocks: object) -> list[float]:
        out = [float(len(b.content)) for b in blocks]  # type: ignore[attr-defined]
        seen.append(len(out))
        return out

    r = reg.compile(task_text="anything", top_k=2, gate=by_length)
    assert r.included == ["a much longer block of text", "mid length"] and seen == [3]
    with pytest.raises(InvalidArgumentError, match="scores for 3 blocks"):
        reg.compile(task_text="x", top_k=1, gate=lambda t, bs: [1.0])
    with pytest.raises(InvalidArgumentError, match="callable"):
        reg.compile(task_text="x", top_k=1, gate="cosine")  # type: ignore[arg-type]


def test_gating_with_concurrent_writers_never_misses_a_block() -> None:
    model = HashingEmbedder()
    reg = BlockRegistry(model, default_max_tokens=None)
    reg.write_block("seed text", "seed")
    stop = threading.Event()
    errors: list[BaseException] = []
    written: list[str] = []

    def writer(w: int) -> None:
        try:
            for i in range(150):
                written.append(reg.write_agent_block(f"w{w} item {i} marker{w}x{i}", f"r{w}"))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def gater() -> None:
        try:
            while not stop.is_set():
                r = reg.compile(task_text="marker", top_k=5)
                assert len(r.included) <= 5
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    gaters = [threading.Thread(target=gater) for _ in range(2)]
    for t in gaters + threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    for t in gaters:
        t.join()
    assert not errors
    hits = reg.find_relevant("w2 item 149 marker2x149", top_k=1)
    assert hits[0][0].content == "w2 item 149 marker2x149"
    assert hits[0][1] == pytest.approx(1.0, abs=1e-6)
    assert all(b.embedded for b in reg.list_blocks())
    # Each text embedded at most once per content, except a few racing batches.
    assert len(model.texts) <= len(written) + 1 + 3 * 2
