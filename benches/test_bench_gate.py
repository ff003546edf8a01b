"""pytest-benchmark: the relevance gate.

Gated compile with a precomputed query (top-10, budget 4096) against numpy's
``M @ q`` + ``argpartition`` on the same matrix, in the same group, at N = 200,
10 000, 100 000 and 1 000 000; float32 and the int8 mode. The vectors are random
unit vectors (384-d, like MiniLM's): the cost is memory traffic, not meaning, and
a million real embeddings would take hours to compute here.

With the real model (skipped when it is not prepared): ``find_relevant`` over the
31 seed blocks including the query embedding, and the cold start of ``seeds/``
from files with embeddings; and at N = 100 000 the gate as a server runs it, right
after an onnxruntime call and a numpy call (whose worker threads may still be
spinning), and the whole path (embed a new task, then gate), against numpy.

    python -m pytest benches/test_bench_gate.py --benchmark-only -p no:cacheprovider -q
"""

from __future__ import annotations

from typing import Any

import _corpus
import numpy as np
import pytest
import rampart
from test_bench_compile import _run

DIM = 384
SIZES = (200, 10_000, 100_000, 1_000_000)
TOP_K = 10


class GateData:
    def __init__(self, n: int) -> None:
        rng = np.random.default_rng(n)
        m = rng.standard_normal((n, DIM), dtype=np.float32)
        m /= np.linalg.norm(m, axis=1, keepdims=True)
        self.m = m
        self.q = m[n // 3] + rng.standard_normal(DIM, dtype=np.float32) * 0.05
        self.q /= np.linalg.norm(self.q)
        self.reg = rampart.BlockRegistry(default_max_tokens=4096)
        rows = [(f"b{i}", f"block {i}", 0.5, [], None, 60) for i in range(n)]
        self.reg._core.insert_many(rows, "seed", False)
        pending = self.reg._core.unembedded()
        self.reg._core.attach_embeddings(pending, m.tobytes(), DIM, [False] * n)
        want = set(np.argsort(-(m @ self.q), kind="stable")[:TOP_K].tolist())
        got = {int(n[1:]) for n in self.reg.compile(task_embedding=self.q, top_k=TOP_K).included}
        assert got == want  # same answer as numpy (untimed)


_DATA: dict[int, GateData] = {}


def _data(n: int) -> GateData:
    if n not in _DATA:
        _DATA.clear()  # one size at a time: 1M rows hold ~3 GB
        _DATA[n] = GateData(n)
    return _DATA[n]


# numpy runs last in each group: OpenBLAS leaves its worker threads spinning for a
# while after a call, and on two cores they would steal the second core from
# whatever runs next (rampart's scan uses both cores from 8 192 rows up).
IMPLS = ["rampart-gated-compile", "rampart-gated-compile-int8", "numpy-matvec+argpartition"]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("n", SIZES, ids=[f"N{n}" for n in SIZES])
def test_gated_compile(benchmark: Any, n: int, impl: str) -> None:
    d = _data(n)
    benchmark.group = f"gate-N{n}"
    d.reg.quantise_embeddings(impl.endswith("int8"))
    if impl.startswith("numpy"):
        m, q = d.m, d.q

        def run() -> Any:
            return np.argpartition(-(m @ q), TOP_K)[:TOP_K]
    else:
        reg, q = d.reg, d.q

        def run() -> Any:
            return reg.compile(task_embedding=q, top_k=TOP_K)

    _run(benchmark, run, target_s=1.0 if n < 1_000_000 else 3.0, max_rounds=100)


# ---- with the real model ---------------------------------------------------------------------
#
# Three honest variants each: "new task" embeds a task text never seen before (a
# fresh string every round: neither the registry's task cache nor anything else
# helps); "same task" is an agent compiling for one task before every model call;
# cold start "model" runs MiniLM over all 31 seed blocks, "vector cache" finds them
# in the on-disk cache a previous process filled.


@pytest.fixture(scope="module")
def embedders() -> Any:
    pytest.importorskip("onnxruntime")
    try:
        from rampart.embeddings import OnnxEmbedder

        return rampart.default_embedder(), OnnxEmbedder(vector_cache=False)
    except rampart.RampartError as e:  # model package not installed
        pytest.skip(str(e))


TASK = "Write release notes for the changes since the last tag"


@pytest.mark.parametrize("task", ["new-task", "same-task"])
def test_find_relevant_31_seeds_incl_query_embedding(
    benchmark: Any, embedders: Any, task: str
) -> None:
    benchmark.group = "gate-real-model: find_relevant N=31, top 8, incl. the query"
    reg = rampart.BlockRegistry.from_files([_corpus.SEEDS], embedders[0])
    assert len(reg) == 31
    assert reg.find_relevant(TASK, top_k=3)[0][0].semantic_name == "release-notes"
    counter = iter(range(10**9))
    if task == "new-task":
        # The same words, a new string each round: the model runs every time.
        def run() -> Any:
            return reg.find_relevant(f"{TASK} (#{next(counter)})", top_k=8)
    else:

        def run() -> Any:
            return reg.find_relevant(TASK, top_k=8)

    benchmark.pedantic(run, rounds=60 if task == "new-task" else 500, warmup_rounds=2)


@pytest.mark.parametrize("vectors", ["model", "vector-cache"])
def test_cold_start_31_seeds_with_embeddings(benchmark: Any, embedders: Any, vectors: str) -> None:
    benchmark.group = "gate-real-model: cold start of seeds/ (31 blocks) with embeddings"
    emb = embedders[1] if vectors == "model" else embedders[0]

    def run() -> Any:
        return rampart.BlockRegistry.from_files([_corpus.SEEDS], emb)

    assert run().embedding_info()["embedded"] == 31  # also fills the vector cache
    benchmark.pedantic(run, rounds=7 if vectors == "model" else 50, warmup_rounds=1)


# ---- the gate as a server runs it ---------------------------------------------------------
#
# In a real process numpy and onnxruntime have always just run: their worker threads
# may still be spinning when the gate starts. Before every round (untimed) the model
# embeds a new task and numpy multiplies a matrix by a vector, as an agent server
# would between two compiles; then the gate runs (timed), rampart's or numpy's.

SERVER_N = 100_000


@pytest.mark.parametrize("impl", ["rampart-gated-compile", "numpy-matvec+argpartition"])
def test_gate_after_ort_and_numpy(benchmark: Any, embedders: Any, impl: str) -> None:
    d = _data(SERVER_N)
    d.reg.quantise_embeddings(False)
    benchmark.group = f"gate-server N{SERVER_N}: right after an ORT call and a numpy call"
    emb = embedders[1]
    counter = iter(range(10**9))
    side = d.m[:20_000]

    def setup() -> None:
        emb.encode(f"{TASK} (#{next(counter)})")
        side @ d.q  # a numpy call big enough for OpenBLAS to use its threads

    m, q, reg = d.m, d.q, d.reg
    if impl.startswith("numpy"):

        def run() -> Any:
            return np.argpartition(-(m @ q), TOP_K)[:TOP_K]
    else:

        def run() -> Any:
            return reg.compile(task_embedding=q, top_k=TOP_K)

    benchmark.pedantic(run, setup=setup, rounds=60, warmup_rounds=2)


@pytest.mark.parametrize("impl", ["rampart-embed+gated-compile", "embed+numpy"])
def test_embed_then_gate(benchmark: Any, embedders: Any, impl: str) -> None:
    """The whole path: embed a new task, then gate 100 000 rows, alternating with a
    numpy call (untimed) as the rest of a server would."""
    d = _data(SERVER_N)
    d.reg.quantise_embeddings(False)
    benchmark.group = f"gate-server N{SERVER_N}: embed a new task, then gate"
    emb = embedders[1]
    counter = iter(range(10**9))
    side = d.m[:20_000]
    m, reg = d.m, d.reg

    def setup() -> None:
        side @ d.q

    if impl.startswith("embed+numpy"):

        def run() -> Any:
            q = emb.encode(f"{TASK} (#{next(counter)})")
            return np.argpartition(-(m @ q), TOP_K)[:TOP_K]
    else:

        def run() -> Any:
            q = emb.encode(f"{TASK} (#{next(counter)})")
            return reg.compile(task_embedding=q, top_k=TOP_K)

    benchmark.pedantic(run, setup=setup, rounds=60, warmup_rounds=2)
